//! The cluster registry: register (probe, mint id, write kubeconfig, seed inventory), list, show,
//! edit, probe again, unregister; plus the per-cluster client cache that every later feature
//! (session apply, operator attach) reaches clusters through.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tokio::sync::broadcast;

use super::ClusterId;
use super::in_use::InUseCheck;
use super::inventory_part::InventoryHook;
use super::kubeconfig::{self, CheckedKubeconfig, KubeconfigProblem, Origin, ServerAddr};
use super::model::*;
use super::probe::{self, ProbeOutcome};
use crate::clock::{Clock, rfc3339_ms};
use crate::config::Config;
use crate::locks::lock;
use crate::store::{Store, StoreError};

/// Longest cluster name.
pub const MAX_NAME: usize = 80;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String, kind: &'static str },
    #[error("probe failed at {}: {}", .0.failure.as_ref().map(|f| f.stage.as_str()).unwrap_or("?"), .0.failure.as_ref().map(|f| f.cause.as_str()).unwrap_or("?"))]
    ProbeFailed(Box<ProbeOutcome>),
    #[error("a registered cluster already has this {field} ({value})")]
    Conflict { field: &'static str, value: String, existing: String, existing_name: String },
    #[error("no cluster {0}")]
    NotFound(String),
    #[error("{}", .0.message())]
    InUse(Box<super::in_use::InUse>),
    #[error("{0}")]
    OtherCluster(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Io(String),
}

/// What changed, for whoever waits on it (the console's live view, tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    Probed { id: String, status: ClusterStatus },
    ClientRebuilt { id: String, hash: String },
    KubeconfigMissing { id: String },
    Unclaimed { name: String },
}

/// A cached client: rebuilt only when the kubeconfig's content (hash) or api_server changes.
#[derive(Clone)]
pub struct Conn {
    pub hash: String,
    pub api_server: String,
    pub server: ServerAddr,
    pub client: kube::Client,
}

/// `POST /api/v1/clusters`. Unknown fields are ignored, as upstream does.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct RegisterRequest {
    /// Display name, 1–80 characters, unique among live clusters; no control, bidi-override or
    /// zero-width characters.
    #[schema(min_length = 1, max_length = 80)]
    pub name: String,
    pub role: Role,
    /// The kubeconfig file, base64-encoded (`base64 -w0 kubeconfig`); credentials must be embedded.
    pub kubeconfig_b64: String,
    /// Host for this cluster's session URLs; empty = the server-wide default.
    #[serde(default)]
    pub session_domain: Option<String>,
    /// API server URL to use instead of the kubeconfig's `server`.
    #[serde(default)]
    pub api_server: Option<String>,
}

/// `PATCH /api/v1/clusters/{id}`: only the fields sent change; unknown fields are refused.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchRequest {
    #[schema(min_length = 1, max_length = 80)]
    pub name: Option<String>,
    pub role: Option<Role>,
    /// A new API server address (`""` = the kubeconfig's own). Without `kubeconfig_b64` the stored
    /// credentials go there only over `https://` verified by the kubeconfig's own CA; else 422.
    pub api_server: Option<String>,
    /// `""` clears the cluster's own domain.
    pub session_domain: Option<String>,
    /// `host:port` of the cluster's session ingress for the `/proxy/` relay; `""` clears it.
    pub session_ingress: Option<String>,
    /// New credentials for the same cluster (same kube-system UID, probe passes).
    pub kubeconfig_b64: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub page: u64,
    pub size: u64,
    pub role: Option<Role>,
    pub status: Option<ClusterStatus>,
}

/// Live clusters with their counts, in list order.
type LiveRows = Arc<Vec<(ClusterRecord, ClusterCounts)>>;

pub struct Clusters {
    store: Store,
    config: Arc<Config>,
    clock: Clock,
    conns: Mutex<HashMap<String, Conn>>,
    unclaimed: Mutex<BTreeMap<String, UnclaimedDir>>,
    missing_logged: Mutex<std::collections::HashSet<String>>,
    /// Registrations between writing the file and committing the row: the watcher leaves them be.
    registering: Mutex<std::collections::HashSet<String>>,
    events: broadcast::Sender<ClusterEvent>,
    /// Live clusters in list order, tagged with the store generation they were read at: the
    /// list endpoint decodes nothing while no write has committed since.
    live_cache: Mutex<Option<(u64, LiveRows)>>,
    /// What still holds a cluster (live sessions, open GPU allocations): supplied by the domains
    /// above (the composition root wires `sessions::cluster_in_use`), so clusters names none of them.
    in_use: InUseCheck,
    /// The inventory's side of a cluster (its nodes, GPUs and pools): seeded at registration,
    /// forgotten at unregistering, summed on the detail view.
    inventory: InventoryHook,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters").finish_non_exhaustive()
    }
}

