// Register a cluster: name, role, kubeconfig (file or pasted), optional session domain. The server
// probes the cluster before accepting; a failure shows the stage, cause, hint and checks. Success
// shows the new id and the attach button (or the commands for deploying by hand).

import { useEffect, useRef, useState } from "preact/hooks";
import { useAction, usePoll } from "../hooks";
import { ApiError, base64Utf8, newIdempotencyKey } from "../api";
import { getSettings, registerCluster, type ClusterDetail, type RegisterBody, type Role } from "../clusters";
import { AttachPanel } from "./AttachPanel";
import { CopyButton } from "./Copy";
import { Dialog } from "./Dialog";
import { Checks, ErrorBox } from "./Errors";
import { FieldError, invalidProps } from "./Field";
import { apiServerProblem, hostnameProblem, onlyFieldErrors, serverFieldMessages } from "../form";

/** Largest kubeconfig the picker reads (they are a few KiB; the API takes 1 MiB of JSON). */
export const MAX_KUBECONFIG_BYTES = 512 * 1024;

/** The picked file as kubeconfig text, or why it is not one. */
export async function readKubeconfigFile(f: File): Promise<{ text: string } | { problem: string }> {
  if (f.size > MAX_KUBECONFIG_BYTES)
    return {
      problem: `${f.name} is ${f.size >= 1 << 20 ? `${(f.size / (1 << 20)).toFixed(1)} MiB` : `${Math.round(f.size / 1024)} KiB`}; a kubeconfig is a few KiB. Choose the cluster's kubeconfig (e.g. admin.conf).`,
    };
  if (f.size === 0) return { problem: `${f.name} is empty.` };
  const bytes = new Uint8Array(await f.arrayBuffer());
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return { problem: `${f.name} is not a text file; a kubeconfig is YAML text.` };
  }
  // Control characters YAML never holds: a binary file.
  // eslint-disable-next-line no-control-regex -- those characters are what is looked for
  if (/[\u0000-\u0008\u000e-\u001f]/.test(text)) return { problem: `${f.name} is not a text file; a kubeconfig is YAML text.` };
  if (!/\bclusters\s*:/.test(text) || !/\bserver\s*:/.test(text))
    return { problem: `${f.name} does not look like a kubeconfig (no clusters: with a server:).` };
  return { text };
}

/** A refused registration because the cluster (or its name or address) is already registered. */
export function duplicateOf(e: unknown): { id: string; name: string } | null {
  if (!(e instanceof ApiError) || e.status !== 409) return null;
  const d = e.details as { cluster_id?: unknown; cluster_name?: unknown };
  return typeof d.cluster_id === "string"
    ? { id: d.cluster_id, name: typeof d.cluster_name === "string" ? d.cluster_name : d.cluster_id }
    : null;
}

