// Sessions: newest first, filtered by cluster, phase and liveness; live ages; open code / lab /
// terminal through connect; pause, resume and delete as the server's `actions` allow; start new ones.

import { createPortal, memo } from "preact/compat";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "../api";
import { Advice } from "../components/Advice";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { ListPage } from "../components/ListPage";
import { EphemeralDisk } from "../components/EphemeralDisk";
import { NewSessionDialog } from "../components/NewSessionDialog";
import { listClusters, type Cluster } from "../clusters";
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
  queuedText,
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

/** Whether a session has ended: its age stops, and it has nothing left to do. */
export const ended = (s: Pick<Session, "phase" | "ended_at">) => s.phase === "terminated" || s.ended_at != null;

function ageTitle(s: Session) {
  return [
    `created ${formatTime(s.created_at)}`,
    s.started_at && `started ${formatTime(s.started_at)}`,
    s.ended_at && `ended ${formatTime(s.ended_at)}`,
  ]
    .filter(Boolean)
    .join("\n");
}

/** Age since creation, ticking with the shared one-second timer; an ended session's stands still. */
export function AgeCell(props: { session: Session }) {
  const s = props.session;
  return ended(s) ? <EndedAge session={s} /> : <LiveAge session={s} />;
}

function LiveAge(props: { session: Session }) {
  const now = useTick();
  const s = props.session;
  return (
    <span class="age" title={ageTitle(s)}>
      {formatAge(secondsSince(s.created_at, now))}
    </span>
  );
}

/** How long an ended session lived (creation to end), never ticking. */
function EndedAge(props: { session: Session }) {
  const s = props.session;
  const end = s.ended_at ?? s.phase_changed_at;
  const lived = end ? secondsSince(s.created_at, Date.parse(end)) : null;
  return (
    <span class="age ended" title={ageTitle(s)}>
      {lived == null ? "ended" : `lived ${formatAge(lived)}`}
    </span>
  );
}

/**
 * Why a session's phase may be stale: its cluster cannot be reached, or the operator that reports
 * phases is not connected. Null when the phase can be trusted (or the session has ended).
 */
export function staleBecause(s: Session, c: Cluster | undefined): string | null {
  if (!c || ended(s)) return null;
  if (c.status === "unreachable") return `cluster ${c.name} is unreachable`;
  const op = c.operator?.state;
  if (op === "silent") return `the operator of ${c.name} is silent`;
  return null;
}

