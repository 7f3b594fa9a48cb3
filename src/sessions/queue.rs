//! The queue and the budgets, kept off the request and callback paths (the timer task, and a
//! task woken by commits while sessions wait).
//!
//! **The queue.** A session queued at create (see `admission`: upstream keeps it `pending` with
//! a queue entry) waits in its cluster's queue, [`SESSION_QUEUE`], in the order it was queued.
//! [`Sessions::serve_queue`] serves each cluster head first, each start in one write
//! transaction: the head is checked again (its offering still active, its owner not disabled,
//! the operator connected, the owner's policy and budget with the session already counted, then
//! the fit check), marked started, and its CR applied after the commit. A head that does not fit
//! blocks its cluster (strict order); a head its owner's limits refuse now (a limit lowered
//! below use, a used-up budget) stays queued with that reason and the next is looked at. While a
//! session the queue started has not been bound to a card yet (its slice is booked only when
//! the operator reports it running), its cluster serves no other, so two starts cannot both take
//! the last slot ([`IN_FLIGHT_MS`] bounds the wait for a pod that never starts).
//!
//! **Budgets.** [`Sessions::enforce_budgets`] reads every monthly GPU-hour budget's use
//! (`policy::budget`): at 80 % the subject's running GPU sessions are told once a month (their
//! message), at 100 % they are told they pause in 10 minutes, and after that grace they are
//! paused (reason `budget_exhausted`) through the pause path.

use std::cell::Cell;
use std::collections::HashMap;

use super::model::*;
use super::{SessionError, Sessions, status};
use crate::clusters::model::CLUSTERS;
use crate::http::error::ErrorCode;
use crate::notifications::{self, Kind};
use crate::policy::budget::{self, GRACE_MS, WARN_PCT};
use crate::store::{DryRun, WriteTxn};

/// How long a session the queue started may stay unbound before its cluster's queue moves on.
pub const IN_FLIGHT_MS: i64 = 5 * 60_000;
/// How long a waiting session no card could ever hold stays in the queue (passed over) before it
/// leaves it, reason `unserviceable`: a node back from a reboot or an uncordon in that time
/// lets it wait on.
pub const NEVER_FITS_GRACE_MS: i64 = 10 * 60_000;
/// Why a queued session waits: no node it may use could hold it now (it is passed over, and
/// leaves the queue after [`NEVER_FITS_GRACE_MS`]).
pub const UNSERVICEABLE: &str = "unserviceable";
/// Starts (and drops) per cluster in one pass; the next pass goes on.
const MAX_PER_PASS: usize = 50;

/// What one queue pass did (session ids).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueuePass {
    /// Started: their CRs applied (or, when the cluster refused, in phase error).
    pub started: Vec<String>,
    /// Left the queue unstarted, with why.
    pub dropped: Vec<(String, status::Reason)>,
}

/// What one step of a cluster's queue decided (inside its write transaction).
enum Step {
    /// Nothing more to do on this cluster now.
    Done,
    Dropped(String, status::Reason),
    Started(Box<SessionRecord>),
}

/// What one budget sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BudgetSweep {
    /// Subjects (`user:<name>`, `group:<name>`) warned at 80 % this pass.
    pub warned: Vec<String>,
    /// Subjects found used up this pass (their grace starts).
    pub exhausted: Vec<String>,
    /// Sessions paused at the end of a grace.
    pub paused: Vec<String>,
}

/// `<cluster id>/<session id>` -> when the queue started it, while it is not yet bound (see
/// [`IN_FLIGHT_MS`]).
pub const QUEUE_STARTED: crate::store::JsonTable<i64> = crate::store::JsonTable::new("session_queue_started");

