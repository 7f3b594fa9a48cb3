import { render, screen, within } from "@testing-library/preact";
import { MyWorkspace, usedText } from "./MyWorkspace";
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
});
