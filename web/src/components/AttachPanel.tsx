// Attach the operator to a cluster: one button, then every object the server applied with its
// result (created / updated / unchanged, or why it failed), and the commands for admins who deploy
// by hand. A CRD at another version is reported by the server; replacing it takes a second click.

import { useState } from "preact/hooks";
import { useAction, usePoll } from "../hooks";
import { ApiError } from "../api";
import {
  attachBlockers,
  attachFailureText,
  attachOperator,
  getSettings,
  manualCommands,
  patchCluster,
  type ObjectResult,
  type ServerSettings,
} from "../clusters";
import { hostnameProblem, serverFieldMessages } from "../form";
import { CommandBlock } from "./Copy";
import { ErrorBox } from "./Errors";
import { FieldError, invalidProps } from "./Field";
import { formatTime } from "../format";

export function ObjectResults(props: { objects: ObjectResult[] }) {
  if (!props.objects.length) return null;
  return (
    // Focusable: the list scrolls when long, and keyboard users must be able to scroll it.
    <ul class="attach-objects" aria-label="Objects" tabIndex={0}>
      {props.objects.map((o) => (
        <li key={o.object} class={`attach-object result-${o.result}`}>
          <span class="attach-result">{o.result}</span> <code>{o.object}</code>
          {o.message && (
            <span class="small muted">
              {" "}
              {o.status ? `${o.status} ` : ""}
              {o.message}
            </span>
          )}
        </li>
      ))}
    </ul>
  );
}

/** The cluster attach is for: its id, its name, and whether it has a session domain yet. */
export interface AttachTarget {
  id: string;
  name: string;
  effective_session_domain?: string | null;
}

/** Sets a cluster's session domain right where attach asks for it. */
function DomainForm(props: { cluster: AttachTarget; settings?: ServerSettings; onSet: (domain: string) => void }) {
  const [domain, setDomain] = useState("");
  const [checked, setChecked] = useState(false);
  const { busy, error, run } = useAction();
  const local = checked ? (domain.trim() ? hostnameProblem(domain) : "Required: e.g. sessions.example.com.") : "";
  const message = local || serverFieldMessages(error).session_domain || "";
  const submit = (e: Event) => {
    e.preventDefault();
    setChecked(true);
    if (!domain.trim() || hostnameProblem(domain)) return;
    run(async () => {
      await patchCluster(props.cluster.id, { session_domain: domain.trim() });
      props.onSet(domain.trim());
    });
  };
  return (
    <form class="form domain-form" onSubmit={submit} noValidate aria-label={`Session domain of ${props.cluster.name}`}>
      <div class="field">
        <label>
          Session domain for {props.cluster.name}
          <input
            name="session_domain"
            value={domain}
            placeholder="sessions.example.com"
            autocomplete="off"
            spellcheck={false}
            onInput={(e) => setDomain((e.target as HTMLInputElement).value)}
            {...invalidProps("attach-domain", message, "attach-domain-help")}
          />
        </label>
        <FieldError id="attach-domain-error" message={message} />
        <p class="small muted help" id="attach-domain-help">
          The host sessions on this cluster are opened under (a wildcard DNS name pointing at its ingress).
          {props.settings && !props.settings.session_domain && " The server has no default (session_domain in its configuration)."}
        </p>
      </div>
      {!serverFieldMessages(error).session_domain && <ErrorBox error={error} title="Not set" />}
      <button type="submit" disabled={busy !== ""}>
        {busy ? "Setting…" : "Set the session domain"}
      </button>
    </form>
  );
}

