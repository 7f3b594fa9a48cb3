//! The operator's payloads exactly as upstream's schemas take them (unknown fields ignored), the
//! checks upstream leaves to its database, and what the store keeps of each report.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::error::FieldError;
use crate::store::JsonTable;

/// `<cluster_id>/<uuid>` -> the last drift report (logged too).
pub const DRIFT: JsonTable<DriftRecord> = JsonTable::new("inventory_drift");
/// `<cluster_id>/<node>/<ulid>` -> a node health event.
pub const HEALTH_EVENTS: JsonTable<HealthEventRecord> = JsonTable::new("node_health_events");
/// `<cluster_id>/<pvc name>` -> what volume sync last saw of a PVC.
pub const VOLUMES: JsonTable<VolumeRecord> = JsonTable::new("volumes");
/// `<cluster_id>/<CR name>` -> a session pod's scratch-disk usage.
pub const SESSION_DISKS: JsonTable<SessionDiskRecord> = JsonTable::new("session_disks");
/// Kubernetes' limit on a node name (a DNS subdomain).
pub const MAX_NODE_NAME: usize = 253;
/// A GPU uuid: `GPU-<36>`, `MIG-…`, or `<node>-gpu-<i>` (a node name plus a suffix).
pub const MAX_UUID: usize = MAX_NODE_NAME + 16;
/// Free-text fields (model, status, message…) kept at most this long.
pub const MAX_TEXT: usize = 1024;
/// Samples in one agent batch, as upstream.
pub const MAX_SAMPLES: usize = 500;

/// Collects field problems so one 422 lists them all.
#[derive(Debug, Default)]
pub struct Problems(pub Vec<FieldError>);

impl Problems {
    pub fn push(&mut self, loc: &[&str], msg: impl Into<String>, kind: &str) {
        let mut full = vec!["body"];
        full.extend_from_slice(loc);
        self.0.push(FieldError::new(&full, msg, kind));
    }

    pub fn node_name(&mut self, loc: &[&str], v: &str) {
        if v.is_empty() {
            self.push(loc, "must not be empty", "string_too_short");
        } else if v.len() > MAX_NODE_NAME {
            self.push(
                loc,
                format!("must be at most {MAX_NODE_NAME} characters (a Kubernetes node name)"),
                "string_too_long",
            );
        } else if !is_dns_subdomain(v) {
            self.push(
                loc,
                "must be a Kubernetes node name (lower-case letters, digits, '-' and '.')",
                "string_pattern_mismatch",
            );
        }
    }

    pub fn uuid(&mut self, loc: &[&str], v: &str) {
        if v.is_empty() {
            self.push(loc, "must not be empty", "string_too_short");
        } else if v.len() > MAX_UUID {
            self.push(loc, format!("must be at most {MAX_UUID} characters"), "string_too_long");
        } else if !v.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
            self.push(loc, "must be printable ASCII without '/' or spaces", "string_pattern_mismatch");
        }
    }

    pub fn text(&mut self, loc: &[&str], v: Option<&str>) {
        if v.is_some_and(|v| v.len() > MAX_TEXT) {
            self.push(loc, format!("must be at most {MAX_TEXT} characters"), "string_too_long");
        }
    }

    pub fn non_negative(&mut self, loc: &[&str], v: Option<i64>) {
        if v.is_some_and(|v| v < 0) {
            self.push(loc, "must be greater than or equal to 0", "greater_than_equal");
        }
    }

    pub fn timestamp(&mut self, loc: &[&str], v: &str) {
        if parse_ts(v).is_none() {
            self.push(loc, "must be an RFC 3339 date-time, e.g. 2025-05-01T10:00:00.12Z", "datetime_parsing");
        }
    }

    pub fn into_result(self) -> Result<(), Vec<FieldError>> {
        if self.0.is_empty() { Ok(()) } else { Err(self.0) }
    }
}

