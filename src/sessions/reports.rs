//! The operator's reports about sessions (contract §2.1, §2.10): `POST /internal/sessions/{id}/status`
//! (routed, parsed and applied here: the last report is kept and the state machine in
//! [`super::status`] applies it), `POST /internal/metrics/session-samples` (the node agent's
//! usage samples, the latest per session kept) and `POST /internal/audit/operator` (the operator's
//! privileged actions on the token's own cluster's sessions, session pods and nodes, §2.2).

use std::sync::Arc;

use crate::store::WriteTxn;
use serde::{Deserialize, Serialize};

use super::Sessions;
use super::model::{find_session, put_session};
use crate::callbacks::wire::{
    AgentReport, AgentSample, OperatorAudit, Refusal, SamplesAccepted, StatusReport, is_dns_subdomain,
};
use crate::clusters::ClusterId;
use crate::inventory::apply::{live_cluster, outcome};
use crate::locks::lock;
use crate::store::{JsonTable, Outcome, StoreError};

/// `<session id>` -> the latest agent sample.
pub const SESSION_SAMPLES: JsonTable<SessionSampleRecord> = JsonTable::new("session_samples");
/// `<session id>` -> the latest status report of its operator.
pub const SESSION_REPORTS: JsonTable<StatusReport> = JsonTable::new("session_status_reports");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSampleRecord {
    pub session_id: String,
    pub node: String,
    pub at: f64,
    pub cpu_cores: f64,
    pub mem_bytes: i64,
}

/// What a status report did to a known session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusApplied {
    pub session_id: Option<String>,
    /// The session failed and its CR should be deleted (after the commit).
    pub delete_cr: bool,
    /// The report was stale (from before the last resume) and changed nothing.
    pub stale: bool,
}

/// `POST /internal/sessions/{id}/status`: the last report is kept, and the session state
/// machine (`sessions::status`) applies it.
pub fn record_status(
    txn: &WriteTxn,
    cluster_id: &str,
    name: &str,
    r: &StatusReport,
    now: i64,
) -> Result<Outcome<Result<StatusApplied, Refusal>>, StoreError> {
    let Some(mut session) = find_session(txn, name)? else {
        return Ok(Outcome::Unchanged(Ok(StatusApplied::default())));
    };
    // Scoping first (upstream's status_router): another cluster's session is refused even when
    // the token's own cluster is unregistered, whose reports are otherwise no-ops.
    if session.cluster_id != cluster_id {
        return Ok(Outcome::Unchanged(Err(Refusal::OtherCluster { cluster_id: session.cluster_id })));
    }
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(Ok(StatusApplied::default())));
    }
    let mut wrote = false;
    if SESSION_REPORTS.get_in_write(txn, &session.id)?.as_ref() != Some(r) {
        SESSION_REPORTS.put(txn, &session.id, r)?;
        wrote = true;
    }
    let applied = super::status::apply(txn, &mut session, r, now)?;
    if applied.wrote {
        put_session(txn, &session)?;
        wrote = true;
    }
    Ok(outcome(
        wrote,
        Ok(StatusApplied { session_id: Some(session.id), delete_cr: applied.delete_cr, stale: applied.stale }),
    ))
}

/// `POST /internal/metrics/session-samples`: keeps the latest sample per session of this
/// cluster; samples for unknown sessions (or another cluster's) are counted and dropped.
pub fn record_samples(
    txn: &WriteTxn,
    cluster_id: &str,
    r: &AgentReport,
) -> Result<Outcome<SamplesAccepted>, StoreError> {
    if r.samples.is_empty() {
        return Ok(Outcome::Unchanged(SamplesAccepted { accepted: 0, unknown: None }));
    }
    let live = live_cluster(txn, cluster_id)?.is_some();
    let mut latest: std::collections::BTreeMap<String, &AgentSample> = Default::default();
    let mut unknown = 0;
    let mut accepted = 0;
    let mut resolved: std::collections::HashMap<&str, Option<String>> = Default::default();
    for s in &r.samples {
        let id = match resolved.get(s.session.as_str()) {
            Some(id) => id.clone(),
            None => {
                let id = if live {
                    find_session(txn, &s.session)?.filter(|x| x.cluster_id == cluster_id && x.is_live()).map(|x| x.id)
                } else {
                    None
                };
                resolved.insert(&s.session, id.clone());
                id
            }
        };
        match id {
            Some(id) => {
                accepted += 1;
                let e = latest.entry(id).or_insert(s);
                if s.at >= e.at {
                    *e = s;
                }
            }
            None => unknown += 1,
        }
    }
    let wrote = !latest.is_empty();
    for (id, s) in latest {
        let rec = SessionSampleRecord {
            session_id: id.clone(),
            node: r.node.clone(),
            at: s.at,
            cpu_cores: s.cpu_cores,
            mem_bytes: s.mem_bytes,
        };
        SESSION_SAMPLES.put(txn, &id, &rec)?;
    }
    Ok(outcome(wrote, SamplesAccepted { accepted, unknown: Some(unknown) }))
}

