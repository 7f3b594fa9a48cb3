//! Upstream's `/internal` callbacks (operator JWT), the admin's node actions under
//! `/api/v1/clusters/{id}/nodes/{node}/…`, and `GET /metrics`. Each handler: caller (401/403),
//! body (400/413/422), checks (422), cluster scope (403), then the domain function.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::apply::{NodeAction, Refusal};
use super::model::*;
use crate::App;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::auth::guard::{AdminCaller, OperatorCaller};
use crate::clock::rfc3339_ms;
use crate::clusters::ClusterId;
use crate::clusters::model::{GPUS, GpuView, NodeRecord, NodeView};
use crate::http::error::{ApiError, ErrorBody, FieldError};
use crate::http::extract::parse_json;

pub fn routes() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new()
        .routes(routes!(inventory_nodes))
        .routes(routes!(inventory_gpu_devices))
        .routes(routes!(inventory_drift))
        .routes(routes!(nodes_cordoned))
        .routes(routes!(nodes_decommissioning))
        .routes(routes!(nodes_decommissioned))
        .routes(routes!(health_events))
        .routes(routes!(volumes_sync))
        .routes(routes!(image_build_status))
        .routes(routes!(cordon))
        .routes(routes!(uncordon))
        .routes(routes!(decommission))
}

pub(crate) fn accepted() -> Response {
    (StatusCode::ACCEPTED, Json(Accepted { accepted: true })).into_response()
}

/// 202 `{"accepted":false}`: read, understood, and nothing stored (the operator treats any 2xx as
/// done; a 4xx would be final for it too, and upstream answers 202 for these).
fn not_stored(what: &str, cluster: &ClusterId, name: &str) -> Response {
    tracing::warn!(cluster_id = %cluster, name, "{what} report names no usable object; nothing stored");
    (StatusCode::ACCEPTED, Json(Accepted { accepted: false })).into_response()
}

pub(crate) fn checked(r: Result<(), Vec<FieldError>>) -> Result<(), ApiError> {
    r.map_err(ApiError::validation)
}

/// A payload naming another cluster is refused, not believed; absent or null passes.
pub(crate) fn scope(caller: &OperatorCaller, claimed: Option<&str>) -> Result<(), ApiError> {
    match claimed {
        Some(c) if c != caller.cluster_id.as_str() => Err(other_cluster(caller, c)),
        _ => Ok(()),
    }
}

fn other_cluster(caller: &OperatorCaller, cluster_id: &str) -> ApiError {
    ApiError::forbidden(format!("this operator token is for cluster {}, not {cluster_id}", caller.cluster_id))
        .with_details(serde_json::json!({ "token_cluster": caller.cluster_id.as_str(), "cluster_id": cluster_id }))
}

/// Each `/internal` POST body of this module as its handler reads it: JSON (400 `invalid_json`,
/// 422 for the shape), then the field checks (422), before any cluster scope or store access.
/// Public so the fuzz targets (`fuzz/`, `crate::fuzzing`) feed them arbitrary bytes.
pub mod intake {
    use super::*;

    /// A JSON object: an empty body is 422 (`loc ["body"]`, as every other callback answers it);
    /// anything but an object is 422; `{}` takes every field's default.
    fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
        let v: serde_json::Value = parse_json(body)?;
        if !v.is_object() {
            return Err(ApiError::field(&["body"], "must be a JSON object", "dict_type"));
        }
        parse_json(body)
    }

    pub fn node_report(body: &[u8]) -> Result<NodeReport, ApiError> {
        let r: NodeReport = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }

    pub fn gpu_report(body: &[u8]) -> Result<GpuReport, ApiError> {
        let r: GpuReport = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }

    pub fn drift(body: &[u8]) -> Result<DriftReport, ApiError> {
        // Any uuid shape upstream accepts (old MIG ids contain '/'); the handler bounds lengths.
        parse_object(body)
    }

    /// The hostname to forget; `None` when none was sent (answered `accepted:false`).
    pub fn decommissioned(body: &[u8]) -> Result<Option<String>, ApiError> {
        let r: Decommissioned = parse_object(body)?;
        let hostname = r.hostname.unwrap_or_default().trim().to_string();
        // Any other name is answered 202 by the handler (no node of that name is being
        // decommissioned), never a final 422.
        Ok((!hostname.is_empty()).then_some(hostname))
    }

    pub fn health_event(body: &[u8]) -> Result<HealthEvent, ApiError> {
        let r: HealthEvent = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }

    pub fn operator_audit(body: &[u8]) -> Result<OperatorAudit, ApiError> {
        let r: OperatorAudit = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }

    pub fn volume_sync(body: &[u8]) -> Result<VolumeSync, ApiError> {
        let r: VolumeSync = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }
}

