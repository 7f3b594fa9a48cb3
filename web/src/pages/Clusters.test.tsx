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
    // One column for the API server (address and what the probe found), one for the operator; the
    // age of the last report once, under Last report (1440 px: "Attach operator" fits).
    expect(headers.slice(0, 6)).toEqual(["Cluster", "API server", "Session domain", "Operator", "Nodes / GPUs / sessions", "Last report"]);
    const rowB = container.querySelector('[data-cluster-id="clu_01JBBBBBBBBBBBBBBBBBBBBBBB"]') as HTMLElement;
    // The only cluster on the server's default domain: said in words, no unexplained mark.
    expect(rowB.textContent).toContain("the server's default");
    expect(within(rowB).queryByRole("button", { name: /Session domain of gpu-b/ })).toBeNull();
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
    expect(calls.map((c) => c.path).filter((p) => p.startsWith("/api/v1/clusters"))).toEqual([
      "/api/v1/clusters?page=1&size=100",
      "/api/v1/clusters?page=2&size=100",
    ]);
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

const settings = (over: Record<string, unknown> = {}) => ({
  public_url: "https://gshare.example.com",
  public_url_problem: null,
  session_domain: null,
  session_url_scheme: "https",
  config_file: "/etc/gshare/config.toml",
  ...over,
});
const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();