export function RegisterDialog(props: {
  onClose: () => void;
  onRegistered: (c: ClusterDetail) => void;
  onOpenCluster?: (id: string) => void;
}) {
  const [name, setName] = useState("");
  const [role, setRole] = useState<Role>("primary");
  const [kubeconfig, setKubeconfig] = useState("");
  const [fileName, setFileName] = useState("");
  const [domain, setDomain] = useState("");
  const [apiServer, setApiServer] = useState("");
  const [fileProblem, setFileProblem] = useState("");
  const [local, setLocal] = useState<Record<string, string>>({});
  const { busy: running, error, setError, run } = useAction();
  const busy = running !== "";
  const [created, setCreated] = useState<ClusterDetail | null>(null);
  // The server's default session domain decides what an empty domain field means.
  const settings = usePoll((signal) => getSettings(signal), 0);
  const defaultDomain = settings.data?.session_domain ?? null;
  // A refusal appears below the fields; on a phone that is off the screen: bring it into view.
  const problem = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (error) problem.current?.scrollIntoView?.({ block: "nearest", behavior: "smooth" });
  }, [error]);
  // One key per distinct body: a retry of the same request replays, an edited form is a new request.
  const attempt = useRef<{ body: string; key: string } | null>(null);

  const onFile = async (e: Event) => {
    const input = e.target as HTMLInputElement;
    const f = input.files?.[0];
    if (!f) return;
    const read = await readKubeconfigFile(f);
    if ("problem" in read) {
      // Nothing of a bad file is kept: the field is cleared and the text area keeps what it had.
      input.value = "";
      setFileProblem(read.problem);
      return;
    }
    setKubeconfig(read.text);
    setFileName(f.name);
    setFileProblem("");
    setLocal((l) => ({ ...l, kubeconfig: "" }));
    setError(null);
  };

  const server = serverFieldMessages(error);
  const msg = (k: string) => local[k] || server[k] || "";

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    const problems: Record<string, string> = {
      name: name.trim() ? "" : "Required: a name for this cluster, e.g. gpu-a.",
      kubeconfig: kubeconfig.trim() ? "" : "Choose a kubeconfig file or paste one.",
      api_server: apiServerProblem(apiServer),
      session_domain: hostnameProblem(domain),
    };
    setLocal(problems);
    if (Object.values(problems).some(Boolean)) {
      setError(null);
      return;
    }
    const body: RegisterBody = { name: name.trim(), role, kubeconfig_b64: base64Utf8(kubeconfig) };
    if (domain.trim()) body.session_domain = domain.trim();
    if (apiServer.trim()) body.api_server = apiServer.trim();
    const json = JSON.stringify(body);
    if (attempt.current?.body !== json) attempt.current = { body: json, key: newIdempotencyKey() };
    const key = attempt.current.key;
    run(() => registerCluster(body, key), {
      onSuccess: (c) => {
        setCreated(c);
        props.onRegistered(c);
      },
    });
  };

  const dup = duplicateOf(error);
  if (created) {
    return (
      <Dialog key="registered" title="Cluster registered" onClose={props.onClose} wide>
        <div class="dialog-body registered">
          <p>
            <strong>{created.name}</strong> is registered as <code class="new-cluster-id">{created.id}</code>{" "}
            <CopyButton text={created.id} label="Copy id" />
          </p>
          {created.checks && <Checks checks={created.checks} />}
          <AttachPanel cluster={created} onAttached={() => props.onRegistered(created)} onChanged={() => props.onRegistered(created)} />
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
      <form class="dialog-body form" onSubmit={submit} noValidate>
        <div class="field">
          <label>
            Name
            <input
              name="name"
              required
              maxLength={80}
              value={name}
              autoFocus
              autocomplete="off"
              onInput={(e) => setName((e.target as HTMLInputElement).value)}
              {...invalidProps("reg-name", msg("name"))}
            />
          </label>
          <FieldError id="reg-name-error" message={msg("name")} />
        </div>
        <label>
          Role
          <select name="role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as Role)}>
            <option value="primary">primary</option>
            <option value="standby">standby</option>
          </select>
        </label>
        <fieldset>
          <legend>Kubeconfig</legend>
          <div class="field">
            <label class="file">
              From a file
              <input
                type="file"
                name="kubeconfig-file"
                accept=".yaml,.yml,.conf,.kubeconfig,text/*,application/x-yaml"
                onChange={(e) => void onFile(e)}
                {...invalidProps("reg-file", fileProblem)}
              />
            </label>
            <FieldError id="reg-file-error" message={fileProblem} />
          </div>
          {fileName && <div class="small muted">read {fileName}</div>}
          <div class="field">
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
                {...invalidProps("reg-kc", msg("kubeconfig") || msg("kubeconfig_b64"), "reg-kc-help")}
              />
            </label>
            <FieldError id="reg-kc-error" message={msg("kubeconfig") || msg("kubeconfig_b64")} />
          </div>
          <p class="small muted" id="reg-kc-help">
            Its <code>server:</code> must be reachable from this control plane — <code>127.0.0.1</code> in a kubeadm admin.conf usually is
            not; fill in the API address below then. The file is kept only on the server, never shown again.
          </p>
        </fieldset>
        <div class="field">
          <label>
            API address <span class="muted">(optional)</span>
            <input
              name="api_server"
              placeholder="https://10.0.0.5:6443 — instead of the kubeconfig's server:"
              value={apiServer}
              autocomplete="off"
              spellcheck={false}
              onInput={(e) => setApiServer((e.target as HTMLInputElement).value)}
              {...invalidProps("reg-api", msg("api_server"))}
            />
          </label>
          <FieldError id="reg-api-error" message={msg("api_server")} />
        </div>
        <div class="field">
          <label>
            Session domain <span class="muted">(optional)</span>
            <input
              name="session_domain"
              placeholder="sessions.example.com"
              value={domain}
              autocomplete="off"
              spellcheck={false}
              onInput={(e) => setDomain((e.target as HTMLInputElement).value)}
              {...invalidProps("reg-domain", msg("session_domain"), "reg-domain-help")}
            />
          </label>
          <FieldError id="reg-domain-error" message={msg("session_domain")} />
          <p class="small muted help" id="reg-domain-help">
            The host sessions on this cluster are opened under.{" "}
            {defaultDomain
              ? `Empty: the server's default, ${defaultDomain} (give this cluster its own if that domain's ingress is on another cluster).`
              : settings.data
                ? "The server has no default: the operator cannot be attached and sessions cannot be opened until it is set (Edit can set it later)."
                : "Edit can set it later."}
          </p>
        </div>
        <div ref={problem} class="register-problem">
          {dup ? (
            <div class="error duplicate" role="alert">
              <p>{(error as ApiError).message}.</p>
              {props.onOpenCluster && (
                <button type="button" onClick={() => props.onOpenCluster?.(dup.id)}>
                  Open {dup.name}
                </button>
              )}
            </div>
          ) : (
            !onlyFieldErrors(error, ["name", "kubeconfig_b64", "api_server", "session_domain"]) && <ErrorBox error={error} />
          )}
        </div>
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
