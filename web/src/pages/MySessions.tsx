// A member's landing page: their own sessions as cards (live phase, pending → preparing →
// running as it happens; open code / lab / terminal; pause, resume, end), and the catalogue of
// offerings they may start a session from, with what each gives; their persistent volumes ("My
// workspace") between the two.

import { useRef, useState } from "preact/hooks";
import { ApiError, newIdempotencyKey } from "../api";
import { Advice } from "../components/Advice";
import { Dialog } from "../components/Dialog";
import { EphemeralDisk } from "../components/EphemeralDisk";
import { MyWorkspace, workspaceNote } from "../components/MyWorkspace";
import { listVolumes } from "../volumes";
import { ErrorBox } from "../components/Errors";
import { Pager } from "../components/Pager";
import { formatAge, formatMib, formatTime, plural, secondsSince } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { idleText, listOfferings, maxRuntimeText, type Offering } from "../offerings";
import {
  CONNECT_KINDS,
  createSession,
  deleteSession,
  listSessions,
  pauseSession,
  queuedText,
  reasonText,
  resumeSession,
  sessionsQuery,
  type ConnectKind,
  type Phase,
  type Session,
  type SessionAction,
} from "../sessions";
import { useTick } from "../tick";
import { connectInNewTab } from "./Sessions";

export const MY_PAGE_SIZE = 20;

/** What the connect buttons open, in words. */
const KIND_TEXT: Record<ConnectKind, string> = { code: "VS Code", lab: "JupyterLab", terminal: "Terminal" };

/** A session's name as a card says it. */
const label = (s: Pick<Session, "id" | "name">) => s.name || "Unnamed session";

/** The steps a new session goes through before it can be opened. */
const STEPS: Phase[] = ["pending", "preparing", "running"];
const STEP_TEXT: Record<string, string> = {
  pending: "Waiting for a GPU",
  preparing: "Preparing (pulling the image, starting)",
  running: "Running",
};

/** "GPU: 20 GiB memory · 30% of the cores (NVIDIA A100, fractional)"; "CPU only". */
function gpuFacts(o: Pick<Offering, "resource_class" | "gpu_model" | "gpu_mem_mb" | "gpu_cores" | "mode">) {
  if (o.resource_class !== "gpu") return { memory: "none (CPU only)", cores: "—" };
  return {
    memory: o.gpu_mem_mb != null ? formatMib(o.gpu_mem_mb) : o.mode === "exclusive" ? "a whole card" : "—",
    cores: o.gpu_cores != null ? `${o.gpu_cores}%` : o.mode === "exclusive" ? "100%" : "—",
  };
}

/** What a session or an offering gives, as a definition list. */
export function Gives(props: { of: Offering | Session; compact?: boolean }) {
  const o = props.of;
  const gpu = gpuFacts(o);
  return (
    <dl class={props.compact ? "gives compact" : "gives"}>
      <div>
        <dt>GPU memory</dt>
        <dd>{gpu.memory}</dd>
      </div>
      <div>
        <dt>GPU cores</dt>
        <dd>{gpu.cores}</dd>
      </div>
      <div>
        <dt>CPU</dt>
        <dd>{o.cpu != null ? plural(o.cpu, "core") : "—"}</dd>
      </div>
      <div>
        <dt>RAM</dt>
        <dd>{o.mem_gb != null ? `${o.mem_gb} GB` : "—"}</dd>
      </div>
      <div>
        <dt>Idle timeout</dt>
        <dd>{idleText(o.idle_timeout_sec)}</dd>
      </div>
      {!props.compact && (
        <>
          <div>
            <dt>Disk</dt>
            <dd>{o.disk_gb != null ? `${o.disk_gb} GB` : "—"}</dd>
          </div>
          <div>
            <dt>Max runtime</dt>
            <dd>{maxRuntimeText(o.max_runtime_sec)}</dd>
          </div>
        </>
      )}
    </dl>
  );
}

