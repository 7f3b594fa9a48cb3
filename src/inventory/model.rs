//! What the store keeps of the clusters' inventory — nodes, GPUs, storage pools — and of the
//! operator's other reports (drift, health events, scratch disks), and the node views. The reports themselves, as the operator sends them, are
//! `crate::callbacks::wire`'s.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::callbacks::wire::GpuStatus;
use crate::clock::rfc3339_ms;
use crate::clusters::model::ClusterCounts;
use crate::store::{JsonTable, Migration, StoreError};

/// `<cluster_id>/<node name>` -> node.
pub const NODES: JsonTable<NodeRecord> = JsonTable::new("nodes");
/// `<cluster_id>/<gpu uuid>` -> GPU device.
pub const GPUS: JsonTable<GpuRecord> = JsonTable::new("gpu_devices");
/// `<cluster_id>/<storage class>` -> storage pool (filled by volume sync).
pub const POOLS: JsonTable<serde_json::Value> = JsonTable::new("storage_pools");
/// `<cluster_id>` -> the cluster's counts: nodes, GPUs, VRAM, running sessions, the operator's
/// last report.
pub const CLUSTER_COUNTS: JsonTable<ClusterCounts> = JsonTable::new("cluster_counts");
/// `<cluster_id>/<uuid>` -> the last drift report (logged too).
pub const DRIFT: JsonTable<DriftRecord> = JsonTable::new("inventory_drift");
/// `<cluster_id>/<node>/<ulid>` -> a node health event.
pub const HEALTH_EVENTS: JsonTable<HealthEventRecord> = JsonTable::new("node_health_events");
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub cluster_id: String,
    pub name: String,
    pub ready: bool,
    /// False when cordoned (by us or by `kubectl cordon`).
    pub schedulable: bool,
    /// Cordoned through gShare (the operator applies it and marks the node `gshare.io/cordoned`).
    #[serde(default)]
    pub cordoned: bool,
    #[serde(default)]
    pub decommissioning: bool,
    #[serde(default)]
    pub offline: bool,
    pub role: Option<String>,
    pub cpu: Option<f64>,
    pub mem_gb: Option<f64>,
    pub disk_gb: Option<f64>,
    #[serde(default)]
    pub lossless_capable: bool,
    pub last_seen: Option<i64>,
    /// When the node was last reported NotReady after being ready (or first known NotReady);
    /// `None` while it is ready. `last_seen` stands still meanwhile.
    #[serde(default)]
    pub not_ready_since: Option<i64>,
    pub gpu_count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GpuRecord {
    pub cluster_id: String,
    pub node: String,
    pub uuid: String,
    pub model: String,
    /// `fractional`, `exclusive` or `mig`.
    pub mode: String,
    pub total_mem_mb: u64,
    pub used_mem_mb: u64,
    pub total_cores: u64,
    pub used_cores: u64,
    /// `ready` or `notready`.
    #[schema(value_type = String)]
    pub status: GpuStatus,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuView {
    pub uuid: String,
    pub model: String,
    pub mode: String,
    pub memory_mb: u64,
    /// Booked by running sessions' allocations (the control plane's count).
    pub used_mem_mb: u64,
    pub used_cores: u64,
    #[schema(value_type = String)]
    pub status: GpuStatus,
    /// The latest health event the operator reported for this card (why it is in error), if any.
    pub last_event: Option<GpuEvent>,
}

/// A health event as a card shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuEvent {
    /// `xid`, `ecc`, `temp` or `down`.
    pub kind: String,
    /// `critical` or `warn`.
    pub severity: String,
    pub message: Option<String>,
    pub at: String,
}

impl From<&HealthEventRecord> for GpuEvent {
    fn from(e: &HealthEventRecord) -> Self {
        Self { kind: e.kind.clone(), severity: e.severity.clone(), message: e.message.clone(), at: rfc3339_ms(e.at) }
    }
}

/// The latest health event per card (`gpu_uuid`) among `events`.
pub fn latest_gpu_events<'a>(
    events: impl IntoIterator<Item = &'a HealthEventRecord>,
) -> std::collections::HashMap<String, GpuEvent> {
    let mut latest: std::collections::HashMap<String, &HealthEventRecord> = std::collections::HashMap::new();
    for e in events {
        let Some(uuid) = e.gpu_uuid.as_deref().filter(|u| !u.is_empty()) else { continue };
        let newer = latest.get(uuid).is_none_or(|l| (e.at, &e.id) >= (l.at, &l.id));
        if newer {
            latest.insert(uuid.to_string(), e);
        }
    }
    latest.into_iter().map(|(k, e)| (k, GpuEvent::from(e))).collect()
}

impl From<GpuRecord> for GpuView {
    fn from(g: GpuRecord) -> Self {
        Self {
            uuid: g.uuid,
            model: g.model,
            mode: g.mode,
            memory_mb: g.total_mem_mb,
            used_mem_mb: g.used_mem_mb,
            used_cores: g.used_cores,
            status: g.status,
            last_event: None,
        }
    }
}

/// A row of `GET /api/v1/clusters/{id}/nodes`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    pub ready: bool,
    pub schedulable: bool,
    pub cordoned: bool,
    pub decommissioning: bool,
    pub offline: bool,
    pub role: Option<String>,
    pub gpus: Vec<GpuView>,
    /// The last time the node was seen ready.
    pub last_seen: Option<String>,
    /// Since when the node has been reported NotReady (absent while it is ready).
    pub not_ready_since: Option<String>,
    /// The node pool it is in (upstream's names; null: in none).
    pub pool_id: Option<String>,
    pub pool_name: Option<String>,
}

impl NodeView {
    /// A node as the API shows it, with its cards.
    pub fn of(n: NodeRecord, gpus: Vec<GpuView>) -> Self {
        NodeView {
            gpus,
            name: n.name,
            ready: n.ready,
            schedulable: n.schedulable,
            cordoned: n.cordoned,
            decommissioning: n.decommissioning,
            offline: n.offline,
            role: n.role,
            last_seen: n.last_seen.map(rfc3339_ms),
            not_ready_since: if n.ready { None } else { n.not_ready_since.map(rfc3339_ms) },
            pool_id: None,
            pool_name: None,
        }
    }
}

/// Schema 5: the cluster counters leave the cluster row (the registry's) for the inventory's
/// `cluster_counts`, read from each row as schema 4 wrote them.
pub const MOVE_CLUSTER_COUNTS: Migration = Migration {
    to: 5,
    what: "cluster counters moved to the inventory's cluster_counts table",
    run: |txn| {
        const OLD_CLUSTERS: JsonTable<serde_json::Value> = JsonTable::new("clusters");
        let n = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        for (id, row) in OLD_CLUSTERS.list_in_write(txn)? {
            let counts = ClusterCounts {
                node_count: n(&row, "node_count"),
                gpu_count: n(&row, "gpu_count"),
                vram_total_mb: n(&row, "vram_total_mb"),
                running_sessions: n(&row, "running_sessions"),
                heartbeat_at: row.get("heartbeat_at").and_then(serde_json::Value::as_i64),
            };
            CLUSTER_COUNTS.put(txn, &id, &counts)?;
        }
        Ok::<(), StoreError>(())
    },
};
