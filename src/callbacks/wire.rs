//! The operator's contract on the wire: every `/internal/*` body exactly as upstream's schemas
//! take them (unknown fields ignored), the checks upstream leaves to its database, the bounds
//! on what is stored, and the answers. Pure types and functions (no store, no handler): the
//! domains that apply a report (`inventory`, `sessions`) take these types, and the fuzz
//! targets reach them through [`super::intake`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use axum::http::StatusCode;

use crate::http::error::{ApiError, ErrorCode, FieldError};

/// Kubernetes' limit on a node name (a DNS subdomain).
pub const MAX_NODE_NAME: usize = 253;
/// A GPU uuid: `GPU-<36>`, `MIG-…` (old MIG ids `MIG-GPU-…/1/0` carry `/`), or `<node>-gpu-<i>`.
/// Longer ids are stored cut (see [`bound`]); upstream takes any string.
pub const MAX_UUID: usize = MAX_NODE_NAME + 16;
/// Short free-text fields (phase, role, model, status, result…) are stored at most this long.
pub const MAX_TEXT: usize = 1024;
/// Messages (the operator's "pod rejected: … is invalid: […]" runs past 1 KiB) are stored at
/// most this long. Upstream has no limit, and neither is a report refused for its length here:
/// a longer one is stored cut and marked (contract §9).
pub const MAX_MESSAGE: usize = 8192;
/// An operator audit entry's `detail` object is stored when its JSON is at most this long.
pub const MAX_DETAIL: usize = 8192;
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

    /// One of the values an enumerated field takes (compared without case).
    pub fn one_of(&mut self, loc: &[&str], v: &str, allowed: &[&str]) {
        if !allowed.iter().any(|a| a.eq_ignore_ascii_case(v)) {
            self.push(loc, format!("must be one of: {}", allowed.join(", ")), "enum");
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

/// Unix milliseconds of an event time, read as upstream's schema reads a `datetime`: RFC 3339
/// (the operator sends `2025-05-01T10:00:00.12Z`), an ISO 8601 date-time without an offset
/// (taken as UTC), or a number of Unix seconds (milliseconds above 2·10¹⁰).
pub fn parse_ts(v: &str) -> Option<i64> {
    use time::format_description::well_known::{Iso8601, Rfc3339};
    let v = v.trim();
    if let Ok(t) =
        time::OffsetDateTime::parse(v, &Rfc3339).or_else(|_| time::OffsetDateTime::parse(v, &Iso8601::DEFAULT))
    {
        return i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok();
    }
    if let Ok(t) = time::PrimitiveDateTime::parse(&v.replacen(' ', "T", 1), &Iso8601::DEFAULT) {
        return i64::try_from(t.assume_utc().unix_timestamp_nanos() / 1_000_000).ok();
    }
    let n: f64 = v.parse().ok().filter(|n: &f64| n.is_finite())?;
    let ms = if n.abs() > 2e10 { n } else { n * 1000.0 };
    // Years 1–9999, as a datetime can hold.
    (-62_135_596_800_000.0..=253_402_300_799_999.0).contains(&ms).then_some(ms as i64)
}

/// Cuts `v` to at most `max` bytes (at a character boundary) and marks the cut with
/// `…[truncated N bytes]`. Operator-sent text is stored bounded this way, never refused.
pub fn bound(v: &mut String, max: usize) {
    if v.len() <= max {
        return;
    }
    let mut end = max;
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    let cut = v.len() - end;
    v.truncate(end);
    v.push_str(&format!("…[truncated {cut} bytes]"));
}

pub fn bound_opt(v: &mut Option<String>, max: usize) {
    if let Some(s) = v {
        bound(s, max);
    }
}

/// A GPU id this store can key a card by: non-empty, at most [`MAX_UUID`] bytes, no spaces or
/// control characters (`/` is fine: old MIG ids carry it).
pub fn is_usable_uuid(v: &str) -> bool {
    !v.is_empty() && v.len() <= MAX_UUID && v.chars().all(|c| !c.is_whitespace() && !c.is_control())
}

/// Serde helpers for the lenient scalars upstream's schema takes.
pub mod lax {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// An integer of any size (saturated to i64), an integral float, or a string of digits, as
    /// upstream's `int` takes them. Anything else is a type error.
    pub fn int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let v = Option::<Value>::deserialize(d)?;
        let bad = || serde::de::Error::custom("invalid type: expected an integer");
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    Ok(Some(i))
                } else if n.as_u64().is_some() {
                    Ok(Some(i64::MAX))
                } else {
                    match n.as_f64() {
                        Some(f) if f.fract() == 0.0 => Ok(Some(f as i64)),
                        _ => Err(bad()),
                    }
                }
            }
            Some(Value::String(s)) => {
                let t = s.trim();
                let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                Ok(Some(t.parse::<i64>().unwrap_or(if t.starts_with('-') { i64::MIN } else { i64::MAX })))
            }
            Some(_) => Err(bad()),
        }
    }

    /// A date-time as a string, or Unix seconds as a number (kept as its decimal text).
    pub fn ts<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(s),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(serde::de::Error::custom("invalid type: expected a date-time")),
        }
    }
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
        p.non_negative(&["node_cpu"], self.node_cpu);
        p.non_negative(&["node_mem_gb"], self.node_mem_gb);
        p.non_negative(&["node_disk_gb"], self.node_disk_gb);
        p.into_result()
    }

    /// Whether the node can be stored: a Kubernetes node name. Upstream takes any string; a
    /// report naming no real node is answered 202 and stored nowhere.
    pub fn usable(&self) -> bool {
        is_dns_subdomain(&self.node_id)
    }

    /// Free text cut to what is stored.
    pub fn bound(&mut self) {
        bound_opt(&mut self.role, MAX_TEXT);
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
    #[schema(value_type = String)]
    pub status: GpuStatus,
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

fn ready() -> GpuStatus {
    GpuStatus::Ready
}

impl GpuReport {
    /// Whether the card can be stored: a Kubernetes node name and a usable uuid (else 202, stored nowhere).
    pub fn usable(&self) -> bool {
        is_dns_subdomain(&self.node_id) && is_usable_uuid(&self.uuid)
    }

    /// Free text cut to what is stored.
    pub fn bound(&mut self) {
        bound_opt(&mut self.mode, MAX_TEXT);
        if let GpuStatus::Other(status) = &mut self.status {
            bound(status, MAX_TEXT);
        }
        bound_opt(&mut self.model, MAX_TEXT);
    }

    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
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

impl DriftReport {
    /// Free text cut to what is stored.
    pub fn bound(&mut self) {
        bound_opt(&mut self.uuid, MAX_UUID);
    }
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

/// What the operator's health controller sends, and upstream's schema names.
pub const HEALTH_KINDS: &[&str] = &["xid", "ecc", "temp", "down"];
/// `warn` is what the operator sends; upstream's schema also names `info` and `warning`.
pub const HEALTH_SEVERITIES: &[&str] = &["critical", "warn", "warning", "info"];
pub const HEALTH_ACTIONS: &[&str] = &["cordon", "alert"];

impl HealthEvent {
    /// The enumerated fields must be one of their values (any case; stored lower-cased). The node
    /// is looked up, not validated: an unknown one is logged and answered 202, as upstream does.
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.one_of(&["kind"], &self.kind, HEALTH_KINDS);
        p.one_of(&["severity"], &self.severity, HEALTH_SEVERITIES);
        if let Some(a) = self.action.as_deref().filter(|a| !a.is_empty()) {
            p.one_of(&["action"], a, HEALTH_ACTIONS);
        }
        p.into_result()
    }

    /// Free text cut to what is stored; enumerated values lower-cased; an id that cannot key a
    /// row is dropped (a new one is minted).
    pub fn bound(&mut self) {
        self.kind.make_ascii_lowercase();
        self.severity.make_ascii_lowercase();
        if let Some(a) = &mut self.action {
            a.make_ascii_lowercase();
        }
        if self.action.as_deref() == Some("") {
            self.action = None;
        }
        bound(&mut self.node_id, MAX_NODE_NAME);
        bound_opt(&mut self.gpu_uuid, MAX_UUID);
        bound_opt(&mut self.message, MAX_MESSAGE);
        if self.id.as_deref().is_some_and(|id| {
            id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        }) {
            self.id = None;
        }
    }
}

/// `POST /internal/audit/operator` (§2.2).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct OperatorAudit {
    /// `operator:<cluster_id>`; must be the token's cluster.
    pub actor: String,
    /// `session.pause`, `pod.delete` or `node.cordon` (the three the operator records).
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
    #[serde(deserialize_with = "lax::ts")]
    #[schema(value_type = String)]
    pub ts: String,
}

/// The privileged actions upstream's operator records (reaper: `session.pause`, `pod.delete`;
/// health controller: `node.cordon`); no other action is taken from an operator.
pub const OPERATOR_ACTIONS: &[&str] = &["session.pause", "pod.delete", "node.cordon"];

impl OperatorAudit {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.timestamp(&["ts"], &self.ts);
        if !OPERATOR_ACTIONS.contains(&self.action.as_str()) {
            p.push(&["action"], format!("must be one of: {}", OPERATOR_ACTIONS.join(", ")), "enum");
        }
        p.into_result()
    }

    /// Free text cut to what is stored; a `detail` too large to keep is replaced by its size.
    pub fn bound(&mut self) {
        bound(&mut self.actor, MAX_TEXT);
        bound(&mut self.target, MAX_TEXT);
        bound(&mut self.result, MAX_TEXT);
        bound_opt(&mut self.trace_id, MAX_TEXT);
        bound(&mut self.ts, MAX_TEXT);
        if let Some(d) = &self.detail {
            let len = serde_json::to_vec(d).map(|v| v.len()).unwrap_or(usize::MAX);
            if len > MAX_DETAIL {
                let mut m = serde_json::Map::new();
                m.insert("truncated".into(), serde_json::json!({ "bytes": len }));
                self.detail = Some(m);
            }
        }
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
            p.non_negative(&["volumes", &i, "capacity_gb"], Some(v.capacity_gb));
            p.non_negative(&["volumes", &i, "used_bytes"], v.used_bytes);
        }
        for (i, s) in self.sessions.iter().enumerate() {
            let i = i.to_string();
            p.non_negative(&["sessions", &i, "ephemeral_used_bytes"], Some(s.ephemeral_used_bytes));
            p.non_negative(&["sessions", &i, "ephemeral_limit_bytes"], Some(s.ephemeral_limit_bytes));
        }
        for (i, pool) in self.pools.iter().enumerate() {
            // Upstream's schema: `capacity_bytes: int = Field(ge=0)`.
            p.non_negative(&["pools", &i.to_string(), "capacity_bytes"], Some(pool.capacity_bytes));
        }
        p.into_result()
    }

    /// Free text cut to what is stored. Names that cannot be Kubernetes object names (PVCs, CRs,
    /// StorageClasses) are kept for the answer but never stored (`volume_sync` skips them).
    pub fn bound(&mut self) {
        for v in &mut self.volumes {
            bound(&mut v.name, MAX_TEXT);
            bound_opt(&mut v.volume_id, MAX_TEXT);
            bound_opt(&mut v.storage_class, MAX_TEXT);
        }
        self.sessions.retain(|s| is_dns_subdomain(&s.name));
        self.pools.retain(|p| is_dns_subdomain(&p.storage_class));
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

/// `POST /internal/image-builds/{buildId}/status`: `phase` is `queued|running|succeeded|failed`;
/// any length of `error` or `log_tail` is read (upstream caps `log_tail` at 32768).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct BuildStatus {
    pub phase: String,
    #[serde(default)]
    pub image_ref: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub log_tail: Option<String>,
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

/// One agent sample (§2.10).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentSample {
    /// The session's CR name.
    pub session: String,
    /// Unix seconds, fractional.
    pub at: f64,
    pub cpu_cores: f64,
    pub mem_bytes: i64,
}