/** Pending → preparing → running, the current one marked; other phases say why instead. */
export function Progress(props: { session: Session }) {
  const s = props.session;
  const at = STEPS.indexOf(s.phase);
  if (at < 0) {
    return (
      <p class={s.phase === "error" ? "phase-line bad" : "phase-line muted"}>
        <span class={`badge phase phase-${s.phase}`}>{s.phase}</span>
        {s.reason && <span> {reasonText(s.reason)}</span>}
        {s.message && <span class="phase-message">: {s.message}</span>}
      </p>
    );
  }
  const queued = queuedText(s);
  return (
    <>
      <ol class="steps" aria-label={`Progress: ${STEP_TEXT[s.phase]}`}>
        {STEPS.map((p, i) => (
          <li key={p} class={i < at ? "done" : i === at ? "now" : "later"} aria-current={i === at ? "step" : undefined}>
            <span class={i === at ? `badge phase phase-${p}` : "step-name"}>{p}</span>
          </li>
        ))}
      </ol>
      {queued && <p class="phase-line muted queue-place">{queued}</p>}
    </>
  );
}

function Since(props: { session: Session }) {
  const now = useTick();
  const s = props.session;
  const live = s.live;
  const from = live ? s.phase_changed_at : (s.ended_at ?? s.phase_changed_at);
  return (
    <span class="small muted" title={`created ${formatTime(s.created_at)}`}>
      {live ? `${s.phase} for ${formatAge(secondsSince(from, now))}` : `ended ${formatTime(from)}`}
    </span>
  );
}