/// Validates a display name: 1–80 characters, no control characters, trimmed.
pub fn check_name(name: &str) -> Result<String, ClusterError> {
    let name = name.trim();
    let invalid = |message: &str| ClusterError::Invalid { field: "name", message: message.into(), kind: "value_error" };
    if name.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if name.chars().count() > MAX_NAME {
        return Err(invalid("must be at most 80 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("must not contain control characters"));
    }
    if name.chars().any(crate::http::text::is_deceptive) {
        return Err(invalid(crate::http::text::DECEPTIVE_MESSAGE));
    }
    Ok(name.to_string())
}

/// A session domain: a DNS name, and not the console's own host (`public_url`).
fn check_domain(v: Option<&str>, public_url: &str) -> Result<Option<String>, ClusterError> {
    let invalid = |message| ClusterError::Invalid { field: "session_domain", message, kind: "value_error" };
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(d) => {
            let d = crate::config::validate_hostname(d).map_err(invalid)?;
            crate::config::check_session_domain_apart(&d, public_url).map_err(invalid)?;
            Ok(Some(d))
        }
    }
}

fn check_api_server(v: Option<&str>) -> Result<Option<String>, ClusterError> {
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => {
            kubeconfig::parse_server(s).map_err(|p| ClusterError::Invalid {
                field: "api_server",
                message: p.cause,
                kind: "value_error",
            })?;
            Ok(Some(s.trim_end_matches('/').to_string()))
        }
    }
}

/// Why a registered cluster has no client: its kubeconfig file is missing (logged once, with an
/// event), or what is there does not work.
enum NoClient {
    Missing(KubeconfigProblem),
    Unusable(KubeconfigProblem),
}

impl From<KubeconfigProblem> for NoClient {
    fn from(p: KubeconfigProblem) -> Self {
        Self::Unusable(p)
    }
}

impl NoClient {
    fn problem(self) -> KubeconfigProblem {
        match self {
            Self::Missing(p) | Self::Unusable(p) => p,
        }
    }
}

fn kubeconfig_failure(p: KubeconfigProblem) -> ClusterError {
    ClusterError::ProbeFailed(Box::new(ProbeOutcome::failed_early(
        Stage::Kubeconfig,
        p.cause,
        p.hint,
        ClusterStatus::Unreachable,
    )))
}

