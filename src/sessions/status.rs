//! The session state machine driven by the operator's status reports (contract §2.1).
//!
//! Pure store logic: one report, one write transaction. Effects on the cluster (deleting the CR
//! of a session that errored) are returned to the caller, which runs them after the commit.

use crate::store::WriteTxn;

use super::model::{GpuMode, Phase, SessionRecord};
use crate::callbacks::wire::{StatusReport, parse_ts};
use crate::inventory::gpu_booking::{self, Booking, Share};
use crate::notifications::{self, Kind};
use crate::store::StoreError;

/// A reason-less Paused report this soon after a resume describes the run before it.
const RESUME_GRACE_MS: i64 = 60_000;
/// CrashLoopBackOff with at least this many restarts ends the session.
const CRASH_LOOP_RESTARTS: i64 = 3;

/// What a report did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The session row changed.
    pub wrote: bool,
    /// The report was recognised as stale and ignored.
    pub stale: bool,
    /// The session failed: its CR should be deleted (upstream deletes the CR on `error`).
    pub delete_cr: bool,
}

/// Why a session paused or ended (`reason` on the wire; stored as its string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SessionReason)]
pub enum Reason {
    DiskExceeded,
    MaxRuntime,
    Idle,
    Evicted,
    CrashLoop,
    /// Written by earlier versions for an operator-driven pause that named no reason.
    Paused,
    Error,
    /// An admin paused it.
    UserStopped,
    /// An admin deleted it.
    Deleted,
    /// Its GShareSession could not be applied on the cluster.
    ApplyFailed,
    /// Paused by the control plane: its owner's (or their group's) monthly GPU-hour budget ran
    /// out and the 10-minute grace passed.
    BudgetExhausted,
    /// It left the queue unstarted: its offering was deactivated or deleted while it waited.
    OfferingInactive,
    /// It left the queue unstarted: its owner's account was disabled while it waited.
    AccountDisabled,
    /// Its node went offline while it ran (the liveness sweep ended it).
    NodeOffline,
    /// Its pod stopped reporting for `session_stale_after` while its operator was alive.
    PodLost,
    /// A drain of its node paused (and maybe moved) or ended it.
    Drained,
    /// It left the queue unstarted: no node its owner may use could hold it any more (its GPU
    /// model's nodes cordoned, offline, drained or removed, or pooled for other groups).
    Unserviceable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DiskExceeded => "disk_exceeded",
            Self::MaxRuntime => "max_runtime",
            Self::Idle => "idle",
            Self::Evicted => "evicted",
            Self::CrashLoop => "crash_loop",
            Self::Paused => "paused",
            Self::Error => "error",
            Self::UserStopped => "user_stopped",
            Self::Deleted => "deleted",
            Self::ApplyFailed => "apply_failed",
            Self::BudgetExhausted => "budget_exhausted",
            Self::OfferingInactive => "offering_inactive",
            Self::AccountDisabled => "account_disabled",
            Self::NodeOffline => "node_offline",
            Self::PodLost => "pod_lost",
            Self::Drained => "drained",
            Self::Unserviceable => "unserviceable",
        }
    }

    /// The reason a message names (contract: keywords decide).
    pub fn from_message(message: Option<&str>) -> Option<Self> {
        let m = message?.to_ascii_lowercase();
        if m.contains("evicted") && (m.contains("ephemeral") || m.contains("storage")) {
            Some(Self::DiskExceeded)
        } else if m.contains("max-runtime") || m.contains("max_runtime") {
            Some(Self::MaxRuntime)
        } else if m.contains("idle") {
            Some(Self::Idle)
        } else if m.contains("evicted") {
            Some(Self::Evicted)
        } else {
            None
        }
    }
}

/// The reason a message names, as its wire string (see [`Reason::from_message`]).
pub fn reason_from(message: Option<&str>) -> Option<&'static str> {
    Reason::from_message(message).map(Reason::as_str)
}

/// The phase an operator report names (any case); unknown phases change nothing (contract §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedPhase {
    Pending,
    Preparing,
    Running,
    Paused,
    Terminating,
    Terminated,
    Error,
    Heartbeat,
    IdleWarning,
    Unknown,
}

impl ReportedPhase {
    pub fn parse(phase: &str) -> Self {
        match phase.to_ascii_lowercase().as_str() {
            "pending" => Self::Pending,
            "preparing" => Self::Preparing,
            "running" => Self::Running,
            "paused" => Self::Paused,
            "terminating" => Self::Terminating,
            "terminated" => Self::Terminated,
            "error" => Self::Error,
            "heartbeat" => Self::Heartbeat,
            "idlewarning" => Self::IdleWarning,
            _ => Self::Unknown,
        }
    }
}

