// The clusters page: one row per cluster, live state and heartbeat, a row expands to its
// nodes; register, edit, test and unregister through dialogs.

import { memo } from "preact/compat";
import { useCallback, useEffect, useMemo, useState } from "preact/hooks";
import { AttachPanel } from "../components/AttachPanel";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { EditDialog } from "../components/EditDialog";
import { ListPage } from "../components/ListPage";
import { NodesPanel } from "../components/NodesPanel";
import { RegisterDialog } from "../components/RegisterDialog";
import { effectiveDomain, listClusters, type Cluster } from "../clusters";
import { formatAge, formatTime, plural } from "../format";
import { useLivePoll } from "../live";
import { useTick } from "../tick";

/** An operator that has not reported for this long is shown in red (the operator contract's liveness). */
export const HEARTBEAT_STALE_S = 300;

const COLUMNS = 8;

export function HeartbeatCell(props: { ageS: number | null | undefined; loadedAt: number }) {
  const now = useTick();
  if (props.ageS == null)
    return (
      <span class="muted" title="no inventory report from the operator yet">
        never
      </span>
    );
  const age = props.ageS + Math.max(0, now - props.loadedAt) / 1000;
  const stale = age > HEARTBEAT_STALE_S;
  return (
    <span
      class={stale ? "heartbeat stale" : "heartbeat"}
      title={stale ? `no report for over ${HEARTBEAT_STALE_S / 60} minutes` : undefined}
    >
      {formatAge(age)}
      {stale && <span class="sr-only"> (stale)</span>}
    </span>
  );
}

export function StateCell(props: { cluster: Cluster }) {
  const c = props.cluster;
  const err = c.last_error;
  return (
    <div class="state">
      <span class={`badge status-${c.status}`}>{c.status}</span>
      {c.status === "pending" && !err && <div class="small muted">first probe running</div>}
      {err && (err.stage || err.cause) && (
        <div class="small probe-error" title={err.hint}>
          {err.stage && <code>{err.stage}</code>} {err.cause}
        </div>
      )}
    </div>
  );
}

const OPERATOR_LABEL: Record<string, string> = {
  not_attached: "not attached",
  attach_incomplete: "attach incomplete",
  connected: "connected",
  silent: "silent",
};

/** What the cluster says about the operator's own pods: the likely fix first, then the detail. */
function OperatorPodState(props: { pods: NonNullable<Cluster["operator"]>["pod"] }) {
  const p = props.pods;
  if (!p) return null;
  const c = p.pods[0]?.containers[0];
  const summary = c
    ? `pod ${p.pods[0].name}: ${c.state}${c.reason ? ` (${c.reason})` : ""}, ${c.restarts} restarts` +
      (c.last_termination ? `, last exit ${c.last_termination.exit_code}` : "")
    : `no operator pod${p.deployment ? "" : " and no Deployment"}`;
  // The likely fix stays in view; what the cluster said is one click away (it is long, and the
  // column is narrow).
  return (
    <div class="small operator-pod">
      {p.diagnosis && (
        <div>
          <div class="probe-error">{p.diagnosis.cause}</div>
          <div>
            <strong>Fix:</strong> {p.diagnosis.fix}
          </div>
        </div>
      )}
      {p.error && <div class="probe-error">{p.error}</div>}
      <details>
        <summary>{summary}</summary>
        {p.log_error && <div class="muted">{p.log_error}</div>}
        {p.log && p.log.lines.length > 0 && (
          <details>
            <summary>
              last {p.log.lines.length} log lines{p.log.previous ? " (the run that crashed)" : ""}
            </summary>
            <pre class="operator-log">{p.log.lines.join("\n")}</pre>
          </details>
        )}
        {p.events.length > 0 && (
          <details>
            <summary>{p.events.length} recent events</summary>
            <ul>
              {p.events.map((e, i) => (
                <li key={i}>
                  {e.type} {e.reason} {e.object}: {e.message}
                </li>
              ))}
            </ul>
          </details>
        )}
        <div class="muted">read {formatTime(p.read_at)}</div>
      </details>
    </div>
  );
}

/** Registered / attached / connected (with the last callback's age) / silent (with likely causes). */
export function OperatorCell(props: { cluster: Cluster }) {
  const op = props.cluster.operator;
  if (!op) return <span class="muted">—</span>;
  const causes = op.likely_causes ?? [];
  return (
    <div class="operator-state">
      <span class={`badge operator-${op.state}`}>{OPERATOR_LABEL[op.state] ?? op.state}</span>
      {op.state === "connected" && op.last_callback_age_s != null && (
        <div class="small muted">last callback {formatAge(op.last_callback_age_s)} ago</div>
      )}
      {op.state === "silent" && causes.length > 0 && (
        <details class="small operator-causes">
          <summary>no callback yet: likely causes</summary>
          <ul>
            {causes.map((c) => (
              <li key={c}>{c}</li>
            ))}
          </ul>
        </details>
      )}
      {op.state !== "connected" && op.pod && <OperatorPodState pods={op.pod} />}
      {op.renewal_error && (
        <div class="small probe-error" title={op.next_renewal_attempt_at ? `next attempt ${op.next_renewal_attempt_at}` : undefined}>
          token renewal failed: {op.renewal_error}
        </div>
      )}
      {op.token?.expires_at && <div class="small muted">token expires {formatTime(op.token.expires_at)}</div>}
    </div>
  );
}