impl Clusters {
    pub fn new(store: Store, config: Arc<Config>, clock: Clock, in_use: InUseCheck, inventory: InventoryHook) -> Self {
        let (events, _) = broadcast::channel(256);
        Self {
            store,
            config,
            clock,
            conns: Mutex::new(HashMap::new()),
            unclaimed: Mutex::new(BTreeMap::new()),
            missing_logged: Mutex::new(Default::default()),
            registering: Mutex::new(Default::default()),
            events,
            live_cache: Mutex::new(None),
            in_use,
            inventory,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events.subscribe()
    }

    fn emit(&self, e: ClusterEvent) {
        let _ = self.events.send(e);
    }

    pub fn kubeconfig_dir(&self) -> PathBuf {
        self.config.cluster_kubeconfig_dir.clone()
    }

    /// The cached client of a cluster, if it has one.
    pub fn conn(&self, id: &ClusterId) -> Option<Conn> {
        lock(&self.conns).get(id.as_str()).cloned()
    }

    pub fn is_registering(&self, id: &str) -> bool {
        lock(&self.registering).contains(id)
    }

    // ----- registration -----

    pub async fn register(&self, req: RegisterRequest) -> Result<ClusterDetail, ClusterError> {
        let name = check_name(&req.name)?;
        let session_domain = check_domain(req.session_domain.as_deref(), &self.config.public_url)?;
        let api_override = check_api_server(req.api_server.as_deref())?;
        // Cheap conflicts first, as upstream does: a taken name needs no probe.
        self.ensure_unique(&name, None, None, None).await?;

        let text = kubeconfig::decode_b64(&req.kubeconfig_b64).map_err(kubeconfig_failure)?;
        let kc = kubeconfig::check(&text, Origin::Submitted, &self.config.kubeconfig_exec_allow)
            .map_err(kubeconfig_failure)?;
        let api_server = api_override.clone().unwrap_or_else(|| kc.server.trim_end_matches('/').to_string());
        let (outcome, conn) = self.probe_kubeconfig(&kc, api_override.as_deref()).await;
        if !outcome.passed() {
            return Err(ClusterError::ProbeFailed(Box::new(outcome)));
        }
        let uid = outcome.kube_system_uid.clone().unwrap_or_default();
        self.ensure_unique(&name, Some(&uid), Some(&api_server), None).await?;

        let id = ClusterId::mint();
        lock(&self.registering).insert(id.to_string());
        let result = self
            .commit_registration(&id, name, req.role, api_server, api_override.is_some(), session_domain, &kc, &outcome)
            .await;
        match result {
            Ok(detail) => {
                if let Some(conn) = conn {
                    lock(&self.conns).insert(id.to_string(), conn);
                }
                lock(&self.registering).remove(id.as_str());
                tracing::info!(cluster_id = %id, name = %detail.cluster.name, status = detail.cluster.status.as_str(), "cluster registered");
                Ok(detail)
            }
            Err(e) => {
                lock(&self.registering).remove(id.as_str());
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_registration(
        &self,
        id: &ClusterId,
        name: String,
        role: Role,
        api_server: String,
        api_server_override: bool,
        session_domain: Option<String>,
        kc: &CheckedKubeconfig,
        outcome: &ProbeOutcome,
    ) -> Result<ClusterDetail, ClusterError> {
        // Staged under `.pending-<id>/` and published as `<id>/` only after the row commits: a
        // crash in between leaves nothing a cluster could be mistaken for (see recover_staged).
        let dir = self.kubeconfig_dir();
        let (id2, text) = (id.clone(), kc.text.clone());
        let staged = tokio::task::spawn_blocking(move || kubeconfig::stage_file(&dir, &id2, &text))
            .await
            .map_err(|e| ClusterError::Io(e.to_string()))?
            .map_err(|e| ClusterError::Io(format!("cannot write the kubeconfig file: {e}")))?;
        let committed =
            self.commit_row(id, name, role, api_server, api_server_override, session_domain, &kc.hash, outcome).await;
        let record = match committed {
            Ok(r) => r,
            Err(e) => {
                if let Ok(Err(err)) | Err(err) =
                    tokio::task::spawn_blocking(move || staged.discard()).await.map_err(std::io::Error::other)
                {
                    tracing::warn!(cluster_id = %id, error = %err, "cannot remove a failed registration's staged kubeconfig; it goes at the next start");
                }
                return Err(e);
            }
        };
        tokio::task::spawn_blocking(move || staged.publish())
            .await
            .map_err(|e| ClusterError::Io(e.to_string()))?
            .map_err(|e| ClusterError::Io(format!("cannot publish the kubeconfig file: {e}")))?;
        self.detail_of(record).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_row(
        &self,
        id: &ClusterId,
        name: String,
        role: Role,
        api_server: String,
        api_server_override: bool,
        session_domain: Option<String>,
        kc_hash: &str,
        outcome: &ProbeOutcome,
    ) -> Result<ClusterRecord, ClusterError> {
        let kc_hash = kc_hash.to_string();
        let now = self.clock.now_ms();
        let nodes = outcome.nodes.clone().unwrap_or_default();
        let record = ClusterRecord {
            api_server_override,
            api_server_kubeconfig_hash: api_server_override.then(|| kc_hash.clone()),
            session_domain,
            status: outcome.status,
            checks: outcome.checks.clone(),
            last_error: outcome.failure.clone(),
            kube_system_uid: outcome.kube_system_uid.clone().unwrap_or_default(),
            kubernetes_version: outcome.version.clone(),
            last_checked_at: Some(now),
            prerequisites: outcome.prerequisites.clone(),
            ..ClusterRecord::new(id.as_str(), name, role, api_server, KubeconfigRef::registered(id.as_str()), now)
        };
        let inventory = self.inventory.clone();
        let record = self
            .store
            .write_with(move |txn| {
                // Uniqueness is decided inside the write transaction: redb serialises writers,
                // so two registrations of one cluster cannot both pass.
                for (_, other) in CLUSTERS.list_in_write(txn)? {
                    if let Some(e) = conflict_with(
                        &other,
                        &record.name,
                        Some(&record.kube_system_uid),
                        Some(&record.api_server),
                        None,
                    ) {
                        return Err(e);
                    }
                }
                inventory.seed(txn, &record.id, &nodes, now)?;
                CLUSTERS.put(txn, &record.id, &record)?;
                Ok::<_, ClusterError>(record)
            })
            .await?;
        Ok(record)
    }

    /// At start, before the watcher: publishes or removes the staging directories of
    /// registrations a crash interrupted (logged), so no `<id>/` is left that no cluster claims.
    pub async fn recover_staged(&self) -> Result<(), ClusterError> {
        let live: std::collections::HashSet<String> =
            self.live_records().await?.iter().map(|(r, _)| r.id.clone()).collect();
        let dir = self.kubeconfig_dir();
        let done = tokio::task::spawn_blocking(move || kubeconfig::recover_staged(&dir, |id| live.contains(id)))
            .await
            .map_err(|e| ClusterError::Io(e.to_string()))?
            .map_err(|e| ClusterError::Io(format!("cannot recover interrupted registrations: {e}")))?;
        for id in &done.published {
            tracing::warn!(cluster_id = %id, "a registration was interrupted after its commit; its kubeconfig is now in place");
        }
        for name in &done.removed {
            tracing::warn!(dir = %name, "removed the kubeconfig of a registration that was interrupted before its commit");
        }
        Ok(())
    }

    /// Checks name / identity / address against live clusters (`except` = the cluster being edited).
    async fn ensure_unique(
        &self,
        name: &str,
        uid: Option<&str>,
        api_server: Option<&str>,
        except: Option<&str>,
    ) -> Result<(), ClusterError> {
        let all = self.store.read(|txn| CLUSTERS.list(txn)).await?;
        for (_, other) in all {
            if let Some(e) = conflict_with(&other, name, uid, api_server, except) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Builds a client from a kubeconfig and probes it.
    async fn probe_kubeconfig(&self, kc: &CheckedKubeconfig, api_server: Option<&str>) -> (ProbeOutcome, Option<Conn>) {
        let server_url = api_server.map(str::to_string).unwrap_or_else(|| kc.server.clone());
        let server = match kubeconfig::parse_server(&server_url) {
            Ok(s) => s,
            Err(p) => {
                return (
                    ProbeOutcome::failed_early(Stage::Kubeconfig, p.cause, p.hint, ClusterStatus::Unreachable),
                    None,
                );
            }
        };
        let client = match kubeconfig::client_for(kc, api_server, self.config.probe_timeout).await {
            Ok(c) => c,
            Err(p) => {
                return (
                    ProbeOutcome::failed_early(Stage::Kubeconfig, p.cause, p.hint, ClusterStatus::Unreachable),
                    None,
                );
            }
        };
        let outcome = probe::probe(&client, &server, self.config.probe_timeout).await;
        let conn =
            Conn { hash: kc.hash.clone(), api_server: server_url.trim_end_matches('/').to_string(), server, client };
        (outcome, Some(conn))
    }

    // ----- reading -----

    async fn live_record(&self, id: &ClusterId) -> Result<ClusterRecord, ClusterError> {
        let key = id.to_string();
        let rec = self.store.read(move |txn| CLUSTERS.get(txn, &key)).await?;
        rec.filter(ClusterRecord::is_live).ok_or_else(|| ClusterError::NotFound(id.to_string()))
    }

    pub fn view(&self, r: &ClusterRecord, counts: &ClusterCounts) -> ClusterView {
        let now = self.clock.now_ms();
        ClusterView {
            id: r.id.clone(),
            name: r.name.clone(),
            role: r.role,
            api_server: r.api_server.clone(),
            session_domain: r.session_domain.clone(),
            effective_session_domain: r.session_domain.clone().or_else(|| self.config.session_domain.clone()),
            session_ingress: r.session_ingress.clone(),
            effective_session_ingress: r.session_ingress.clone().or_else(|| self.config.session_ingress.clone()),
            status: r.status,
            last_error: r.last_error.clone(),
            node_count: counts.node_count,
            gpu_count: counts.gpu_count,
            running_sessions: counts.running_sessions,
            heartbeat_at: counts.heartbeat_at.map(rfc3339_ms),
            heartbeat_age_s: counts.heartbeat_at.map(|h| ((now - h) / 1000).max(0)),
            registered_at: rfc3339_ms(r.registered_at),
        }
    }

    /// Live clusters with their counts, oldest registration first; cached until the next commit
    /// to the store.
    async fn live_records(&self) -> Result<LiveRows, ClusterError> {
        // Read the generation before the data: a commit in between only costs a reload later.
        let generation = self.store.generation();
        if let Some((g, rows)) = lock(&self.live_cache).as_ref()
            && *g == generation
        {
            return Ok(rows.clone());
        }
        let inventory = self.inventory.clone();
        let mut rows = self
            .store
            .read(move |txn| {
                let mut rows = Vec::new();
                for (_, r) in CLUSTERS.list(txn)? {
                    if r.is_live() {
                        let counts = inventory.counts(txn, &r.id)?;
                        rows.push((r, counts));
                    }
                }
                Ok(rows)
            })
            .await?;
        rows.sort_by(|(a, _), (b, _)| a.registered_at.cmp(&b.registered_at).then_with(|| a.id.cmp(&b.id)));
        let rows = Arc::new(rows);
        *lock(&self.live_cache) = Some((generation, rows.clone()));
        Ok(rows)
    }

    pub async fn list(&self, q: ListQuery) -> Result<ClusterPage, ClusterError> {
        let rows = self.live_records().await?;
        let matching: Vec<&(ClusterRecord, ClusterCounts)> = rows
            .iter()
            .filter(|(r, _)| q.role.is_none_or(|role| r.role == role))
            .filter(|(r, _)| q.status.is_none_or(|s| r.status == s))
            .collect();
        let total = matching.len() as u64;
        let size = q.size.clamp(1, 100);
        let page = q.page.max(1);
        let data = matching
            .into_iter()
            .skip(((page - 1).saturating_mul(size)) as usize)
            .take(size as usize)
            .map(|(r, c)| self.view(r, c))
            .collect();
        Ok(ClusterPage { data, pagination: Pagination { page, size, total, total_pages: total.div_ceil(size) } })
    }

    pub async fn get(&self, id: &ClusterId) -> Result<ClusterDetail, ClusterError> {
        let record = self.live_record(id).await?;
        self.detail_of(record).await
    }

    async fn detail_of(&self, record: ClusterRecord) -> Result<ClusterDetail, ClusterError> {
        let (inventory, id) = (self.inventory.clone(), record.id.clone());
        let (summary, counts) =
            self.store.read(move |txn| Ok((inventory.node_summary(txn, &id)?, inventory.counts(txn, &id)?))).await?;
        Ok(ClusterDetail {
            cluster: self.view(&record, &counts),
            checks: record.checks.clone(),
            nodes: summary,
            gpu: GpuSummary { device_total: counts.gpu_count, vram_total_mb: counts.vram_total_mb },
            kubernetes_version: record.kubernetes_version.clone(),
            last_checked_at: record.last_checked_at.map(rfc3339_ms),
            prerequisites: record.prerequisites.clone(),
        })
    }

    pub fn unclaimed(&self) -> Vec<UnclaimedDir> {
        lock(&self.unclaimed).values().cloned().collect()
    }

    // ----- editing -----

    pub async fn patch(&self, id: &ClusterId, req: PatchRequest) -> Result<ClusterDetail, ClusterError> {
        let current = self.live_record(id).await?;
        let name = req.name.as_deref().map(check_name).transpose()?;
        let session_domain =
            req.session_domain.as_deref().map(|d| check_domain(Some(d), &self.config.public_url)).transpose()?;
        let session_ingress = match req.session_ingress.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(v) => Some(Some(crate::config::validate_ingress(v).map_err(|message| ClusterError::Invalid {
                field: "session_ingress",
                message,
                kind: "value_error",
            })?)),
        };
        let api_override = match req.api_server.as_deref() {
            Some(s) => Some(check_api_server(Some(s))?),
            None => None,
        };
        if let Some(n) = &name {
            self.ensure_unique(n, None, None, Some(&current.id)).await?;
        }
        // New credentials or a new address must reach the same cluster, proven by a passing probe.
        let mut new_file: Option<CheckedKubeconfig> = None;
        let mut new_conn = None;
        let mut new_api_server = None;
        if req.kubeconfig_b64.is_some() || api_override.is_some() {
            let kc = match &req.kubeconfig_b64 {
                Some(b64) => {
                    let text = kubeconfig::decode_b64(b64).map_err(kubeconfig_failure)?;
                    kubeconfig::check(&text, Origin::Submitted, &self.config.kubeconfig_exec_allow)
                        .map_err(kubeconfig_failure)?
                }
                None => self.read_registered_kubeconfig(id).await.map_err(|e| kubeconfig_failure(e.problem()))?,
            };
            // `api_server: ""` returns to the kubeconfig's own address.
            let effective_override = match &api_override {
                Some(o) => o.clone(),
                None if current.api_server_override => Some(current.api_server.clone()),
                None => None,
            };
            // The stored credentials go to a new address only if that address proves itself with
            // the kubeconfig's own CA (before any probe runs); a new kubeconfig is the admin's own.
            if req.kubeconfig_b64.is_none()
                && let Some(address) = &effective_override
            {
                kubeconfig::may_send_credentials_to(&kc, address).map_err(|p| ClusterError::Invalid {
                    field: "api_server",
                    message: format!("{}; {}", p.cause, p.hint),
                    kind: "value_error",
                })?;
            }
            let (outcome, conn) = self.probe_kubeconfig(&kc, effective_override.as_deref()).await;
            if !outcome.passed() {
                return Err(ClusterError::ProbeFailed(Box::new(outcome)));
            }
            if outcome.kube_system_uid.as_deref() != Some(current.kube_system_uid.as_str()) {
                return Err(ClusterError::OtherCluster(format!(
                    "the new {} reaches a different cluster (kube-system UID {} instead of {}); to move this entry to another cluster, unregister it and register the other one",
                    if req.kubeconfig_b64.is_some() { "kubeconfig" } else { "api_server" },
                    outcome.kube_system_uid.as_deref().unwrap_or("?"),
                    current.kube_system_uid
                )));
            }
            let server = effective_override.clone().unwrap_or_else(|| kc.server.trim_end_matches('/').to_string());
            self.ensure_unique(&current.name, None, Some(&server), Some(&current.id)).await?;
            let paired_hash = match (&effective_override, req.kubeconfig_b64.is_some()) {
                (Some(_), true) => Some(kc.hash.clone()),
                _ => None,
            };
            new_api_server = Some((server, effective_override.is_some(), paired_hash));
            if req.kubeconfig_b64.is_some() {
                new_file = Some(kc);
            }
            new_conn = conn;
        }
        if let Some(kc) = &new_file {
            let (dir, id2, text) = (self.kubeconfig_dir(), id.clone(), kc.text.clone());
            tokio::task::spawn_blocking(move || kubeconfig::write_file(&dir, &id2, &text))
                .await
                .map_err(|e| ClusterError::Io(e.to_string()))?
                .map_err(|e| ClusterError::Io(format!("cannot write the kubeconfig file: {e}")))?;
        }
        if let Some(conn) = new_conn {
            lock(&self.conns).insert(id.to_string(), conn);
        }
        let key = id.to_string();
        let record = self
            .store
            .write_with(move |txn| {
                let Some(mut r) = CLUSTERS.get_in_write(txn, &key)?.filter(ClusterRecord::is_live) else {
                    return Err(ClusterError::NotFound(key));
                };
                if let Some(n) = name {
                    for (_, other) in CLUSTERS.list_in_write(txn)? {
                        if let Some(e) = conflict_with(&other, &n, None, None, Some(&r.id)) {
                            return Err(e);
                        }
                    }
                    r.name = n;
                }
                if let Some(role) = req.role {
                    r.role = role;
                }
                if let Some(d) = session_domain {
                    r.session_domain = d;
                }
                if let Some(i) = session_ingress {
                    r.session_ingress = i;
                }
                if let Some((server, is_override, paired_hash)) = new_api_server {
                    r.api_server = server;
                    r.api_server_override = is_override;
                    r.api_server_kubeconfig_hash = paired_hash;
                }
                CLUSTERS.put(txn, &r.id, &r)?;
                Ok::<_, ClusterError>(r)
            })
            .await?;
        self.detail_of(record).await
    }

    async fn read_registered_kubeconfig(&self, id: &ClusterId) -> Result<CheckedKubeconfig, NoClient> {
        let (dir, id2) = (self.kubeconfig_dir(), id.clone());
        let read = tokio::task::spawn_blocking(move || kubeconfig::read_file(&dir, &id2))
            .await
            .map_err(|e| KubeconfigProblem { cause: e.to_string(), hint: String::new() })??;
        let Some((text, _)) = read else {
            return Err(NoClient::Missing(KubeconfigProblem {
                cause: "kubeconfig missing".into(),
                hint: format!(
                    "put the cluster's kubeconfig at {}",
                    kubeconfig::kubeconfig_path(&self.kubeconfig_dir(), id).display()
                ),
            }));
        };
        Ok(kubeconfig::check(&text, Origin::File, &self.config.kubeconfig_exec_allow)?)
    }

    // ----- probing a registered cluster -----

    /// Probes a registered cluster now (connection test, background re-probe, hot-load) and
    /// records the result. Rebuilds the cached client if its kubeconfig changed.
    pub async fn reprobe(&self, id: &ClusterId) -> Result<ConnectionTest, ClusterError> {
        let record = self.live_record(id).await?;
        let mut newly_missing = false;
        let outcome = match self.current_conn(&record).await {
            Ok(conn) => {
                let mut outcome = probe::probe(&conn.client, &conn.server, self.config.probe_timeout).await;
                if let Some(uid) = &outcome.kube_system_uid
                    && !record.kube_system_uid.is_empty()
                    && uid != &record.kube_system_uid
                {
                    outcome.status = ClusterStatus::Unreachable;
                    outcome.failure = Some(ProbeError {
                        stage: Stage::Auth,
                        cause: format!(
                            "the kubeconfig now reaches a different cluster (kube-system UID {uid}, registered {})",
                            record.kube_system_uid
                        ),
                        hint: "restore this cluster's kubeconfig, or unregister it and register the other cluster"
                            .into(),
                    });
                }
                outcome
            }
            Err(e) => {
                let missing = matches!(e, NoClient::Missing(_));
                let p = e.problem();
                if !missing {
                    lock(&self.missing_logged).remove(&record.id);
                } else if lock(&self.missing_logged).insert(record.id.clone()) {
                    tracing::warn!(cluster_id = %record.id, "kubeconfig missing; cluster marked unreachable");
                    newly_missing = true;
                }
                ProbeOutcome::failed_early(Stage::Kubeconfig, p.cause, p.hint, ClusterStatus::Unreachable)
            }
        };
        self.record_probe(&record.id, &outcome).await?;
        // Events go out after the result is stored, so whoever reacts reads the new state.
        if newly_missing {
            self.emit(ClusterEvent::KubeconfigMissing { id: record.id.clone() });
        }
        self.emit(ClusterEvent::Probed { id: record.id.clone(), status: outcome.status });
        Ok(ConnectionTest {
            cluster_id: record.id,
            status: outcome.status,
            checks: outcome.checks,
            last_error: outcome.failure,
            latency_ms: outcome.latency_ms,
            checked_at: rfc3339_ms(self.clock.now_ms()),
        })
    }

    async fn record_probe(&self, id: &str, outcome: &ProbeOutcome) -> Result<(), ClusterError> {
        let (key, outcome, now) = (id.to_string(), outcome.clone(), self.clock.now_ms());
        let heartbeat_stale_after = self.config.heartbeat_stale_after;
        let inventory = self.inventory.clone();
        self.store
            .write(move |txn| {
                let Some(mut r) = CLUSTERS.get_in_write(txn, &key)?.filter(ClusterRecord::is_live) else {
                    return Ok(());
                };
                r.status = outcome.status;
                r.checks = outcome.checks;
                r.last_error = outcome.failure;
                if outcome.prerequisites.is_some() {
                    r.prerequisites = outcome.prerequisites;
                }
                if outcome.version.is_some() {
                    r.kubernetes_version = outcome.version;
                }
                r.last_checked_at = Some(now);
                // A passing probe must not hide an operator that stopped reporting.
                let heartbeat_at = inventory.counts_in_write(txn, &key)?.heartbeat_at;
                r.keep_silence(heartbeat_at, now, heartbeat_stale_after);
                // clu_local learns its identity on its first successful probe.
                if r.kube_system_uid.is_empty()
                    && let Some(uid) = outcome.kube_system_uid
                {
                    r.kube_system_uid = uid;
                }
                CLUSTERS.put(txn, &key, &r)
            })
            .await?;
        Ok(())
    }

    /// The client for a cluster, rebuilt from its kubeconfig file when the content changed.
    async fn current_conn(&self, record: &ClusterRecord) -> Result<Conn, NoClient> {
        let id = ClusterId::parse(&record.id)
            .map_err(|e| KubeconfigProblem { cause: e.to_string(), hint: String::new() })?;
        let override_server = record.api_server_override.then(|| record.api_server.clone());
        if record.kubeconfig_ref == KubeconfigRef::InCluster {
            if let Some(c) = self.conn(&id) {
                return Ok(c);
            }
            let config = kube::Config::incluster().map_err(|e| KubeconfigProblem {
                cause: format!("in-cluster service account unavailable: {e}"),
                hint: "run inside a pod, or set local_kubeconfig".into(),
            })?;
            let server = kubeconfig::parse_server(&config.cluster_url.to_string())?;
            let client = kube::Client::try_from(config)
                .map_err(|e| KubeconfigProblem { cause: e.to_string(), hint: String::new() })?;
            let conn = Conn { hash: "incluster".into(), api_server: record.api_server.clone(), server, client };
            lock(&self.conns).insert(record.id.clone(), conn.clone());
            return Ok(conn);
        }
        let kc = match &record.kubeconfig_ref {
            KubeconfigRef::Path(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| KubeconfigProblem {
                    cause: format!("cannot read {}: {e}", path.display()),
                    hint: "check local_kubeconfig".into(),
                })?;
                kubeconfig::check(&text, Origin::File, &self.config.kubeconfig_exec_allow)?
            }
            KubeconfigRef::InCluster | KubeconfigRef::Registered(_) => self.read_registered_kubeconfig(&id).await?,
        };
        lock(&self.missing_logged).remove(&record.id);
        if let Some(c) = self.conn(&id).filter(|c| c.hash == kc.hash && c.api_server == record.api_server) {
            return Ok(c);
        }
        // A kubeconfig other than the one the override came with (hot-loaded, or `api_server`
        // patched alone) sends its credentials there only under its own CA.
        if let Some(address) = &override_server
            && record.api_server_kubeconfig_hash.as_deref() != Some(kc.hash.as_str())
        {
            kubeconfig::may_send_credentials_to(&kc, address)?;
        }
        let server_url = override_server.clone().unwrap_or_else(|| kc.server.clone());
        let server = kubeconfig::parse_server(&server_url)?;
        let client = kubeconfig::client_for(&kc, override_server.as_deref(), self.config.probe_timeout).await?;
        let conn = Conn { hash: kc.hash.clone(), api_server: record.api_server.clone(), server, client };
        lock(&self.conns).insert(record.id.clone(), conn.clone());
        tracing::info!(cluster_id = %record.id, "cluster client rebuilt from its kubeconfig");
        self.emit(ClusterEvent::ClientRebuilt { id: record.id.clone(), hash: kc.hash });
        Ok(conn)
    }

    /// All live cluster ids.
    pub async fn live_ids(&self) -> Result<Vec<ClusterId>, ClusterError> {
        Ok(self.live_records().await?.iter().filter_map(|(r, _)| ClusterId::parse(&r.id).ok()).collect())
    }

    /// Records a directory of the kubeconfig dir that no cluster claims (logged once).
    pub fn note_unclaimed(&self, name: &str, reason: &str) {
        let mut map = lock(&self.unclaimed);
        if map.contains_key(name) {
            return;
        }
        tracing::warn!(dir = %name, reason, "kubeconfig directory for an unknown cluster; not registering it automatically");
        map.insert(
            name.to_string(),
            UnclaimedDir {
                name: name.to_string(),
                reason: reason.to_string(),
                first_seen_at: rfc3339_ms(self.clock.now_ms()),
            },
        );
        drop(map);
        self.emit(ClusterEvent::Unclaimed { name: name.to_string() });
    }

    pub fn forget_unclaimed_except(&self, present: &std::collections::HashSet<String>) {
        lock(&self.unclaimed).retain(|k, _| present.contains(k));
    }

    /// The kubeconfig hash the cached client was built from (the watcher compares against it).
    pub fn cached_hash(&self, id: &str) -> Option<String> {
        lock(&self.conns).get(id).map(|c| c.hash.clone())
    }

    // ----- unregistering -----

    pub async fn delete(&self, id: &ClusterId) -> Result<(), ClusterError> {
        let key = id.to_string();
        let now = self.clock.now_ms();
        let (in_use, inventory) = (self.in_use.clone(), self.inventory.clone());
        self.store
            .write_with(move |txn| {
                let Some(mut r) = CLUSTERS.get_in_write(txn, &key)?.filter(ClusterRecord::is_live) else {
                    return Err(ClusterError::NotFound(key));
                };
                let (sessions, allocations) = in_use(txn, &key)?;
                if !sessions.is_empty() || !allocations.is_empty() {
                    let in_use = super::in_use::InUse::new(key, r.name.clone(), sessions, allocations);
                    return Err(ClusterError::InUse(Box::new(in_use)));
                }
                inventory.forget(txn, &key)?;
                r.status = ClusterStatus::Deleted;
                r.deleted_at = Some(now);
                CLUSTERS.put(txn, &key, &r)?;
                Ok::<_, ClusterError>(())
            })
            .await?;
        lock(&self.conns).remove(id.as_str());
        let (dir, id2) = (self.kubeconfig_dir(), id.clone());
        let removed = tokio::task::spawn_blocking(move || kubeconfig::remove_dir(&dir, &id2)).await;
        if let Ok(Err(e)) | Err(e) = removed.map_err(std::io::Error::other) {
            tracing::error!(cluster_id = %id, error = %e, "cluster unregistered but its kubeconfig directory could not be removed");
        }
        tracing::info!(cluster_id = %id, "cluster unregistered");
        Ok(())
    }

    // ----- the local cluster -----

    /// Ensures the `clu_local` row exists when `bootstrap_local_cluster` is set (in-cluster
    /// service account inside a pod, else `local_kubeconfig`). Fast: the probe runs afterwards,
    /// in the background, so start-up never waits on the cluster.
    pub async fn ensure_local(&self) -> Result<(), ClusterError> {
        let kubeconfig_ref = if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
            KubeconfigRef::InCluster
        } else if let Some(p) = &self.config.local_kubeconfig {
            KubeconfigRef::Path(p.clone())
        } else {
            return Err(ClusterError::Invalid {
                field: "local_kubeconfig",
                message: "bootstrap_local_cluster needs a pod's service account or local_kubeconfig".into(),
                kind: "value_error",
            });
        };
        let now = self.clock.now_ms();
        let api_server = match &kubeconfig_ref {
            KubeconfigRef::Path(p) => std::fs::read_to_string(p)
                .ok()
                .and_then(|t| kubeconfig::check(&t, Origin::File, &self.config.kubeconfig_exec_allow).ok())
                .map(|kc| kc.server)
                .unwrap_or_default(),
            KubeconfigRef::InCluster | KubeconfigRef::Registered(_) => "https://kubernetes.default.svc".to_string(),
        };
        self.store
            .write(move |txn| {
                let existing = CLUSTERS.get_in_write(txn, super::LOCAL)?;
                if existing.as_ref().is_some_and(ClusterRecord::is_live) {
                    return Ok(());
                }
                let record =
                    ClusterRecord::new(super::LOCAL, "local".into(), Role::Primary, api_server, kubeconfig_ref, now);
                CLUSTERS.put(txn, super::LOCAL, &record)
            })
            .await?;
        tracing::info!("local cluster clu_local ensured; probing it in the background");
        Ok(())
    }
}

/// Does `other` (a live cluster) clash with the given name / identity / address?
fn conflict_with(
    other: &ClusterRecord,
    name: &str,
    uid: Option<&str>,
    api_server: Option<&str>,
    except: Option<&str>,
) -> Option<ClusterError> {
    if !other.is_live() || except == Some(other.id.as_str()) {
        return None;
    }
    if other.name.eq_ignore_ascii_case(name) {
        return Some(ClusterError::Conflict {
            field: "name",
            value: name.to_string(),
            existing: other.id.clone(),
            existing_name: other.name.clone(),
        });
    }
    if let Some(uid) = uid
        && !uid.is_empty()
        && other.kube_system_uid == uid
    {
        return Some(ClusterError::Conflict {
            field: "kube_system_uid",
            value: uid.to_string(),
            existing: other.id.clone(),
            existing_name: other.name.clone(),
        });
    }
    if let Some(s) = api_server
        && other.api_server.trim_end_matches('/').eq_ignore_ascii_case(s.trim_end_matches('/'))
    {
        return Some(ClusterError::Conflict {
            field: "api_server",
            value: s.to_string(),
            existing: other.id.clone(),
            existing_name: other.name.clone(),
        });
    }
    None
}
