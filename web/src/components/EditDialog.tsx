// Edit a cluster: name, role, API address, session domain; test the connection; unregister with a
// confirmation that names what goes away, and when refused, what still runs there.

import { useEffect, useRef, useState } from "preact/hooks";
import { useAction } from "../hooks";
import { ApiError } from "../api";
import {
  patchCluster,
  testConnection,
  unregisterCluster,
  type Cluster,
  type ClusterPatch,
  type ConnectionTest,
  type Role,
} from "../clusters";
import { formatMib, formatTime, plural } from "../format";
import { apiServerProblem, hostnameProblem, onlyFieldErrors, serverFieldMessages } from "../form";
import { FieldError, invalidProps } from "./Field";
import { Dialog } from "./Dialog";
import { Checks, ErrorBox } from "./Errors";

interface UsingSession {
  id: string;
  name?: string | null;
  phase?: string;
}
interface OpenAllocation {
  id: string;
  session_id: string;
  session_name?: string | null;
  gpu_uuid?: string | null;
  gpu_mem_mb?: number;
}

/**
 * What still runs on the cluster, by name with links: the 409 `cluster_in_use` details'
 * `session_list` and `allocation_list` (src/clusters/in_use.rs; error details are free-form in
 * the OpenAPI document, hence the hand types above).
 */
export function Blockers(props: { details: Record<string, unknown> }) {
  const d = props.details;
  const sessions = Array.isArray(d.session_list) ? (d.session_list as UsingSession[]) : [];
  const allocations = Array.isArray(d.allocation_list) ? (d.allocation_list as OpenAllocation[]) : [];
  return (
    <div class="blockers">
      {sessions.length > 0 && (
        <div>
          <strong>{plural(sessions.length, "live session", "live sessions")}</strong>
          <ul>
            {sessions.map((x) => (
              <li key={x.id}>
                <a href={`/sessions#${x.id}`}>{x.name || "unnamed session"}</a>
                {x.phase && <span class="muted"> ({x.phase})</span>}
              </li>
            ))}
          </ul>
        </div>
      )}
      {allocations.length > 0 && (
        <div>
          <strong>{plural(allocations.length, "open GPU allocation", "open GPU allocations")}</strong>
          <ul>
            {allocations.map((a) => (
              <li key={a.id}>
                {a.gpu_mem_mb ? formatMib(a.gpu_mem_mb) : "a share"} of {a.gpu_uuid ? <code>{a.gpu_uuid}</code> : "a GPU"}
                {a.session_id && (
                  <>
                    {" "}
                    held by <a href={`/sessions#${a.session_id}`}>{a.session_name || "an unnamed session"}</a>
                  </>
                )}
              </li>
            ))}
          </ul>
        </div>
      )}
      {(sessions.length > 0 || allocations.length > 0) && (
        <p class="small">Delete those sessions on the Sessions page (their GPU shares are released with them), then unregister.</p>
      )}
    </div>
  );
}

