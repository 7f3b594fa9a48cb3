import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { ClustersPage } from "./Clusters";
import { stubEventSource } from "../test/events";
import { cluster, page, stubFetch } from "../test/fetch";

const two = () => [
  cluster(),
  cluster({
    id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
    name: "gpu-b",
    session_domain: null,
    effective_session_domain: "console.example",
    status: "unreachable",
    last_error: { stage: "connect", cause: "connection refused", hint: "is the API server up?" },
    heartbeat_age_s: 900,
  }),
];

describe("ClustersPage", () => {
  it("shows the cluster page's columns, the unset-domain warning, probe errors and stale heartbeats", async () => {
    stubFetch({ "GET /api/v1/clusters": () => ({ body: page(two()) }) });
    const { container } = render(<ClustersPage />);
    await screen.findByText("gpu-b");
    const headers = Array.from(container.querySelectorAll("thead th")).map((th) => th.textContent);
    expect(headers.slice(0, 7)).toEqual([
      "Cluster",
      "API address",
      "Session domain",
      "State",
      "Operator",
      "Nodes / GPUs / sessions",
      "Heartbeat",
    ]);
    const rowB = container.querySelector('[data-cluster-id="clu_01JBBBBBBBBBBBBBBBBBBBBBBB"]') as HTMLElement;
    expect(
      within(rowB).getByRole("button", { name: /Session domain of gpu-b not set: sessions get the server's default domain/ }),
    ).toBeTruthy();
    expect(rowB.textContent).toContain("connect");
    expect(rowB.textContent).toContain("connection refused");
    expect(rowB.querySelector(".heartbeat.stale")).toBeTruthy();
    const rowA = container.querySelector('[data-cluster-id="clu_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(within(rowA).queryByRole("button", { name: /not set/ })).toBeNull();
    expect(rowA.textContent).toContain("4 / 32 / 3");
    expect(rowA.querySelector(".heartbeat.stale")).toBeNull();
    expect(screen.getByText(/2 clusters · 8 nodes · 64 GPUs · 6 running sessions/)).toBeTruthy();
  });

  it("warns about a missing session domain with a single cluster too, and the warning opens Edit", async () => {
    stubFetch({ "GET /api/v1/clusters": () => ({ body: page([cluster({ session_domain: null, effective_session_domain: null })]) }) });
    render(<ClustersPage />);
    const warn = await screen.findByRole("button", {
      name: /Session domain of gpu-a not set: sessions cannot be opened\. Edit to set it\./,
    });
    expect(warn.getAttribute("title")).toContain("Set it with Edit");
    expect(warn.getAttribute("title")).not.toContain("PATCH");
    fireEvent.click(warn);
    const dialog = await screen.findByRole("dialog", { name: "Edit gpu-a" });
    const input = within(dialog).getByLabelText("Session domain") as HTMLInputElement;
    // No made-up default: the placeholder says it is needed.
    expect(input.placeholder).toContain("needed before sessions can be opened");
    expect(input.placeholder).not.toContain("default");
  });

  it("a single cluster on the server's default domain gets no warning", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({ body: page([cluster({ session_domain: null, effective_session_domain: "console.example" })]) }),
    });
    render(<ClustersPage />);
    await screen.findByText("gpu-a");
    expect(screen.queryByRole("button", { name: /not set/ })).toBeNull();
  });

  it("follows pagination", async () => {
    const many = Array.from({ length: 150 }, (_, i) => cluster({ id: `clu_${String(i).padStart(26, "0")}`, name: `c-${i}` }));
    const calls = stubFetch({
      "GET /api/v1/clusters": (c) => {
        const p = Number(new URL(c.path, "http://x").searchParams.get("page"));
        return { body: { data: many.slice((p - 1) * 100, p * 100), pagination: { page: p, size: 100, total: 150, total_pages: 2 } } };
      },
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText("c-149");
    expect(container.querySelectorAll("tr.cluster-row").length).toBe(150);
    expect(calls.map((c) => c.path)).toEqual(["/api/v1/clusters?page=1&size=100", "/api/v1/clusters?page=2&size=100"]);
  });

  it("expands a row into its nodes and cordons one", async () => {
    let cordoned = false;
    const calls = stubFetch({
      "GET /api/v1/clusters": () => ({ body: page([cluster()]) }),
      "GET /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA/nodes": () => ({
        body: [
          {
            name: "gpu-node-0",
            ready: true,
            schedulable: !cordoned,
            cordoned,
            gpus: [
              { uuid: "GPU-1", model: "NVIDIA A100", memory_mb: 81920 },
              { uuid: "GPU-2", model: "NVIDIA A100", memory_mb: 81920, used_mem_mb: 20480, used_cores: 30 },
            ],
            last_seen: new Date().toISOString(),
          },
        ],
      }),
      "POST /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA/nodes/gpu-node-0/cordon": () => {
        cordoned = true;
        return { status: 204 };
      },
    });
    render(<ClustersPage />);
    const toggle = await screen.findByRole("button", { name: "Show nodes of gpu-a" });
    fireEvent.click(toggle);
    await screen.findByText("gpu-node-0");
    expect(screen.getByText("2 × NVIDIA A100 · 80 GiB · 20 GiB booked on 1 of 2")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Hide nodes of gpu-a" }).getAttribute("aria-expanded")).toBe("true");
    fireEvent.click(screen.getByRole("button", { name: "Cordon gpu-node-0" }));
    await screen.findByRole("button", { name: "Uncordon gpu-node-0" });
    expect(calls.some((c) => c.method === "POST" && c.path.endsWith("/cordon"))).toBe(true);
  });

  it("opening the operator's likely causes does not expand the row", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([cluster({ operator: { state: "silent", likely_causes: ["the image cannot be pulled"] } })]),
      }),
      "GET /api/v1/clusters/*": () => ({ body: [] }),
    });
    const { container } = render(<ClustersPage />);
    fireEvent.click(await screen.findByText("no callback yet: likely causes"));
    await new Promise((r) => setTimeout(r, 20));
    expect(container.querySelector("tr.nodes-row")).toBeNull();
    expect(container.querySelector("tr.cluster-row.expanded")).toBeNull();
  });

  it("shows the operator pod's state, log tail and likely fix in the Operator cell", async () => {
    const pod = {
      read_at: "2026-12-01T20:00:00.000Z",
      pods: [
        {
          name: "gshare-operator-1",
          phase: "Running",
          containers: [
            {
              name: "operator",
              image: "x",
              ready: false,
              restarts: 7,
              state: "waiting",
              reason: "CrashLoopBackOff",
              last_termination: { exit_code: 2 },
            },
          ],
        },
      ],
      pods_matching: 1,
      log: {
        pod: "gshare-operator-1",
        container: "operator",
        previous: true,
        lines: ["flag provided but not defined: -volume-sync-interval"],
      },
      log_error: null,
      events: [],
      diagnosis: { cause: "its build does not define --volume-sync-interval", fix: "attach again with this gShare" },
    };
    stubFetch({
      "GET /api/v1/clusters": () => ({ body: page([cluster({ operator: { state: "silent", likely_causes: [], pod } })]) }),
      "GET /api/v1/clusters/*": () => ({ body: [] }),
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText(/its build does not define --volume-sync-interval/);
    const cell = container.querySelector(".operator-pod") as HTMLElement;
    expect(cell.textContent).toContain("attach again with this gShare");
    expect(cell.textContent).toContain("CrashLoopBackOff");
    expect(cell.textContent).toContain("7 restarts, last exit 2");
    expect(cell.textContent).toContain("the run that crashed");
  });

  it("shows an error when the list cannot load", async () => {
    stubFetch({ "GET /api/v1/clusters": () => ({ status: 500, body: { error: { code: "internal", message: "boom", details: {} } } }) });
    render(<ClustersPage />);
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("Cannot load clusters"));
  });
});

describe("live updates", () => {
  it("reloads the list when the server says clusters changed, and only then (no polling needed)", async () => {
    const source = stubEventSource();
    let name = "gpu-a";
    const calls = stubFetch({ "GET /api/v1/clusters": () => ({ body: page([cluster({ name })]) }) });
    const { unmount } = render(<ClustersPage />);
    await screen.findByText("gpu-a");
    const es = source();
    expect(es.url).toBe("/api/v1/events");
    es.emit("hello");
    // The stream is up: the page settles on the slow fallback poll (one reload as it switches).
    await new Promise((r) => setTimeout(r, 30));
    const before = calls.length;
    name = "gpu-a-renamed";
    // Another page's topics: nothing is fetched.
    for (const other of ["sessions", "offerings", "audit", "inventory"]) es.emit(other);
    await new Promise((r) => setTimeout(r, 20));
    expect(calls.length).toBe(before);
    expect(screen.queryByText("gpu-a-renamed")).toBeNull();
    es.emit("clusters");
    await screen.findByText("gpu-a-renamed");
    expect(calls.length).toBeGreaterThan(before);
    unmount();
    expect(es.closed).toBe(true);
    vi.unstubAllGlobals();
  });
});