export function PhaseCell(props: { session: Session; stale?: string | null }) {
  const s = props.session;
  const explained = EXPLAINED.has(s.phase) && (s.reason || s.message);
  return (
    <div class="state">
      {props.stale ? (
        <span class="badge phase phase-stale" title={`last reported ${s.phase}`}>
          {s.phase}?
        </span>
      ) : (
        <span class={`badge phase phase-${s.phase}`}>{s.phase}</span>
      )}
      {queuedText(s) && <div class="small phase-reason muted queue-place">{queuedText(s)}</div>}
      {props.stale && (
        <div class="small phase-reason warning">
          Last reported {s.phase}
          {s.last_report_at ? ` ${formatTime(s.last_report_at)}` : ""}; {props.stale}, so it may have changed since.
        </div>
      )}
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

/** Beside an owner that names no account: a deleted account's name, or free text from before accounts. */
export function OwnerMark(props: { kind?: Session["owner_account"] }) {
  if (props.kind === "deleted")
    return (
      <span class="badge owner-mark deleted" title="This account was deleted; its sessions keep running until ended">
        deleted account
      </span>
    );
  if (props.kind === "external")
    return (
      <span class="badge owner-mark external" title="No account has this name: an owner from before accounts">
        external
      </span>
    );
  return null;
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
  /** Why its phase may be stale (its cluster unreachable, its operator silent). */
  stale?: string | null;
  onChanged: () => void;
  onDelete: (s: Session) => void;
}

/**
 * Opens a connection in a new tab: the tab opens at once (as part of the click, before any
 * await), then is pointed at the one-time URL. When the browser blocked the tab, the answer is
 * the URL to offer as a link instead; null when the tab has it.
 */
export async function connectInNewTab(id: string, kind: ConnectKind): Promise<{ kind: ConnectKind; url: string } | null> {
  const w = openTab();
  try {
    const c = await connectSession(id, kind);
    if (w && !w.closed) {
      w.location.href = c.url;
      return null;
    }
    return { kind, url: c.url };
  } catch (e) {
    w?.close();
    throw e;
  }
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

export const SessionRow = memo(function SessionRow({ session: s, stale, onChanged, onDelete }: RowProps) {
  const { busy, error, setError, run } = useAction();
  const [blocked, setBlocked] = useState<{ kind: ConnectKind; url: string } | null>(null);
  const [confirmPause, setConfirmPause] = useState(false);
  const pauseButton = useRef<HTMLButtonElement>(null);
  const label = sessionLabel(s);
  const can = (a: SessionAction) => s.actions.includes(a);
  // An ended session has nothing left to do: no buttons at all rather than a row of dead ones.
  const over = ended(s) && s.actions.length === 0 && busy === "";

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
        // Called before any await: the tab opens as part of the click.
        const opened = connectInNewTab(s.id, kind);
        setBlocked(null);
        setBlocked(await opened);
      },
      { key: kind },
    );

  return (
    <>
      <tr class={over ? "session-row ended" : "session-row"} data-session-id={s.id}>
        <td>
          {s.name ? <span class="session-name">{s.name}</span> : <span class="muted">unnamed</span>}
          <div class="idline flush">
            <code class="session-id">{s.id}</code> <CopyButton text={s.id} label="Copy id" />
          </div>
        </td>
        <td title={s.cluster_id}>{s.cluster_name || s.cluster_id}</td>
        <td>
          {s.owner}
          <OwnerMark kind={s.owner_account} />
        </td>
        <td title={s.image}>{s.offering_name || s.offering_id}</td>
        <td>
          <PhaseCell session={s} stale={stale} />
        </td>
        <td>
          <AgeCell session={s} />
        </td>
        <td>
          <NodeCell session={s} />
          {!over && <EphemeralDisk disk={s.ephemeral_disk} compact />}
        </td>
        <td class="open">
          {over ? (
            <span class="muted small">ended</span>
          ) : (
            CONNECT_KINDS.map((kind) => (
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
            ))
          )}
        </td>
        <td class="actions">
          {!over && (
            <>
              <button
                type="button"
                ref={pauseButton}
                disabled={!can("pause") || busy !== ""}
                aria-label={`Pause ${label}`}
                onClick={() => setConfirmPause(true)}
              >
                {busy === "pause" ? "Pausing…" : "Pause…"}
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
            </>
          )}
          {confirmPause &&
            createPortal(
              <Dialog title="Pause session" onClose={() => setConfirmPause(false)}>
                <div class="dialog-body">
                  <p>
                    Pause session <strong>{label}</strong> on {s.cluster_name || s.cluster_id}? Its pod is stopped: running processes, open
                    terminals and anything only in memory are lost. Its volumes stay, and Resume starts it again.
                  </p>
                  <footer class="dialog-foot">
                    <button type="button" autoFocus onClick={() => setConfirmPause(false)}>
                      Keep it running
                    </button>
                    <button
                      type="button"
                      class="primary"
                      onClick={() => {
                        setConfirmPause(false);
                        // The run starts from the row's own button, so focus comes back there (or to the row).
                        pauseButton.current?.focus();
                        act("pause");
                      }}
                    >
                      Pause {label}
                    </button>
                  </footer>
                </div>
              </Dialog>,
              document.body,
            )}
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
          {/* The server's hint names the API's ?force=true; here the button below is the way. */}
          {unreachable ? (
            typeof error.details.cause === "string" && (
              <p class="hint">
                Cause: <span class="cause">{error.details.cause}</span>.
              </p>
            )
          ) : (
            <Advice error={error} />
          )}
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
  // After a delete the row may be gone (or left with no buttons): focus goes to the same row,
  // else the one now in its place, else the heading, never to the page's start.
  const refocus = useRef<{ id: string; index: number; data: unknown } | null>(null);
  const closeDialog = () => {
    if (dialog?.kind === "delete") {
      const rows = Array.from(document.querySelectorAll<HTMLElement>("tr.session-row"));
      const index = rows.findIndex((r) => r.dataset.sessionId === dialog.session.id);
      refocus.current = { id: dialog.session.id, index, data: polled.data };
    }
    setDialog(null);
  };
  useEffect(() => {
    const want = refocus.current;
    if (!want || dialog) return;
    const t = setTimeout(() => {
      const a = document.activeElement as HTMLButtonElement | null;
      const lost = !a || a === document.body || !a.isConnected || a.disabled;
      if (!lost) {
        // Still where it was after the list has reloaded: nothing to mend.
        if (polled.data !== want.data) refocus.current = null;
        return;
      }
      refocus.current = null;
      const rows = Array.from(document.querySelectorAll<HTMLElement>("tr.session-row"));
      const row = rows.find((r) => r.dataset.sessionId === want.id) ?? rows[Math.min(want.index, rows.length - 1)];
      const heading = document.getElementById("sessions-title");
      const target = row?.querySelector<HTMLElement>("button:not([disabled]), a[href]") ?? heading;
      if (target === heading && heading) heading.tabIndex = -1;
      target?.focus();
    });
    return () => clearTimeout(t);
  }, [polled.data, dialog]);
  const filter =
    <T,>(set: (v: T) => void) =>
    (v: T) => {
      set(v);
      setPage(1);
    };

  const sessions = polled.data?.data ?? [];
  const byId = new Map((clusters.data ?? []).map((c) => [c.id, c]));
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
          {dialog?.kind === "delete" && <DeleteDialog session={dialog.session} onClose={closeDialog} onChanged={reload} />}
        </>
      }
    >
      <table class="sessions">
        <thead>
          <tr>
            <th scope="col">Session</th>
            <th scope="col">Cluster</th>
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
            <SessionRow key={s.id} session={s} stale={staleBecause(s, byId.get(s.cluster_id))} onChanged={reload} onDelete={onDelete} />
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