/// Applies one report to `s` (already known to belong to the reporting cluster). The caller
/// stores `s` through `model::put_session` when `wrote` is set.
pub fn apply(txn: &WriteTxn, s: &mut SessionRecord, r: &StatusReport, now: i64) -> Result<Applied, StoreError> {
    let mut out = Applied::default();
    let phase = ReportedPhase::parse(&r.phase);
    let message = r.message.as_deref().map(str::trim).filter(|m| !m.is_empty());

    // Liveness: a heartbeat, or any report that describes a pod.
    if phase == ReportedPhase::Heartbeat || r.restart_count.is_some() {
        s.last_report_at = Some(now);
        out.wrote = true;
    }
    if s.phase.is_final() {
        return Ok(out);
    }
    if is_stale(s, r, phase, message, now) {
        out.stale = true;
        return Ok(out);
    }
    // A pod crash-looping for good ends the session, whatever phase the report names.
    if is_crash_loop(r) {
        s.reason = Some(Reason::CrashLoop);
        s.message = Some(format!("container restarted {} times (CrashLoopBackOff)", r.restart_count.unwrap_or(0)));
        end(txn, s, Phase::Error, now)?;
        out.wrote = true;
        out.delete_cr = true;
        return Ok(out);
    }

    let startable = !s.paused && matches!(s.phase, Phase::Pending | Phase::Preparing | Phase::Running);
    match phase {
        // As upstream (`status_sync.py` `_reflect_phase`): Preparing only advances a pending or
        // preparing session. The operator sends one for a running session whenever its pod is
        // being replaced (a drain, a deleted pod, a pause the resume overtook); the session runs
        // on, and stays under the stale rule below, which protects only a running session.
        ReportedPhase::Preparing if startable => {
            if s.phase != Phase::Running {
                s.set_phase(Phase::Preparing, now);
                out.wrote = true;
            }
            if let Some(node) = r.node_name.as_ref().filter(|n| !n.is_empty())
                && s.node_name.as_ref() != Some(node)
            {
                s.node_name = Some(node.clone());
                out.wrote = true;
            }
        }
        ReportedPhase::Running if startable => {
            run(txn, s, r, now)?;
            out.wrote = true;
        }
        // A heartbeat while pending or preparing means the Running report was missed.
        ReportedPhase::Heartbeat if startable && s.phase != Phase::Running => {
            run(txn, s, r, now)?;
            out.wrote = true;
        }
        // An operator-driven pause (the reaper) of a session neither finished, ending nor already
        // paused; a pause the control plane asked for is already recorded, and its echo is a no-op.
        ReportedPhase::Paused if !matches!(s.phase, Phase::Paused | Phase::Terminating) => {
            s.paused = true;
            // Upstream: the message names the reason; a reason-less one is the idle reaper.
            s.reason = Some(Reason::from_message(message).unwrap_or(Reason::Idle));
            s.message = message.map(str::to_string);
            if !r.yield_state.as_deref().is_some_and(|y| y.eq_ignore_ascii_case("Yielded")) {
                release(txn, &s.id, now)?;
                s.bound_gpu_uuid = None;
            }
            s.set_phase(Phase::Paused, now);
            out.wrote = true;
            if s.reason == Some(Reason::Idle) {
                let text = format!("{} was paused because it was idle; resume it when you need it", s.label());
                notifications::push(txn, now, &s.owner, Kind::IdlePaused, Some(&s.id), &text)?;
            }
        }
        ReportedPhase::IdleWarning => {
            s.message = message.map(|secs| format!("idle: reaped in {secs} s unless used"));
            out.wrote = true;
            let when = match message.and_then(|m| m.parse::<i64>().ok()) {
                Some(secs) => format!("in about {} min", (secs + 59) / 60),
                None => "soon".to_string(),
            };
            let text = format!("{} is idle and will be paused {when} unless it is used", s.label());
            notifications::push(txn, now, &s.owner, Kind::IdleWarning, Some(&s.id), &text)?;
        }
        ReportedPhase::Terminating => {
            s.reason = Reason::from_message(message).or(s.reason);
            s.message = message.map(str::to_string);
            s.set_phase(Phase::Terminating, now);
            out.wrote = true;
        }
        ReportedPhase::Terminated => {
            if s.reason.is_none() {
                s.reason = Reason::from_message(message);
            }
            if message.is_some() {
                s.message = message.map(str::to_string);
            }
            end(txn, s, Phase::Terminated, now)?;
            s.cr_applied = false;
            out.wrote = true;
        }
        ReportedPhase::Error => {
            s.reason = Some(Reason::from_message(message).unwrap_or(Reason::Error));
            s.message = message.map(str::to_string);
            end(txn, s, Phase::Error, now)?;
            out.wrote = true;
            out.delete_cr = s.cr_applied;
        }
        // `pending` and unknown phases change nothing (contract §2.1).
        _ => {}
    }
    Ok(out)
}

/// A pod crash-looping for good: the session ends, whatever phase the report names.
pub(crate) fn is_crash_loop(r: &StatusReport) -> bool {
    r.restart_count.is_some_and(|n| n >= CRASH_LOOP_RESTARTS)
        && r.container_state.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("Waiting:CrashLoopBackOff"))
}

