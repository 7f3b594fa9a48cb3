//! GPU-slice booking: the one way another domain changes what a card has given out. A session
//! that starts running books its slice ([`book`]); one that stops gives it back ([`release`]).
//! The control plane owns the cards' `used_*` fields (the operator always reports 0), and the
//! allocations table records every booking so a release gives back exactly what was taken.
//! Both run inside the caller's write transaction, so a booking commits with the phase change
//! that caused it.
//!
//! **Holds.** A GPU session admitted by the fit check (created, started from the queue, resumed)
//! takes nothing from a card until the operator reports the card it was bound to, so on its own
//! the fit check would let the next create take the same last slice. [`hold`] therefore sets the
//! admitted slice aside on the card the fit check chose, in the admitting transaction
//! ([`CARD_HOLDS`]: per card, what is held on it; [`SESSION_HOLDS`]: per session, its hold), and
//! the fit check counts a card's holds as used. The hold goes when the session is booked on a
//! card ([`book`] with a card: what inventory shows then replaces it, wherever the pod landed) or
//! gives its GPU back ([`release`]: ended, paused cold). Both are point reads and writes: the
//! create path scans nothing.

use crate::store::WriteTxn;
use redb::ReadTransaction;
use serde::{Deserialize, Serialize};

use super::model::GPUS;
use crate::store::{JsonTable, Migration, StoreError};

/// `<session id>/<alc_…>` -> GPU allocation (keyed by session: a session's allocations are one
/// range read, however long the history).
pub const ALLOCATIONS: JsonTable<AllocationRecord> = JsonTable::new("allocations");

/// The open allocations' totals under one key ([`OPEN_KEY`]), kept by [`book`] and [`release`]
/// in the same transaction as the allocations: `/metrics` reads one row, however many sessions
/// there are.
pub const ALLOCATION_TOTALS: JsonTable<OpenTotals> = JsonTable::new("allocation_totals");
const OPEN_KEY: &str = "open";

/// What the open allocations hold together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTotals {
    pub allocations: u64,
    pub gpu_mem_mb: u64,
    pub gpu_cores: u64,
}

fn adjust_totals(txn: &WriteTxn, f: impl FnOnce(&mut OpenTotals)) -> Result<(), StoreError> {
    let mut t = ALLOCATION_TOTALS.get_in_write(txn, OPEN_KEY)?.unwrap_or_default();
    f(&mut t);
    ALLOCATION_TOTALS.put(txn, OPEN_KEY, &t)
}

/// The open allocations' totals (for `/metrics`).
pub fn open_totals(txn: &ReadTransaction) -> Result<OpenTotals, StoreError> {
    Ok(ALLOCATION_TOTALS.get(txn, OPEN_KEY)?.unwrap_or_default())
}

pub fn allocation_prefix(session_id: &str) -> String {
    format!("{session_id}/")
}

pub fn allocation_key(session_id: &str, allocation_id: &str) -> String {
    format!("{session_id}/{allocation_id}")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllocationRecord {
    pub id: String,
    pub cluster_id: String,
    pub session_id: String,
    pub gpu_uuid: Option<String>,
    pub created_at: i64,
    pub released_at: Option<i64>,
    /// What this allocation added to the card's `used_*` (given back on release).
    #[serde(default)]
    pub gpu_mem_mb: u64,
    #[serde(default)]
    pub gpu_cores: u64,
}

impl AllocationRecord {
    pub fn is_open(&self) -> bool {
        self.released_at.is_none()
    }
}

/// How much of the card a booking takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The whole card, whatever its size.
    Exclusive,
    /// A slice (HAMi vGPU): memory in MiB and a percentage of the cores.
    Slice { mem_mb: u64, cores: u64 },
}

/// What a session asks of a cluster's cards.
#[derive(Debug, Clone)]
pub struct Booking<'a> {
    pub cluster_id: &'a str,
    pub session_id: &'a str,
    /// The card the operator bound, if known yet (without one nothing is taken from a card).
    pub gpu_uuid: Option<&'a str>,
    pub share: Share,
}

/// `<cluster id>/<gpu uuid>` -> what the sessions admitted but not yet bound hold on that card.
pub const CARD_HOLDS: JsonTable<Held> = JsonTable::new("gpu_holds");
/// `<session id>` -> the slice the session holds (at most one), until it is bound or gives it back.
pub const SESSION_HOLDS: JsonTable<Hold> = JsonTable::new("gpu_holds_by_session");

/// What a card's holds add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub gpu_mem_mb: u64,
    pub gpu_cores: u64,
    /// How many sessions hold a part of it (a card any session holds is not wholly free).
    pub sessions: u32,
}

