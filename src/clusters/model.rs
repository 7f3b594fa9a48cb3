//! What the store keeps about clusters, and the views the API returns. (Their nodes and GPUs are
//! the inventory's: `inventory::model`.)

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{JsonTable, Rows, StoreError};

/// `clu_…` -> cluster (soft-deleted rows stay, so history keeps the name).
pub const CLUSTERS: JsonTable<ClusterRecord> = JsonTable::new("clusters");
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Standby,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClusterStatus {
    /// Registered (or bootstrapped), not probed yet.
    Pending,
    Connected,
    /// Reachable, but a check failed, a node is NotReady, or the operator fell silent.
    Degraded,
    Unreachable,
    /// Unregistered; kept for history only.
    Deleted,
}

impl ClusterStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Connected => "connected",
            Self::Degraded => "degraded",
            Self::Unreachable => "unreachable",
            Self::Deleted => "deleted",
        }
    }
}

/// One probe check, as shown in the API and the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// A stage of the cluster probe (and `heartbeat`, the operator's silence); the wire names are
/// upstream's and do not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Kubeconfig,
    Connect,
    Auth,
    Version,
    RuntimeClass,
    Hami,
    /// Not a probe stage: the sweep's mark on a cluster whose operator fell silent.
    Heartbeat,
    /// A failure without a recorded stage.
    Unknown,
}

