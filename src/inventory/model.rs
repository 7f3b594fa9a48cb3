//! What the store keeps of the operator's inventory reports (drift, health events, volumes,
//! scratch disks, storage pools). The reports themselves, as the operator sends them, are
//! `crate::callbacks::wire`'s.

use serde::{Deserialize, Serialize};

use crate::callbacks::wire::VolumeObserved;
use crate::store::JsonTable;

/// `<cluster_id>/<uuid>` -> the last drift report (logged too).
pub const DRIFT: JsonTable<DriftRecord> = JsonTable::new("inventory_drift");
/// `<cluster_id>/<node>/<ulid>` -> a node health event.
pub const HEALTH_EVENTS: JsonTable<HealthEventRecord> = JsonTable::new("node_health_events");
/// `<cluster_id>/<pvc name>` -> what volume sync last saw of a PVC.
pub const VOLUMES: JsonTable<VolumeRecord> = JsonTable::new("volumes");
/// `<cluster_id>/<CR name>` -> a session pod's scratch-disk usage.
pub const SESSION_DISKS: JsonTable<SessionDiskRecord> = JsonTable::new("session_disks");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriftRecord {
    pub cluster_id: String,
    pub uuid: String,
    pub used_mem_mb: Option<i64>,
    pub total_mem_mb: Option<i64>,
    pub reported_at: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HealthEventRecord {
    pub id: String,
    pub cluster_id: String,
    pub node: String,
    pub kind: String,
    pub severity: String,
    pub action: Option<String>,
    pub gpu_uuid: Option<String>,
    pub message: Option<String>,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub cluster_id: String,
    #[serde(flatten)]
    pub observed: VolumeObserved,
    /// Set when the volume is deleted in gShare; its PVC may then be reclaimed.
    #[serde(default)]
    pub deleted_at: Option<i64>,
    /// Desired size, when gShare manages one.
    #[serde(default)]
    pub quota_gb: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDiskRecord {
    pub cluster_id: String,
    pub name: String,
    pub ephemeral_used_bytes: i64,
    pub ephemeral_limit_bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub cluster_id: String,
    pub storage_class: String,
    pub capacity_bytes: i64,
    pub capacity_source: String,
}
