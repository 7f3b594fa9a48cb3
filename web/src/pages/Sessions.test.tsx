import { act, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { SessionsPage } from "./Sessions";
import { choose } from "../test/dom";
import { cluster, offering, page, session, stubFetch, type Call } from "../test/fetch";

const paused = () =>
  session({
    id: "ses_01JBBBBBBBBBBBBBBBBBBBBBBB",
    name: null,
    cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
    cluster_name: "gpu-b",
    owner: "bob",
    phase: "paused",
    reason: "idle",
    message: "no activity for 30m",
    bound_gpu_uuid: null,
    node_name: null,
    actions: ["resume", "delete"],
  });
const failed = () =>
  session({
    id: "ses_01JCCCCCCCCCCCCCCCCCCCCCCC",
    name: "broken",
    phase: "error",
    reason: "apply_failed",
    message: "admission webhook denied the pod",
    actions: ["delete"],
  });

const params = (c: Call) => Object.fromEntries(new URL(c.path, "http://x").searchParams);
const listCalls = (calls: Call[]) => calls.filter((c) => c.method === "GET" && c.path.startsWith("/api/v1/sessions?"));
const clusters = () => ({
  body: page([cluster(), cluster({ id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB", name: "gpu-b", status: "unreachable" })]),
});
const err = (status: number, code: string, message: string, details: Record<string, unknown> = {}) => ({
  status,
  body: { error: { code, message, details, request_id: "req_1" } },
});

describe("SessionsPage", () => {
  afterEach(() => vi.restoreAllMocks());

  it("lists sessions with their columns, phases, reasons, node and GPU", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session(), paused(), failed()]) }),
      "GET /api/v1/clusters": clusters,
    });
    const { container } = render(<SessionsPage />);
    await screen.findByText("notebook-a");
    const headers = Array.from(container.querySelectorAll("thead th")).map((th) => th.textContent);
    expect(headers).toEqual(["Session", "Cluster", "Owner", "Offering", "Phase", "Age", "Node / GPU", "Open", "Actions"]);
    expect(screen.getByText("3 live sessions")).toBeTruthy();

    const running = container.querySelector('[data-session-id="ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(running.querySelector(".badge")?.textContent).toBe("running");
    expect(running.textContent).toContain("gpu-a");
    expect(running.textContent).toContain("alice");
    expect(running.textContent).toContain("A100 20 GB slice");
    expect(running.textContent).toContain("gpu-node-0");
    expect(running.textContent).toContain("GPU-3f2a9c1e-000…");
    expect(running.textContent).toContain("fractional · 20 GiB · 30% cores");
    expect(running.querySelector(".age")?.textContent).toMatch(/^2m 0\ds$/);
    expect(within(running).getByRole("button", { name: "Copy id: ses_01JAAAAAAAAAAAAAAAAAAAAAAA" })).toBeTruthy();
    expect(running.querySelector(".phase-reason")).toBeNull();

    const p = container.querySelector('[data-session-id="ses_01JBBBBBBBBBBBBBBBBBBBBBBB"]') as HTMLElement;
    // On gpu-b, which is unreachable: the phase is the last one reported.
    expect(p.querySelector(".badge")?.textContent).toBe("paused?");
    expect(p.querySelector(".phase-reason.muted")?.textContent).toBe("idle timeout: no activity for 30m");
    expect(p.textContent).toContain("unnamed");
    const e = container.querySelector('[data-session-id="ses_01JCCCCCCCCCCCCCCCCCCCCCCC"]') as HTMLElement;
    expect(e.querySelector(".phase-reason.bad")?.textContent).toBe("apply to the cluster failed: admission webhook denied the pod");
  });

  it("shows a queued session's place in its cluster's queue", async () => {
    const queued = session({
      id: "ses_01JDDDDDDDDDDDDDDDDDDDDDDD",
      name: "waiting",
      phase: "pending",
      bound_gpu_uuid: null,
      node_name: null,
      actions: ["delete"],
      queue_position: 1,
      queued_reason: "queue_ahead",
    });
    stubFetch({ "GET /api/v1/sessions": () => ({ body: page([session(), queued]) }), "GET /api/v1/clusters": clusters });
    const { container } = render(<SessionsPage />);
    await screen.findByText("waiting");
    const row = container.querySelector('[data-session-id="ses_01JDDDDDDDDDDDDDDDDDDDDDDD"]') as HTMLElement;
    expect(row.querySelector(".queue-place")?.textContent).toBe(
      "Queued: number 1 in line (others wait before it); it starts when its cluster has room",
    );
    const running = container.querySelector('[data-session-id="ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(running.querySelector(".queue-place")).toBeNull();
  });

  it("marks an owner that names no account: a deleted account's, or free text", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({
        body: page([
          session({ owner: "alice", owner_account: "account" }),
          session({ id: "ses_01JBBBBBBBBBBBBBBBBBBBBBBB", owner: "pete", owner_account: "deleted" }),
          session({ id: "ses_01JCCCCCCCCCCCCCCCCCCCCCCC", owner: "lab-guest", owner_account: "external" }),
        ]),
      }),
      "GET /api/v1/clusters": clusters,
    });
    const { container } = render(<SessionsPage />);
    await waitFor(() => expect(container.querySelectorAll("tr.session-row").length).toBe(3));
    const owner = (id: string) => (container.querySelector(`[data-session-id="${id}"]`) as HTMLElement).querySelectorAll("td")[2];
    expect(owner("ses_01JAAAAAAAAAAAAAAAAAAAAAAA").textContent).toBe("alice");
    expect(owner("ses_01JAAAAAAAAAAAAAAAAAAAAAAA").querySelector(".owner-mark")).toBeNull();
    expect(owner("ses_01JBBBBBBBBBBBBBBBBBBBBBBB").textContent).toBe("petedeleted account");
    expect(owner("ses_01JBBBBBBBBBBBBBBBBBBBBBBB").querySelector(".owner-mark")?.getAttribute("title")).toMatch(/deleted/);
    expect(owner("ses_01JCCCCCCCCCCCCCCCCCCCCCCC").querySelector(".owner-mark.external")?.textContent).toBe("external");
  });

  it("puts the filters in the query string, live only by default", async () => {
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
    });
    render(<SessionsPage />);
    await screen.findByText("notebook-a");
    expect(params(listCalls(calls)[0])).toEqual({ page: "1", size: "50", live: "true" });
    expect((screen.getByLabelText("Live only") as HTMLInputElement).checked).toBe(true);

    await screen.findByRole("option", { name: "gpu-b" });
    choose(screen.getByLabelText("Filter by cluster"), "clu_01JBBBBBBBBBBBBBBBBBBBBBBB");
    await waitFor(() =>
      expect(params(listCalls(calls).at(-1)!)).toEqual({
        page: "1",
        size: "50",
        live: "true",
        cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
      }),
    );
    choose(screen.getByLabelText("Filter by phase"), "error");
    await waitFor(() => expect(params(listCalls(calls).at(-1)!).phase).toBe("error"));
    fireEvent.click(screen.getByLabelText("Live only"));
    await waitFor(() =>
      expect(params(listCalls(calls).at(-1)!)).toEqual({
        page: "1",
        size: "50",
        cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
        phase: "error",
      }),
    );
  });

  it("shows loading, then the empty state", async () => {
    stubFetch({ "GET /api/v1/sessions": () => ({ body: page([]) }), "GET /api/v1/clusters": clusters });
    render(<SessionsPage />);
    expect(screen.getByText("Loading sessions…")).toBeTruthy();
    await screen.findByText("No live sessions.");
    expect(screen.getByRole("button", { name: "Start a session" })).toBeTruthy();
  });

  it("shows an error when the list cannot load", async () => {
    stubFetch({ "GET /api/v1/sessions": () => err(500, "internal", "boom"), "GET /api/v1/clusters": clusters });
    render(<SessionsPage />);
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("Cannot load sessions: boom"));
  });

  it("enables the row buttons from actions, not from the phase", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session({ actions: ["delete"] }), paused()]) }),
      "GET /api/v1/clusters": clusters,
    });
    render(<SessionsPage />);
    await screen.findByText("notebook-a");
    const disabled = (name: string) => (screen.getByRole("button", { name }) as HTMLButtonElement).disabled;
    // Running, but the server allows only delete right now.
    expect(disabled("Pause notebook-a")).toBe(true);
    expect(disabled("Resume notebook-a")).toBe(true);
    expect(disabled("Delete notebook-a")).toBe(false);
    expect(disabled("Open code of notebook-a")).toBe(true);
    const b = "ses_01JBBBBBBBBBBBBBBBBBBBBBBB";
    expect(disabled(`Pause ${b}`)).toBe(true);
    expect(disabled(`Resume ${b}`)).toBe(false);
    expect(disabled(`Open lab of ${b}`)).toBe(true);
  });

  it("pauses and resumes through their endpoints and refreshes the list", async () => {
    let phase = "running";
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({
        body: page([session({ phase, actions: phase === "running" ? ["pause", "delete", "connect"] : ["resume", "delete"] })]),
      }),
      "GET /api/v1/clusters": clusters,
      "POST /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/pause": () => {
        phase = "paused";
        return { body: session({ phase }) };
      },
      "POST /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/resume": () =>
        err(409, "session_conflict", "session is terminating", { phase: "terminating", allowed: ["delete"] }),
    });
    const { container } = render(<SessionsPage />);
    const pause = await screen.findByRole("button", { name: "Pause notebook-a" });
    fireEvent.click(pause);
    // Pause asks first: nothing is sent until it is confirmed.
    const confirm = screen.getByRole("dialog", { name: "Pause session" });
    expect(confirm.textContent).toContain("Its pod is stopped");
    expect(calls.filter((c) => c.method === "POST")).toEqual([]);
    fireEvent.click(within(confirm).getByRole("button", { name: "Keep it running" }));
    expect(screen.queryByRole("dialog")).toBeNull();
    expect(calls.filter((c) => c.method === "POST")).toEqual([]);
    fireEvent.click(pause);
    fireEvent.click(within(screen.getByRole("dialog", { name: "Pause session" })).getByRole("button", { name: "Pause notebook-a" }));
    await waitFor(() => expect(container.querySelector(".badge")?.textContent).toBe("paused"));
    // Focus stays in the row (Pause is disabled now: the row's first enabled control), not on the page's start.
    await waitFor(() =>
      expect(document.activeElement?.closest("tr")?.getAttribute("data-session-id")).toBe("ses_01JAAAAAAAAAAAAAAAAAAAAAAA"),
    );
    expect(calls.filter((c) => c.method === "POST").map((c) => c.path)).toEqual(["/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/pause"]);
    expect(listCalls(calls).length).toBe(2);

    const resume = screen.getByRole("button", { name: "Resume notebook-a" }) as HTMLButtonElement;
    expect(resume.disabled).toBe(false);
    fireEvent.click(resume);
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("session is terminating");
    expect(alert.textContent).toContain("allowed: delete");
    expect(calls.filter((c) => c.method === "POST").at(-1)!.path).toBe("/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/resume");
  });

  it("deletes after a confirmation naming the session, and forces only after cluster_unreachable", async () => {
    let reachable = false;
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "DELETE /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA": (c) =>
        reachable || c.path.endsWith("?force=true")
          ? { body: session({ phase: c.path.endsWith("?force=true") ? "terminated" : "terminating" }) }
          : err(502, "cluster_unreachable", "cluster gpu-a cannot be reached"),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete notebook-a" }));
    const dialog = screen.getByRole("dialog", { name: "Delete session" });
    expect(dialog.textContent).toContain("Delete session notebook-a ses_01JAAAAAAAAAAAAAAAAAAAAAAA on gpu-a?");
    expect(document.activeElement).toBe(within(dialog).getByRole("button", { name: "Keep it" }));
    expect(within(dialog).queryByRole("button", { name: "Force delete…" })).toBeNull();

    fireEvent.click(within(dialog).getByRole("button", { name: "Delete session" }));
    await within(dialog).findByText(/cluster gpu-a cannot be reached/);
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.path)).toEqual(["/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]);
    fireEvent.click(within(dialog).getByRole("button", { name: "Force delete…" }));
    fireEvent.click(within(dialog).getByRole("button", { name: "Force delete notebook-a" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.path)).toEqual([
      "/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
      "/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA?force=true",
    ]);
    reachable = true;
  });

  it("deletes normally when the cluster answers", async () => {
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "DELETE /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: session({ phase: "terminating" }) }),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete notebook-a" }));
    fireEvent.click(screen.getByRole("button", { name: "Delete session" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.path)).toEqual(["/api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]);
    await waitFor(() => expect(listCalls(calls).length).toBe(2));
  });

  it("an ended session's age stands still and its row has no dead buttons", async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true });
    const over = session({
      phase: "terminated",
      reason: "user_stopped",
      created_at: new Date(Date.now() - 3_600_000).toISOString(),
      ended_at: new Date(Date.now() - 600_000).toISOString(),
      actions: [],
      live: false,
    });
    stubFetch({ "GET /api/v1/sessions": () => ({ body: page([over, paused()]) }), "GET /api/v1/clusters": clusters });
    const { container } = render(<SessionsPage />);
    await screen.findByText("notebook-a");
    const row = container.querySelector('[data-session-id="ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(row.querySelector(".age")?.textContent).toBe("lived 50m 00s");
    await act(async () => {
      await vi.advanceTimersByTimeAsync(3000);
    });
    expect(row.querySelector(".age")?.textContent).toBe("lived 50m 00s");
    // Only the copy button: no disabled Open, Pause, Resume or Delete.
    expect(
      within(row)
        .getAllByRole("button")
        .map((b) => b.getAttribute("aria-label")),
    ).toEqual(["Copy id: ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]);
    expect(row.textContent).toContain("ended");
    // A live row keeps its buttons (disabled ones say what the phase does not allow now).
    const live = container.querySelector('[data-session-id="ses_01JBBBBBBBBBBBBBBBBBBBBBBB"]') as HTMLElement;
    expect(within(live).getByRole("button", { name: /^Pause / })).toBeTruthy();
    vi.useRealTimers();
  });

  it("does not call a session on an unreachable cluster plain running", async () => {
    const onB = session({
      id: "ses_01JDDDDDDDDDDDDDDDDDDDDDDD",
      name: "on-b",
      cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
      cluster_name: "gpu-b",
    });
    stubFetch({ "GET /api/v1/sessions": () => ({ body: page([session(), onB]) }), "GET /api/v1/clusters": clusters });
    const { container } = render(<SessionsPage />);
    await screen.findByText("on-b");
    const row = container.querySelector('[data-session-id="ses_01JDDDDDDDDDDDDDDDDDDDDDDD"]') as HTMLElement;
    await waitFor(() => expect(row.querySelector(".badge")?.textContent).toBe("running?"));
    expect(row.querySelector(".phase-reason")?.textContent).toContain("cluster gpu-b is unreachable, so it may have changed since");
    const ok = container.querySelector('[data-session-id="ses_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(ok.querySelector(".badge")?.textContent).toBe("running");
  });

  it("a failed delete on an unreachable cluster offers the Force delete button, not the API's ?force=true", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "DELETE /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA": () =>
        err(502, "cluster_unreachable", "cluster gpu-a cannot be reached", {
          cause: "connection refused",
          hint: "check the cluster on the Clusters page; if it is gone for good, delete with ?force=true",
        }),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete notebook-a" }));
    const dialog = screen.getByRole("dialog", { name: "Delete session" });
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete session" }));
    await within(dialog).findByText(/cluster gpu-a cannot be reached/);
    expect(dialog.textContent).toContain("connection refused");
    expect(dialog.textContent).not.toContain("force=true");
    expect(within(dialog).getByRole("button", { name: "Force delete…" })).toBeTruthy();
  });

  it("after a delete removes the row, focus goes to the row now in its place, not to the page's start", async () => {
    let gone = false;
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page(gone ? [paused()] : [session(), paused()]) }),
      "GET /api/v1/clusters": clusters,
      "DELETE /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA": () => {
        gone = true;
        return { body: session({ phase: "terminating" }) };
      },
    });
    render(<SessionsPage />);
    const del = await screen.findByRole("button", { name: "Delete notebook-a" });
    del.focus();
    fireEvent.click(del);
    fireEvent.click(screen.getByRole("button", { name: "Delete session" }));
    await waitFor(() => expect(screen.queryByText("notebook-a")).toBeNull());
    await waitFor(() =>
      expect(document.activeElement?.closest("tr")?.getAttribute("data-session-id")).toBe("ses_01JBBBBBBBBBBBBBBBBBBBBBBB"),
    );
  });

  it("opens a tab on click and points it at the connect URL", async () => {
    const url = "https://s.example/proxy/ses-01jaaa/code/?gshare_cnx=cnx_1";
    let resolve: () => void = () => {};
    const gate = new Promise<void>((r) => (resolve = r));
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "POST /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/connect": async () => {
        await gate;
        return { body: { url, token: "cnx_1", expires_at: new Date(Date.now() + 60_000).toISOString() } };
      },
    });
    const tab = { closed: false, opener: {}, location: { href: "" }, close: vi.fn(), document: { title: "", body: { textContent: "" } } };
    const open = vi.spyOn(window, "open").mockReturnValue(tab as never);
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Open code of notebook-a" }));
    // Synchronously, before the server answered: a popup blocker lets this through.
    expect(open).toHaveBeenCalledWith("", "_blank");
    expect(tab.opener).toBeNull();
    expect(tab.location.href).toBe("");
    resolve();
    await waitFor(() => expect(tab.location.href).toBe(url));
    expect(calls.find((c) => c.path.endsWith("/connect"))?.body).toEqual({ kind: "code" });
  });

  it("closes the tab and explains a missing session domain", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "POST /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/connect": () =>
        err(409, "no_session_domain", "cluster gpu-a has no session domain"),
    });
    const tab = { closed: false, opener: {}, location: { href: "" }, close: vi.fn(), document: { title: "", body: { textContent: "" } } };
    vi.spyOn(window, "open").mockReturnValue(tab as never);
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Open terminal of notebook-a" }));
    const alert = await screen.findByRole("alert");
    expect(tab.close).toHaveBeenCalled();
    expect(alert.textContent).toContain("cluster gpu-a has no session domain");
    expect(within(alert).getByRole("link", { name: "Clusters page" }).getAttribute("href")).toBe("/clusters");
  });

  it("offers a link when the browser blocked the tab", async () => {
    const url = "https://s.example/proxy/ses-01jaaa/lab/?gshare_cnx=cnx_2";
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([session()]) }),
      "GET /api/v1/clusters": clusters,
      "POST /api/v1/sessions/ses_01JAAAAAAAAAAAAAAAAAAAAAAA/connect": () => ({ body: { url, token: "cnx_2", expires_at: "" } }),
    });
    vi.spyOn(window, "open").mockReturnValue(null);
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Open lab of notebook-a" }));
    const link = await screen.findByRole("link", { name: "open lab of notebook-a" });
    expect(link.getAttribute("href")).toBe(url);
    expect(link.getAttribute("target")).toBe("_blank");
  });
});

