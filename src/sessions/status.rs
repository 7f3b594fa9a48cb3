//! The session state machine driven by the operator's status reports (contract §2.1).
//!
//! Pure store logic: one report, one write transaction. Effects on the cluster (deleting the CR
//! of a session that errored) are returned to the caller, which runs them after the commit.

use redb::WriteTransaction;

use super::model::{ALLOCATIONS, AllocationRecord, GpuMode, Phase, SessionRecord, allocation_key, allocation_prefix};
use crate::clusters::model::GPUS;
use crate::inventory::model::{StatusReport, parse_ts};
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

/// The reason a message names (contract: keywords decide).
pub fn reason_from(message: Option<&str>) -> Option<&'static str> {
    let m = message?.to_ascii_lowercase();
    if m.contains("evicted") && (m.contains("ephemeral") || m.contains("storage")) {
        Some("disk_exceeded")
    } else if m.contains("max-runtime") || m.contains("max_runtime") {
        Some("max_runtime")
    } else if m.contains("idle") {
        Some("idle")
    } else if m.contains("evicted") {
        Some("evicted")
    } else {
        None
    }
}

/// Applies one report to `s` (already known to belong to the reporting cluster). The caller
/// stores `s` through `inventory::apply::put_session` when `wrote` is set.
pub fn apply(txn: &WriteTransaction, s: &mut SessionRecord, r: &StatusReport, now: i64) -> Result<Applied, StoreError> {
    let mut out = Applied::default();
    let phase = r.phase.to_ascii_lowercase();
    let message = r.message.as_deref().map(str::trim).filter(|m| !m.is_empty());

    // Liveness: a heartbeat, or any report that describes a pod.
    if phase == "heartbeat" || r.restart_count.is_some() {
        s.last_report_at = Some(now);
        out.wrote = true;
    }
    if s.phase.is_final() {
        return Ok(out);
    }
    if is_stale(s, r, &phase, message, now) {
        out.stale = true;
        return Ok(out);
    }
    // A pod crash-looping for good ends the session, whatever phase the report names.
    if r.restart_count.is_some_and(|n| n >= CRASH_LOOP_RESTARTS)
        && r.container_state.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("Waiting:CrashLoopBackOff"))
    {
        s.reason = Some("crash_loop".into());
        s.message = Some(format!("container restarted {} times (CrashLoopBackOff)", r.restart_count.unwrap_or(0)));
        end(txn, s, Phase::Error, now)?;
        out.wrote = true;
        out.delete_cr = true;
        return Ok(out);
    }

    let startable = !s.paused && matches!(s.phase, Phase::Pending | Phase::Preparing | Phase::Running);
    match phase.as_str() {
        "preparing" if startable => {
            s.set_phase(Phase::Preparing, now);
            out.wrote = true;
        }
        "running" if startable => {
            run(txn, s, r, now)?;
            out.wrote = true;
        }
        // A heartbeat while pending or preparing means the Running report was missed.
        "heartbeat" if startable && s.phase != Phase::Running => {
            run(txn, s, r, now)?;
            out.wrote = true;
        }
        "paused" => {
            s.paused = true;
            s.reason = reason_from(message).map(str::to_string).or_else(|| s.reason.clone()).or(Some("paused".into()));
            s.message = message.map(str::to_string);
            if !r.yield_state.as_deref().is_some_and(|y| y.eq_ignore_ascii_case("Yielded")) {
                release(txn, &s.id, now)?;
                s.bound_gpu_uuid = None;
            }
            s.set_phase(Phase::Paused, now);
            out.wrote = true;
        }
        "idlewarning" => {
            s.message = message.map(|secs| format!("idle: reaped in {secs} s unless used"));
            out.wrote = true;
        }
        "terminating" => {
            s.reason = reason_from(message).map(str::to_string).or_else(|| s.reason.clone());
            s.message = message.map(str::to_string);
            s.set_phase(Phase::Terminating, now);
            out.wrote = true;
        }
        "terminated" => {
            if s.reason.is_none() {
                s.reason = reason_from(message).map(str::to_string);
            }
            if message.is_some() {
                s.message = message.map(str::to_string);
            }
            end(txn, s, Phase::Terminated, now)?;
            s.cr_applied = false;
            out.wrote = true;
        }
        "error" => {
            s.reason = Some(reason_from(message).unwrap_or("error").to_string());
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

/// Paused and final reports from before the last resume describe the previous run.
fn is_stale(s: &SessionRecord, r: &StatusReport, phase: &str, message: Option<&str>, now: i64) -> bool {
    if !matches!(phase, "paused" | "terminated" | "error") {
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
    phase == "paused" && message.is_none() && s.resumed_at.is_some_and(|t| now - t < RESUME_GRACE_MS)
}

fn run(txn: &WriteTransaction, s: &mut SessionRecord, r: &StatusReport, now: i64) -> Result<(), StoreError> {
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

fn end(txn: &WriteTransaction, s: &mut SessionRecord, phase: Phase, now: i64) -> Result<(), StoreError> {
    release(txn, &s.id, now)?;
    s.set_phase(phase, now);
    Ok(())
}

/// Opens the session's GPU allocation unless one is open, and books its slice on the card: the
/// control plane owns the cards' `used_*` fields (the operator always reports 0).
fn allocate(txn: &WriteTransaction, s: &SessionRecord, now: i64) -> Result<(), StoreError> {
    let open = ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(&s.id))?.into_iter().any(|(_, a)| a.is_open());
    if open {
        return Ok(());
    }
    let (mut mem, mut cores) = (0, 0);
    if let Some(uuid) = &s.bound_gpu_uuid {
        let key = format!("{}/{uuid}", s.cluster_id);
        if let Some(mut g) = GPUS.get_in_write(txn, &key)? {
            (mem, cores) = match s.shape.mode {
                Some(GpuMode::Exclusive) => (g.total_mem_mb, g.total_cores),
                _ => (s.shape.gpu_mem_mb.unwrap_or(0).max(0) as u64, s.shape.gpu_cores.unwrap_or(0).max(0) as u64),
            };
            g.used_mem_mb = g.used_mem_mb.saturating_add(mem);
            g.used_cores = g.used_cores.saturating_add(cores);
            GPUS.put(txn, &key, &g)?;
        }
    }
    let id = format!("alc_{}", ulid::Ulid::new());
    let a = AllocationRecord {
        id: id.clone(),
        cluster_id: s.cluster_id.clone(),
        session_id: s.id.clone(),
        gpu_uuid: s.bound_gpu_uuid.clone(),
        created_at: now,
        released_at: None,
        gpu_mem_mb: mem,
        gpu_cores: cores,
    };
    ALLOCATIONS.put(txn, &allocation_key(&s.id, &id), &a)
}

/// Releases the session's open allocations and gives their slices back to the cards.
pub fn release(txn: &WriteTransaction, session_id: &str, now: i64) -> Result<(), StoreError> {
    for (key, mut a) in ALLOCATIONS.list_prefix_in_write(txn, &allocation_prefix(session_id))? {
        if a.is_open() {
            a.released_at = Some(now);
            ALLOCATIONS.put(txn, &key, &a)?;
            if let Some(uuid) = &a.gpu_uuid {
                let key = format!("{}/{uuid}", a.cluster_id);
                if let Some(mut g) = GPUS.get_in_write(txn, &key)? {
                    g.used_mem_mb = g.used_mem_mb.saturating_sub(a.gpu_mem_mb);
                    g.used_cores = g.used_cores.saturating_sub(a.gpu_cores);
                    GPUS.put(txn, &key, &g)?;
                }
            }
        }
    }
    Ok(())
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
}
