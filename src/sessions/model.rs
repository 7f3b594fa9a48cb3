//! What the store keeps about offerings and sessions, and the views the API returns. GPU
//! allocations belong to inventory (`inventory::gpu_booking`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::status::Reason;
use crate::clock::rfc3339_ms;
use crate::clusters::model::CLUSTERS;
use crate::inventory::model::{GPUS, NODES};
use crate::store::{JsonTable, KeySet, Migration, StoreError};

/// `off_…` -> offering (the catalogue sessions are created from).
pub const OFFERINGS: JsonTable<OfferingRecord> = JsonTable::new("offerings");
/// `ses_…` -> session.
pub const SESSIONS: JsonTable<SessionRecord> = JsonTable::new("sessions");
/// Live session id -> its cluster id: an index kept by [`put_session`], so the
/// live list, offering counts and metrics never decode the whole history.
pub const LIVE_SESSIONS: JsonTable<String> = JsonTable::new("live_sessions");
/// The session list's indexes, kept by [`put_session`]: `<owner>\0<session id>`,
/// `<cluster id>\0<session id>` and `<phase>\0<session id>`, so a filtered page walks the
/// matching ids newest first instead of the whole history.
pub const SESSIONS_BY_OWNER: KeySet = KeySet::new("sessions_by_owner");
pub const SESSIONS_BY_CLUSTER: KeySet = KeySet::new("sessions_by_cluster");
pub const SESSIONS_BY_PHASE: KeySet = KeySet::new("sessions_by_phase");
/// Every session id, keys only: the unfiltered list walks this, not the records (a deep page by
/// number then reads a few pages of ids instead of every record above it).
pub const SESSION_IDS: KeySet = KeySet::new("session_ids");
/// How many keys each index holds under one value (`owner\0<owner>`, `cluster\0<id>`,
/// `phase\0<phase>`): a one-filter list's total without counting.
pub const SESSION_COUNTS: JsonTable<u64> = JsonTable::new("session_counts");
/// The queue: `<cluster id>/<queued at, 16 digits>/<session id>` -> its owner, for each session
/// waiting for room on its cluster (kept by [`put_session`]: an entry exists while the session
/// is live and its [`QueueState`] has not started). Served in key order per cluster.
pub const SESSION_QUEUE: JsonTable<String> = JsonTable::new("session_queue");
/// SHA-256 of a connection token (hex) -> the session it opens, until redeemed or expired.
pub const CONNECT_TOKENS: JsonTable<ConnectTokenRecord> = JsonTable::new("connect_tokens");

/// Idle reaping default when an offering does not say (upstream's 1800 s).
pub const DEFAULT_IDLE_TIMEOUT_SEC: i64 = 1800;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResourceClass {
    Gpu,
    Cpu,
}

impl ResourceClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Cpu => "cpu",
        }
    }
}

/// The GPU shape of a GPU offering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuMode {
    Fractional,
    Exclusive,
}

impl GpuMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fractional => "fractional",
            Self::Exclusive => "exclusive",
        }
    }
}

/// What a session runs and with how much: copied from the offering when the session is created,
/// so later edits of the offering never change a running session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Shape {
    pub resource_class: ResourceClass,
    /// Container image, pulled verbatim.
    pub image: String,
    /// GPU offerings only.
    pub mode: Option<GpuMode>,
    pub gpu_model: Option<String>,
    pub gpu_mem_mb: Option<i64>,
    /// 0–100 (% of the card's cores).
    pub gpu_cores: Option<i64>,
    pub cpu: i64,
    pub mem_gb: i64,
    pub disk_gb: i64,
    /// Idle reaping after this many seconds; 0 = never.
    pub idle_timeout_sec: i64,
    /// Hard cap on one run; 0 = none.
    pub max_runtime_sec: i64,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            resource_class: ResourceClass::Cpu,
            image: String::new(),
            mode: None,
            gpu_model: None,
            gpu_mem_mb: None,
            gpu_cores: None,
            cpu: 1,
            mem_gb: 4,
            disk_gb: 10,
            idle_timeout_sec: DEFAULT_IDLE_TIMEOUT_SEC,
            max_runtime_sec: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OfferingStatus {
    Active,
    Inactive,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OfferingRecord {
    pub id: String,
    pub name: String,
    pub shape: Shape,
    pub status: OfferingStatus,
    pub created_at: i64,
    /// The groups whose members may see and use it; `None`: every member (rows stored before
    /// this field read so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_to: Option<Vec<String>>,
}

/// Who reads the catalogue: an admin sees every offering; a member those visible to everyone
/// or to their group. An offering a member may not see answers as a missing one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    Admin,
    Member { group: Option<String> },
}

impl Viewer {
    pub fn sees(&self, o: &OfferingRecord) -> bool {
        match (self, &o.visible_to) {
            (Self::Admin, _) | (Self::Member { .. }, None) => true,
            (Self::Member { group: Some(g) }, Some(groups)) => groups.iter().any(|x| x == g),
            (Self::Member { group: None }, Some(_)) => false,
        }
    }
}

/// An offering as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OfferingView {
    pub id: String,
    pub name: String,
    #[serde(flatten)]
    pub shape: Shape,
    pub status: OfferingStatus,
    pub created_at: String,
    /// Live sessions created from it: admins only (a member is not told how busy the lab is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
    /// The groups whose members see it; `null`: every member.
    pub visible_to: Option<Vec<String>>,
}