function SessionCard(props: { session: Session; onChanged: () => void; onEnd: (s: Session) => void }) {
  const s = props.session;
  const { busy, error, setError, run } = useAction();
  const [blocked, setBlocked] = useState<{ kind: ConnectKind; url: string } | null>(null);
  const can = (a: SessionAction) => s.actions.includes(a);
  const name = label(s);
  const titleId = `ses-${s.id}-title`;

  const act = (what: "pause" | "resume") =>
    run(
      async () => {
        try {
          await (what === "pause" ? pauseSession(s.id) : resumeSession(s.id));
        } finally {
          props.onChanged();
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
    <li class={`my-session phase-card-${s.phase}`} data-session-id={s.id} aria-labelledby={titleId}>
      <div class="my-session-head">
        <h2 id={titleId}>{name}</h2>
        <span class="small muted">{s.offering_name}</span>
        <span class="grow" />
        <Since session={s} />
      </div>
      <Progress session={s} />
      <Gives of={s} compact />
      {s.live && <EphemeralDisk disk={s.ephemeral_disk} />}
      {s.live && (
        <div class="my-session-actions">
          <div class="open" role="group" aria-label={`Open ${name}`}>
            {CONNECT_KINDS.map((kind) => (
              <button
                key={kind}
                type="button"
                class={kind === "lab" ? "primary" : undefined}
                disabled={!can("connect") || busy !== ""}
                aria-label={`Open ${KIND_TEXT[kind]} of ${name}`}
                onClick={() => connect(kind)}
              >
                {busy === kind ? "Opening…" : KIND_TEXT[kind]}
              </button>
            ))}
          </div>
          <span class="grow" />
          <button type="button" disabled={!can("pause") || busy !== ""} aria-label={`Pause ${name}`} onClick={() => act("pause")}>
            {busy === "pause" ? "Pausing…" : "Pause"}
          </button>
          <button type="button" disabled={!can("resume") || busy !== ""} aria-label={`Resume ${name}`} onClick={() => act("resume")}>
            {busy === "resume" ? "Resuming…" : "Resume"}
          </button>
          <button
            type="button"
            class="danger"
            disabled={!can("delete") || busy !== ""}
            aria-label={`End ${name}`}
            onClick={() => props.onEnd(s)}
          >
            End…
          </button>
        </div>
      )}
      {s.live && !can("connect") && s.phase !== "paused" && (
        <p class="small muted">VS Code, JupyterLab and Terminal open once the session is running.</p>
      )}
      {(error != null || blocked) && (
        <div class="my-session-note">
          <ErrorBox error={error} title={name}>
            <Advice error={error} member />
          </ErrorBox>
          {blocked && (
            <p role="status">
              The browser blocked the new tab:{" "}
              <a href={blocked.url} target="_blank" rel="noopener noreferrer" onClick={() => setBlocked(null)}>
                open {KIND_TEXT[blocked.kind]} of {name}
              </a>{" "}
              <span class="small muted">(the link works once)</span>
            </p>
          )}
          <button type="button" onClick={() => (setError(null), setBlocked(null))}>
            Dismiss
          </button>
        </div>
      )}
    </li>
  );
}

/** Start a session from one offering: a name if wanted, then Start (Enter in the field starts it). */
export function StartDialog(props: { offering: Offering; onClose: () => void; onStarted: (s: Session) => void }) {
  const o = props.offering;
  const [name, setName] = useState("");
  // Where their workspaces are: a session elsewhere starts with a new, empty one (said before).
  const mine = useLivePoll((signal) => listVolumes("", signal), [], { pollMs: 0 });
  const { busy, error, run } = useAction();
  // One key per distinct body: a retry of the same request replays, a new name is a new request.
  const attempt = useRef<{ body: string; key: string } | null>(null);

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    const body = { offering_id: o.id, ...(name.trim() ? { name: name.trim() } : {}) };
    const json = JSON.stringify(body);
    if (attempt.current?.body !== json) attempt.current = { body: json, key: newIdempotencyKey() };
    const key = attempt.current.key;
    run(async () => {
      const s = await createSession(body, key);
      props.onStarted(s);
      props.onClose();
    });
  };

  return (
    <Dialog title={`Start ${o.name}`} onClose={props.onClose}>
      <form class="dialog-body form" onSubmit={submit}>
        <Gives of={o} />
        <label>
          Name <span class="muted">(optional)</span>
          <input
            name="name"
            maxLength={80}
            autocomplete="off"
            autoFocus
            value={name}
            placeholder="e.g. thesis-run"
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
          />
        </label>
        {mine.data && (
          <p class="small workspace-note" role="note">
            {workspaceNote(mine.data.data, null)}
          </p>
        )}
        <ErrorBox error={error} title="Cannot start the session">
          <Advice error={error} member />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Starting…" : "Start session"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

/** End a session, after saying what that means; Keep it has the focus. */
export function EndDialog(props: { session: Session; onClose: () => void; onEnded: () => void }) {
  const s = props.session;
  const { busy, error, run } = useAction();
  const end = () =>
    run(async () => {
      try {
        await deleteSession(s.id);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) {
          // Already gone: nothing to end.
          props.onEnded();
          props.onClose();
          return;
        }
        throw e;
      }
      props.onEnded();
      props.onClose();
    });
  return (
    <Dialog title="End session" onClose={props.onClose}>
      <div class="dialog-body">
        <p>
          End <strong>{label(s)}</strong> ({s.offering_name})? Its container stops and anything not saved to your home volume is lost. This
          cannot be undone; Pause keeps it instead.
        </p>
        <ErrorBox error={error} title="Not ended">
          <Advice error={error} member />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" autoFocus onClick={props.onClose}>
            Keep it
          </button>
          <button type="button" class="danger" disabled={busy !== ""} onClick={end}>
            {busy ? "Ending…" : "End session"}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

function Catalogue(props: { onStart: (o: Offering) => void }) {
  const offerings = useLivePoll((signal) => listOfferings({ activeOnly: true }, signal), ["offerings"], { pollMs: 0 });
  const active = (offerings.data ?? []).filter((o) => o.status === "active");
  return (
    <section aria-labelledby="catalogue-title" class="catalogue">
      <h2 id="catalogue-title">Start a session</h2>
      <ErrorBox error={offerings.error} title="Cannot load the catalogue" />
      {offerings.loading && !offerings.data && <p class="loading">Loading the catalogue…</p>}
      {offerings.data && active.length === 0 && (
        <p class="empty">Nothing can be started yet: no offering is open to you. Your lab's admin adds them.</p>
      )}
      {active.length > 0 && (
        <ul class="offer-list">
          {active.map((o) => (
            <li key={o.id} class="offer" data-offering-id={o.id} aria-labelledby={`offer-${o.id}`}>
              <h3 id={`offer-${o.id}`}>{o.name}</h3>
              <p class="small muted">
                {o.resource_class === "gpu" ? [o.gpu_model || "any GPU", o.mode].filter(Boolean).join(" · ") : "CPU only"}
              </p>
              <Gives of={o} />
              <button type="button" class="primary" aria-label={`Start a session from ${o.name}`} onClick={() => props.onStart(o)}>
                Start…
              </button>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

export function MySessionsPage(props: { username: string }) {
  const [showEnded, setShowEnded] = useState(false);
  const [page, setPage] = useState(1);
  const [dialog, setDialog] = useState<{ kind: "start"; offering: Offering } | { kind: "end"; session: Session } | null>(null);
  const [started, setStarted] = useState<Session | null>(null);
  const qs = sessionsQuery({ live: showEnded ? undefined : true, page, size: MY_PAGE_SIZE });
  const polled = useLivePoll((signal) => listSessions(qs, signal), ["sessions"], { deps: [qs] });
  const sessions = polled.data?.data ?? [];
  const p = polled.data?.pagination;
  const reload = polled.reload;
  // Said while the session just started is still on its way to running (a live region, so it is read out).
  const startingNow = started && sessions.find((s) => s.id === started.id && (s.phase === "pending" || s.phase === "preparing"));

  return (
    <section aria-labelledby="my-title" class="my-page">
      <div class="toolbar">
        <h1 id="my-title">My sessions</h1>
        {p && <span class="muted summary">{showEnded ? plural(p.total, "session") : plural(p.total, "live session")}</span>}
        <span class="grow" />
        <label class="check">
          <input
            type="checkbox"
            checked={showEnded}
            onChange={(e) => {
              setShowEnded((e.target as HTMLInputElement).checked);
              setPage(1);
            }}
          />{" "}
          Show ended sessions
        </label>
      </div>
      <p class="ok" role="status">
        {startingNow ? `${label(startingNow)} is starting: it runs once a GPU is found and the image is pulled.` : ""}
      </p>
      {polled.error != null && (
        <ErrorBox error={polled.error} title={polled.data ? "Refresh failed; showing the last data" : "Cannot load your sessions"} />
      )}
      {polled.loading && !polled.data && <p class="loading">Loading your sessions…</p>}
      {polled.data && sessions.length === 0 && (
        <p class="empty">
          {showEnded ? "You have no sessions yet." : `No live session, ${props.username}. Start one from the catalogue below.`}
        </p>
      )}
      {sessions.length > 0 && (
        <ul class="my-sessions" aria-label="Your sessions">
          {sessions.map((s) => (
            <SessionCard key={s.id} session={s} onChanged={reload} onEnd={(session) => setDialog({ kind: "end", session })} />
          ))}
        </ul>
      )}
      {p && <Pager label="Session pages" page={page} totalPages={p.total_pages} onPage={setPage} />}
      <MyWorkspace me={props.username} />
      <Catalogue onStart={(offering) => setDialog({ kind: "start", offering })} />
      {dialog?.kind === "start" && (
        <StartDialog
          offering={dialog.offering}
          onClose={() => setDialog(null)}
          onStarted={(s) => {
            setStarted(s);
            reload();
          }}
        />
      )}
      {dialog?.kind === "end" && <EndDialog session={dialog.session} onClose={() => setDialog(null)} onEnded={reload} />}
    </section>
  );
}
