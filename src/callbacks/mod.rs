//! The operator's contract in one room: every `/internal/*` route the gShare operator calls with
//! its internal JWT (contract §2). The wire types and their checks are [`wire`], the body
//! readers [`intake`]; the handlers here take a report in this order — caller (401/403), body
//! (400/413/422), checks (422), cluster scope (403) — and hand it to the domain that applies
//! it: nodes, GPUs, drift, health, volumes to `inventory`; session status, samples and the
//! operator's audit entries to `sessions`. (`/internal/connect/verify` is the ingress's
//! forward-auth call, not the operator's: `sessions` keeps it.)

pub mod intake;
pub mod wire;

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use crate::audit::RequestMeta;
use crate::auth::guard::Gate;
use crate::auth::guard::OperatorCaller;
use crate::clusters::ClusterId;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::parse_json;
use wire::*;

/// What the operator's callbacks use: the two rooms a report is handed to (made from the router
/// state by the composition root).
#[derive(Clone)]
pub struct CallbacksState {
    pub inventory: Arc<crate::inventory::Inventory>,
    pub sessions: Arc<crate::sessions::Sessions>,
    pub volumes: Arc<crate::volumes::Volumes>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    CallbacksState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: inventory_nodes))
        .routes(routes!(D: inventory_gpu_devices))
        .routes(routes!(D: inventory_drift))
        .routes(routes!(D: nodes_cordoned))
        .routes(routes!(D: nodes_decommissioning))
        .routes(routes!(D: nodes_decommissioned))
        .routes(routes!(D: health_events))
        .routes(routes!(D: volumes_sync))
        .routes(routes!(D: image_build_status))
        .routes(routes!(D: session_samples))
        .routes(routes!(D: session_status))
        .routes(routes!(D: audit_operator))
}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, Json(Accepted { accepted: true })).into_response()
}

/// 202 `{"accepted":false}`: read, understood, and nothing stored (the operator treats any 2xx as
/// done; a 4xx would be final for it too, and upstream answers 202 for these).
fn not_stored(what: &str, cluster: &ClusterId, name: &str) -> Response {
    tracing::warn!(cluster_id = %cluster, name, "{what} report names no usable object; nothing stored");
    (StatusCode::ACCEPTED, Json(Accepted { accepted: false })).into_response()
}

/// A payload naming another cluster is refused, not believed; absent or null passes.
fn scope(caller: &OperatorCaller, claimed: Option<&str>) -> Result<(), ApiError> {
    match claimed {
        Some(c) if c != caller.cluster_id.as_str() => Err(other_cluster(caller.cluster_id.as_str(), c)),
        _ => Ok(()),
    }
}

/// A refusal decided from stored data, answered for this caller.
fn refusal(caller: &OperatorCaller, r: Refusal) -> ApiError {
    r.into_error(Some(caller.cluster_id.as_str()))
}

/// Report one node's capacity and readiness (every 15 s per node).
#[utoipa::path(post, path = "/internal/inventory/nodes", tag = "internal",
    request_body = NodeReport,
    responses(
        (status = 202, body = Accepted, description = "stored (or a no-op: unknown/unregistered cluster, node being decommissioned)"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "cluster_id of another cluster: details {token_cluster, cluster_id}"),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody, description = "details.errors[{loc,msg,type}]"),
    ))]
