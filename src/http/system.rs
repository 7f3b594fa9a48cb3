//! Process-level routes: liveness, readiness, the OpenAPI document and its reference page.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::error::ApiError;
use crate::App;
use crate::auth::guard::AdminCaller;

pub fn routes<D: Docs>() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(D: healthz)).routes(routes!(D: readyz))
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`
    pub status: &'static str,
    pub version: &'static str,
}

/// Liveness: the process is up and answering.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, body = Health)))]
async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok", version: env!("CARGO_PKG_VERSION") })
}

#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready`
    pub status: &'static str,
    pub store: bool,
    /// The state file accepts writes (false while a full disk refuses them; reads go on).
    pub store_writable: bool,
    pub keys: bool,
    /// The last snapshot's result (a failing snapshot does not make the server unready). To
    /// callers without an admin token it names no path and no error: `last_file` and `restore`
    /// are left out and `last_error` only says that the last attempt failed.
    pub snapshot: crate::snapshot::SnapshotStatus,
}

/// What `last_error` says to a caller who is not an admin.
pub const SNAPSHOT_FAILED_ANONYMOUS: &str = "the last snapshot failed (details: /readyz with an admin token)";

/// Readiness: the state file is open and the signing keys are loaded. Admins (bearer token or
/// console cookie) also see the snapshot's file and last error.
#[utoipa::path(get, path = "/readyz", tag = "system", responses(
    (status = 200, body = Readiness),
    (status = 503, body = super::error::ErrorBody, description = "store or keys not usable, or the store cannot write (`details.store_writable`, `details.storage_full`)")))]
async fn readyz(State(app): State<Arc<App>>, req: Request) -> Result<axum::Json<Readiness>, ApiError> {
    let store = app.store.is_healthy();
    let keys = app.auth.internal.has_signer();
    // Blocking: while writes are refused this may try one probe write.
    let writes = {
        let s = app.store.clone();
        tokio::task::spawn_blocking(move || s.write_health()).await.unwrap_or_default()
    };
    if !writes.writable {
        let message = if writes.full {
            "the state file's filesystem is full: writes are refused until space is freed (reads go on)"
        } else {
            "the state file cannot write: writes are refused (reads go on)"
        };
        return Err(ApiError::unavailable(message).with_details(serde_json::json!({
            "store": store, "store_writable": false, "storage_full": writes.full,
            "avail_bytes": writes.avail_bytes, "keys": keys })));
    }
    let store_writable = true;
    if store && keys {
        let mut snapshot = app.snapshots.status();
        let (mut parts, _) = req.into_parts();
        if AdminCaller::from_request_parts(&mut parts, &app).await.is_err() {
            snapshot.last_file = None;
            snapshot.restore = None;
            if snapshot.last_error.is_some() {
                snapshot.last_error = Some(SNAPSHOT_FAILED_ANONYMOUS.to_string());
            }
        }
        Ok(axum::Json(Readiness { status: "ready", store, store_writable, keys, snapshot }))
    } else {
        Err(ApiError::unavailable("not ready").with_details(serde_json::json!({ "store": store, "keys": keys })))
    }
}

/// `GET /api/openapi.json`: the committed document, which tests hold equal to the handlers' (see `ApiDocs`).
pub async fn openapi_json(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let docs = app.api_docs.get().await?;
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], docs.json)
        .into_response())
}

/// `GET /api/docs`: a self-contained reference page (no scripts, no CDN).
pub async fn reference_page(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let docs = app.api_docs.get().await?;
    let mut res = Html(docs.html).into_response();
    res.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    );
    Ok(res)
}
