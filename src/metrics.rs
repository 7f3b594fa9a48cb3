//! `GET /metrics`: the Prometheus text (format 0.0.4), put together here from each part's own
//! renderer (inventory: callbacks and clusters; sessions; snapshots; the operators), plus the
//! verified-token caches, the state store's writer (commit latency, each commit one fsync; batch
//! sizes; queue depth) and the state file's filesystem.
//!
//! Every part reads counters its writes keep or tables bounded by the clusters, never the
//! sessions, so a scrape costs the same at 10 sessions or 10,000 (`cargo bench --bench metrics`).
//!
//! Who sees what: with `metrics_token` set, the page needs `Authorization: Bearer <token>` (or an
//! admin token or console cookie) and shows per-cluster series with `cluster_id`. Without it the
//! page is open, like `/healthz`, and shows no cluster id: each per-cluster family is reduced to
//! one series (the sum, or the worst cluster's value; see [`REDUCE`]), enough for the shipped
//! alerts to fire. Per-cluster series exist only for registered clusters either way; no label is
//! per session or per user.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa_axum::router::OpenApiRouter;

use crate::App;
use crate::auth::guard::AdminCaller;
use crate::clusters::model::{CLUSTERS, ClusterRecord};
use crate::http::error::ApiError;
use crate::http::extract::bearer_token;
use crate::store::{BATCH_BUCKETS, COMMIT_BUCKETS, Store};

pub fn routes<D: Docs>() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(D: metrics))
}

/// What a caller may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Per-cluster series with their `cluster_id` (the metrics token or an admin).
    PerCluster,
    /// Per-cluster families reduced to one series each, no cluster ids (no `metrics_token` set).
    Anonymous,
}

/// Prometheus metrics: callbacks by route and status (and by cluster), token-cache hits, store
/// commit latency, batch sizes and writer queue depth, the state file's filesystem, clusters by
/// status and their operators' last reports and tokens, sessions by phase, GPU allocations,
/// snapshots. Counts only. With `metrics_token` set it needs that token (or an admin token) as
/// `Authorization: Bearer`; without, it is open and names no cluster.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses(
        (status = 200, content_type = "text/plain; version=0.0.4", body = String),
        (status = 401, body = crate::http::error::ErrorBody, description = "metrics_token is set and was not sent")))]
async fn metrics(State(app): State<Arc<App>>, req: Request) -> Response {
    let (mut parts, _) = req.into_parts();
    let view = match view_for(&app, &mut parts).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let text = render(&app, view).await;
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"))], text)
        .into_response()
}

/// The metrics token (its SHA-256 compared in constant time) or an admin's credentials see per-cluster
/// series; anyone else the anonymous view, or 401 when a metrics token is set.
async fn view_for(app: &Arc<App>, parts: &mut axum::http::request::Parts) -> Result<View, ApiError> {
    // Digests first, so that the comparison's time says nothing about the token's length either.
    if let (Some(want), Some(got)) = (&app.config.metrics_token, bearer_token(&parts.headers))
        && bool::from(Sha256::digest(want.expose().as_bytes()).ct_eq(&Sha256::digest(got.as_bytes())))
    {
        return Ok(View::PerCluster);
    }
    if AdminCaller::from_request_parts(parts, app).await.is_ok() {
        return Ok(View::PerCluster);
    }
    match app.config.metrics_token {
        Some(_) => Err(ApiError::unauthenticated(
            "/metrics needs the metrics_token (Authorization: Bearer <metrics_token>) or an admin token",
        )),
        None => Ok(View::Anonymous),
    }
}

/// The exposition text.
pub async fn render(app: &App, view: View) -> String {
    let read = app.store.read(|txn| {
        let mut live = Vec::new();
        for (id, c) in CLUSTERS.list(txn)? {
            if c.is_live() {
                let heartbeat_at = crate::inventory::model::CLUSTER_COUNTS.get(txn, &id)?.and_then(|k| k.heartbeat_at);
                live.push((c, heartbeat_at));
            }
        }
        Ok(live)
    });
    let clusters: Vec<(ClusterRecord, Option<i64>)> = match read.await {
        Ok(live) => live,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read clusters");
            Vec::new()
        }
    };
    let writes = {
        let store = app.store.clone();
        tokio::task::spawn_blocking(move || store.write_health()).await.unwrap_or_default()
    };
    let mut out = String::with_capacity(8192);
    process(app, &mut out);
    crate::inventory::metrics::render(&app.inventory.metrics, &clusters, &mut out);
    token_caches(app, &mut out);
    store(&app.store, &mut out);
    state_filesystem(app, &mut out);
    store_writes(&writes, app, &mut out);
    crate::sessions::metrics::render(&app.store, &mut out).await;
    snapshots(app, &mut out);
    out.push_str(&app.operator.metrics().await);
    let registered: HashSet<&str> = clusters.iter().map(|(c, _)| c.id.as_str()).collect();
    per_cluster(&out, &registered, view)
}

