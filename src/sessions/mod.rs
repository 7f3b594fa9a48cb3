//! Sessions: offerings, `GShareSession` apply/pause/resume/delete on the cluster, the state
//! machine fed by operator reports, connection tokens and `/internal/connect/verify`.
//!
//! Order of work for every change: the record is written first (so a crash leaves a trace that
//! says what was being done), then the cluster is asked, then the outcome is recorded.

pub mod admission;
pub mod connect;
pub mod cr;
pub mod drain;
pub mod listing;
pub mod lookup;
pub mod metrics;
pub mod model;
pub mod offerings;
pub mod origin;
pub mod proxy_path;
pub mod queue;
pub mod relay;
pub mod reports;
pub mod routes;
pub mod status;

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

pub use listing::SessionQuery;
use model::*;
pub use model::{SESSIONS, SessionRecord};

use self::model::put_session;
use crate::clock::Clock;
use crate::clusters::model::{CLUSTERS, ClusterRecord, ClusterStatus, Role};
use crate::clusters::{ClusterId, Clusters};
use crate::config::Config;
use crate::http::error::ErrorCode;
use crate::notifications::{self, Kind};
use crate::store::{DryRun, Store, StoreError};
use cr::{CrClient, CrError};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String, kind: &'static str },
    #[error("{0}")]
    NotFound(String),
    /// A refusal with its own code (`offering_in_use`, `session_conflict`, …).
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String, details: Value },
    /// The cluster did not do what was asked; `session` is the affected session, if any.
    #[error("{message}: {source}")]
    Cluster { code: ErrorCode, message: String, source: CrError, session: Option<String> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn conflict(code: ErrorCode, message: impl Into<String>, details: Value) -> SessionError {
    SessionError::Conflict { code, message: message.into(), details }
}

/// `POST /api/v1/sessions`. Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    pub offering_id: String,
    /// Omitted: a connected cluster is picked (primary clusters first).
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// Display name, up to 80 characters; no control, bidi-override or zero-width characters.
    #[serde(default)]
    #[schema(max_length = 80)]
    pub name: Option<String>,
    /// Who the session is for (default: the signed-in admin). 1–64 of `A-Za-z0-9._@-`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._@-]+$")]
    pub owner: Option<String>,
    /// Overrides the offering's image.
    #[serde(default)]
    #[schema(max_length = 512)]
    pub image: Option<String>,
}

fn check_owner(owner: &str) -> Result<String, SessionError> {
    let ok = !owner.is_empty()
        && owner.len() <= 64
        && owner.chars().all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c));
    if ok {
        Ok(owner.to_string())
    } else {
        Err(SessionError::Invalid {
            field: "owner",
            message: "must be 1–64 characters of A-Z a-z 0-9 . _ @ -".into(),
            kind: "value_error",
        })
    }
}

/// Can a new session be placed on this cluster?
fn placeable(c: &ClusterRecord) -> bool {
    c.is_live() && matches!(c.status, ClusterStatus::Connected | ClusterStatus::Degraded | ClusterStatus::Pending)
}

/// How long before its runtime limit a running session is warned.
pub const RUNTIME_WARNING_MS: i64 = 10 * 60_000;

/// What one runtime sweep did (session ids).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RuntimeSweep {
    pub warned: Vec<String>,
    pub ended: Vec<String>,
}

/// What holds a cluster against unregistering: its live sessions and the open GPU allocations on
/// it, with session names (the composition root hands this to `Clusters`, which knows no sessions).
pub fn cluster_in_use(
    txn: &crate::store::WriteTxn,
    cluster_id: &str,
) -> Result<(Vec<crate::clusters::in_use::UsingSession>, Vec<crate::clusters::in_use::OpenAllocation>), StoreError> {
    use crate::clusters::in_use::{OpenAllocation, UsingSession};
    let live: Vec<SessionRecord> = SESSIONS
        .list_in_write(txn)?
        .into_iter()
        .filter(|(_, s)| s.cluster_id == cluster_id && s.is_live())
        .map(|(_, s)| s)
        .collect();
    let open = crate::inventory::gpu_booking::open_on_cluster(txn, cluster_id)?;
    let mut allocations = Vec::with_capacity(open.len());
    for a in open {
        let session_name = match live.iter().find(|s| s.id == a.session_id) {
            Some(s) => s.name.clone(),
            None => SESSIONS.get_in_write(txn, &a.session_id)?.and_then(|s| s.name),
        };
        allocations.push(OpenAllocation {
            session_name,
            id: a.id,
            session_id: a.session_id,
            gpu_uuid: a.gpu_uuid,
            gpu_mem_mb: a.gpu_mem_mb,
        });
    }
    let sessions =
        live.into_iter().map(|s| UsingSession { phase: s.phase.as_str().into(), id: s.id, name: s.name }).collect();
    Ok((sessions, allocations))
}

/// Why a cluster's operator cannot take a session now: its state as the cluster view names it
/// (`not_attached`, `attach_incomplete`, `silent`) and a sentence saying what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotConnected {
    pub state: &'static str,
    pub message: String,
}