impl OfferingView {
    /// `live_sessions`: `None` for a member's view.
    pub fn new(r: &OfferingRecord, live_sessions: Option<u64>) -> Self {
        Self {
            id: r.id.clone(),
            name: r.name.clone(),
            shape: r.shape.clone(),
            status: r.status,
            created_at: rfc3339_ms(r.created_at),
            sessions: live_sessions,
            visible_to: r.visible_to.clone(),
        }
    }
}

/// `GET /api/v1/offerings`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OfferingList {
    pub data: Vec<OfferingView>,
}

/// A session's phase. `terminated` and `error` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Recorded; the CR is applied (or being applied) and the operator has not started a pod.
    Pending,
    Preparing,
    Running,
    Paused,
    /// The CR is being deleted; the operator's finalizer reports `Terminated`.
    Terminating,
    Terminated,
    Error,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Preparing => "preparing",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Terminating => "terminating",
            Self::Terminated => "terminated",
            Self::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
    }

    pub fn is_final(self) -> bool {
        matches!(self, Self::Terminated | Self::Error)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    pub cluster_id: String,
    /// Kept so history shows the cluster after it is unregistered.
    pub cluster_name: String,
    pub owner: String,
    pub phase: Phase,
    pub created_at: i64,
    #[serde(default)]
    pub last_report_at: Option<i64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub offering_id: String,
    #[serde(default)]
    pub offering_name: String,
    #[serde(default)]
    pub shape: Shape,
    /// Why it paused or ended.
    #[serde(default)]
    pub reason: Option<Reason>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub bound_gpu_uuid: Option<String>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub started_at: Option<i64>,
    #[serde(default)]
    pub phase_changed_at: Option<i64>,
    #[serde(default)]
    pub ended_at: Option<i64>,
    /// The CR's `metadata.generation` after the last change the control plane made.
    #[serde(default)]
    pub generation: Option<i64>,
    /// The generation the last resume produced: older Paused or final reports are stale.
    #[serde(default)]
    pub resume_generation: Option<i64>,
    #[serde(default)]
    pub resumed_at: Option<i64>,
    /// When the runtime limit's warning was given for the current run (the sweep gives it once,
    /// [`crate::sessions::RUNTIME_WARNING_MS`] before the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_warned_at: Option<i64>,
    /// `spec.paused` as last written (by us on pause/resume, or by the reaper as reported).
    #[serde(default)]
    pub paused: bool,
    /// The CR exists on the cluster (created and not yet deleted by us).
    #[serde(default)]
    pub cr_applied: bool,
    /// The persistent volumes its CR mounts (`spec.volumes`), fixed when it is created: the
    /// owner's home workspace on this cluster and their named volumes there (the volumes room
    /// decides them, through [`super::VolumeHook`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<SessionVolume>,
    /// Set when it was queued instead of started (upstream keeps such a session `pending` with a
    /// queue entry): it waits in its cluster's queue until `started_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueState>,
}

/// A session's time in its cluster's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    pub queued_at: i64,
    /// Why it waits now (upstream's `queued_reason`): `no_gpu_capacity` (no schedulable card
    /// holds its slice now), `queue_ahead` (others wait before it on its cluster), or the
    /// last refusal that held it back at its turn (`quota_exceeded`, `operator_not_connected`).
    pub reason: String,
    /// When the queue started it (its CR applied); `None` while it waits.
    #[serde(default)]
    pub started_at: Option<i64>,
    /// Since when no card it may use could ever hold it (reason `unserviceable`): it is passed
    /// over, and leaves the queue after a grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unserviceable_since: Option<i64>,
}

impl QueueState {
    pub fn waiting(&self) -> bool {
        self.started_at.is_none()
    }
}

/// The queue key of a session waiting in its cluster's queue.
pub fn queue_key(s: &SessionRecord) -> Option<String> {
    let q = s.queue.as_ref().filter(|q| q.waiting() && s.is_live())?;
    Some(format!("{}/{:016}/{}", s.cluster_id, q.queued_at.max(0), s.id))
}

/// The queue keys of `cluster_id`'s waiting sessions, in the order they are served (a write
/// transaction: the queue as this transaction sees it).
pub fn queue_in_write(txn: &crate::store::WriteTxn, cluster_id: &str) -> Result<Vec<(String, String)>, StoreError> {
    SESSION_QUEUE.list_prefix_in_write(txn, &format!("{cluster_id}/"))
}

/// The session id of a queue key.
pub fn queued_id(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or_default()
}

/// Fills each waiting session's place in its cluster's queue (1 = next).
pub fn fill_queue_positions(txn: &redb::ReadTransaction, views: &mut [SessionView]) -> Result<(), StoreError> {
    let mut by_cluster: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in views.iter_mut().filter(|v| v.queued_reason.is_some()) {
        let keys = match by_cluster.get(&v.cluster_id) {
            Some(k) => k,
            None => {
                let keys = SESSION_QUEUE.list_prefix(txn, &format!("{}/", v.cluster_id))?.into_iter().map(|(k, _)| k);
                by_cluster.entry(v.cluster_id.clone()).or_insert(keys.collect())
            }
        };
        v.queue_position = keys.iter().position(|k| queued_id(k) == v.id).map(|p| p as u64 + 1);
    }
    Ok(())
}