/// How an anonymous view reduces a per-cluster family to one series: what the alerts need (the
/// oldest report, the earliest expiry, the most failures; a sum for counters). A family with a
/// `cluster_id` label that is not listed here is left out of the anonymous view.
pub const REDUCE: &[(&str, Reduce)] = &[
    ("gshare_callbacks_by_cluster_total", Reduce::Sum),
    ("gshare_operator_last_report_timestamp_seconds", Reduce::Min),
    ("gshare_operator_token_expiry_seconds", Reduce::Min),
    ("gshare_operator_token_renewal_failures", Reduce::Max),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Min,
    Max,
}

impl Reduce {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Self::Sum => a + b,
            Self::Min => a.min(b),
            Self::Max => a.max(b),
        }
    }
}

/// `cluster_id="…"` in a sample line: the byte range of the label (with one neighbouring comma)
/// and its value.
fn cluster_label(line: &str) -> Option<(std::ops::Range<usize>, &str)> {
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    let labels = &line[open + 1..close];
    let mut at = 0;
    // Label pairs are `name="value"` separated by commas; values escape `"` and `\`.
    while at < labels.len() {
        let eq = at + labels.get(at..)?.find("=\"")?;
        let name = &labels[at..eq];
        let mut end = eq + 2;
        let bytes = labels.as_bytes();
        while end < labels.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let value = labels.get(eq + 2..end)?;
        let next = end + 1;
        let rest = labels.get(next..).unwrap_or("");
        if name == "cluster_id" {
            // Take the comma after it, else the one before it.
            let (from, to) = if rest.starts_with(',') {
                (at, next + 1)
            } else if at > 0 {
                (at - 1, next)
            } else {
                (at, next)
            };
            return Some((open + 1 + from..open + 1 + to, value));
        }
        at = next + usize::from(rest.starts_with(','));
    }
    None
}

/// Keeps per-cluster samples of registered clusters only, and in the anonymous view folds them
/// into one series per family and remaining labels ([`REDUCE`]).
fn per_cluster(text: &str, registered: &HashSet<&str>, view: View) -> String {
    enum Line<'a> {
        Text(&'a str),
        Folded(usize),
    }
    let mut lines = Vec::new();
    let mut folded: Vec<(String, f64)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let Some((range, id)) = (!line.starts_with('#')).then(|| cluster_label(line)).flatten() else {
            lines.push(Line::Text(line));
            continue;
        };
        if !registered.contains(id) {
            continue;
        }
        if view == View::PerCluster {
            lines.push(Line::Text(line));
            continue;
        }
        let name = &line[..line.find('{').unwrap_or(line.len())];
        let Some(rule) = REDUCE.iter().find(|(n, _)| *n == name).map(|(_, r)| *r) else { continue };
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let mut key = format!("{}{}", &series[..range.start], &series[range.end..]);
        if key.ends_with("{}") {
            key.truncate(key.len() - 2);
        }
        match index.get(&key) {
            Some(&i) => folded[i].1 = rule.apply(folded[i].1, value),
            None => {
                index.insert(key.clone(), folded.len());
                lines.push(Line::Folded(folded.len()));
                folded.push((key, value));
            }
        }
    }
    let mut out = String::with_capacity(text.len());
    for l in lines {
        match l {
            Line::Text(t) => out.push_str(t),
            Line::Folded(i) => {
                let _ = write!(out, "{} {}", folded[i].0, folded[i].1);
            }
        }
        out.push('\n');
    }
    out
}

