// Sessions: newest first, filtered by cluster, phase and liveness; live ages; open code / lab /
// terminal through connect; pause, resume and delete as the server's `actions` allow; start new ones.

import { memo } from "preact/compat";
import { useCallback, useState } from "preact/hooks";
import { ApiError } from "../api";
import { Advice } from "../components/Advice";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { ListPage } from "../components/ListPage";
import { NewSessionDialog } from "../components/NewSessionDialog";
import { listClusters } from "../clusters";
import { formatAge, formatMib, formatTime, plural, secondsSince } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { useHashTarget } from "../router";
import {
  CONNECT_KINDS,
  PHASES,
  connectSession,
  deleteSession,
  listSessions,
  pauseSession,
  reasonText,
  resumeSession,
  sessionLabel,
  sessionsQuery,
  type ConnectKind,
  type SessionAction,
  type Session,
} from "../sessions";
import { useTick } from "../tick";
import { Pager } from "../components/Pager";

export const PAGE_SIZE = 50;
const COLUMNS = 9;
/** Phases whose reason and message say why the session is not running. */
const EXPLAINED = new Set(["paused", "error", "terminated"]);

/** Age since creation, ticking with the shared one-second timer. */
export function AgeCell(props: { session: Session }) {
  const now = useTick();
  const s = props.session;
  const title = [
    `created ${formatTime(s.created_at)}`,
    s.started_at && `started ${formatTime(s.started_at)}`,
    s.ended_at && `ended ${formatTime(s.ended_at)}`,
  ]
    .filter(Boolean)
    .join("\n");
  return (
    <span class="age" title={title}>
      {formatAge(secondsSince(s.created_at, now))}
    </span>
  );
}

export function PhaseCell(props: { session: Session }) {
  const s = props.session;
  const explained = EXPLAINED.has(s.phase) && (s.reason || s.message);
  return (
    <div class="state">
      <span class={`badge phase phase-${s.phase}`}>{s.phase}</span>
      {explained && (
        <div class={s.phase === "error" ? "small phase-reason bad" : "small phase-reason muted"}>
          {s.reason && <span title={s.reason}>{reasonText(s.reason)}</span>}
          {s.reason && s.message && ": "}
          {s.message && <span class="phase-message">{s.message}</span>}
        </div>
      )}
    </div>
  );
}

function NodeCell(props: { session: Session }) {
  const s = props.session;
  const share =
    s.resource_class === "gpu"
      ? [s.mode, s.gpu_mem_mb != null && formatMib(s.gpu_mem_mb), s.gpu_cores != null && `${s.gpu_cores}% cores`]
          .filter(Boolean)
          .join(" · ")
      : "CPU";
  return (
    <>
      {s.node_name ? <code>{s.node_name}</code> : <span class="muted">—</span>}
      {s.bound_gpu_uuid && (
        <div class="small">
          <code class="gpu-uuid" title={s.bound_gpu_uuid}>
            {s.bound_gpu_uuid.length > 16 ? `${s.bound_gpu_uuid.slice(0, 16)}…` : s.bound_gpu_uuid}
          </code>
        </div>
      )}
      {share && <div class="small muted">{share}</div>}
    </>
  );
}

interface RowProps {
  session: Session;
  onChanged: () => void;
  onDelete: (s: Session) => void;
}

/** Opens a tab on the click itself (popup blockers allow that), then points it at the connect URL. */
export function openTab(): Window | null {
  const w = window.open("", "_blank");
  if (w) {
    try {
      w.opener = null;
      w.document.title = "Connecting…";
      w.document.body.textContent = "Connecting to the session…";
    } catch {
      // Not ours to write into: it navigates anyway.
    }
  }
  return w;
}

