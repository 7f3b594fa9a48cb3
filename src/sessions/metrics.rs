//! The sessions' part of `GET /metrics`: live sessions by phase and the GPU allocations they
//! hold (the document is put together in `crate::metrics`).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::model::{Phase, live_sessions};
use crate::inventory::gpu_booking;
use crate::store::Store;

pub async fn render(store: &Store, out: &mut String) {
    let live = [Phase::Pending, Phase::Preparing, Phase::Running, Phase::Paused, Phase::Terminating];
    let mut by_phase: BTreeMap<&'static str, u64> = live.iter().map(|p| (p.as_str(), 0)).collect();
    let mut open_allocations = 0u64;
    let counted = store
        .read(|txn| {
            // Open allocations belong to live sessions: read only theirs.
            let live = live_sessions(txn)?;
            let mut open = 0u64;
            for s in &live {
                open += gpu_booking::open_of_session(txn, &s.id)?;
            }
            Ok((live.into_iter().map(|s| s.phase).collect::<Vec<Phase>>(), open))
        })
        .await;
    match counted {
        Ok((phases, open)) => {
            for p in phases.into_iter().filter(|p| !p.is_final()) {
                *by_phase.entry(p.as_str()).or_default() += 1;
            }
            open_allocations = open;
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read sessions"),
    }
    let _ = writeln!(out, "# HELP gshare_sessions Live sessions by phase.");
    let _ = writeln!(out, "# TYPE gshare_sessions gauge");
    for (phase, n) in by_phase {
        let _ = writeln!(out, "gshare_sessions{{phase=\"{phase}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP gshare_gpu_allocations_open GPU allocations held by sessions.");
    let _ = writeln!(out, "# TYPE gshare_gpu_allocations_open gauge");
    let _ = writeln!(out, "gshare_gpu_allocations_open {open_allocations}");
}