/// Paused and final reports from before the last resume describe the previous run. Only a
/// running session is protected (contract §9): a resume marks the session running at once.
fn is_stale(s: &SessionRecord, r: &StatusReport, phase: ReportedPhase, message: Option<&str>, now: i64) -> bool {
    if s.phase != Phase::Running
        || !matches!(phase, ReportedPhase::Paused | ReportedPhase::Terminated | ReportedPhase::Error)
    {
        return false;
    }
    if let (Some(g), Some(resumed)) = (r.generation, s.resume_generation) {
        if g < resumed {
            return true;
        }
    } else if let (Some(ts), Some(resumed_at)) = (parse_ts(&r.ts), s.resumed_at.or(s.started_at))
        && ts < resumed_at
    {
        return true;
    }
    phase == ReportedPhase::Paused && message.is_none() && s.resumed_at.is_some_and(|t| now - t < RESUME_GRACE_MS)
}

fn run(txn: &WriteTxn, s: &mut SessionRecord, r: &StatusReport, now: i64) -> Result<(), StoreError> {
    s.started_at.get_or_insert(now);
    if let Some(node) = &r.node_name {
        s.node_name = Some(node.clone());
    }
    if let Some(gpu) = &r.bound_gpu_uuid
        && s.bound_gpu_uuid.as_ref() != Some(gpu)
    {
        release(txn, &s.id, now)?;
        s.bound_gpu_uuid = Some(gpu.clone());
    }
    if s.bound_gpu_uuid.is_some() || s.shape.resource_class == super::model::ResourceClass::Gpu {
        allocate(txn, s, now)?;
    }
    s.reason = None;
    s.message = None;
    s.set_phase(Phase::Running, now);
    Ok(())
}

fn end(txn: &WriteTxn, s: &mut SessionRecord, phase: Phase, now: i64) -> Result<(), StoreError> {
    release(txn, &s.id, now)?;
    s.set_phase(phase, now);
    Ok(())
}

/// Books the session's GPU share (once: an open allocation stays as it is).
pub(crate) fn allocate(txn: &WriteTxn, s: &SessionRecord, now: i64) -> Result<(), StoreError> {
    let share = match s.shape.mode {
        Some(GpuMode::Exclusive) => Share::Exclusive,
        _ => Share::Slice {
            mem_mb: s.shape.gpu_mem_mb.unwrap_or(0).max(0) as u64,
            cores: s.shape.gpu_cores.unwrap_or(0).max(0) as u64,
        },
    };
    let booking =
        Booking { cluster_id: &s.cluster_id, session_id: &s.id, gpu_uuid: s.bound_gpu_uuid.as_deref(), share };
    gpu_booking::book(txn, &booking, now)
}

/// Releases the session's open allocations and gives their slices back to the cards.
pub fn release(txn: &WriteTxn, session_id: &str, now: i64) -> Result<(), StoreError> {
    gpu_booking::release(txn, session_id, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_come_from_keywords() {
        assert_eq!(reason_from(Some("Evicted: Pod ephemeral local storage usage exceeds")), Some("disk_exceeded"));
        assert_eq!(reason_from(Some("max-runtime-exceeded")), Some("max_runtime"));
        assert_eq!(reason_from(Some("idle-reaped")), Some("idle"));
        assert_eq!(reason_from(Some("Evicted: node memory pressure")), Some("evicted"));
        assert_eq!(reason_from(Some("OOMKilled")), None);
        assert_eq!(reason_from(None), None);
    }

    #[test]
    fn reason_wire_strings_are_pinned() {
        let pinned = [
            (Reason::DiskExceeded, "disk_exceeded"),
            (Reason::MaxRuntime, "max_runtime"),
            (Reason::Idle, "idle"),
            (Reason::Evicted, "evicted"),
            (Reason::CrashLoop, "crash_loop"),
            (Reason::Paused, "paused"),
            (Reason::Error, "error"),
            (Reason::UserStopped, "user_stopped"),
            (Reason::Deleted, "deleted"),
            (Reason::ApplyFailed, "apply_failed"),
            (Reason::BudgetExhausted, "budget_exhausted"),
            (Reason::OfferingInactive, "offering_inactive"),
            (Reason::AccountDisabled, "account_disabled"),
            (Reason::NodeOffline, "node_offline"),
            (Reason::PodLost, "pod_lost"),
            (Reason::Drained, "drained"),
            (Reason::Unserviceable, "unserviceable"),
        ];
        for (reason, wire) in pinned {
            assert_eq!(reason.as_str(), wire);
            assert_eq!(serde_json::to_value(reason).unwrap(), wire);
            assert_eq!(serde_json::from_value::<Reason>(wire.into()).unwrap(), reason);
        }
        let schema = serde_json::to_value(<Reason as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(schema["enum"].as_array().unwrap().len(), pinned.len(), "every variant pinned");
    }
}
