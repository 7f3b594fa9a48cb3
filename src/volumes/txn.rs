//! The volumes room's transaction functions: a session's mounts, the operator's sync, and the
//! API's create, grow and delete. Pure over the transaction they are given.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::model::*;
use super::{Actor, Limits, VolumeError};
use crate::callbacks::wire::{VolumeDirective, VolumeSync, VolumeSyncAnswer, is_dns_subdomain};
use crate::clusters::model::{CLUSTERS, ClusterRecord};
use crate::config::Config;
use crate::http::error::ErrorCode;
use crate::sessions::model::{AccessMode, LIVE_SESSIONS, SESSIONS, SessionVolume};
use crate::store::{Outcome, StoreError, WriteTxn};

fn owner_key(owner: &str, cluster_id: &str, id: &str) -> String {
    format!("{owner}/{cluster_id}/{id}")
}

fn put_new(txn: &WriteTxn, v: &VolumeRecord) -> Result<(), StoreError> {
    VOLUMES.put(txn, &v.id, v)?;
    OWNER_VOLUMES.put(txn, &owner_key(&v.owner, &v.cluster_id, &v.id), &v.kind)
}

/// The owner's live volumes on a cluster (`None`: on every cluster), from the index.
fn owned(txn: &WriteTxn, owner: &str, cluster_id: Option<&str>) -> Result<Vec<VolumeRecord>, StoreError> {
    let prefix = match cluster_id {
        Some(c) => format!("{owner}/{c}/"),
        None => format!("{owner}/"),
    };
    let mut out = Vec::new();
    for (key, _) in OWNER_VOLUMES.list_prefix_in_write(txn, &prefix)? {
        let id = key.rsplit('/').next().unwrap_or_default();
        if let Some(v) = VOLUMES.get_in_write(txn, id)?.filter(VolumeRecord::is_live) {
            out.push(v);
        }
    }
    Ok(out)
}

/// What a new session of `owner` on `cluster` mounts: their home workspace there at
/// `/workspace` (made now, `home_gb` big, on their first session there) and their named volumes
/// there, by name. Called inside the session's create transaction.
pub fn mounts_for_session(
    txn: &WriteTxn,
    owner: &str,
    cluster: &ClusterRecord,
    now: i64,
    config: &Config,
) -> Result<Vec<SessionVolume>, StoreError> {
    let home_gb = super::limits_of(txn, config, owner)?.home_gb;
    let mut mine = owned(txn, owner, Some(&cluster.id))?;
    mine.sort_by(|a, b| {
        (a.kind != VolumeKind::Home, &a.name, &a.id).cmp(&(b.kind != VolumeKind::Home, &b.name, &b.id))
    });
    if mine.first().is_none_or(|v| v.kind != VolumeKind::Home) {
        let home = VolumeRecord {
            id: format!("vol_{}", ulid::Ulid::new()),
            name: "home".into(),
            kind: VolumeKind::Home,
            owner: owner.to_string(),
            cluster_id: cluster.id.clone(),
            cluster_name: cluster.name.clone(),
            mode: AccessMode::ReadWriteOnce,
            size_gb: home_gb,
            mount_path: HOME_MOUNT.into(),
            created_at: now,
            deleted_at: None,
            reclaimed_at: None,
            observed: None,
            shared_group: None,
            claim: None,
            reclaim_answered_at: None,
        };
        put_new(txn, &home)?;
        mine.insert(0, home);
    }
    // One home per owner and cluster (an older one, if any, is left unmounted).
    let mut seen_home = false;
    let mut out: Vec<SessionVolume> = mine
        .iter()
        .filter(|v| v.kind == VolumeKind::Named || !std::mem::replace(&mut seen_home, true))
        .map(VolumeRecord::mount)
        .collect();
    // Volumes others shared with the owner's group on this cluster, read-only.
    if let Some(group) = crate::auth::accounts::group_of(txn, owner)? {
        for (key, by) in SHARES.list_prefix_in_write(txn, &format!("{group}/{}/", cluster.id))? {
            let id = key.rsplit('/').next().unwrap_or_default();
            if by == owner {
                continue;
            }
            if let Some(v) = VOLUMES.get_in_write(txn, id)?.filter(VolumeRecord::is_live) {
                out.push(v.shared_mount());
            }
        }
    }
    Ok(out)
}

