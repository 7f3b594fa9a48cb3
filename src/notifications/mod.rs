//! Notifications for people: a short, bounded list per user of what happened to their sessions
//! (an idle pause and its warning, the runtime limit, an admin's pause or end, a drain, a lost
//! node or pod; budgets and the queue), read in the console and announced live on
//! `GET /api/v1/events` (topic `notifications`, only ever the caller's own).
//!
//! Other rooms call [`push`] inside the write transaction that makes the change, so the
//! notification commits with it or not at all. Owns `notifications` (`<user>/<seq>`, seq a
//! per-user count in 12 digits) and `notification_heads` (per user: next seq, oldest kept, unread).

pub mod routes;

use redb::ReadTransaction;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{JsonTable, StoreError, WriteTxn};

pub const NOTIFICATIONS: JsonTable<Notification> = JsonTable::new("notifications");
pub const NOTIFICATION_HEADS: JsonTable<Head> = JsonTable::new("notification_heads");

/// Notifications kept per user; a push beyond drops the oldest.
pub const KEEP: u64 = 200;
/// Longest text kept (characters); longer is cut with an ellipsis.
pub const MAX_TEXT: usize = 500;

/// What a notification is about (`kind` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = NotificationKind)]
pub enum Kind {
    /// The idle reaper will pause the session soon (the operator's `IdleWarning`).
    IdleWarning,
    /// The session was paused for being idle.
    IdlePaused,
    /// The session reaches its runtime limit within 10 minutes.
    RuntimeWarning,
    /// The session was ended at its runtime limit.
    RuntimeEnded,
    /// The session was paused at its runtime limit (its policy's `max_runtime_action` `pause`).
    RuntimePaused,
    /// An admin paused the session.
    AdminPaused,
    /// An admin ended the session.
    AdminEnded,
    /// A drain of the session's node moved, parked or ended it.
    Drained,
    /// The session's node went offline; the session ended (`node_offline`).
    NodeLost,
    /// The session's pod stopped reporting; the session ended (`pod_lost`).
    PodLost,
    /// A monthly GPU-hour budget passed 80 %.
    BudgetWarning,
    /// A monthly GPU-hour budget is used up.
    BudgetExhausted,
    /// A queued session started.
    QueuedStarted,
    /// A queued session left the queue unstarted (its offering deactivated, its owner disabled).
    QueueDropped,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdleWarning => "idle_warning",
            Self::IdlePaused => "idle_paused",
            Self::RuntimeWarning => "runtime_warning",
            Self::RuntimeEnded => "runtime_ended",
            Self::RuntimePaused => "runtime_paused",
            Self::AdminPaused => "admin_paused",
            Self::AdminEnded => "admin_ended",
            Self::Drained => "drained",
            Self::NodeLost => "node_lost",
            Self::PodLost => "pod_lost",
            Self::BudgetWarning => "budget_warning",
            Self::BudgetExhausted => "budget_exhausted",
            Self::QueuedStarted => "queued_started",
            Self::QueueDropped => "queue_dropped",
        }
    }
}

/// One stored notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub seq: u64,
    pub user: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub text: String,
    pub at: i64,
    #[serde(default)]
    pub read: bool,
}

/// Per user: the next seq, the oldest kept, and how many are unread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub next: u64,
    pub first: u64,
    pub unread: u64,
}

/// A notification as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NotificationView {
    /// The notification's number among the caller's own (mark it read with it).
    pub id: u64,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub text: String,
    /// RFC 3339 UTC.
    pub at: String,
    pub read: bool,
}

impl From<Notification> for NotificationView {
    fn from(n: Notification) -> Self {
        Self {
            id: n.seq,
            kind: n.kind,
            session_id: n.session_id,
            text: n.text,
            at: crate::clock::rfc3339_ms(n.at),
            read: n.read,
        }
    }
}

/// `GET /api/v1/notifications`: newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NotificationPage {
    pub data: Vec<NotificationView>,
    /// The caller's unread notifications (all of them, whatever the filter).
    pub unread: u64,
    /// The caller's notifications kept (at most 200).
    pub total: u64,
}