async fn inventory_nodes(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::node_report(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    if !r.usable() {
        return Ok(not_stored("node", &caller.cluster_id, &r.node_id));
    }
    r.bound();
    app.inventory.report_node(&caller.cluster_id, r).await?;
    Ok(accepted())
}

/// Report one GPU (upsert by cluster and uuid; `used_*` are never overwritten).
#[utoipa::path(post, path = "/internal/inventory/gpu-devices", tag = "internal",
    request_body = GpuReport,
    responses(
        (status = 202, body = Accepted),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "cluster_id of another cluster"),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
async fn inventory_gpu_devices(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::gpu_report(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    if !r.usable() {
        return Ok(not_stored("GPU", &caller.cluster_id, &format!("{}/{}", r.node_id, r.uuid)));
    }
    r.bound();
    app.inventory.report_gpu(&caller.cluster_id, r).await?;
    Ok(accepted())
}

/// Used memory above total on a card: recorded and logged.
#[utoipa::path(post, path = "/internal/inventory/drift", tag = "internal",
    request_body = DriftReport,
    responses((status = 202, body = Accepted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn inventory_drift(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::drift(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    r.bound();
    app.inventory.report_drift(&caller.cluster_id, r).await?;
    Ok(accepted())
}

/// Nodes to cordon (the cluster is the token's), sorted.
#[utoipa::path(get, path = "/internal/nodes/cordoned", tag = "internal",
    responses((status = 200, body = Hostnames), (status = 401, body = ErrorBody)))]
async fn nodes_cordoned(State(app): State<CallbacksState>, caller: OperatorCaller) -> Result<Response, ApiError> {
    Ok(json_bytes(app.inventory.hostnames_json(&caller.cluster_id, false).await?))
}

/// A JSON answer rendered beforehand.
fn json_bytes(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// Nodes to delete from the cluster (the cluster is the token's), sorted.
#[utoipa::path(get, path = "/internal/nodes/decommissioning", tag = "internal",
    responses((status = 200, body = Hostnames), (status = 401, body = ErrorBody)))]
async fn nodes_decommissioning(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
) -> Result<Response, ApiError> {
    Ok(json_bytes(app.inventory.hostnames_json(&caller.cluster_id, true).await?))
}

/// The operator deleted a decommissioned Node: its row goes (audited as `node.delete`).
#[utoipa::path(post, path = "/internal/nodes/decommissioned", tag = "internal",
    request_body = Decommissioned,
    responses(
        (status = 202, body = Accepted, description = "`accepted:false` when no hostname was sent"),
        (status = 401, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
async fn nodes_decommissioned(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(hostname) = intake::decommissioned(&body)? else {
        return Ok((StatusCode::ACCEPTED, Json(Accepted { accepted: false })).into_response());
    };
    // Only a node being decommissioned matches; any other name is "already finalised" (202).
    if is_dns_subdomain(&hostname) {
        app.inventory.decommissioned(&caller.cluster_id, hostname).await?;
    }
    Ok(accepted())
}

/// A node health transition; `action: cordon` marks the node cordoned.
#[utoipa::path(post, path = "/internal/nodes/health-events", tag = "internal",
    request_body = HealthEvent,
    responses((status = 202, body = Accepted), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn health_events(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::health_event(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    r.bound();
    app.inventory.health_event(&caller.cluster_id, r).await?;
    Ok(accepted())
}

/// The operator's view of session volumes, pools and scratch disks; a directive per PVC: the
/// volume's quota, and `reclaim` once it is deleted here. A PVC no volume explains is an orphan
/// (counted, kept for an admin, answered nothing).
#[utoipa::path(post, path = "/internal/volumes/sync", tag = "internal",
    request_body = VolumeSync,
    responses((status = 200, body = VolumeSyncAnswer), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "cluster_id of another cluster, or PVCs of another cluster's volumes (details.volumes); nothing kept"),
        (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "details.errors[{loc,msg,type}]: negative sizes, more than 5000 volumes or sessions")))]
async fn volumes_sync(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Json<VolumeSyncAnswer>, ApiError> {
    let mut r = intake::volume_sync(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    for (loc, n, max) in [
        ("volumes", r.volumes.len(), crate::volumes::MAX_SYNC_VOLUMES),
        ("sessions", r.sessions.len(), crate::volumes::MAX_SYNC_SESSIONS),
    ] {
        if n > max {
            return Err(ApiError::field(
                &["body", loc],
                format!(
                    "at most {max} {loc} in one sync (its answer must stay under the 1 MiB the operator reads); this one has {n}"
                ),
                "too_long",
            ));
        }
    }
    r.bound();
    match app.volumes.sync(&caller.cluster_id, r).await {
        Ok(answer) => Ok(Json(answer)),
        Err(crate::volumes::SyncError::OtherCluster { mut pvcs }) => {
            let named = pvcs.len();
            pvcs.truncate(20);
            let c = caller.cluster_id.as_str();
            Err(ApiError::forbidden(format!(
                "this sync names {named} PVC(s) of volumes that live on another cluster, not on {c}; nothing was kept"
            ))
            .with_details(serde_json::json!({ "token_cluster": c, "volumes": pvcs })))
        }
        Err(crate::volumes::SyncError::Store(e)) => Err(e.into()),
    }
}

/// An image build's progress (upstream's `GShareImageBuild` reconciler).
#[utoipa::path(post, path = "/internal/image-builds/{buildId}/status", tag = "internal",
    params(("buildId" = String, Path, description = "the GShareImageBuild's build id")),
    request_body = BuildStatus,
    responses(
        (status = 202, body = Accepted, description = "`accepted:false`: gShare Edge runs no image builds, so every build is unknown here (upstream's answer for an unknown build; the operator stops requeueing)"),
        (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "phase missing or not a string"),
    ))]
async fn image_build_status(
    _caller: OperatorCaller,
    Path(build_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let r: BuildStatus = parse_json(&body)?;
    tracing::info!(build_id = %build_id, phase = %r.phase, "image build report for a build this control plane did not start; ignored");
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted: false })).into_response())
}

