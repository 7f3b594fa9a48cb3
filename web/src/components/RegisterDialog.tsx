// Register a cluster: name, role, kubeconfig (file or pasted), optional session domain. The server
// probes the cluster before accepting; a failure shows the stage, cause, hint and checks. Success
// shows the new id and the attach button (or the commands for deploying by hand).

import { useRef, useState } from "preact/hooks";
import { base64Utf8, newIdempotencyKey } from "../api";
import { registerCluster, type Cluster, type RegisterBody, type Role } from "../clusters";
import { AttachPanel } from "./AttachPanel";
import { CopyButton } from "./Copy";
import { Dialog } from "./Dialog";
import { Checks, ErrorBox } from "./Errors";

export function RegisterDialog(props: { onClose: () => void; onRegistered: (c: Cluster) => void }) {
  const [name, setName] = useState("");
  const [role, setRole] = useState<Role>("primary");
  const [kubeconfig, setKubeconfig] = useState("");
  const [fileName, setFileName] = useState("");
  const [domain, setDomain] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [created, setCreated] = useState<Cluster | null>(null);
  // One key per distinct body: a retry of the same request replays, an edited form is a new request.
  const attempt = useRef<{ body: string; key: string } | null>(null);

  const onFile = async (e: Event) => {
    const f = (e.target as HTMLInputElement).files?.[0];
    if (!f) return;
    if (f.size > 512 * 1024) {
      setError(new Error(`${f.name} is ${Math.round(f.size / 1024)} KiB; a kubeconfig is a few KiB`));
      return;
    }
    setKubeconfig(await f.text());
    setFileName(f.name);
    setError(null);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy) return;
    if (!kubeconfig.trim()) {
      setError(new Error("choose a kubeconfig file or paste one"));
      return;
    }
    const body: RegisterBody = { name: name.trim(), role, kubeconfig_b64: base64Utf8(kubeconfig) };
    if (domain.trim()) body.session_domain = domain.trim();
    const json = JSON.stringify(body);
    if (attempt.current?.body !== json) attempt.current = { body: json, key: newIdempotencyKey() };
    setBusy(true);
    setError(null);
    try {
      const c = await registerCluster(body, attempt.current.key);
      setCreated(c);
      props.onRegistered(c);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  if (created) {
    return (
      <Dialog key="registered" title="Cluster registered" onClose={props.onClose} wide>
        <div class="dialog-body registered">
          <p>
            <strong>{created.name}</strong> is registered as{" "}
            <code class="new-cluster-id">{created.id}</code> <CopyButton text={created.id} label="Copy id" />
          </p>
          {created.checks && <Checks checks={created.checks} />}
          <AttachPanel clusterId={created.id} onAttached={() => props.onRegistered(created)} />
        </div>
        <footer class="dialog-foot">
          <button type="button" class="primary" autoFocus onClick={props.onClose}>
            Done
          </button>
        </footer>
      </Dialog>
    );
  }

  return (
    <Dialog title="Register a cluster" onClose={props.onClose} wide>
      <form class="dialog-body form" onSubmit={submit}>
        <label>
          Name
          <input name="name" required maxLength={80} value={name} autoFocus autocomplete="off" onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Role
          <select name="role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as Role)}>
            <option value="primary">primary</option>
            <option value="standby">standby</option>
          </select>
        </label>
        <fieldset>
          <legend>Kubeconfig</legend>
          <label class="file">
            From a file
            <input type="file" name="kubeconfig-file" accept=".yaml,.yml,.conf,.kubeconfig,text/*,application/x-yaml" onChange={onFile} />
          </label>
          {fileName && <div class="small muted">read {fileName}</div>}
          <label>
            or pasted
            <textarea
              name="kubeconfig"
              rows={8}
              spellcheck={false}
              placeholder="apiVersion: v1&#10;kind: Config&#10;clusters: …"
              value={kubeconfig}
              onInput={(e) => {
                setKubeconfig((e.target as HTMLTextAreaElement).value);
                setFileName("");
              }}
            />
          </label>
          <p class="small muted">
            Its <code>server:</code> must be reachable from this control plane — <code>127.0.0.1</code> in a kubeadm
            admin.conf usually is not. The file is kept only on the server, never shown again.
          </p>
        </fieldset>
        <label>
          Session domain <span class="muted">(optional)</span>
          <input name="session_domain" placeholder="sessions.example.com" value={domain} onInput={(e) => setDomain((e.target as HTMLInputElement).value)} />
        </label>
        <ErrorBox error={error} />
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy}>
            {busy ? "Probing the cluster…" : "Register"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}
