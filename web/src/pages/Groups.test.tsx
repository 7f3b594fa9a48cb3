import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { GroupsPage } from "./Groups";
import { cluster, page, stubFetch } from "../test/fetch";
import { runtimeActionText, valueText } from "../policies";

const groups = [
  { name: "vision", description: "Vision lab", created_at: "2026-12-01T09:00:00.000Z", members: ["ann", "cy"], policy_id: "pol_v" },
  { name: "legacy", description: null, created_at: null, members: ["old"], policy_id: null },
];
const limits = {
  cpu: 24,
  mem_gb: 256,
  gpu_mem_mb: 98304,
  gpu_cores: 100,
  storage_gb: 500,
  volume_gb: null,
  shared_pool: null,
  allow_privileged: null,
};
const policies = [
  {
    id: "pol_v",
    scope: "group",
    scope_id: "vision",
    max_concurrent: 3,
    max_queued: null,
    max_runtime_min: null,
    idle_timeout_sec: null,
    limits: { ...limits, cpu: null, mem_gb: null, gpu_mem_mb: null, gpu_cores: null, storage_gb: null, shared_pool: true },
    gpu_hours_month: 1500,
    created_at: "2026-12-01T09:00:00.000Z",
    updated_at: "2026-12-01T09:00:00.000Z",
  },
  {
    id: "pol_g",
    scope: "global",
    scope_id: "*",
    max_concurrent: 1,
    max_queued: 2,
    max_runtime_min: 720,
    max_runtime_action: "end",
    idle_timeout_sec: 3600,
    limits,
    gpu_hours_month: null,
    created_at: "2026-12-01T09:00:00.000Z",
    updated_at: "2026-12-01T09:00:00.000Z",
  },
];
const pool = {
  id: "npl_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cluster_name: "gpu-a",
  name: "vision-a100",
  description: null,
  kind: "dedicated",
  node_count: 2,
  nodes: [
    { hostname: "gpu-node-0", status: "ready", device_count: 4 },
    { hostname: "gpu-node-1", status: "cordoned", device_count: 4 },
  ],
  groups: ["vision"],
  gpus_total: 8,
  gpus_used: 3,
  created_at: "2026-12-01T09:00:00.000Z",
  updated_at: "2026-12-01T09:00:00.000Z",
};

function routes(over: Record<string, Parameters<typeof stubFetch>[0][string]> = {}) {
  return stubFetch({
    "GET /api/v1/groups": () => ({ body: { data: groups } }),
    "GET /api/v1/resource-policies": () => ({ body: { data: policies } }),
    "GET /api/v1/node-pools": () => ({ body: { data: [pool], total: 1 } }),
    "GET /api/v1/clusters": () => ({ body: page([cluster()]) }),
    "GET /api/v1/clusters/*": () => ({
      body: [
        {
          name: "gpu-node-0",
          ready: true,
          schedulable: true,
          cordoned: false,
          decommissioning: false,
          offline: false,
          gpus: [],
          pool_id: pool.id,
          pool_name: pool.name,
        },
        {
          name: "gpu-node-2",
          ready: true,
          schedulable: true,
          cordoned: false,
          decommissioning: false,
          offline: false,
          gpus: [],
          pool_id: null,
          pool_name: null,
        },
      ],
    }),
    ...over,
  });
}