/// Unix milliseconds of an RFC 3339 timestamp.
pub fn parse_ts(v: &str) -> Option<i64> {
    let t = time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// RFC 1123 subdomain: what the API server accepts as a Node name.
pub fn is_dns_subdomain(v: &str) -> bool {
    v.len() <= MAX_NODE_NAME
        && v.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// `POST /internal/inventory/nodes`: one node's capacity, GPU or not (§2.3).
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct NodeReport {
    /// The Kubernetes node name.
    pub node_id: String,
    /// The reporting operator's cluster; absent or null = the token's.
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub node_cpu: Option<i64>,
    /// The node's Ready condition; absent = ready (older operators). False = offline at once.
    #[serde(default)]
    pub node_ready: Option<bool>,
    /// GiB.
    #[serde(default)]
    pub node_mem_gb: Option<i64>,
    /// GiB of ephemeral storage.
    #[serde(default)]
    pub node_disk_gb: Option<i64>,
    #[serde(default)]
    pub lossless_capable: bool,
    /// `master`, `gpu`, `cpu` or `storage`.
    #[serde(default)]
    pub role: Option<String>,
}

impl NodeReport {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.node_name(&["node_id"], &self.node_id);
        p.non_negative(&["node_cpu"], self.node_cpu);
        p.non_negative(&["node_mem_gb"], self.node_mem_gb);
        p.non_negative(&["node_disk_gb"], self.node_disk_gb);
        p.text(&["role"], self.role.as_deref());
        p.into_result()
    }
}

/// `POST /internal/inventory/gpu-devices`: one card (§2.4).
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
pub struct GpuReport {
    pub node_id: String,
    /// From HAMi (`GPU-…`, `MIG-…`) or `<node>-gpu-<i>`.
    pub uuid: String,
    /// `fractional`, `exclusive` or `mig`; only `mig` overrides what is stored.
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub total_mem_mb: i64,
    /// Advisory only: our allocation bookkeeping owns occupancy.
    #[serde(default)]
    pub used_mem_mb: i64,
    #[serde(default)]
    pub total_cores: i64,
    #[serde(default)]
    pub used_cores: i64,
    /// `ready` or `notready`.
    #[serde(default = "ready")]
    pub status: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub node_cpu: Option<i64>,
    #[serde(default)]
    pub node_ready: Option<bool>,
    #[serde(default)]
    pub node_mem_gb: Option<i64>,
    #[serde(default)]
    pub node_disk_gb: Option<i64>,
}

fn ready() -> String {
    "ready".into()
}

impl GpuReport {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.node_name(&["node_id"], &self.node_id);
        p.uuid(&["uuid"], &self.uuid);
        for (name, v) in [
            ("total_mem_mb", self.total_mem_mb),
            ("used_mem_mb", self.used_mem_mb),
            ("total_cores", self.total_cores),
            ("used_cores", self.used_cores),
        ] {
            p.non_negative(&[name], Some(v));
        }
        p.non_negative(&["node_cpu"], self.node_cpu);
        p.non_negative(&["node_mem_gb"], self.node_mem_gb);
        p.non_negative(&["node_disk_gb"], self.node_disk_gb);
        p.text(&["mode"], self.mode.as_deref());
        p.text(&["status"], Some(&self.status));
        p.text(&["model"], self.model.as_deref());
        p.into_result()
    }
}

/// `POST /internal/inventory/drift` (§2.5): sent when used > total. Upstream takes any object.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct DriftReport {
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub used_mem_mb: Option<i64>,
    #[serde(default)]
    pub total_mem_mb: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DriftRecord {
    pub cluster_id: String,
    pub uuid: String,
    pub used_mem_mb: Option<i64>,
    pub total_mem_mb: Option<i64>,
    pub reported_at: i64,
}

/// `POST /internal/nodes/decommissioned` (§2.6). Upstream takes any object; no hostname = not accepted.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct Decommissioned {
    #[serde(default)]
    pub hostname: Option<String>,
}

/// `POST /internal/nodes/health-events` (§2.7).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct HealthEvent {
    /// The node name (hostname).
    pub node_id: String,
    /// `xid`, `ecc`, `temp` or `down`.
    pub kind: String,
    /// `critical` or `warn`.
    #[serde(default = "critical")]
    pub severity: String,
    /// `cordon` or `alert`.
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub gpu_uuid: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
}

fn critical() -> String {
    "critical".into()
}

impl HealthEvent {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        // Upstream also accepts its ledger id here; ours are node names, so a name is required.
        if self.node_id.is_empty() || self.node_id.len() > MAX_NODE_NAME {
            p.node_name(&["node_id"], &self.node_id);
        }
        if let Some(u) = &self.gpu_uuid {
            p.uuid(&["gpu_uuid"], u);
        }
        for (name, v) in [
            ("kind", Some(self.kind.as_str())),
            ("severity", Some(&self.severity)),
            ("action", self.action.as_deref()),
            ("message", self.message.as_deref()),
            ("id", self.id.as_deref()),
        ] {
            p.text(&[name], v);
        }
        p.into_result()
    }
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

