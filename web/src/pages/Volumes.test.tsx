import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { groupVolumes, VolumesPage, volumesQuery } from "./Volumes";
import { choose } from "../test/dom";
import { stubFetch } from "../test/fetch";
import type { Volume } from "../volumes";

const GIB = 1024 ** 3;
const vol = (over: Partial<Volume> = {}): Volume => ({
  id: "vol_01JAAAAAAAAAAAAAAAAAAAAAAA",
  name: "home",
  kind: "home",
  owner: "alice",
  cluster_id: "clu_a",
  cluster_name: "gpu-a",
  mode: "RWO",
  size_gb: 20,
  mount_path: "/workspace",
  state: "active",
  created_at: "2026-12-01T09:00:00.000Z",
  deleted_at: null,
  pvc: "vol-01jaaaaaaaaaaaaaaaaaaaaaaa",
  capacity_gb: 20,
  used_bytes: 5 * GIB,
  over_capacity: false,
  mounted: true,
  storage_class: "zfs-nvme",
  reported_at: "2026-12-01T09:05:00.000Z",
  mounted_by: [],
  shared_group: null,
  reclaim_answered_at: null,
  reclaim_stalled: false,
  ...over,
});
const orphan = (over: Record<string, unknown> = {}) => ({
  cluster_id: "clu_b",
  name: "old-data",
  volume_id: null,
  capacity_gb: 7,
  used_bytes: null,
  mounted: false,
  storage_class: "zfs-nvme",
  first_seen: "2026-12-01T08:00:00.000Z",
  reclaim_requested_at: null,
  reclaim_requested_by: null,
  ...over,
});

const volumes = [
  vol(),
  vol({ id: "vol_01JBBBBBBBBBBBBBBBBBBBBBBB", name: "datasets", kind: "named", size_gb: 30, mount_path: "/data/datasets", mounted: false }),
  vol({ id: "vol_01JCCCCCCCCCCCCCCCCCCCCCCC", owner: "bob", cluster_id: "clu_b", cluster_name: "gpu-b", pvc: null, used_bytes: null }),
  vol({
    id: "vol_01JDDDDDDDDDDDDDDDDDDDDDDD",
    owner: "bob",
    name: "gone",
    kind: "named",
    state: "reclaim_pending",
    deleted_at: "2026-12-01T07:00:00.000Z",
    reclaim_stalled: true,
    mounted: false,
  }),
];

