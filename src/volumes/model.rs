//! What the volumes room keeps: the volume records (`vol_<ULID>`, one cluster each), their
//! owners' index, the deleted volumes whose PVC the operator has still to reclaim, and the PVCs
//! a sync reported that no record explains (orphans). The API's views of them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::callbacks::wire::VolumeObserved;
use crate::clock::rfc3339_ms;
use crate::sessions::model::{AccessMode, SessionVolume};
use crate::store::JsonTable;

/// `vol_<ULID>` -> the volume (deleted ones are kept: the sync answers `reclaim` from them).
pub const VOLUMES: JsonTable<VolumeRecord> = JsonTable::new("workspace_volumes");
/// `<owner>/<cluster_id>/<vol_id>` -> the volume's kind: an owner's volumes on a cluster without
/// reading every record (the session create path asks it).
pub const OWNER_VOLUMES: JsonTable<VolumeKind> = JsonTable::new("workspace_volumes_by_owner");
/// `<cluster_id>/<vol_id>` -> when it was deleted: deleted volumes whose PVC the cluster's
/// operator has not yet been seen to drop. A sync that no longer reports the PVC marks the
/// volume reclaimed and removes the row.
pub const RECLAIMS: JsonTable<i64> = JsonTable::new("workspace_volume_reclaims");
/// `<cluster_id>/<pvc name>` -> a PVC the operator reported that no volume record explains (an
/// orphan), as last seen. (The inventory kept every reported PVC under this name before the
/// volumes had records; those were all orphans.) Removed when a sync no longer reports it.
pub const ORPHANS: JsonTable<OrphanRecord> = JsonTable::new("volumes");
/// `<group>/<cluster_id>/<vol_id>` -> the owner: volumes shared read-only with a group, mounted
/// in its members' sessions on the volume's cluster (the session create path asks it).
pub const SHARES: JsonTable<String> = JsonTable::new("workspace_volume_shares");
/// `<cluster_id>/<pvc name>` -> `vol_<ULID>`: an adopted orphan's claim, whose name is not made
/// from its volume's id (the sync matches the PVC to the volume by it until it is reclaimed).
pub const CLAIMS: JsonTable<String> = JsonTable::new("workspace_volume_claims");

/// How long a deleted volume may wait for its cluster's sync to answer `reclaim` before the
/// views say its reclaim is stalled: three of the operator's 5-minute sync periods.
pub const RECLAIM_STALL_MS: i64 = 15 * 60 * 1000;

/// The home workspace's mount path in every session of its owner on its cluster.
pub const HOME_MOUNT: &str = "/workspace";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeKind {
    /// The owner's workspace on the cluster, made on their first session there.
    Home,
    /// Added by the owner or an admin, mounted at `/data/<name>`.
    Named,
}

/// What the last sync said of the volume's PVC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub pvc: String,
    pub capacity_gb: i64,
    #[serde(default)]
    pub used_bytes: Option<i64>,
    pub mounted: bool,
    #[serde(default)]
    pub storage_class: Option<String>,
    /// When these figures last changed (ms).
    pub changed_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub id: String,
    pub name: String,
    pub kind: VolumeKind,
    pub owner: String,
    pub cluster_id: String,
    /// Kept so the list names the cluster after it is unregistered.
    pub cluster_name: String,
    pub mode: AccessMode,
    /// The quota: the sync answers it as `quota_gb` (the operator grows the PVC to it).
    pub size_gb: i64,
    pub mount_path: String,
    pub created_at: i64,
    #[serde(default)]
    pub deleted_at: Option<i64>,
    /// Deleted, and a later sync no longer reported its PVC.
    #[serde(default)]
    pub reclaimed_at: Option<i64>,
    #[serde(default)]
    pub observed: Option<Observed>,
    /// Shared read-only with this group: mounted in its members' sessions on the cluster.
    #[serde(default)]
    pub shared_group: Option<String>,
    /// An adopted orphan's PVC name (the CR names the claim by it); `None`: made from the id.
    #[serde(default)]
    pub claim: Option<String>,
    /// When a sync first answered `reclaim` for it (deleted volumes only).
    #[serde(default)]
    pub reclaim_answered_at: Option<i64>,
}

impl VolumeRecord {
    pub fn is_live(&self) -> bool {
        self.deleted_at.is_none()
    }

    /// The CR's `spec.volumes[]` entry for a session of its owner.
    pub fn mount(&self) -> SessionVolume {
        SessionVolume {
            volume_id: self.id.clone(),
            mount_path: self.mount_path.clone(),
            mode: self.mode,
            read_only: self.mode == AccessMode::ReadOnlyMany,
            size_gb: self.size_gb,
            claim: self.claim.clone(),
        }
    }

