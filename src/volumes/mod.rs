//! Volumes: members' persistent workspaces. Each volume is a record here (`vol_<ULID>`) that
//! lives on one cluster; the operator there makes its PVC when a session's CR names it
//! (`spec.volumes`), reports it every sync (`POST /internal/volumes/sync`), grows it to the quota
//! answered and deletes it when the answer says `reclaim` (contract §2.8).
//!
//! A member's home workspace is made on their first session on a cluster and mounted at
//! `/workspace` in every session of theirs there (the session create path calls
//! [`txn::mounts_for_session`] through `sessions::VolumeHook`). Named volumes are added, grown
//! (never shrunk, within the owner's storage limit) and deleted through `/api/v1/volumes`; a
//! volume a live session mounts is not deleted. A PVC a sync reports that no record explains is
//! an orphan: counted in the answer, kept and listed for an admin, never reclaimed from here.

pub mod model;
pub mod routes;
pub mod txn;

use std::sync::Arc;

use serde_json::Value;

use crate::callbacks::wire::{VolumeSync, VolumeSyncAnswer};
use crate::clock::Clock;
use crate::clusters::ClusterId;
use crate::config::Config;
use crate::http::error::ErrorCode;
use crate::sessions::VolumeHook;
use crate::store::{Rows, Store, StoreError};
use model::*;
pub use txn::{Adopt, NewVolume, SyncError};

/// The most PVCs one sync may report. The operator reads at most 1 MiB of the answer (its
/// `io.LimitReader(resp.Body, 1<<20)`), about 100 bytes a PVC: a larger report could not be
/// answered whole, so it is refused, naming the bound.
pub const MAX_SYNC_VOLUMES: usize = 5000;
/// The most scratch-disk readings one sync may carry (one per session pod).
pub const MAX_SYNC_SESSIONS: usize = 5000;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String, kind: &'static str },
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String, details: Value },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who acts: an admin on every volume, a member on their own.
#[derive(Debug, Clone)]
pub struct Actor {
    pub name: String,
    pub admin: bool,
}

impl Actor {
    pub fn may_act_for(&self, owner: &str) -> bool {
        self.admin || self.name == owner
    }
}

/// A member's storage limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The size of a new home workspace (GiB).
    pub home_gb: i64,
    /// What their volumes may add up to (GiB); `None`: no limit.
    pub storage_gb: Option<i64>,
}

/// `owner`'s limits from their effective resource policy (user → group → global, merged per
/// field by the policy room): a new home workspace is `limits.volume_gb` big and their volumes
/// may add up to `limits.storage_gb` (0: no limit, as every policy limit). A field no policy sets
/// falls back to the server's `volume_home_gb` / `volume_storage_gb`.
pub fn limits_of(txn: &impl Rows, config: &Config, owner: &str) -> Result<Limits, StoreError> {
    let group = crate::auth::accounts::group_of(txn, owner)?;
    let effective = crate::policy::model::merge(&crate::policy::model::chain(txn, owner, group.as_deref())?);
    let limits = effective.map(|e| e.limits).unwrap_or_default();
    Ok(Limits {
        home_gb: limits.volume_gb.filter(|g| *g > 0).unwrap_or(config.volume_home_gb),
        storage_gb: match limits.storage_gb {
            Some(g) => Some(g).filter(|g| *g > 0),
            None => Some(config.volume_storage_gb).filter(|g| *g > 0),
        },
    })
}

#[derive(Debug)]
pub struct Volumes {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
}

/// `GET /api/v1/volumes` filters (an admin's; a member's list is always their own).
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub owner: Option<String>,
    pub cluster_id: Option<String>,
    /// Deleted volumes too (reclaim pending or reclaimed).
    pub deleted: bool,
}

impl Volumes {
    pub fn new(store: Store, clock: Clock, config: Arc<Config>) -> Self {
        Self { store, clock, config }
    }

    /// The function the session create path calls for a new session's volumes.
    pub fn session_hook(self: &Arc<Self>) -> VolumeHook {
        let me = self.clone();
        Arc::new(move |txn, owner, cluster, now| txn::mounts_for_session(txn, owner, cluster, now, &me.config))
    }