export const SessionRow = memo(function SessionRow({ session: s, onChanged, onDelete }: RowProps) {
  const { busy, error, setError, run } = useAction();
  const [blocked, setBlocked] = useState<{ kind: ConnectKind; url: string } | null>(null);
  const label = sessionLabel(s);
  const can = (a: SessionAction) => s.actions.includes(a);

  // Refused or not, the list then shows what the session is now.
  const act = (what: "pause" | "resume") =>
    run(
      async () => {
        try {
          await (what === "pause" ? pauseSession(s.id) : resumeSession(s.id));
        } finally {
          onChanged();
        }
      },
      { key: what },
    );

  const connect = (kind: ConnectKind) =>
    run(
      async () => {
        // Before the first await: the tab opens as part of the click.
        const w = openTab();
        setBlocked(null);
        try {
          const c = await connectSession(s.id, kind);
          if (w && !w.closed) w.location.href = c.url;
          else setBlocked({ kind, url: c.url });
        } catch (e) {
          w?.close();
          throw e;
        }
      },
      { key: kind },
    );

  return (
    <>
      <tr class="session-row" data-session-id={s.id}>
        <td title={s.cluster_id}>{s.cluster_name || s.cluster_id}</td>
        <td>
          {s.name ? <span class="session-name">{s.name}</span> : <span class="muted">unnamed</span>}
          <div class="idline flush">
            <code class="session-id">{s.id}</code> <CopyButton text={s.id} label="Copy id" />
          </div>
        </td>
        <td>{s.owner}</td>
        <td title={s.image}>{s.offering_name || s.offering_id}</td>
        <td>
          <PhaseCell session={s} />
        </td>
        <td>
          <AgeCell session={s} />
        </td>
        <td>
          <NodeCell session={s} />
        </td>
        <td class="open">
          {CONNECT_KINDS.map((kind) => (
            <button
              key={kind}
              type="button"
              class="link-chip"
              disabled={!can("connect") || busy !== ""}
              aria-label={`Open ${kind} of ${label}`}
              onClick={() => connect(kind)}
            >
              {busy === kind ? "…" : kind}
            </button>
          ))}
        </td>
        <td class="actions">
          <button type="button" disabled={!can("pause") || busy !== ""} aria-label={`Pause ${label}`} onClick={() => act("pause")}>
            {busy === "pause" ? "Pausing…" : "Pause"}
          </button>{" "}
          <button type="button" disabled={!can("resume") || busy !== ""} aria-label={`Resume ${label}`} onClick={() => act("resume")}>
            {busy === "resume" ? "Resuming…" : "Resume"}
          </button>{" "}
          <button
            type="button"
            class="danger"
            disabled={!can("delete") || busy !== ""}
            aria-label={`Delete ${label}`}
            onClick={() => onDelete(s)}
          >
            Delete
          </button>
        </td>
      </tr>
      {(error != null || blocked) && (
        <tr class="session-note">
          <td colSpan={COLUMNS}>
            <ErrorBox error={error} title={`${label}`}>
              <Advice error={error} />
            </ErrorBox>
            {blocked && (
              <p role="status">
                The browser blocked the new tab:{" "}
                <a href={blocked.url} target="_blank" rel="noopener noreferrer" onClick={() => setBlocked(null)}>
                  open {blocked.kind} of {label}
                </a>{" "}
                <span class="small muted">(the link works once)</span>
              </p>
            )}
            <button type="button" onClick={() => (setError(null), setBlocked(null))}>
              Dismiss
            </button>
          </td>
        </tr>
      )}
    </>
  );
});