/// A volume's access class as the API names it (upstream's `access_mode`: RWO, RWX, ROX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum AccessMode {
    #[serde(rename = "RWO")]
    ReadWriteOnce,
    #[serde(rename = "RWX")]
    ReadWriteMany,
    #[serde(rename = "ROX")]
    ReadOnlyMany,
}

impl AccessMode {
    /// The API's short name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWriteOnce => "RWO",
            Self::ReadWriteMany => "RWX",
            Self::ReadOnlyMany => "ROX",
        }
    }

    /// The PVC access mode the CR's `spec.volumes[].mode` carries (the CRD's enum).
    pub fn as_kube(self) -> &'static str {
        match self {
            Self::ReadWriteOnce => "ReadWriteOnce",
            Self::ReadWriteMany => "ReadWriteMany",
            Self::ReadOnlyMany => "ReadOnlyMany",
        }
    }
}

/// One entry of the CR's `spec.volumes` (contract §3: `name` is the volume id, the operator makes
/// the PVC `vol-…` from it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionVolume {
    /// `vol_<ULID>`.
    pub volume_id: String,
    pub mount_path: String,
    pub mode: AccessMode,
    #[serde(default)]
    pub read_only: bool,
    /// The size the PVC is made with (GiB).
    pub size_gb: i64,
    /// The claim's name when it is not made from the id (an adopted PVC): the CR names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

impl SessionRecord {
    /// A pending session with nothing applied or reported yet.
    pub fn new(id: &str, cluster_id: &str, cluster_name: &str, owner: &str, now_ms: i64) -> Self {
        Self {
            id: id.to_string(),
            cluster_id: cluster_id.to_string(),
            cluster_name: cluster_name.to_string(),
            owner: owner.to_string(),
            phase: Phase::Pending,
            created_at: now_ms,
            last_report_at: None,
            name: None,
            offering_id: String::new(),
            offering_name: String::new(),
            shape: Shape::default(),
            reason: None,
            message: None,
            bound_gpu_uuid: None,
            node_name: None,
            started_at: None,
            phase_changed_at: Some(now_ms),
            ended_at: None,
            generation: None,
            resume_generation: None,
            resumed_at: None,
            runtime_warned_at: None,
            paused: false,
            cr_applied: false,
            volumes: Vec::new(),
            queue: None,
        }
    }

    /// Waiting in its cluster's queue (nothing applied yet).
    pub fn is_queued(&self) -> bool {
        self.is_live() && self.queue.as_ref().is_some_and(QueueState::waiting)
    }

    /// Live sessions hold cluster resources; terminated and errored ones are history.
    pub fn is_live(&self) -> bool {
        !self.phase.is_final()
    }

    /// How a notification names the session: its display name (quoted) or its id.
    pub fn label(&self) -> String {
        match self.name.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => format!("Session \"{n}\""),
            None => format!("Session {}", self.id),
        }
    }

    /// The GShareSession name: the id lower-cased with `_` -> `-` (contract §3).
    pub fn cr_name(&self) -> String {
        cr_name(&self.id)
    }

    /// Moves to `phase`, stamping when (and when it ended).
    pub fn set_phase(&mut self, phase: Phase, now: i64) {
        if self.phase != phase {
            self.phase = phase;
            self.phase_changed_at = Some(now);
        }
        if phase.is_final() && self.ended_at.is_none() {
            self.ended_at = Some(now);
        }
    }

    /// What an admin may do now.
    pub fn actions(&self) -> Vec<Action> {
        let mut a = Vec::new();
        if self.is_queued() {
            // Nothing runs yet: it can only leave the queue.
            return vec![Action::Delete];
        }
        match self.phase {
            Phase::Pending | Phase::Preparing | Phase::Running if !self.paused => a.push(Action::Pause),
            Phase::Paused => a.push(Action::Resume),
            _ => {}
        }
        if self.phase == Phase::Running {
            a.push(Action::Connect);
        }
        if self.is_live() {
            a.push(Action::Delete);
        }
        a
    }
}

/// What an admin may do to a session (`actions` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = SessionAction)]
pub enum Action {
    Pause,
    Resume,
    Connect,
    Delete,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Connect => "connect",
            Self::Delete => "delete",
        }
    }
}

/// Schema 2: the live-session index (built from the sessions).
pub const INDEX_LIVE_SESSIONS: Migration =
    Migration { to: 2, what: "the live-session index", run: |txn| rebuild_live_index(txn).map(drop) };