/// `POST /internal/metrics/session-samples`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AgentReport {
    pub node: String,
    #[serde(default)]
    pub samples: Vec<AgentSample>,
}

impl AgentReport {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        if self.samples.len() > MAX_SAMPLES {
            p.push(&["samples"], format!("at most {MAX_SAMPLES} samples per batch"), "too_long");
        }
        for (i, s) in self.samples.iter().enumerate().take(MAX_SAMPLES) {
            let i = i.to_string();
            if !(s.cpu_cores >= 0.0 && s.cpu_cores.is_finite()) {
                p.push(&["samples", &i, "cpu_cores"], "must be greater than or equal to 0", "greater_than_equal");
            }
            p.non_negative(&["samples", &i, "mem_bytes"], Some(s.mem_bytes));
            if !s.at.is_finite() {
                p.push(&["samples", &i, "at"], "must be a number of seconds", "float_parsing");
            }
        }
        p.into_result()
    }
}

impl AgentReport {
    /// Free text cut to what is stored (session names are looked up, never stored).
    pub fn bound(&mut self) {
        bound(&mut self.node, MAX_NODE_NAME);
        for s in &mut self.samples {
            bound(&mut s.session, MAX_NODE_NAME);
        }
    }
}

/// `{"accepted":n,"unknown":m}`: samples kept and samples for sessions not known here.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SamplesAccepted {
    pub accepted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<u64>,
}