impl Sessions {
    /// `POST /internal/audit/operator`: written to the audit log before the 202, when the target
    /// is an object of the token's own cluster (a session for `session.pause`, its pod for
    /// `pod.delete`, a node for `node.cordon`); anything else is refused and nothing is written.
    pub async fn operator_audit(
        &self,
        cluster: &ClusterId,
        ev: OperatorAudit,
        request_id: String,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let (id, clock) = (cluster.to_string(), self.clock.clone());
        let namespace = self.config.sessions_namespace.clone();
        self.store
            .write_batched(move |txn| {
                if live_cluster(txn, &id)?.is_none() {
                    return Ok::<_, StoreError>(Outcome::Unchanged(Ok(())));
                }
                if let Err(r) = audit_target_in_cluster(txn, &id, &namespace, &ev)? {
                    return Ok(Outcome::Unchanged(Err(r)));
                }
                let result = if ev.result.eq_ignore_ascii_case("ok") || ev.result.eq_ignore_ascii_case("success") {
                    crate::audit::AuditResult::Success
                } else {
                    crate::audit::AuditResult::Failure
                };
                let mut entry = crate::audit::AuditEntry::system(format!("operator:{id}"), &ev.action, result)
                    .target(ev.target.clone())
                    .details(serde_json::json!({
                        "cluster_id": id,
                        "actor": ev.actor,
                        "result": ev.result,
                        "detail": ev.detail,
                        "trace_id": ev.trace_id,
                        "ts": ev.ts,
                    }));
                entry.request_id = Some(request_id.clone()).filter(|r| !r.is_empty());
                crate::audit::record_in(txn, &clock, entry)?;
                Ok(Outcome::Wrote(Ok(())))
            })
            .await
    }

    /// A status report. A plain Heartbeat of a running session changes only its `last_report_at`
    /// and the kept last report: it is checked on a read transaction and held in memory until the
    /// next heartbeat flush ([`Self::flush_heartbeats`]); every other report is written at once,
    /// after the session's held heartbeat (same transaction, so the order of the operator's
    /// reports is what is stored).
    pub async fn session_status(
        &self,
        cluster: &ClusterId,
        name: String,
        r: StatusReport,
    ) -> Result<Result<StatusApplied, Refusal>, StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        // Shared with other reports, exclusive for a flush: a flush never replays a heartbeat
        // after a later report of the same session was written.
        let _no_flush = self.beats.order.read().await;
        if is_plain_heartbeat(&r) {
            let (cid, n) = (id.clone(), name.clone());
            let held = self.store.read(move |txn| heartbeat_only(txn, &cid, &n)).await?;
            if let Some(session_id) = held {
                self.beats.hold(HeldBeat { name, cluster_id: id, report: r, at: now });
                return Ok(Ok(StatusApplied { session_id: Some(session_id), ..Default::default() }));
            }
        }
        // A Paused report: a drain may be waiting for it (its pause acknowledged).
        let paused = super::status::ReportedPhase::parse(&r.phase) == super::status::ReportedPhase::Paused;
        let earlier = self.beats.take(&name);
        let replay = earlier.clone();
        let written = self
            .store
            .write_batched_in(cluster.as_str(), move |txn| {
                let before = match &replay {
                    Some(b) => matches!(record_status(txn, &b.cluster_id, &name, &b.report, b.at)?, Outcome::Wrote(_)),
                    None => false,
                };
                Ok(match record_status(txn, &id, &name, &r, now)? {
                    Outcome::Unchanged(v) if before => Outcome::Wrote(v),
                    o => o,
                })
            })
            .await;
        if written.is_err()
            && let Some(b) = earlier
        {
            self.beats.hold_back(b);
        }
        if paused && let Ok(Ok(StatusApplied { session_id: Some(id), .. })) = &written {
            self.pause_acks.acked(id);
        }
        written
    }

    /// Writes the heartbeats held in memory, in one batched write, through the same code as a
    /// report written at once (at the time each arrived). Returns how many were written. Runs
    /// every `liveness_flush_every` (5 s) and at the stop: a crash loses at most that much of
    /// the sessions' `last_report_at` (the liveness sweep, which judges a session by it, flushes first).
    pub async fn flush_heartbeats(&self) -> Result<usize, StoreError> {
        let _exclusive = self.beats.order.write().await;
        let held = self.beats.take_all();
        if held.is_empty() {
            return Ok(0);
        }
        let batch = Arc::new(held);
        let replay = batch.clone();
        let written = self
            .store
            .write_batched(move |txn| {
                let mut n = 0;
                for b in replay.iter() {
                    if matches!(record_status(txn, &b.cluster_id, &b.name, &b.report, b.at)?, Outcome::Wrote(_)) {
                        n += 1;
                    }
                }
                Ok(if n > 0 { Outcome::Wrote(n) } else { Outcome::Unchanged(0) })
            })
            .await;
        if written.is_err() {
            for b in Arc::unwrap_or_clone(batch) {
                self.beats.hold_back(b);
            }
        }
        written
    }

    pub async fn session_samples(&self, cluster: &ClusterId, r: AgentReport) -> Result<SamplesAccepted, StoreError> {
        let id = cluster.to_string();
        self.store.write_batched_in(cluster.as_str(), move |txn| record_samples(txn, &id, &r)).await
    }
}

