//! The gShare operator on a registered cluster: its manifests (upstream's chart, rendered here),
//! one-step attach and detach through the cluster's kubeconfig, the operator token (minting,
//! automatic renewal into the cluster's Secret), and whether the operator is connected.

pub mod apply;
pub mod builds;
pub mod crds;
pub mod key_use;
pub mod manifests;
pub mod model;
pub mod pod;
pub mod routes;
pub mod status;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::tokens::{MAX_TTL, TokenAuthority};
use crate::clock::Clock;
use crate::clusters::{ClusterId, Clusters};
use crate::config::Config;
use crate::locks::lock;
use crate::sessions::model::LIVE_SESSIONS;
use crate::store::{Store, StoreError};
use apply::{ApplyFailure, CrdDifference, Denied, ExistingInstall, ObjectResult};
use manifests::Params;
use model::{
    ATTACH_RESULTS, ATTACHMENTS, AppliedObject, AttachResult, Attachment, LEFTOVERS, Leftovers, Rotation, TokenInfo,
};

/// The operator's status heartbeat period (operator-contract §2.1): "connected" means a callback
/// within two of them.
pub const CALLBACK_INTERVAL: Duration = Duration::from_secs(60);
/// First retry delay after a failed renewal; doubles per failure up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(30);
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("no cluster {0}")]
    NotFound(String),
    /// A setting is missing or unusable: (setting, message).
    #[error("{1}")]
    Setting(&'static str, String),
    #[error("no usable connection to cluster {id}: {cause}")]
    NoClient { id: String, cause: String },
    #[error("the cluster's credentials lack rights attach needs")]
    Forbidden { denied: Vec<Denied>, objects: Vec<ObjectResult> },
    /// Detach's access check: rights to delete what it would remove; nothing was deleted.
    #[error("the cluster's credentials lack rights detach needs")]
    DetachForbidden { denied: Vec<Denied> },
    /// Objects of the operator another tool installed (never empty).
    #[error("an operator installed by {} is already on the cluster", .0.first().map(|e| e.manager.as_str()).unwrap_or("another tool"))]
    Exists(Vec<ExistingInstall>),
    /// Detach deleted the custom resources; these still carry a finalizer after the wait.
    #[error("custom resources still hold finalizers")]
    FinalizersPending { waited_s: u64, held: Vec<String>, objects: Vec<ObjectResult> },
    #[error("CRDs on the cluster differ from the shipped ones")]
    CrdConflict { crds: Vec<CrdDifference> },
    #[error("the cluster became unreachable: {cause}")]
    Unreachable { cause: String, objects: Vec<ObjectResult> },
    #[error("the cluster refused {object}: {message}")]
    Refused { object: String, code: u16, reason: String, message: String, objects: Vec<ObjectResult> },
    /// `operator_attach_timeout` ran out; `objects` says how far attach got.
    #[error("attach did not finish within {after_s} s")]
    Deadline { after_s: u64, objects: Vec<ObjectResult> },
    #[error("cluster {id} still has live sessions")]
    LiveSessions { id: String, sessions: Vec<String> },
    #[error("no operator is attached to cluster {0}")]
    NotAttached(String),
    #[error("cannot sign an operator token: {0}")]
    Token(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer of attach and detach.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Report {
    pub cluster_id: String,
    /// Every object in order with what happened to it.
    pub objects: Vec<ObjectResult>,
    /// Objects created or changed by this call.
    pub changed: usize,
    /// The operator token written into the Secret (its expiry), attach only.
    pub token: Option<TokenView>,
    /// The RBAC profile and pull policy used, and why (attach only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<builds::ProfileChoice>,
    /// The prerequisite checks run before this attach (attach only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prerequisites: Option<crate::clusters::prereq::Prerequisites>,
    /// With `?label_nodes=true`: the labels applied per node, and those kept at other values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labeled_nodes: Vec<crate::clusters::prereq::NodeLabeling>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenView {
    pub kid: String,
    pub issued_at: String,
    pub expires_at: String,
}

impl From<&TokenInfo> for TokenView {
    fn from(t: &TokenInfo) -> Self {
        Self {
            kid: t.kid.clone(),
            issued_at: crate::clock::rfc3339_ms(t.issued_at * 1000),
            expires_at: crate::clock::rfc3339_ms(t.expires_at * 1000),
        }
    }
}

/// Tokens presented on `/internal/*` and refused, by the cluster they claimed. The claim is not
/// verified (the token was refused), so only fixed reason codes and counts are kept: a forged
/// token can add to a count, never write text an admin reads, nor hide another cause.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Rejection {
    /// When the last one came.
    pub at: String,
    /// The last one's reason code (`expired`, `bad_signature`, `unknown_kid`, …).
    pub reason: &'static str,
    /// Refusals by reason code since start.
    pub counts: std::collections::BTreeMap<&'static str, u64>,
    #[serde(skip)]
    pub at_ms: i64,
}

/// A freshly minted operator token.
pub struct Minted {
    pub token: String,
    pub info: TokenInfo,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted").field("token", &"<redacted>").field("info", &self.info).finish()
    }
}

