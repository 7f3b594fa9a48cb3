//! What `GET /internal/connect/verify` and the `/proxy/` relay look up for every request — the
//! session a CR name stands for, its cluster's ingress and session domain — kept in memory and
//! tagged with the generation of the last commit that wrote the tables it is read from (sessions,
//! the live-session index, clusters: [`crate::store::Store::table_generation`]).
//!
//! Every commit to those tables moves that generation, and an entry read at another one is never served: a
//! session paused, ended or deleted (or a cluster's ingress or domain changed) is read afresh by
//! the first request after the change commits, as if there were no cache. An entry is found by the
//! CR name it was read for and names its session id, which verify compares with the cookie's, so
//! it never answers for another session. Connection tokens are not cached here: redeeming one is a
//! write that must happen once.

use axum::http::HeaderValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::Sessions;
use super::model::{LIVE_SESSIONS, Phase, SESSIONS, SessionRecord, find_by_cr_name};
use crate::clusters::model::CLUSTERS;
use crate::locks::lock;
use crate::store::StoreError;

/// Entries kept at most; past it the map starts over (a flood of names costs reads, not memory).
const MAX_ENTRIES: usize = 4096;

/// A session as verify and the relay need it, with where its requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTarget {
    pub session_id: String,
    pub owner: String,
    pub phase: Phase,
    pub cluster_name: String,
    /// `host:port` the relay passes requests to: the cluster's session ingress, else the server's.
    pub ingress: Option<String>,
    /// The `Host` the ingress routes by: the cluster's session domain, else the server's (none
    /// when the cluster is gone).
    pub domain: Option<String>,
    /// When the run ends at the latest (ms): its start plus the offering's `max_runtime_sec`.
    pub ends_at: Option<i64>,
    /// The relay's headers for this session, made once per lookup rather than per request.
    pub headers: RelayHeaders,
}

/// The headers the relay adds for a session (`None`: the text is not a header value).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RelayHeaders {
    /// `X-GShare-Session`.
    pub session: Option<HeaderValue>,
    /// `X-GShare-User`.
    pub user: Option<HeaderValue>,
    /// `Host` and `X-Forwarded-Host`: the session domain, else the ingress's `host:port`.
    pub host: Option<HeaderValue>,
    /// The ingress's `host:port` as the authority of the URIs plain requests are sent to.
    pub ingress: Option<axum::http::uri::Authority>,
    /// The session domain may be compared with `Host` as text (`super::relay::is_plain_domain`).
    pub plain_domain: bool,
}

impl RelayHeaders {
    /// A copy that shares no bytes with `self`: cloning its values writes no count that
    /// another connection's requests write too.
    fn own_copy(&self) -> Self {
        let value = |v: &Option<HeaderValue>| v.as_ref().and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
        Self {
            session: value(&self.session),
            user: value(&self.user),
            host: value(&self.host),
            ingress: self.ingress.as_ref().and_then(|a| axum::http::uri::Authority::try_from(a.as_str()).ok()),
            plain_domain: self.plain_domain,
        }
    }

    pub fn new(session_id: &str, owner: &str, domain: Option<&str>, ingress: Option<&str>) -> Self {
        let value = |v: &str| HeaderValue::from_str(v).ok();
        Self {
            session: value(session_id),
            user: value(owner),
            host: domain.or(ingress).and_then(value),
            ingress: ingress.and_then(|i| axum::http::uri::Authority::try_from(i).ok()),
            plain_domain: domain.is_some_and(super::relay::is_plain_domain),
        }
    }
}

/// The in-memory side: one map, valid for one store generation.
#[derive(Debug, Default)]
pub struct LookupCache {
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug, Default)]
struct Entries {
    /// The tables' generation the map was read at.
    generation: u64,
    /// A store generation (any commit moves it) at which `generation` was found current: while
    /// the store's is still this, no commit has landed since and the tables need no look.
    checked_at: u64,
    by_cr: HashMap<String, Arc<SessionTarget>>,
}

impl LookupCache {
    /// The entry for `cr` if the map is still current at store generation `store` (read before
    /// this call): no commit since it was last checked, or `tables()` (the tables' generation,
    /// asked only then) still the map's. `Err`: not found, and the tables' generation to read at.
    fn get(&self, cr: &str, store: u64, tables: impl FnOnce() -> u64) -> Result<Arc<SessionTarget>, u64> {
        {
            let e = lock(&self.entries);
            if e.checked_at == store {
                return e.by_cr.get(cr).cloned().ok_or(e.generation);
            }
        }
        let generation = tables();
        let mut e = lock(&self.entries);
        if e.generation != generation {
            return Err(generation);
        }
        e.checked_at = e.checked_at.max(store);
        e.by_cr.get(cr).cloned().ok_or(generation)
    }

