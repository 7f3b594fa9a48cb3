//! The sessions' part of `GET /metrics`: live sessions by phase, when the oldest of each phase
//! was created, and the GPU allocations they hold (the document is put together in
//! `crate::metrics`). Everything comes from counters the writes keep (`SESSION_COUNTS`,
//! `gpu_booking::ALLOCATION_TOTALS`) and the first key of each phase's index, so a scrape reads
//! a dozen rows however many sessions there are.

use std::fmt::Write;

use super::model::{ListIndex, Phase, SESSIONS, SESSIONS_BY_PHASE};
use crate::inventory::gpu_booking::{self, OpenTotals};
use crate::store::{KeyOrder, Store, StoreError};

/// The phases a live session can be in.
const LIVE: [Phase; 5] = [Phase::Pending, Phase::Preparing, Phase::Running, Phase::Paused, Phase::Terminating];

/// Per live phase: how many sessions, and the creation time (ms) of the oldest.
struct Counted {
    phases: Vec<(Phase, u64, Option<i64>)>,
    open: OpenTotals,
}

fn count(txn: &redb::ReadTransaction) -> Result<Counted, StoreError> {
    let mut phases = Vec::with_capacity(LIVE.len());
    for p in LIVE {
        let n = ListIndex::Phase.count(txn, p.as_str())?;
        // The phase index's keys are `<phase>\0<session id>` and ids are ULIDs: the first key is
        // the oldest session.
        let mut oldest_id = None;
        if n > 0 {
            let prefix = ListIndex::prefix(p.as_str());
            SESSIONS_BY_PHASE.walk(txn, &prefix, None, KeyOrder::Ascending, |id| {
                oldest_id = Some(id.to_string());
                false
            })?;
        }
        let oldest = match oldest_id {
            Some(id) => SESSIONS.get(txn, &id)?.map(|s| s.created_at),
            None => None,
        };
        phases.push((p, n, oldest));
    }
    Ok(Counted { phases, open: gpu_booking::open_totals(txn)? })
}

pub async fn render(store: &Store, out: &mut String) {
    let counted = match store.read(count).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read session counts");
            Counted { phases: LIVE.iter().map(|p| (*p, 0, None)).collect(), open: OpenTotals::default() }
        }
    };
    let _ = writeln!(out, "# HELP gshare_sessions Live sessions by phase.");
    let _ = writeln!(out, "# TYPE gshare_sessions gauge");
    for (phase, n, _) in &counted.phases {
        let _ = writeln!(out, "gshare_sessions{{phase=\"{}\"}} {n}", phase.as_str());
    }
    let _ = writeln!(
        out,
        "# HELP gshare_sessions_oldest_created_timestamp_seconds When the oldest live session of each phase was created (0: none in that phase)."
    );
    let _ = writeln!(out, "# TYPE gshare_sessions_oldest_created_timestamp_seconds gauge");
    for (phase, _, oldest) in &counted.phases {
        let secs = oldest.map_or(0.0, |ms| ms as f64 / 1000.0);
        let _ =
            writeln!(out, "gshare_sessions_oldest_created_timestamp_seconds{{phase=\"{}\"}} {secs}", phase.as_str());
    }
    let _ = writeln!(out, "# HELP gshare_gpu_allocations_open GPU allocations held by sessions.");
    let _ = writeln!(out, "# TYPE gshare_gpu_allocations_open gauge");
    let _ = writeln!(out, "gshare_gpu_allocations_open {}", counted.open.allocations);
    let _ = writeln!(
        out,
        "# HELP gshare_gpu_memory_booked_bytes GPU memory the open allocations book on their cards (a whole card counts in full)."
    );
    let _ = writeln!(out, "# TYPE gshare_gpu_memory_booked_bytes gauge");
    let _ = writeln!(out, "gshare_gpu_memory_booked_bytes {}", counted.open.gpu_mem_mb.saturating_mul(1024 * 1024));
}