/// `POST /internal/sessions/{id}/status` (§2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusReport {
    /// `Pending|Preparing|Running|Paused|Terminated|Error|Heartbeat|IdleWarning|Terminating`
    /// (any case; unknown phases are accepted and ignored).
    pub phase: String,
    /// RFC 3339 UTC event time (also an ISO date-time without offset, or Unix seconds).
    #[serde(deserialize_with = "lax::ts")]
    #[schema(value_type = String)]
    pub ts: String,
    /// Any string (`GPU-…`, `MIG-…`, old `MIG-GPU-…/1/0`); empty = none.
    #[serde(default)]
    pub bound_gpu_uuid: Option<String>,
    #[serde(default)]
    pub node_name: Option<String>,
    /// `namespace/name`.
    #[serde(default)]
    pub pod_ref: Option<String>,
    /// `Yielded` after an in-place yield.
    #[serde(default)]
    pub yield_state: Option<String>,
    /// Reported, unused.
    #[serde(default, deserialize_with = "lax::int")]
    #[schema(value_type = Option<i64>)]
    pub used_mem_mb: Option<i64>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// The CR generation the report describes (0 or absent: unknown; huge ones saturate).
    #[serde(default, deserialize_with = "lax::int")]
    #[schema(value_type = Option<i64>)]
    pub generation: Option<i64>,
    #[serde(default, deserialize_with = "lax::int")]
    #[schema(value_type = Option<i64>)]
    pub restart_count: Option<i64>,
    /// `Running`, `Waiting:<reason>` or `Terminated:<reason>`.
    #[serde(default)]
    pub container_state: Option<String>,
}