    /// Keeps what was read at `generation` (taken before the read: a commit in between only makes
    /// the entry stale at once, never wrong), which was current at store generation `store`.
    fn put(&self, cr: &str, generation: u64, store: u64, target: Arc<SessionTarget>) {
        let mut e = lock(&self.entries);
        if e.generation != generation {
            if generation < e.generation {
                return; // read before a commit another request has already seen
            }
            e.by_cr.clear();
            e.generation = generation;
            e.checked_at = store;
        } else {
            e.checked_at = e.checked_at.max(store);
        }
        if e.by_cr.len() >= MAX_ENTRIES {
            e.by_cr.clear();
        }
        e.by_cr.insert(cr.to_string(), target);
    }

    /// (hits, misses) since start.
    pub fn stats(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

/// One connection's last lookup, in a copy of its own: the requests of a keep-alive connection
/// (a browser's, to one session's domain) find it without the shared map's lock and without
/// writing a reference count that requests on other cores write too. It is the shared map's
/// answer as of a store generation, and is asked of the map again once any commit lands.
#[derive(Default)]
pub struct ConnectionLookup(Mutex<Option<Kept>>);

struct Kept {
    cr: String,
    /// The store's generation when the shared map last gave `shared` for `cr`.
    store: u64,
    shared: Arc<SessionTarget>,
    /// Made by the connection's second request for `shared` (a connection that makes one, a
    /// WebSocket's, does not pay for the copy).
    own: Option<Arc<SessionTarget>>,
}

impl SessionTarget {
    /// A copy whose header values share no bytes with `self`'s.
    fn own_copy(&self) -> Self {
        Self { headers: self.headers.own_copy(), ..self.clone() }
    }
}

/// The session a CR name stands for, from a read transaction.
pub(crate) fn find(txn: &redb::ReadTransaction, name: &str) -> Result<Option<SessionRecord>, StoreError> {
    find_by_cr_name(
        name,
        |id| SESSIONS.get(txn, id),
        || Ok(LIVE_SESSIONS.list(txn)?.into_iter().map(|(id, _)| id).collect()),
    )
}

/// When a session's current run ends at the latest: its (re)start plus `max_runtime_sec`.
pub(crate) fn run_ends_at(s: &SessionRecord) -> Option<i64> {
    let max = s.shape.max_runtime_sec;
    (max > 0).then(|| s.resumed_at.or(s.started_at).map(|t| t.saturating_add(max.saturating_mul(1000)))).flatten()
}

impl Sessions {
    /// The session `cr` names, with its ingress and domain: from memory while no commit has landed
    /// since it was read, else from the store. Unknown names are not remembered.
    pub async fn target(&self, cr: &str) -> Result<Option<Arc<SessionTarget>>, StoreError> {
        // The generation before the data (see `LookupCache::put`): the last commit that wrote a
        // table this answer is read from, so operator reports that write only inventory tables
        // (the steady flood) leave the entries valid.
        // The store's generation first: while it has not moved, neither have the tables (a
        // commit writes their generations before it moves the store's), and they are not looked at.
        let store = self.store.generation();
        let tables = || self.store.table_generation(&[SESSIONS.name(), LIVE_SESSIONS.name(), CLUSTERS.name()]);
        let generation = match self.lookups.get(cr, store, tables) {
            Ok(t) => {
                self.lookups.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(t));
            }
            Err(generation) => generation,
        };
        self.lookups.misses.fetch_add(1, Ordering::Relaxed);
        let name = cr.to_string();
        let found = self
            .store
            .read(move |txn| {
                let Some(s) = find(txn, &name)? else { return Ok(None) };
                let c = CLUSTERS.get(txn, &s.cluster_id)?;
                Ok(Some((s, c)))
            })
            .await?;
        let Some((s, cluster)) = found else { return Ok(None) };
        let ingress =
            cluster.as_ref().and_then(|c| c.session_ingress.clone()).or_else(|| self.config.session_ingress.clone());
        let domain = cluster.as_ref().and_then(|c| self.session_domain(c));
        let target = Arc::new(SessionTarget {
            headers: RelayHeaders::new(&s.id, &s.owner, domain.as_deref(), ingress.as_deref()),
            ingress,
            domain,
            ends_at: run_ends_at(&s),
            session_id: s.id,
            owner: s.owner,
            phase: s.phase,
            cluster_name: s.cluster_name,
        });
        self.lookups.put(cr, generation, store, target.clone());
        Ok(Some(target))
    }

    /// [`Self::target`] through `connection`'s last lookup: the same answer, without the shared
    /// map while no commit has landed since that lookup (see [`ConnectionLookup`]).
    pub async fn connection_target(
        &self,
        cr: &str,
        connection: &ConnectionLookup,
    ) -> Result<Option<Arc<SessionTarget>>, StoreError> {
        // Read before the shared map (as `target` does): a commit in between makes the copy
        // stale at once, never wrong.
        let store = self.store.generation();
        if let Some(k) = lock(&connection.0).as_mut()
            && k.store == store
            && k.cr == cr
        {
            let own = k.own.get_or_insert_with(|| Arc::new(k.shared.own_copy()));
            return Ok(Some(own.clone()));
        }
        let Some(shared) = self.target(cr).await? else { return Ok(None) };
        let mut kept = lock(&connection.0);
        if let Some(k) = kept.as_mut()
            && k.cr == cr
            && Arc::ptr_eq(&k.shared, &shared)
        {
            k.store = k.store.max(store);
            return Ok(Some(k.own.clone().unwrap_or(shared)));
        }
        *kept = Some(Kept { cr: cr.to_string(), store, shared: shared.clone(), own: None });
        Ok(Some(shared))
    }

    /// (hits, misses) of the shared map's lookups.
    pub fn lookup_stats(&self) -> (u64, u64) {
        self.lookups.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(id: &str) -> Arc<SessionTarget> {
        Arc::new(SessionTarget {
            session_id: id.into(),
            owner: "alice".into(),
            phase: Phase::Running,
            cluster_name: "c".into(),
            ingress: None,
            domain: None,
            ends_at: None,
            headers: RelayHeaders::default(),
        })
    }

    /// As a request sees the cache when the store's generation is `g + 1000` (some commits to
    /// other tables) and the tables' is `g`.
    fn get(c: &LookupCache, cr: &str, g: u64) -> Option<Arc<SessionTarget>> {
        c.get(cr, g + 1000, || g).ok()
    }

    fn put(c: &LookupCache, cr: &str, g: u64, t: Arc<SessionTarget>) {
        c.put(cr, g, g + 1000, t)
    }

    #[test]
    fn the_tables_are_asked_only_after_a_commit() {
        let c = LookupCache::default();
        c.put("ses-a", 5, 40, target("ses_A"));
        let asked = std::cell::Cell::new(0);
        let tables = |g: u64| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                g
            }
        };
        assert_eq!(c.get("ses-a", 40, tables(5)).unwrap().session_id, "ses_A");
        assert_eq!(c.get("ses-b", 40, tables(5)).unwrap_err(), 5, "not found: read at the map's generation");
        assert_eq!(asked.get(), 0, "no commit since the map was checked");
        // A commit to other tables: asked once, the entry still serves, and the next is not asked.
        assert_eq!(c.get("ses-a", 41, tables(5)).unwrap().session_id, "ses_A");
        assert_eq!(asked.get(), 1);
        assert!(c.get("ses-a", 41, tables(5)).is_ok());
        assert_eq!(asked.get(), 1);
        // A commit to these tables: the entry is not served.
        assert_eq!(c.get("ses-a", 42, tables(6)).unwrap_err(), 6);
        assert_eq!(asked.get(), 2);
        // A map read at generation 6 while the store was at 42 serves at 42 without asking.
        c.put("ses-a", 6, 42, target("ses_A2"));
        assert_eq!(c.get("ses-a", 42, tables(6)).unwrap().session_id, "ses_A2");
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn an_entry_serves_only_its_generation_and_name() {
        let c = LookupCache::default();
        put(&c, "ses-a", 5, target("ses_A"));
        assert_eq!(get(&c, "ses-a", 5).unwrap().session_id, "ses_A");
        assert!(get(&c, "ses-b", 5).is_none(), "another name");
        assert!(get(&c, "ses-a", 6).is_none(), "after a commit");
        assert!(get(&c, "ses-a", 4).is_none());
        // A read from an older generation never replaces a newer map.
        put(&c, "ses-b", 6, target("ses_B"));
        put(&c, "ses-a", 5, target("ses_A"));
        assert!(get(&c, "ses-a", 6).is_none());
        assert_eq!(get(&c, "ses-b", 6).unwrap().session_id, "ses_B");
    }

    #[test]
    fn the_map_is_bounded() {
        let c = LookupCache::default();
        for i in 0..MAX_ENTRIES + 10 {
            put(&c, &format!("ses-{i}"), 1, target("ses_X"));
        }
        assert!(lock(&c.entries).by_cr.len() <= MAX_ENTRIES);
        assert!(get(&c, &format!("ses-{}", MAX_ENTRIES + 9), 1).is_some(), "the newest is kept");
    }
}