describe("VolumesPage", () => {
  it("groups volumes by user and by cluster, with size, used, mounted, storage class and a stalled reclaim said plainly", async () => {
    stubFetch({ "GET /api/v1/volumes": () => ({ body: { data: volumes, orphans: [orphan()] } }) });
    const { container } = render(<VolumesPage />);
    await screen.findByText("datasets");
    const headers = Array.from(container.querySelectorAll("thead th")).map((th) => th.textContent);
    expect(headers).toEqual(["Volume", "Owner", "Cluster", "Size", "Used", "Mounted", "Storage class", "State"]);
    const groups = () => Array.from(container.querySelectorAll("tr.group-row")).map((r) => r.textContent);
    // By user: alice (home 20 + datasets 30 = 50 GiB), bob (the deleted one not counted).
    expect(groups()).toEqual(["alice 2 volumes, 50 GiB", "bob 2 volumes, 20 GiB"]);
    const home = container.querySelector('[data-volume="vol_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(home.textContent).toContain("5 GiB of 20 GiB (25%)");
    expect(home.textContent).toContain("zfs-nvme");
    expect(within(home).getByText("yes")).toBeTruthy();
    const never = container.querySelector('[data-volume="vol_01JCCCCCCCCCCCCCCCCCCCCCCC"]') as HTMLElement;
    expect(within(never).getAllByText("not reported yet").length).toBe(2);
    const stalled = container.querySelector('[data-volume="vol_01JDDDDDDDDDDDDDDDDDDDDDDD"]') as HTMLElement;
    expect(stalled.className).toBe("volume-stalled");
    expect(stalled.textContent).toContain("reclaim stalled: its cluster has not synced volumes since it was deleted");
    expect(screen.getByText(/1 stalled reclaim/)).toBeTruthy();
    choose(screen.getByLabelText("Show"), "cluster");
    await waitFor(() => expect(groups()).toEqual(["gpu-a 3 volumes, 50 GiB", "gpu-b 1 volume, 20 GiB"]));
  });

  it("asks the server with the owner and cluster filters and deleted ones on request", async () => {
    const calls = stubFetch({ "GET /api/v1/volumes": () => ({ body: { data: volumes, orphans: [] } }) });
    render(<VolumesPage />);
    await screen.findByText("datasets");
    fireEvent.input(screen.getByLabelText(/^Owner/), { target: { value: "bob " } });
    choose(screen.getByLabelText("Cluster"), "clu_b");
    fireEvent.click(screen.getByLabelText(/Deleted too/));
    await waitFor(() => expect(calls.at(-1)!.path).toBe("/api/v1/volumes?owner=bob&cluster_id=clu_b&deleted=true"));
    expect(volumesQuery({})).toBe("");
  });

  it("lists orphans; adopting to an account that does not exist is refused beside the owner field, then adopted", async () => {
    const calls = stubFetch({
      "GET /api/v1/volumes": () => ({ body: { data: [], orphans: [orphan()] } }),
      "POST /api/v1/volumes/orphans/clu_b/old-data/adopt": (c) => {
        const b = c.body as { owner: string };
        if (b.owner !== "alice")
          return {
            status: 422,
            body: {
              error: {
                code: "validation_failed",
                message: "owner: no account named nobody",
                details: { errors: [{ loc: ["body", "owner"], msg: "no account named nobody", type: "value_error" }] },
                request_id: "r",
              },
            },
          };
        return { status: 201, body: vol({ owner: "alice", name: "old-data", kind: "named" }) };
      },
    });
    const { container } = render(<VolumesPage />);
    await screen.findByText(/No volume yet/);
    choose(screen.getByLabelText("Show"), "orphans");
    const row = (await waitFor(() => container.querySelector('[data-orphan="old-data"]'))) as HTMLElement;
    expect(row.textContent).toContain("7 GiB");
    fireEvent.click(within(row).getByRole("button", { name: "Adopt old-data" }));
    const dialog = screen.getByRole("dialog", { name: "Adopt orphan volume" });
    expect((within(dialog).getByLabelText("Volume name") as HTMLInputElement).value).toBe("old-data");
    fireEvent.input(within(dialog).getByLabelText(/^Owner/), { target: { value: "nobody" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Adopt" }));
    await within(dialog).findByText(/No account named nobody/i);
    expect(
      within(dialog)
        .getByLabelText(/^Owner/)
        .getAttribute("aria-invalid"),
    ).toBe("true");
    fireEvent.input(within(dialog).getByLabelText(/^Owner/), { target: { value: "alice" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Adopt" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    const adopt = calls.filter((c) => c.method === "POST").at(-1)!;
    expect(adopt.body).toEqual({ owner: "alice", name: "old-data", mode: "RWO" });
  });

  it("reclaims an orphan only after a confirmation, then shows it as asked", async () => {
    let asked = false;
    const calls = stubFetch({
      "GET /api/v1/volumes": () => ({
        body: {
          data: [],
          orphans: [orphan(asked ? { reclaim_requested_at: "2026-12-01T10:00:00.000Z", reclaim_requested_by: "admin" } : {})],
        },
      }),
      "POST /api/v1/volumes/orphans/clu_b/old-data/reclaim": () => {
        asked = true;
        return { body: orphan({ reclaim_requested_at: "2026-12-01T10:00:00.000Z", reclaim_requested_by: "admin" }) };
      },
    });
    const { container } = render(<VolumesPage />);
    await screen.findByText(/No volume yet/);
    choose(screen.getByLabelText("Show"), "orphans");
    const row = (await waitFor(() => container.querySelector('[data-orphan="old-data"]'))) as HTMLElement;
    fireEvent.click(within(row).getByRole("button", { name: "Reclaim old-data" }));
    const dialog = screen.getByRole("dialog", { name: "Reclaim orphan volume" });
    expect(calls.some((c) => c.method === "POST")).toBe(false);
    fireEvent.click(within(dialog).getByRole("button", { name: "Reclaim old-data" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    await waitFor(() => expect(container.querySelector('[data-orphan="old-data"]')!.textContent).toContain("reclaim asked"));
    expect(within(container.querySelector('[data-orphan="old-data"]') as HTMLElement).queryByRole("button")).toBeNull();
  });

  it("sorts groups by name and the home first in each", () => {
    const g = groupVolumes(
      [
        vol({ owner: "zed", name: "b", kind: "named", id: "vol_2" }),
        vol({ owner: "zed", id: "vol_1" }),
        vol({ owner: "amy", id: "vol_3" }),
      ],
      "user",
    );
    expect(g.map((x) => [x.label, x.volumes.map((v) => v.id)])).toEqual([
      ["amy", ["vol_3"]],
      ["zed", ["vol_1", "vol_2"]],
    ]);
  });
});
