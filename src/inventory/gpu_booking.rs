//! GPU-slice booking: the one way another domain changes what a card has given out. A session
//! that starts running books its slice ([`book`]); one that stops gives it back ([`release`]).
//! The control plane owns the cards' `used_*` fields (the operator always reports 0), and the
//! allocations table records every booking so a release gives back exactly what was taken.
//! Both run inside the caller's write transaction, so a booking commits with the phase change
//! that caused it.

use redb::{ReadTransaction, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::clusters::model::GPUS;
use crate::store::{JsonTable, Migration, StoreError};

/// `<session id>/<alc_…>` -> GPU allocation (keyed by session: a session's allocations are one
/// range read, however long the history).
pub const ALLOCATIONS: JsonTable<AllocationRecord> = JsonTable::new("allocations");

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

/// Opens the session's allocation unless one is open, and books its share on the card.
pub fn book(txn: &WriteTransaction, b: &Booking<'_>, now: i64) -> Result<(), StoreError> {
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
    ALLOCATIONS.put(txn, &allocation_key(b.session_id, &id), &a)
}

/// Releases the session's open allocations and gives their slices back to the cards.
pub fn release(txn: &WriteTransaction, session_id: &str, now: i64) -> Result<(), StoreError> {
    for (key, mut a) in ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(session_id))? {
        if a.is_open() {
            a.released_at = Some(now);
            ALLOCATIONS.put(txn, &key, &a)?;
            if let Some(uuid) = &a.gpu_uuid {
                let key = format!("{}/{uuid}", a.cluster_id);
                if let Some(mut g) = GPUS.get_in_write(txn, &key)? {
                    g.used_mem_mb = g.used_mem_mb.saturating_sub(a.gpu_mem_mb);
                    g.used_cores = g.used_cores.saturating_sub(a.gpu_cores);
                    GPUS.put(txn, &key, &g)?;
                }
            }
        }
    }
    Ok(())
}

/// Ids of the cluster's open allocations (a cluster with any cannot be unregistered).
pub fn open_on_cluster(txn: &WriteTransaction, cluster_id: &str) -> Result<Vec<AllocationRecord>, StoreError> {
    Ok(ALLOCATIONS
        .list_in_write(txn)?
        .into_iter()
        .filter(|(_, a)| a.cluster_id == cluster_id && a.is_open())
        .map(|(_, a)| a)
        .collect())
}

/// How many of the session's allocations are open (for `/metrics`).
pub fn open_of_session(txn: &ReadTransaction, session_id: &str) -> Result<u64, StoreError> {
    Ok(ALLOCATIONS.list_prefix(txn, &allocation_prefix(session_id))?.iter().filter(|(_, a)| a.is_open()).count() as u64)
}

/// Schema 2: allocations keyed by their session (schema 1 keyed them by their own id).
pub const KEY_BY_SESSION: Migration =
    Migration { to: 2, what: "allocations keyed by session", run: key_allocations_by_session };

fn key_allocations_by_session(txn: &WriteTransaction) -> Result<(), StoreError> {
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
}