/// `POST /internal/audit/operator` (§2.2).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct OperatorAudit {
    /// `operator:<cluster_id>`; must be the token's cluster.
    pub actor: String,
    /// `session.pause`, `pod.delete`, `node.cordon`, …
    pub action: String,
    pub target: String,
    /// `ok` (or `failed`).
    pub result: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub detail: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub trace_id: Option<String>,
    /// RFC 3339.
    pub ts: String,
}

impl OperatorAudit {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.timestamp(&["ts"], &self.ts);
        for (name, v) in
            [("actor", &self.actor), ("action", &self.action), ("target", &self.target), ("result", &self.result)]
        {
            p.text(&[name], Some(v));
        }
        p.text(&["trace_id"], self.trace_id.as_deref());
        p.into_result()
    }
}

/// One PVC the operator sees (§2.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VolumeObserved {
    /// The PVC name.
    pub name: String,
    #[serde(default)]
    pub volume_id: Option<String>,
    #[serde(default)]
    pub capacity_gb: i64,
    #[serde(default)]
    pub used_bytes: Option<i64>,
    #[serde(default)]
    pub mounted: bool,
    #[serde(default)]
    pub storage_class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionDisk {
    /// The GShareSession CR name.
    pub name: String,
    pub ephemeral_used_bytes: i64,
    pub ephemeral_limit_bytes: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PoolCapacity {
    pub storage_class: String,
    #[serde(default)]
    pub capacity_bytes: i64,
}

/// `POST /internal/volumes/sync`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct VolumeSync {
    pub volumes: Vec<VolumeObserved>,
    #[serde(default)]
    pub cluster_id: Option<String>,
    #[serde(default)]
    pub sessions: Vec<SessionDisk>,
    #[serde(default)]
    pub pools: Vec<PoolCapacity>,
}

impl VolumeSync {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        for (i, v) in self.volumes.iter().enumerate() {
            let i = i.to_string();
            p.node_name(&["volumes", &i, "name"], &v.name);
            p.non_negative(&["volumes", &i, "capacity_gb"], Some(v.capacity_gb));
            p.non_negative(&["volumes", &i, "used_bytes"], v.used_bytes);
            p.text(&["volumes", &i, "volume_id"], v.volume_id.as_deref());
            p.text(&["volumes", &i, "storage_class"], v.storage_class.as_deref());
        }
        for (i, s) in self.sessions.iter().enumerate() {
            let i = i.to_string();
            p.node_name(&["sessions", &i, "name"], &s.name);
            p.non_negative(&["sessions", &i, "ephemeral_used_bytes"], Some(s.ephemeral_used_bytes));
            p.non_negative(&["sessions", &i, "ephemeral_limit_bytes"], Some(s.ephemeral_limit_bytes));
        }
        for (i, pool) in self.pools.iter().enumerate() {
            let i = i.to_string();
            p.node_name(&["pools", &i, "storage_class"], &pool.storage_class);
            p.non_negative(&["pools", &i, "capacity_bytes"], Some(pool.capacity_bytes));
        }
        p.into_result()
    }
}

/// What the operator should do with one PVC.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct VolumeDirective {
    pub name: String,
    pub volume_id: Option<String>,
    /// Grow the claim to this many GiB; null = leave it.
    pub quota_gb: Option<i64>,
    /// Delete the claim (only for a volume known deleted).
    pub reclaim: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VolumeSyncAnswer {
    pub volumes: Vec<VolumeDirective>,
    /// PVCs no record explains (no volume id); kept, for an admin to look at.
    pub orphans: u64,
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

/// `{"accepted":true}` (202), upstream's answer to most callbacks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Accepted {
    pub accepted: bool,
}

/// `{"hostnames":[…]}`, sorted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Hostnames {
    pub hostnames: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_kubernetes() {
        assert!(is_dns_subdomain("gpu-1"));
        assert!(is_dns_subdomain("ip-10-0-0-1.ec2.internal"));
        assert!(!is_dns_subdomain("GPU-1"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("a/b"));
        assert!(!is_dns_subdomain(&"a".repeat(64)));
        let long = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join(".");
        assert_eq!(long.len(), 253);
        assert!(is_dns_subdomain(&long));
        assert!(!is_dns_subdomain(&format!("{long}e")));
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_ts("1970-01-01T00:00:01.5Z"), Some(1500));
        assert!(parse_ts("2025-05-01T10:00:00.12Z").is_some());
        assert!(parse_ts("2025-05-01T10:00:00+02:00").is_some());
        assert!(parse_ts("2025-05-01 10:00").is_none());
        assert!(parse_ts("yesterday").is_none());
    }
}
