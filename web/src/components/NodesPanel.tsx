// A cluster's nodes, shown beneath its row: readiness, cordon state, GPUs; cordon/uncordon and
// drain (move or end the sessions on a node).

import { useEffect, useState } from "preact/hooks";
import { drainNode, listNodes, setCordon, type ClusterNode, type DrainMode, type DrainReport, type Gpu } from "../clusters";
import { formatAge, formatMib, formatTime, plural, secondsSince } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { Advice } from "./Advice";
import { Dialog } from "./Dialog";
import { ErrorBox } from "./Errors";

function gpuSummary(gpus: Gpu[]): string {
  if (!gpus.length) return "none";
  const groups = new Map<string, number>();
  for (const g of gpus) {
    const key = `${g.model ?? "GPU"} · ${formatMib(g.memory_mb)}`;
    groups.set(key, (groups.get(key) ?? 0) + 1);
  }
  const used = gpus.reduce((sum, g) => sum + (g.used_mem_mb ?? 0), 0);
  const busy = gpus.filter((g) => (g.used_mem_mb ?? 0) > 0 || (g.used_cores ?? 0) > 0).length;
  const summary = Array.from(groups, ([k, n]) => `${n} × ${k}`).join(", ");
  return busy ? `${summary} · ${formatMib(used)} booked on ${busy} of ${gpus.length}` : summary;
}

/** The node's cards that are not ready: which (its place on the node and uuid) and why, as reported. */
export function CardsInError(props: { gpus: Gpu[] }) {
  const bad = props.gpus.map((g, i) => ({ g, i })).filter(({ g }) => g.status != null && g.status !== "ready");
  if (!bad.length) return null;
  return (
    <ul class="cards-in-error">
      {bad.map(({ g, i }) => {
        const e = g.last_event;
        return (
          <li key={g.uuid}>
            <strong class="bad">
              Card {i + 1} of {props.gpus.length} in error
            </strong>{" "}
            <code class="small">{g.uuid}</code>: {g.status === "notready" ? "reported not ready" : g.status}
            {e ? (
              <>
                {" "}
                — {e.severity} {e.kind}
                {e.message ? `: ${e.message}` : ""} <span class="muted">({formatTime(e.at)})</span>
              </>
            ) : (
              <span class="muted"> (no health event names it)</span>
            )}
          </li>
        );
      })}
    </ul>
  );
}

/** Last seen: when the node was last seen ready; a NotReady node says since when it has been so. */
export function LastSeen(props: { node: ClusterNode }) {
  const n = props.node;
  if (!n.ready && n.not_ready_since)
    return (
      <span title={`NotReady since ${formatTime(n.not_ready_since)}`}>
        NotReady for {formatAge(secondsSince(n.not_ready_since))}
        <span class="muted small">
          {" "}
          (reported {formatTime(n.not_ready_since)}
          {n.last_seen ? `; last ready ${formatTime(n.last_seen)}` : ""})
        </span>
      </span>
    );
  return <>{formatTime(n.last_seen)}</>;
}

/** What a drain did, one line per outcome. */
function drainSummary(r: DrainReport): string {
  if (!r.affected_sessions.length) return `${r.node_id} is cordoned; no session was on it.`;
  const parts = [
    r.rescheduled.length && `${plural(r.rescheduled.length, "session")} moved to other nodes`,
    r.parked.length && `${plural(r.parked.length, "session")} paused (no other node can hold ${r.parked.length > 1 ? "them" : "it"} now)`,
    r.terminated.length && `${plural(r.terminated.length, "session")} ended`,
    r.failed.length && `${plural(r.failed.length, "session")} not changed (the cluster refused)`,
  ].filter(Boolean);
  return `${r.node_id} is cordoned: ${parts.join("; ")}.`;
}

/** Drain a node: choose what happens to its sessions, then see what did. */
export function DrainDialog(props: { clusterId: string; node: string; onClose: () => void; onDrained: () => void }) {
  const [mode, setMode] = useState<DrainMode>("reschedule");
  const [reason, setReason] = useState("");
  const [report, setReport] = useState<DrainReport | null>(null);
  const { busy, error, run } = useAction();
  const drain = (e: Event) => {
    e.preventDefault();
    run(async () => {
      const r = await drainNode(props.clusterId, props.node, mode, reason.trim() || undefined);
      setReport(r);
      props.onDrained();
    });
  };
  return (
    <Dialog title={`Drain ${props.node}`} onClose={props.onClose}>
      {report ? (
        <div class="dialog-body">
          <p role="status">{drainSummary(report)}</p>
          {report.sessions.length > 0 && (
            <ul class="drain-result small">
              {report.sessions.map((s) => (
                <li key={s.session_id}>
                  <code>{s.session_id}</code> ({s.owner}): {s.outcome} — {s.message}
                </li>
              ))}
            </ul>
          )}
          <footer class="dialog-foot">
            <button type="button" class="primary" autoFocus onClick={props.onClose}>
              Done
            </button>
          </footer>
        </div>
      ) : (
        <form class="dialog-body form" onSubmit={drain}>
          <p>
            The node is cordoned first: no new session lands on it. Then each session on it is treated as chosen here; the owners are
            notified.
          </p>
          <fieldset>
            <legend>Sessions on the node</legend>
            <label class="option">
              <input type="radio" name="mode" checked={mode === "reschedule"} onChange={() => setMode("reschedule")} />
              <span>Move them: pause each and resume it on another node that can hold it; one that fits nowhere stays paused</span>
            </label>
            <label class="option">
              <input type="radio" name="mode" checked={mode === "force_terminate"} onChange={() => setMode("force_terminate")} />
              <span>End them (their containers stop; unsaved work is lost)</span>
            </label>
          </fieldset>
          <label>
            Reason <span class="muted">(optional, kept in the audit log)</span>
            <input
              name="reason"
              maxLength={500}
              autocomplete="off"
              value={reason}
              onInput={(e) => setReason((e.target as HTMLInputElement).value)}
            />
          </label>
          <ErrorBox error={error} title="Not drained">
            <Advice error={error} />
          </ErrorBox>
          <footer class="dialog-foot">
            <button type="button" onClick={props.onClose}>
              Cancel
            </button>
            <button type="submit" class={mode === "force_terminate" ? "danger" : "primary"} disabled={busy !== ""}>
              {busy ? "Draining…" : mode === "force_terminate" ? "Drain and end sessions" : "Drain"}
            </button>
          </footer>
        </form>
      )}
    </Dialog>
  );
}

