//! `POST /api/v1/snapshots` (take one now: into `snapshot_dir`, or returned as the body with
//! `download: true`) and `GET /api/v1/snapshots` (list `snapshot_dir`). The CLI uses these while a
//! server holds the state file.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::{SnapshotError, SnapshotInfo, SnapshotStatus, check_reason};
use crate::audit::{self, AuditEntry, AuditResult, RequestMeta};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::extract::parse_json;

/// What the snapshot handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct SnapshotState {
    pub config: Arc<crate::config::Config>,
    pub snapshots: Arc<super::Snapshots>,
    pub audit: Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    SnapshotState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(D: create_snapshot, list_snapshots)).routes(routes!(D: snapshot_status))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// A short word recorded in the header and the file name (default `manual`).
    #[serde(default)]
    pub reason: Option<String>,
    /// `true`: answer with the snapshot file itself (application/octet-stream) and write nothing.
    #[serde(default)]
    pub download: bool,
}

impl From<SnapshotError> for ApiError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::Refused(m) => ApiError::field(&["body", "reason"], m, "value"),
            other => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, ErrorCode::SnapshotFailed, other.to_string()),
        }
    }
}

/// Take a snapshot of the state now (one read transaction, written atomically, 0600). Secrets
/// (key rings, kubeconfigs) are never in API snapshots; `gshare snapshot save --include-secrets`
/// adds them on the head node.
#[utoipa::path(post, path = "/api/v1/snapshots", tag = "snapshots", request_body = SnapshotRequest,
    responses(
        (status = 201, body = SnapshotInfo, description = "written into snapshot_dir"),
        (status = 200, content_type = "application/octet-stream", description = "download: the snapshot file"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "bad reason (also `pre-upgrade`, which only the unit's pre-start step gives)"),
        (status = 507, body = ErrorBody, description = "snapshot_failed: the directory is not writable or full; older snapshots are kept"),
    ))]
async fn create_snapshot(
    State(app): State<SnapshotState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: SnapshotRequest = if body.is_empty() { SnapshotRequest::default() } else { parse_json(&body)? };
    let reason = req.reason.unwrap_or_else(|| "manual".into());
    check_reason(&reason)?;
    if reason == super::PRE_UPGRADE {
        // Kept apart from the pruning of the others: only the unit's pre-start step makes them.
        return Err(ApiError::field(
            &["body", "reason"],
            "`pre-upgrade` snapshots are taken only before an upgrade starts the server (`gshare snapshot save --pre-upgrade`)",
            "value",
        ));
    }
    if req.download {
        let bytes = app.snapshots.build(&reason).await?;
        let entry = AuditEntry::new(&meta, admin.actor(), "snapshot.download", AuditResult::Success)
            .details(serde_json::json!({ "size_bytes": bytes.len(), "reason": reason }));
        audit::record(&app.audit, entry).await;
        return Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"))],
            bytes,
        )
            .into_response());
    }
    let result = app.snapshots.take(&reason).await;
    let entry = AuditEntry::new(
        &meta,
        admin.actor(),
        "snapshot.save",
        if result.is_ok() { AuditResult::Success } else { AuditResult::Failure },
    )
    .target(result.as_ref().map(|i| i.name.clone()).unwrap_or_default());
    audit::record(&app.audit, entry).await;
    Ok((StatusCode::CREATED, axum::Json(result?)).into_response())
}

/// The snapshots in `snapshot_dir`, oldest first, with the last scheduled result.
#[utoipa::path(get, path = "/api/v1/snapshots", tag = "snapshots",
    responses((status = 200, body = Vec<SnapshotInfo>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn list_snapshots(
    State(app): State<SnapshotState>,
    _admin: AdminCaller,
) -> Result<axum::Json<Vec<SnapshotInfo>>, ApiError> {
    let dir = app.config.snapshot_dir.clone();
    let list = tokio::task::spawn_blocking(move || super::list(&dir)).await.map_err(ApiError::internal)??;
    Ok(axum::Json(list))
}

/// `GET /api/v1/snapshots/status`: the schedule and the last result (for the console).
#[derive(Debug, Clone, serde::Serialize, ToSchema)]
pub struct SnapshotSchedule {
    /// Seconds between scheduled snapshots; 0 when the schedule is off.
    pub interval_s: u64,
    /// Snapshots kept in `dir` (older ones are pruned after each new one).
    pub keep: usize,
    pub dir: String,
    /// When the next scheduled snapshot is due (RFC 3339), if the schedule is on and one has
    /// succeeded (the first is taken within five minutes of start).
    pub next_at: Option<String>,
    pub status: SnapshotStatus,
}

/// The snapshot schedule and the last result: time, file, size, error, failures.
#[utoipa::path(get, path = "/api/v1/snapshots/status", tag = "snapshots",
    responses((status = 200, body = SnapshotSchedule), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn snapshot_status(State(app): State<SnapshotState>, _admin: AdminCaller) -> axum::Json<SnapshotSchedule> {
    let status = app.snapshots.status();
    let interval = app.config.snapshot_interval;
    let next_at = match status.last_success_ms {
        Some(ms) if !interval.is_zero() => Some(crate::clock::rfc3339_ms(ms + interval.as_millis() as i64)),
        _ => None,
    };
    axum::Json(SnapshotSchedule {
        interval_s: interval.as_secs(),
        keep: app.config.snapshot_keep,
        dir: app.config.snapshot_dir.display().to_string(),
        next_at,
        status,
    })
}