describe("New session dialog", () => {
  afterEach(() => vi.restoreAllMocks());

  it("posts the chosen offering and cluster with an Idempotency-Key, shows 409 and 502 in the dialog, then closes on success", async () => {
    let answer: () => { status?: number; body?: unknown } = () =>
      err(409, "cluster_unavailable", "cluster gpu-b is unreachable", {
        cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
        status: "unreachable",
      });
    let created = false;
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page(created ? [session({ name: "mine" })] : []) }),
      "GET /api/v1/clusters": clusters,
      "GET /api/v1/offerings": () => ({
        body: {
          data: [
            offering(),
            offering({
              id: "off_01JCPU",
              name: "CPU small",
              resource_class: "cpu",
              mode: null,
              gpu_model: null,
              gpu_mem_mb: null,
              gpu_cores: null,
              cpu: 2,
              mem_gb: 4,
              disk_gb: 10,
              image: "registry.example/cpu:1",
            }),
          ],
        },
      }),
      "POST /api/v1/sessions": () => answer(),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New session" }));
    const dialog = screen.getByRole("dialog", { name: "New session" });
    await within(dialog).findByRole("option", { name: "CPU small" });
    expect(calls.some((c) => c.path === "/api/v1/offerings?status=active")).toBe(true);
    expect((within(dialog).getByRole("button", { name: "Start session" }) as HTMLButtonElement).disabled).toBe(true);

    choose(within(dialog).getByLabelText("Offering"), "off_01JAAAAAAAAAAAAAAAAAAAAAAA");
    const shape = await within(dialog).findByLabelText("Shape of the chosen offering");
    expect(shape.textContent).toContain("NVIDIA A100 · 20 GiB · 30% cores · fractional");
    expect(shape.textContent).toContain("4 CPU · 16 GB memory · 50 GB disk");
    expect(shape.textContent).toContain("registry.example/notebook:1.2");
    expect(shape.textContent).toContain("30m / no cap");
    await within(dialog).findByRole("option", { name: "gpu-b (unreachable)" });
    expect((within(dialog).getByLabelText("Cluster") as HTMLSelectElement).value).toBe("");
    choose(within(dialog).getByLabelText("Cluster"), "clu_01JBBBBBBBBBBBBBBBBBBBBBBB");
    fireEvent.input(within(dialog).getByLabelText(/Name/), { target: { value: "mine" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Start session" }));

    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("cluster gpu-b is unreachable");
    expect(alert.textContent).toContain("pick another cluster");
    const posts = () => calls.filter((c) => c.method === "POST");
    expect(posts()[0].body).toEqual({
      offering_id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA",
      cluster_id: "clu_01JBBBBBBBBBBBBBBBBBBBBBBB",
      name: "mine",
    });
    const key = posts()[0].headers["Idempotency-Key"];
    expect(key).toMatch(/^[0-9a-f-]{36}$/);

    answer = () => err(502, "cluster_apply_failed", "the cluster refused the session", { cause: "admission webhook denied" });
    choose(within(dialog).getByLabelText("Cluster"), "");
    const before = listCalls(calls).length;
    fireEvent.click(within(dialog).getByRole("button", { name: "Start session" }));
    await within(dialog).findByText(/admission webhook denied/);
    expect(posts()[1].body).toEqual({ offering_id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA", name: "mine" });
    expect(posts()[1].headers["Idempotency-Key"]).not.toBe(key);
    // The failed apply is recorded with phase error: the list behind the dialog refreshes.
    await waitFor(() => expect(listCalls(calls).length).toBeGreaterThan(before));

    answer = () => {
      created = true;
      return { status: 201, body: session({ name: "mine" }) };
    };
    fireEvent.click(within(dialog).getByRole("button", { name: "Start session" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    // Same body as the failed attempt: the same key, so a retry cannot start two sessions.
    expect(posts()[2].headers["Idempotency-Key"]).toBe(posts()[1].headers["Idempotency-Key"]);
    await screen.findByText("mine");
  });

  it("marks clusters whose operator is not connected, says why when one is chosen, and explains the server's 409", async () => {
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/clusters": () => ({
        body: page([
          cluster({ operator: { state: "connected" } }),
          cluster({ id: "clu_01JCCCCCCCCCCCCCCCCCCCCCCC", name: "gpu-c", operator: { state: "not_attached", last_callback_age_s: null } }),
          cluster({ id: "clu_01JDDDDDDDDDDDDDDDDDDDDDDD", name: "gpu-d", operator: { state: "silent", last_callback_age_s: 900 } }),
        ]),
      }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "POST /api/v1/sessions": () =>
        err(409, "operator_not_connected", "the operator of cluster gpu-d is silent: its last callback was 900 s ago", {
          cluster_id: "clu_01JDDDDDDDDDDDDDDDDDDDDDDD",
          operator_state: "silent",
        }),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New session" }));
    const dialog = screen.getByRole("dialog", { name: "New session" });
    await within(dialog).findByRole("option", { name: "gpu-c (operator not attached)" });
    within(dialog).getByRole("option", { name: "gpu-d (operator silent)" });
    within(dialog).getByRole("option", { name: "gpu-a" });
    expect(within(dialog).queryByRole("note")).toBeNull();
    choose(within(dialog).getByLabelText("Cluster"), "clu_01JDDDDDDDDDDDDDDDDDDDDDDD");
    const note = await within(dialog).findByRole("note");
    expect(note.textContent).toContain("The operator of gpu-d is silent (last callback 900 s ago)");
    expect(note.textContent).toContain("the server refuses it");
    fireEvent.click(within(dialog).getByRole("button", { name: "Start session" }));
    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("its last callback was 900 s ago");
    expect(alert.textContent).toContain("attach it or see why it is silent");
    expect(calls.filter((c) => c.method === "POST")[0].body).toEqual({
      offering_id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA",
      cluster_id: "clu_01JDDDDDDDDDDDDDDDDDDDDDDD",
    });
    // A connected one: no note.
    choose(within(dialog).getByLabelText("Cluster"), "clu_01JAAAAAAAAAAAAAAAAAAAAAAA");
    await waitFor(() => expect(within(dialog).queryByRole("note")).toBeNull());
  });

  it("closes on Escape and keeps focus inside", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/clusters": clusters,
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
    });
    render(<SessionsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New session" }));
    const dialog = screen.getByRole("dialog", { name: "New session" });
    expect(document.activeElement).toBe(within(dialog).getByLabelText("Offering"));
    // One active offering: chosen already, its shape shown.
    await within(dialog).findByLabelText("Shape of the chosen offering");
    fireEvent.keyDown(dialog, { key: "Escape" });
    expect(screen.queryByRole("dialog")).toBeNull();
  });
});