/// Rebuilds [`LIVE_SESSIONS`] from the sessions (schema migration, and a repair); returns its size.
pub fn rebuild_live_index(txn: &crate::store::WriteTxn) -> Result<usize, crate::store::StoreError> {
    LIVE_SESSIONS.delete_prefix(txn, "")?;
    let mut n = 0;
    for (id, s) in SESSIONS.list_in_write(txn)? {
        if s.is_live() {
            LIVE_SESSIONS.put(txn, &id, &s.cluster_id)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Schema 3: the session list's owner, cluster and phase indexes (built from the sessions).
pub const INDEX_SESSION_LISTS: Migration = Migration {
    to: 3,
    what: "the session list's owner, cluster and phase indexes",
    run: |txn| rebuild_list_indexes(txn).map(drop),
};

/// One of the session list's indexes: which field it keys by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListIndex {
    Owner,
    Cluster,
    Phase,
}

impl ListIndex {
    pub const ALL: [ListIndex; 3] = [ListIndex::Owner, ListIndex::Cluster, ListIndex::Phase];

    pub fn set(self) -> KeySet {
        match self {
            Self::Owner => SESSIONS_BY_OWNER,
            Self::Cluster => SESSIONS_BY_CLUSTER,
            Self::Phase => SESSIONS_BY_PHASE,
        }
    }

    /// The field's value in `s`.
    pub fn value_of(self, s: &SessionRecord) -> &str {
        match self {
            Self::Owner => &s.owner,
            Self::Cluster => &s.cluster_id,
            Self::Phase => s.phase.as_str(),
        }
    }

    /// The keys of one value start with this (`\0` ends it, so `u1` never matches `u10`).
    pub fn prefix(value: &str) -> String {
        format!("{value}\0")
    }

    /// The [`SESSION_COUNTS`] key of one value.
    pub fn count_key(self, value: &str) -> String {
        let field = match self {
            Self::Owner => "owner",
            Self::Cluster => "cluster",
            Self::Phase => "phase",
        };
        format!("{field}\0{value}")
    }

    /// How many sessions have this value.
    pub fn count(self, txn: &redb::ReadTransaction, value: &str) -> Result<u64, StoreError> {
        Ok(SESSION_COUNTS.get(txn, &self.count_key(value))?.unwrap_or(0))
    }

    fn add(self, txn: &crate::store::WriteTxn, value: &str, id: &str) -> Result<(), StoreError> {
        if self.set().insert(txn, &format!("{}{id}", Self::prefix(value)))? {
            let key = self.count_key(value);
            let n = SESSION_COUNTS.get_in_write(txn, &key)?.unwrap_or(0);
            SESSION_COUNTS.put(txn, &key, &(n + 1))?;
        }
        Ok(())
    }

    fn remove(self, txn: &crate::store::WriteTxn, value: &str, id: &str) -> Result<(), StoreError> {
        if self.set().remove(txn, &format!("{}{id}", Self::prefix(value)))? {
            let key = self.count_key(value);
            match SESSION_COUNTS.get_in_write(txn, &key)?.unwrap_or(0) {
                0 | 1 => SESSION_COUNTS.delete(txn, &key).map(drop)?,
                n => SESSION_COUNTS.put(txn, &key, &(n - 1))?,
            }
        }
        Ok(())
    }
}

/// Moves `new`'s index keys from what `old` (its stored row, if any) had; touches only the
/// fields that changed, so a report that changes no listed field writes no index.
fn index_for_lists(
    txn: &crate::store::WriteTxn,
    old: Option<&SessionRecord>,
    new: &SessionRecord,
) -> Result<(), StoreError> {
    if old.is_none() {
        SESSION_IDS.insert(txn, &new.id)?;
    }
    for idx in ListIndex::ALL {
        let now = idx.value_of(new);
        let was = old.map(|o| idx.value_of(o));
        if was == Some(now) {
            continue;
        }
        if let Some(was) = was {
            idx.remove(txn, was, &new.id)?;
        }
        idx.add(txn, now, &new.id)?;
    }
    Ok(())
}

/// Rebuilds the list indexes and their counts from the sessions (schema migration, and a
/// repair); returns how many sessions were indexed.
pub fn rebuild_list_indexes(txn: &crate::store::WriteTxn) -> Result<usize, StoreError> {
    for idx in ListIndex::ALL {
        idx.set().clear(txn)?;
    }
    SESSION_IDS.clear(txn)?;
    SESSION_COUNTS.delete_prefix(txn, "")?;
    let sessions = SESSIONS.list_in_write(txn)?;
    for (_, s) in &sessions {
        index_for_lists(txn, None, s)?;
    }
    Ok(sessions.len())
}

/// The live sessions, from the index.
pub fn live_sessions(txn: &redb::ReadTransaction) -> Result<Vec<SessionRecord>, crate::store::StoreError> {
    let mut out = Vec::new();
    for (id, _) in LIVE_SESSIONS.list(txn)? {
        if let Some(s) = SESSIONS.get(txn, &id)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// The session a GShareSession name stands for (its id is `lower(replace(id, '_', '-'))` of it):
/// `ses-01j…` is tried as `ses_01J…` (ULIDs are upper-case), then the live index is looked
/// through (ids only), so an unknown name never reads the whole history. `get` reads one session
/// and `live_ids` the index, from whichever transaction the caller holds.
pub fn find_by_cr_name(
    name: &str,
    mut get: impl FnMut(&str) -> Result<Option<SessionRecord>, crate::store::StoreError>,
    live_ids: impl FnOnce() -> Result<Vec<String>, crate::store::StoreError>,
) -> Result<Option<SessionRecord>, crate::store::StoreError> {
    if let Some(rest) = name.strip_prefix("ses-")
        && let Some(s) = get(&format!("ses_{}", rest.to_uppercase()))?
        && cr_name(&s.id) == name
    {
        return Ok(Some(s));
    }
    match live_ids()?.into_iter().find(|id| cr_name(id) == name) {
        Some(id) => get(&id),
        None => Ok(None),
    }
}

pub fn cr_name(session_id: &str) -> String {
    session_id.to_lowercase().replace('_', "-")
}

/// What a session's `owner` names: an account, a deleted account, or none (free text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwnerAccount {
    Account,
    Deleted,
    External,
}

/// A session as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionView {
    pub id: String,
    /// The GShareSession's name on the cluster.
    pub cr_name: String,
    pub name: Option<String>,
    pub cluster_id: String,
    pub cluster_name: String,
    pub offering_id: String,
    pub offering_name: String,
    pub owner: String,
    /// Admins' views only: does `owner` name an account (`account`), a deleted account
    /// (`deleted`), or none (`external`: a free-text owner from before accounts)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_account: Option<OwnerAccount>,
    #[serde(flatten)]
    pub shape: Shape,
    pub phase: Phase,
    pub reason: Option<Reason>,
    pub message: Option<String>,
    pub bound_gpu_uuid: Option<String>,
    pub node_name: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub phase_changed_at: String,
    pub ended_at: Option<String>,
    pub last_report_at: Option<String>,
    pub live: bool,
    /// Allowed now.
    pub actions: Vec<Action>,
    /// The persistent volumes it mounts (its CR's `spec.volumes`).
    pub volumes: Vec<SessionVolume>,
    /// Its pod's ephemeral (scratch) disk as the cluster's last volume sync reported it; null
    /// before a report and once the session is no longer live.
    pub ephemeral_disk: Option<EphemeralDisk>,
    /// While it waits in its cluster's queue (phase `pending`, nothing applied): its place, 1 =
    /// next. Null otherwise.
    pub queue_position: Option<u64>,
    /// When it was queued (null if it never was).
    pub queued_at: Option<String>,
    /// Why it waits (upstream's `queued_reason`: `no_gpu_capacity`, `queue_ahead`,
    /// `quota_exceeded`, `operator_not_connected`); null once it no longer waits.
    pub queued_reason: Option<String>,
}

/// The share of its limit at which a session's ephemeral disk use is warned about: the kubelet
/// evicts the pod when it passes the limit, and its scratch files go with it.
pub const EPHEMERAL_WARN_PCT: i64 = 90;

/// A live session's scratch disk use (the operator's `sessions[]` in the volume sync).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct EphemeralDisk {
    pub used_bytes: i64,
    /// 0: no limit reported.
    pub limit_bytes: i64,
    /// `used_bytes` as a share of the limit (null without one).
    pub used_pct: Option<i64>,
    /// At or past 90 % of the limit: past it the kubelet evicts the pod and its scratch files.
    pub near_limit: bool,
}

impl EphemeralDisk {
    pub fn new(used_bytes: i64, limit_bytes: i64) -> Self {
        let used_pct = (limit_bytes > 0).then(|| (i128::from(used_bytes) * 100 / i128::from(limit_bytes)) as i64);
        Self { used_bytes, limit_bytes, used_pct, near_limit: used_pct.is_some_and(|p| p >= EPHEMERAL_WARN_PCT) }
    }
}

impl From<&SessionRecord> for SessionView {
    fn from(s: &SessionRecord) -> Self {
        Self {
            id: s.id.clone(),
            cr_name: s.cr_name(),
            name: s.name.clone(),
            cluster_id: s.cluster_id.clone(),
            cluster_name: s.cluster_name.clone(),
            offering_id: s.offering_id.clone(),
            offering_name: s.offering_name.clone(),
            owner: s.owner.clone(),
            owner_account: None,
            shape: s.shape.clone(),
            phase: s.phase,
            reason: s.reason,
            message: s.message.clone(),
            bound_gpu_uuid: s.bound_gpu_uuid.clone(),
            node_name: s.node_name.clone(),
            created_at: rfc3339_ms(s.created_at),
            started_at: s.started_at.map(rfc3339_ms),
            phase_changed_at: rfc3339_ms(s.phase_changed_at.unwrap_or(s.created_at)),
            ended_at: s.ended_at.map(rfc3339_ms),
            last_report_at: s.last_report_at.map(rfc3339_ms),
            live: s.is_live(),
            actions: s.actions(),
            volumes: s.volumes.clone(),
            ephemeral_disk: None,
            queue_position: None,
            queued_at: s.queue.as_ref().map(|q| rfc3339_ms(q.queued_at)),
            queued_reason: s.queue.as_ref().filter(|_| s.is_queued()).map(|q| q.reason.clone()),
        }
    }
}

/// `GET /api/v1/sessions`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionPage {
    pub data: Vec<SessionView>,
    /// `page` is 0 when the page was asked with `after` (its position is not counted).
    pub pagination: crate::clusters::model::Pagination,
    /// Pass as `after` for the next page (the last id of this one); null on the last page.
    /// Paging by `after` costs the same at any depth, and new sessions never shift it.
    pub next: Option<String>,
}

