import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { MySessionsPage } from "./MySessions";
import { stubEventSource } from "../test/events";
import { offering, page, session, stubFetch, type Call } from "../test/fetch";

const ID = "ses_01JAAAAAAAAAAAAAAAAAAAAAAA";
const listCalls = (calls: Call[]) => calls.filter((c) => c.method === "GET" && c.path.startsWith("/api/v1/sessions?"));
const mine = (over: Record<string, unknown> = {}) =>
  session({ owner: "alice", cpu: 4, mem_gb: 16, disk_gb: 50, idle_timeout_sec: 1800, max_runtime_sec: 0, ...over });

describe("MySessionsPage", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  it("shows the catalogue with what each offering gives, and an empty list in words", async () => {
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/offerings": () => ({
        body: { data: [offering(), offering({ id: "off_01JBBBBBBBBBBBBBBBBBBBBBBB", name: "closed", status: "inactive" })] },
      }),
    });
    render(<MySessionsPage username="alice" />);
    await screen.findByText("No live session, alice. Start one from the catalogue below.");
    const item = (await screen.findByRole("heading", { name: "A100 20 GB slice" })).closest("li") as HTMLElement;
    const facts = Object.fromEntries(
      Array.from(item.querySelectorAll("dl.gives > div")).map((d) => [
        d.querySelector("dt")?.textContent,
        d.querySelector("dd")?.textContent,
      ]),
    );
    expect(facts).toEqual({
      "GPU memory": "20 GiB",
      "GPU cores": "30%",
      CPU: "4 cores",
      RAM: "16 GB",
      "Idle timeout": "30m",
      Disk: "50 GB",
      "Max runtime": "no cap",
    });
    // Only active offerings can be started; the list asks for live sessions only.
    expect(screen.queryByText("closed")).toBeNull();
    expect(listCalls(calls)[0].path).toContain("live=true");
    // A member's page reads no admin route.
    expect(calls.filter((c) => !/^\/api\/v1\/(sessions|offerings|volumes|account)\b/.test(c.path))).toEqual([]);
  });

  it("starts a session from the catalogue with the keyboard only: Start, a name, Enter", async () => {
    let created = false;
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page(created ? [mine({ name: "thesis", phase: "pending", actions: ["delete"] })] : []) }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "POST /api/v1/sessions": () => {
        created = true;
        return { status: 201, body: mine({ name: "thesis", phase: "pending", actions: ["delete"] }) };
      },
    });
    render(<MySessionsPage username="alice" />);
    const start = await screen.findByRole("button", { name: "Start a session from A100 20 GB slice" });
    start.focus();
    fireEvent.click(start);
    const dialog = await screen.findByRole("dialog", { name: "Start A100 20 GB slice" });
    // Focus is in the name field: type, then Enter submits the form.
    const name = within(dialog).getByLabelText(/Name/);
    await waitFor(() => expect(document.activeElement).toBe(name));
    fireEvent.input(name, { target: { value: " thesis " } });
    fireEvent.submit(name.closest("form") as HTMLFormElement);
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    const post = calls.find((c) => c.method === "POST");
    expect(post?.body).toEqual({ offering_id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA", name: "thesis" });
    expect(post?.headers["Idempotency-Key"]).toMatch(/^[0-9a-f-]{36}$/);
    // Back on the button that opened it; the new session shows, pending.
    expect(document.activeElement).toBe(start);
    await waitFor(() => expect(screen.getByRole("status").textContent).toContain("thesis is starting"));
    const card = (await screen.findByRole("heading", { name: "thesis" })).closest("li") as HTMLElement;
    expect(card.querySelector('[aria-current="step"]')?.textContent).toBe("pending");
    expect(within(card).getByRole("button", { name: "Open JupyterLab of thesis" })).toHaveProperty("disabled", true);
  });

  it("says in the start dialog that a volume lives on one cluster, naming where the member's workspace is", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "GET /api/v1/volumes": () => ({
        body: {
          data: [
            {
              id: "vol_1",
              kind: "home",
              owner: "alice",
              state: "active",
              cluster_id: "clu_a",
              cluster_name: "gpu-a",
              size_gb: 20,
              mounted_by: [],
            },
          ],
          orphans: [],
        },
      }),
    });
    render(<MySessionsPage username="alice" />);
    fireEvent.click(await screen.findByRole("button", { name: "Start a session from A100 20 GB slice" }));
    const dialog = await screen.findByRole("dialog", { name: "Start A100 20 GB slice" });
    const note = await within(dialog).findByRole("note");
    expect(note.textContent).toBe(
      "Your workspace is on gpu-a. A volume lives on one cluster: if this session is placed on another cluster, it starts there with a new, empty workspace (your files stay on gpu-a).",
    );
  });

  it("shows a queued session's place in line and why it waits", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({
        body: page([
          mine({
            id: "ses_q",
            name: "waiting",
            phase: "pending",
            actions: ["delete"],
            queue_position: 2,
            queued_reason: "no_gpu_capacity",
          }),
          mine({ id: "ses_r", name: "started", phase: "pending", queue_position: null, queued_reason: null }),
        ]),
      }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
    });
    render(<MySessionsPage username="alice" />);
    const waiting = (await screen.findByRole("heading", { name: "waiting" })).closest("li") as HTMLElement;
    expect(waiting.textContent).toContain("Queued: number 2 in line (no card is free for it now)");
    const started = screen.getByRole("heading", { name: "started" }).closest("li") as HTMLElement;
    expect(started.textContent).not.toContain("Queued");
  });

  it("shows each live session's scratch disk use, and warns near its limit", async () => {
    const GIB = 1024 ** 3;
    stubFetch({
      "GET /api/v1/sessions": () => ({
        body: page([
          mine({
            id: "ses_1",
            name: "full",
            phase: "running",
            ephemeral_disk: { used_bytes: 19 * GIB, limit_bytes: 20 * GIB, used_pct: 95, near_limit: true },
          }),
          mine({
            id: "ses_2",
            name: "roomy",
            phase: "running",
            ephemeral_disk: { used_bytes: 5 * GIB, limit_bytes: 20 * GIB, used_pct: 25, near_limit: false },
          }),
        ]),
      }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
    });
    render(<MySessionsPage username="alice" />);
    const full = (await screen.findByRole("heading", { name: "full" })).closest("li") as HTMLElement;
    expect(within(full).getByRole("note").textContent).toContain("Scratch disk nearly full: 19 GiB of 20 GiB (95%).");
    const roomy = screen.getByRole("heading", { name: "roomy" }).closest("li") as HTMLElement;
    expect(within(roomy).queryByRole("note")).toBeNull();
    expect(roomy.textContent).toContain("Scratch disk: 5 GiB of 20 GiB (25%)");
  });

  it("follows the phase live: pending, preparing, running on sessions events, then the apps open", async () => {
    const source = stubEventSource();
    let phase = "pending";
    stubFetch({
      "GET /api/v1/sessions": () => ({
        body: page([mine({ phase, actions: phase === "running" ? ["pause", "delete", "connect"] : ["delete"] })]),
      }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
    });
    render(<MySessionsPage username="alice" />);
    const step = async (want: string) =>
      waitFor(() => expect(document.querySelector(`[data-session-id="${ID}"] [aria-current="step"]`)?.textContent).toBe(want));
    await step("pending");
    const es = source();
    es.emit("hello");
    phase = "preparing";
    es.emit("sessions");
    await step("preparing");
    phase = "running";
    es.emit("sessions");
    await step("running");
    await waitFor(() => expect(screen.getByRole("button", { name: "Open JupyterLab of notebook-a" })).toHaveProperty("disabled", false));
  });

  it("opens lab in a new tab, pauses, resumes, and ends only after the confirmation", async () => {
    const url = "http://s.example/proxy/ses-01jaaa/lab?gshare_cnx=cnx_1";
    let phase = "running";
    const actions = () => (phase === "running" ? ["pause", "delete", "connect"] : ["resume", "delete"]);
    const calls = stubFetch({
      "GET /api/v1/sessions": () => ({ body: page(phase === "terminated" ? [] : [mine({ phase, actions: actions() })]) }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      [`POST /api/v1/sessions/${ID}/connect`]: () => ({ body: { kind: "lab", url, token: "cnx_1", expires_at: "" } }),
      [`POST /api/v1/sessions/${ID}/pause`]: () => ((phase = "paused"), { body: mine({ phase, actions: actions() }) }),
      [`POST /api/v1/sessions/${ID}/resume`]: () => ((phase = "running"), { body: mine({ phase, actions: actions() }) }),
      [`DELETE /api/v1/sessions/${ID}`]: () => ((phase = "terminated"), { body: mine({ phase, actions: [] }) }),
    });
    const tab = { closed: false, opener: {}, location: { href: "" }, close: vi.fn(), document: { title: "", body: { textContent: "" } } };
    const open = vi.spyOn(window, "open").mockReturnValue(tab as never);
    render(<MySessionsPage username="alice" />);
    fireEvent.click(await screen.findByRole("button", { name: "Open JupyterLab of notebook-a" }));
    expect(open).toHaveBeenCalledWith("", "_blank");
    await waitFor(() => expect(tab.location.href).toBe(url));
    expect(calls.find((c) => c.path.endsWith("/connect"))?.body).toEqual({ kind: "lab" });

    fireEvent.click(screen.getByRole("button", { name: "Pause notebook-a" }));
    await waitFor(() => expect(screen.getByRole("button", { name: "Resume notebook-a" })).toHaveProperty("disabled", false));
    expect(document.querySelector(".badge.phase")?.textContent).toBe("paused");
    fireEvent.click(screen.getByRole("button", { name: "Resume notebook-a" }));
    await waitFor(() => expect(screen.getByRole("button", { name: "Pause notebook-a" })).toHaveProperty("disabled", false));

    // End asks first; Keep it (focused) changes nothing.
    fireEvent.click(screen.getByRole("button", { name: "End notebook-a" }));
    let dialog = await screen.findByRole("dialog", { name: "End session" });
    await waitFor(() => expect(document.activeElement?.textContent).toBe("Keep it"));
    fireEvent.click(within(dialog).getByRole("button", { name: "Keep it" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    fireEvent.click(screen.getByRole("button", { name: "End notebook-a" }));
    dialog = await screen.findByRole("dialog", { name: "End session" });
    fireEvent.click(within(dialog).getByRole("button", { name: "End session" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.path)).toEqual([`/api/v1/sessions/${ID}`]);
    await screen.findByText(/No live session/);
  });

  it("tells a member what to do about a refusal without pointing at admin pages", async () => {
    stubFetch({
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "POST /api/v1/sessions": () => ({
        status: 409,
        body: { error: { code: "no_cluster", message: "no connected cluster can take the session", details: {}, request_id: "r" } },
      }),
    });
    render(<MySessionsPage username="alice" />);
    fireEvent.click(await screen.findByRole("button", { name: "Start a session from A100 20 GB slice" }));
    const dialog = await screen.findByRole("dialog");
    fireEvent.click(within(dialog).getByRole("button", { name: "Start session" }));
    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("no connected cluster can take the session");
    expect(alert.textContent).toContain("tell your lab's admin");
    expect(alert.querySelector("a")).toBeNull();
  });
});