/// A heartbeat held in memory: the report, the token's cluster and when it arrived.
#[derive(Debug, Clone)]
pub struct HeldBeat {
    /// The CR name (or id) it was reported for.
    name: String,
    cluster_id: String,
    report: StatusReport,
    at: i64,
}

/// Heartbeats of running sessions not yet written, by the CR name they were reported for (the
/// latest per session), and the order between them and the reports written at once.
#[derive(Debug, Default)]
pub struct HeldBeats {
    held: std::sync::Mutex<std::collections::HashMap<String, HeldBeat>>,
    order: tokio::sync::RwLock<()>,
}

impl HeldBeats {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, HeldBeat>> {
        lock(&self.held)
    }

    fn hold(&self, b: HeldBeat) {
        self.lock().insert(b.name.clone(), b);
    }

    /// Puts back what a failed write took, unless a later heartbeat arrived meanwhile.
    fn hold_back(&self, b: HeldBeat) {
        let mut held = self.lock();
        if held.get(&b.name).is_none_or(|later| later.at < b.at) {
            held.insert(b.name.clone(), b);
        }
    }

    fn take(&self, name: &str) -> Option<HeldBeat> {
        self.lock().remove(name)
    }

    fn take_all(&self) -> Vec<HeldBeat> {
        self.lock().drain().map(|(_, b)| b).collect()
    }
}

/// A Heartbeat that cannot end the session (no crash-loop restart count).
fn is_plain_heartbeat(r: &StatusReport) -> bool {
    super::status::ReportedPhase::parse(&r.phase) == super::status::ReportedPhase::Heartbeat
        && !super::status::is_crash_loop(r)
}

/// The session id when a plain heartbeat for `name` would change nothing but the session's
/// `last_report_at` and kept report: a running, unpaused session of this live cluster (a
/// heartbeat while pending or preparing starts the session, which is written at once).
fn heartbeat_only(txn: &redb::ReadTransaction, cluster_id: &str, name: &str) -> Result<Option<String>, StoreError> {
    let session = match super::model::SESSIONS.get(txn, name)? {
        Some(s) => Some(s),
        None => super::lookup::find(txn, name)?,
    };
    let Some(s) = session else { return Ok(None) };
    if s.cluster_id != cluster_id || s.phase != super::model::Phase::Running || s.paused {
        return Ok(None);
    }
    let live = crate::clusters::model::CLUSTERS.get(txn, cluster_id)?.is_some_and(|c| c.is_live());
    Ok(live.then_some(s.id))
}

/// The object an operator audit entry names must be its own cluster's: the session (by CR name)
/// for `session.pause`, the session's pod (`<namespace>/ses-<cr>`, or the detail's `session` when
/// the pod ref is empty) for `pod.delete`, a node for `node.cordon`.
pub fn audit_target_in_cluster(
    txn: &WriteTxn,
    cluster_id: &str,
    namespace: &str,
    ev: &OperatorAudit,
) -> Result<Result<(), Refusal>, StoreError> {
    let not_own = || Refusal::NotOwn(format!("{} is not an object of cluster {cluster_id}", ev.action));
    let session_named = |name: &str| -> Result<Result<(), Refusal>, StoreError> {
        Ok(match find_session(txn, name)? {
            Some(s) if s.cluster_id == cluster_id => Ok(()),
            Some(s) => Err(Refusal::OtherCluster { cluster_id: s.cluster_id }),
            None => Err(not_own()),
        })
    };
    match ev.action.as_str() {
        "session.pause" => session_named(&ev.target),
        "pod.delete" => {
            let cr = if ev.target.is_empty() {
                ev.detail.as_ref().and_then(|d| d.get("session")).and_then(|v| v.as_str()).map(str::to_string)
            } else {
                ev.target
                    .split_once('/')
                    .filter(|(ns, _)| *ns == namespace)
                    .and_then(|(_, pod)| pod.strip_prefix("ses-"))
                    .map(str::to_string)
            };
            match cr {
                Some(cr) if !cr.is_empty() => session_named(&cr),
                _ => Ok(Err(not_own())),
            }
        }
        "node.cordon" => Ok(
            if is_dns_subdomain(&ev.target)
                && crate::inventory::model::NODES.get_in_write(txn, &format!("{cluster_id}/{}", ev.target))?.is_some()
            {
                Ok(())
            } else {
                Err(not_own())
            },
        ),
        _ => Ok(Err(not_own())),
    }
}