/// A one-time connection token, stored by its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectTokenRecord {
    pub session_id: String,
    pub owner: String,
    pub expires_at: i64,
    /// When it was first redeemed. It stays good for that client until the cookie it gave comes
    /// back once (proof the browser holds it) or `connect::REDEEM_GRACE_MS` passes: an ingress adds
    /// the cookie only to a 2xx/3xx answer, and a session's app often answers 502 at first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redeemed_at: Option<i64>,
    /// Digest of the client that redeemed it first (its address as the ingress saw it, and its
    /// User-Agent): no other client redeems it after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// `POST /api/v1/sessions/{id}/connect`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Connection {
    pub kind: String,
    /// Opens the app; the token in it works once, for 300 s.
    pub url: String,
    /// `cnx_<ULID>.<secret>`.
    pub token: String,
    pub expires_at: String,
}

/// Writes a session row and keeps its cluster's `running_sessions`, the live index and the list
/// indexes exact in the same transaction (for the session state machine: every phase change goes
/// through here).
pub fn put_session(txn: &crate::store::WriteTxn, session: &SessionRecord) -> Result<(), crate::store::StoreError> {
    let old = SESSIONS.get_in_write(txn, &session.id)?;
    let was_running = old.as_ref().is_some_and(|s| s.phase == Phase::Running);
    let is_running = session.phase == Phase::Running;
    if was_running != is_running && CLUSTERS.get_in_write(txn, &session.cluster_id)?.is_some() {
        crate::inventory::cluster_part::running_changed(txn, &session.cluster_id, is_running)?;
    }
    if session.is_live() {
        LIVE_SESSIONS.put(txn, &session.id, &session.cluster_id)?;
    } else {
        LIVE_SESSIONS.delete(txn, &session.id)?;
    }
    index_for_lists(txn, old.as_ref(), session)?;
    let (was_queued, now_queued) = (old.as_ref().and_then(queue_key), queue_key(session));
    if was_queued != now_queued {
        if let Some(k) = was_queued {
            SESSION_QUEUE.delete(txn, &k)?;
            // Those behind it move up: their owners' live events say so.
            let prefix = format!("{}/", session.cluster_id);
            for (_, owner) in SESSION_QUEUE.list_prefix_in_write(txn, &prefix)? {
                txn.note_key(&owner_sessions_key(&owner));
            }
        }
        if let Some(k) = now_queued {
            SESSION_QUEUE.put(txn, &k, &session.owner)?;
        }
    }
    // Fair sharing: the owner's use moves only when the session starts or stops counting.
    let was = old.as_ref().filter(|o| o.is_live()).map(|o| (o.owner.as_str(), charge_of(&o.shape)));
    let now = session.is_live().then(|| (session.owner.as_str(), charge_of(&session.shape)));
    if was != now {
        crate::policy::model::charge_moved(txn, was, now)?;
    }
    // The usage ledger: a run opens when the session starts running and closes when it stops.
    if was_running != is_running {
        let at = session.phase_changed_at.or(session.started_at).unwrap_or(session.created_at);
        let holding = match is_running {
            // What the session holds: its shape's memory, or what its open allocation booked when
            // that is more (a whole card; the booking commits with this phase change).
            true => Some(crate::policy::usage::Holding {
                gpu: session.shape.resource_class == ResourceClass::Gpu,
                gpu_mem_mb: session.shape.gpu_mem_mb.unwrap_or(0).max(booked_mem_mb(txn, &session.id)?),
                cpu: session.shape.cpu,
            }),
            false => None,
        };
        crate::policy::usage::running_changed(txn, &session.id, &session.owner, holding, at)?;
    }
    // The owner's live events (a member hears of their own sessions only).
    txn.note_key(&owner_sessions_key(&session.owner));
    if let Some(was) = old.as_ref().filter(|o| o.owner != session.owner) {
        txn.note_key(&owner_sessions_key(&was.owner));
    }
    SESSIONS.put(txn, &session.id, session)
}

