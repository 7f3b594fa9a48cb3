import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { EditDialog } from "./EditDialog";
import { RegisterDialog } from "./RegisterDialog";
import { cluster, stubFetch, type Call } from "../test/fetch";

/** What a dialog sent, without the server settings it reads on opening. */
const sent = (calls: Call[]) => calls.filter((c) => c.path !== "/api/v1/settings");

const probeFailed = {
  status: 422,
  body: {
    error: {
      code: "probe_failed",
      message: "probe failed at stage connect",
      details: {
        stage: "connect",
        cause: "connection refused (127.0.0.1:6443)",
        hint: "the control plane must reach 127.0.0.1 itself",
        checks: [
          { name: "kubeconfig", ok: true, detail: "context fake" },
          { name: "connect", ok: false, detail: "connection refused" },
        ],
        missing: [],
      },
    },
  },
};

function fill(name: string, kubeconfig: string) {
  fireEvent.input(screen.getByLabelText("Name"), { target: { value: name } });
  fireEvent.input(screen.getByLabelText("or pasted"), { target: { value: kubeconfig } });
}

describe("RegisterDialog", () => {
  it("shows the probe's stage, cause, hint and checks, and retries with the same key", async () => {
    const calls = stubFetch({ "POST /api/v1/clusters": () => probeFailed });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "apiVersion: v1\nkind: Config\n");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("connect");
    expect(alert.textContent).toContain("connection refused (127.0.0.1:6443)");
    expect(alert.textContent).toContain("Hint: the control plane must reach 127.0.0.1 itself");
    expect(alert.querySelectorAll(".checks li.bad").length).toBe(1);
    const first = sent(calls)[0];
    expect(first.body).toEqual({ name: "gpu-a", role: "primary", kubeconfig_b64: btoa("apiVersion: v1\nkind: Config\n") });
    expect(first.headers["Idempotency-Key"]).toMatch(/^[0-9a-f-]{36}$/);

    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(sent(calls).length).toBe(2));
    expect(sent(calls)[1].headers["Idempotency-Key"]).toBe(first.headers["Idempotency-Key"]);
    fill("gpu-b", "apiVersion: v1\nkind: Config\n");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(sent(calls).length).toBe(3));
    expect(sent(calls)[2].headers["Idempotency-Key"]).not.toBe(first.headers["Idempotency-Key"]);
  });

  it("shows the new id, attaches the operator with per-object results, and offers commands that exist", async () => {
    const id = "clu_01JAAAAAAAAAAAAAAAAAAAAAAA";
    let attaches = 0;
    const calls = stubFetch({
      "POST /api/v1/clusters": (c) => ({
        status: 201,
        body: {
          ...cluster({ name: "gpu-a" }),
          checks: [{ name: "hami", ok: true, detail: "" }],
          session_domain: (c.body as { session_domain?: string }).session_domain,
        },
      }),
      [`POST /api/v1/clusters/${id}/attach`]: () => {
        attaches += 1;
        return attaches === 1
          ? {
              status: 409,
              body: { error: { code: "crd_conflict", message: "gsharesessions.gshare.io on the cluster differs", details: { crds: [] } } },
            }
          : {
              body: {
                cluster_id: id,
                changed: 2,
                objects: [
                  { object: "CustomResourceDefinition/gsharesessions.gshare.io", result: "updated" },
                  { object: "Deployment/gshare-system/gshare-operator", result: "created" },
                ],
                token: { kid: "k", expires_at: "2026-12-08T00:00:00.000Z" },
              },
            };
      },
    });
    const onRegistered = vi.fn();
    render(<RegisterDialog onClose={() => {}} onRegistered={onRegistered} />);
    fill("gpu-a", "kind: Config");
    fireEvent.input(screen.getByLabelText(/Session domain/), { target: { value: "s.example" } });
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await screen.findByText("Cluster registered");
    expect(onRegistered).toHaveBeenCalled();
    // No pointer at scripts that do not exist, nor at the browser's own address.
    expect(document.body.textContent).not.toContain("deploy-operator.sh");
    expect(document.body.textContent).not.toContain(location.origin);
    expect(document.body.textContent).toContain(`gshare operator manifests --cluster-id ${id}`);

    fireEvent.click(screen.getByRole("button", { name: "Attach operator" }));
    expect((await screen.findByRole("alert")).textContent).toContain("differs");
    fireEvent.click(screen.getByRole("button", { name: "Replace the CRDs and attach" }));
    await screen.findByText(/Operator attached: 2 of 2 objects changed/);
    expect(calls.filter((c) => c.path.includes("/attach")).map((c) => c.path.endsWith("?force=true"))).toEqual([false, true]);
    const rows = screen.getAllByRole("listitem").filter((li) => li.classList.contains("attach-object"));
    expect(rows.map((r) => r.textContent)).toEqual([
      "updated CustomResourceDefinition/gsharesessions.gshare.io",
      "created Deployment/gshare-system/gshare-operator",
    ]);
  });

  it("closes on Escape", () => {
    stubFetch({});
    const onClose = vi.fn();
    render(<RegisterDialog onClose={onClose} onRegistered={() => {}} />);
    fireEvent.keyDown(screen.getByRole("dialog"), { key: "Escape" });
    expect(onClose).toHaveBeenCalled();
  });
});