function NodeRow(props: { clusterId: string; node: ClusterNode; onChanged: () => void }) {
  const n = props.node;
  const cordoned = n.cordoned;
  const { busy, error, run } = useAction();
  const [draining, setDraining] = useState(false);
  const gpus = n.gpus ?? [];
  return (
    <tr data-node={n.name}>
      <td>
        <code>{n.name}</code>
      </td>
      <td>
        {n.ready ? <span class="badge status-connected">Ready</span> : <span class="badge status-unreachable">NotReady</span>}
        {n.offline && <span class="badge status-unreachable">offline</span>}
      </td>
      <td>
        {cordoned ? <span class="badge status-degraded">cordoned</span> : <span class="muted">schedulable</span>}
        {n.decommissioning && <span class="badge status-degraded">decommissioning</span>}
      </td>
      <td>{n.pool_name ? <span class="badge">{n.pool_name}</span> : <span class="muted">shared</span>}</td>
      <td>
        <span title={gpus.map((g) => g.uuid).join("\n")}>{gpuSummary(gpus)}</span>
        <CardsInError gpus={gpus} />
      </td>
      <td>
        <LastSeen node={n} />
      </td>
      <td class="actions">
        <button
          type="button"
          disabled={busy !== ""}
          aria-label={`${cordoned ? "Uncordon" : "Cordon"} ${n.name}`}
          onClick={() =>
            run(async () => {
              await setCordon(props.clusterId, n.name, !cordoned);
              props.onChanged();
            })
          }
        >
          {busy !== "" ? "…" : cordoned ? "Uncordon" : "Cordon"}
        </button>{" "}
        <button
          type="button"
          disabled={busy !== "" || !!n.decommissioning}
          aria-label={`Drain ${n.name}`}
          onClick={() => setDraining(true)}
        >
          Drain
        </button>
        {draining && (
          <DrainDialog clusterId={props.clusterId} node={n.name} onClose={() => setDraining(false)} onDrained={props.onChanged} />
        )}
        <ErrorBox error={error} />
      </td>
    </tr>
  );
}

export function NodesPanel(props: {
  clusterId: string;
  /** A node to bring into view and mark (a link from the overview). */ highlight?: string;
}) {
  const polled = useLivePoll((signal) => listNodes(props.clusterId, signal), ["inventory", "sessions"], {
    pollMs: 10000,
    deps: [props.clusterId],
  });
  const loaded = !!polled.data;
  useEffect(() => {
    if (!props.highlight || !loaded) return;
    const row = document.querySelector<HTMLElement>(`#nodes-${CSS.escape(props.clusterId)} tr[data-node="${CSS.escape(props.highlight)}"]`);
    if (!row) return;
    row.classList.add("target");
    row.scrollIntoView?.({ block: "center" });
  }, [props.highlight, props.clusterId, loaded]);
  if (polled.loading && !polled.data) return <p class="loading">Loading nodes…</p>;
  return (
    <div class="nodes">
      <ErrorBox error={polled.error} title={polled.data ? "Refresh failed" : "Cannot load nodes"} />
      {polled.data && polled.data.length === 0 && <p class="muted">No nodes reported yet.</p>}
      {polled.data && polled.data.length > 0 && (
        <div class="table-wrap" role="region" aria-label={`Nodes of ${props.clusterId}`} tabIndex={0}>
          <table class="nodes-table">
            <caption class="sr-only">Nodes</caption>
            <thead>
              <tr>
                <th scope="col">Node</th>
                <th scope="col">Ready</th>
                <th scope="col">Scheduling</th>
                <th scope="col">Pool</th>
                <th scope="col">GPUs</th>
                <th scope="col">Last seen</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {polled.data.map((n) => (
                <NodeRow key={n.name} clusterId={props.clusterId} node={n} onChanged={polled.reload} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
