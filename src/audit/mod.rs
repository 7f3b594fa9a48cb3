//! The audit log: who did what, from where, with which result — every login and every admin
//! change — kept in the state file (table `audit_log`, keys are time-ordered ULIDs).
//!
//! Other domains call [`record`] after a change (batched group commit, never fails the request)
//! or [`record_in`] inside their own write transaction when the entry must commit atomically with
//! the change. [`RequestMeta`] is an extractor carrying the client address, user agent and
//! request id that every entry wants.

pub mod routes;

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use crate::store::WriteTxn;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use utoipa::ToSchema;

use crate::clock::Clock;
use crate::http::client_addr::AddrConfig;
use crate::locks::lock;
use crate::store::{Store, StoreError};

/// What the audit log's handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct AuditState {
    pub store: Store,
    pub audit: Arc<AuditLog>,
}

/// The audit log's table name (the console's `audit` event topic watches it).
pub const TABLE_NAME: &str = "audit_log";
const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = TableDefinition::new(TABLE_NAME);
/// Entries queued for the writer before `record` waits (back-pressure, never dropping).
const QUEUE: usize = 4096;
/// Entries written per transaction at most (one fsync for the lot).
const BATCH: usize = 512;
/// Entries kept in memory while the state file cannot write (a full disk); beyond, the oldest
/// are dropped and counted (`gshare_audit_entries_dropped_total`).
pub const HOLD: usize = 20_000;
/// While holding entries, how often the writer tries again without being told the store writes.
const RETRY: Duration = Duration::from_secs(30);
/// Longest free-text value kept in an entry field (user agents, usernames typed at login…).
pub const MAX_FIELD: usize = 256;

/// How an attempted action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditResult {
    Success,
    /// Refused: wrong credentials, validation, conflict…
    Failure,
    /// Refused before trying: throttled or not allowed.
    Denied,
}

/// One audit entry as a caller describes it; the log adds `id` and `at`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// `admin:<username>`, `cli`, `system`, or for failed logins `anonymous`.
    pub actor: String,
    /// Dotted verb, e.g. `auth.login`, `auth.logout`, `admin.add`, `keys.rotate`, `token.mint`,
    /// `cluster.register`, `cluster.patch`, `cluster.delete`.
    pub action: String,
    /// What was acted on (a username, a cluster id, a key id…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub result: AuditResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Action-specific context (never secrets); `{}` when none.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl AuditEntry {
    /// An entry for `action` by `actor`, with the request's address, agent and id filled in.
    pub fn new(meta: &RequestMeta, actor: impl Into<String>, action: &str, result: AuditResult) -> Self {
        Self {
            actor: truncate(actor.into()),
            action: action.to_string(),
            target: None,
            result,
            client_addr: Some(meta.client_addr.to_string()),
            user_agent: meta.user_agent.clone(),
            request_id: Some(meta.request_id.clone()).filter(|r| !r.is_empty()),
            details: serde_json::Value::Object(Default::default()),
        }
    }

    /// An entry with no request behind it (background work, the CLI).
    pub fn system(actor: impl Into<String>, action: &str, result: AuditResult) -> Self {
        Self {
            actor: truncate(actor.into()),
            action: action.to_string(),
            target: None,
            result,
            client_addr: None,
            user_agent: None,
            request_id: None,
            details: serde_json::Value::Object(Default::default()),
        }
    }

    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(truncate(target.into()));
        self
    }

    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = details;
        self
    }
}

/// Records an admin's change through the API with its outcome: on failure the error code (and
/// the probe stage, when there is one). Callers pass field names, never secret content.
pub async fn record_change<T>(
    log: &AuditLog,
    meta: &RequestMeta,
    admin: &impl crate::auth::guard::Actor,
    action: &str,
    target: &str,
    details: serde_json::Value,
    outcome: &Result<T, crate::http::error::ApiError>,
) {
    let (result, details) = match outcome {
        Ok(_) => (AuditResult::Success, details),
        Err(e) => {
            let mut d = details;
            d["error"] = serde_json::json!(e.code);
            if let Some(stage) = e.details.get("stage") {
                d["stage"] = stage.clone();
            }
            (AuditResult::Failure, d)
        }
    };
    log.record(AuditEntry::new(meta, admin.actor(), action, result).target(target).details(details)).await;
}

