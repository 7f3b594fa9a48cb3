// The clusters page: one row per cluster, live state and heartbeat, a row expands to its
// nodes; register, edit, test and unregister through dialogs.

import type { ComponentChildren } from "preact";
import { memo } from "preact/compat";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { AttachPanel } from "../components/AttachPanel";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { EditDialog } from "../components/EditDialog";
import { ListPage } from "../components/ListPage";
import { NodesPanel } from "../components/NodesPanel";
import { RegisterDialog } from "../components/RegisterDialog";
import { attachFailureText, configPlace, effectiveDomain, getSettings, listClusters, type Cluster, type ServerSettings } from "../clusters";
import { usePoll } from "../hooks";
import { formatAge, formatTime, plural } from "../format";
import { useLivePoll } from "../live";
import { useTick } from "../tick";

/** An operator that has not reported for this long is shown in red (the operator contract's liveness). */
export const HEARTBEAT_STALE_S = 300;

const COLUMNS = 7;

/** After attach, an operator that has not reported yet is "starting" this long, not "silent". */
export const STARTING_S = 180;

/** The probe's verdict on the cluster's API server (the operator's state is its own column). */
const STATUS_LABEL: Record<string, string> = {
  connected: "reachable",
  degraded: "degraded",
  unreachable: "unreachable",
  pending: "checking",
};

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
      <span class={`badge status-${c.status}`}>{STATUS_LABEL[c.status] ?? c.status}</span>
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

/** Seconds since an RFC 3339 time, or null. */
const ageOf = (at: string | null | undefined, now: number) => {
  const t = at ? Date.parse(at) : NaN;
  return Number.isFinite(t) ? Math.max(0, (now - t) / 1000) : null;
};

/**
 * Not attached / attach incomplete / connected / silent (with likely causes); "starting" for the
 * first minutes after attach, before the operator could have reported; the last attach's failure
 * stays on the row after its dialog is closed. How long ago it reported is the Last report column.
 */
/** "starting" with the time since attach, ticking; "silent" once the grace is over. */
function Starting(props: { attachedAt: string }) {
  const now = useTick();
  const since = ageOf(props.attachedAt, now) ?? 0;
  if (since >= STARTING_S) return <span class="badge operator-silent">silent</span>;
  return (
    <>
      <span class="badge operator-starting">starting</span>
      <div class="small muted">attached {formatAge(since)} ago; its first report is due within a minute or two</div>
    </>
  );
}