    /// The CR's entry for a session of a member of the group it is shared with: read-only, at
    /// `/shared/<owner>/<name>`.
    pub fn shared_mount(&self) -> SessionVolume {
        SessionVolume { mount_path: format!("/shared/{}/{}", self.owner, self.name), read_only: true, ..self.mount() }
    }

    /// The PVC's name on its cluster.
    pub fn pvc(&self) -> String {
        self.claim.clone().unwrap_or_else(|| pvc_name(&self.id))
    }
}

/// The PVC name the operator makes from a volume id (upstream's `SanitizeVolumeName`).
pub fn pvc_name(volume_id: &str) -> String {
    volume_id.to_lowercase().replace('_', "-")
}

/// The volume id a PVC name stands for when it is one of ours (`vol-01j…` for `vol_01J…`): the
/// operator's annotation may be gone, the name is not.
pub fn id_from_pvc(name: &str) -> Option<String> {
    let rest = name.strip_prefix("vol-")?;
    (rest.len() == 26 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| format!("vol_{}", rest.to_uppercase()))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrphanRecord {
    pub cluster_id: String,
    #[serde(flatten)]
    pub observed: VolumeObserved,
    /// First reported (ms).
    #[serde(default)]
    pub first_seen: i64,
    /// An admin asked for it to be reclaimed (ms): the next sync answers `reclaim`.
    #[serde(default)]
    pub reclaim_requested_at: Option<i64>,
    #[serde(default)]
    pub reclaim_requested_by: Option<String>,
}

/// Where a volume stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeState {
    /// In use; its PVC is made when a session first mounts it.
    Active,
    /// Deleted here; the next sync answers `reclaim` and the operator deletes the PVC.
    ReclaimPending,
    /// Deleted, and its PVC is gone.
    Reclaimed,
}

/// A session that mounts a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct MountedBy {
    pub id: String,
    pub name: Option<String>,
    pub phase: String,
}

/// A volume as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VolumeView {
    /// `vol_<ULID>` (the CR's `spec.volumes[].name`).
    pub id: String,
    pub name: String,
    pub kind: VolumeKind,
    pub owner: String,
    /// The one cluster it lives on: a session elsewhere gets another home there.
    pub cluster_id: String,
    pub cluster_name: String,
    pub mode: AccessMode,
    /// The quota (GiB); it only grows.
    pub size_gb: i64,
    pub mount_path: String,
    pub state: VolumeState,
    pub created_at: String,
    pub deleted_at: Option<String>,
    /// The PVC as the last sync saw it (null until one reported it).
    pub pvc: Option<String>,
    pub capacity_gb: Option<i64>,
    pub used_bytes: Option<i64>,
    /// The kubelet says more is used than the claim holds (possible after a resize, and a sign
    /// to grow it).
    pub over_capacity: bool,
    pub mounted: bool,
    pub storage_class: Option<String>,
    pub reported_at: Option<String>,
    /// Live sessions whose CR mounts it.
    pub mounted_by: Vec<MountedBy>,
    /// Shared read-only with this group's members (on its cluster).
    pub shared_group: Option<String>,
    /// When the cluster's sync first answered `reclaim` (deleted volumes).
    pub reclaim_answered_at: Option<String>,
    /// Deleted more than 15 minutes ago and no sync from its cluster has answered `reclaim` yet:
    /// the cluster's operator has stopped syncing volumes (its PVC and data are still there).
    pub reclaim_stalled: bool,
}

impl VolumeView {
    pub fn new(v: &VolumeRecord, mounted_by: Vec<MountedBy>, now: i64) -> Self {
        let o = v.observed.as_ref();
        let state = match (v.deleted_at, v.reclaimed_at) {
            (None, _) => VolumeState::Active,
            (Some(_), None) => VolumeState::ReclaimPending,
            (Some(_), Some(_)) => VolumeState::Reclaimed,
        };
        Self {
            id: v.id.clone(),
            name: v.name.clone(),
            kind: v.kind,
            owner: v.owner.clone(),
            cluster_id: v.cluster_id.clone(),
            cluster_name: v.cluster_name.clone(),
            mode: v.mode,
            size_gb: v.size_gb,
            mount_path: v.mount_path.clone(),
            state,
            created_at: rfc3339_ms(v.created_at),
            deleted_at: v.deleted_at.map(rfc3339_ms),
            pvc: o.map(|o| o.pvc.clone()),
            capacity_gb: o.map(|o| o.capacity_gb),
            used_bytes: o.and_then(|o| o.used_bytes),
            over_capacity: o.is_some_and(|o| o.used_bytes.is_some_and(|u| u > o.capacity_gb.saturating_mul(1 << 30))),
            mounted: o.is_some_and(|o| o.mounted),
            storage_class: o.and_then(|o| o.storage_class.clone()),
            reported_at: o.map(|o| rfc3339_ms(o.changed_at)),
            mounted_by,
            shared_group: v.shared_group.clone(),
            reclaim_answered_at: v.reclaim_answered_at.map(rfc3339_ms),
            reclaim_stalled: state == VolumeState::ReclaimPending
                && v.reclaim_answered_at.is_none()
                && v.deleted_at.is_some_and(|d| now.saturating_sub(d) > RECLAIM_STALL_MS),
        }
    }
}