/// A stored entry: what the API and `gshare audit tail` show.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// Time-ordered id (ULID).
    pub id: String,
    /// RFC 3339, UTC, milliseconds.
    pub at: String,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// Cuts a free-text value to [`MAX_FIELD`] bytes on a character boundary.
pub fn truncate(mut s: String) -> String {
    if s.len() > MAX_FIELD {
        let mut end = MAX_FIELD;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Who is calling and from where, for audit entries: the client address (see
/// [`crate::http::client_addr`]), the `User-Agent` (truncated) and the request id.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub client_addr: std::net::IpAddr,
    pub user_agent: Option<String>,
    pub request_id: String,
}

impl<S> FromRequestParts<S> for RequestMeta
where
    S: Send + Sync,
    AddrConfig: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            client_addr: crate::http::client_addr::from_parts(&AddrConfig::from_ref(state).config, parts),
            user_agent: parts
                .headers
                .get(axum::http::header::USER_AGENT)
                .map(|v| truncate(String::from_utf8_lossy(v.as_bytes()).into_owned())),
            request_id: crate::http::error::current_request_id(),
        })
    }
}

enum Msg {
    Entry(Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

/// The writer side: entries go through a queue to one task that commits them in batches.
pub struct AuditLog {
    tx: mpsc::Sender<Msg>,
    ids: Mutex<ulid::Generator>,
    clock: Clock,
    /// Repeated refusals being counted instead of written, by key (e.g. client address).
    coalescing: Mutex<std::collections::HashMap<String, Coalesced>>,
    counts: Arc<Counts>,
}

/// What the writer holds and lost (for `/metrics`).
#[derive(Default)]
struct Counts {
    held: std::sync::atomic::AtomicUsize,
    dropped: std::sync::atomic::AtomicU64,
}

/// Keys of repeated refusals counted at most (more: the oldest windows are closed early).
pub const MAX_COALESCING: usize = 65_536;

/// Refusals after the first in one window: written as one entry with their count.
struct Coalesced {
    since_ms: i64,
    count: u64,
    entry: Option<AuditEntry>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Starts the writer task (needs a Tokio runtime). It ends when the log is dropped.
    /// Between the hourly prunes the table never holds more than `max_entries`: each batch that
    /// would pass it removes as many of the oldest entries in the same transaction.
    pub fn start(store: Store, clock: Clock, max_entries: u64) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let counts = Arc::new(Counts::default());
        tokio::spawn(writer(store, rx, max_entries, counts.clone()));
        Self { tx, ids: Mutex::new(ulid::Generator::new()), clock, coalescing: Default::default(), counts }
    }

    /// Entries waiting in memory for the state file to write again.
    pub fn held(&self) -> usize {
        self.counts.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entries lost since start (held past [`HOLD`], or a write that failed for another reason).
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records a refusal that an unauthenticated client can repeat at will (a throttled login):
    /// the first one per `key` and `window` at once, the rest of that window as one entry with
    /// `details.count` and `details.first_at` when the window closes ([`AuditLog::close_windows`]).
    pub async fn record_coalesced(&self, key: &str, window: Duration, entry: AuditEntry) {
        let now = self.clock.now_ms();
        let window_ms = window.as_millis() as i64;
        let (write_now, closed) = {
            let mut map = lock(&self.coalescing);
            let mut closed = Vec::new();
            let open = map.get(key).is_some_and(|c| now - c.since_ms < window_ms);
            if open {
                if let Some(c) = map.get_mut(key) {
                    c.count += 1;
                    c.entry = Some(entry);
                }
                (None, closed)
            } else {
                if let Some(old) = map.remove(key) {
                    closed.extend(summary(old));
                }
                if map.len() >= MAX_COALESCING {
                    let oldest: Vec<String> = {
                        let mut v: Vec<(&String, i64)> = map.iter().map(|(k, c)| (k, c.since_ms)).collect();
                        v.sort_by_key(|(_, t)| *t);
                        v.into_iter().take(MAX_COALESCING / 16).map(|(k, _)| k.clone()).collect()
                    };
                    for k in oldest {
                        if let Some(c) = map.remove(&k) {
                            closed.extend(summary(c));
                        }
                    }
                }
                map.insert(key.to_string(), Coalesced { since_ms: now, count: 0, entry: None });
                (Some(entry), closed)
            }
        };
        for e in closed.into_iter().chain(write_now) {
            self.record(e).await;
        }
    }

    /// Writes the count of every coalescing window that has closed (`all`: every one, at shutdown).
    pub async fn close_windows(&self, window: Duration, all: bool) {
        let now = self.clock.now_ms();
        let window_ms = window.as_millis() as i64;
        let closed: Vec<AuditEntry> = {
            let mut map = lock(&self.coalescing);
            let done: Vec<String> =
                map.iter().filter(|(_, c)| all || now - c.since_ms >= window_ms).map(|(k, _)| k.clone()).collect();
            done.into_iter().filter_map(|k| map.remove(&k)).filter_map(summary).collect()
        };
        for e in closed {
            self.record(e).await;
        }
    }

    fn stamp(&self, entry: AuditEntry) -> AuditRecord {
        let at_ms = self.clock.now_ms();
        let when = UNIX_EPOCH + Duration::from_millis(at_ms.max(0) as u64);
        let id = match self.ids.lock() {
            Ok(mut g) => g.generate_from_datetime(when).ok(),
            Err(p) => p.into_inner().generate_from_datetime(when).ok(),
        }
        .unwrap_or_else(|| ulid::Ulid::from_datetime(when));
        AuditRecord { id: id.to_string(), at: crate::clock::rfc3339_ms(at_ms), entry }
    }

    /// Queues an entry; returns once it is queued (not yet on disk: see [`AuditLog::flush`]).
    pub async fn record(&self, entry: AuditEntry) {
        let rec = self.stamp(entry);
        if self.tx.send(Msg::Entry(Box::new(rec))).await.is_err() {
            tracing::error!("audit writer has stopped; an audit entry was not kept");
        }
    }

    /// Waits until everything queued before this call is committed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// The entry standing for the refusals after a window's first: `None` when there were none.
fn summary(c: Coalesced) -> Option<AuditEntry> {
    let mut entry = c.entry.filter(|_| c.count > 0)?;
    if !entry.details.is_object() {
        entry.details = serde_json::json!({});
    }
    entry.details["count"] = serde_json::json!(c.count);
    entry.details["first_at"] = serde_json::json!(crate::clock::rfc3339_ms(c.since_ms));
    entry.request_id = None;
    Some(entry)
}

/// Records an admin change or a login. Cheap: queues the entry for a batched commit and returns;
/// a storage failure is logged, never turned into a failed request.
///
/// ```ignore
/// crate::audit::record(&app.audit, AuditEntry::new(&meta, caller.actor(), "cluster.register", AuditResult::Success)
///     .target(id.to_string())
///     .details(json!({"name": name}))).await;
/// ```
pub async fn record(log: &impl AsRef<AuditLog>, entry: AuditEntry) {
    log.as_ref().record(entry).await;
}

/// Writes an entry inside the caller's own write transaction, so it commits (or rolls back)
/// together with the change it describes.
pub fn record_in(txn: &WriteTxn, clock: &Clock, entry: AuditEntry) -> Result<AuditRecord, StoreError> {
    let at_ms = clock.now_ms();
    let when = UNIX_EPOCH + Duration::from_millis(at_ms.max(0) as u64);
    let rec =
        AuditRecord { id: ulid::Ulid::from_datetime(when).to_string(), at: crate::clock::rfc3339_ms(at_ms), entry };
    put(txn, &rec)?;
    Ok(rec)
}

fn put(txn: &WriteTxn, rec: &AuditRecord) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(rec).map_err(|e| StoreError::Backend(e.to_string()))?;
    let mut table = txn.open_table(TABLE)?;
    table.insert(rec.id.as_str(), bytes.as_slice())?;
    Ok(())
}

/// Commits queued entries in batches. While the state file refuses writes (a full disk) the
/// entries are held in memory, up to [`HOLD`], and written when it writes again (the store says
/// so) or at the next entry or retry; past the bound the oldest are dropped and counted.
async fn writer(store: Store, mut rx: mpsc::Receiver<Msg>, max_entries: u64, counts: Arc<Counts>) {
    use std::sync::atomic::Ordering;
    let mut held: std::collections::VecDeque<AuditRecord> = std::collections::VecDeque::new();
    let mut again = store.writable_again();
    loop {
        let mut closing = false;
        let first = if held.is_empty() {
            match rx.recv().await {
                Some(m) => Some(m),
                None => return,
            }
        } else {
            tokio::select! {
                m = rx.recv() => {
                    closing = m.is_none();
                    m
                }
                _ = again.changed() => None,
                _ = tokio::time::sleep(RETRY) => None,
            }
        };
        let mut batch: Vec<AuditRecord> = held.drain(..).collect();
        let retried = batch.len();
        let mut flushes = Vec::new();
        let mut next = first;
        while let Some(m) = next.take() {
            match m {
                Msg::Entry(r) => batch.push(*r),
                Msg::Flush(f) => flushes.push(f),
            }
            if batch.len() < retried + BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let n = batch.len();
            let result = store
                .write({
                    let batch = batch.clone();
                    move |txn| {
                        for rec in &batch {
                            put(txn, rec)?;
                        }
                        // The oldest go first once the table is full (the hourly prune also ages them out).
                        let mut table = txn.open_table(TABLE)?;
                        let over = table.len()?.saturating_sub(max_entries);
                        for _ in 0..over {
                            if table.pop_first()?.is_none() {
                                break;
                            }
                        }
                        Ok(())
                    }
                })
                .await;
            match result {
                Ok(()) if retried > 0 => tracing::info!(entries = retried, "held audit entries written"),
                Ok(()) => {}
                Err(e @ StoreError::NotWritable { .. }) => {
                    held.extend(batch);
                    let over = held.len().saturating_sub(HOLD);
                    if over > 0 {
                        held.drain(..over);
                        counts.dropped.fetch_add(over as u64, Ordering::Relaxed);
                        tracing::error!(error = %e, dropped = over, "audit entries dropped: more held than the bound while the state file cannot write");
                    } else if retried == 0 {
                        tracing::warn!(error = %e, held = held.len(), "audit entries held until the state file writes again");
                    }
                }
                Err(e) => {
                    counts.dropped.fetch_add(n as u64, Ordering::Relaxed);
                    tracing::error!(error = %e, entries = n, "cannot write audit entries; they are lost");
                }
            }
        }
        counts.held.store(held.len(), Ordering::Relaxed);
        for f in flushes {
            let _ = f.send(());
        }
        if closing {
            if !held.is_empty() {
                counts.dropped.fetch_add(held.len() as u64, Ordering::Relaxed);
                tracing::error!(entries = held.len(), "audit entries lost at shutdown: the state file could not write");
            }
            return;
        }
    }
}

/// What to list: 1-based page, page size, and optional exact filters (`action` may end in `*`
/// for a prefix, e.g. `auth.*`).
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub actor: Option<String>,
}

impl AuditFilter {
    /// `action`: ending in `*`, a prefix (`cluster.*`); otherwise any part of the name, ignoring
    /// case (`cluster` finds every `cluster.…`, `register` finds `cluster.register`, and a whole
    /// name finds itself). `actor`: any part, ignoring case (`admin` finds `admin:admin` and
    /// `admin:alice`; `operator:clu_…` finds that cluster's operator).
    fn matches(&self, e: &AuditEntry) -> bool {
        let action_ok = match self.action.as_deref() {
            None => true,
            Some(a) => match a.strip_suffix('*') {
                Some(prefix) => starts_with_ignoring_case(&e.action, prefix),
                None => contains_ignoring_case(&e.action, a),
            },
        };
        action_ok && self.actor.as_deref().is_none_or(|a| contains_ignoring_case(&e.actor, a))
    }

