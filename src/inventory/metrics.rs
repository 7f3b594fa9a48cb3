//! `GET /metrics`: Prometheus text (format 0.0.4), written by hand: operator callbacks by route
//! and status, the verified-token caches, store commit latency and batching, clusters by status.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::App;
use crate::clusters::model::{CLUSTERS, ClusterStatus};

/// Callback counts by (route template, status).
#[derive(Debug, Default)]
pub struct Callbacks {
    counts: Mutex<BTreeMap<(Arc<str>, u16), u64>>,
}

impl Callbacks {
    pub fn count(&self, route: &str, status: u16) {
        let mut m = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        // Look up by reference first: the common case allocates nothing.
        if let Some((_, n)) = m.iter_mut().find(|((r, s), _)| *s == status && &**r == route) {
            *n += 1;
            return;
        }
        m.insert((Arc::from(route), status), 1);
    }

    pub fn snapshot(&self) -> Vec<(String, u16, u64)> {
        let m = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().map(|((r, s), n)| (r.to_string(), *s, *n)).collect()
    }
}

/// Middleware (on the whole router): counts every answer of an `/internal` route.
pub async fn count_callbacks(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string());
    let res = next.run(req).await;
    if let Some(route) = route.filter(|r| r.starts_with("/internal/")) {
        app.inventory.metrics.count(&route, res.status().as_u16());
    }
    res
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The exposition text.
pub async fn render(app: &App) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP gshare_callbacks_total Operator callbacks answered, by route and status.");
    let _ = writeln!(out, "# TYPE gshare_callbacks_total counter");
    for (route, status, n) in app.inventory.metrics.snapshot() {
        let _ = writeln!(out, "gshare_callbacks_total{{route=\"{}\",status=\"{status}\"}} {n}", escape(&route));
    }

    let _ = writeln!(
        out,
        "# HELP gshare_token_verify_cache_hits_total Bearer tokens answered from the verified-token cache."
    );
    let _ = writeln!(out, "# TYPE gshare_token_verify_cache_hits_total counter");
    let _ = writeln!(out, "# HELP gshare_token_verify_cache_misses_total Bearer tokens that needed a signature check.");
    let _ = writeln!(out, "# TYPE gshare_token_verify_cache_misses_total counter");
    for (audience, (hits, misses)) in [
        (app.auth.internal.audience(), app.auth.internal.cache_stats()),
        (app.auth.api.audience(), app.auth.api.cache_stats()),
    ] {
        let _ = writeln!(out, "gshare_token_verify_cache_hits_total{{audience=\"{audience}\"}} {hits}");
        let _ = writeln!(out, "gshare_token_verify_cache_misses_total{{audience=\"{audience}\"}} {misses}");
    }

    let s = app.store.commit_stats();
    let _ = writeln!(out, "# HELP gshare_store_commit_seconds Durable commits of the state file (each one fsync).");
    let _ = writeln!(out, "# TYPE gshare_store_commit_seconds histogram");
    for (le, n) in crate::store::COMMIT_BUCKETS.iter().zip(&s.cumulative) {
        let _ = writeln!(out, "gshare_store_commit_seconds_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "gshare_store_commit_seconds_bucket{{le=\"+Inf\"}} {}", s.count);
    let _ = writeln!(out, "gshare_store_commit_seconds_sum {}", s.sum_seconds);
    let _ = writeln!(out, "gshare_store_commit_seconds_count {}", s.count);
    let _ = writeln!(out, "# HELP gshare_store_group_commits_total Group commits, and the writes they carried.");
    let _ = writeln!(out, "# TYPE gshare_store_group_commits_total counter");
    let _ = writeln!(out, "gshare_store_group_commits_total {}", s.batches);
    let _ = writeln!(out, "# TYPE gshare_store_group_commit_writes_total counter");
    let _ = writeln!(out, "gshare_store_group_commit_writes_total {}", s.batched_ops);
    let _ = writeln!(
        out,
        "# HELP gshare_store_unchanged_batches_total Batches that changed nothing (rolled back, no fsync)."
    );
    let _ = writeln!(out, "# TYPE gshare_store_unchanged_batches_total counter");
    let _ = writeln!(out, "gshare_store_unchanged_batches_total {}", s.skipped_batches);

    let mut by_status: BTreeMap<&'static str, u64> =
        [ClusterStatus::Pending, ClusterStatus::Connected, ClusterStatus::Degraded, ClusterStatus::Unreachable]
            .iter()
            .map(|s| (s.as_str(), 0))
            .collect();
    match app.store.read(|txn| CLUSTERS.list(txn)).await {
        Ok(all) => {
            for (_, c) in all.iter().filter(|(_, c)| c.is_live()) {
                *by_status.entry(c.status.as_str()).or_default() += 1;
            }
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read clusters"),
    }
    let _ = writeln!(out, "# HELP gshare_clusters Registered clusters by status.");
    let _ = writeln!(out, "# TYPE gshare_clusters gauge");
    for (status, n) in by_status {
        let _ = writeln!(out, "gshare_clusters{{status=\"{status}\"}} {n}");
    }

    use crate::sessions::model::{Phase, live_sessions};
    let live = [Phase::Pending, Phase::Preparing, Phase::Running, Phase::Paused, Phase::Terminating];
    let mut by_phase: BTreeMap<&'static str, u64> = live.iter().map(|p| (p.as_str(), 0)).collect();
    let mut open_allocations = 0u64;
    let counted = app
        .store
        .read(|txn| {
            // Open allocations belong to live sessions: read only theirs.
            let live = live_sessions(txn)?;
            let mut open = 0u64;
            for s in &live {
                open += super::gpu_booking::open_of_session(txn, &s.id)?;
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
    app.snapshots.render_metrics(&mut out);
    out.push_str(&app.operator.metrics().await);
    out
}
