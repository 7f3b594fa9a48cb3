// Attach the operator to a cluster: one button, then every object the server applied with its
// result (created / updated / unchanged, or why it failed), and the commands for admins who deploy
// by hand. A CRD at another version is reported by the server; replacing it takes a second click.

import { useState } from "preact/hooks";
import { useAction } from "../hooks";
import { ApiError } from "../api";
import { attachOperator, manualCommands, type ObjectResult } from "../clusters";
import { CommandBlock } from "./Copy";
import { ErrorBox } from "./Errors";
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

export function AttachPanel(props: { clusterId: string; onAttached?: () => void }) {
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
        const r = await attachOperator(props.clusterId, force, labelNodes, replace);
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

  return (
    <div class="attach-panel">
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
        <ErrorBox error={error} title="Attach failed" />
        <ObjectResults objects={objects} />
      </div>
      <details class="attach-manual">
        <summary>Deploy by hand instead</summary>
        <p class="small muted">
          On a host with <code>gshare</code> (its configuration names the public URL the operator calls back) and the cluster's kubeconfig:
        </p>
        <CommandBlock label="Apply the operator's objects" command={manualCommands(props.clusterId)} />
      </details>
    </div>
  );
}