    fn is_empty(&self) -> bool {
        self.action.is_none() && self.actor.is_none()
    }
}

fn starts_with_ignoring_case(hay: &str, prefix: &str) -> bool {
    hay.len() >= prefix.len() && hay.is_char_boundary(prefix.len()) && hay[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn contains_ignoring_case(hay: &str, needle: &str) -> bool {
    (0..=hay.len().saturating_sub(needle.len()))
        .filter(|&i| hay.is_char_boundary(i))
        .any(|i| starts_with_ignoring_case(&hay[i..], needle))
}

fn decode(k: &str, v: &[u8]) -> Result<AuditRecord, StoreError> {
    serde_json::from_slice(v).map_err(|e| StoreError::Decode {
        table: "audit_log",
        key: k.to_string(),
        message: e.to_string(),
    })
}

/// Newest first: the `page`-th slice of `size` matching entries, and how many match in all.
/// Without filters nothing but the page is decoded (the count is the table's); with filters the
/// count needs every entry (page by [`list_before`] to avoid that).
pub fn list(
    txn: &ReadTransaction,
    filter: &AuditFilter,
    page: u64,
    size: u64,
) -> Result<(Vec<AuditRecord>, u64), StoreError> {
    let table = match txn.open_table(TABLE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e.into()),
    };
    let skip = page.saturating_sub(1).saturating_mul(size);
    let mut out = Vec::new();
    if filter.is_empty() {
        for item in table.iter()?.rev().skip(skip as usize).take(size as usize) {
            let (k, v) = item?;
            out.push(decode(k.value(), v.value())?);
        }
        return Ok((out, table.len()?));
    }
    let mut total = 0u64;
    for item in table.iter()?.rev() {
        let (k, v) = item?;
        let rec = decode(k.value(), v.value())?;
        if !filter.matches(&rec.entry) {
            continue;
        }
        if total >= skip && (out.len() as u64) < size {
            out.push(rec);
        }
        total += 1;
    }
    Ok((out, total))
}

/// Newest first: up to `size` matching entries older than `cursor` (an entry id, exclusive; none
/// = from the newest), and the cursor for the next page when there may be more. Reads only as
/// far as the page reaches: keys are time-ordered.
pub fn list_before(
    txn: &ReadTransaction,
    filter: &AuditFilter,
    cursor: Option<&str>,
    size: u64,
) -> Result<(Vec<AuditRecord>, Option<String>), StoreError> {
    let table = match txn.open_table(TABLE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((Vec::new(), None)),
        Err(e) => return Err(e.into()),
    };
    let iter = match cursor {
        Some(c) => table.range::<&str>((std::ops::Bound::Unbounded, std::ops::Bound::Excluded(c)))?,
        None => table.iter()?,
    };
    let mut out = Vec::new();
    let mut more = false;
    for item in iter.rev() {
        let (k, v) = item?;
        let rec = decode(k.value(), v.value())?;
        if !filter.matches(&rec.entry) {
            continue;
        }
        if out.len() as u64 >= size {
            more = true;
            break;
        }
        out.push(rec);
    }
    let next = if more { out.last().map(|r| r.id.clone()) } else { None };
    Ok((out, next))
}

/// Entries removed per write transaction by [`prune`] (short transactions; the pass repeats).
const PRUNE_BATCH: usize = 10_000;

/// Retention: removes entries older than `retention` (by their time-ordered id) and then the
/// oldest beyond `max_entries`, in short transactions. Returns how many went.
pub async fn prune(store: &Store, now_ms: i64, retention: Duration, max_entries: u64) -> Result<u64, StoreError> {
    let cutoff_ms = now_ms.saturating_sub(retention.as_millis() as i64).max(0);
    let cutoff = ulid::Ulid::from_parts(cutoff_ms as u64, 0).to_string();
    let mut removed = 0u64;
    loop {
        let cutoff = cutoff.clone();
        let n = store
            .write(move |txn| {
                let mut table = txn.open_table(TABLE)?;
                let len = table.len()?;
                let over = len.saturating_sub(max_entries);
                let mut doomed = Vec::new();
                for item in table.iter()? {
                    let (k, _) = item?;
                    let key = k.value().to_string();
                    if (key.as_str() >= cutoff.as_str() && doomed.len() as u64 >= over) || doomed.len() >= PRUNE_BATCH {
                        break;
                    }
                    doomed.push(key);
                }
                for k in &doomed {
                    table.remove(k.as_str())?;
                }
                Ok(doomed.len())
            })
            .await?;
        removed += n as u64;
        if n < PRUNE_BATCH {
            return Ok(removed);
        }
    }
}

/// Entries after `after_id` (exclusive), oldest first, at most `limit`: what `audit tail -f` polls.
pub fn since(txn: &ReadTransaction, after_id: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
    let table = match txn.open_table(TABLE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    let iter = match after_id {
        Some(id) => table.range::<&str>((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))?,
        None => table.iter()?,
    };
    for item in iter {
        let (k, v) = item?;
        let rec: AuditRecord = serde_json::from_slice(v.value()).map_err(|e| StoreError::Decode {
            table: "audit_log",
            key: k.value().to_string(),
            message: e.to_string(),
        })?;
        out.push(rec);
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// The newest `n` entries, oldest first (what `audit tail` prints first).
pub fn last(txn: &ReadTransaction, n: usize) -> Result<Vec<AuditRecord>, StoreError> {
    let (mut recs, _) = list(txn, &AuditFilter::default(), 1, n as u64)?;
    recs.reverse();
    Ok(recs)
}

/// One line per entry for the CLI.
pub fn format_line(r: &AuditRecord) -> String {
    let e = &r.entry;
    let result = match e.result {
        AuditResult::Success => "success",
        AuditResult::Failure => "failure",
        AuditResult::Denied => "denied",
    };
    let mut line = format!("{} {:<22} {:<24} {:<8}", r.at, e.action, e.actor, result);
    if let Some(t) = &e.target {
        line.push_str(&format!(" target={t}"));
    }
    if let Some(a) = &e.client_addr {
        line.push_str(&format!(" addr={a}"));
    }
    if let Some(id) = &e.request_id {
        line.push_str(&format!(" request_id={id}"));
    }
    if e.details.as_object().is_some_and(|o| !o.is_empty()) {
        line.push_str(&format!(" {}", e.details));
    }
    line
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[tokio::test]
    async fn batched_records_list_newest_first_with_filters() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), crate::MIGRATIONS).unwrap();
        let clock = Clock::system();
        let log = AuditLog::start(store.clone(), clock.clone(), 1_000_000);
        for i in 0..30 {
            let action = if i % 3 == 0 { "auth.login" } else { "cluster.patch" };
            log.record(
                AuditEntry::system(format!("admin:u{}", i % 2), action, AuditResult::Success).target(format!("t{i}")),
            )
            .await;
        }
        log.flush().await;
        let (page, total) = store.read(|t| list(t, &AuditFilter::default(), 1, 5)).await.unwrap();
        assert_eq!(total, 30);
        assert_eq!(page[0].entry.target.as_deref(), Some("t29"));
        let f = AuditFilter { action: Some("auth.*".into()), actor: Some("admin:u0".into()) };
        let (page, total) = store.read(move |t| list(t, &f, 1, 50)).await.unwrap();
        assert_eq!(total, 5); // i in {0,6,12,18,24}
        assert!(page.iter().all(|r| r.entry.action == "auth.login" && r.entry.actor == "admin:u0"));
        let tail = store.read(|t| last(t, 3)).await.unwrap();
        assert_eq!(tail.iter().map(|r| r.entry.target.clone().unwrap()).collect::<Vec<_>>(), ["t27", "t28", "t29"]);
        let after = tail[0].id.clone();
        let more = store.read(move |t| since(t, Some(&after), 10)).await.unwrap();
        assert_eq!(more.len(), 2);
    }

    #[test]
    fn truncates_on_char_boundary() {
        let s = truncate("é".repeat(300));
        assert!(s.len() <= MAX_FIELD + '…'.len_utf8());
    }
}