/// One session's hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub cluster_id: String,
    pub gpu_uuid: String,
    pub gpu_mem_mb: u64,
    pub gpu_cores: u64,
    pub at: i64,
}

fn card_key(cluster_id: &str, uuid: &str) -> String {
    format!("{cluster_id}/{uuid}")
}

/// What is held on card `uuid` of `cluster_id` (committed state; the fit summary's reads).
pub fn held_on(txn: &ReadTransaction, cluster_id: &str, uuid: &str) -> Result<Held, StoreError> {
    Ok(CARD_HOLDS.get(txn, &card_key(cluster_id, uuid))?.unwrap_or_default())
}

/// Every held card of `cluster_id` by uuid (a summary's rebuild: one range read of the holds).
pub fn held_on_cluster(
    txn: &ReadTransaction,
    cluster_id: &str,
) -> Result<std::collections::HashMap<String, Held>, StoreError> {
    let prefix = format!("{cluster_id}/");
    Ok(CARD_HOLDS
        .list_prefix(txn, &prefix)?
        .into_iter()
        .map(|(k, h)| (k.strip_prefix(&prefix).unwrap_or(&k).to_string(), h))
        .collect())
}

/// Sets `share` aside for session `session_id` on card `uuid` of `cluster_id` if the card (as
/// this transaction sees it, holds included) can give it now; a hold the session had goes first.
/// Answers whether it could.
pub fn hold(
    txn: &WriteTxn,
    session_id: &str,
    cluster_id: &str,
    uuid: &str,
    share: Share,
    now: i64,
) -> Result<bool, StoreError> {
    drop_hold(txn, session_id)?;
    let key = card_key(cluster_id, uuid);
    let Some(g) = GPUS.get_in_write(txn, &key)? else { return Ok(false) };
    let mut held = CARD_HOLDS.get_in_write(txn, &key)?.unwrap_or_default();
    let free_mem = g.total_mem_mb.saturating_sub(g.used_mem_mb).saturating_sub(held.gpu_mem_mb);
    let free_cores = g.total_cores.saturating_sub(g.used_cores).saturating_sub(held.gpu_cores);
    let (mem, cores) = match share {
        Share::Exclusive if g.used_mem_mb == 0 && g.used_cores == 0 && held.sessions == 0 => {
            (g.total_mem_mb, g.total_cores)
        }
        Share::Exclusive => return Ok(false),
        Share::Slice { mem_mb, cores } if mem_mb <= free_mem && cores <= free_cores => (mem_mb, cores),
        Share::Slice { .. } => return Ok(false),
    };
    held.gpu_mem_mb = held.gpu_mem_mb.saturating_add(mem);
    held.gpu_cores = held.gpu_cores.saturating_add(cores);
    held.sessions = held.sessions.saturating_add(1);
    CARD_HOLDS.put(txn, &key, &held)?;
    let h = Hold { cluster_id: cluster_id.into(), gpu_uuid: uuid.into(), gpu_mem_mb: mem, gpu_cores: cores, at: now };
    SESSION_HOLDS.put(txn, session_id, &h)?;
    super::fit::changed_gpu(txn, cluster_id, uuid);
    Ok(true)
}

/// Gives back the hold of session `session_id`, if it has one.
pub fn drop_hold(txn: &WriteTxn, session_id: &str) -> Result<(), StoreError> {
    let Some(h) = SESSION_HOLDS.get_in_write(txn, session_id)? else { return Ok(()) };
    SESSION_HOLDS.delete(txn, session_id)?;
    let key = card_key(&h.cluster_id, &h.gpu_uuid);
    let mut held = CARD_HOLDS.get_in_write(txn, &key)?.unwrap_or_default();
    held.gpu_mem_mb = held.gpu_mem_mb.saturating_sub(h.gpu_mem_mb);
    held.gpu_cores = held.gpu_cores.saturating_sub(h.gpu_cores);
    held.sessions = held.sessions.saturating_sub(1);
    if held.sessions == 0 {
        CARD_HOLDS.delete(txn, &key)?;
    } else {
        CARD_HOLDS.put(txn, &key, &held)?;
    }
    super::fit::changed_gpu(txn, &h.cluster_id, &h.gpu_uuid);
    Ok(())
}

/// The hold of session `session_id` (tests, the session view's diagnostics).
pub fn hold_of(txn: &ReadTransaction, session_id: &str) -> Result<Option<Hold>, StoreError> {
    SESSION_HOLDS.get(txn, session_id)
}