interface RowProps {
  cluster: Cluster;
  expanded: boolean;
  multiCluster: boolean;
  loadedAt: number;
  onToggle: (id: string) => void;
  onEdit: (c: Cluster) => void;
  onAttach?: (c: Cluster) => void;
  /** A node of this cluster to mark when its nodes show. */
  highlightNode?: string;
}

export const ClusterRow = memo(function ClusterRow({
  cluster: c,
  expanded,
  multiCluster,
  loadedAt,
  onToggle,
  onEdit,
  onAttach,
  highlightNode,
}: RowProps) {
  const domain = effectiveDomain(c);
  const domainUnset = !c.session_domain;
  return (
    <>
      <tr
        class={expanded ? "cluster-row expanded" : "cluster-row"}
        data-cluster-id={c.id}
        onClick={(e) => {
          if (!(e.target as Element).closest("button, a, input, summary, details")) onToggle(c.id);
        }}
      >
        <td>
          <button
            type="button"
            class="disclosure"
            aria-expanded={expanded}
            aria-controls={`nodes-${c.id}`}
            aria-label={`${expanded ? "Hide" : "Show"} nodes of ${c.name}`}
            onClick={() => onToggle(c.id)}
          >
            {expanded ? "▾" : "▸"}
          </button>
          <span class="cluster-name">{c.name}</span> <span class={`role role-${c.role}`}>{c.role}</span>
          <div class="idline">
            <code class="cluster-id">{c.id}</code> <CopyButton text={c.id} label="Copy id" />
          </div>
        </td>
        <td>
          <code class="api-server">{c.api_server}</code>
        </td>
        <td>
          {domain ? <span>{domain}</span> : <span class="muted">—</span>}
          {domainUnset && (!domain || multiCluster) && (
            <button
              type="button"
              class="warn-mark"
              aria-label={`Session domain of ${c.name} not set: ${domain ? "sessions get the server's default domain, whose ingress is elsewhere" : "sessions cannot be opened"}. Edit to set it.`}
              title={
                domain
                  ? `Not set: sessions on this cluster get the server's default domain (${domain}), whose ingress is on another cluster, so their URLs 404. Set it with Edit.`
                  : "Not set: sessions on this cluster cannot be opened until it is. Set it with Edit."
              }
              onClick={() => onEdit(c)}
            >
              ⚠<span class="warn-text">{domain ? "" : " not set"}</span>
            </button>
          )}
          {domainUnset && domain && <div class="small muted">default</div>}
        </td>
        <td>
          <StateCell cluster={c} />
        </td>
        <td>
          <OperatorCell cluster={c} />
        </td>
        <td class="num">
          <span title="nodes">{c.node_count ?? "—"}</span> / <span title="GPUs">{c.gpu_count ?? "—"}</span> /{" "}
          <span title="running sessions">{c.running_sessions ?? "—"}</span>
        </td>
        <td>
          <HeartbeatCell ageS={c.heartbeat_age_s} loadedAt={loadedAt} />
        </td>
        <td class="actions">
          <button type="button" onClick={() => onEdit(c)} aria-label={`Edit ${c.name}`}>
            Edit
          </button>
          {onAttach && c.operator && c.operator.state !== "connected" && (
            <button type="button" onClick={() => onAttach(c)} aria-label={`Attach operator to ${c.name}`}>
              Attach operator
            </button>
          )}
        </td>
      </tr>
      {expanded && (
        <tr class="nodes-row" id={`nodes-${c.id}`}>
          <td colSpan={COLUMNS}>
            <NodesPanel clusterId={c.id} highlight={highlightNode} />
          </td>
        </tr>
      )}
    </>
  );
});

