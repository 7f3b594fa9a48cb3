//! Emptying a node and keeping sessions honest about the pods under them.
//!
//! **Drain** (`POST /api/v1/clusters/{id}/nodes/{node}/drain`, upstream's modes): the node is
//! cordoned first, in the same transaction that checks its operator is there (a drain while the
//! operator is silent does nothing: nobody would carry out the pauses). Then each session on the
//! node is either paused and resumed elsewhere when the fit check finds room (`reschedule`; the
//! resume's `excludedNodes` carries the cordoned node, so the pod cannot land back; no room:
//! parked, paused) or ended (`force_terminate`). The answer reports each session. As upstream
//! (`_wait_pause_ack`, `DRAIN_PAUSE_ACK_SEC`), a rescheduled session is resumed only once the
//! operator has reported it Paused, or after [`PAUSE_ACK_WAIT`] without that report: the operator
//! marks the drained node unschedulable only on its next node pass (up to 15 s), and a resume
//! that overtook the pause would leave the pod where it is until then.
//!
//! **Liveness** (a timer task, never a callback): a running session on a node gone offline ends
//! `node_offline`; one whose pod has not reported for `session_stale_after` ends `pod_lost`. Both
//! only while the cluster's operator is heard from: with the operator down every session goes
//! quiet at once, and ending them all would turn an outage into lost work.

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::model::*;
use super::{SessionError, Sessions, conflict, status};
use crate::audit::AuditEntry;
use crate::clusters::model::CLUSTERS;
use crate::http::error::ErrorCode;
use crate::inventory::apply::NodeAction;
use crate::inventory::model::{GPUS, NODES};
use crate::notifications::{self, Kind};
use crate::store::StoreError;
use futures::StreamExt;

/// How many of a drained node's sessions are paused (and waited for) at once.
const DRAIN_CONCURRENCY: usize = 16;

/// How long a drain waits for the operator to report a paused session Paused before it resumes
/// it anyway (upstream's `DRAIN_PAUSE_ACK_SEC`).
pub const PAUSE_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// The pause acknowledgements drains wait for: a drain expects one for a session before it
/// pauses it; the session's next Paused report (`Sessions::session_status`) delivers it.
#[derive(Debug, Default)]
pub struct PauseAcks {
    waiting: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Notify>>>,
    /// How long to wait (default [`PAUSE_ACK_WAIT`]), in ms; 0 until set.
    wait_ms: std::sync::atomic::AtomicU64,
}

impl PauseAcks {
    fn expect(&self, id: &str) -> std::sync::Arc<tokio::sync::Notify> {
        crate::locks::lock(&self.waiting).entry(id.to_string()).or_default().clone()
    }

    fn done(&self, id: &str) {
        crate::locks::lock(&self.waiting).remove(id);
    }

    /// Session `id` was reported Paused: a drain waiting for that goes on (one arriving before
    /// the drain waits is kept for it).
    pub(crate) fn acked(&self, id: &str) {
        if let Some(n) = crate::locks::lock(&self.waiting).get(id) {
            n.notify_one();
        }
    }

    fn wait(&self) -> std::time::Duration {
        match self.wait_ms.load(std::sync::atomic::Ordering::Relaxed) {
            0 => PAUSE_ACK_WAIT,
            ms => std::time::Duration::from_millis(ms),
        }
    }
}

impl Sessions {
    /// Sets how long a drain waits for each pause to be acknowledged (tests; at least 1 ms).
    pub fn set_pause_ack_wait(&self, wait: std::time::Duration) {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        self.pause_acks.wait_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How a drain treats the node's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainMode {
    /// Pause each session and resume it on another node when one can hold it; else park it paused.
    Reschedule,
    /// End each session.
    ForceTerminate,
}

impl DrainMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reschedule => "reschedule",
            Self::ForceTerminate => "force_terminate",
        }
    }
}

fn default_mode() -> DrainMode {
    DrainMode::Reschedule
}