export function AttachPanel(props: { cluster: AttachTarget; onAttached?: () => void; onChanged?: () => void }) {
  const clusterId = props.cluster.id;
  const settings = usePoll((signal) => getSettings(signal), 0);
  // Set here (DomainForm) before the cluster list has reloaded: attach may go ahead at once.
  const [domainSet, setDomainSet] = useState<string | null>(null);
  const target = { ...props.cluster, effective_session_domain: props.cluster.effective_session_domain || domainSet };
  // Known only once the settings are read; until then (or if they cannot be) attach is offered and
  // the server's refusal says what is missing.
  const blockers = settings.data ? attachBlockers(settings.data, target) : [];
  const { busy: running, error, run: start } = useAction();
  const busy = running !== "";
  const [objects, setObjects] = useState<ObjectResult[]>([]);
  const [done, setDone] = useState<string | null>(null);
  const [labelNodes, setLabelNodes] = useState(false);
  const conflict = error instanceof ApiError && error.code === "crd_conflict";
  // Another tool's operator (Helm, deploy-operator.sh): replacing it takes a second, explicit click.
  const exists = error instanceof ApiError && error.code === "operator_exists";

  const run = (force: boolean, replace = false) =>
    start(async () => {
      setDone(null);
      setObjects([]);
      try {
        const r = await attachOperator(clusterId, force, labelNodes, replace);
        setObjects(r.objects);
        const labeled = (r.labeled_nodes ?? [])
          .map((n) => `${n.node}: ${n.applied.join(" ") || "nothing"}${n.kept.length ? ` (kept ${n.kept.join(", ")})` : ""}`)
          .join("; ");
        setDone(
          `Operator attached: ${r.changed} of ${r.objects.length} objects changed` +
            (r.token?.expires_at ? `; its token expires ${formatTime(r.token.expires_at)} and is renewed automatically.` : ".") +
            (r.profile ? ` RBAC profile ${r.profile.profile}: ${r.profile.reason}.` : "") +
            (labeled ? ` Node labels: ${labeled}.` : ""),
        );
        props.onAttached?.();
      } catch (e) {
        // A cluster lost part-way: the objects applied so far.
        const d = e instanceof ApiError ? (e.details as { objects?: ObjectResult[] }) : {};
        setObjects(Array.isArray(d.objects) ? d.objects : []);
        throw e;
      }
    });

  const setting =
    error instanceof ApiError && error.code === "setting_required" ? (error.details as { setting?: string }).setting : undefined;
  // The server's refusal for a missing setting speaks API and CLI; say it in the console's words.
  const shownError =
    error instanceof ApiError && error.code === "setting_required"
      ? new Error(attachFailureText({ code: error.code, setting, message: error.message }, settings.data, props.cluster.name))
      : error;
  const needsDomain = blockers.some((b) => b.setting === "session_domain") || (setting === "session_domain" && !domainSet);

  if (blockers.length > 0)
    return (
      <div class="attach-panel">
        <h3 class="attach-blocked-title">Before the operator can be attached</h3>
        <ul class="attach-blockers">
          {blockers.map((b) => (
            <li key={b.setting}>{b.text}</li>
          ))}
        </ul>
        {needsDomain && (
          <DomainForm
            cluster={props.cluster}
            settings={settings.data}
            onSet={(d) => {
              setDomainSet(d);
              props.onChanged?.();
            }}
          />
        )}
      </div>
    );

  return (
    <div class="attach-panel">
      {domainSet && (
        <p class="ok" role="status">
          Session domain set to {domainSet}.
        </p>
      )}
      <p>
        Attach the operator: the server applies its CRDs, namespaces, RBAC, token Secret and Deployment through this cluster's kubeconfig,
        and keeps the token renewed.
      </p>
      <label class="small option">
        <input type="checkbox" checked={labelNodes} onChange={(e) => setLabelNodes(e.currentTarget.checked)} /> Label nodes as upstream does
        where the labels are missing (GPU nodes gpu=on, gshare.io/gpu=true, gshare.io/gpu-mode=fractional; CPU nodes
        gshare.io/node-type=cpu); labels set to other values are kept
      </label>
      <div class="attach-actions">
        <button type="button" class="primary" disabled={busy} onClick={() => run(false)}>
          {busy ? "Applying the operator's objects…" : "Attach operator"}
        </button>
        {conflict && !busy && (
          <button type="button" onClick={() => run(true)}>
            Replace the CRDs and attach
          </button>
        )}
        {exists && !busy && (
          <button type="button" class="danger" onClick={() => run(false, true)}>
            Delete the other install and attach
          </button>
        )}
      </div>
      <div aria-live="polite">
        {done && <p class="attach-done">{done}</p>}
        <ErrorBox error={shownError} title="Attach failed" />
        <ObjectResults objects={objects} />
      </div>
      {setting === "session_domain" && !domainSet && (
        <DomainForm
          cluster={props.cluster}
          settings={settings.data}
          onSet={(d) => {
            setDomainSet(d);
            props.onChanged?.();
          }}
        />
      )}
      <details class="attach-manual">
        <summary>Deploy by hand instead</summary>
        <p class="small muted">
          On a host with <code>gshare</code> (its configuration names the public URL the operator calls back) and the cluster's kubeconfig:
        </p>
        <CommandBlock label="Apply the operator's objects" command={manualCommands(clusterId)} />
      </details>
    </div>
  );
}
