import { fireEvent, render, screen, within } from "@testing-library/preact";
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

describe("DrainDialog", () => {
  it("drains with the chosen mode and reason, then says what happened to each session", async () => {
    const { DrainDialog } = await import("./NodesPanel");
    const calls = stubFetch({
      [`POST /api/v1/clusters/${ID}/nodes/gpu-node-0/drain`]: () => ({
        body: {
          cluster_id: ID,
          node_id: "gpu-node-0",
          status: "cordoned",
          drain_id: "drain_1",
          mode: "force_terminate",
          affected_sessions: ["ses_a", "ses_b"],
          rescheduled: [],
          parked: [],
          terminated: ["ses_a"],
          failed: ["ses_b"],
          sessions: [
            { session_id: "ses_a", owner: "ann", outcome: "terminated", message: "ended" },
            { session_id: "ses_b", owner: "bob", outcome: "failed", message: "the cluster did not delete the session" },
          ],
        },
      }),
    });
    let drained = 0;
    render(<DrainDialog clusterId={ID} node="gpu-node-0" onClose={() => {}} onDrained={() => drained++} />);
    fireEvent.click(screen.getByRole("radio", { name: /End them/ }));
    fireEvent.input(screen.getByRole("textbox", { name: /Reason/ }), { target: { value: "fan failure" } });
    fireEvent.click(screen.getByRole("button", { name: "Drain and end sessions" }));
    expect((await screen.findByRole("status")).textContent).toContain("gpu-node-0 is cordoned: 1 session ended; 1 session not changed");
    expect(screen.getByText(/ses_b/).closest("li")?.textContent).toContain("failed — the cluster did not delete the session");
    expect(calls.find((c) => c.method === "POST")?.body).toEqual({ mode: "force_terminate", reason: "fan failure" });
    expect(drained).toBe(1);
  });
});
