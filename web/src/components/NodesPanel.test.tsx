import { render, screen, within } from "@testing-library/preact";
import { NodesPanel } from "./NodesPanel";
import { stubFetch } from "../test/fetch";

const ID = "clu_01JAAAAAAAAAAAAAAAAAAAAAAA";
const ago = (s: number) => new Date(Date.now() - s * 1000).toISOString();
const card = (uuid: string, over: Record<string, unknown> = {}) => ({
  uuid,
  model: "NVIDIA A100",
  mode: "fractional",
  memory_mb: 81920,
  used_mem_mb: 0,
  used_cores: 0,
  status: "ready",
  last_event: null,
  ...over,
});

describe("NodesPanel", () => {
  it("names the card in error and says why; a NotReady node says since when instead of a bare —", async () => {
    stubFetch({
      [`GET /api/v1/clusters/${ID}/nodes`]: () => ({
        body: [
          {
            name: "gpu-node-0",
            ready: true,
            schedulable: true,
            cordoned: false,
            decommissioning: false,
            offline: false,
            role: "gpu",
            last_seen: ago(2),
            not_ready_since: null,
            gpus: [
              card("GPU-aaaa"),
              card("GPU-bbbb", {
                status: "notready",
                last_event: { kind: "xid", severity: "critical", message: "Xid 79: GPU has fallen off the bus", at: ago(30) },
              }),
              card("GPU-cccc", { status: "notready" }),
            ],
          },
          {
            name: "gpu-node-1",
            ready: false,
            schedulable: true,
            cordoned: false,
            decommissioning: false,
            offline: true,
            role: "gpu",
            last_seen: null,
            not_ready_since: ago(12),
            gpus: [card("GPU-dddd")],
          },
        ],
      }),
    });
    const { container } = render(<NodesPanel clusterId={ID} />);
    await screen.findByText("gpu-node-0");
    const row0 = container.querySelector('tr[data-node="gpu-node-0"]') as HTMLElement;
    const errors = within(row0).getAllByRole("listitem");
    expect(errors.map((li) => li.textContent)).toEqual([
      expect.stringMatching(/^Card 2 of 3 in error GPU-bbbb: reported not ready — critical xid: Xid 79: GPU has fallen off the bus \(/),
      "Card 3 of 3 in error GPU-cccc: reported not ready (no health event names it)",
    ]);
    const row1 = container.querySelector('tr[data-node="gpu-node-1"]') as HTMLElement;
    // A node in no pool is shared; the column after Scheduling says so.
    expect(row1.querySelectorAll("td")[3].textContent).toBe("shared");
    const seen = row1.querySelectorAll("td")[5].textContent!;
    expect(seen).toMatch(/^NotReady for 1[2-4]s \(reported /);
    expect(seen).not.toBe("—");
    expect(within(row1).queryAllByRole("listitem")).toEqual([]);
  });
});