/// A PVC no record explains.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrphanView {
    pub cluster_id: String,
    /// The PVC's name.
    pub name: String,
    /// Its `gshare.io/volume-id` annotation, if any (not a volume of this server).
    pub volume_id: Option<String>,
    pub capacity_gb: i64,
    pub used_bytes: Option<i64>,
    pub mounted: bool,
    pub storage_class: Option<String>,
    pub first_seen: String,
    /// An admin asked for it to be reclaimed: the next sync answers `reclaim` (the operator
    /// deletes it unless a pod mounts it).
    pub reclaim_requested_at: Option<String>,
    pub reclaim_requested_by: Option<String>,
}

impl From<&OrphanRecord> for OrphanView {
    fn from(o: &OrphanRecord) -> Self {
        Self {
            cluster_id: o.cluster_id.clone(),
            name: o.observed.name.clone(),
            volume_id: o.observed.volume_id.clone(),
            capacity_gb: o.observed.capacity_gb,
            used_bytes: o.observed.used_bytes,
            mounted: o.observed.mounted,
            storage_class: o.observed.storage_class.clone(),
            first_seen: rfc3339_ms(o.first_seen),
            reclaim_requested_at: o.reclaim_requested_at.map(rfc3339_ms),
            reclaim_requested_by: o.reclaim_requested_by.clone(),
        }
    }
}

/// `GET /api/v1/volumes`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VolumeList {
    pub data: Vec<VolumeView>,
    /// PVCs the operators reported that no volume explains (admins only; empty for a member).
    pub orphans: Vec<OrphanView>,
}

/// `POST /api/v1/volumes/reclaim`: what reclaiming an owner's volumes did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OwnerReclaimView {
    /// Deleted now (state `reclaim_pending`): their clusters' next syncs answer `reclaim`.
    pub reclaimed: Vec<VolumeView>,
    /// Kept: a live session mounts each (`mounted_by` names them). End it, then reclaim again.
    pub kept: Vec<VolumeView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pvc_names_go_both_ways_for_our_ids() {
        let id = "vol_01JABCDEFGHJKMNPQRSTVWXYZ0";
        assert_eq!(pvc_name(id), "vol-01jabcdefghjkmnpqrstvwxyz0");
        assert_eq!(id_from_pvc(&pvc_name(id)).as_deref(), Some(id));
        assert_eq!(id_from_pvc("vol-short"), None);
        assert_eq!(id_from_pvc("data-pvc"), None);
        assert_eq!(id_from_pvc("vol-01jabcdefghjkmnpqrstvwxy-"), None);
    }

    #[test]
    fn a_reclaim_no_sync_answered_for_fifteen_minutes_is_stalled() {
        let mut v = VolumeRecord {
            id: "vol_01JABCDEFGHJKMNPQRSTVWXYZ0".into(),
            name: "data".into(),
            kind: VolumeKind::Named,
            owner: "alice".into(),
            cluster_id: "clu_a".into(),
            cluster_name: "a".into(),
            mode: AccessMode::ReadWriteOnce,
            size_gb: 1,
            mount_path: "/data/data".into(),
            created_at: 0,
            deleted_at: None,
            reclaimed_at: None,
            observed: None,
            shared_group: None,
            claim: None,
            reclaim_answered_at: None,
        };
        let min = 60_000;
        assert!(!VolumeView::new(&v, vec![], 60 * min).reclaim_stalled, "a live volume");
        v.deleted_at = Some(10 * min);
        assert!(!VolumeView::new(&v, vec![], 25 * min).reclaim_stalled, "15 minutes: not yet");
        let view = VolumeView::new(&v, vec![], 25 * min + 1);
        assert!(view.reclaim_stalled && view.state == VolumeState::ReclaimPending);
        v.reclaim_answered_at = Some(12 * min);
        assert!(!VolumeView::new(&v, vec![], 60 * min).reclaim_stalled, "answered: the operator has it");
        v.reclaim_answered_at = None;
        v.reclaimed_at = Some(30 * min);
        assert!(!VolumeView::new(&v, vec![], 60 * min).reclaim_stalled, "reclaimed");
        assert_eq!(v.pvc(), "vol-01jabcdefghjkmnpqrstvwxyz0");
        v.claim = Some("data-old".into());
        assert_eq!((v.pvc(), v.mount().claim), ("data-old".to_string(), Some("data-old".to_string())));
    }
}