describe("GroupsPage", () => {
  it("lists groups with members, policies per scope (global first) with every field, and node pools with their use", async () => {
    routes();
    const { container } = render(<GroupsPage />);
    await screen.findByText("Vision lab");
    const vision = container.querySelector('[data-group="vision"]') as HTMLElement;
    expect(vision.textContent).toContain("ann, cy");
    expect(vision.textContent).toContain("own policy");
    // A group only accounts name has no actions (nothing to delete).
    const legacy = container.querySelector('[data-group="legacy"]') as HTMLElement;
    expect(legacy.textContent).toContain("named by accounts only");
    expect(within(legacy).queryByRole("button")).toBeNull();
    const rows = Array.from(container.querySelectorAll("tr[data-policy]")).map((r) => r.getAttribute("data-policy"));
    expect(rows).toEqual(["global:*", "group:vision"]);
    const global = container.querySelector('[data-policy="global:*"]') as HTMLElement;
    expect(global.textContent).toContain("720 min");
    expect(global.textContent).toContain("end the session");
    expect(global.textContent).toContain("98,304 MiB");
    const group = container.querySelector('[data-policy="group:vision"]') as HTMLElement;
    expect(within(group).getAllByText("inherited").length).toBeGreaterThan(5);
    expect(within(group).getByText("yes")).toBeTruthy();
    expect(group.textContent).toContain("1,500");
    expect(global.textContent).toContain("no budget");
    const p = container.querySelector('[data-pool="vision-a100"]') as HTMLElement;
    expect(p.textContent).toContain("gpu-node-0, gpu-node-1 (cordoned)");
    expect(p.textContent).toContain("3 / 8");
    expect(p.textContent).toContain("vision");
  });

  it("creates a group, and a refused delete says what holds the group", async () => {
    const calls = routes({
      "POST /api/v1/groups": () => ({ status: 201, body: groups[0] }),
      "DELETE /api/v1/groups/*": () => ({
        status: 409,
        body: {
          error: {
            code: "group_in_use",
            message: "group vision has 2 members and a policy and is named by node pool(s) vision-a100",
            details: {},
          },
        },
      }),
    });
    render(<GroupsPage />);
    await screen.findByText("Vision lab");
    fireEvent.click(screen.getByRole("button", { name: "New group…" }));
    const dialog = await screen.findByRole("dialog", { name: "New group" });
    fireEvent.input(within(dialog).getByLabelText("Name"), { target: { value: " nlp " } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create group" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.path === "/api/v1/groups")).toBe(true));
    expect(calls.find((c) => c.method === "POST")!.body).toEqual({ name: "nlp", description: null });
    await waitFor(() => expect(screen.queryByRole("dialog", { name: "New group" })).toBeNull());

    fireEvent.click(screen.getByRole("button", { name: "Delete group vision" }));
    const confirm = await screen.findByRole("dialog", { name: "Delete group" });
    fireEvent.click(within(confirm).getByRole("button", { name: "Delete" }));
    await within(confirm).findByText(/named by node pool\(s\) vision-a100/);
  });

  it("creates a node pool from the cluster's nodes (a node in another pool cannot be picked) and the groups", async () => {
    const calls = routes({ "POST /api/v1/node-pools": () => ({ status: 201, body: pool }) });
    render(<GroupsPage />);
    await screen.findByText("Vision lab");
    fireEvent.click(screen.getByRole("button", { name: "New node pool…" }));
    const dialog = await screen.findByRole("dialog", { name: "New node pool" });
    const taken = await within(dialog).findByRole("checkbox", { name: /gpu-node-0/ });
    expect((taken as HTMLInputElement).disabled).toBe(true);
    fireEvent.input(within(dialog).getByLabelText("Name"), { target: { value: "spare" } });
    fireEvent.click(within(dialog).getByRole("checkbox", { name: /gpu-node-2/ }));
    fireEvent.click(within(dialog).getByRole("checkbox", { name: "vision" }));
    fireEvent.click(within(dialog).getByRole("button", { name: "Create pool" }));
    await waitFor(() => expect(calls.some((c) => c.method === "POST" && c.path === "/api/v1/node-pools")).toBe(true));
    expect(calls.find((c) => c.method === "POST")!.body).toEqual({
      cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
      name: "spare",
      kind: "dedicated",
      nodes: ["gpu-node-2"],
      groups: ["vision"],
    });
  });

  it("edits a policy: blank inherits (null), numbers are sent as numbers, spill as a flag", async () => {
    const calls = routes({ "PATCH /api/v1/resource-policies/*": () => ({ body: policies[0] }) });
    render(<GroupsPage />);
    await screen.findByText("Vision lab");
    fireEvent.click(screen.getByRole("button", { name: "Edit group vision policy" }));
    const dialog = await screen.findByRole("dialog", { name: /Edit the group policy of vision/ });
    fireEvent.input(within(dialog).getByLabelText("Live sessions"), { target: { value: "" } });
    fireEvent.input(within(dialog).getByLabelText("GPU memory (MiB)"), { target: { value: "40960" } });
    fireEvent.change(within(dialog).getByLabelText("Spill onto shared nodes"), { target: { value: "no" } });
    expect((within(dialog).getByLabelText("At the runtime limit") as HTMLSelectElement).value).toBe("");
    fireEvent.change(within(dialog).getByLabelText("At the runtime limit"), { target: { value: "pause" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Save policy" }));
    await waitFor(() => expect(calls.some((c) => c.method === "PATCH")).toBe(true));
    const body = calls.find((c) => c.method === "PATCH")!.body as Record<string, unknown>;
    expect(body.max_concurrent).toBeNull();
    expect((body.limits as Record<string, unknown>).gpu_mem_mb).toBe(40960);
    expect((body.limits as Record<string, unknown>).shared_pool).toBe(false);
    expect(body.gpu_hours_month).toBe(1500);
    expect(body.max_runtime_action).toBe("pause");
  });

  it("sends an inherited runtime-limit action as null", async () => {
    const calls = routes({ "PATCH /api/v1/resource-policies/*": () => ({ body: policies[1] }) });
    render(<GroupsPage />);
    await screen.findByText("Vision lab");
    fireEvent.click(screen.getByRole("button", { name: "Edit Global policy" }));
    const dialog = await screen.findByRole("dialog", { name: /Edit the global policy/ });
    const select = within(dialog).getByLabelText("At the runtime limit") as HTMLSelectElement;
    expect(select.value).toBe("end");
    fireEvent.change(select, { target: { value: "" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Save policy" }));
    await waitFor(() => expect(calls.some((c) => c.method === "PATCH")).toBe(true));
    const body = calls.find((c) => c.method === "PATCH")!.body as Record<string, unknown>;
    expect(body.max_runtime_action).toBeNull();
  });

  it("says what a policy value means", () => {
    expect(valueText(null)).toBe("inherited");
    expect(valueText(0)).toBe("no limit");
    expect(valueText(0, "", "none")).toBe("none");
    expect(valueText(98304, "MiB")).toBe("98,304 MiB");
    expect(valueText(true)).toBe("yes");
    expect(runtimeActionText(null)).toBe("inherited");
    expect(runtimeActionText("pause")).toBe("pause the session");
  });
});