impl StatusReport {
    /// Only the event time can make a report unreadable (as upstream's schema); no string is
    /// refused for its length or shape.
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.timestamp(&["ts"], &self.ts);
        p.into_result()
    }

    /// Cuts every string to what is stored, and reads what upstream treats as absent as absent:
    /// empty `bound_gpu_uuid`/`node_name`/`pod_ref`, generation 0 or below.
    pub fn bound(&mut self) {
        bound(&mut self.phase, MAX_TEXT);
        bound(&mut self.ts, MAX_TEXT);
        for v in [&mut self.bound_gpu_uuid, &mut self.node_name, &mut self.pod_ref] {
            if v.as_deref().is_some_and(|s| s.trim().is_empty()) {
                *v = None;
            }
        }
        bound_opt(&mut self.bound_gpu_uuid, MAX_UUID);
        bound_opt(&mut self.node_name, MAX_NODE_NAME);
        bound_opt(&mut self.pod_ref, MAX_TEXT);
        bound_opt(&mut self.yield_state, MAX_TEXT);
        bound_opt(&mut self.message, MAX_MESSAGE);
        bound_opt(&mut self.trace_id, MAX_TEXT);
        bound_opt(&mut self.cluster_id, MAX_TEXT);
        bound_opt(&mut self.container_state, MAX_TEXT);
        if self.generation.is_some_and(|g| g <= 0) {
            self.generation = None;
        }
    }
}

/// A refusal decided from stored data (the write itself succeeded: nothing was written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The target belongs to another cluster.
    OtherCluster {
        cluster_id: String,
    },
    NotFound(String),
    /// The target is not an object of the caller's cluster (unknown here, or of no cluster).
    NotOwn(String),
    Conflict {
        code: ErrorCode,
        message: String,
        details: serde_json::Value,
    },
}