/// GPU MiB the session's open allocations booked (a whole card books all of it).
fn booked_mem_mb(txn: &crate::store::WriteTxn, session_id: &str) -> Result<i64, crate::store::StoreError> {
    use crate::inventory::gpu_booking::{ALLOCATIONS, allocation_prefix};
    let open = ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(session_id))?;
    let mb: u64 = open.iter().filter(|(_, a)| a.is_open()).map(|(_, a)| a.gpu_mem_mb).sum();
    Ok(i64::try_from(mb).unwrap_or(i64::MAX))
}

/// What a live session holds against its owner's resource policy.
pub fn charge_of(shape: &Shape) -> crate::policy::model::Charge {
    crate::policy::model::Charge {
        cpu: shape.cpu,
        mem_gb: shape.mem_gb,
        gpu_mem_mb: shape.gpu_mem_mb.unwrap_or(0),
        gpu_cores: shape.gpu_cores.unwrap_or(0),
        storage_gb: shape.disk_gb,
    }
}

/// Schema 8: the usage ledger opens a run for each session running at the upgrade (since its
/// last phase change), so its GPU time counts from there like a run begun afterwards.
pub const OPEN_USAGE_RUNS: Migration = Migration {
    to: 8,
    what: "usage ledger runs opened for the running sessions",
    run: |txn| {
        for (id, _) in LIVE_SESSIONS.list_in_write(txn)? {
            let Some(s) = SESSIONS.get_in_write(txn, &id)?.filter(|s| s.phase == Phase::Running) else { continue };
            let at = s.phase_changed_at.or(s.started_at).unwrap_or(s.created_at);
            let holding = crate::policy::usage::Holding {
                gpu: s.shape.resource_class == ResourceClass::Gpu,
                gpu_mem_mb: s.shape.gpu_mem_mb.unwrap_or(0),
                cpu: s.shape.cpu,
            };
            crate::policy::usage::running_changed(txn, &s.id, &s.owner, Some(holding), at)?;
        }
        Ok(())
    },
};