#[derive(Debug, Default)]
struct Counters {
    renewals_ok: AtomicU64,
    renewals_failed: AtomicU64,
}

pub struct Operator {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
    clusters: Arc<Clusters>,
    internal: Arc<TokenAuthority>,
    rejections: Mutex<HashMap<String, Rejection>>,
    counters: Counters,
    /// One attach, detach or renewal per cluster at a time (clusters do not wait for each other).
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The operator's pods as last read from each attached cluster ([`pod::read`]).
    pods: Mutex<HashMap<String, pod::OperatorPods>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").finish_non_exhaustive()
    }
}

impl Operator {
    pub fn new(
        store: Store,
        clock: Clock,
        config: Arc<Config>,
        clusters: Arc<Clusters>,
        internal: Arc<TokenAuthority>,
    ) -> Self {
        Self {
            store,
            clock,
            config,
            clusters,
            internal,
            rejections: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            busy: Mutex::new(HashMap::new()),
            pods: Mutex::new(HashMap::new()),
        }
    }

    // ---- the operator's pods -----------------------------------------------------------------

    /// The operator's pods as last read from this cluster, if ever.
    pub fn last_pods(&self, id: &str) -> Option<pod::OperatorPods> {
        lock(&self.pods).get(id).cloned()
    }

    /// Reads the operator's Deployment, pods, log and Events now (bounded in time) and keeps
    /// them for the cluster's view. `None` without a connection to the cluster.
    pub async fn refresh_pods(&self, id: &ClusterId) -> Option<pod::OperatorPods> {
        let conn = self.clusters.conn(id)?;
        let read = pod::read(&conn.client, self.clock.now_ms()).await;
        lock(&self.pods).insert(id.to_string(), read.clone());
        Some(read)
    }

    /// Background pass: reads the pods of every attached cluster whose operator is not
    /// connected and was not read within [`pod::REFRESH_EVERY`]. Returns the clusters read.
    pub async fn refresh_silent(&self) -> Vec<String> {
        use futures::StreamExt;
        let all = self.store.read(|txn| ATTACHMENTS.list(txn)).await.unwrap_or_default();
        let now = self.clock.now_ms();
        let mut due = Vec::new();
        for (key, a) in &all {
            let Ok(id) = ClusterId::parse(key) else { continue };
            if self.last_pods(key).is_some_and(|p| now - p.read_at_ms < pod::REFRESH_EVERY.as_millis() as i64) {
                continue;
            }
            let Ok(detail) = self.clusters.get(&id).await else { continue };
            if self.connection(&detail.cluster, Some(a), None).state == status::OperatorState::Connected {
                continue;
            }
            due.push(id);
        }
        futures::stream::iter(due)
            .map(|id| async move { self.refresh_pods(&id).await.map(|_| id.to_string()) })
            .buffer_unordered(8)
            .filter_map(|r| async move { r })
            .collect()
            .await
    }

    /// Waits for this cluster's turn: attach, detach and renewal of one cluster never overlap;
    /// other clusters' go on.
    async fn one_at_a_time(&self, id: &ClusterId) -> tokio::sync::OwnedMutexGuard<()> {
        let m = lock(&self.busy).entry(id.to_string()).or_default().clone();
        m.lock_owned().await
    }

    // ---- tokens ------------------------------------------------------------------------------

    /// Signs an operator token for `id` (TTL at most 30 days).
    pub fn mint(&self, id: &ClusterId, ttl: Duration) -> Result<Minted, OperatorError> {
        if ttl > MAX_TTL || ttl.is_zero() {
            return Err(OperatorError::Setting("ttl", "the token lifetime must be between 1 s and 30 days".into()));
        }
        let token = self.internal.mint(&id.operator_subject(), ttl).map_err(|e| OperatorError::Token(e.to_string()))?;
        let claims = self
            .internal
            .verify_uncached(&token, self.clock.now())
            .map_err(|e| OperatorError::Token(format!("the new token does not verify: {e}")))?;
        let kid = jsonwebtoken::decode_header(&token).ok().and_then(|h| h.kid).unwrap_or_default();
        let issued_at = claims.iat.unwrap_or_else(|| self.clock.now());
        Ok(Minted { token, info: TokenInfo { kid, issued_at, expires_at: claims.exp } })
    }

    /// When a token issued at `t` should be renewed.
    fn renew_at(&self, t: &TokenInfo) -> i64 {
        let life = (t.expires_at - t.issued_at).max(0);
        t.issued_at + life * i64::from(self.config.operator_token_renew_percent) / 100
    }

    /// Is this token (as read back from a cluster's Secret) one we may keep using?
    fn still_good(&self, id: &ClusterId, token: &str) -> Option<TokenInfo> {
        let now = self.clock.now();
        let claims = self.internal.verify_uncached(token, now).ok()?;
        if claims.sub != id.operator_subject() {
            return None;
        }
        let kid = jsonwebtoken::decode_header(token).ok().and_then(|h| h.kid).unwrap_or_default();
        if Some(kid.as_str()) != self.internal.signing_kid().as_deref() {
            return None;
        }
        let info = TokenInfo { kid, issued_at: claims.iat.unwrap_or(now), expires_at: claims.exp };
        (now < self.renew_at(&info)).then_some(info)
    }

