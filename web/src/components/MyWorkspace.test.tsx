import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { MyWorkspace, usedText, workspaceNote } from "./MyWorkspace";
import { stubFetch } from "../test/fetch";

const vol = (over: Record<string, unknown> = {}) => ({
  id: "vol_01JAAAAAAAAAAAAAAAAAAAAAAA",
  name: "home",
  kind: "home",
  owner: "alice",
  cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cluster_name: "gpu-a",
  mode: "RWO",
  size_gb: 20,
  mount_path: "/workspace",
  state: "active",
  created_at: "2026-12-01T10:00:00.000Z",
  deleted_at: null,
  pvc: "vol-01jaaaaaaaaaaaaaaaaaaaaaaa",
  capacity_gb: 20,
  used_bytes: 5 * 1024 ** 3,
  over_capacity: false,
  mounted: true,
  storage_class: "zfs",
  reported_at: "2026-12-01T10:05:00.000Z",
  mounted_by: [],
  ...over,
});

describe("MyWorkspace", () => {
  it("shows each volume's size, use and cluster, and says a volume stays on its cluster", async () => {
    stubFetch({
      "GET /api/v1/volumes": () => ({
        body: {
          data: [
            vol(),
            vol({
              id: "vol_01JBBBBBBBBBBBBBBBBBBBBBBB",
              name: "datasets",
              kind: "named",
              mount_path: "/data/datasets",
              size_gb: 30,
              used_bytes: null,
              cluster_name: "gpu-b",
            }),
          ],
          orphans: [],
        },
      }),
    });
    const { container } = render(<MyWorkspace />);
    await screen.findByText("Home");
    const home = container.querySelector('tr[data-volume="vol_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(within(home).getByText("/workspace")).toBeTruthy();
    expect(within(home).getByText("5 GiB of 20 GiB (25%)")).toBeTruthy();
    expect(within(home).getByText("gpu-a")).toBeTruthy();
    const data = container.querySelector('tr[data-volume="vol_01JBBBBBBBBBBBBBBBBBBBBBBB"]') as HTMLElement;
    expect(within(data).getByText("datasets")).toBeTruthy();
    expect(within(data).getByText("not reported yet")).toBeTruthy();
    expect(screen.getByText(/A session on another cluster starts with a new, empty workspace there/)).toBeTruthy();
  });

  it("says where the workspace comes from before there is one", async () => {
    stubFetch({ "GET /api/v1/volumes": () => ({ body: { data: [], orphans: [] } }) });
    render(<MyWorkspace />);
    expect(await screen.findByText(/Your first session on a cluster makes your workspace there/)).toBeTruthy();
  });

  it("words use above the claim", () => {
    expect(usedText({ used_bytes: 21 * 1024 ** 3, size_gb: 20 })).toBe("21 GiB of 20 GiB (105%)");
  });

  it("marks a volume shared with the member's group as someone else's, read-only, at its shared path", async () => {
    stubFetch({
      "GET /api/v1/volumes": () => ({
        body: {
          data: [
            vol(),
            vol({
              id: "vol_2",
              name: "corpus",
              kind: "named",
              owner: "bob",
              mode: "RWX",
              mount_path: "/data/corpus",
              shared_group: "vision",
            }),
          ],
          orphans: [],
        },
      }),
    });
    const { container } = render(<MyWorkspace me="alice" />);
    await screen.findByText("corpus");
    const row = container.querySelector('[data-volume="vol_2"]') as HTMLElement;
    expect(row.textContent).toContain("bob's, shared read-only");
    expect(within(row).getByText("/shared/bob/corpus")).toBeTruthy();
  });

  it("says before a session whether it gets the owner's workspace or a new, empty one on another cluster", () => {
    const a = { id: "clu_a", name: "gpu-a" };
    const b = { id: "clu_b", name: "gpu-b" };
    const homeA = vol({ cluster_id: "clu_a", cluster_name: "gpu-a" }) as Parameters<typeof workspaceNote>[0][number];
    expect(workspaceNote([homeA], "alice", a)).toBe("alice's workspace on gpu-a (20 GiB) is mounted at /workspace.");
    expect(workspaceNote([homeA], "alice", b)).toBe(
      "alice's workspace is on gpu-a, not on gpu-b: a volume lives on one cluster, so this session starts with a new, empty workspace on gpu-b.",
    );
    expect(workspaceNote([], "bob", b)).toBe("This first session makes bob's workspace on gpu-b, mounted at /workspace.");
    // Another owner's home (listed to an admin) is not theirs.
    expect(workspaceNote([homeA], "bob", a)).toBe("This first session makes bob's workspace on gpu-a, mounted at /workspace.");
    expect(workspaceNote([homeA], null)).toContain("Your workspace is on gpu-a. A volume lives on one cluster");
    expect(workspaceNote([], null)).toContain("Your first session makes your workspace at /workspace");
    // A deleted home does not count.
    expect(workspaceNote([{ ...homeA, state: "reclaim_pending" }], "alice", a)).toContain("This first session makes");
  });

  it("shares an RWX volume of the member's with their group and stops sharing it; RWO and home volumes offer nothing", async () => {
    let shared: string | null = null;
    const calls = stubFetch({
      "GET /api/v1/account": () => ({ body: { username: "alice", must_change_password: false, policy: { group: "vision" } } }),
      "GET /api/v1/volumes": () => ({
        body: {
          data: [
            vol(),
            vol({ id: "vol_2", name: "corpus", kind: "named", mode: "RWX", mount_path: "/data/corpus", shared_group: shared }),
            vol({ id: "vol_3", name: "scratch", kind: "named", mode: "RWO", mount_path: "/data/scratch" }),
          ],
          orphans: [],
        },
      }),
      "PUT /api/v1/volumes/vol_2/share": (c) => {
        shared = (c.body as { group: string }).group;
        return { body: vol({ id: "vol_2", shared_group: shared }) };
      },
      "DELETE /api/v1/volumes/vol_2/share": () => {
        shared = null;
        return { body: vol({ id: "vol_2" }) };
      },
    });
    const { container } = render(<MyWorkspace me="alice" />);
    const share = await screen.findByRole("button", { name: "Share corpus with vision" });
    expect(container.querySelectorAll("tbody button").length).toBe(1);
    fireEvent.click(share);
    await screen.findByRole("button", { name: "Stop sharing corpus" });
    expect(calls.find((c) => c.method === "PUT")!.body).toEqual({ group: "vision" });
    expect(container.querySelector('[data-volume="vol_2"]')!.textContent).toContain("shared read-only with vision");
    fireEvent.click(screen.getByRole("button", { name: "Stop sharing corpus" }));
    await waitFor(() => expect(calls.some((c) => c.method === "DELETE" && c.path === "/api/v1/volumes/vol_2/share")).toBe(true));
    await screen.findByRole("button", { name: "Share corpus with vision" });
  });
});