/// Reads, inside the create transaction, whether a cluster's operator is connected (`None`) at
/// `now` (ms). The operator domain (above this one) knows what connected means; the composition
/// root hands `Sessions` its answer.
pub type OperatorGate =
    Arc<dyn Fn(&crate::store::WriteTxn, &ClusterRecord, i64) -> Result<Option<NotConnected>, StoreError> + Send + Sync>;

/// The gate as `Sessions` keeps it (a closure has no `Debug`).
#[derive(Clone)]
struct Gate(OperatorGate);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorGate")
    }
}

/// The persistent volumes a new session mounts, decided inside its create transaction from the
/// owner and the cluster it is placed on (the owner's home workspace there, made on their first
/// session, and their named volumes there). The volumes room (beside this one) decides and writes
/// its own tables; the composition root hands `Sessions` the function.
pub type VolumeHook = Arc<
    dyn Fn(&crate::store::WriteTxn, &str, &ClusterRecord, i64) -> Result<Vec<SessionVolume>, StoreError> + Send + Sync,
>;

/// The hook as `Sessions` keeps it (a closure has no `Debug`).
#[derive(Clone)]
struct Mounts(VolumeHook);

impl std::fmt::Debug for Mounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeHook")
    }
}

#[derive(Debug)]
pub struct Sessions {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
    clusters: Arc<Clusters>,
    pub connect: connect::ConnectKeys,
    /// Pooled connections for the `/proxy/` relay.
    pub relay: relay::RelayClient,
    /// What verify and the relay look up per request, kept until the next commit.
    lookups: lookup::LookupCache,
    session_hosts: origin::SessionHosts,
    /// Heartbeats of running sessions waiting for the next flush (see `reports`).
    beats: reports::HeldBeats,
    /// Whether a cluster's operator is there to run a new session.
    operator_gate: Gate,
    /// The volumes a new session mounts (none without it).
    mounts: Option<Mounts>,
    /// The owner's resource policy and the fit check, before anything is recorded.
    admission: admission::Admission,
    /// One queue pass at a time (the timer's and the woken task's).
    queue_pass: tokio::sync::Mutex<()>,
    /// The operator's pause acknowledgements a drain waits for.
    pause_acks: drain::PauseAcks,
}

impl Sessions {
    pub fn new(
        store: Store,
        clock: Clock,
        config: Arc<Config>,
        clusters: Arc<Clusters>,
        connect: connect::ConnectKeys,
        operator_gate: OperatorGate,
    ) -> Self {
        Self {
            operator_gate: Gate(operator_gate),
            admission: admission::Admission::new(store.clone()),
            store,
            clock,
            config,
            clusters,
            connect,
            relay: relay::RelayClient::new(),
            lookups: Default::default(),
            session_hosts: Default::default(),
            beats: Default::default(),
            mounts: None,
            queue_pass: tokio::sync::Mutex::new(()),
            pause_acks: Default::default(),
        }
    }

    /// Sessions created from now on mount what `hook` decides (see [`VolumeHook`]).
    pub fn with_volumes(mut self, hook: VolumeHook) -> Self {
        self.mounts = Some(Mounts(hook));
        self
    }

    fn cr_client(&self, cluster_id: &str) -> Result<CrClient, CrError> {
        let id = ClusterId::parse(cluster_id).map_err(|e| CrError::NoClient(e.to_string()))?;
        let conn = self.clusters.conn(&id).ok_or_else(|| {
            CrError::NoClient(format!(
                "{}/{cluster_id}/kubeconfig is missing or unusable",
                self.config.cluster_kubeconfig_dir.display()
            ))
        })?;
        // A CR call gets the probe's deadline twice over: it may follow a slow TLS handshake.
        Ok(CrClient::new(conn.client, &self.config.sessions_namespace, self.config.probe_timeout * 2))
    }

    /// Creates (or merges over) the session's GShareSession; returns its generation.
    async fn apply_cr(&self, s: &SessionRecord) -> Result<Option<i64>, CrError> {
        let excluded = self.excluded_nodes(&s.cluster_id, &s.owner).await;
        self.cr_client(&s.cluster_id)?.apply(&cr::build(s, &self.config.sessions_namespace, &excluded)).await
    }

    /// The nodes `owner`'s session must not land on, sorted: the cluster's cordoned and offline
    /// nodes (upstream's `handoff.excluded_nodes`) and those reserved by node pools its owner's
    /// group may not use (or the shared ones, when the group has a pool and may not spill), as
    /// they are now. Unreadable = none (the operator then just keeps the pod).
    async fn excluded_nodes(&self, cluster_id: &str, owner: &str) -> Vec<String> {
        let (id, owner) = (cluster_id.to_string(), owner.to_string());
        let read = self.store.read(move |txn| {
            let placement = crate::inventory::pools::placement_of(&DryRun::new(txn), &id, &owner)?;
            crate::inventory::pools::excluded_nodes(txn, &id, &placement)
        });
        read.await.unwrap_or_else(|e| {
            tracing::warn!(cluster_id, error = %e, "cannot read the cluster's nodes; no excludedNodes sent");
            Vec::new()
        })
    }