/// The name a commit that changes `user`'s notifications notes besides its tables
/// ([`WriteTxn::note_key`]): the events stream reads its generation for that user alone.
pub fn user_key(user: &str) -> String {
    format!("{}@{user}", NOTIFICATIONS.name())
}

fn key(user: &str, seq: u64) -> String {
    format!("{user}/{seq:012}")
}

fn bounded(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_TEXT {
        return text.to_string();
    }
    let mut out: String = text.chars().take(MAX_TEXT - 1).collect();
    out.push('…');
    out
}

/// Adds a notification for `user`, inside the caller's write transaction (it commits with the
/// change it tells of). Keeps the newest [`KEEP`]; returns its number. `now` is Unix ms.
///
/// ```ignore
/// crate::notifications::push(txn, now, &s.owner, Kind::IdlePaused, Some(&s.id), "…")?;
/// ```
pub fn push(
    txn: &WriteTxn,
    now: i64,
    user: &str,
    kind: Kind,
    session_id: Option<&str>,
    text: &str,
) -> Result<u64, StoreError> {
    let mut head = NOTIFICATION_HEADS.get_in_write(txn, user)?.unwrap_or_default();
    let seq = head.next;
    let n = Notification {
        seq,
        user: user.to_string(),
        kind,
        session_id: session_id.map(str::to_string),
        text: bounded(text),
        at: now,
        read: false,
    };
    NOTIFICATIONS.put(txn, &key(user, seq), &n)?;
    head.next += 1;
    head.unread += 1;
    while head.next - head.first > KEEP {
        if let Some(old) = NOTIFICATIONS.get_in_write(txn, &key(user, head.first))? {
            if !old.read {
                head.unread = head.unread.saturating_sub(1);
            }
            NOTIFICATIONS.delete(txn, &key(user, head.first))?;
        }
        head.first += 1;
    }
    NOTIFICATION_HEADS.put(txn, user, &head)?;
    txn.note_key(&user_key(user));
    Ok(seq)
}

/// `user`'s notifications, newest first (only unread ones with `unread_only`), at most `limit`.
pub fn list(
    txn: &ReadTransaction,
    user: &str,
    unread_only: bool,
    limit: usize,
) -> Result<NotificationPage, StoreError> {
    let head = NOTIFICATION_HEADS.get(txn, user)?.unwrap_or_default();
    let data = NOTIFICATIONS
        .list_prefix(txn, &format!("{user}/"))?
        .into_iter()
        .rev()
        .map(|(_, n)| n)
        .filter(|n| n.user == user && (!unread_only || !n.read))
        .take(limit)
        .map(NotificationView::from)
        .collect();
    Ok(NotificationPage { data, unread: head.unread, total: head.next - head.first })
}

/// Marks one of `user`'s notifications read (`Some(seq)`) or all of them (`None`). Returns the
/// notifications marked, or `None` when `seq` is not one of theirs.
pub fn mark_read(txn: &WriteTxn, user: &str, seq: Option<u64>) -> Result<Option<Vec<NotificationView>>, StoreError> {
    let mut head = NOTIFICATION_HEADS.get_in_write(txn, user)?.unwrap_or_default();
    let targets: Vec<(String, Notification)> = match seq {
        Some(seq) => match NOTIFICATIONS.get_in_write(txn, &key(user, seq))? {
            Some(n) if n.user == user => vec![(key(user, seq), n)],
            _ => return Ok(None),
        },
        None => NOTIFICATIONS.list_prefix_in_write(txn, &format!("{user}/"))?,
    };
    let mut marked = Vec::new();
    for (k, mut n) in targets {
        if n.user != user {
            continue;
        }
        if !n.read {
            n.read = true;
            NOTIFICATIONS.put(txn, &k, &n)?;
            head.unread = head.unread.saturating_sub(1);
        }
        marked.push(NotificationView::from(n));
    }
    if seq.is_none() {
        head.unread = 0;
    }
    NOTIFICATION_HEADS.put(txn, user, &head)?;
    txn.note_key(&user_key(user));
    Ok(Some(marked))
}
