// The signed-in user's notifications (members and admins alike: each sees only their own), newest
// first, live on the event stream's `notifications` topic; mark one or all read.

import { formatTime } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { KIND_LABELS, listNotifications, markAllRead, markRead, type Notification } from "../notifications";
import { ErrorBox } from "../components/Errors";

/** The header's link to the list, with the unread count (live). */
export function NotificationsLink(props: { current: boolean }) {
  const polled = useLivePoll((signal) => listNotifications({ unread: true, limit: 1 }, signal), ["notifications"], { pollMs: 30000 });
  const unread = polled.data?.unread ?? 0;
  return (
    <a
      class="bell"
      href="/notifications"
      aria-current={props.current ? "page" : undefined}
      aria-label={unread ? `Notifications, ${unread} unread` : "Notifications"}
    >
      <span aria-hidden="true">Notifications</span>
      {unread > 0 && (
        <span class="count" aria-hidden="true">
          {unread > 99 ? "99+" : unread}
        </span>
      )}
    </a>
  );
}

function Item(props: { n: Notification; onChanged: () => void }) {
  const n = props.n;
  const { busy, error, run } = useAction();
  return (
    <li class={n.read ? "notification" : "notification unread"} data-kind={n.kind}>
      <div class="notification-head">
        <strong>{KIND_LABELS[n.kind] ?? n.kind}</strong>
        {!n.read && <span class="badge status-degraded">new</span>}
        <span class="muted small">{formatTime(n.at)}</span>
      </div>
      <p>{n.text}</p>
      {n.session_id && (
        <p class="small muted">
          Session <code>{n.session_id}</code>
        </p>
      )}
      {!n.read && (
        <button
          type="button"
          disabled={busy !== ""}
          aria-label={`Mark read: ${KIND_LABELS[n.kind] ?? n.kind}, ${formatTime(n.at)}`}
          onClick={() =>
            run(async () => {
              await markRead(n.id);
              props.onChanged();
            })
          }
        >
          {busy ? "…" : "Mark read"}
        </button>
      )}
      <ErrorBox error={error} />
    </li>
  );
}

export function NotificationsPage() {
  const polled = useLivePoll((signal) => listNotifications({ limit: 200 }, signal), ["notifications"], { pollMs: 15000 });
  const all = useAction();
  const page = polled.data;
  return (
    <section aria-labelledby="notifications-title">
      <div class="toolbar">
        <h1 id="notifications-title">Notifications</h1>
        <span class="grow" />
        {page && page.unread > 0 && (
          <button
            type="button"
            disabled={all.busy !== ""}
            onClick={() =>
              all.run(async () => {
                await markAllRead();
                polled.reload();
              })
            }
          >
            {all.busy ? "…" : "Mark all read"}
          </button>
        )}
      </div>
      <p class="muted">
        What happened to your sessions: idle pauses and their warnings, runtime limits, an admin's pause or end, a drained or lost node. The
        newest 200 are kept.
      </p>
      <ErrorBox error={all.error} />
      <ErrorBox error={polled.error} title={page ? "Refresh failed" : "Cannot load notifications"} />
      {polled.loading && !page && <p class="loading">Loading…</p>}
      {page && (
        <p role="status" class="small">
          {page.unread ? `${page.unread} unread of ${page.total}` : page.total ? `All ${page.total} read` : "Nothing yet."}
        </p>
      )}
      {page && page.data.length > 0 && (
        <ul class="notifications" aria-label="Your notifications">
          {page.data.map((n) => (
            <Item key={n.id} n={n} onChanged={polled.reload} />
          ))}
        </ul>
      )}
    </section>
  );
}