impl Stage {
    /// The probe's stages, in the order they run.
    pub const PROBE: [Stage; 6] =
        [Stage::Kubeconfig, Stage::Connect, Stage::Auth, Stage::Version, Stage::RuntimeClass, Stage::Hami];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kubeconfig => "kubeconfig",
            Self::Connect => "connect",
            Self::Auth => "auth",
            Self::Version => "version",
            Self::RuntimeClass => "runtime_class",
            Self::Hami => "hami",
            Self::Heartbeat => "heartbeat",
            Self::Unknown => "unknown",
        }
    }

    /// A failure at this stage means the API server could not be reached or trusted.
    pub fn is_reachability(self) -> bool {
        matches!(self, Self::Connect | Self::Auth | Self::Version)
    }

    /// Why a registration failing at this stage failed (`details.reason` of `probe_failed`).
    pub fn failure_reason(self) -> FailureReason {
        match self {
            Self::Kubeconfig => FailureReason::KubeconfigInvalid,
            s if s.is_reachability() => FailureReason::ClusterUnreachable,
            _ => FailureReason::RuntimeValidationFailed,
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a probe failed, as the API reports it (`details.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    KubeconfigInvalid,
    ClusterUnreachable,
    RuntimeValidationFailed,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KubeconfigInvalid => "kubeconfig_invalid",
            Self::ClusterUnreachable => "cluster_unreachable",
            Self::RuntimeValidationFailed => "runtime_validation_failed",
        }
    }
}

/// The failing stage and cause of the last probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProbeError {
    pub stage: Stage,
    pub cause: String,
    #[serde(default)]
    pub hint: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// The API server the control plane uses (kubeconfig's server unless overridden).
    pub api_server: String,
    /// Whether `api_server` overrides the kubeconfig's server address.
    #[serde(default)]
    pub api_server_override: bool,
    /// Hash of the kubeconfig an overriding `api_server` was submitted together with: that pair
    /// is the admin's own. With any other kubeconfig (edited file, `api_server` patched alone) the
    /// credentials reach the override only under the kubeconfig's own CA
    /// ([`super::kubeconfig::may_send_credentials_to`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_kubeconfig_hash: Option<String>,
    pub session_domain: Option<String>,
    /// `host:port` of this cluster's session ingress: `/proxy/` requests for its sessions are
    /// relayed there (else to the server-wide `session_ingress`; else not relayed).
    #[serde(default)]
    pub session_ingress: Option<String>,
    pub status: ClusterStatus,
    pub checks: Vec<Check>,
    pub last_error: Option<ProbeError>,
    pub kube_system_uid: String,
    /// Where the credentials are: `file:<id>/kubeconfig` under the kubeconfig dir, `path:<file>`
    /// or `incluster`.
    pub kubeconfig_ref: KubeconfigRef,
    pub kubernetes_version: Option<String>,
    pub registered_at: i64,
    pub last_checked_at: Option<i64>,
    pub deleted_at: Option<i64>,
    /// The last probe's prerequisite checks (node labels, ingress-nginx, HAMi, DCGM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prerequisites: Option<super::prereq::Prerequisites>,
}

impl ClusterRecord {
    /// A new, live, never-probed cluster.
    pub fn new(
        id: &str,
        name: String,
        role: Role,
        api_server: String,
        kubeconfig_ref: impl Into<KubeconfigRef>,
        now_ms: i64,
    ) -> Self {
        Self {
            id: id.to_string(),
            name,
            role,
            api_server,
            api_server_override: false,
            api_server_kubeconfig_hash: None,
            session_domain: None,
            session_ingress: None,
            status: ClusterStatus::Pending,
            checks: Vec::new(),
            last_error: None,
            kube_system_uid: String::new(),
            kubeconfig_ref: kubeconfig_ref.into(),
            kubernetes_version: None,
            registered_at: now_ms,
            last_checked_at: None,
            deleted_at: None,
            prerequisites: None,
        }
    }

    pub fn is_live(&self) -> bool {
        self.deleted_at.is_none()
    }
}

/// Where a cluster's credentials are, stored as `kubeconfig_ref`'s string (unchanged on disk and
/// in snapshots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum KubeconfigRef {
    /// `incluster`: the pod's service account (`clu_local` run inside a pod).
    InCluster,
    /// `path:<file>`: a kubeconfig file named by `local_kubeconfig` (`clu_local`).
    Path(std::path::PathBuf),
    /// `file:<id>/kubeconfig` (any other text, kept as stored): the file registration wrote under
    /// the kubeconfig directory, found by the cluster's id.
    Registered(String),
}

impl KubeconfigRef {
    /// The file registration writes for cluster `id`.
    pub fn registered(id: &str) -> Self {
        Self::Registered(format!("file:{id}/kubeconfig"))
    }
}

impl From<String> for KubeconfigRef {
    fn from(s: String) -> Self {
        if s == "incluster" {
            Self::InCluster
        } else if let Some(path) = s.strip_prefix("path:") {
            Self::Path(path.into())
        } else {
            Self::Registered(s)
        }
    }
}

impl From<KubeconfigRef> for String {
    fn from(r: KubeconfigRef) -> Self {
        match r {
            KubeconfigRef::InCluster => "incluster".into(),
            KubeconfigRef::Path(p) => format!("path:{}", p.display()),
            KubeconfigRef::Registered(s) => s,
        }
    }
}

/// A cluster as the registry sees it: what `GET /api/v1/clusters` lists, without the operator's
/// part (`crate::views::ClusterView` adds it).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ClusterFields)]
pub struct ClusterView {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub api_server: String,
    /// The cluster's own session domain, if set.
    pub session_domain: Option<String>,
    /// What session URLs use: the cluster's domain, else the server-wide default.
    pub effective_session_domain: Option<String>,
    /// The cluster's own session ingress (`host:port`) for the `/proxy/` relay, if set.
    pub session_ingress: Option<String>,
    /// Where `/proxy/` is relayed for this cluster: its ingress, else the server-wide one.
    pub effective_session_ingress: Option<String>,
    pub status: ClusterStatus,
    pub last_error: Option<ProbeError>,
    pub node_count: u64,
    pub gpu_count: u64,
    pub running_sessions: u64,
    pub heartbeat_at: Option<String>,
    pub heartbeat_age_s: Option<i64>,
    pub registered_at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeSummary {
    pub total: u64,
    pub ready: u64,
    pub cordoned: u64,
    pub offline: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuSummary {
    pub device_total: u64,
    pub vram_total_mb: u64,
}

/// The 201 of a registration and the answer of an edit; `GET /api/v1/clusters/{id}` adds the
/// operator's part (`crate::views::ClusterDetail`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ClusterDetailFields)]
pub struct ClusterDetail {
    #[serde(flatten)]
    pub cluster: ClusterView,
    pub checks: Vec<Check>,
    pub nodes: NodeSummary,
    pub gpu: GpuSummary,
    pub kubernetes_version: Option<String>,
    pub last_checked_at: Option<String>,
    /// What the operator's sessions need on the cluster, as upstream's attach-cluster.sh sets
    /// it up: each a stage with cause and hint; the suggested `session_ingress`; the HAMi
    /// monitor URL attach passes.
    pub prerequisites: Option<super::prereq::Prerequisites>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Pagination {
    pub page: u64,
    pub size: u64,
    pub total: u64,
    pub total_pages: u64,
}

/// A page of clusters (`crate::views::ClusterPage` is what the API answers).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterPage {
    pub data: Vec<ClusterView>,
    pub pagination: Pagination,
}

/// `POST /api/v1/clusters/{id}/connection-test`, without the operator's part
/// (`crate::views::ConnectionTest` adds it).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ConnectionTestFields)]
pub struct ConnectionTest {
    pub cluster_id: String,
    pub status: ClusterStatus,
    pub checks: Vec<Check>,
    pub last_error: Option<ProbeError>,
    pub latency_ms: u64,
    pub checked_at: String,
}

/// A directory in the kubeconfig dir that no registered cluster claims.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnclaimedDir {
    pub name: String,
    pub reason: String,
    pub first_seen_at: String,
}

/// `last_error.stage` of a cluster marked degraded because its operator fell silent (the
/// inventory's liveness sweep sets it; a passing probe keeps it).
pub const SILENT_STAGE: Stage = Stage::Heartbeat;

/// The `last_error` of a cluster whose operator has not reported for `for_s` seconds.
pub fn silent_error(for_s: i64) -> ProbeError {
    ProbeError {
        stage: SILENT_STAGE,
        cause: format!("the gShare operator has not reported inventory for {for_s} s"),
        hint: "check the gshare-operator pod in gshare-system (kubectl -n gshare-system logs deploy/gshare-operator) and its token".into(),
    }
}

impl ClusterRecord {
    /// For the probe: a reachable cluster whose operator is silent stays degraded (a passing
    /// probe must not hide that the operator stopped reporting).
    pub fn keep_silence(&mut self, heartbeat_at: Option<i64>, now_ms: i64, heartbeat_stale_after: std::time::Duration) {
        if self.status == ClusterStatus::Connected
            && let Some(h) = heartbeat_at
            && now_ms - h > heartbeat_stale_after.as_millis() as i64
        {
            self.status = ClusterStatus::Degraded;
            self.last_error = Some(silent_error((now_ms - h) / 1000));
        }
    }
}

/// What the inventory counts of a cluster (`inventory::model::CLUSTER_COUNTS`, the inventory's
/// table, kept exact in each report's transaction; sessions add their running count through
/// `inventory::counts`), shown on the cluster's views.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterCounts {
    pub node_count: u64,
    pub gpu_count: u64,
    pub vram_total_mb: u64,
    pub running_sessions: u64,
    /// The operator's last report (Unix ms), written every `liveness_flush_every`.
    pub heartbeat_at: Option<i64>,
}

/// A report from a cluster's operator: a cluster degraded for its silence is connected again
/// (the one change to a cluster row that the inventory makes, here in the row's own room).
/// Returns whether the row changed.
pub fn heard_from(rows: &impl Rows, mut c: ClusterRecord) -> Result<bool, StoreError> {
    if c.status == ClusterStatus::Degraded && c.last_error.as_ref().is_some_and(|e| e.stage == SILENT_STAGE) {
        c.status = ClusterStatus::Connected;
        c.last_error = None;
        rows.put(CLUSTERS, &c.id.clone(), &c)?;
        return Ok(true);
    }
    Ok(false)
}

/// The liveness sweep found a connected (or never-probed) cluster's operator silent since
/// `heartbeat_at`: the cluster is degraded, naming the silence. Returns whether it was.
pub fn fell_silent(rows: &impl Rows, mut c: ClusterRecord, heartbeat_at: i64, now: i64) -> Result<bool, StoreError> {
    if !matches!(c.status, ClusterStatus::Connected | ClusterStatus::Pending) {
        return Ok(false);
    }
    c.status = ClusterStatus::Degraded;
    c.last_error = Some(silent_error((now - heartbeat_at) / 1000));
    rows.put(CLUSTERS, &c.id.clone(), &c)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_refs_keep_their_stored_strings() {
        for (stored, parsed) in [
            ("incluster", KubeconfigRef::InCluster),
            ("path:/etc/gshare/local.kubeconfig", KubeconfigRef::Path("/etc/gshare/local.kubeconfig".into())),
            (
                "file:clu_01J0000000000000000000000/kubeconfig",
                KubeconfigRef::registered("clu_01J0000000000000000000000"),
            ),
        ] {
            let r: KubeconfigRef = serde_json::from_value(stored.into()).unwrap();
            assert_eq!(r, parsed, "{stored}");
            assert_eq!(serde_json::to_value(&r).unwrap(), stored);
        }
    }
}