/// Forgets a cluster's card holds (the cluster's inventory goes; its sessions' holds go as
/// they end).
pub fn forget_holds(txn: &WriteTxn, cluster_id: &str) -> Result<(), StoreError> {
    CARD_HOLDS.delete_prefix(txn, &format!("{cluster_id}/")).map(drop)
}

/// Opens the session's allocation unless one is open, and books its share on the card. Booked on
/// a card, the session's hold goes (what the card shows replaces it).
pub fn book(txn: &WriteTxn, b: &Booking<'_>, now: i64) -> Result<(), StoreError> {
    if b.gpu_uuid.is_some() {
        drop_hold(txn, b.session_id)?;
    }
    let open =
        ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(b.session_id))?.into_iter().any(|(_, a)| a.is_open());
    if open {
        return Ok(());
    }
    let (mut mem, mut cores) = (0, 0);
    if let Some(uuid) = b.gpu_uuid {
        let key = format!("{}/{uuid}", b.cluster_id);
        if let Some(mut g) = GPUS.get_in_write(txn, &key)? {
            (mem, cores) = match b.share {
                Share::Exclusive => (g.total_mem_mb, g.total_cores),
                Share::Slice { mem_mb, cores } => (mem_mb, cores),
            };
            g.used_mem_mb = g.used_mem_mb.saturating_add(mem);
            g.used_cores = g.used_cores.saturating_add(cores);
            GPUS.put(txn, &key, &g)?;
            super::fit::changed_gpu(txn, b.cluster_id, uuid);
        }
    }
    let id = format!("alc_{}", ulid::Ulid::new());
    let a = AllocationRecord {
        id: id.clone(),
        cluster_id: b.cluster_id.to_string(),
        session_id: b.session_id.to_string(),
        gpu_uuid: b.gpu_uuid.map(str::to_string),
        created_at: now,
        released_at: None,
        gpu_mem_mb: mem,
        gpu_cores: cores,
    };
    adjust_totals(txn, |t| {
        t.allocations += 1;
        t.gpu_mem_mb = t.gpu_mem_mb.saturating_add(mem);
        t.gpu_cores = t.gpu_cores.saturating_add(cores);
    })?;
    ALLOCATIONS.put(txn, &allocation_key(b.session_id, &id), &a)
}

/// Releases the session's open allocations and its hold, and gives their slices back to the cards.
pub fn release(txn: &WriteTxn, session_id: &str, now: i64) -> Result<(), StoreError> {
    drop_hold(txn, session_id)?;
    for (key, mut a) in ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(session_id))? {
        if a.is_open() {
            a.released_at = Some(now);
            ALLOCATIONS.put(txn, &key, &a)?;
            adjust_totals(txn, |t| {
                t.allocations = t.allocations.saturating_sub(1);
                t.gpu_mem_mb = t.gpu_mem_mb.saturating_sub(a.gpu_mem_mb);
                t.gpu_cores = t.gpu_cores.saturating_sub(a.gpu_cores);
            })?;
            if let Some(uuid) = &a.gpu_uuid {
                let key = format!("{}/{uuid}", a.cluster_id);
                if let Some(mut g) = GPUS.get_in_write(txn, &key)? {
                    g.used_mem_mb = g.used_mem_mb.saturating_sub(a.gpu_mem_mb);
                    g.used_cores = g.used_cores.saturating_sub(a.gpu_cores);
                    GPUS.put(txn, &key, &g)?;
                    super::fit::changed_gpu(txn, &a.cluster_id, uuid);
                }
            }
        }
    }
    Ok(())
}

/// Ids of the cluster's open allocations (a cluster with any cannot be unregistered).
pub fn open_on_cluster(txn: &WriteTxn, cluster_id: &str) -> Result<Vec<AllocationRecord>, StoreError> {
    Ok(ALLOCATIONS
        .list_in_write(txn)?
        .into_iter()
        .filter(|(_, a)| a.cluster_id == cluster_id && a.is_open())
        .map(|(_, a)| a)
        .collect())
}

/// The open allocations' totals counted from the allocations (schema migration, and what tests
/// compare [`open_totals`] with).
pub fn count_open(allocations: &[(String, AllocationRecord)]) -> OpenTotals {
    let mut t = OpenTotals::default();
    for (_, a) in allocations.iter().filter(|(_, a)| a.is_open()) {
        t.allocations += 1;
        t.gpu_mem_mb = t.gpu_mem_mb.saturating_add(a.gpu_mem_mb);
        t.gpu_cores = t.gpu_cores.saturating_add(a.gpu_cores);
    }
    t
}