describe("EditDialog", () => {
  it("sends only the changed fields and warns about the session domain", async () => {
    const calls = stubFetch({ "PATCH /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: cluster() }) });
    const onClose = vi.fn();
    render(<EditDialog cluster={cluster() as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.input(screen.getByLabelText("Session domain"), { target: { value: "" } });
    expect(screen.getByRole("note").textContent).toContain("Existing sessions keep their ingress");
    fireEvent.change(screen.getByLabelText("Role"), { target: { value: "standby" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(onClose).toHaveBeenCalled());
    expect(calls[0].body).toEqual({ role: "standby", session_domain: "" });
  });

  it("sets and clears the session ingress", async () => {
    const calls = stubFetch({ "PATCH /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: cluster() }) });
    const onClose = vi.fn();
    const { unmount } = render(<EditDialog cluster={cluster() as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.input(screen.getByLabelText("Session ingress"), { target: { value: " gpu-node-1:30080 " } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(onClose).toHaveBeenCalledTimes(1));
    expect(calls[0].body).toEqual({ session_ingress: "gpu-node-1:30080" });
    unmount();
    render(<EditDialog cluster={{ ...cluster(), session_ingress: "gpu-node-1:30080" } as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.input(screen.getByLabelText("Session ingress"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(onClose).toHaveBeenCalledTimes(2));
    expect(calls[1].body).toEqual({ session_ingress: "" });
  });

  it("tests the connection", async () => {
    stubFetch({
      "POST /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA/connection-test": () => ({
        body: {
          cluster_id: "clu_01J",
          status: "degraded",
          checks: [{ name: "hami", ok: false, detail: "no HAMi annotations" }],
          latency_ms: 7,
          checked_at: new Date().toISOString(),
        },
      }),
    });
    render(<EditDialog cluster={cluster() as never} onClose={() => {}} onChanged={() => {}} />);
    fireEvent.click(screen.getByRole("button", { name: "Test connection" }));
    await screen.findByText("no HAMi annotations");
    expect(document.body.textContent).toContain("7 ms");
  });

  it("shows what blocks an unregister, then unregisters", async () => {
    let live = true;
    stubFetch({
      "DELETE /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () =>
        live
          ? {
              status: 409,
              body: {
                error: {
                  code: "cluster_in_use",
                  message: "2 live sessions and 1 allocation",
                  details: {
                    sessions: ["ses_1", "ses_2"],
                    allocations: ["alc_1"],
                    session_list: [
                      { id: "ses_1", name: "lab-1", phase: "running" },
                      { id: "ses_2", name: "lab-2", phase: "paused" },
                    ],
                    allocation_list: [{ id: "alc_1", session_id: "ses_1", session_name: "lab-1", gpu_uuid: "GPU-9", gpu_mem_mb: 20480 }],
                  },
                },
              },
            }
          : { status: 204 },
    });
    const onClose = vi.fn();
    render(<EditDialog cluster={cluster() as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.click(screen.getByRole("button", { name: "Unregister…" }));
    expect(document.body.textContent).toContain("nodes, GPU devices, storage pools and kubeconfig file are removed");
    fireEvent.click(screen.getByRole("button", { name: "Unregister gpu-a" }));
    await screen.findByText("Refused: the cluster is still in use.");
    // Names with links, not raw ids.
    expect(screen.getByRole("link", { name: "lab-2" }).getAttribute("href")).toBe("/sessions#ses_2");
    expect(screen.getAllByRole("link", { name: "lab-1" }).length).toBe(2);
    expect(document.body.textContent).toContain("20 GiB of GPU-9 held by lab-1");
    expect(document.body.textContent).not.toMatch(/ses_|alc_/);
    expect(document.body.textContent).toContain("2 live sessions");
    expect(document.body.textContent).toContain("1 open GPU allocation");
    expect(document.body.textContent).not.toContain("1 open GPU allocations");
    live = false;
    fireEvent.click(screen.getByRole("button", { name: "Unregister gpu-a" }));
    await waitFor(() => expect(onClose).toHaveBeenCalled());
  });
});

describe("keyboard focus", () => {
  it("puts focus in the first field, and on Keep it when confirming an unregister", async () => {
    stubFetch({});
    render(<EditDialog cluster={cluster() as never} onClose={() => {}} onChanged={() => {}} />);
    expect(document.activeElement).toBe(screen.getByLabelText("Name"));
    fireEvent.click(screen.getByRole("button", { name: "Unregister…" }));
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("button", { name: "Keep it" })));
  });
});

describe("RegisterDialog: what a new admin stumbles on", () => {
  it("shows stages that never ran as not run, neither passed nor failed", async () => {
    stubFetch({
      "POST /api/v1/clusters": () => ({
        status: 422,
        body: {
          error: {
            code: "probe_failed",
            message: "probe failed at stage connect",
            details: {
              stage: "connect",
              cause: "cannot connect to 127.0.0.1:1: Connection refused",
              hint: "nothing accepts connections on 127.0.0.1:1",
              checks: [
                { name: "kubeconfig", ok: true, detail: "parsed" },
                { name: "connect", ok: false, detail: "refused" },
                { name: "auth", ok: false, detail: "not run" },
                { name: "version", ok: false, detail: "not run" },
              ],
            },
          },
        },
      }),
    });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "apiVersion: v1\nkind: Config\n");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    const alert = await screen.findByRole("alert");
    expect(alert.querySelectorAll(".checks li.bad").length).toBe(1);
    const skipped = alert.querySelectorAll(".checks li.skipped");
    expect(skipped.length).toBe(2);
    expect(skipped[0].querySelector(".mark")?.textContent).toBe("–");
    expect(skipped[0].querySelector(".sr-only")?.textContent).toBe("not run");
    expect(alert.textContent?.match(/failed/g)?.length).toBe(2); // the heading and the one failed stage
  });

  it("names the cluster a duplicate registration collides with and opens it", async () => {
    stubFetch({
      "POST /api/v1/clusters": () => ({
        status: 409,
        body: {
          error: {
            code: "conflict",
            message: 'this is the same cluster as "gpu-a", which is already registered (same kube-system namespace UID)',
            details: { kube_system_uid: "u-1", cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA", cluster_name: "gpu-a" },
          },
        },
      }),
    });
    const onOpen = vi.fn();
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} onOpenCluster={onOpen} />);
    fill("gpu-b", "apiVersion: v1\nkind: Config\n");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain('same cluster as "gpu-a", which is already registered');
    expect(alert.textContent).not.toContain("clu_");
    fireEvent.click(screen.getByRole("button", { name: "Open gpu-a" }));
    expect(onOpen).toHaveBeenCalledWith("clu_01JAAAAAAAAAAAAAAAAAAAAAAA");
  });

  it("refuses a session domain with a scheme or path and an API address with spaces next to the field, sending nothing", async () => {
    const calls = stubFetch({});
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "apiVersion: v1\nkind: Config\n");
    const domain = screen.getByLabelText(/Session domain/);
    fireEvent.input(domain, { target: { value: "https://sessions.example.com/lab" } });
    fireEvent.input(screen.getByLabelText(/API address/), { target: { value: "https://10.0.0.5 :6443" } });
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(domain.getAttribute("aria-invalid")).toBe("true"));
    expect(document.getElementById("reg-domain-error")?.textContent).toBe(
      "Just the host name, without https:// — e.g. sessions.example.com.",
    );
    expect(domain.getAttribute("aria-describedby")).toContain("reg-domain-error");
    expect(document.getElementById("reg-api-error")?.textContent).toContain("no spaces");
    fireEvent.input(domain, { target: { value: "sessions.example.com/lab" } });
    fireEvent.input(screen.getByLabelText(/API address/), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(document.getElementById("reg-domain-error")?.textContent).toContain("without a path"));
    expect(sent(calls)).toEqual([]);
  });

  it("sends the API address when one is given", async () => {
    const calls = stubFetch({ "POST /api/v1/clusters": () => ({ status: 201, body: cluster() }) });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "kind: Config");
    fireEvent.input(screen.getByLabelText(/API address/), { target: { value: " https://10.0.0.5:6443 " } });
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(sent(calls).length).toBe(1));
    expect((sent(calls)[0].body as { api_server?: string }).api_server).toBe("https://10.0.0.5:6443");
  });

  it("refuses a 10 MB file and binary junk in the file picker, keeping nothing of it", async () => {
    const calls = stubFetch({});
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    const picker = screen.getByLabelText("From a file") as HTMLInputElement;
    const pick = (f: File) => {
      Object.defineProperty(picker, "files", { value: [f], configurable: true });
      fireEvent.change(picker);
    };
    pick(new File([new Uint8Array(10 * 1024 * 1024)], "huge.yaml"));
    await waitFor(() =>
      expect(document.getElementById("reg-file-error")?.textContent).toContain("huge.yaml is 10.0 MiB; a kubeconfig is a few KiB"),
    );
    expect(picker.getAttribute("aria-invalid")).toBe("true");
    pick(new File([new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 0, 1, 2, 0xff, 0xfe])], "gshare"));
    await waitFor(() =>
      expect(document.getElementById("reg-file-error")?.textContent).toBe("gshare is not a text file; a kubeconfig is YAML text."),
    );
    expect((screen.getByLabelText("or pasted") as HTMLTextAreaElement).value).toBe("");
    fireEvent.input(screen.getByLabelText("Name"), { target: { value: "gpu-a" } });
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(document.getElementById("reg-kc-error")?.textContent).toBe("Choose a kubeconfig file or paste one."));
    expect(sent(calls)).toEqual([]);
  });
});

describe("Register and Edit: what the second walk found", () => {
  const settings = (over: Record<string, unknown> = {}) => ({
    body: {
      public_url: "https://gshare.example.com",
      public_url_problem: null,
      session_domain: null,
      session_url_scheme: "https",
      config_file: null,
      ...over,
    },
  });

  it("does not offer Attach after registering a cluster the server cannot attach yet, and says why", async () => {
    stubFetch({
      "GET /api/v1/settings": () => settings({ public_url: "http://127.0.0.1:8080", public_url_problem: "loopback" }),
      "POST /api/v1/clusters": () => ({ status: 201, body: { ...cluster(), session_domain: null, effective_session_domain: null } }),
    });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "kind: Config");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await screen.findByText("Before the operator can be attached");
    expect(screen.queryByRole("button", { name: "Attach operator" })).toBeNull();
    const why = Array.from(document.querySelectorAll(".attach-blockers li")).map((li) => li.textContent);
    expect(why[0]).toContain(
      "The server's public URL (http://127.0.0.1:8080) is not an address an operator inside a cluster can call back",
    );
    expect(why[0]).toContain("Set public_url in the server's config.toml (or GSHARE_PUBLIC_URL)");
    expect(why[1]).toBe("gpu-a has no session domain: the operator needs the host its sessions are opened under.");
  });

  it("says what an empty session domain means on this server", async () => {
    stubFetch({ "GET /api/v1/settings": () => settings({ session_domain: "lab.example" }) });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    await waitFor(() =>
      expect(document.getElementById("reg-domain-help")?.textContent).toContain("Empty: the server's default, lab.example"),
    );
    expect(document.getElementById("reg-domain-help")?.textContent).not.toContain("cannot be opened");
  });

  it("brings a refusal into view (on a phone it appears below the screen's edge)", async () => {
    const scrolled = vi.fn();
    Element.prototype.scrollIntoView = scrolled;
    stubFetch({ "POST /api/v1/clusters": () => probeFailed, "GET /api/v1/settings": () => settings() });
    render(<RegisterDialog onClose={() => {}} onRegistered={() => {}} />);
    fill("gpu-a", "kind: Config");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    const alert = await screen.findByRole("alert");
    await waitFor(() => expect(scrolled).toHaveBeenCalled());
    expect((scrolled.mock.contexts[0] as Element).contains(alert)).toBe(true);
  });

  it("saves a session domain without re-checking the untouched API address taken from the kubeconfig", async () => {
    const calls = stubFetch({ "PATCH /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: cluster() }) });
    const onClose = vi.fn();
    // An http:// address from the kubeconfig, accepted at registration.
    const c = cluster({ api_server: "http://10.0.0.1:8080", session_domain: null, effective_session_domain: null });
    render(<EditDialog cluster={c as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.input(screen.getByLabelText("Session domain"), { target: { value: "s.example" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(onClose).toHaveBeenCalled());
    expect(calls.map((x) => x.body)).toEqual([{ session_domain: "s.example" }]);
  });

  it("Register and Edit accept the same API addresses (http:// too, as the server does)", async () => {
    const calls = stubFetch({ "PATCH /api/v1/clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: cluster() }) });
    render(<EditDialog cluster={cluster() as never} onClose={() => {}} onChanged={() => {}} />);
    fireEvent.input(screen.getByLabelText("API address"), { target: { value: "http://10.0.0.9:8080" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(calls.length).toBe(1));
    expect(calls[0].body).toEqual({ api_server: "http://10.0.0.9:8080" });
  });
});