/// An operator's privileged action, written to the audit log.
#[utoipa::path(post, path = "/internal/audit/operator", tag = "internal",
    request_body = OperatorAudit,
    responses(
        (status = 202, body = Accepted),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "actor operator:<another cluster>, or a target that is not the token's cluster's session, session pod or node"),
        (status = 422, body = ErrorBody, description = "action other than session.pause, pod.delete, node.cordon; ts not a date-time"),
    ))]
async fn audit_operator(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::operator_audit(&body)?;
    scope(&caller, r.actor.strip_prefix(crate::auth::guard::OPERATOR_PREFIX))?;
    r.bound();
    app.sessions.operator_audit(&caller.cluster_id, r, meta.request_id).await?.map_err(|e| refusal(&caller, e))?;
    Ok(accepted())
}

/// The node agent's session samples; the latest per session is kept.
#[utoipa::path(post, path = "/internal/metrics/session-samples", tag = "internal",
    request_body = AgentReport,
    responses((status = 200, body = SamplesAccepted), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn session_samples(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Json<SamplesAccepted>, ApiError> {
    let mut r = intake::session_samples(&body)?;
    r.bound();
    Ok(Json(app.sessions.session_samples(&caller.cluster_id, r).await?))
}

/// A session's phase report; `{id}` is the CR name (or the session id).
#[utoipa::path(post, path = "/internal/sessions/{id}/status", tag = "internal",
    params(("id" = String, Path, description = "the GShareSession CR name, e.g. ses-01j…")),
    request_body = StatusReport,
    responses(
        (status = 202, body = Accepted, description = "recorded; an unknown session is a no-op"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "cluster_id or the session belongs to another cluster"),
        (status = 422, body = ErrorBody),
    ))]
async fn session_status(
    State(app): State<CallbacksState>,
    caller: OperatorCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut r = intake::session_status(&id, &body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    r.bound();
    if id.len() > MAX_NODE_NAME {
        // No CR has such a name: an unknown session, which upstream answers 202 (a no-op).
        return Ok(accepted());
    }
    let applied = app.sessions.session_status(&caller.cluster_id, id, r).await?.map_err(|e| refusal(&caller, e))?;
    if applied.delete_cr
        && let Some(sid) = applied.session_id
    {
        // Upstream deletes the CR of a failed session; the report is answered first.
        let sessions = app.sessions.clone();
        tokio::spawn(async move { sessions.delete_failed_cr(&sid).await });
    }
    Ok(accepted())
}