describe("ClustersPage: what the second walk found", () => {
  it("says reachable for the API server and connected for the operator once each, the report's age only under Last report", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([cluster({ operator: { state: "connected", last_callback_age_s: 12, likely_causes: [] }, heartbeat_age_s: 12 })]),
      }),
      "GET /api/v1/settings": () => ({ body: settings() }),
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText("gpu-a");
    const row = container.querySelector("tr.cluster-row") as HTMLElement;
    expect(within(row).getAllByText("connected").length).toBe(1);
    expect(within(row).getByText("reachable")).toBeTruthy();
    expect(row.textContent).not.toContain("last callback");
  });

  it("a cluster on the default domain shared with another says so in words", async () => {
    const b = { id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB", name: "gpu-b", session_domain: null, effective_session_domain: "lab.example" };
    stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([cluster({ session_domain: null, effective_session_domain: "lab.example" }), cluster(b)]),
      }),
      "GET /api/v1/settings": () => ({ body: settings({ session_domain: "lab.example" }) }),
    });
    render(<ClustersPage />);
    const marks = await screen.findAllByRole("button", { name: /the server's default, shared by 2 clusters/ });
    expect(marks.length).toBe(2);
    expect(marks[0].textContent).toBe("⚠ shared by 2 clusters");
  });

  it("keeps the last attach failure on the row, in the console's words, after the dialog is gone", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([
          cluster({
            session_domain: null,
            effective_session_domain: null,
            operator: {
              state: "not_attached",
              likely_causes: [],
              last_attach: {
                at: minutesAgo(2),
                ok: false,
                code: "setting_required",
                setting: "session_domain",
                message:
                  "cluster clu_x has no session domain: set session_domain in the configuration (GSHARE_SESSION_DOMAIN) or the cluster's own (PATCH /api/v1/clusters/clu_x)",
              },
            },
          }),
          cluster({
            id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
            name: "gpu-b",
            operator: {
              state: "not_attached",
              likely_causes: [],
              last_attach: {
                at: minutesAgo(1),
                ok: false,
                code: "cluster_forbidden",
                message: "the credentials may not create clusterroles",
              },
            },
          }),
        ]),
      }),
      "GET /api/v1/settings": () => ({ body: settings() }),
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText("gpu-b");
    const [a, b] = Array.from(container.querySelectorAll(".last-attach")).map((e) => e.textContent ?? "");
    expect(a).toContain("Last attach failed");
    expect(a).toContain("gpu-a has no session domain. Set it with Edit");
    expect(a).not.toContain("PATCH");
    expect(b).toContain("the credentials may not create clusterroles");
  });

  it("calls an operator starting for the first minutes after attach, then silent", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([
          cluster({ operator: { state: "silent", attached_at: minutesAgo(0.5), likely_causes: ["the pod is not running"] } }),
          cluster({
            id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
            name: "gpu-b",
            operator: { state: "silent", attached_at: minutesAgo(10), likely_causes: ["the pod is not running"] },
          }),
        ]),
      }),
      "GET /api/v1/settings": () => ({ body: settings() }),
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText("gpu-b");
    const rows = container.querySelectorAll("tr.cluster-row");
    expect(rows[0].querySelector(".operator-state .badge")?.textContent).toBe("starting");
    expect(rows[0].textContent).not.toContain("likely causes");
    expect(rows[1].querySelector(".operator-state .badge")?.textContent).toBe("silent");
    expect(rows[1].textContent).toContain("likely causes");
  });

  it("an empty fleet shows the path and what this server still lacks, read from its settings", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({ body: page([]) }),
      "GET /api/v1/settings": () => ({
        body: settings({ public_url: "http://127.0.0.1:8080", public_url_problem: "public_url is loopback" }),
      }),
    });
    const { container } = render(<ClustersPage />);
    await screen.findByText(/No cluster is registered yet/);
    const steps = Array.from(container.querySelectorAll(".first-run-steps > li")).map((li) => li.textContent ?? "");
    expect(steps.length).toBe(4);
    expect(steps[0]).toContain("Register a cluster");
    expect(steps[1]).toContain("Attach the operator");
    expect(steps[1]).toMatch(
      /to do: a public URL clusters can call back — http:\/\/127\.0\.0\.1:8080 is not one\. Set public_url in \/etc\/gshare\/config\.toml/,
    );
    expect(steps[1]).toContain("restart");
    expect(steps[1]).toMatch(/to do: a session domain: the server has no default/);
    expect(steps[2]).toContain("Create an offering");
    expect(steps[3]).toContain("Start a session");
    expect(screen.getByRole("link", { name: "Offerings" }).getAttribute("href")).toBe("/offerings");
    expect(screen.getByRole("button", { name: "Register the first cluster" })).toBeTruthy();
  });

  it("attach is not offered while the cluster lacks a session domain; it is set right there, then attach is offered", async () => {
    const calls = stubFetch({
      "GET /api/v1/clusters": () => ({
        body: page([
          cluster({ session_domain: null, effective_session_domain: null, operator: { state: "not_attached", likely_causes: [] } }),
        ]),
      }),
      "GET /api/v1/settings": () => ({ body: settings() }),
      "PATCH /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: cluster({ session_domain: "s.example" }) }),
    });
    render(<ClustersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Attach operator to gpu-a" }));
    const dialog = await screen.findByRole("dialog", { name: "Attach the operator to gpu-a" });
    await within(dialog).findByText("Before the operator can be attached");
    expect(within(dialog).queryByRole("button", { name: "Attach operator" })).toBeNull();
    expect(dialog.textContent).toContain("gpu-a has no session domain");
    fireEvent.input(within(dialog).getByLabelText("Session domain for gpu-a"), { target: { value: "s.example" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Set the session domain" }));
    await within(dialog).findByRole("button", { name: "Attach operator" });
    expect(calls.filter((c) => c.method === "PATCH").map((c) => c.body)).toEqual([{ session_domain: "s.example" }]);
  });

  it("says how to fix a loopback public URL where the server's refusal named a CLI flag", async () => {
    stubFetch({
      "GET /api/v1/clusters": () => ({ body: page([cluster({ operator: { state: "not_attached", likely_causes: [] } })]) }),
      // The settings cannot be read: attach is offered, and its refusal is put in the console's words.
      "GET /api/v1/settings": () => ({ status: 500, body: { error: { code: "internal", message: "boom", details: {} } } }),
      "POST /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA/attach": () => ({
        status: 422,
        body: {
          error: {
            code: "setting_required",
            message:
              "public_url is `http://127.0.0.1:8080`, which an operator inside the cluster cannot reach; set public_url (GSHARE_PUBLIC_URL) …, or pass --control-plane-url",
            details: { setting: "public_url" },
          },
        },
      }),
    });
    render(<ClustersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Attach operator to gpu-a" }));
    const dialog = await screen.findByRole("dialog", { name: "Attach the operator to gpu-a" });
    fireEvent.click(within(dialog).getByRole("button", { name: "Attach operator" }));
    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("Set public_url in the server's config.toml (or GSHARE_PUBLIC_URL)");
    expect(alert.textContent).toContain("then restart the server");
    expect(alert.textContent).not.toContain("--control-plane-url");
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