export function OperatorCell(props: { cluster: Cluster; settings?: ServerSettings }) {
  const op = props.cluster.operator;
  if (!op) return <span class="muted">—</span>;
  const causes = op.likely_causes ?? [];
  const sinceAttach = ageOf(op.attached_at, Date.now());
  // Only these cells tick (a fleet of silent operators does not re-render every second).
  const starting = op.state === "silent" && op.attached_at && sinceAttach != null && sinceAttach < STARTING_S ? op.attached_at : null;
  const failed = op.last_attach && !op.last_attach.ok && op.state !== "connected" ? op.last_attach : null;
  return (
    <div class="operator-state">
      {starting ? (
        <Starting attachedAt={starting} />
      ) : (
        <span class={`badge operator-${op.state}`}>{OPERATOR_LABEL[op.state] ?? op.state}</span>
      )}
      {failed && (
        <div class="small last-attach">
          <span class="probe-error">Last attach failed</span> <span class="muted">({formatTime(failed.at)})</span>:{" "}
          {attachFailureText(failed, props.settings, props.cluster.name)}
        </div>
      )}
      {op.state === "silent" && !starting && causes.length > 0 && (
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
  /** How many clusters use the server's default session domain (none of their own). */
  onDefaultDomain: number;
  settings?: ServerSettings;
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
  onDefaultDomain,
  settings,
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
        <td class="api-cell">
          <code class="api-server">{c.api_server}</code>
          <StateCell cluster={c} />
        </td>
        <td class="domain-cell">
          {domain ? <span class="domain">{domain}</span> : <span class="muted">—</span>}
          {domainUnset && !domain && (
            <button
              type="button"
              class="warn-mark"
              aria-label={`Session domain of ${c.name} not set: sessions cannot be opened. Edit to set it.`}
              title="Not set: sessions on this cluster cannot be opened until it is. Set it with Edit."
              onClick={() => onEdit(c)}
            >
              ⚠<span class="warn-text"> not set</span>
            </button>
          )}
          {domainUnset && domain && <div class="small muted">the server's default</div>}
          {domainUnset && domain && onDefaultDomain > 1 && (
            // Said in words, not only by a mark: which clusters share it and why that matters.
            <button
              type="button"
              class="warn-mark shared-default"
              aria-label={`Session domain of ${c.name}: the server's default, shared by ${onDefaultDomain} clusters. Edit to give it its own.`}
              onClick={() => onEdit(c)}
            >
              ⚠ shared by {onDefaultDomain} clusters
            </button>
          )}
          {domainUnset && domain && onDefaultDomain > 1 && (
            <div class="small muted">only the cluster its DNS points at can serve sessions under it</div>
          )}
        </td>
        <td>
          <OperatorCell cluster={c} settings={settings} />
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

/** A yes/no line of the first-run checklist: the mark is also said in words. */
function Prereq(props: { ok: boolean; children: ComponentChildren }) {
  return (
    <li class={props.ok ? "ok" : "bad"}>
      <span class="mark" aria-hidden="true">
        {props.ok ? "✓" : "✗"}
      </span>
      <span class="sr-only">{props.ok ? "ready: " : "to do: "}</span>
      <span>{props.children}</span>
    </li>
  );
}

/**
 * What a new admin does first, in order — register, attach, offering, session — with what attach
 * needs of this server read from its own settings (a public URL operators reach, a session domain).
 */
export function FirstRun(props: { settings?: ServerSettings; settingsError?: unknown; onRegister: () => void }) {
  const s = props.settings;
  return (
    <div class="empty first-run">
      <p>
        <strong>No cluster is registered yet.</strong> From a cluster to a running session takes four steps:
      </p>
      <ol class="first-run-steps">
        <li>
          <strong>Register a cluster</strong> with its kubeconfig. The server checks it first: the API server answers, HAMi's device plugin
          and the <code>nvidia</code> RuntimeClass are there.
          <div>
            <button type="button" class="primary" onClick={props.onRegister}>
              Register the first cluster
            </button>
          </div>
        </li>
        <li>
          <strong>Attach the operator</strong> (one button on the cluster's row). It needs of this server:
          {s ? (
            <ul class="prereqs">
              <Prereq ok={!s.public_url_problem}>
                {s.public_url_problem ? (
                  <>
                    a public URL clusters can call back — <code>{s.public_url}</code> is not one. Set <code>public_url</code> in{" "}
                    {configPlace(s)} (or <code>GSHARE_PUBLIC_URL</code>) and restart the server.
                  </>
                ) : (
                  <>
                    a public URL clusters can call back: <code>{s.public_url}</code>
                  </>
                )}
              </Prereq>
              <Prereq ok={!!s.session_domain}>
                {s.session_domain ? (
                  <>
                    a session domain: the default is <code>{s.session_domain}</code> (a cluster may have its own)
                  </>
                ) : (
                  <>
                    a session domain: the server has no default, so give each cluster its own when you register it (or set{" "}
                    <code>session_domain</code> in {configPlace(s)})
                  </>
                )}
              </Prereq>
            </ul>
          ) : props.settingsError ? (
            <span class="muted"> (the server's settings could not be read)</span>
          ) : null}
        </li>
        <li>
          <strong>Create an offering</strong> on <a href="/offerings">Offerings</a>: the image and the GPU share, CPU, memory and disk a
          session gets.
        </li>
        <li>
          <strong>Start a session</strong> from it on <a href="/sessions">Sessions</a>; its URL is under the session domain.
        </li>
      </ol>
    </div>
  );
}

export function ClustersPage() {
  // Server-sent events reload the list on change; polling is only the fallback.
  const polled = useLivePoll((signal) => listClusters(signal), ["clusters"]);
  // The server's own settings: the first-run checklist and what attach needs. Read once.
  const settings = usePoll((signal) => getSettings(signal), 0);
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
  const onDefaultDomain = useMemo(() => clusters.filter((c) => !c.session_domain && c.effective_session_domain).length, [clusters]);
  // After registering: focus goes to the new cluster's row when the dialog closes (the empty
  // state's button that opened it is gone by then).
  const registered = useRef<string | null>(null);
  const [focusRow, setFocusRow] = useState("");
  useEffect(() => {
    if (!focusRow || !polled.data?.some((c) => c.id === focusRow)) return;
    document.querySelector<HTMLElement>(`tr[data-cluster-id="${focusRow}"] button.disclosure`)?.focus();
    setFocusRow("");
  }, [focusRow, polled.data]);
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
      empty={<FirstRun settings={settings.data} settingsError={settings.error} onRegister={() => setDialog({ kind: "register" })} />}
      showTable={shown.length > 0}
      regionLabel="Cluster list"
      after={
        <>
          {polled.data && clusters.length > 0 && shown.length === 0 && <p class="muted">No cluster matches “{filter}”.</p>}
          {dialog?.kind === "register" && (
            <RegisterDialog
              onClose={() => {
                setDialog(null);
                if (registered.current) setFocusRow(registered.current);
                registered.current = null;
              }}
              onRegistered={(c) => {
                registered.current = c.id;
                reload();
              }}
              onOpenCluster={openCluster}
            />
          )}
          {dialog?.kind === "attach" && (
            <Dialog title={`Attach the operator to ${dialog.cluster.name}`} onClose={() => setDialog(null)} wide>
              <div class="dialog-body">
                <AttachPanel cluster={dialog.cluster} onAttached={reload} onChanged={reload} />
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
            <th scope="col">API server</th>
            <th scope="col">Session domain</th>
            <th scope="col">Operator</th>
            <th scope="col" class="num">
              Nodes / GPUs / sessions
            </th>
            <th scope="col">Last report</th>
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
              onDefaultDomain={onDefaultDomain}
              settings={settings.data}
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