impl Sessions {
    /// Starts waiting sessions in order where their clusters have room (see the module). Run by
    /// the queue task and the timer, never on a request.
    pub async fn serve_queue(&self) -> Result<QueuePass, SessionError> {
        let _one = self.queue_pass.lock().await;
        let clusters: Vec<String> = self
            .store
            .read(|txn| {
                let mut ids: Vec<String> = SESSION_QUEUE
                    .list(txn)?
                    .into_iter()
                    .filter_map(|(k, _)| k.split('/').next().map(str::to_string))
                    .collect();
                ids.dedup();
                Ok(ids)
            })
            .await?;
        let mut pass = QueuePass::default();
        for cluster in clusters {
            for _ in 0..MAX_PER_PASS {
                match self.queue_step(&cluster).await? {
                    Step::Done => break,
                    Step::Dropped(id, reason) => pass.dropped.push((id, reason)),
                    Step::Started(s) => {
                        self.apply_started(&s).await;
                        pass.started.push(s.id.clone());
                    }
                }
            }
        }
        Ok(pass)
    }

    /// One decision on `cluster`'s queue, in one write transaction (rolled back, not committed,
    /// when it changed nothing: a blocked queue costs no commit).
    async fn queue_step(&self, cluster_id: &str) -> Result<Step, SessionError> {
        let (cluster_id, now) = (cluster_id.to_string(), self.clock.now_ms());
        let (admission, gate) = (self.admission.clone(), self.operator_gate.0.clone());
        let step = self
            .store
            .write_with(move |txn| {
                let wrote = Cell::new(false);
                let decided = (|| {
                    let Some(cluster) = CLUSTERS.get_in_write(txn, &cluster_id)? else { return Ok(Step::Done) };
                    if in_flight(txn, &cluster_id, now, &wrote)? {
                        return Ok(Step::Done);
                    }
                    let entries: Vec<(String, String)> = queue_in_write(txn, &cluster_id)?
                        .into_iter()
                        .map(|(k, owner)| (queued_id(&k).to_string(), owner))
                        .collect();
                    for (id, owner) in entries {
                        let Some(mut s) = SESSIONS.get_in_write(txn, &id)?.filter(SessionRecord::is_queued) else {
                            continue;
                        };
                        // Bad entries leave the queue unstarted, saying why.
                        let offering = OFFERINGS.get_in_write(txn, &s.offering_id)?;
                        let drop_reason = if offering.as_ref().is_none_or(|o| o.status != OfferingStatus::Active) {
                            Some((
                                status::Reason::OfferingInactive,
                                format!(
                                    "left the queue unstarted: offering {} was deactivated or deleted while it waited",
                                    s.offering_name
                                ),
                            ))
                        } else if crate::auth::accounts::is_disabled(txn, &owner)? {
                            Some((
                                status::Reason::AccountDisabled,
                                format!("left the queue unstarted: account {owner} was disabled while it waited"),
                            ))
                        } else {
                            None
                        };
                        if drop_reason.is_none()
                            && s.queue.as_ref().is_some_and(|q| q.unserviceable_since.is_some())
                            && admission.could_ever_fit(txn, &owner, &cluster, &s.shape)?
                            && let Some(q) = s.queue.as_mut()
                        {
                            // A node it may use is back: it waits as before.
                            q.unserviceable_since = None;
                            q.reason = super::admission::NO_GPU_CAPACITY.into();
                            s.message = None;
                            put_session(txn, &s)?;
                            wrote.set(true);
                        }
                        if let Some((reason, message)) = drop_reason {
                            notifications::push(txn, now, &owner, Kind::QueueDropped, Some(&id), &message)?;
                            s.reason = Some(reason);
                            s.message = Some(message);
                            s.set_phase(Phase::Terminated, now);
                            put_session(txn, &s)?;
                            return Ok(Step::Dropped(id, reason));
                        }
                        if gate(txn, &cluster, now)?.is_some() {
                            note_reason(txn, &mut s, "operator_not_connected", None, &wrote)?;
                            return Ok(Step::Done);
                        }
                        let mut shape = s.shape.clone();
                        match admission.check(txn, &id, &owner, &cluster, &mut shape, Some(&s.shape), true, now) {
                            Ok(_) => {
                                let waited = (now - s.queue.as_ref().map_or(now, |q| q.queued_at)).max(0) / 60_000;
                                if let Some(q) = s.queue.as_mut() {
                                    q.started_at = Some(now);
                                }
                                let message = format!("queue: started after waiting {waited} min in the queue");
                                let text = format!("{} started after waiting {waited} min in the queue", s.label());
                                notifications::push(txn, now, &owner, Kind::QueuedStarted, Some(&id), &text)?;
                                s.message = Some(message);
                                put_session(txn, &s)?;
                                QUEUE_STARTED.put(txn, &format!("{cluster_id}/{id}"), &now)?;
                                return Ok(Step::Started(Box::new(s)));
                            }
                            // No room now, but a card it may use would hold it once emptied: the
                            // head holds its cluster's queue (strict order).
                            Err(SessionError::Conflict { code: ErrorCode::Unserviceable, .. })
                                if admission.could_ever_fit(txn, &owner, &cluster, &s.shape)? =>
                            {
                                note_reason(txn, &mut s, super::admission::NO_GPU_CAPACITY, None, &wrote)?;
                                return Ok(Step::Done);
                            }
                            // No card it may use could ever hold it now (its model's nodes all
                            // cordoned, offline, drained or removed, or moved into a pool its
                            // group may not use): it holds nobody up; after a grace (a node that
                            // blinked comes back) it leaves the queue.
                            Err(SessionError::Conflict { code: ErrorCode::Unserviceable, message, .. }) => {
                                let since = s.queue.as_ref().and_then(|q| q.unserviceable_since).unwrap_or(now);
                                if now - since >= NEVER_FITS_GRACE_MS {
                                    let message = format!(
                                        "left the queue unstarted: for {} min no schedulable node of cluster {} that it may use has a card that could hold it ({message})",
                                        (now - since) / 60_000,
                                        cluster.name
                                    );
                                    let text = format!(
                                        "{} left the queue unstarted: no node of cluster {} that it may use can hold it",
                                        s.label(),
                                        cluster.name
                                    );
                                    notifications::push(txn, now, &owner, Kind::QueueDropped, Some(&id), &text)?;
                                    s.reason = Some(status::Reason::Unserviceable);
                                    s.message = Some(message);
                                    s.set_phase(Phase::Terminated, now);
                                    put_session(txn, &s)?;
                                    return Ok(Step::Dropped(id, status::Reason::Unserviceable));
                                }
                                let until = crate::clock::rfc3339_ms(since + NEVER_FITS_GRACE_MS);
                                let message = format!(
                                    "no schedulable node of cluster {} that it may use could hold it now; it leaves the queue at {until} unless one comes back",
                                    cluster.name
                                );
                                if let Some(q) = s.queue.as_mut().filter(|q| q.unserviceable_since.is_none()) {
                                    q.unserviceable_since = Some(since);
                                    q.reason = UNSERVICEABLE.into();
                                    s.message = Some(message);
                                    put_session(txn, &s)?;
                                    wrote.set(true);
                                }
                            }
                            // Its owner's limits refuse it now: it waits, and the next is looked at.
                            Err(SessionError::Conflict { code: ErrorCode::QuotaExceeded, message, .. }) => {
                                note_reason(txn, &mut s, "quota_exceeded", Some(message), &wrote)?;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(Step::Done)
                })();
                match decided {
                    Ok(Step::Done) if !wrote.get() => Err(Idle::Idle),
                    Ok(step) => Ok(step),
                    Err(e) => Err(Idle::Failed(e)),
                }
            })
            .await;
        match step {
            Ok(step) => Ok(step),
            Err(Idle::Idle) => Ok(Step::Done),
            Err(Idle::Failed(e)) => Err(e),
        }
    }

    /// Applies the CR of a session the queue started (as a create does after its commit).
    async fn apply_started(&self, s: &SessionRecord) {
        let id = s.id.clone();
        let result = match self.apply_cr(s).await {
            Ok(generation) => {
                self.update(&id, move |s, _| {
                    if s.is_live() {
                        s.cr_applied = true;
                        s.generation = generation.or(s.generation);
                    }
                })
                .await
            }
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(session_id = %id, error = %message, "GShareSession of a queued session not applied");
                self.update(&id, move |s, now| {
                    if s.is_live() {
                        s.reason = Some(status::Reason::ApplyFailed);
                        s.message = Some(message);
                        s.set_phase(Phase::Error, now);
                    }
                })
                .await
            }
        };
        if let Err(e) = result {
            tracing::warn!(session_id = %id, error = %e, "cannot record the start of a queued session");
        }
    }

    /// The monthly GPU-hour budgets (see the module). Run by the timer task, never on a request.
    pub async fn enforce_budgets(&self) -> Result<BudgetSweep, SessionError> {
        let now = self.clock.now_ms();
        let (statuses, running) = self
            .store
            .read(move |txn| {
                let statuses = budget::statuses(txn, now)?;
                let mut running = Vec::new();
                if statuses.is_empty() {
                    return Ok((statuses, running));
                }
                let rows = DryRun::new(txn);
                let mut groups: HashMap<String, Option<String>> = HashMap::new();
                for (id, _) in LIVE_SESSIONS.list(txn)? {
                    let Some(s) = SESSIONS.get(txn, &id)? else { continue };
                    if s.phase != Phase::Running || s.shape.resource_class != ResourceClass::Gpu {
                        continue;
                    }
                    let group = match groups.get(&s.owner) {
                        Some(g) => g.clone(),
                        None => {
                            let g = crate::auth::accounts::group_of(&rows, &s.owner)?;
                            groups.insert(s.owner.clone(), g.clone());
                            g
                        }
                    };
                    running.push((id, s.owner, group));
                }
                Ok((statuses, running))
            })
            .await?;
        let mut sweep = BudgetSweep::default();
        for st in statuses {
            let mine: Vec<String> = running
                .iter()
                .filter(|(_, owner, group)| budget::covers(&st.budget, owner, group.as_deref()))
                .map(|(id, ..)| id.clone())
                .collect();
            let whose = match st.budget.scope {
                crate::policy::model::Scope::Group => format!("group {}'s", st.budget.subject),
                _ => format!("{}'s", st.budget.subject),
            };
            let (limit, used, month) = (st.budget.limit_hours, st.used_hours(), st.month.clone());
            // A user's own budget tells that user even with nothing running; a group's tells the
            // owners of the sessions it covers.
            let subject_user = match st.budget.scope {
                crate::policy::model::Scope::User => Some(st.budget.subject.clone()),
                _ => None,
            };
            if st.exhausted() {
                match st.state.exhausted_at {
                    None => {
                        let at = crate::clock::rfc3339_ms(now + GRACE_MS);
                        let message = format!(
                            "budget-exhausted: {whose} monthly budget of {limit} GPU-hours is used ({used} in {month}); \
                             this session is paused at {at} (in 10 min) unless an admin raises it; save your work"
                        );
                        let status = st.clone();
                        self.store
                            .write_with(move |txn| {
                                budget::mark(txn, &status, |b| {
                                    b.exhausted_at = Some(now);
                                    b.warned_at.get_or_insert(now);
                                })?;
                                tell(txn, &mine, &message, now, Kind::BudgetExhausted, subject_user)
                            })
                            .await?;
                        sweep.exhausted.push(st.budget.key());
                    }
                    Some(at) if now >= at + GRACE_MS => {
                        let message = format!(
                            "budget-exhausted: paused: {whose} monthly budget of {limit} GPU-hours is used ({used} in {month})"
                        );
                        for id in mine {
                            match self
                                .pause_for(&id, status::Reason::BudgetExhausted, Some(message.clone()), None)
                                .await
                            {
                                Ok(s) => {
                                    let text =
                                        format!("{} was paused: {whose} monthly GPU-hour budget is used up", s.label());
                                    self.store
                                        .write_with(move |txn| {
                                            notifications::push(
                                                txn,
                                                now,
                                                &s.owner,
                                                Kind::BudgetExhausted,
                                                Some(&s.id),
                                                &text,
                                            )
                                        })
                                        .await?;
                                    sweep.paused.push(id)
                                }
                                Err(e) => {
                                    tracing::warn!(session = %id, error = %e, "cannot pause a session whose budget is used up")
                                }
                            }
                        }
                    }
                    Some(_) => {}
                }
                continue;
            }
            let raised = st.state.exhausted_at.is_some();
            let warn = st.percent() >= WARN_PCT && st.state.warned_at.is_none();
            if !raised && !warn {
                continue;
            }
            let pct = st.percent();
            let message = format!(
                "budget-warning: {whose} monthly GPU-hour budget is {pct} % used ({used} of {limit} GPU-hours in {month})"
            );
            let status = st.clone();
            self.store
                .write_with(move |txn| {
                    budget::mark(txn, &status, |b| {
                        // Raised above the use again: a later exhaustion starts a new grace.
                        b.exhausted_at = None;
                        if warn {
                            b.warned_at = Some(now);
                        }
                    })?;
                    if warn { tell(txn, &mine, &message, now, Kind::BudgetWarning, subject_user) } else { Ok(()) }
                })
                .await?;
            if warn {
                sweep.warned.push(st.budget.key());
            }
        }
        Ok(sweep)
    }
}

/// Whether a session the queue started on `cluster_id` is still on its way (not yet bound to a
/// card, younger than [`IN_FLIGHT_MS`]); entries that no longer are go.
fn in_flight(txn: &WriteTxn, cluster_id: &str, now: i64, wrote: &Cell<bool>) -> Result<bool, SessionError> {
    let mut waiting = false;
    for (key, at) in QUEUE_STARTED.list_prefix_in_write(txn, &format!("{cluster_id}/"))? {
        let id = key.rsplit('/').next().unwrap_or_default();
        let on_its_way = now - at < IN_FLIGHT_MS
            && SESSIONS
                .get_in_write(txn, id)?
                .is_some_and(|s| matches!(s.phase, Phase::Pending | Phase::Preparing) && s.bound_gpu_uuid.is_none());
        if on_its_way {
            waiting = true;
        } else {
            QUEUE_STARTED.delete(txn, &key)?;
            wrote.set(true);
        }
    }
    Ok(waiting)
}

/// Records why a waiting session waits now (written only when it changes).
fn note_reason(
    txn: &WriteTxn,
    s: &mut SessionRecord,
    reason: &str,
    message: Option<String>,
    wrote: &Cell<bool>,
) -> Result<(), SessionError> {
    let Some(q) = s.queue.as_mut() else { return Ok(()) };
    if q.reason == reason && s.message == message && q.unserviceable_since.is_none() {
        return Ok(());
    }
    q.reason = reason.to_string();
    q.unserviceable_since = None;
    s.message = message;
    put_session(txn, s)?;
    wrote.set(true);
    Ok(())
}

/// A queue step's transaction ends without a commit when it changed nothing (`Idle`).
enum Idle {
    Idle,
    Failed(SessionError),
}

impl From<crate::store::StoreError> for Idle {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Failed(e.into())
    }
}

/// Sets `message` on each of the sessions that are still running, and notifies their owners
/// (each once) and `subject` (a user-scope budget's user) of `kind`.
fn tell(
    txn: &WriteTxn,
    ids: &[String],
    message: &str,
    now: i64,
    kind: Kind,
    subject: Option<String>,
) -> Result<(), SessionError> {
    let mut told: Vec<String> = Vec::new();
    for id in ids {
        if let Some(mut s) = SESSIONS.get_in_write(txn, id)?.filter(|s| s.phase == Phase::Running) {
            s.message = Some(message.to_string());
            put_session(txn, &s)?;
            if !told.contains(&s.owner) {
                notifications::push(txn, now, &s.owner, kind, Some(&s.id), &notice(message))?;
                told.push(s.owner.clone());
            }
        }
    }
    if let Some(user) = subject
        && !told.contains(&user)
    {
        notifications::push(txn, now, &user, kind, None, &notice(message))?;
    }
    Ok(())
}

/// A budget message as a notification's text: without its `budget-…:` tag.
fn notice(message: &str) -> String {
    message.split_once(": ").map_or(message, |(_, rest)| rest).to_string()
}