export function ClustersPage() {
  // Server-sent events reload the list on change; polling is only the fallback.
  const polled = useLivePoll((signal) => listClusters(signal), ["clusters"]);
  const [expanded, setExpanded] = useState<Set<string>>(new Set());
  const [filter, setFilter] = useState("");
  const [dialog, setDialog] = useState<
    { kind: "register" } | { kind: "edit"; cluster: Cluster } | { kind: "attach"; cluster: Cluster } | null
  >(null);

  const onToggle = useCallback((id: string) => {
    setExpanded((s) => {
      const n = new Set(s);
      if (!n.delete(id)) n.add(id);
      return n;
    });
  }, []);
  const onEdit = useCallback((cluster: Cluster) => setDialog({ kind: "edit", cluster }), []);
  const onAttach = useCallback((cluster: Cluster) => setDialog({ kind: "attach", cluster }), []);
  /** Expands a cluster's row and brings it into view (a link to /clusters#clu_…, or a duplicate). */
  // `#clu_…/<node>` (from the overview) also marks the node in the expanded row.
  const [target, setTarget] = useState(() => (location.hash.startsWith("#clu_") ? location.hash.slice(1).split("/")[0] : ""));
  const [highlight] = useState(() => {
    const [id, node] = location.hash.slice(1).split("/");
    return id?.startsWith("clu_") && node ? { id, node: decodeURIComponent(node) } : null;
  });
  const openCluster = useCallback((id: string) => {
    setDialog(null);
    setTarget(id);
  }, []);
  useEffect(() => {
    if (!target || !polled.data?.some((c) => c.id === target)) return;
    setExpanded((s) => new Set(s).add(target));
    const row = document.querySelector<HTMLElement>(`tr[data-cluster-id="${target}"]`);
    row?.scrollIntoView({ block: "center" });
    row?.querySelector<HTMLElement>("button.disclosure")?.focus();
    setTarget("");
  }, [target, polled.data]);

  const clusters = useMemo(() => polled.data ?? [], [polled.data]);
  const shown = useMemo(() => {
    const f = filter.trim().toLowerCase();
    if (!f) return clusters;
    return clusters.filter((c) => [c.name, c.id, c.api_server, c.status].some((v) => v?.toLowerCase().includes(f)));
  }, [clusters, filter]);
  const multiCluster = clusters.length > 1;
  const totals = useMemo(
    () =>
      clusters.reduce(
        (t, c) => ({
          nodes: t.nodes + (c.node_count ?? 0),
          gpus: t.gpus + (c.gpu_count ?? 0),
          sessions: t.sessions + (c.running_sessions ?? 0),
        }),
        { nodes: 0, gpus: 0, sessions: 0 },
      ),
    [clusters],
  );

  const reload = polled.reload;
  return (
    <ListPage
      id="clusters"
      title="Clusters"
      noun="clusters"
      polled={polled}
      summary={
        <span class="muted summary">
          {plural(clusters.length, "cluster")} · {plural(totals.nodes, "node")} · {plural(totals.gpus, "GPU")} ·{" "}
          {plural(totals.sessions, "running session")}
        </span>
      }
      tools={
        <>
          <input
            type="search"
            placeholder="Filter by name, id, address, state"
            aria-label="Filter clusters"
            value={filter}
            onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
          />
          <button type="button" class="primary" onClick={() => setDialog({ kind: "register" })}>
            Register cluster
          </button>
        </>
      }
      isEmpty={clusters.length === 0}
      empty={
        <div class="empty">
          <p>No cluster is registered yet.</p>
          <button type="button" class="primary" onClick={() => setDialog({ kind: "register" })}>
            Register the first cluster
          </button>
        </div>
      }
      showTable={shown.length > 0}
      regionLabel="Cluster list"
      after={
        <>
          {polled.data && clusters.length > 0 && shown.length === 0 && <p class="muted">No cluster matches “{filter}”.</p>}
          {dialog?.kind === "register" && (
            <RegisterDialog onClose={() => setDialog(null)} onRegistered={reload} onOpenCluster={openCluster} />
          )}
          {dialog?.kind === "attach" && (
            <Dialog title={`Attach the operator to ${dialog.cluster.name}`} onClose={() => setDialog(null)} wide>
              <div class="dialog-body">
                <AttachPanel clusterId={dialog.cluster.id} onAttached={reload} />
              </div>
              <footer class="dialog-foot">
                <button type="button" onClick={() => setDialog(null)}>
                  Close
                </button>
              </footer>
            </Dialog>
          )}
          {dialog?.kind === "edit" && <EditDialog cluster={dialog.cluster} onClose={() => setDialog(null)} onChanged={reload} />}
        </>
      }
    >
      <table class="clusters">
        <thead>
          <tr>
            <th scope="col">Cluster</th>
            <th scope="col">API address</th>
            <th scope="col">Session domain</th>
            <th scope="col">State</th>
            <th scope="col">Operator</th>
            <th scope="col" class="num">
              Nodes / GPUs / sessions
            </th>
            <th scope="col">Heartbeat</th>
            <th scope="col">
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {shown.map((c) => (
            <ClusterRow
              key={c.id}
              cluster={c}
              expanded={expanded.has(c.id)}
              multiCluster={multiCluster}
              loadedAt={polled.loadedAt}
              onToggle={onToggle}
              onEdit={onEdit}
              onAttach={onAttach}
              highlightNode={highlight?.id === c.id ? highlight.node : undefined}
            />
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