/// Schema 7: each owner's use (fair sharing) counted from the live sessions.
pub const COUNT_OWNER_USAGE: Migration = Migration {
    to: 7,
    what: "each owner's live sessions counted for the resource policies",
    run: |txn| {
        let mut live = Vec::new();
        for (id, _) in LIVE_SESSIONS.list_in_write(txn)? {
            if let Some(s) = SESSIONS.get_in_write(txn, &id)?.filter(SessionRecord::is_live) {
                live.push((s.owner.clone(), charge_of(&s.shape)));
            }
        }
        crate::policy::model::recount_usage(txn, live.iter().map(|(o, c)| (o.as_str(), *c))).map(drop)
    },
};

/// The name a commit that writes one of `owner`'s sessions is noted under besides its tables
/// ([`crate::store::WriteTxn::note_key`]): `Store::table_generation(&[&owner_sessions_key(o)])`
/// is the generation of the last commit that changed `o`'s sessions, a map lookup whatever the
/// number of sessions (`GET /api/v1/events` for a member).
pub fn owner_sessions_key(owner: &str) -> String {
    format!("{}@{owner}", SESSIONS.name())
}

/// The session a CR name (or a session id) stands for: exactly, or as `lower(replace(id,'_','-'))`.
pub fn find_session(
    txn: &crate::store::WriteTxn,
    name: &str,
) -> Result<Option<SessionRecord>, crate::store::StoreError> {
    if let Some(s) = SESSIONS.get_in_write(txn, name)? {
        return Ok(Some(s));
    }
    find_by_cr_name(
        name,
        |id| SESSIONS.get_in_write(txn, id),
        || Ok(LIVE_SESSIONS.list_in_write(txn)?.into_iter().map(|(id, _)| id).collect()),
    )
}