    // ---- rejections --------------------------------------------------------------------------

    /// Records a refused `/internal/*` token under the cluster its subject claims (read without
    /// verifying: it is only shown to the admin, never trusted).
    pub fn note_rejection(&self, token: &str, error: &crate::auth::tokens::VerifyError) {
        let Some(payload) = token.split('.').nth(1) else { return };
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')) else {
            return;
        };
        let Ok(claims) = serde_json::from_slice::<Value>(&bytes) else { return };
        let Some(id) = claims["sub"]
            .as_str()
            .and_then(|s| s.strip_prefix(crate::auth::guard::OPERATOR_PREFIX))
            .and_then(|s| ClusterId::parse(s).ok())
        else {
            return;
        };
        let now = self.clock.now_ms();
        let mut map = lock(&self.rejections);
        // Bounded: one entry per claimed cluster id, and junk ids are not kept beyond 1000.
        if map.len() >= 1000 && !map.contains_key(id.as_str()) {
            return;
        }
        let reason = error.code();
        let entry = map.entry(id.to_string()).or_insert_with(|| Rejection {
            at: String::new(),
            reason,
            counts: Default::default(),
            at_ms: 0,
        });
        *entry.counts.entry(reason).or_insert(0) += 1;
        // The time and last reason move at most once a second (a flood costs a count, no churn).
        if now - entry.at_ms >= 1000 || entry.at_ms == 0 {
            entry.at = crate::clock::rfc3339_ms(now);
            entry.at_ms = now;
            entry.reason = reason;
        }
    }

    pub fn last_rejection(&self, id: &str) -> Option<Rejection> {
        lock(&self.rejections).get(id).cloned()
    }

    // ---- attach and detach -------------------------------------------------------------------

    /// Keeps how this attach request ended, for the cluster's view (one row per cluster, the
    /// latest replaces the one before).
    pub async fn record_attach_result(
        &self,
        id: &ClusterId,
        ok: bool,
        code: Option<&str>,
        message: Option<&str>,
        setting: Option<&str>,
    ) -> Result<(), StoreError> {
        let key = id.to_string();
        let record = AttachResult {
            at_ms: self.clock.now_ms(),
            ok,
            code: code.map(str::to_string),
            message: message.map(|m| m.chars().take(2000).collect()),
            setting: setting.map(str::to_string),
        };
        self.store.write(move |txn| ATTACH_RESULTS.put(txn, &key, &record)).await
    }

    pub async fn attachment(&self, id: &str) -> Result<Option<Attachment>, StoreError> {
        let key = id.to_string();
        self.store.read(move |txn| ATTACHMENTS.get(txn, &key)).await
    }

    async fn client(&self, id: &ClusterId) -> Result<kube::Client, OperatorError> {
        if let Some(c) = self.clusters.conn(id) {
            return Ok(c.client);
        }
        // No cached client yet: a probe builds it from the kubeconfig file.
        let probe = self.clusters.reprobe(id).await.map_err(|e| match e {
            crate::clusters::ClusterError::NotFound(id) => OperatorError::NotFound(id),
            other => OperatorError::NoClient { id: id.to_string(), cause: other.to_string() },
        })?;
        self.clusters.conn(id).map(|c| c.client).ok_or_else(|| OperatorError::NoClient {
            id: id.to_string(),
            cause: probe.last_error.map(|e| format!("{}: {}", e.stage, e.cause)).unwrap_or_else(|| "no client".into()),
        })
    }

    /// What attach would apply to this cluster (the token left out).
    pub async fn params(&self, id: &ClusterId) -> Result<Params, OperatorError> {
        let detail = self.clusters.get(id).await.map_err(|e| match e {
            crate::clusters::ClusterError::NotFound(id) => OperatorError::NotFound(id),
            other => OperatorError::NoClient { id: id.to_string(), cause: other.to_string() },
        })?;
        let control_plane_url = manifests::check_control_plane_url(&self.config.public_url, "public_url")
            .map_err(|m| OperatorError::Setting("public_url", m))?;
        let session_domain = detail.cluster.effective_session_domain.ok_or_else(|| {
            OperatorError::Setting(
                "session_domain",
                format!(
                    "cluster {id} has no session domain: set session_domain in the configuration \
                     (GSHARE_SESSION_DOMAIN) or the cluster's own (PATCH /api/v1/clusters/{id})"
                ),
            )
        })?;
        let profile = builds::choose(&self.config.operator_image, self.config.operator_build.as_deref())
            .map_err(|m| OperatorError::Setting("operator_build", m))?;
        Ok(Params {
            profile,
            hami_monitor_url: None,
            cluster_id: id.to_string(),
            image: self.config.operator_image.clone(),
            control_plane_url,
            session_domain,
            sessions_namespace: self.config.sessions_namespace.clone(),
            token: None,
        })
    }

    /// Applies every object the operator needs through the cluster's kubeconfig. Safe to repeat:
    /// a second run changes nothing (the token is kept while it is fresh).
    /// `replace`: an operator Deployment another tool installed is deleted and created anew
    /// (otherwise attach refuses with [`OperatorError::Exists`]).
    /// `label_nodes`: upstream's node labels are applied where missing (never over a label set to
    /// another value), and the nodes listed in the answer.
    pub async fn attach(
        &self,
        id: &ClusterId,
        force: bool,
        replace: bool,
        label_nodes: bool,
    ) -> Result<Report, OperatorError> {
        let _one = self.one_at_a_time(id).await;
        let limit = self.config.operator_attach_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let late = || OperatorError::Deadline { after_s: limit.as_secs(), objects: Vec::new() };
        // The apply loop stops itself at the deadline and records how far it got; this outer
        // bound (with time to record) catches the checks before it.
        let hard = deadline + Duration::from_secs(2);
        match tokio::time::timeout_at(hard, self.attach_locked(id, force, replace, label_nodes, deadline)).await {
            Ok(r) => r,
            Err(_) => Err(late()),
        }
    }

    async fn attach_locked(
        &self,
        id: &ClusterId,
        force: bool,
        replace: bool,
        label_nodes: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Report, OperatorError> {
        let after_s = self.config.operator_attach_timeout.as_secs();
        let mut params = self.params(id).await?;
        let client = self.client(id).await?;

        let unreachable = |f: ApplyFailure| match f {
            ApplyFailure::Unreachable(cause) => OperatorError::Unreachable { cause, objects: Vec::new() },
            ApplyFailure::Refused { code, reason, message } => {
                OperatorError::Refused { object: "the access check".into(), code, reason, message, objects: Vec::new() }
            }
        };
        // Decide before writing anything: missing rights and foreign CRDs leave the cluster as it was.
        let probe_objects = manifests::objects(&Params { token: Some(String::new()), ..params.clone() });
        let mut denied = apply::preflight(&client, &probe_objects, replace).await.map_err(unreachable)?;
        if label_nodes && !apply::may(&client, "", "nodes", "patch", None).await.map_err(unreachable)? {
            denied.push(Denied {
                verb: "patch".into(),
                resource: "nodes".into(),
                namespace: None,
                objects: vec!["label_nodes".into()],
                missing: Vec::new(),
            });
        }
        if !denied.is_empty() {
            return Err(OperatorError::Forbidden { denied, objects: Vec::new() });
        }
        // An operator another tool installed (deploy-operator.sh, Helm) is not taken over
        // silently: neither its Deployment nor its RBAC (a Helm release may hold the RBAC alone).
        let existing = apply::existing_installs(&client, &probe_objects).await.map_err(unreachable)?;
        if !existing.is_empty() && !replace {
            return Err(OperatorError::Exists(existing));
        }
        // `?replace=true`: delete each and create gShare's in the apply below.
        let mut replaced: Vec<String> = Vec::new();
        for e in &existing {
            let Some(o) = probe_objects.iter().find(|o| manifests::describe(o) == e.object) else { continue };
            match apply::delete(&client, o).await {
                Ok(_) => replaced.push(e.object.clone()),
                Err(f) => {
                    return Err(match f {
                        ApplyFailure::Unreachable(cause) => OperatorError::Unreachable { cause, objects: Vec::new() },
                        ApplyFailure::Refused { code, reason, message } => OperatorError::Refused {
                            object: e.object.clone(),
                            code,
                            reason,
                            message,
                            objects: Vec::new(),
                        },
                    });
                }
            }
        }
        let differences = apply::crd_differences(&client).await.map_err(unreachable)?;
        if !differences.is_empty() && !force {
            return Err(OperatorError::CrdConflict { crds: differences });
        }
        // What upstream's attach-cluster.sh sets up, checked again now; the HAMi monitor found
        // is the URL the operator gets. A refused node list is a failed check, not a failure.
        let node_api: kube::Api<crate::clusters::kinds::Node> = kube::Api::all(client.clone());
        let nodes = match node_api.list(&kube::api::ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(_)) => Vec::new(),
            Err(e) => return Err(OperatorError::Unreachable { cause: e.to_string(), objects: Vec::new() }),
        };
        let prerequisites = crate::clusters::prereq::check_cluster(&client, &nodes).await;
        params.hami_monitor_url = prerequisites.hami_monitor_url.clone();
        let labeled_nodes = if label_nodes {
            crate::clusters::prereq::label_nodes(&client, &nodes).await.map_err(|message| OperatorError::Refused {
                object: "node labels".into(),
                code: 0,
                reason: "LabelFailed".into(),
                message,
                objects: Vec::new(),
            })?
        } else {
            Vec::new()
        };
        // Keep the cluster's current token while it is fresh, so a re-run is a no-op.
        let secret = manifests::token_secret("");
        let current = match apply::get(&client, &secret).await {
            Ok(Some(s)) => serde_json::to_value(&s).ok().and_then(|v| {
                let b64 = v["data"][manifests::TOKEN_KEY].as_str()?.to_string();
                let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
                String::from_utf8(raw).ok()
            }),
            Ok(None) => None,
            Err(f) => return Err(unreachable(f)),
        };
        let (token, info) = match current.as_deref().and_then(|t| self.still_good(id, t.trim()).map(|i| (t, i))) {
            Some((t, i)) => (t.trim().to_string(), i),
            None => {
                let m = self.mint(id, self.config.operator_token_ttl)?;
                (m.token, m.info)
            }
        };
        params.token = Some(token);
        let objects = manifests::objects(&params);

        let previous = self.attachment(id.as_str()).await?;
        // CRDs an earlier detach kept (their resources remained elsewhere) are still ours.
        let key = id.to_string();
        let leftovers = self.store.read(move |txn| LEFTOVERS.get(txn, &key)).await?;
        let ours_before: Vec<AppliedObject> = previous
            .iter()
            .flat_map(|p| p.objects.iter())
            .chain(leftovers.iter().flat_map(|l| l.objects.iter()))
            .filter(|a| a.created)
            .cloned()
            .collect();
        let was_created = |o: &Value| {
            ours_before.iter().any(|a| {
                a.kind == o["kind"].as_str().unwrap_or_default()
                    && a.name == o["metadata"]["name"].as_str().unwrap_or_default()
                    && a.namespace.as_deref() == o["metadata"]["namespace"].as_str()
            })
        };
        let now = self.clock.now_ms();
        let mut results = Vec::with_capacity(objects.len());
        let mut applied: Vec<AppliedObject> = Vec::new();
        let mut failure: Option<(usize, ApplyFailure)> = None;
        let mut out_of_time = false;
        for (i, o) in objects.iter().enumerate() {
            let Ok(step) = tokio::time::timeout_at(deadline, apply::apply(&client, o)).await else {
                out_of_time = true;
                break;
            };
            match step {
                Ok(result) => {
                    let shown = if replaced.contains(&manifests::describe(o)) { "replaced" } else { result };
                    results.push(ObjectResult {
                        object: manifests::describe(o),
                        result: shown.into(),
                        status: None,
                        reason: None,
                        message: None,
                    });
                    applied.push(AppliedObject {
                        api_version: o["apiVersion"].as_str().unwrap_or_default().into(),
                        kind: o["kind"].as_str().unwrap_or_default().into(),
                        name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
                        namespace: o["metadata"]["namespace"].as_str().map(str::to_string),
                        created: result == "created" || was_created(o),
                    });
                }
                Err(f) => {
                    results.push(f.result_for(o));
                    failure = Some((i, f));
                    break;
                }
            }
        }
        for o in objects.iter().skip(results.len()) {
            results.push(ObjectResult {
                object: manifests::describe(o),
                result: "not_attempted".into(),
                status: None,
                reason: None,
                message: None,
            });
        }
        let complete = failure.is_none() && !out_of_time;
        // Objects created by an earlier attempt (or kept by an earlier detach) and not reached
        // now stay on record for detach.
        for a in &ours_before {
            if !applied.iter().any(|b| b.kind == a.kind && b.name == a.name && b.namespace == a.namespace) {
                applied.push(a.clone());
            }
        }
        let secret_written = applied.iter().any(|a| a.kind == "Secret" && a.name == manifests::TOKEN_SECRET);
        let record = Attachment {
            cluster_id: id.to_string(),
            attached_at: previous.as_ref().and_then(|p| p.attached_at).or(complete.then_some(now)),
            last_attempt_at: now,
            complete,
            objects: applied,
            image: params.image.clone(),
            control_plane_url: params.control_plane_url.clone(),
            session_domain: params.session_domain.clone(),
            token: if secret_written { Some(info.clone()) } else { previous.as_ref().and_then(|p| p.token.clone()) },
            rotation: if secret_written {
                Rotation::default()
            } else {
                previous.map(|p| p.rotation).unwrap_or_default()
            },
        };
        let key = id.to_string();
        self.store
            .write(move |txn| {
                ATTACHMENTS.put(txn, &key, &record)?;
                // The record now holds them.
                LEFTOVERS.delete(txn, &key).map(|_| ())
            })
            .await?;
        if out_of_time {
            return Err(OperatorError::Deadline { after_s, objects: results });
        }
        match failure {
            None => Ok(Report {
                cluster_id: id.to_string(),
                changed: results
                    .iter()
                    .filter(|r| matches!(r.result.as_str(), "created" | "updated" | "replaced"))
                    .count(),
                objects: results,
                token: Some(TokenView::from(&info)),
                profile: Some(params.profile.clone()),
                prerequisites: Some(prerequisites),
                labeled_nodes,
            }),
            Some((i, ApplyFailure::Unreachable(cause))) => {
                let _ = i;
                Err(OperatorError::Unreachable { cause, objects: results })
            }
            Some((i, ApplyFailure::Refused { code: 403, reason: _, message })) => {
                let o = &objects[i];
                let resource = apply::api_resource(o)
                    .map(|ar| if ar.group.is_empty() { ar.plural } else { format!("{}.{}", ar.plural, ar.group) })
                    .unwrap_or_default();
                Err(OperatorError::Forbidden {
                    denied: vec![Denied {
                        verb: "patch".into(),
                        resource,
                        namespace: o["metadata"]["namespace"].as_str().map(str::to_string),
                        objects: vec![manifests::describe(o)],
                        missing: vec![message.chars().take(500).collect()],
                    }],
                    objects: results,
                })
            }
            Some((i, ApplyFailure::Refused { code, reason, message })) => Err(OperatorError::Refused {
                object: manifests::describe(&objects[i]),
                code,
                reason,
                message,
                objects: results,
            }),
        }
    }

    /// Removes what attach made (objects that were there before it are kept), refusing while the
    /// cluster has live sessions. First an access check: the right to delete every object it
    /// would remove (and to patch custom resources whose finalizers it strips), so a refusal
    /// names each missing right before anything is deleted. Then in order: the custom resources
    /// in the sessions namespace (waiting, bounded, for the operator to clear its finalizers;
    /// `strip_finalizers` removes them for an operator that never will), the Deployment, RBAC,
    /// namespaces, and the CRDs last — kept while custom resources of them remain elsewhere,
    /// and then remembered ([`LEFTOVERS`]), so a later detach (or attach) still knows them.
    /// With no attachment but such leftovers, detach removes the leftovers.
    pub async fn detach(&self, id: &ClusterId, strip_finalizers: bool) -> Result<Report, OperatorError> {
        let _one = self.one_at_a_time(id).await;
        let key = id.to_string();
        let sessions: Vec<String> = self
            .store
            .read(move |txn| {
                Ok(LIVE_SESSIONS.list(txn)?.into_iter().filter(|(_, c)| *c == key).map(|(s, _)| s).collect())
            })
            .await?;
        if !sessions.is_empty() {
            return Err(OperatorError::LiveSessions { id: id.to_string(), sessions });
        }
        let key = id.to_string();
        let leftovers = self.store.read(move |txn| LEFTOVERS.get(txn, &key)).await?;
        let record = self.attachment(id.as_str()).await?;
        let (to_remove, attached): (Vec<AppliedObject>, bool) = match (&record, &leftovers) {
            (Some(r), _) => (r.objects.clone(), true),
            (None, Some(l)) => (l.objects.clone(), false),
            (None, None) => return Err(OperatorError::NotAttached(id.to_string())),
        };
        let client = self.client(id).await?;
        let mut results = Vec::new();
        let failed = |f: ApplyFailure, object: String, objects: Vec<ObjectResult>| match f {
            ApplyFailure::Unreachable(cause) => OperatorError::Unreachable { cause, objects },
            ApplyFailure::Refused { code, reason, message } => {
                OperatorError::Refused { object, code, reason, message, objects }
            }
        };
        let sessions_ns = self.config.sessions_namespace.clone();
        let in_ours =
            |cr: &apply::CustomResource| cr.object["metadata"]["namespace"].as_str() == Some(sessions_ns.as_str());
        let all =
            apply::custom_resources(&client).await.map_err(|f| failed(f, "custom resources".into(), Vec::new()))?;
        let ours: Vec<apply::CustomResource> =
            if attached { all.iter().filter(|c| in_ours(c)).cloned().collect() } else { Vec::new() };
        // 0. Every delete allowed? Asked before the first one.
        let as_object = |a: &AppliedObject| {
            let mut o = serde_json::json!({
                "apiVersion": a.api_version, "kind": a.kind, "metadata": { "name": a.name },
            });
            if let Some(ns) = &a.namespace {
                o["metadata"]["namespace"] = Value::String(ns.clone());
            }
            o
        };
        let deleted_objects: Vec<Value> = to_remove.iter().filter(|a| a.created).map(as_object).collect();
        let denied = apply::preflight_delete(&client, &deleted_objects, &ours, strip_finalizers)
            .await
            .map_err(|f| failed(f, "the access check".into(), Vec::new()))?;
        if !denied.is_empty() {
            return Err(OperatorError::DetachForbidden { denied });
        }
        // 1. Custom resources in the sessions namespace, while the operator still runs to
        //    clear its finalizers.
        for cr in &ours {
            match apply::delete_custom(&client, cr, strip_finalizers).await {
                Ok(r) => results.push(ObjectResult {
                    object: cr.describe(),
                    result: r.into(),
                    status: None,
                    reason: None,
                    message: None,
                }),
                Err(f) => {
                    results.push(f.result_for(&cr.object));
                    return Err(failed(f, cr.describe(), results));
                }
            }
        }
        let wait = self.config.operator_attach_timeout.min(Duration::from_secs(120));
        let until = tokio::time::Instant::now() + wait;
        // Without an attachment (leftovers only) no custom resource is deleted, so any holds the CRDs.
        let mut foreign: Vec<String> =
            all.iter().filter(|c| !attached || !in_ours(c)).map(apply::CustomResource::describe).collect();
        loop {
            if !attached {
                break;
            }
            let now = apply::custom_resources(&client)
                .await
                .map_err(|f| failed(f, "custom resources".into(), results.clone()))?;
            foreign = now.iter().filter(|c| !in_ours(c)).map(apply::CustomResource::describe).collect();
            let held: Vec<String> = now
                .iter()
                .filter(|c| in_ours(c))
                .map(|c| format!("{} (finalizers: {})", c.describe(), c.finalizers.join(", ")))
                .collect();
            if held.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= until {
                // Nothing else is deleted: the operator must stay to clear them.
                return Err(OperatorError::FinalizersPending { waited_s: wait.as_secs(), held, objects: results });
            }
            tokio::time::sleep(Duration::from_millis(250).min(until - tokio::time::Instant::now())).await;
        }
        let mut kept_on_record = Vec::new();
        let mut kept_crds = Vec::new();
        let mut failure = None;
        // Reverse apply order: the Deployment first, the CRDs (and their objects) last.
        for a in to_remove.iter().rev() {
            let o = as_object(a);
            let result = |result: &str, reason: Option<&str>, message: Option<String>| ObjectResult {
                object: manifests::describe(&o),
                result: result.into(),
                status: None,
                reason: reason.map(str::to_string),
                message,
            };
            if !a.created {
                results.push(result("kept", None, None));
                continue;
            }
            if a.kind == "CustomResourceDefinition" && !foreign.is_empty() {
                kept_crds.push(a.clone());
                kept_on_record.push(a.clone());
                results.push(result(
                    "kept",
                    Some("ForeignResources"),
                    Some(format!(
                        "custom resources outside {} remain: {}; detach again once they are gone to remove it",
                        self.config.sessions_namespace,
                        foreign.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
                    )),
                ));
                continue;
            }
            if failure.is_some() {
                kept_on_record.push(a.clone());
                results.push(result("not_attempted", None, None));
                continue;
            }
            match apply::delete(&client, &o).await {
                Ok(r) => results.push(result(r, None, None)),
                Err(f) => {
                    results.push(f.result_for(&o));
                    kept_on_record.push(a.clone());
                    failure = Some((manifests::describe(&o), f));
                }
            }
        }
        let key = id.to_string();
        match failure {
            None => {
                lock(&self.pods).remove(id.as_str());
                let now = self.clock.now_ms();
                kept_crds.reverse();
                self.store
                    .write(move |txn| {
                        ATTACHMENTS.delete(txn, &key)?;
                        // Detached: an earlier attach's outcome no longer describes the cluster.
                        ATTACH_RESULTS.delete(txn, &key)?;
                        if kept_crds.is_empty() {
                            LEFTOVERS.delete(txn, &key)?;
                        } else {
                            let since = leftovers.map(|l| l.since).unwrap_or(now);
                            LEFTOVERS.put(
                                txn,
                                &key,
                                &Leftovers { cluster_id: key.clone(), since, objects: kept_crds },
                            )?;
                        }
                        Ok(())
                    })
                    .await?;
                Ok(Report {
                    cluster_id: id.to_string(),
                    changed: results.iter().filter(|r| matches!(r.result.as_str(), "deleted" | "terminating")).count(),
                    objects: results,
                    token: None,
                    profile: None,
                    prerequisites: None,
                    labeled_nodes: Vec::new(),
                })
            }
            Some((object, f)) => {
                // What is left stays on record, so a re-run finishes the job.
                kept_on_record.reverse();
                self.store
                    .write(move |txn| match record {
                        Some(mut rest) => {
                            rest.objects = kept_on_record;
                            rest.complete = false;
                            ATTACHMENTS.put(txn, &key, &rest)
                        }
                        None => {
                            let since = leftovers.map(|l| l.since).unwrap_or_default();
                            LEFTOVERS.put(
                                txn,
                                &key,
                                &Leftovers { cluster_id: key.clone(), since, objects: kept_on_record },
                            )
                        }
                    })
                    .await?;
                Err(failed(f, object, results))
            }
        }
    }

    // ---- rotation ----------------------------------------------------------------------------

    /// Writes a fresh token into the Secret of every attached cluster whose token is past its
    /// renewal point (or signed by a key that no longer signs), unless a failed attempt's backoff
    /// still runs. Returns the clusters renewed. Driven by the clock: tests advance it and call this.
    pub async fn renew_due(&self) -> Result<Vec<String>, StoreError> {
        let all = self.store.read(|txn| ATTACHMENTS.list(txn)).await?;
        let mut renewed = Vec::new();
        for (_, a) in all {
            let now_ms = self.clock.now_ms();
            let Some(token) = &a.token else { continue };
            let due =
                self.clock.now() >= self.renew_at(token) || self.internal.signing_kid().is_some_and(|k| k != token.kid);
            if !due || a.rotation.next_attempt_at.is_some_and(|t| now_ms < t) {
                continue;
            }
            let Ok(id) = ClusterId::parse(&a.cluster_id) else { continue };
            match self.renew(&id).await {
                Ok(info) => {
                    self.counters.renewals_ok.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(cluster_id = %id, kid = %info.kid, expires_at = info.expires_at, "operator token renewed");
                    renewed.push(id.to_string());
                }
                Err(e) => {
                    self.counters.renewals_failed.fetch_add(1, Ordering::Relaxed);
                    let failures = a.rotation.failures.saturating_add(1);
                    let backoff = FIRST_BACKOFF.saturating_mul(1u32 << (failures - 1).min(10)).min(MAX_BACKOFF);
                    tracing::warn!(cluster_id = %id, error = %e, failures, retry_in = ?backoff, "operator token renewal failed");
                    let (key, message) = (id.to_string(), e.to_string());
                    self.store
                        .write(move |txn| {
                            if let Some(mut r) = ATTACHMENTS.get_in_write(txn, &key)? {
                                r.rotation.failures = failures;
                                r.rotation.last_error = Some(message);
                                r.rotation.last_error_at = Some(now_ms);
                                r.rotation.next_attempt_at = Some(now_ms + backoff.as_millis() as i64);
                                ATTACHMENTS.put(txn, &key, &r)?;
                            }
                            Ok(())
                        })
                        .await?;
                }
            }
        }
        Ok(renewed)
    }

    /// Mints a token and writes it into the cluster's Secret.
    pub async fn renew(&self, id: &ClusterId) -> Result<TokenInfo, OperatorError> {
        let _one = self.one_at_a_time(id).await;
        let client = self.client(id).await?;
        let m = self.mint(id, self.config.operator_token_ttl)?;
        let secret = manifests::token_secret(&m.token);
        apply::apply(&client, &secret).await.map_err(|f| match f {
            ApplyFailure::Unreachable(cause) => OperatorError::Unreachable { cause, objects: Vec::new() },
            ApplyFailure::Refused { code, reason, message } => OperatorError::Refused {
                object: manifests::describe(&secret),
                code,
                reason,
                message,
                objects: Vec::new(),
            },
        })?;
        let (key, info, now) = (id.to_string(), m.info.clone(), self.clock.now_ms());
        self.store
            .write(move |txn| {
                if let Some(mut r) = ATTACHMENTS.get_in_write(txn, &key)? {
                    r.token = Some(info);
                    r.rotation = Rotation { last_renewed_at: Some(now), ..Rotation::default() };
                    ATTACHMENTS.put(txn, &key, &r)?;
                }
                Ok(())
            })
            .await?;
        Ok(m.info)
    }

    /// `/metrics` lines: renewals by result, and each attached cluster's token expiry and
    /// consecutive renewal failures.
    pub async fn metrics(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "# HELP gshare_operator_token_renewals_total Operator token renewals, by result.");
        let _ = writeln!(out, "# TYPE gshare_operator_token_renewals_total counter");
        let _ = writeln!(
            out,
            "gshare_operator_token_renewals_total{{result=\"ok\"}} {}",
            self.counters.renewals_ok.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "gshare_operator_token_renewals_total{{result=\"failed\"}} {}",
            self.counters.renewals_failed.load(Ordering::Relaxed)
        );
        let all = self.store.read(|txn| ATTACHMENTS.list(txn)).await.unwrap_or_default();
        let _ = writeln!(
            out,
            "# HELP gshare_operator_token_expiry_seconds Unix time the token in an attached cluster's Secret expires."
        );
        let _ = writeln!(out, "# TYPE gshare_operator_token_expiry_seconds gauge");
        for (_, a) in &all {
            if let Some(t) = &a.token {
                let _ = writeln!(
                    out,
                    "gshare_operator_token_expiry_seconds{{cluster_id=\"{}\"}} {}",
                    a.cluster_id, t.expires_at
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP gshare_operator_token_renewal_failures Consecutive failed renewals of an attached cluster's token."
        );
        let _ = writeln!(out, "# TYPE gshare_operator_token_renewal_failures gauge");
        for (_, a) in &all {
            let _ = writeln!(
                out,
                "gshare_operator_token_renewal_failures{{cluster_id=\"{}\"}} {}",
                a.cluster_id, a.rotation.failures
            );
        }
        out
    }
}

/// Reads silent operators' pods every `every` (each cluster at most every
/// [`pod::REFRESH_EVERY`]) until `stop`.
pub fn spawn_pod_watch(op: Arc<Operator>, every: Duration, stop: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(crate::background::now_and_every(every, stop, move || {
        let op = op.clone();
        async move {
            op.refresh_silent().await;
        }
    }));
}

/// Renews due tokens every `every` until `stop`.
pub fn spawn_rotation(op: Arc<Operator>, every: Duration, stop: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(crate::background::now_and_every(every, stop, move || {
        let op = op.clone();
        async move {
            if let Err(e) = op.renew_due().await {
                tracing::error!(error = %e, "cannot read attached clusters for token renewal");
            }
        }
    }));
}