/// `POST /api/v1/clusters/{id}/nodes/{node}/drain` (upstream's body).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// `reschedule` (default) or `force_terminate`.
    #[serde(default = "default_mode")]
    pub mode: DrainMode,
    /// Why (kept in the audit log; up to 500 characters).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// What a drain did to one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainOutcome {
    /// Paused and resumed; its pod is placed away from the drained node.
    Rescheduled,
    /// Paused; no other node can hold it now (resume it later).
    Parked,
    /// Ended.
    Terminated,
    /// The cluster refused or could not be reached; the session is as it was (see `message`).
    Failed,
}

/// One session of a drain.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrainedSession {
    pub session_id: String,
    pub owner: String,
    pub outcome: DrainOutcome,
    pub message: String,
}

/// The answer: upstream's fields (`affected_sessions`, `rescheduled`, `parked`, `terminated`,
/// `failed` as session ids) and each session's outcome with its reason.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DrainReport {
    pub cluster_id: String,
    pub node_id: String,
    /// Always `cordoned`: the node stays cordoned after a drain.
    pub status: String,
    pub drain_id: String,
    pub mode: DrainMode,
    pub affected_sessions: Vec<String>,
    pub rescheduled: Vec<String>,
    pub parked: Vec<String>,
    pub terminated: Vec<String>,
    pub failed: Vec<String>,
    pub sessions: Vec<DrainedSession>,
}

/// What one liveness sweep ended (session ids).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LivenessSweep {
    pub node_offline: Vec<String>,
    pub pod_lost: Vec<String>,
    /// Stale, on clusters whose operator is silent: left alone.
    pub left: Vec<String>,
}

