import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { SnapshotsPanel } from "./SnapshotsPanel";
import { stubFetch } from "../test/fetch";

const info = (name: string, at: string) => ({
  name,
  path: `/var/lib/gshare/snapshots/${name}`,
  size_bytes: 48 * 1024,
  created_at: at,
  reason: "scheduled",
  schema_version: 3,
  binary_version: "0.1.0",
  sha256: "ab".repeat(32),
  secrets_included: false,
});

describe("SnapshotsPanel", () => {
  it("shows the last result, the schedule and the files; Snapshot now posts and refreshes", async () => {
    let files = [info("gshare-20261201T000000Z-scheduled.snap", "2026-12-01T00:00:00.000Z")];
    let status = {
      interval_s: 86400,
      keep: 7,
      dir: "/var/lib/gshare/snapshots",
      next_at: "2026-12-02T00:00:00.000Z",
      status: {
        last_success_at: "2026-12-01T00:00:00.000Z",
        last_file: files[0].path,
        last_size_bytes: 49152,
        last_error: null,
        failures: 0,
      },
    };
    const calls = stubFetch({
      "GET /api/v1/snapshots/status": () => ({ body: status }),
      "GET /api/v1/snapshots": () => ({ body: files }),
      "POST /api/v1/snapshots": () => {
        const made = { ...info("gshare-20261201T101500Z-console.snap", "2026-12-01T10:15:00.000Z"), reason: "console", size_bytes: 50000 };
        files = [...files, made];
        status = { ...status, status: { ...status.status, last_success_at: made.created_at, last_size_bytes: 50000 } };
        return { status: 201, body: made };
      },
    });
    const { container } = render(<SnapshotsPanel />);
    await screen.findByText("gshare-20261201T000000Z-scheduled.snap");
    expect(container.textContent).toContain("every 1d, keeping 7");
    expect(container.textContent).toContain("48.0 KiB");
    expect(container.textContent).toContain("/var/lib/gshare/snapshots");
    fireEvent.click(screen.getByRole("button", { name: "Snapshot now" }));
    await screen.findByText(/Saved gshare-20261201T101500Z-console\.snap \(48\.8 KiB\)/);
    const post = calls.find((c) => c.method === "POST");
    expect(post?.body).toEqual({ reason: "console" });
    expect(post?.headers).toBeTruthy();
    // The list is reloaded, newest first.
    await waitFor(() => expect(container.querySelectorAll(".snapshot-list li").length).toBe(2));
    expect(container.querySelector(".snapshot-list li")!.textContent).toContain("console.snap");
  });

  it("shows a failed snapshot as such, and a refused one next to the button", async () => {
    stubFetch({
      "GET /api/v1/snapshots/status": () => ({
        body: {
          interval_s: 0,
          keep: 7,
          dir: "/full",
          next_at: null,
          status: { last_success_at: null, last_error: "no space left on device", failures: 2 },
        },
      }),
      "GET /api/v1/snapshots": () => ({ body: [] }),
      "POST /api/v1/snapshots": () => ({
        status: 507,
        body: { error: { code: "snapshot_failed", message: "cannot write /full: no space left on device", details: {} } },
      }),
    });
    const { container } = render(<SnapshotsPanel />);
    await screen.findByText("none yet");
    expect(container.textContent).toContain("off (snapshot_interval = 0)");
    expect(container.textContent).toContain("no space left on device");
    expect(container.textContent).toContain("No snapshot in the directory yet.");
    fireEvent.click(screen.getByRole("button", { name: "Snapshot now" }));
    await screen.findByText(/The snapshot failed; older snapshots are kept/);
    expect(container.textContent).toContain("cannot write /full");
  });
});