fn process(app: &App, out: &mut String) {
    let _ = writeln!(out, "# HELP gshare_build_info The running gshare's version (always 1).");
    let _ = writeln!(out, "# TYPE gshare_build_info gauge");
    let _ = writeln!(out, "gshare_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "# HELP gshare_process_start_time_seconds When this process opened its state.");
    let _ = writeln!(out, "# TYPE gshare_process_start_time_seconds gauge");
    let _ = writeln!(out, "gshare_process_start_time_seconds {}", app.started_at_ms as f64 / 1000.0);
}

/// The filesystem that holds the state file (statvfs of the data directory), and the file.
fn state_filesystem(app: &App, out: &mut String) {
    let dir = &app.config.data_dir;
    let (avail, size) = match fs4::statvfs(dir) {
        Ok(st) => (Some(st.available_space()), Some(st.total_space())),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "metrics: cannot statvfs the data directory");
            (None, None)
        }
    };
    let _ = writeln!(
        out,
        "# HELP gshare_state_filesystem_avail_bytes Bytes free for gshare on the filesystem of its data directory."
    );
    let _ = writeln!(out, "# TYPE gshare_state_filesystem_avail_bytes gauge");
    if let Some(v) = avail {
        let _ = writeln!(out, "gshare_state_filesystem_avail_bytes {v}");
    }
    let _ = writeln!(out, "# HELP gshare_state_filesystem_size_bytes Size of the filesystem of the data directory.");
    let _ = writeln!(out, "# TYPE gshare_state_filesystem_size_bytes gauge");
    if let Some(v) = size {
        let _ = writeln!(out, "gshare_state_filesystem_size_bytes {v}");
    }
    let _ = writeln!(out, "# HELP gshare_state_file_size_bytes Size of the state file.");
    let _ = writeln!(out, "# TYPE gshare_state_file_size_bytes gauge");
    match std::fs::metadata(app.store.path()) {
        Ok(m) => {
            let _ = writeln!(out, "gshare_state_file_size_bytes {}", m.len());
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot stat the state file"),
    }
}

/// Whether the state file writes (a full disk refuses writes; see `store::health`), and what the
/// audit writer holds or lost meanwhile.
fn store_writes(w: &crate::store::WriteHealth, app: &App, out: &mut String) {
    let lines: [(&str, &str, &str, u64); 7] = [
        (
            "gshare_store_writable",
            "gauge",
            "1 while the state file accepts writes, 0 while they are refused (e.g. a full disk).",
            u64::from(w.writable),
        ),
        (
            "gshare_store_storage_full",
            "gauge",
            "1 while writes are refused because the data directory's filesystem is full.",
            u64::from(!w.writable && w.full),
        ),
        (
            "gshare_store_write_refusals_total",
            "counter",
            "Writes refused up front while the state file could not write.",
            w.refused,
        ),
        (
            "gshare_store_write_failures_total",
            "counter",
            "Writes that failed at the OS (no space, I/O error).",
            w.failures,
        ),
        ("gshare_store_reopens_total", "counter", "Times the state file was reopened after a failed write.", w.reopens),
        (
            "gshare_audit_entries_held",
            "gauge",
            "Audit entries kept in memory until the state file writes again.",
            app.audit.held() as u64,
        ),
        (
            "gshare_audit_entries_dropped_total",
            "counter",
            "Audit entries lost (more held than the bound while the state file could not write).",
            app.audit.dropped(),
        ),
    ];
    for (name, kind, help, value) in lines {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    }
}

fn snapshots(app: &App, out: &mut String) {
    app.snapshots.render_metrics(out);
    let _ = writeln!(out, "# HELP gshare_snapshot_interval_seconds How often snapshots are scheduled (0: off).");
    let _ = writeln!(out, "# TYPE gshare_snapshot_interval_seconds gauge");
    let _ = writeln!(out, "gshare_snapshot_interval_seconds {}", app.config.snapshot_interval.as_secs());
    let _ = writeln!(
        out,
        "# HELP gshare_snapshot_last_attempt_failed 1 while the last snapshot attempt failed (cleared by the next success)."
    );
    let _ = writeln!(out, "# TYPE gshare_snapshot_last_attempt_failed gauge");
    let failed = app.snapshots.status().last_error.is_some();
    let _ = writeln!(out, "gshare_snapshot_last_attempt_failed {}", u8::from(failed));
}