/// The sessions a drain acts on: live, not paused, and on the node by its report or by an open
/// allocation on one of its cards.
fn on_node(txn: &crate::store::WriteTxn, cluster_id: &str, node: &str) -> Result<Vec<SessionRecord>, StoreError> {
    let cards: std::collections::HashSet<String> = GPUS
        .list_prefix_in_write(txn, &format!("{cluster_id}/"))?
        .into_iter()
        .filter(|(_, g)| g.node == node)
        .map(|(_, g)| g.uuid)
        .collect();
    let holding: std::collections::HashSet<String> = crate::inventory::gpu_booking::open_on_cluster(txn, cluster_id)?
        .into_iter()
        .filter(|a| a.gpu_uuid.as_ref().is_some_and(|u| cards.contains(u)))
        .map(|a| a.session_id)
        .collect();
    let mut out = Vec::new();
    for (id, _) in LIVE_SESSIONS.list_in_write(txn)? {
        let Some(s) = SESSIONS.get_in_write(txn, &id)? else { continue };
        if s.cluster_id != cluster_id || !s.is_live() || s.paused {
            continue;
        }
        let here = s.node_name.as_deref() == Some(node) || holding.contains(&s.id);
        if here && matches!(s.phase, Phase::Pending | Phase::Preparing | Phase::Running) {
            out.push(s);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Whether a session is due for the liveness sweep: `Some((node_gone, heard))` when its node has
/// been offline for `node_ms` or its pod has not reported for `stale_ms` (`heard`: the pod's last
/// word, ms). Only running and preparing sessions not paused are judged.
fn judge(
    s: &SessionRecord,
    node: Option<&crate::inventory::model::NodeRecord>,
    now: i64,
    stale_ms: i64,
    node_ms: i64,
) -> Option<(bool, i64)> {
    if s.paused || !matches!(s.phase, Phase::Running | Phase::Preparing) {
        return None;
    }
    let node_gone =
        node.is_some_and(|r| r.offline && r.not_ready_since.or(r.last_seen).is_none_or(|t| now - t >= node_ms));
    // The pod's last word: its last report, or the (re)start of this run, whichever is later (a
    // resume after a long pause starts a new count). A preparing session is judged only once its
    // pod has reported (an image pull may take long).
    let heard = match s.phase {
        Phase::Running => [s.last_report_at, s.resumed_at, s.started_at].into_iter().flatten().max(),
        _ => s.last_report_at.map(|r| r.max(s.resumed_at.unwrap_or(0))),
    };
    let pod_lost = heard.is_some_and(|h| now - h >= stale_ms);
    (node_gone || pod_lost).then_some((node_gone, heard.unwrap_or(now)))
}

impl Sessions {
    /// Drains `node` of `cluster_id` (see the module doc). `cordon_entry` is the audit entry of
    /// the cordon, written in its transaction (when the node was not cordoned yet); the caller
    /// audits the drain with the report.
    pub async fn drain(
        &self,
        cluster_id: &str,
        node: &str,
        req: DrainRequest,
        cordon_entry: AuditEntry,
    ) -> Result<DrainReport, SessionError> {
        let (cid, name, now) = (cluster_id.to_string(), node.to_string(), self.clock.now_ms());
        let gate = self.operator_gate.clone();
        let clock = self.clock.clone();
        let affected = self
            .store
            .write_with(move |txn| {
                let cluster = CLUSTERS
                    .get_in_write(txn, &cid)?
                    .filter(|c| c.is_live())
                    .ok_or_else(|| SessionError::NotFound(format!("no cluster {cid}")))?;
                if NODES.get_in_write(txn, &format!("{cid}/{name}"))?.is_none() {
                    return Err(SessionError::NotFound(format!("cluster {cid} has no node {name}")));
                }
                if let Some(n) = (gate.0)(txn, &cluster, now)? {
                    let sessions: Vec<String> = on_node(txn, &cid, &name)?.into_iter().map(|s| s.id).collect();
                    return Err(conflict(
                        ErrorCode::OperatorNotConnected,
                        format!(
                            "the operator of cluster {} is {}: nothing was cordoned, paused or ended ({} session(s) on \
                             node {name} left as they are); {}",
                            cluster.name,
                            n.state.replace('_', " "),
                            sessions.len(),
                            n.message
                        ),
                        json!({ "cluster_id": cid, "node": name, "operator_state": n.state, "sessions": sessions }),
                    ));
                }
                let cordoned =
                    crate::inventory::apply::node_action(txn, &cid, &name, NodeAction::Cordon, cordon_entry, &clock)?
                        .into_inner();
                if let Err(r) = cordoned {
                    return Err(match r {
                        crate::callbacks::wire::Refusal::Conflict { code, message, details } => {
                            conflict(code, message, details)
                        }
                        other => SessionError::NotFound(format!("{other:?}")),
                    });
                }
                Ok(on_node(txn, &cid, &name)?)
            })
            .await?;
        let mut report = DrainReport {
            cluster_id: cluster_id.to_string(),
            node_id: node.to_string(),
            status: "cordoned".into(),
            drain_id: format!("drain_{}", ulid::Ulid::new()),
            mode: req.mode,
            affected_sessions: affected.iter().map(|s| s.id.clone()).collect(),
            rescheduled: Vec::new(),
            parked: Vec::new(),
            terminated: Vec::new(),
            failed: Vec::new(),
            sessions: Vec::new(),
        };
        // The node's sessions side by side (each may wait up to the pause-acknowledgement time),
        // reported in order.
        let mode = req.mode;
        let outcomes: Vec<_> = futures::stream::iter(affected)
            .map(|s| async move {
                let (outcome, message) = match mode {
                    DrainMode::ForceTerminate => self.drain_end(&s, node).await,
                    DrainMode::Reschedule => self.drain_move(&s, node).await,
                };
                (s, outcome, message)
            })
            .buffered(DRAIN_CONCURRENCY)
            .collect()
            .await;
        for (s, outcome, message) in outcomes {
            match outcome {
                DrainOutcome::Rescheduled => report.rescheduled.push(s.id.clone()),
                DrainOutcome::Parked => report.parked.push(s.id.clone()),
                DrainOutcome::Terminated => report.terminated.push(s.id.clone()),
                DrainOutcome::Failed => report.failed.push(s.id.clone()),
            }
            report.sessions.push(DrainedSession { session_id: s.id, owner: s.owner, outcome, message });
        }
        Ok(report)
    }

    /// `force_terminate`: the CR is deleted and the session ends `drained`.
    async fn drain_end(&self, s: &SessionRecord, node: &str) -> (DrainOutcome, String) {
        let client = match self.cr_client(&s.cluster_id) {
            Ok(c) => c,
            Err(e) => return (DrainOutcome::Failed, format!("cannot reach the cluster: {e}")),
        };
        let name = s.cr_name();
        if let Err(e) = client.delete(&name).await {
            return (DrainOutcome::Failed, format!("the cluster did not delete the session: {e}"));
        }
        let gone = client.exists(&name).await.map(|e| !e).unwrap_or(false);
        let node = node.to_string();
        let done = self
            .update_with(&s.id, move |txn, s, now| {
                if !s.is_live() {
                    return Ok(());
                }
                s.reason = Some(status::Reason::Drained);
                s.message = Some(format!("ended by a drain of node {node}"));
                if gone {
                    s.cr_applied = false;
                    s.set_phase(Phase::Terminated, now);
                } else {
                    s.set_phase(Phase::Terminating, now);
                }
                let text = format!("{} was ended: an administrator drained its node {node}", s.label());
                notifications::push(txn, now, &s.owner, Kind::Drained, Some(&s.id), &text).map(drop)
            })
            .await;
        match done {
            Ok(_) => (DrainOutcome::Terminated, "ended".into()),
            Err(e) => (DrainOutcome::Failed, e.to_string()),
        }
    }

    /// `reschedule`: paused (cold: the card is given back), then resumed when the fit check finds
    /// room away from the cordoned node; otherwise left paused (parked).
    async fn drain_move(&self, s: &SessionRecord, node: &str) -> (DrainOutcome, String) {
        let client = match self.cr_client(&s.cluster_id) {
            Ok(c) => c,
            Err(e) => return (DrainOutcome::Failed, format!("cannot reach the cluster: {e}")),
        };
        // Expected before the pause: an acknowledgement that beats the wait below is kept.
        let ack = self.pause_acks.expect(&s.id);
        let generation = match client.pause(&s.cr_name()).await {
            Ok(g) => g,
            Err(e) => {
                self.pause_acks.done(&s.id);
                return (DrainOutcome::Failed, format!("the cluster did not pause the session: {e}"));
            }
        };
        let node_s = node.to_string();
        let paused = self
            .update(&s.id, move |s, now| {
                if s.phase.is_final() {
                    return;
                }
                s.paused = true;
                s.generation = generation.or(s.generation);
                s.reason = Some(status::Reason::Drained);
                s.message = Some(format!("paused by a drain of node {node_s}"));
                s.bound_gpu_uuid = None;
                s.node_name = None;
                s.set_phase(Phase::Paused, now);
            })
            .await;
        if let Err(e) = paused {
            self.pause_acks.done(&s.id);
            return (DrainOutcome::Failed, e.to_string());
        }
        // Upstream's `_wait_pause_ack`: the old pod goes before the session is resumed.
        let wait = self.pause_acks.wait();
        let acked = tokio::time::timeout(wait, ack.notified()).await.is_ok();
        self.pause_acks.done(&s.id);
        let confirmed = if acked {
            "the operator confirmed the pause".to_string()
        } else {
            format!("the operator did not confirm the pause within {} ms", wait.as_millis())
        };
        let (outcome, message, text) = match self.resume(&s.id).await {
            Ok(_) => (
                DrainOutcome::Rescheduled,
                format!("resumed away from node {node} ({confirmed})"),
                format!(
                    "{} was moved: an administrator drained its node {node}, and it was restarted on another node",
                    s.label()
                ),
            ),
            Err(e) => (
                DrainOutcome::Parked,
                format!("paused; not resumed: {e}"),
                format!(
                    "{} was paused: an administrator drained its node {node} and no other node can hold it now; resume it later",
                    s.label()
                ),
            ),
        };
        let note = message.clone();
        let told = self
            .update_with(&s.id, move |txn, s, now| {
                if outcome == DrainOutcome::Parked && s.phase == Phase::Paused {
                    s.message = Some(format!("drained from node: {note}"));
                }
                notifications::push(txn, now, &s.owner, Kind::Drained, Some(&s.id), &text).map(drop)
            })
            .await;
        if let Err(e) = told {
            tracing::warn!(session = %s.id, error = %e, "cannot record a drained session's notification");
        }
        (outcome, message)
    }

    /// Ends running sessions whose node went offline (`node_offline`) or whose pod stopped
    /// reporting for `session_stale_after` (`pod_lost`), on clusters whose operator is heard from.
    /// Run by a timer task; held heartbeats are written first so none counts as missing.
    pub async fn enforce_liveness(&self) -> Result<LivenessSweep, SessionError> {
        self.flush_heartbeats().await?;
        let now = self.clock.now_ms();
        let stale_ms = self.config.session_stale_after.as_millis() as i64;
        let node_ms = self.config.node_stale_after.as_millis() as i64;
        let gate = self.operator_gate.clone();
        // A read pass first: a sweep that finds nothing due takes no write transaction.
        let due: Vec<String> = self
            .store
            .read(move |txn| {
                let mut due = Vec::new();
                for (id, _) in LIVE_SESSIONS.list(txn)? {
                    let Some(s) = SESSIONS.get(txn, &id)? else { continue };
                    let node = match s.node_name.as_deref() {
                        Some(n) => NODES.get(txn, &format!("{}/{n}", s.cluster_id))?,
                        None => None,
                    };
                    if judge(&s, node.as_ref(), now, stale_ms, node_ms).is_some() {
                        due.push(id);
                    }
                }
                Ok(due)
            })
            .await?;
        if due.is_empty() {
            return Ok(LivenessSweep::default());
        }
        let swept = self
            .store
            .write_with(move |txn| {
                let mut sweep = LivenessSweep::default();
                let mut ended: Vec<(String, String)> = Vec::new();
                let mut alive: std::collections::HashMap<String, bool> = Default::default();
                for id in due {
                    let Some(mut s) = SESSIONS.get_in_write(txn, &id)? else { continue };
                    let node = match s.node_name.as_deref() {
                        Some(n) => NODES.get_in_write(txn, &format!("{}/{n}", s.cluster_id))?,
                        None => None,
                    };
                    let Some((node_gone, heard)) = judge(&s, node.as_ref(), now, stale_ms, node_ms) else { continue };
                    let operator_alive = match alive.get(&s.cluster_id) {
                        Some(a) => *a,
                        None => {
                            let a = match CLUSTERS.get_in_write(txn, &s.cluster_id)? {
                                Some(c) => (gate.0)(txn, &c, now)?.is_none(),
                                None => false,
                            };
                            alive.insert(s.cluster_id.clone(), a);
                            a
                        }
                    };
                    if !operator_alive {
                        sweep.left.push(s.id.clone());
                        continue;
                    }
                    let node = s.node_name.clone().unwrap_or_default();
                    let (reason, kind, message, text) = if node_gone {
                        (
                            status::Reason::NodeOffline,
                            Kind::NodeLost,
                            format!("node {node} went offline"),
                            format!("{} ended: its node {node} went offline", s.label()),
                        )
                    } else {
                        (
                            status::Reason::PodLost,
                            Kind::PodLost,
                            format!("no report from its pod for {} s", (now - heard) / 1000),
                            format!("{} ended: its pod stopped reporting and is gone", s.label()),
                        )
                    };
                    s.reason = Some(reason);
                    s.message = Some(message);
                    status::release(txn, &s.id, now)?;
                    s.set_phase(Phase::Terminated, now);
                    put_session(txn, &s)?;
                    notifications::push(txn, now, &s.owner, kind, Some(&s.id), &text)?;
                    if node_gone {
                        sweep.node_offline.push(s.id.clone());
                    } else {
                        sweep.pod_lost.push(s.id.clone());
                    }
                    if s.cr_applied {
                        ended.push((s.id.clone(), s.cluster_id.clone()));
                    }
                }
                Ok::<_, SessionError>((sweep, ended))
            })
            .await?;
        let (sweep, ended) = swept;
        // The CRs go after the commit (best effort: the session is already over here; the
        // operator's finalizer cleans the pod's remains).
        for (id, _) in ended {
            let Ok(s) = self.get(&id).await else { continue };
            let result = async { self.cr_client(&s.cluster_id)?.delete(&s.cr_name()).await }.await;
            match result {
                Ok(()) => {
                    let _ = self.update(&id, |s, _| s.cr_applied = false).await;
                }
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "cannot delete the GShareSession of a lost session")
                }
            }
        }
        Ok(sweep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::model::NodeRecord;

    const MIN: i64 = 60_000;

    fn running(at: i64) -> SessionRecord {
        let mut s = SessionRecord::new("ses_1", "clu_local", "local", "ann", at);
        s.set_phase(Phase::Running, at);
        s.started_at = Some(at);
        s
    }

    fn node(offline: bool, since: i64) -> NodeRecord {
        NodeRecord {
            cluster_id: "clu_local".into(),
            name: "gpu-0".into(),
            ready: !offline,
            schedulable: true,
            cordoned: false,
            decommissioning: false,
            offline,
            role: None,
            cpu: None,
            mem_gb: None,
            disk_gb: None,
            lossless_capable: false,
            last_seen: Some(since),
            not_ready_since: offline.then_some(since),
            gpu_count: 0,
        }
    }

    #[test]
    fn a_session_is_judged_by_its_latest_word_and_its_nodes_lasting_absence() {
        let (stale, node_ms) = (5 * MIN, 2 * MIN);
        let t0 = 1_000 * MIN;
        // Running, last heard at t0: due at exactly five minutes, not a millisecond before.
        let mut s = running(t0);
        s.last_report_at = Some(t0);
        assert_eq!(judge(&s, None, t0 + stale - 1, stale, node_ms), None);
        assert_eq!(judge(&s, None, t0 + stale, stale, node_ms), Some((false, t0)));
        // A resume after a long pause starts a new count, whatever the old report says.
        s.resumed_at = Some(t0 + 60 * MIN);
        assert_eq!(judge(&s, None, t0 + 62 * MIN, stale, node_ms), None);
        // Paused, ended or pending: never judged.
        for phase in [Phase::Paused, Phase::Terminated, Phase::Pending] {
            let mut other = running(t0);
            other.set_phase(phase, t0);
            assert_eq!(judge(&other, None, t0 + 600 * MIN, stale, node_ms), None, "{phase:?}");
        }
        // Preparing with no report yet (an image pull): not judged; once its pod reported, judged.
        let mut p = running(t0);
        p.set_phase(Phase::Preparing, t0);
        p.started_at = None;
        assert_eq!(judge(&p, None, t0 + 600 * MIN, stale, node_ms), None);
        p.last_report_at = Some(t0);
        assert!(judge(&p, None, t0 + stale, stale, node_ms).is_some());
        // Its node: offline for node_stale_after, not a moment after it went NotReady.
        let s = running(t0);
        let now = t0 + MIN;
        assert_eq!(judge(&s, Some(&node(true, now - node_ms + 1)), now, stale, node_ms), None);
        assert_eq!(judge(&s, Some(&node(true, now - node_ms)), now, stale, node_ms), Some((true, t0)));
        assert_eq!(judge(&s, Some(&node(false, t0 - 100 * MIN)), now, stale, node_ms), None);
    }
}