/// The live sessions whose CR mounts each volume (read once, for a whole list).
pub fn mounts_by_volume(
    live: impl IntoIterator<Item = crate::sessions::SessionRecord>,
) -> HashMap<String, Vec<MountedBy>> {
    let mut out: HashMap<String, Vec<MountedBy>> = HashMap::new();
    for s in live {
        for v in &s.volumes {
            out.entry(v.volume_id.clone()).or_default().push(MountedBy {
                id: s.id.clone(),
                name: s.name.clone(),
                phase: s.phase.as_str().to_string(),
            });
        }
    }
    out
}

fn live_sessions_in_write(txn: &WriteTxn) -> Result<Vec<crate::sessions::SessionRecord>, StoreError> {
    let mut out = Vec::new();
    for (id, _) in LIVE_SESSIONS.list_in_write(txn)? {
        if let Some(s) = SESSIONS.get_in_write(txn, &id)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// The volume `id` as `actor` may act on it: another member's answers as a missing one.
fn visible(txn: &WriteTxn, id: &str, actor: &Actor) -> Result<VolumeRecord, VolumeError> {
    VOLUMES
        .get_in_write(txn, id)?
        .filter(|v| v.is_live() && actor.may_act_for(&v.owner))
        .ok_or_else(|| VolumeError::NotFound(format!("no volume {}", crate::http::text::echo(id))))
}

/// 409 `quota_exceeded` with upstream's details when `requested_gb` more would take `owner` past
/// `limits.storage_gb` (`except`: a volume whose size is being replaced).
fn within_quota(
    txn: &WriteTxn,
    owner: &str,
    limits: Limits,
    requested_gb: i64,
    except: Option<&str>,
) -> Result<(), VolumeError> {
    let Some(limit) = limits.storage_gb else { return Ok(()) };
    let allocated: i64 =
        owned(txn, owner, None)?.iter().filter(|v| Some(v.id.as_str()) != except).map(|v| v.size_gb).sum();
    if allocated.saturating_add(requested_gb) > limit {
        return Err(VolumeError::Conflict {
            code: ErrorCode::QuotaExceeded,
            message: format!(
                "storage quota exceeded: {owner}'s volumes hold {allocated} GiB of {limit} GiB; {requested_gb} GiB more does not fit"
            ),
            details: json!({ "scope": "user", "limit_gb": limit, "allocated_gb": allocated, "requested_gb": requested_gb }),
        });
    }
    Ok(())
}

/// A named volume, as checked by the route.
#[derive(Debug, Clone)]
pub struct NewVolume {
    pub name: String,
    pub owner: String,
    pub cluster_id: String,
    pub size_gb: i64,
    pub mode: AccessMode,
}

pub fn create(txn: &WriteTxn, req: &NewVolume, config: &Config, now: i64) -> Result<VolumeRecord, VolumeError> {
    let cluster = CLUSTERS
        .get_in_write(txn, &req.cluster_id)?
        .filter(ClusterRecord::is_live)
        .ok_or_else(|| VolumeError::NotFound(format!("no cluster {}", req.cluster_id)))?;
    if owned(txn, &req.owner, Some(&cluster.id))?.iter().any(|v| v.kind == VolumeKind::Named && v.name == req.name) {
        return Err(VolumeError::Conflict {
            code: ErrorCode::Conflict,
            message: format!("{} already has a volume named {} on {}", req.owner, req.name, cluster.name),
            details: json!({ "name": req.name, "cluster_id": cluster.id }),
        });
    }
    within_quota(txn, &req.owner, super::limits_of(txn, config, &req.owner)?, req.size_gb, None)?;
    let v = VolumeRecord {
        id: format!("vol_{}", ulid::Ulid::new()),
        name: req.name.clone(),
        kind: VolumeKind::Named,
        owner: req.owner.clone(),
        cluster_id: cluster.id.clone(),
        cluster_name: cluster.name.clone(),
        mode: req.mode,
        size_gb: req.size_gb,
        mount_path: format!("/data/{}", req.name),
        created_at: now,
        deleted_at: None,
        reclaimed_at: None,
        observed: None,
        shared_group: None,
        claim: None,
        reclaim_answered_at: None,
    };
    put_new(txn, &v)?;
    Ok(v)
}

/// Grows a volume's quota (the next sync answers it; the operator grows the PVC). Never shrinks.
pub fn grow(
    txn: &WriteTxn,
    id: &str,
    size_gb: i64,
    actor: &Actor,
    config: &Config,
) -> Result<(VolumeRecord, i64), VolumeError> {
    let mut v = visible(txn, id, actor)?;
    let was = v.size_gb;
    if size_gb < was {
        return Err(VolumeError::Conflict {
            code: ErrorCode::VolumeShrinkNotAllowed,
            message: format!("a volume only grows: {id} holds {was} GiB, {size_gb} GiB was asked"),
            details: json!({ "quota_gb": size_gb, "current_gb": was }),
        });
    }
    if size_gb > was {
        within_quota(txn, &v.owner, super::limits_of(txn, config, &v.owner)?, size_gb, Some(id))?;
        v.size_gb = size_gb;
        VOLUMES.put(txn, id, &v)?;
    }
    Ok((v, was))
}

/// Deletes a volume no live session mounts (409 `volume_mounted` naming them otherwise); the
/// cluster's next sync answers `reclaim` for its PVC.
pub fn delete(txn: &WriteTxn, id: &str, actor: &Actor, now: i64) -> Result<VolumeRecord, VolumeError> {
    let mut v = visible(txn, id, actor)?;
    let using = mounts_by_volume(live_sessions_in_write(txn)?).remove(id).unwrap_or_default();
    if let Some(first) = using.first() {
        let what = first.name.as_ref().map_or_else(|| first.id.clone(), |n| format!("{n} ({})", first.id));
        let more = match using.len() - 1 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        return Err(VolumeError::Conflict {
            code: ErrorCode::VolumeMounted,
            message: format!("volume {id} is mounted by session {what}{more}; delete or end it first"),
            details: json!({ "sessions": using }),
        });
    }
    mark_deleted(txn, &mut v, now)?;
    Ok(v)
}

fn mark_deleted(txn: &WriteTxn, v: &mut VolumeRecord, now: i64) -> Result<(), StoreError> {
    v.deleted_at = Some(now);
    if let Some(g) = v.shared_group.take() {
        SHARES.delete(txn, &share_key(&g, v))?;
    }
    VOLUMES.put(txn, &v.id, v)?;
    OWNER_VOLUMES.delete(txn, &owner_key(&v.owner, &v.cluster_id, &v.id))?;
    RECLAIMS.put(txn, &format!("{}/{}", v.cluster_id, v.id), &now)
}

fn share_key(group: &str, v: &VolumeRecord) -> String {
    format!("{group}/{}/{}", v.cluster_id, v.id)
}

/// Why a sync was refused as a whole (nothing of it is kept).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// It names volumes of another cluster (their PVC names, as the caller sent them).
    #[error("the sync names {} volume(s) of another cluster", pvcs.len())]
    OtherCluster { pvcs: Vec<String> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn directive(name: &str, volume_id: Option<String>, quota_gb: Option<i64>, reclaim: bool) -> VolumeDirective {
    VolumeDirective { name: name.to_string(), volume_id, quota_gb, reclaim }
}

/// `POST /internal/volumes/sync` for `cluster_id` (the token's): each reported PVC is matched to
/// its volume by the `gshare.io/volume-id` annotation, else by its name; a matched one is answered
/// its quota and `reclaim` once deleted here, and what the operator saw is kept on the record; one
/// no record explains is an orphan (kept for an admin, answered nothing). A PVC of another
/// cluster's volume refuses the whole sync. Pools and scratch disks go to the inventory.
pub fn sync(
    txn: &WriteTxn,
    cluster_id: &str,
    r: &VolumeSync,
    now: i64,
) -> Result<Outcome<VolumeSyncAnswer>, SyncError> {
    if CLUSTERS.get_in_write(txn, cluster_id)?.is_none_or(|c| !c.is_live()) {
        // An unregistered cluster's operator: answered, nothing kept (as every callback).
        let volumes = r.volumes.iter().map(|v| directive(&v.name, v.volume_id.clone(), None, false)).collect();
        return Ok(Outcome::Unchanged(VolumeSyncAnswer { volumes, orphans: r.volumes.len() as u64 }));
    }
    // Read and decide first: a refusal must leave everything as it was.
    let mut matched = Vec::with_capacity(r.volumes.len());
    let mut foreign = Vec::new();
    for v in &r.volumes {
        let id = v.volume_id.clone().filter(|i| i.starts_with("vol_")).or_else(|| id_from_pvc(&v.name));
        let rec = match id {
            Some(id) => VOLUMES.get_in_write(txn, &id)?,
            None => None,
        };
        // An adopted claim keeps its own name: matched through this cluster's claims.
        let rec = match rec {
            Some(r) => Some(r),
            None => match CLAIMS.get_in_write(txn, &format!("{cluster_id}/{}", v.name))? {
                Some(id) => VOLUMES.get_in_write(txn, &id)?,
                None => None,
            },
        };
        if let Some(rec) = &rec
            && rec.cluster_id != cluster_id
        {
            foreign.push(v.name.clone());
        }
        matched.push(rec);
    }
    if !foreign.is_empty() {
        return Err(SyncError::OtherCluster { pvcs: foreign });
    }
    let mut wrote = false;
    let mut out = Vec::with_capacity(r.volumes.len());
    let mut orphans = 0u64;
    let mut reported_ids = HashSet::new();
    let mut reported_orphans = HashSet::new();
    for (v, rec) in r.volumes.iter().zip(matched) {
        match rec {
            Some(mut rec) => {
                reported_ids.insert(rec.id.clone());
                let figures = (v.name.as_str(), v.capacity_gb, v.used_bytes, v.mounted, v.storage_class.as_deref());
                let stored = rec
                    .observed
                    .as_ref()
                    .map(|o| (o.pvc.as_str(), o.capacity_gb, o.used_bytes, o.mounted, o.storage_class.as_deref()));
                let first_reclaim = rec.deleted_at.is_some() && rec.reclaim_answered_at.is_none();
                if first_reclaim {
                    rec.reclaim_answered_at = Some(now);
                }
                if stored != Some(figures) && is_dns_subdomain(&v.name) {
                    rec.observed = Some(Observed {
                        pvc: v.name.clone(),
                        capacity_gb: v.capacity_gb,
                        used_bytes: v.used_bytes,
                        mounted: v.mounted,
                        storage_class: v.storage_class.clone(),
                        changed_at: now,
                    });
                    VOLUMES.put(txn, &rec.id, &rec)?;
                    wrote = true;
                } else if first_reclaim {
                    VOLUMES.put(txn, &rec.id, &rec)?;
                    wrote = true;
                }
                out.push(directive(&v.name, Some(rec.id.clone()), Some(rec.size_gb), rec.deleted_at.is_some()));
            }
            None => {
                orphans += 1;
                let mut reclaim = false;
                if is_dns_subdomain(&v.name) {
                    reported_orphans.insert(v.name.clone());
                    let key = format!("{cluster_id}/{}", v.name);
                    let stored = ORPHANS.get_in_write(txn, &key)?;
                    reclaim = stored.as_ref().is_some_and(|o| o.reclaim_requested_at.is_some());
                    if stored.as_ref().is_none_or(|o| o.observed != *v) {
                        let row = match stored {
                            Some(o) => OrphanRecord { observed: v.clone(), ..o },
                            None => OrphanRecord {
                                cluster_id: cluster_id.to_string(),
                                observed: v.clone(),
                                first_seen: now,
                                reclaim_requested_at: None,
                                reclaim_requested_by: None,
                            },
                        };
                        ORPHANS.put(txn, &key, &row)?;
                        wrote = true;
                    }
                }
                out.push(directive(&v.name, v.volume_id.clone(), None, reclaim));
            }
        }
    }
    let prefix = format!("{cluster_id}/");
    // Orphans the operator no longer reports are gone from the cluster.
    for (key, _) in ORPHANS.list_prefix_in_write(txn, &prefix)? {
        if !reported_orphans.contains(&key[prefix.len()..]) {
            ORPHANS.delete(txn, &key)?;
            wrote = true;
        }
    }
    // Deleted volumes whose PVC is no longer reported are reclaimed.
    for (key, _) in RECLAIMS.list_prefix_in_write(txn, &prefix)? {
        let id = &key[prefix.len()..];
        if reported_ids.contains(id) {
            continue;
        }
        if let Some(mut v) = VOLUMES.get_in_write(txn, id)? {
            v.reclaimed_at = Some(now);
            VOLUMES.put(txn, id, &v)?;
            if let Some(c) = &v.claim {
                CLAIMS.delete(txn, &format!("{cluster_id}/{c}"))?;
            }
        }
        RECLAIMS.delete(txn, &key)?;
        wrote = true;
    }
    wrote |= crate::inventory::apply::storage_report(txn, cluster_id, &r.pools, &r.sessions, now)?;
    let answer = VolumeSyncAnswer { volumes: out, orphans };
    Ok(if wrote { Outcome::Wrote(answer) } else { Outcome::Unchanged(answer) })
}

/// An orphan PVC as an admin names it: `<cluster_id>/<pvc name>`.
fn orphan(txn: &WriteTxn, cluster_id: &str, pvc: &str) -> Result<(String, OrphanRecord), VolumeError> {
    let key = format!("{cluster_id}/{pvc}");
    match ORPHANS.get_in_write(txn, &key)? {
        Some(o) => Ok((key, o)),
        None => {
            let elsewhere: Vec<String> = ORPHANS
                .list_in_write(txn)?
                .into_iter()
                .filter(|(_, o)| o.observed.name == pvc && o.cluster_id != cluster_id)
                .map(|(_, o)| o.cluster_id)
                .collect();
            let echo = crate::http::text::echo(pvc);
            let message = if elsewhere.is_empty() {
                format!("no orphan PVC {echo} on cluster {}", crate::http::text::echo(cluster_id))
            } else {
                format!(
                    "no orphan PVC {echo} on cluster {}; the one of that name is on {}",
                    crate::http::text::echo(cluster_id),
                    elsewhere.join(", ")
                )
            };
            Err(VolumeError::NotFound(message))
        }
    }
}

/// How an admin adopts an orphan (checked by the route).
#[derive(Debug, Clone)]
pub struct Adopt {
    pub cluster_id: String,
    pub pvc: String,
    pub owner: String,
    /// The volume's name (mounted at `/data/<name>`).
    pub name: String,
    pub mode: AccessMode,
}

/// Makes an orphan PVC a named volume of `owner`: its data is kept, its size is what the operator
/// last reported (at least 1 GiB), and the next sync matches it (by its id when the PVC's name is
/// one of ours, else by the claim's name). Not counted against the owner's storage limit at
/// adoption (an admin's decision about data that already exists); it counts from then on.
pub fn adopt(txn: &WriteTxn, req: &Adopt, now: i64) -> Result<VolumeRecord, VolumeError> {
    let (key, o) = orphan(txn, &req.cluster_id, &req.pvc)?;
    let cluster = CLUSTERS
        .get_in_write(txn, &req.cluster_id)?
        .filter(ClusterRecord::is_live)
        .ok_or_else(|| VolumeError::NotFound(format!("no cluster {}", req.cluster_id)))?;
    if crate::auth::accounts::get_in_write(txn, &req.owner)?.is_none() {
        return Err(VolumeError::Invalid {
            field: "owner",
            message: format!("no account named {}", crate::http::text::echo(&req.owner)),
            kind: "value_error",
        });
    }
    if owned(txn, &req.owner, Some(&cluster.id))?.iter().any(|v| v.kind == VolumeKind::Named && v.name == req.name) {
        return Err(VolumeError::Conflict {
            code: ErrorCode::Conflict,
            message: format!("{} already has a volume named {} on {}", req.owner, req.name, cluster.name),
            details: json!({ "name": req.name, "cluster_id": cluster.id }),
        });
    }
    // A PVC named as ours keeps that id (a lost record, restored): the CR then names it as usual.
    let (id, claim) = match id_from_pvc(&req.pvc).filter(|id| matches!(VOLUMES.get_in_write(txn, id), Ok(None))) {
        Some(id) => (id, None),
        None => (format!("vol_{}", ulid::Ulid::new()), Some(req.pvc.clone())),
    };
    let v = VolumeRecord {
        id,
        name: req.name.clone(),
        kind: VolumeKind::Named,
        owner: req.owner.clone(),
        cluster_id: cluster.id.clone(),
        cluster_name: cluster.name.clone(),
        mode: req.mode,
        size_gb: o.observed.capacity_gb.max(1),
        mount_path: format!("/data/{}", req.name),
        created_at: now,
        deleted_at: None,
        reclaimed_at: None,
        observed: Some(Observed {
            pvc: req.pvc.clone(),
            capacity_gb: o.observed.capacity_gb,
            used_bytes: o.observed.used_bytes,
            mounted: o.observed.mounted,
            storage_class: o.observed.storage_class.clone(),
            changed_at: now,
        }),
        shared_group: None,
        claim,
        reclaim_answered_at: None,
    };
    put_new(txn, &v)?;
    if let Some(c) = &v.claim {
        CLAIMS.put(txn, &format!("{}/{c}", cluster.id), &v.id)?;
    }
    ORPHANS.delete(txn, &key)?;
    Ok(v)
}

/// Marks an orphan PVC for reclaim: the cluster's next sync answers `reclaim` for it and the
/// operator deletes it (unless a pod mounts it). Asking again changes nothing.
pub fn reclaim_orphan(
    txn: &WriteTxn,
    cluster_id: &str,
    pvc: &str,
    by: &str,
    now: i64,
) -> Result<OrphanRecord, VolumeError> {
    let (key, mut o) = orphan(txn, cluster_id, pvc)?;
    if o.reclaim_requested_at.is_some() {
        return Ok(o);
    }
    o.reclaim_requested_at = Some(now);
    o.reclaim_requested_by = Some(by.to_string());
    ORPHANS.put(txn, &key, &o)?;
    Ok(o)
}

/// Whether `group` is one: a policy names it, or an account is in it.
fn group_exists(txn: &WriteTxn, group: &str) -> Result<bool, StoreError> {
    Ok(crate::store::Rows::get(txn, crate::policy::model::GROUPS, group)?.is_some()
        || !crate::auth::accounts::members_in_write(txn, group)?.is_empty())
}

/// Shares a named volume read-only with `group` (`None`: stops sharing). An RWO claim attaches
/// to one node only, so only an RWX or ROX volume is shared. Sessions made from then on mount it.
pub fn share(txn: &WriteTxn, id: &str, group: Option<&str>, actor: &Actor) -> Result<VolumeRecord, VolumeError> {
    let mut v = visible(txn, id, actor)?;
    if let Some(g) = group {
        if v.kind == VolumeKind::Home {
            return Err(VolumeError::Conflict {
                code: ErrorCode::Conflict,
                message: "a home workspace is its owner's own; share a named volume".into(),
                details: json!({ "kind": "home" }),
            });
        }
        if v.mode == AccessMode::ReadWriteOnce {
            return Err(VolumeError::Conflict {
                code: ErrorCode::Conflict,
                message: format!(
                    "volume {} is RWO: its claim attaches to one node at a time, so other sessions could not mount it; share an RWX or ROX volume",
                    v.name
                ),
                details: json!({ "mode": v.mode }),
            });
        }
        if !group_exists(txn, g)? {
            return Err(VolumeError::NotFound(format!("no group {}", crate::http::text::echo(g))));
        }
    }
    if v.shared_group.as_deref() == group {
        return Ok(v);
    }
    if let Some(old) = v.shared_group.take() {
        SHARES.delete(txn, &share_key(&old, &v))?;
    }
    if let Some(g) = group {
        SHARES.put(txn, &share_key(g, &v), &v.owner)?;
        v.shared_group = Some(g.to_string());
    }
    VOLUMES.put(txn, id, &v)?;
    Ok(v)
}

/// What reclaiming a deleted account's volumes did.
#[derive(Debug, Clone, Default)]
pub struct OwnerReclaim {
    pub reclaimed: Vec<VolumeRecord>,
    /// Mounted by a live session: kept (end the session, then reclaim again).
    pub kept: Vec<(VolumeRecord, Vec<MountedBy>)>,
}

/// Deletes every live volume of `owner` that no live session mounts (their clusters' next syncs
/// answer `reclaim`); the mounted ones are kept and named.
pub fn reclaim_owner(txn: &WriteTxn, owner: &str, now: i64) -> Result<OwnerReclaim, VolumeError> {
    let mut mounts = mounts_by_volume(live_sessions_in_write(txn)?);
    let mut out = OwnerReclaim::default();
    for mut v in owned(txn, owner, None)? {
        match mounts.remove(&v.id).filter(|m| !m.is_empty()) {
            Some(using) => out.kept.push((v, using)),
            None => {
                mark_deleted(txn, &mut v, now)?;
                out.reclaimed.push(v);
            }
        }
    }
    Ok(out)
}