/// Each family's lines together (HELP, TYPE, its samples), as the text format asks.
fn token_caches(app: &App, out: &mut String) {
    let stats = [
        (app.auth.internal.audience(), app.auth.internal.cache_stats()),
        (app.auth.api.audience(), app.auth.api.cache_stats()),
    ];
    let _ = writeln!(
        out,
        "# HELP gshare_token_verify_cache_hits_total Bearer tokens answered from the verified-token cache."
    );
    let _ = writeln!(out, "# TYPE gshare_token_verify_cache_hits_total counter");
    for (audience, (hits, _)) in &stats {
        let _ = writeln!(out, "gshare_token_verify_cache_hits_total{{audience=\"{audience}\"}} {hits}");
    }
    let _ = writeln!(out, "# HELP gshare_token_verify_cache_misses_total Bearer tokens that needed a signature check.");
    let _ = writeln!(out, "# TYPE gshare_token_verify_cache_misses_total counter");
    for (audience, (_, misses)) in &stats {
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
    let _ = writeln!(out, "# HELP gshare_store_group_commits_total Group commits of the store's writer.");
    let _ = writeln!(out, "# TYPE gshare_store_group_commits_total counter");
    let _ = writeln!(out, "gshare_store_group_commits_total {}", s.batches);
    let _ = writeln!(
        out,
        "# HELP gshare_store_group_commit_writes_total Writes the group commits carried (committed together, one fsync per commit)."
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP gshare_callbacks_by_cluster_total x
# TYPE gshare_callbacks_by_cluster_total counter
gshare_callbacks_by_cluster_total{route=\"/internal/a\",cluster_id=\"clu_a\"} 3
gshare_callbacks_by_cluster_total{route=\"/internal/a\",cluster_id=\"clu_b\"} 4
gshare_callbacks_by_cluster_total{route=\"/internal/b\",cluster_id=\"clu_a\"} 1
gshare_callbacks_by_cluster_total{route=\"/internal/b\",cluster_id=\"clu_gone\"} 100
# TYPE gshare_operator_token_expiry_seconds gauge
gshare_operator_token_expiry_seconds{cluster_id=\"clu_a\"} 2000
gshare_operator_token_expiry_seconds{cluster_id=\"clu_b\"} 1000.5
gshare_operator_token_expiry_seconds{cluster_id=\"clu_gone\"} 10
# TYPE gshare_operator_token_renewal_failures gauge
gshare_operator_token_renewal_failures{cluster_id=\"clu_a\"} 2
gshare_operator_token_renewal_failures{cluster_id=\"clu_b\"} 0
# TYPE gshare_unlisted gauge
gshare_unlisted{cluster_id=\"clu_a\",x=\"y\"} 5
gshare_sessions{phase=\"running\"} 7
";

    #[test]
    fn anonymous_folds_per_cluster_families_and_names_no_cluster() {
        let registered = HashSet::from(["clu_a", "clu_b"]);
        let out = per_cluster(TEXT, &registered, View::Anonymous);
        assert!(!out.contains("clu_"), "{out}");
        for want in [
            "gshare_callbacks_by_cluster_total{route=\"/internal/a\"} 7\n",
            // clu_gone is not registered: its 100 is not counted.
            "gshare_callbacks_by_cluster_total{route=\"/internal/b\"} 1\n",
            "gshare_operator_token_expiry_seconds 1000.5\n",
            "gshare_operator_token_renewal_failures 2\n",
            "# TYPE gshare_unlisted gauge\n",
            "gshare_sessions{phase=\"running\"} 7\n",
        ] {
            assert!(out.contains(want), "{want} missing from\n{out}");
        }
        // A family REDUCE does not list is left out, not shown with its ids.
        assert!(!out.contains("gshare_unlisted{"), "{out}");
    }

    #[test]
    fn per_cluster_view_keeps_registered_clusters_only() {
        let registered = HashSet::from(["clu_a", "clu_b"]);
        let out = per_cluster(TEXT, &registered, View::PerCluster);
        assert!(!out.contains("clu_gone"), "{out}");
        assert_eq!(out.lines().count(), TEXT.lines().count() - 2);
        assert!(out.contains("gshare_unlisted{cluster_id=\"clu_a\",x=\"y\"} 5\n"), "{out}");
    }

    #[test]
    fn the_cluster_label_is_found_wherever_it_stands() {
        let cut = |line: &str| {
            let (r, id) = cluster_label(line).unwrap();
            (format!("{}{}", &line[..r.start], &line[r.end..]), id.to_string())
        };
        assert_eq!(cut("m{cluster_id=\"a\"} 1"), ("m{} 1".into(), "a".into()));
        assert_eq!(cut("m{cluster_id=\"a\",x=\"1\"} 1"), ("m{x=\"1\"} 1".into(), "a".into()));
        assert_eq!(cut("m{x=\"1\",cluster_id=\"a\"} 1"), ("m{x=\"1\"} 1".into(), "a".into()));
        assert_eq!(
            cut("m{x=\"q\\\"{,}\",cluster_id=\"a\",y=\"2\"} 1"),
            ("m{x=\"q\\\"{,}\",y=\"2\"} 1".into(), "a".into())
        );
        assert!(cluster_label("m{x=\"1\"} 1").is_none());
        assert!(cluster_label("m 1").is_none());
        // Malformed lines do not panic.
        for bad in ["m{cluster_id=\"open} 1", "m{cluster_id=\"a\\", "m{=\"} 1", "m{cluster_id} 1"] {
            let _ = cluster_label(bad);
        }
    }
}