    // ---- offerings -------------------------------------------------------------------------

    pub async fn offerings(
        &self,
        status: Option<OfferingStatus>,
        viewer: Viewer,
    ) -> Result<Vec<OfferingView>, SessionError> {
        Ok(self
            .store
            .read(move |txn| {
                // Counted for admins only: a member is not told the fleet's activity.
                let live_sessions = if viewer == Viewer::Admin { Some(live_sessions(txn)?) } else { None };
                let mut out: Vec<OfferingView> = OFFERINGS
                    .list(txn)?
                    .into_iter()
                    .filter(|(_, o)| status.is_none_or(|s| o.status == s))
                    .filter(|(_, o)| viewer.sees(o))
                    .map(|(_, o)| {
                        let live =
                            live_sessions.as_ref().map(|l| l.iter().filter(|s| s.offering_id == o.id).count() as u64);
                        OfferingView::new(&o, live)
                    })
                    .collect();
                out.sort_by(|a, b| a.name.to_lowercase().cmp(&b.name.to_lowercase()).then(a.id.cmp(&b.id)));
                Ok(out)
            })
            .await?)
    }

    /// One offering; one the viewer may not see answers as a missing one.
    pub async fn offering(&self, id: &str, viewer: Viewer) -> Result<OfferingView, SessionError> {
        let id = id.to_string();
        self.store
            .read(move |txn| {
                let Some(o) = OFFERINGS.get(txn, &id)?.filter(|o| viewer.sees(o)) else { return Ok(None) };
                let live = if viewer == Viewer::Admin {
                    Some(live_sessions(txn)?.iter().filter(|s| s.offering_id == o.id).count() as u64)
                } else {
                    None
                };
                Ok(Some(OfferingView::new(&o, live)))
            })
            .await?
            .ok_or_else(|| SessionError::NotFound("no such offering".into()))
    }

    pub async fn create_offering(&self, req: offerings::OfferingCreate) -> Result<OfferingView, SessionError> {
        let visible_to = offerings::check_visible_to(req.visible_to.clone())?;
        let (name, shape) = req.into_shape()?;
        let now = self.clock.now_ms();
        let record = OfferingRecord {
            id: format!("off_{}", ulid::Ulid::new()),
            name,
            shape,
            status: OfferingStatus::Active,
            created_at: now,
            visible_to,
        };
        let r = record.clone();
        self.store
            .write_with(move |txn| {
                unique_name(txn, &r.name, &r.id)?;
                OFFERINGS.put(txn, &r.id, &r)?;
                Ok::<_, SessionError>(())
            })
            .await?;
        Ok(OfferingView::new(&record, Some(0)))
    }

    pub async fn patch_offering(
        &self,
        id: &str,
        req: offerings::OfferingPatch,
    ) -> Result<(OfferingView, Vec<&'static str>), SessionError> {
        let id = id.to_string();
        self.store
            .write_with(move |txn| {
                let old = OFFERINGS
                    .get_in_write(txn, &id)?
                    .ok_or_else(|| SessionError::NotFound("no such offering".into()))?;
                let (new, fields) = req.apply(&old)?;
                unique_name(txn, &new.name, &new.id)?;
                OFFERINGS.put(txn, &id, &new)?;
                let mut live = 0;
                for (sid, _) in LIVE_SESSIONS.list_in_write(txn)? {
                    live += usize::from(SESSIONS.get_in_write(txn, &sid)?.is_some_and(|s| s.offering_id == id));
                }
                Ok((OfferingView::new(&new, Some(live as u64)), fields))
            })
            .await
    }

    /// Refused while any session (live or history) names it: deactivate it instead.
    pub async fn delete_offering(&self, id: &str) -> Result<String, SessionError> {
        let id = id.to_string();
        self.store
            .write_with(move |txn| {
                let o = OFFERINGS
                    .get_in_write(txn, &id)?
                    .ok_or_else(|| SessionError::NotFound("no such offering".into()))?;
                let used = SESSIONS.list_in_write(txn)?.iter().filter(|(_, s)| s.offering_id == id).count();
                if used > 0 {
                    return Err(conflict(
                        ErrorCode::OfferingInUse,
                        format!(
                            "{} created from this offering (ended ones count: their history names it); deactivate it instead",
                            crate::http::error::plural(used, "session was", "sessions were")
                        ),
                        json!({ "sessions": used }),
                    ));
                }
                OFFERINGS.delete(txn, &id)?;
                Ok(o.name)
            })
            .await
    }

    // ---- sessions --------------------------------------------------------------------------

    /// A page of sessions, newest first (see `listing`).
    pub async fn list(&self, q: SessionQuery) -> Result<SessionPage, SessionError> {
        Ok(self
            .store
            .read(move |txn| {
                let mut page = listing::page(txn, &q)?;
                fill_queue_positions(txn, &mut page.data)?;
                Ok(page)
            })
            .await?)
    }