impl Refusal {
    /// The answer: 403 naming only the caller's own cluster when the object is another's, 404, 403
    /// for an object of no cluster of the caller's, 409 with its own code.
    pub fn into_error(self, token_cluster: Option<&str>) -> ApiError {
        match self {
            // The owner's id comes from stored data: it is logged, never told to the caller (one
            // operator must not learn another cluster's id by naming its sessions).
            Refusal::OtherCluster { cluster_id } => {
                tracing::warn!(token_cluster = ?token_cluster, owner_cluster = %cluster_id, "an operator named another cluster's object; refused");
                match token_cluster {
                    Some(c) => ApiError::forbidden(format!("this object belongs to another cluster, not to {c}"))
                        .with_details(serde_json::json!({ "token_cluster": c })),
                    None => ApiError::forbidden("another cluster's resource"),
                }
            }
            Refusal::NotFound(m) => ApiError::not_found(m),
            Refusal::NotOwn(m) => {
                ApiError::forbidden(m).with_details(serde_json::json!({ "token_cluster": token_cluster }))
            }
            Refusal::Conflict { code, message, details } => {
                ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
        }
    }
}

/// 403: the token is for cluster `token_cluster`, the payload claims `cluster_id` (the caller's
/// own words, so naming it tells nothing new).
pub fn other_cluster(token_cluster: &str, cluster_id: &str) -> ApiError {
    ApiError::forbidden(format!("this operator token is for cluster {token_cluster}, not {cluster_id}"))
        .with_details(serde_json::json!({ "token_cluster": token_cluster, "cluster_id": cluster_id }))
}

/// A card's state as its operator reports it (stored and shown as its string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum GpuStatus {
    /// `ready`.
    Ready,
    /// `notready`.
    NotReady,
    /// Any other text an operator sent, kept as it came.
    Other(String),
}

impl GpuStatus {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Ready => "ready",
            Self::NotReady => "notready",
            Self::Other(s) => s,
        }
    }

    pub fn is_ready(&self) -> bool {
        *self == Self::Ready
    }
}

impl From<String> for GpuStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "ready" => Self::Ready,
            "notready" => Self::NotReady,
            _ => Self::Other(s),
        }
    }
}

impl From<&str> for GpuStatus {
    fn from(s: &str) -> Self {
        s.to_string().into()
    }
}

impl From<GpuStatus> for String {
    fn from(s: GpuStatus) -> Self {
        match s {
            GpuStatus::Other(s) => s,
            known => known.as_str().to_string(),
        }
    }
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
        // As upstream's schema reads a datetime: no offset = UTC; a space for the T; Unix seconds
        // (milliseconds above 2e10); years 1 to 9999.
        assert_eq!(parse_ts("1970-01-01T00:00:02"), Some(2000));
        assert_eq!(parse_ts("1970-01-01 00:00:02.5"), Some(2500));
        assert_eq!(parse_ts("1970-01-01 00:01"), Some(60_000));
        assert_eq!(parse_ts("1714557600.25"), Some(1_714_557_600_250));
        assert_eq!(parse_ts("1714557600250"), Some(1_714_557_600_250));
        assert_eq!(parse_ts("0001-01-01T00:00:00Z"), Some(-62_135_596_800_000));
        assert!(parse_ts("9999-12-31T23:59:59.999Z").is_some());
        assert!(parse_ts("1e300").is_none());
        assert!(parse_ts("").is_none());
        assert!(parse_ts("10:00").is_none());
        assert!(parse_ts("yesterday").is_none());
    }

    #[test]
    fn long_text_is_cut_and_marked() {
        let mut s = "é".repeat(10);
        bound(&mut s, 5);
        assert_eq!(s, "éé…[truncated 16 bytes]");
        let mut short = "ok".to_string();
        bound(&mut short, 5);
        assert_eq!(short, "ok");
        assert!(is_usable_uuid("MIG-GPU-8f1c2d3e-0000-1111-2222-333344445555/1/0"));
        assert!(!is_usable_uuid("") && !is_usable_uuid("GPU 1") && !is_usable_uuid(&"G".repeat(MAX_UUID + 1)));
    }

    #[test]
    fn gpu_statuses_keep_their_wire_strings() {
        for (wire, parsed) in [
            ("ready", GpuStatus::Ready),
            ("notready", GpuStatus::NotReady),
            ("Ready", GpuStatus::Other("Ready".into())),
            ("xid 79", GpuStatus::Other("xid 79".into())),
        ] {
            let s: GpuStatus = serde_json::from_value(wire.into()).unwrap();
            assert_eq!(s, parsed, "{wire}");
            assert_eq!(s.as_str(), wire);
            assert_eq!(serde_json::to_value(&s).unwrap(), wire);
        }
        assert!(GpuStatus::Ready.is_ready() && !GpuStatus::NotReady.is_ready());
        assert!(!GpuStatus::from("Ready").is_ready(), "the match is exact, as before");
    }
}
