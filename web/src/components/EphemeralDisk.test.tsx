import { render } from "@testing-library/preact";
import { diskText, EphemeralDisk } from "./EphemeralDisk";

const GIB = 1024 ** 3;

describe("EphemeralDisk", () => {
  it("in a table row, says nothing until the disk is near its limit", () => {
    const roomy = { used_bytes: 5 * GIB, limit_bytes: 20 * GIB, used_pct: 25, near_limit: false };
    expect(render(<EphemeralDisk disk={roomy} compact />).container.textContent).toBe("");
    const full = { used_bytes: 19 * GIB, limit_bytes: 20 * GIB, used_pct: 95, near_limit: true };
    expect(render(<EphemeralDisk disk={full} compact />).container.textContent).toContain("Scratch disk nearly full");
    expect(render(<EphemeralDisk disk={null} />).container.textContent).toBe("");
  });

  it("words a disk without a reported limit as its use only", () => {
    expect(diskText({ used_bytes: 3 * GIB, limit_bytes: 0, used_pct: null, near_limit: false })).toBe("3 GiB");
  });
});
