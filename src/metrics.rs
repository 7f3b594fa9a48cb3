//! `GET /metrics`: the Prometheus text (format 0.0.4), put together here from each part's own
//! renderer (inventory: callbacks and clusters; sessions; snapshots; the operators), plus the
//! verified-token caches and the state store's writer: commit latency (each commit one fsync),
//! batch sizes, queue depth.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::store::{BATCH_BUCKETS, COMMIT_BUCKETS, Store};

pub fn routes() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(metrics))
}

/// Prometheus metrics: callbacks by route and status and by route and cluster, token-cache hits,
/// store commit latency, batch sizes and writer queue depth, clusters by status, sessions by
/// phase. Unauthenticated, like `/healthz`; it carries counts only.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, content_type = "text/plain; version=0.0.4", body = String)))]
async fn metrics(State(app): State<Arc<App>>) -> Response {
    let text = render(&app).await;
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"))], text)
        .into_response()
}

/// The exposition text.
pub async fn render(app: &App) -> String {
    let mut out = String::new();
    crate::inventory::metrics::render(&app.inventory.metrics, &app.store, &mut out).await;
    token_caches(app, &mut out);
    store(&app.store, &mut out);
    crate::sessions::metrics::render(&app.store, &mut out).await;
    app.snapshots.render_metrics(&mut out);
    out.push_str(&app.operator.metrics().await);
    out
}

fn token_caches(app: &App, out: &mut String) {
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
}

fn store(store: &Store, out: &mut String) {
    let s = store.commit_stats();
    let _ = writeln!(out, "# HELP gshare_store_commit_seconds Durable commits of the state file (each one fsync).");
    let _ = writeln!(out, "# TYPE gshare_store_commit_seconds histogram");
    for (le, n) in COMMIT_BUCKETS.iter().zip(&s.cumulative) {
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
    let _ = writeln!(
        out,
        "# HELP gshare_store_batch_writes Writes per batch the store's writer ran (committed or rolled back)."
    );
    let _ = writeln!(out, "# TYPE gshare_store_batch_writes histogram");
    for (le, n) in BATCH_BUCKETS.iter().zip(&s.batch_cumulative) {
        let _ = writeln!(out, "gshare_store_batch_writes_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "gshare_store_batch_writes_bucket{{le=\"+Inf\"}} {}", s.batch_count);
    let _ = writeln!(out, "gshare_store_batch_writes_sum {}", s.batch_sum);
    let _ = writeln!(out, "gshare_store_batch_writes_count {}", s.batch_count);
    let _ = writeln!(out, "# HELP gshare_store_writer_queue_depth Batched writes waiting for the store's writer.");
    let _ = writeln!(out, "# TYPE gshare_store_writer_queue_depth gauge");
    let _ = writeln!(out, "gshare_store_writer_queue_depth {}", store.writer_queue_depth());
}