    /// The operator's sync (bounded by the route: [`MAX_SYNC_VOLUMES`]).
    pub async fn sync(&self, cluster: &ClusterId, r: VolumeSync) -> Result<VolumeSyncAnswer, SyncError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        let answer = self.store.write_batched_in(cluster.as_str(), move |txn| txn::sync(txn, &id, &r, now)).await;
        match &answer {
            Ok(a) if a.orphans > 0 => {
                tracing::info!(cluster_id = %cluster, orphans = a.orphans, "volume sync: PVCs no volume explains; kept as orphans, left untouched")
            }
            Err(SyncError::OtherCluster { pvcs }) => {
                tracing::warn!(cluster_id = %cluster, pvcs = ?pvcs, "volume sync named another cluster's volumes; refused, nothing kept")
            }
            _ => {}
        }
        answer
    }

    /// Volumes (newest first) and, for an admin, the orphans.
    pub async fn list(&self, q: ListQuery, actor: Actor) -> Result<VolumeList, VolumeError> {
        let now = self.clock.now_ms();
        Ok(self
            .store
            .read(move |txn| {
                let mounts = txn::mounts_by_volume(crate::sessions::model::live_sessions(txn)?);
                let owner = if actor.admin { q.owner.clone() } else { Some(actor.name.clone()) };
                // A member also sees the volumes shared with their group (read-only).
                let group = if actor.admin {
                    None
                } else {
                    crate::auth::accounts::group_of(&crate::store::DryRun::new(txn), &actor.name)?
                };
                let mut data: Vec<VolumeView> = VOLUMES
                    .list(txn)?
                    .into_iter()
                    .map(|(_, v)| v)
                    .filter(|v| {
                        owner.as_ref().is_none_or(|o| &v.owner == o)
                            || (group.is_some() && v.shared_group == group && v.is_live())
                    })
                    .filter(|v| q.cluster_id.as_ref().is_none_or(|c| &v.cluster_id == c))
                    .filter(|v| q.deleted || v.is_live())
                    .map(|v| VolumeView::new(&v, mounts.get(&v.id).cloned().unwrap_or_default(), now))
                    .collect();
                data.sort_by(|a, b| b.id.cmp(&a.id));
                let orphans = if actor.admin {
                    let prefix = q.cluster_id.as_deref().map(|c| format!("{c}/")).unwrap_or_default();
                    ORPHANS.list_prefix(txn, &prefix)?.iter().map(|(_, o)| OrphanView::from(o)).collect()
                } else {
                    Vec::new()
                };
                Ok(VolumeList { data, orphans })
            })
            .await?)
    }

    pub async fn get(&self, id: &str, actor: Actor) -> Result<VolumeView, VolumeError> {
        let (id, key, now) = (id.to_string(), id.to_string(), self.clock.now_ms());
        self.store
            .read(move |txn| {
                let Some(v) = VOLUMES.get(txn, &key)?.filter(|v| actor.may_act_for(&v.owner)) else {
                    return Ok(None);
                };
                let mut mounts = txn::mounts_by_volume(crate::sessions::model::live_sessions(txn)?);
                Ok(Some(VolumeView::new(&v, mounts.remove(&v.id).unwrap_or_default(), now)))
            })
            .await?
            .ok_or_else(|| VolumeError::NotFound(format!("no volume {}", crate::http::text::echo(&id))))
    }

    pub async fn create(&self, req: NewVolume) -> Result<VolumeView, VolumeError> {
        let (now, config) = (self.clock.now_ms(), self.config.clone());
        let v = self.store.write_with(move |t| txn::create(t, &req, &config, now)).await?;
        Ok(VolumeView::new(&v, Vec::new(), now))
    }

    /// Returns the volume and its size before.
    pub async fn grow(&self, id: &str, size_gb: i64, actor: Actor) -> Result<(VolumeView, i64), VolumeError> {
        let (id, config, now) = (id.to_string(), self.config.clone(), self.clock.now_ms());
        let (v, was) = self.store.write_with(move |t| txn::grow(t, &id, size_gb, &actor, &config)).await?;
        Ok((VolumeView::new(&v, Vec::new(), now), was))
    }

    pub async fn delete(&self, id: &str, actor: Actor) -> Result<VolumeView, VolumeError> {
        let (id, now) = (id.to_string(), self.clock.now_ms());
        let v = self.store.write_with(move |t| txn::delete(t, &id, &actor, now)).await?;
        Ok(VolumeView::new(&v, Vec::new(), now))
    }

    /// Shares a named volume read-only with a group (`None`: stops).
    pub async fn share(&self, id: &str, group: Option<String>, actor: Actor) -> Result<VolumeView, VolumeError> {
        let (id, now) = (id.to_string(), self.clock.now_ms());
        let v = self.store.write_with(move |t| txn::share(t, &id, group.as_deref(), &actor)).await?;
        Ok(VolumeView::new(&v, Vec::new(), now))
    }

    /// An admin adopts an orphan PVC as a named volume of a member.
    pub async fn adopt(&self, req: txn::Adopt) -> Result<VolumeView, VolumeError> {
        let now = self.clock.now_ms();
        let v = self.store.write_with(move |t| txn::adopt(t, &req, now)).await?;
        Ok(VolumeView::new(&v, Vec::new(), now))
    }

    /// An admin marks an orphan PVC for reclaim (the next sync answers `reclaim`).
    pub async fn reclaim_orphan(&self, cluster_id: &str, pvc: &str, by: &str) -> Result<OrphanView, VolumeError> {
        let (c, p, by, now) = (cluster_id.to_string(), pvc.to_string(), by.to_string(), self.clock.now_ms());
        let o = self.store.write_with(move |t| txn::reclaim_orphan(t, &c, &p, &by, now)).await?;
        Ok(OrphanView::from(&o))
    }

    /// Deletes every volume of `owner` no live session mounts (a deleted account's, when the
    /// admin chose to reclaim them); the mounted ones are kept and named.
    pub async fn reclaim_owner(&self, owner: &str) -> Result<OwnerReclaimView, VolumeError> {
        let (owner, now) = (owner.to_string(), self.clock.now_ms());
        let r = self.store.write_with(move |t| txn::reclaim_owner(t, &owner, now)).await?;
        Ok(OwnerReclaimView {
            reclaimed: r.reclaimed.iter().map(|v| VolumeView::new(v, Vec::new(), now)).collect(),
            kept: r.kept.into_iter().map(|(v, m)| VolumeView::new(&v, m, now)).collect(),
        })
    }
}