/** Delete with a confirmation naming the session; a cluster that is gone gets a forced delete. */
function DeleteDialog(props: { session: Session; onClose: () => void; onChanged: () => void }) {
  const s = props.session;
  const label = sessionLabel(s);
  const { busy: running, error, run: start } = useAction();
  const busy = running !== "";
  const [forcing, setForcing] = useState(false);
  const unreachable = error instanceof ApiError && error.status === 502 && error.code === "cluster_unreachable";

  const run = (force: boolean) =>
    start(async () => {
      await deleteSession(s.id, force);
      props.onChanged();
      props.onClose();
    });

  return (
    <Dialog title="Delete session" onClose={props.onClose}>
      <div class="dialog-body">
        <p>
          Delete session <strong>{label}</strong> <code>{s.id}</code> on {s.cluster_name || s.cluster_id}? Its workload is stopped and
          unsaved work is lost; its record is kept (turn off Live only to see ended sessions).
        </p>
        <ErrorBox error={error} title="Delete failed">
          <Advice error={error} />
        </ErrorBox>
        {(unreachable || forcing) && (
          <div class="confirm" role="group" aria-label="Force delete">
            <p>
              The cluster cannot be reached. A forced delete marks the session terminated here without asking the cluster; anything still
              running there is left behind until the cluster comes back or is cleaned up by hand.
            </p>
            {!forcing ? (
              <button type="button" class="danger" onClick={() => setForcing(true)}>
                Force delete…
              </button>
            ) : (
              <div class="row">
                <button type="button" onClick={() => setForcing(false)}>
                  Don't force
                </button>
                <button type="button" class="danger" disabled={busy} onClick={() => run(true)}>
                  {busy ? "Deleting…" : `Force delete ${label}`}
                </button>
              </div>
            )}
          </div>
        )}
        <footer class="dialog-foot">
          <button type="button" autoFocus onClick={props.onClose}>
            Keep it
          </button>
          <button type="button" class="danger" disabled={busy} onClick={() => run(false)}>
            {busy && !forcing ? "Deleting…" : "Delete session"}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

export function SessionsPage() {
  const [clusterId, setClusterId] = useState("");
  const [phase, setPhase] = useState("");
  // A link to one session (/sessions#ses_…) may point at an ended one: show the history then.
  const [liveOnly, setLiveOnly] = useState(() => !location.hash.startsWith("#ses_"));
  const [page, setPage] = useState(1);
  const [dialog, setDialog] = useState<{ kind: "new" } | { kind: "delete"; session: Session } | null>(null);
  const qs = sessionsQuery({ cluster_id: clusterId, phase, live: liveOnly ? true : undefined, page, size: PAGE_SIZE });
  const polled = useLivePoll((signal) => listSessions(qs, signal), ["sessions"], { deps: [qs] });
  // The cluster filter's choices: loaded once, again when clusters change.
  const clusters = useLivePoll((signal) => listClusters(signal), ["clusters"], { pollMs: 0 });
  useHashTarget("session-id", polled.data);

  const reload = polled.reload;
  const onDelete = useCallback((session: Session) => setDialog({ kind: "delete", session }), []);
  const filter =
    <T,>(set: (v: T) => void) =>
    (v: T) => {
      set(v);
      setPage(1);
    };

  const sessions = polled.data?.data ?? [];
  const p = polled.data?.pagination;
  const filtered = clusterId !== "" || phase !== "";
  return (
    <ListPage
      id="sessions"
      title="Sessions"
      noun="sessions"
      polled={polled}
      summary={
        p && <span class="muted summary">{liveOnly ? plural(p.total, "live session", "live sessions") : plural(p.total, "session")}</span>
      }
      tools={
        <>
          <div class="filters">
            <select
              aria-label="Filter by cluster"
              value={clusterId}
              onChange={(e) => filter(setClusterId)((e.target as HTMLSelectElement).value)}
            >
              <option value="">All clusters</option>
              {(clusters.data ?? []).map((c) => (
                <option key={c.id} value={c.id}>
                  {c.name}
                </option>
              ))}
            </select>
            <select aria-label="Filter by phase" value={phase} onChange={(e) => filter(setPhase)((e.target as HTMLSelectElement).value)}>
              <option value="">All phases</option>
              {PHASES.map((ph) => (
                <option key={ph} value={ph}>
                  {ph}
                </option>
              ))}
            </select>
            <label class="check">
              <input type="checkbox" checked={liveOnly} onChange={(e) => filter(setLiveOnly)((e.target as HTMLInputElement).checked)} />{" "}
              Live only
            </label>
          </div>
          <button type="button" class="primary" onClick={() => setDialog({ kind: "new" })}>
            New session
          </button>
        </>
      }
      isEmpty={sessions.length === 0}
      empty={
        <div class="empty">
          {filtered ? (
            <p>No {liveOnly ? "live " : ""}session matches these filters.</p>
          ) : (
            <>
              <p>{liveOnly ? "No live sessions." : "No sessions yet."}</p>
              <button type="button" class="primary" onClick={() => setDialog({ kind: "new" })}>
                Start a session
              </button>
            </>
          )}
        </div>
      }
      showTable={sessions.length > 0}
      regionLabel="Session list"
      after={
        <>
          {p && <Pager label="Session pages" page={page} totalPages={p.total_pages} onPage={setPage} />}
          {dialog?.kind === "new" && <NewSessionDialog onClose={() => setDialog(null)} onCreated={reload} onChanged={reload} />}
          {dialog?.kind === "delete" && <DeleteDialog session={dialog.session} onClose={() => setDialog(null)} onChanged={reload} />}
        </>
      }
    >
      <table class="sessions">
        <thead>
          <tr>
            <th scope="col">Cluster</th>
            <th scope="col">Session</th>
            <th scope="col">Owner</th>
            <th scope="col">Offering</th>
            <th scope="col">Phase</th>
            <th scope="col">Age</th>
            <th scope="col">Node / GPU</th>
            <th scope="col">Open</th>
            <th scope="col">
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {sessions.map((s) => (
            <SessionRow key={s.id} session={s} onChanged={reload} onDelete={onDelete} />
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