export function EditDialog(props: { cluster: Cluster; onClose: () => void; onChanged: () => void }) {
  const c = props.cluster;
  const [name, setName] = useState(c.name);
  const [role, setRole] = useState(c.role);
  const [apiServer, setApiServer] = useState(c.api_server);
  const [domain, setDomain] = useState(c.session_domain ?? "");
  const [ingress, setIngress] = useState(c.session_ingress ?? "");
  const saving = useAction();
  const testing = useAction();
  const deleting = useAction();
  // One thing at a time: while one runs, the others' buttons wait.
  const busy = saving.busy ? "save" : testing.busy ? "test" : deleting.busy ? "delete" : "";
  const error = saving.error;
  const testError = testing.error;
  const deleteError = deleting.error;
  const [saved, setSaved] = useState(false);
  const [test, setTest] = useState<ConnectionTest | null>(null);
  const [confirming, setConfirming] = useState(false);

  const patch: ClusterPatch = {};
  if (name.trim() !== c.name) patch.name = name.trim();
  if (role !== c.role) patch.role = role;
  if (apiServer.trim() !== c.api_server) patch.api_server = apiServer.trim();
  if (domain.trim() !== (c.session_domain ?? "")) patch.session_domain = domain.trim();
  if (ingress.trim() !== (c.session_ingress ?? "")) patch.session_ingress = ingress.trim();
  const dirty = Object.keys(patch).length > 0;

  // Only what is being changed is checked: the address taken from the kubeconfig at registration
  // (which the server accepted) stays as it is when, say, only the session domain is set.
  const local: Record<string, string> = {
    name: name.trim() ? "" : "Required.",
    api_server: patch.api_server === undefined ? "" : apiServerProblem(apiServer),
    session_domain: patch.session_domain === undefined ? "" : hostnameProblem(domain),
  };
  const [showLocal, setShowLocal] = useState(false);
  const server = serverFieldMessages(error);
  const msg = (k: string) => (showLocal && local[k]) || server[k] || "";

  const save = (e: Event) => {
    e.preventDefault();
    if (!dirty || busy) return;
    setShowLocal(true);
    if (Object.values(local).some(Boolean)) return;
    saving.run(async () => {
      setSaved(false);
      await patchCluster(c.id, patch);
      setSaved(true);
      props.onChanged();
      props.onClose();
    });
  };

  const runTest = () =>
    testing.run(async () => {
      setTest(null);
      setTest(await testConnection(c.id));
      props.onChanged();
    });

  const unregister = () =>
    deleting.run(async () => {
      await unregisterCluster(c.id);
      props.onChanged();
      props.onClose();
    });

  // The confirmation replaces the button that had focus; keep the keyboard user there.
  const keepRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (confirming) keepRef.current?.focus();
  }, [confirming]);

  const refused = deleteError instanceof ApiError && deleteError.status === 409;
  return (
    <Dialog title={`Edit ${c.name}`} onClose={props.onClose} wide>
      <form class="dialog-body form" onSubmit={save}>
        <p class="small muted">
          <code>{c.id}</code>
        </p>
        <div class="field">
          <label>
            Name
            <input
              name="name"
              required
              maxLength={80}
              value={name}
              onInput={(e) => setName((e.target as HTMLInputElement).value)}
              {...invalidProps("edit-name", msg("name"))}
            />
          </label>
          <FieldError id="edit-name-error" message={msg("name")} />
        </div>
        <label>
          Role
          <select name="role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as Role)}>
            <option value="primary">primary</option>
            <option value="standby">standby</option>
          </select>
        </label>
        <div class="field">
          <label>
            API address
            <input
              name="api_server"
              value={apiServer}
              spellcheck={false}
              onInput={(e) => setApiServer((e.target as HTMLInputElement).value)}
              {...invalidProps("edit-api", msg("api_server"))}
            />
          </label>
          <FieldError id="edit-api-error" message={msg("api_server")} />
        </div>
        <div class="field">
          <label>
            Session domain
            <input
              name="session_domain"
              placeholder={
                c.effective_session_domain && !c.session_domain
                  ? `empty: the server's default, ${c.effective_session_domain}`
                  : "e.g. sessions.example.com — needed before sessions can be opened"
              }
              value={domain}
              spellcheck={false}
              onInput={(e) => setDomain((e.target as HTMLInputElement).value)}
              {...invalidProps("edit-domain", msg("session_domain"), domain.trim() ? undefined : "edit-domain-help")}
            />
          </label>
          <FieldError id="edit-domain-error" message={msg("session_domain")} />
          {!domain.trim() && (
            <p class="small muted help" id="edit-domain-help">
              {c.effective_session_domain
                ? `Empty: sessions get the server's default domain (${c.effective_session_domain}), which only works if its ingress reaches this cluster.`
                : "Empty: no domain — sessions on this cluster cannot be opened."}
            </p>
          )}
        </div>
        {patch.session_domain !== undefined && (
          <p class="warning small" role="note">
            Existing sessions keep their ingress host; only new sessions use the new domain.
          </p>
        )}
        <label>
          Session ingress
          <input
            name="session_ingress"
            placeholder={
              c.effective_session_ingress && !c.session_ingress
                ? `empty: the server's ${c.effective_session_ingress}`
                : "host:port, e.g. gpu-node-1:30080"
            }
            value={ingress}
            onInput={(e) => setIngress((e.target as HTMLInputElement).value)}
            aria-describedby="ingress-help"
          />
        </label>
        <p id="ingress-help" class="muted small">
          Where this server relays <code>/proxy/</code> requests for the cluster's sessions (its ingress controller's address), for when the
          session domain points here. Empty: not relayed.
        </p>
        {!onlyFieldErrors(error, ["name", "api_server", "session_domain"]) && <ErrorBox error={error} />}
        {saved && <p class="ok">Saved.</p>}
        <footer class="dialog-foot">
          <button type="button" onClick={runTest} disabled={busy !== ""}>
            {busy === "test" ? "Testing…" : "Test connection"}
          </button>
          <span class="grow" />
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={!dirty || busy !== ""}>
            {busy === "save" ? "Saving…" : "Save"}
          </button>
        </footer>
      </form>
      {(test || testError != null) && (
        <div class="dialog-body test-result" aria-live="polite">
          <ErrorBox error={testError} title="Connection test failed" />
          {test && (
            <>
              <p>
                <span class={`badge status-${test.status}`}>{test.status}</span>
                {test.latency_ms != null && <span> · {test.latency_ms} ms</span>}
                {test.checked_at && <span class="muted"> · {formatTime(test.checked_at)}</span>}
              </p>
              {test.last_error && (
                <div class="error probe" role="alert">
                  <strong>
                    Failed at stage <code class="stage">{test.last_error.stage}</code>
                  </strong>
                  <p class="cause">{test.last_error.cause}</p>
                  {test.last_error.hint && <p class="hint">Hint: {test.last_error.hint}</p>}
                </div>
              )}
              <Checks checks={test.checks ?? []} />
            </>
          )}
        </div>
      )}
      <div class="dialog-body danger-zone">
        {!confirming ? (
          <button type="button" class="danger" onClick={() => setConfirming(true)}>
            Unregister…
          </button>
        ) : (
          <div class="confirm" role="group" aria-label="Confirm unregister">
            <p>
              Unregister <strong>{c.name}</strong>? Its nodes, GPU devices, storage pools and kubeconfig file are removed from this control
              plane, and its operator's callbacks are refused from then on. Session history and ledger rows are kept. Registering it again
              gives it a new id.
            </p>
            {refused ? (
              <div class="error" role="alert">
                <strong>Refused: the cluster is still in use.</strong>
                <p>{deleteError.message}</p>
                <Blockers details={deleteError.details} />
              </div>
            ) : (
              <ErrorBox error={deleteError} />
            )}
            <div class="row">
              <button type="button" ref={keepRef} onClick={() => (setConfirming(false), deleting.setError(null))}>
                Keep it
              </button>
              <button type="button" class="danger" onClick={unregister} disabled={busy !== ""}>
                {busy === "delete" ? "Unregistering…" : `Unregister ${c.name}`}
              </button>
            </div>
          </div>
        )}
      </div>
    </Dialog>
  );
}