/// Schema 4: the open allocations' totals ([`ALLOCATION_TOTALS`]), counted once.
pub const COUNT_OPEN_ALLOCATIONS: Migration = Migration {
    to: 4,
    what: "the open GPU allocations' totals",
    run: |txn| {
        let t = count_open(&ALLOCATIONS.list_in_write(txn)?);
        ALLOCATION_TOTALS.put(txn, OPEN_KEY, &t)
    },
};

/// Schema 2: allocations keyed by their session (schema 1 keyed them by their own id).
pub const KEY_BY_SESSION: Migration =
    Migration { to: 2, what: "allocations keyed by session", run: key_allocations_by_session };

fn key_allocations_by_session(txn: &WriteTxn) -> Result<(), StoreError> {
    for (key, a) in ALLOCATIONS.list_in_write(txn)? {
        let wanted = allocation_key(&a.session_id, &a.id);
        if key != wanted {
            ALLOCATIONS.delete(txn, &key)?;
            ALLOCATIONS.put(txn, &wanted, &a)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[tokio::test]
    async fn schema_1_allocations_are_keyed_by_session() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        {
            // A schema-1 file (the steps up to 1 only): allocations keyed by their own id.
            let store = Store::open(&path, &crate::MIGRATIONS[..1]).unwrap();
            let alloc = AllocationRecord {
                id: "alc_1".into(),
                cluster_id: "clu_1".into(),
                session_id: "ses_A".into(),
                gpu_uuid: None,
                created_at: 0,
                released_at: None,
                gpu_mem_mb: 0,
                gpu_cores: 0,
            };
            store.write(move |txn| ALLOCATIONS.put(txn, "alc_1", &alloc)).await.unwrap();
        }
        let store = Store::open(&path, crate::MIGRATIONS).unwrap();
        assert_eq!(store.schema_version().unwrap(), crate::store::schema_of(crate::MIGRATIONS));
        let keys: Vec<String> =
            store.read(|txn| ALLOCATIONS.list(txn)).await.unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["ses_A/alc_1"]);
    }

    fn alloc(session: &str, id: &str, mem: u64, released: bool) -> AllocationRecord {
        AllocationRecord {
            id: id.into(),
            cluster_id: "clu_1".into(),
            session_id: session.into(),
            gpu_uuid: None,
            created_at: 0,
            released_at: released.then_some(1),
            gpu_mem_mb: mem,
            gpu_cores: 10,
        }
    }

    /// A schema-3 file with open and released allocations gets their totals counted; from then
    /// on booking and releasing keep the totals equal to a count of the allocations.
    #[tokio::test]
    async fn open_totals_are_counted_once_then_kept_by_book_and_release() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        {
            // The steps before this one (a schema-3 file).
            let store = Store::open(&path, &crate::MIGRATIONS[..4]).unwrap();
            assert_eq!(store.schema_version().unwrap(), 3);
            store
                .write(|txn| {
                    ALLOCATIONS.put(txn, "ses_A/alc_1", &alloc("ses_A", "alc_1", 1024, false))?;
                    ALLOCATIONS.put(txn, "ses_A/alc_0", &alloc("ses_A", "alc_0", 512, true))?;
                    ALLOCATIONS.put(txn, "ses_B/alc_2", &alloc("ses_B", "alc_2", 2048, false))
                })
                .await
                .unwrap();
        }
        let store = Store::open(&path, crate::MIGRATIONS).unwrap();
        assert_eq!(store.schema_version().unwrap(), crate::store::schema_of(crate::MIGRATIONS));
        let totals = store.read(open_totals).await.unwrap();
        assert_eq!(totals, OpenTotals { allocations: 2, gpu_mem_mb: 3072, gpu_cores: 20 });
        store.write(|txn| release(txn, "ses_A", 5)).await.unwrap();
        // Booked without a card: nothing taken from one, one more allocation open.
        let b = || Booking { cluster_id: "clu_1", session_id: "ses_C", gpu_uuid: None, share: Share::Exclusive };
        store.write(move |txn| book(txn, &b(), 6)).await.unwrap();
        // Booked again while open: nothing more.
        store.write(move |txn| book(txn, &b(), 7)).await.unwrap();
        let (kept, counted) =
            store.read(|txn| Ok((open_totals(txn)?, count_open(&ALLOCATIONS.list(txn)?)))).await.unwrap();
        assert_eq!(kept, counted);
        assert_eq!(kept, OpenTotals { allocations: 2, gpu_mem_mb: 2048, gpu_cores: 10 });
    }
}