    /// Fills each waiting session's place in its cluster's queue.
    pub async fn with_queue_positions(&self, views: &mut [model::SessionView]) -> Result<(), SessionError> {
        if views.iter().all(|v| v.queued_reason.is_none()) {
            return Ok(());
        }
        let mut owned = views.to_vec();
        let filled = self
            .store
            .read(move |txn| {
                fill_queue_positions(txn, &mut owned)?;
                Ok(owned)
            })
            .await?;
        for (v, f) in views.iter_mut().zip(filled) {
            v.queue_position = f.queue_position;
        }
        Ok(())
    }

    /// Fills each live session's ephemeral disk use from the last volume sync of its cluster.
    pub async fn with_disks(&self, views: &mut [model::SessionView]) -> Result<(), SessionError> {
        let keys: Vec<Option<String>> =
            views.iter().map(|v| v.live.then(|| format!("{}/{}", v.cluster_id, v.cr_name))).collect();
        let disks = self
            .store
            .read(move |txn| {
                keys.iter()
                    .map(|k| match k {
                        Some(k) => crate::inventory::model::SESSION_DISKS.get(txn, k),
                        None => Ok(None),
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        for (v, d) in views.iter_mut().zip(disks) {
            v.ephemeral_disk = d.map(|d| model::EphemeralDisk::new(d.ephemeral_used_bytes, d.ephemeral_limit_bytes));
        }
        Ok(())
    }

    pub async fn get(&self, id: &str) -> Result<SessionRecord, SessionError> {
        let id = id.to_string();
        self.store
            .read(move |txn| SESSIONS.get(txn, &id))
            .await?
            .ok_or_else(|| SessionError::NotFound("no such session".into()))
    }

    /// Records the session, applies its CR, records the outcome.
    /// `viewer`: a member creates only from an offering they may see (another answers as a
    /// missing one).
    pub async fn create(
        &self,
        req: CreateSession,
        default_owner: &str,
        viewer: Viewer,
    ) -> Result<SessionRecord, SessionError> {
        let owner = check_owner(req.owner.as_deref().unwrap_or(default_owner))?;
        let name = match req.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
            Some(n) => Some(offerings::check_name(n)?),
            None => None,
        };
        let image = req.image.as_deref().filter(|i| !i.trim().is_empty()).map(offerings::check_image).transpose()?;
        let now = self.clock.now_ms();
        let id = format!("ses_{}", ulid::Ulid::new());
        let wanted = req.cluster_id.clone();
        let offering_id = req.offering_id.clone();
        let (sid, clusters, gate) = (id.clone(), self.clusters.clone(), self.operator_gate.0.clone());
        let mounts = self.mounts.clone();
        let admission = self.admission.clone();
        let record = self
            .store
            .write_with(move |txn| {
                let o = OFFERINGS
                    .get_in_write(txn, &offering_id)?
                    .filter(|o| viewer.sees(o))
                    .ok_or_else(|| SessionError::NotFound(format!("no offering {offering_id}")))?;
                if o.status != OfferingStatus::Active {
                    return Err(conflict(
                        ErrorCode::OfferingInactive,
                        format!("offering {} is inactive", o.name),
                        json!({ "offering_id": o.id }),
                    ));
                }
                let cluster = pick_cluster(txn, wanted.as_deref(), &clusters, &gate, now)?;
                let mut shape = o.shape.clone();
                if let Some(i) = image {
                    shape.image = i;
                }
                let verdict = admission.check(txn, &sid, &owner, &cluster, &mut shape, None, true, now)?;
                // Only an admitted session makes a home volume.
                let volumes = match &mounts {
                    Some(Mounts(hook)) => hook(txn, &owner, &cluster, now)?,
                    None => Vec::new(),
                };
                let s = SessionRecord {
                    id: sid.clone(),
                    cluster_id: cluster.id.clone(),
                    cluster_name: cluster.name.clone(),
                    owner,
                    phase: Phase::Pending,
                    created_at: now,
                    last_report_at: None,
                    name,
                    offering_id: o.id.clone(),
                    offering_name: o.name.clone(),
                    shape,
                    reason: None,
                    message: None,
                    bound_gpu_uuid: None,
                    node_name: None,
                    started_at: None,
                    phase_changed_at: Some(now),
                    ended_at: None,
                    generation: None,
                    resume_generation: None,
                    resumed_at: None,
                    runtime_warned_at: None,
                    paused: false,
                    cr_applied: false,
                    volumes,
                    queue: match verdict {
                        admission::Verdict::Start => None,
                        admission::Verdict::Queue(reason) => Some(QueueState {
                            queued_at: now,
                            reason: reason.to_string(),
                            started_at: None,
                            unserviceable_since: None,
                        }),
                    },
                };
                put_session(txn, &s)?;
                Ok(s)
            })
            .await?;
        if record.is_queued() {
            // Nothing is applied: the queue starts it when its cluster has room (`serve_queue`).
            return Ok(record);
        }

        let applied = self.apply_cr(&record).await;
        match applied {
            Ok(generation) => {
                self.update(&id, move |s, _| {
                    s.cr_applied = true;
                    s.generation = generation.or(s.generation);
                })
                .await
            }
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(session_id = %id, cluster_id = %record.cluster_id, error = %message, "GShareSession not applied");
                self.update(&id, move |s, now| {
                    s.reason = Some(status::Reason::ApplyFailed);
                    s.message = Some(message);
                    s.set_phase(Phase::Error, now);
                })
                .await?;
                Err(SessionError::Cluster {
                    code: ErrorCode::ClusterApplyFailed,
                    message: format!("session {id} was recorded but its GShareSession could not be applied"),
                    source: e,
                    session: Some(id),
                })
            }
        }
    }

    /// Read-modify-write of one session in a transaction (operator reports may land in between).
    async fn update(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionRecord, i64) + Send + 'static,
    ) -> Result<SessionRecord, SessionError> {
        self.update_with(id, move |_, s, now| {
            f(s, now);
            Ok(())
        })
        .await
    }

    /// [`Self::update`] with the write transaction, for changes that write beside the session
    /// in the same commit (a notification to its owner).
    async fn update_with(
        &self,
        id: &str,
        f: impl FnOnce(&crate::store::WriteTxn, &mut SessionRecord, i64) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<SessionRecord, SessionError> {
        let (id, now) = (id.to_string(), self.clock.now_ms());
        self.store
            .write_with(move |txn| {
                let mut s =
                    SESSIONS.get_in_write(txn, &id)?.ok_or_else(|| SessionError::NotFound("no such session".into()))?;
                let was = s.phase;
                f(txn, &mut s, now)?;
                // A cold pause and the end of a session give the GPU back; a resume reserves it.
                if s.phase.is_final() || (s.phase == Phase::Paused && s.bound_gpu_uuid.is_none()) {
                    status::release(txn, &s.id, now)?;
                } else if was == Phase::Paused
                    && s.phase == Phase::Running
                    && s.shape.resource_class == ResourceClass::Gpu
                {
                    status::allocate(txn, &s, now)?;
                }
                put_session(txn, &s)?;
                Ok(s)
            })
            .await
    }

    fn not_allowed(s: &SessionRecord, action: &str) -> SessionError {
        conflict(
            ErrorCode::SessionConflict,
            format!("cannot {action} a session that is {}", s.phase.as_str()),
            json!({ "phase": s.phase, "allowed": s.actions() }),
        )
    }

    fn cluster_failed(&self, s: &SessionRecord, action: &str, e: CrError) -> SessionError {
        let code = match e {
            CrError::Refused { .. } => ErrorCode::ClusterApplyFailed,
            _ => ErrorCode::ClusterUnreachable,
        };
        SessionError::Cluster {
            code,
            message: format!("cannot {action} session {} on cluster {}", s.id, s.cluster_name),
            source: e,
            session: Some(s.id.clone()),
        }
    }

    /// Pauses a session (cold) for `by` (a username); its owner is notified when `by` is someone else.
    pub async fn pause(&self, id: &str, by: &str) -> Result<SessionRecord, SessionError> {
        self.pause_for(id, status::Reason::UserStopped, None, Some(by)).await
    }

    /// Pauses a session (its CR's `spec.paused`), recording why: for `by` (a username; its owner
    /// is notified when that is someone else), or by the control plane itself (`None`: the caller
    /// tells the owner why).
    async fn pause_for(
        &self,
        id: &str,
        reason: status::Reason,
        message: Option<String>,
        by: Option<&str>,
    ) -> Result<SessionRecord, SessionError> {
        let s = self.get(id).await?;
        if !s.actions().contains(&Action::Pause) {
            return Err(Self::not_allowed(&s, "pause"));
        }
        let generation = self
            .cr_client(&s.cluster_id)
            .map_err(|e| self.cluster_failed(&s, "pause", e))?
            .pause(&s.cr_name())
            .await
            .map_err(|e| self.cluster_failed(&s, "pause", e))?;
        let by = by.map(str::to_string);
        self.update_with(id, move |txn, s, now| {
            if s.phase.is_final() {
                return Ok(());
            }
            s.paused = true;
            s.generation = generation.or(s.generation);
            s.reason = Some(reason);
            s.message = message;
            s.bound_gpu_uuid = None;
            s.set_phase(Phase::Paused, now);
            if let Some(by) = by.as_deref()
                && by != s.owner
            {
                let text = format!("{} was paused by an administrator ({by}); resume it when you need it", s.label());
                notifications::push(txn, now, &s.owner, Kind::AdminPaused, Some(&s.id), &text)?;
            }
            Ok(())
        })
        .await
    }

    pub async fn resume(&self, id: &str) -> Result<SessionRecord, SessionError> {
        let s = self.get(id).await?;
        if !s.actions().contains(&Action::Resume) {
            return Err(Self::not_allowed(&s, "resume"));
        }
        self.admit_resume(&s).await?;
        let now = self.clock.now_ms();
        let excluded = self.excluded_nodes(&s.cluster_id, &s.owner).await;
        let resumed = match self.cr_client(&s.cluster_id) {
            Ok(client) => client.resume(&s, now, &excluded).await,
            Err(e) => Err(e),
        };
        let generation = match resumed {
            Ok(generation) => generation,
            Err(e) => {
                // Not resumed: the slice its admission held goes back.
                let sid = s.id.clone();
                if let Err(e) = self.store.write(move |txn| crate::inventory::gpu_booking::drop_hold(txn, &sid)).await {
                    tracing::warn!(session_id = %s.id, error = %e, "cannot give back the hold of a session not resumed");
                }
                return Err(self.cluster_failed(&s, "resume", e));
            }
        };
        self.update(id, move |s, now| {
            if s.phase != Phase::Paused {
                return;
            }
            s.paused = false;
            s.generation = generation.or(s.generation);
            s.resume_generation = generation;
            s.resumed_at = Some(now);
            s.reason = None;
            s.message = None;
            // A new pod: its node is what the operator reports next (the liveness sweep must not
            // judge the new run by the node the old pod was on).
            s.node_name = None;
            // As upstream: running from the resume on (its slice re-reserved below); the
            // operator's Running report binds the card, and older reports are stale.
            s.set_phase(Phase::Running, now);
        })
        .await
    }

    /// A resume counts the session against its owner's policy as it is now (a limit lowered
    /// below use refuses it) and, unless it still holds its card, needs a card that fits.
    async fn admit_resume(&self, s: &SessionRecord) -> Result<(), SessionError> {
        let (admission, s, now) = (self.admission.clone(), s.clone(), self.clock.now_ms());
        self.store
            .write_with(move |txn| {
                let cluster = CLUSTERS
                    .get_in_write(txn, &s.cluster_id)?
                    .ok_or_else(|| SessionError::NotFound(format!("no cluster {}", s.cluster_id)))?;
                let mut shape = s.shape.clone();
                let fit = s.bound_gpu_uuid.is_none();
                admission.check(txn, &s.id, &s.owner, &cluster, &mut shape, Some(&s.shape), fit, now).map(drop)
            })
            .await
    }

    /// Deletes the CR and marks the session terminating (the operator's finalizer reports
    /// Terminated); if no finalizer holds the CR, it is terminated at once. `force` skips the
    /// cluster (for a cluster that is gone for good). `by` (a username) did it: the owner is
    /// notified when that is someone else.
    pub async fn delete(&self, id: &str, force: bool, by: &str) -> Result<SessionRecord, SessionError> {
        let s = self.get(id).await?;
        if !s.is_live() {
            return Err(Self::not_allowed(&s, "delete"));
        }
        let by = by.to_string();
        let tell = move |txn: &crate::store::WriteTxn, s: &SessionRecord, now: i64| {
            if by == s.owner {
                return Ok(());
            }
            let text = format!("{} was ended by an administrator ({by})", s.label());
            notifications::push(txn, now, &s.owner, Kind::AdminEnded, Some(&s.id), &text).map(drop)
        };
        if s.is_queued() {
            // Nothing was applied: it leaves the queue (unless the queue started it meanwhile).
            let told = tell.clone();
            let s = self
                .update_with(id, move |txn, s, now| {
                    if s.is_queued() {
                        s.reason = Some(status::Reason::Deleted);
                        s.message = Some("cancelled while queued: nothing was applied on the cluster".into());
                        s.set_phase(Phase::Terminated, now);
                        told(txn, s, now)?;
                    }
                    Ok(())
                })
                .await?;
            if !s.is_live() {
                return Ok(s);
            }
        }
        if force {
            return self
                .update_with(id, move |txn, s, now| {
                    if s.is_live() {
                        s.reason = Some(status::Reason::Deleted);
                        s.message = Some("deleted without asking the cluster (force)".into());
                        s.cr_applied = false;
                        s.set_phase(Phase::Terminated, now);
                        tell(txn, s, now)?;
                    }
                    Ok(())
                })
                .await;
        }
        let client = self.cr_client(&s.cluster_id).map_err(|e| self.cluster_failed(&s, "delete", e))?;
        let name = s.cr_name();
        client.delete(&name).await.map_err(|e| self.cluster_failed(&s, "delete", e))?;
        let gone = client.exists(&name).await.map(|e| !e).unwrap_or(false);
        self.update_with(id, move |txn, s, now| {
            if !s.is_live() {
                return Ok(());
            }
            s.reason = Some(status::Reason::Deleted);
            if gone {
                // No finalizer held it: no operator will report Terminated.
                s.cr_applied = false;
                s.set_phase(Phase::Terminated, now);
            } else {
                s.set_phase(Phase::Terminating, now);
            }
            tell(txn, s, now)
        })
        .await
    }

    /// The runtime limit, kept by the control plane as well as the operator's reaper (which reads
    /// the CR's `gshare.io/max-runtime-sec`): a running session whose run reaches its
    /// `max_runtime_sec` is ended (its CR deleted, reason `max_runtime`); one within
    /// [`RUNTIME_WARNING_MS`] of it is warned once per run (its message says when it ends, which
    /// its owner's console shows live). Run by a timer task, never on a request.
    pub async fn enforce_runtime(&self) -> Result<RuntimeSweep, SessionError> {
        let now = self.clock.now_ms();
        let due = self
            .store
            .read(move |txn| {
                let mut due = Vec::new();
                for (id, _) in LIVE_SESSIONS.list(txn)? {
                    let Some(s) = SESSIONS.get(txn, &id)? else { continue };
                    if s.phase != Phase::Running {
                        continue;
                    }
                    let Some(ends) = lookup::run_ends_at(&s) else { continue };
                    let run_start = s.resumed_at.or(s.started_at).unwrap_or(0);
                    let warned = s.runtime_warned_at.is_some_and(|w| w >= run_start);
                    if ends <= now || (ends - now <= RUNTIME_WARNING_MS && !warned) {
                        due.push((id, ends));
                    }
                }
                Ok(due)
            })
            .await?;
        let mut sweep = RuntimeSweep::default();
        for (id, ends) in due {
            if ends <= now {
                match self.end_at_runtime_limit(&id).await {
                    Ok(()) => sweep.ended.push(id),
                    Err(e) => tracing::warn!(session = %id, error = %e, "cannot end a session at its runtime limit"),
                }
                continue;
            }
            let at = crate::clock::rfc3339_ms(ends);
            let minutes = (ends - now + 59_999) / 60_000;
            self.update_with(&id, move |txn, s, now| {
                if s.phase == Phase::Running {
                    s.runtime_warned_at = Some(now);
                    s.message = Some(format!(
                        "max-runtime warning: the runtime limit ends this session at {at} (in {minutes} min); save your work"
                    ));
                    let text = format!(
                        "{} reaches its runtime limit at {at} (in {minutes} min) and will be ended; save your work",
                        s.label()
                    );
                    notifications::push(txn, now, &s.owner, Kind::RuntimeWarning, Some(&s.id), &text)?;
                }
                Ok(())
            })
            .await?;
            sweep.warned.push(id);
        }
        Ok(sweep)
    }

    async fn end_at_runtime_limit(&self, id: &str) -> Result<(), SessionError> {
        let s = self.get(id).await?;
        let client = self.cr_client(&s.cluster_id).map_err(|e| self.cluster_failed(&s, "end", e))?;
        let name = s.cr_name();
        client.delete(&name).await.map_err(|e| self.cluster_failed(&s, "end", e))?;
        let gone = client.exists(&name).await.map(|e| !e).unwrap_or(false);
        self.update_with(id, move |txn, s, now| {
            if !s.is_live() {
                return Ok(());
            }
            s.reason = Some(status::Reason::MaxRuntime);
            s.message = Some("max-runtime-exceeded: ended by the control plane at its runtime limit".into());
            if gone {
                s.cr_applied = false;
                s.set_phase(Phase::Terminated, now);
            } else {
                s.set_phase(Phase::Terminating, now);
            }
            let text = format!("{} was ended at its runtime limit", s.label());
            notifications::push(txn, now, &s.owner, Kind::RuntimeEnded, Some(&s.id), &text).map(drop)
        })
        .await
        .map(drop)
    }

    /// Applies the CRs of sessions that were recorded but never applied (the process stopped
    /// between the two steps). Sessions younger than `min_age_ms` are left to the request that is
    /// creating them. Returns how many were applied.
    pub async fn apply_unapplied(&self, min_age_ms: i64) -> Result<usize, SessionError> {
        let cutoff = self.clock.now_ms() - min_age_ms;
        let todo: Vec<SessionRecord> = self
            .store
            .read(move |txn| {
                Ok(live_sessions(txn)?
                    .into_iter()
                    .filter(|s| {
                        s.phase == Phase::Pending
                            && !s.cr_applied
                            && !s.paused
                            && !s.is_queued()
                            && s.queue.as_ref().and_then(|q| q.started_at).unwrap_or(s.created_at) <= cutoff
                    })
                    .collect())
            })
            .await?;
        let mut applied = 0;
        for s in todo {
            let result = self.apply_cr(&s).await;
            match result {
                Ok(generation) => {
                    self.update(&s.id, move |s, _| {
                        if s.is_live() {
                            s.cr_applied = true;
                            s.generation = generation.or(s.generation);
                        }
                    })
                    .await?;
                    tracing::info!(session_id = %s.id, "applied the GShareSession of a session recorded before a stop");
                    applied += 1;
                }
                Err(e) => {
                    tracing::warn!(session_id = %s.id, error = %e, "GShareSession still not applied; retrying later")
                }
            }
        }
        Ok(applied)
    }

    /// GShareSessions running in `cluster` that no live session of this cluster stands for (after
    /// a restore: the clusters ran on while the state went back). Only lists; never deletes.
    pub async fn unknown_crs(&self, cluster: &ClusterId) -> Result<Vec<String>, String> {
        let names =
            self.cr_client(cluster.as_str()).map_err(|e| e.to_string())?.names().await.map_err(|e| e.to_string())?;
        let cluster = cluster.to_string();
        self.store
            .read(move |txn| {
                let mut unknown = Vec::new();
                for name in names {
                    let found = find_by_cr_name(
                        &name,
                        |id| SESSIONS.get(txn, id),
                        || Ok(LIVE_SESSIONS.list(txn)?.into_iter().map(|(id, _)| id).collect()),
                    )?;
                    if !found.is_some_and(|s| s.is_live() && s.cluster_id == cluster) {
                        unknown.push(name);
                    }
                }
                Ok(unknown)
            })
            .await
            .map_err(|e| e.to_string())
    }

    /// Deletes the CR of a session that failed (upstream deletes it on `error`). Best effort:
    /// the operator retries nothing here, so a failure is logged.
    pub async fn delete_failed_cr(&self, session_id: &str) {
        let Ok(s) = self.get(session_id).await else { return };
        let result = async { self.cr_client(&s.cluster_id)?.delete(&s.cr_name()).await }.await;
        match result {
            Ok(()) => {
                let _ = self.update(session_id, |s, _| s.cr_applied = false).await;
            }
            Err(e) => tracing::warn!(session_id, error = %e, "could not delete the GShareSession of a failed session"),
        }
    }

    /// The host sessions of this cluster are reached on.
    pub fn session_domain(&self, cluster: &ClusterRecord) -> Option<String> {
        cluster.session_domain.clone().or_else(|| self.config.session_domain.clone())
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}

fn unique_name(txn: &crate::store::WriteTxn, name: &str, id: &str) -> Result<(), SessionError> {
    let taken = OFFERINGS.list_in_write(txn)?.into_iter().find(|(k, o)| k != id && o.name.eq_ignore_ascii_case(name));
    match taken {
        Some((other, _)) => Err(conflict(
            ErrorCode::Conflict,
            format!("an offering named {name} exists"),
            json!({ "name": name, "offering_id": other }),
        )),
        None => Ok(()),
    }
}

/// The cluster a new session goes to: the one asked for, or the first connected primary (then
/// standby) cluster by name. It must be live, not unreachable, and have a kubeconfig loaded.
/// 409 `operator_not_connected`: the session would stay pending with no operator to run it.
fn not_connected(c: &ClusterRecord, n: NotConnected) -> SessionError {
    conflict(
        ErrorCode::OperatorNotConnected,
        format!("the operator of cluster {} is {}: {}", c.name, n.state.replace('_', " "), n.message),
        json!({ "cluster_id": c.id, "operator_state": n.state }),
    )
}

fn pick_cluster(
    txn: &crate::store::WriteTxn,
    wanted: Option<&str>,
    clusters: &Clusters,
    gate: &OperatorGate,
    now: i64,
) -> Result<ClusterRecord, SessionError> {
    let has_client = |c: &ClusterRecord| ClusterId::parse(&c.id).ok().and_then(|id| clusters.conn(&id)).is_some();
    if let Some(id) = wanted {
        let c = CLUSTERS
            .get_in_write(txn, id)?
            .filter(ClusterRecord::is_live)
            .ok_or_else(|| SessionError::NotFound(format!("no cluster {id}")))?;
        if !placeable(&c) || !has_client(&c) {
            let why = if has_client(&c) { c.status.as_str() } else { "without a usable kubeconfig" };
            return Err(conflict(
                ErrorCode::ClusterUnavailable,
                format!("cluster {} is {why}; sessions cannot be placed on it now", c.name),
                json!({ "cluster_id": c.id, "status": c.status }),
            ));
        }
        if let Some(n) = gate(txn, &c, now)? {
            return Err(not_connected(&c, n));
        }
        return Ok(c);
    }
    let mut candidates: Vec<ClusterRecord> = CLUSTERS
        .list_in_write(txn)?
        .into_iter()
        .map(|(_, c)| c)
        .filter(|c| c.is_live() && c.status == ClusterStatus::Connected && has_client(c))
        .collect();
    candidates.sort_by(|a, b| (a.role != Role::Primary, &a.name).cmp(&(b.role != Role::Primary, &b.name)));
    // The first whose operator is connected; when none is, the first one's reason.
    let mut first_refusal = None;
    for c in candidates {
        match gate(txn, &c, now)? {
            None => return Ok(c),
            Some(n) => {
                first_refusal.get_or_insert_with(|| not_connected(&c, n));
            }
        }
    }
    Err(first_refusal.unwrap_or_else(|| {
        conflict(
            ErrorCode::NoCluster,
            "no connected cluster can take a session; register one or pick a cluster",
            json!({}),
        )
    }))
}