/// Recomputes a cluster's counters (nodes, GPUs, VRAM, running sessions) from its rows (tests compare it with the running counts).
pub fn recount(
    txn: &redb::ReadTransaction,
    cluster_id: &str,
) -> Result<(u64, u64, u64, u64), crate::store::StoreError> {
    let prefix = format!("{cluster_id}/");
    let nodes = NODES.list_prefix(txn, &prefix)?.len() as u64;
    let gpus = GPUS.list_prefix(txn, &prefix)?;
    let running =
        SESSIONS.list(txn)?.iter().filter(|(_, s)| s.cluster_id == cluster_id && s.phase == Phase::Running).count()
            as u64;
    Ok((nodes, gpus.len() as u64, gpus.iter().map(|(_, g)| g.total_mem_mb).sum(), running))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn action_wire_strings_are_pinned() {
        let pinned = [
            (Action::Pause, "pause"),
            (Action::Resume, "resume"),
            (Action::Connect, "connect"),
            (Action::Delete, "delete"),
        ];
        for (action, wire) in pinned {
            assert_eq!(action.as_str(), wire);
            assert_eq!(serde_json::to_value(action).unwrap(), wire);
            assert_eq!(serde_json::from_value::<Action>(wire.into()).unwrap(), action);
        }
        let schema = serde_json::to_value(<Action as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(schema["enum"].as_array().unwrap().len(), pinned.len(), "every variant pinned");
        let mut s = SessionRecord::new("ses_A", "clu_1", "c", "u", 0);
        s.phase = Phase::Running;
        assert_eq!(
            serde_json::to_value(SessionView::from(&s)).unwrap()["actions"],
            serde_json::json!(["pause", "connect", "delete"])
        );
    }

    #[tokio::test]
    async fn schema_1_files_get_the_live_session_index() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        {
            // A schema-1 file (the steps up to 1 only): sessions written without the index.
            let store = Store::open(&path, &crate::MIGRATIONS[..1]).unwrap();
            assert_eq!(store.schema_version().unwrap(), 1);
            store
                .write(|txn| {
                    SESSIONS.put(txn, "ses_A", &SessionRecord::new("ses_A", "clu_1", "c", "u", 0))?;
                    let done =
                        SessionRecord { phase: Phase::Terminated, ..SessionRecord::new("ses_B", "clu_1", "c", "u", 0) };
                    SESSIONS.put(txn, "ses_B", &done)
                })
                .await
                .unwrap();
        }
        let store = Store::open(&path, crate::MIGRATIONS).unwrap();
        assert_eq!(store.schema_version().unwrap(), crate::store::schema_of(crate::MIGRATIONS));
        let live: Vec<(String, String)> = store.read(|txn| LIVE_SESSIONS.list(txn)).await.unwrap();
        assert_eq!(live, [("ses_A".to_string(), "clu_1".to_string())]);
    }

    #[tokio::test]
    async fn schema_2_files_get_the_list_indexes_and_writes_keep_them() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        let before: Vec<_> = crate::MIGRATIONS.iter().copied().filter(|m| m.to <= 2).collect();
        {
            // A schema-2 file: sessions and the live index, no list indexes.
            let store = Store::open(&path, &before).unwrap();
            store
                .write(|txn| {
                    for (id, owner, phase) in [
                        ("ses_A", "u1", Phase::Running),
                        ("ses_B", "u1", Phase::Terminated),
                        ("ses_C", "u2", Phase::Error),
                    ] {
                        let s = SessionRecord { phase, ..SessionRecord::new(id, "clu_1", "c", owner, 0) };
                        SESSIONS.put(txn, id, &s)?;
                    }
                    rebuild_live_index(txn).map(drop)
                })
                .await
                .unwrap();
            assert!(store.read(|txn| SESSIONS_BY_OWNER.keys(txn)).await.unwrap().is_empty());
        }
        let store = Store::open(&path, crate::MIGRATIONS).unwrap();
        assert_eq!(store.schema_version().unwrap(), crate::store::schema_of(crate::MIGRATIONS));
        let (owners, clusters, phases) = store
            .read(|txn| {
                Ok((SESSIONS_BY_OWNER.keys(txn)?, SESSIONS_BY_CLUSTER.keys(txn)?, SESSIONS_BY_PHASE.keys(txn)?))
            })
            .await
            .unwrap();
        assert_eq!(owners, ["u1\0ses_A", "u1\0ses_B", "u2\0ses_C"]);
        assert_eq!(clusters, ["clu_1\0ses_A", "clu_1\0ses_B", "clu_1\0ses_C"]);
        assert_eq!(phases, ["error\0ses_C", "running\0ses_A", "terminated\0ses_B"]);
        let counts = |store: Store| async move {
            store
                .read(|txn| {
                    Ok([
                        ListIndex::Owner.count(txn, "u1")?,
                        ListIndex::Cluster.count(txn, "clu_1")?,
                        ListIndex::Phase.count(txn, "running")?,
                        ListIndex::Phase.count(txn, "terminated")?,
                    ])
                })
                .await
                .unwrap()
        };
        assert_eq!(counts(store.clone()).await, [2, 3, 1, 1]);
        // A phase change moves the phase key and its counts; the other indexes stay.
        store
            .write(|txn| {
                let mut s = SESSIONS.get_in_write(txn, "ses_A")?.unwrap();
                s.set_phase(Phase::Terminated, 1);
                put_session(txn, &s)
            })
            .await
            .unwrap();
        assert_eq!(counts(store.clone()).await, [2, 3, 0, 2]);
        let phases = store.read(|txn| SESSIONS_BY_PHASE.keys(txn)).await.unwrap();
        assert_eq!(phases, ["error\0ses_C", "terminated\0ses_A", "terminated\0ses_B"]);
        // A count that reaches 0 leaves no row; a rebuild gives what the writes kept.
        assert!(store.read(|txn| SESSION_COUNTS.get(txn, "phase\0running")).await.unwrap().is_none());
        let kept = store.read(|txn| SESSION_COUNTS.list(txn)).await.unwrap();
        store.write(|txn| rebuild_list_indexes(txn).map(drop)).await.unwrap();
        let rebuilt = store.read(|txn| SESSION_COUNTS.list(txn)).await.unwrap();
        assert_eq!(kept, rebuilt);
    }

    /// An owner's use follows their sessions' liveness in the same transaction, and a recount
    /// (the schema step) gives what the writes kept.
    #[tokio::test]
    async fn owner_usage_follows_liveness_and_a_recount_agrees() {
        use crate::policy::model::{USAGE, Usage};
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), crate::MIGRATIONS).unwrap();
        let shape = Shape { gpu_mem_mb: Some(1024), gpu_cores: Some(10), ..Shape::default() };
        store
            .write(move |txn| {
                for id in ["ses_A", "ses_B"] {
                    put_session(
                        txn,
                        &SessionRecord { shape: shape.clone(), ..SessionRecord::new(id, "clu_1", "c", "u1", 0) },
                    )?;
                }
                // A report that changes nothing of the charge writes no usage.
                let mut a = SESSIONS.get_in_write(txn, "ses_A")?.unwrap();
                a.set_phase(Phase::Running, 1);
                put_session(txn, &a)
            })
            .await
            .unwrap();
        let u = store.read(|txn| USAGE.get(txn, "u1")).await.unwrap().unwrap();
        assert_eq!(u, Usage { active: 2, cpu: 2, mem_gb: 8, gpu_mem_mb: 2048, gpu_cores: 20, storage_gb: 20 });
        store
            .write(|txn| {
                let mut b = SESSIONS.get_in_write(txn, "ses_B")?.unwrap();
                b.set_phase(Phase::Terminated, 2);
                put_session(txn, &b)?;
                let mut a = SESSIONS.get_in_write(txn, "ses_A")?.unwrap();
                a.owner = "u2".into();
                put_session(txn, &a)
            })
            .await
            .unwrap();
        let (u1, u2) = store.read(|txn| Ok((USAGE.get(txn, "u1")?, USAGE.get(txn, "u2")?))).await.unwrap();
        assert_eq!(u1, None, "no live session: no row");
        assert_eq!(u2.unwrap().active, 1);
        let kept = store.read(|txn| USAGE.list(txn)).await.unwrap();
        store.write(|txn| (COUNT_OWNER_USAGE.run)(txn)).await.unwrap();
        assert_eq!(store.read(|txn| USAGE.list(txn)).await.unwrap(), kept);
    }
}
