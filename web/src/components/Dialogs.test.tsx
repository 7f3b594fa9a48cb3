import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { EditDialog } from "./EditDialog";
import { RegisterDialog } from "./RegisterDialog";
import { cluster, stubFetch } from "../test/fetch";

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
    const first = calls[0];
    expect(first.body).toEqual({ name: "gpu-a", role: "primary", kubeconfig_b64: btoa("apiVersion: v1\nkind: Config\n") });
    expect(first.headers["Idempotency-Key"]).toMatch(/^[0-9a-f-]{36}$/);

    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(calls.length).toBe(2));
    expect(calls[1].headers["Idempotency-Key"]).toBe(first.headers["Idempotency-Key"]);
    fill("gpu-b", "apiVersion: v1\nkind: Config\n");
    fireEvent.click(screen.getByRole("button", { name: "Register" }));
    await waitFor(() => expect(calls.length).toBe(3));
    expect(calls[2].headers["Idempotency-Key"]).not.toBe(first.headers["Idempotency-Key"]);
  });

  it("shows the new id, attaches the operator with per-object results, and offers commands that exist", async () => {
    const id = "clu_01JAAAAAAAAAAAAAAAAAAAAAAA";
    let attaches = 0;
    const calls = stubFetch({
      "POST /api/v1/clusters": (c) => ({ status: 201, body: { ...cluster({ name: "gpu-a" }), checks: [{ name: "hami", ok: true, detail: "" }], session_domain: (c.body as { session_domain?: string }).session_domain } }),
      [`POST /api/v1/clusters/${id}/attach`]: () => {
        attaches += 1;
        return attaches === 1
          ? { status: 409, body: { error: { code: "crd_conflict", message: "gsharesessions.gshare.io on the cluster differs", details: { crds: [] } } } }
          : { body: { cluster_id: id, changed: 2, objects: [{ object: "CustomResourceDefinition/gsharesessions.gshare.io", result: "updated" }, { object: "Deployment/gshare-system/gshare-operator", result: "created" }], token: { kid: "k", expires_at: "2026-12-08T00:00:00.000Z" } } };
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
        body: { cluster_id: "clu_01J", status: "degraded", checks: [{ name: "hami", ok: false, detail: "no HAMi annotations" }], latency_ms: 7, checked_at: new Date().toISOString() },
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
          ? { status: 409, body: { error: { code: "cluster_in_use", message: "2 live sessions and 1 allocation", details: { sessions: ["ses_1", "ses_2"], allocations: 1 } } } }
          : { status: 204 },
    });
    const onClose = vi.fn();
    render(<EditDialog cluster={cluster() as never} onClose={onClose} onChanged={() => {}} />);
    fireEvent.click(screen.getByRole("button", { name: "Unregister…" }));
    expect(document.body.textContent).toContain("nodes, GPU devices, storage pools and kubeconfig file are removed");
    fireEvent.click(screen.getByRole("button", { name: "Unregister gpu-a" }));
    await screen.findByText("Refused: the cluster is still in use.");
    expect(screen.getByText("ses_2")).toBeTruthy();
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