pub(crate) fn refusal(caller: Option<&OperatorCaller>, r: Refusal) -> ApiError {
    match r {
        Refusal::OtherCluster { cluster_id } => match caller {
            Some(c) => other_cluster(c, &cluster_id),
            None => ApiError::forbidden("another cluster's resource"),
        },
        Refusal::NotFound(m) => ApiError::not_found(m),
        Refusal::NotOwn(m) => ApiError::forbidden(m).with_details(serde_json::json!({
            "token_cluster": caller.map(|c| c.cluster_id.as_str()),
        })),
        Refusal::Conflict { code, message, details } => {
            ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
        }
    }
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
    State(app): State<Arc<App>>,
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
    State(app): State<Arc<App>>,
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
    State(app): State<Arc<App>>,
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
async fn nodes_cordoned(State(app): State<Arc<App>>, caller: OperatorCaller) -> Result<Response, ApiError> {
    Ok(json_bytes(app.inventory.hostnames_json(&caller.cluster_id, false).await?))
}

/// A JSON answer rendered beforehand.
fn json_bytes(body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// Nodes to delete from the cluster (the cluster is the token's), sorted.
#[utoipa::path(get, path = "/internal/nodes/decommissioning", tag = "internal",
    responses((status = 200, body = Hostnames), (status = 401, body = ErrorBody)))]
async fn nodes_decommissioning(State(app): State<Arc<App>>, caller: OperatorCaller) -> Result<Response, ApiError> {
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
    State(app): State<Arc<App>>,
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
async fn health_events(State(app): State<Arc<App>>, caller: OperatorCaller, body: Bytes) -> Result<Response, ApiError> {
    let mut r = intake::health_event(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    r.bound();
    app.inventory.health_event(&caller.cluster_id, r).await?;
    Ok(accepted())
}

/// The operator's view of session volumes, pools and scratch disks; a directive per PVC.
#[utoipa::path(post, path = "/internal/volumes/sync", tag = "internal",
    request_body = VolumeSync,
    responses((status = 200, body = VolumeSyncAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn volumes_sync(
    State(app): State<Arc<App>>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Json<VolumeSyncAnswer>, ApiError> {
    let mut r = intake::volume_sync(&body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    r.bound();
    Ok(Json(app.inventory.volume_sync(&caller.cluster_id, r).await?))
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

async fn node_view(app: &App, r: NodeRecord) -> Result<NodeView, ApiError> {
    let prefix = format!("{}/", r.cluster_id);
    let gpus = app.store.read(move |txn| GPUS.list_prefix(txn, &prefix)).await?;
    Ok(NodeView {
        gpus: gpus.into_iter().filter(|(_, g)| g.node == r.name).map(|(_, g)| GpuView::from(g)).collect(),
        name: r.name,
        ready: r.ready,
        schedulable: r.schedulable,
        cordoned: r.cordoned,
        decommissioning: r.decommissioning,
        offline: r.offline,
        role: r.role,
        last_seen: r.last_seen.map(rfc3339_ms),
    })
}

async fn admin_node_action(
    app: &App,
    admin: &AdminCaller,
    meta: &RequestMeta,
    id: &str,
    node: &str,
    action: NodeAction,
) -> Result<Json<NodeView>, ApiError> {
    let id = ClusterId::parse(id).map_err(|e| ApiError::not_found(e.to_string()))?;
    let entry = |result| {
        AuditEntry::new(meta, admin.actor(), action.audit_action(), result)
            .target(format!("{id}/{node}"))
            .details(serde_json::json!({ "cluster_id": id.as_str(), "node": node }))
    };
    if !is_dns_subdomain(node) {
        return Err(ApiError::not_found(format!("cluster {id} has no node {node}")));
    }
    match app.inventory.node_action(&id, node.to_string(), action, entry(AuditResult::Success)).await? {
        Ok(record) => {
            // The repeat-report memory needs no reset: the commit moved the store's generation.
            Ok(Json(node_view(app, record).await?))
        }
        Err(r) => {
            let err = refusal(None, r);
            crate::audit::record(
                app,
                entry(AuditResult::Failure).details(serde_json::json!({
                    "cluster_id": id.as_str(), "node": node, "error": err.code,
                })),
            )
            .await;
            Err(err)
        }
    }
}

/// Cordon a node: the operator mirrors it (unschedulable + `gshare.io/cordoned`).
#[utoipa::path(post, path = "/api/v1/clusters/{id}/nodes/{node}/cordon", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), ("node" = String, Path, description = "node name")),
    responses((status = 200, body = NodeView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn cordon(
    State(app): State<Arc<App>>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<NodeView>, ApiError> {
    admin_node_action(&app, &admin, &meta, &id, &node, NodeAction::Cordon).await
}

/// Uncordon a node cordoned through gShare.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/nodes/{node}/uncordon", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), ("node" = String, Path, description = "node name")),
    responses(
        (status = 200, body = NodeView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "node_decommissioning"),
    ))]
async fn uncordon(
    State(app): State<Arc<App>>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<NodeView>, ApiError> {
    admin_node_action(&app, &admin, &meta, &id, &node, NodeAction::Uncordon).await
}

/// Decommission a node: its GPUs leave the inventory, its reports are ignored, and the operator
/// deletes the Node (unless it is Ready or control-plane), then confirms.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/nodes/{node}/decommission", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), ("node" = String, Path, description = "node name")),
    responses(
        (status = 200, body = NodeView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "node_in_use: open GPU allocations (details.allocations)"),
    ))]
async fn decommission(
    State(app): State<Arc<App>>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<NodeView>, ApiError> {
    admin_node_action(&app, &admin, &meta, &id, &node, NodeAction::Decommission).await
}
