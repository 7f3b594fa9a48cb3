//! Upstream's `/internal` callbacks (operator JWT), the admin's node actions under
//! `/api/v1/clusters/{id}/nodes/{node}/…`, and `GET /metrics`. Each handler: caller (401/403),
//! body (400/413/422), checks (422), cluster scope (403), then the domain function.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::Json;
use axum::extract::{FromRef, Path, State};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use super::apply::NodeAction;
use super::model::{GPUS, GpuView, HEALTH_EVENTS, NodeRecord, NodeView, latest_gpu_events};
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::callbacks::wire::is_dns_subdomain;
use crate::clusters::ClusterId;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};

/// What the inventory's handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct InventoryState {
    pub store: crate::store::Store,
    pub inventory: Arc<super::Inventory>,
    pub audit: Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    InventoryState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: nodes))
        .routes(routes!(D: cordon))
        .routes(routes!(D: uncordon))
        .routes(routes!(D: decommission))
}

/// Nodes of a cluster with their GPUs.
#[utoipa::path(get, path = "/api/v1/clusters/{id}/nodes", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    responses((status = 200, body = Vec<NodeView>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn nodes(
    State(app): State<InventoryState>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = ClusterId::parse(&id).map_err(|e| ApiError::not_found(e.to_string()))?;
    let json = app.inventory.node_pages.json(&app.store, id.as_str()).await?;
    let json = json.ok_or_else(|| ApiError::not_found(format!("no cluster {id}")))?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], json).into_response())
}

async fn node_view(app: &InventoryState, r: NodeRecord) -> Result<NodeView, ApiError> {
    let (prefix, events_of) = (format!("{}/", r.cluster_id), format!("{}/{}/", r.cluster_id, r.name));
    let (cluster, node) = (r.cluster_id.clone(), r.name.clone());
    let (gpus, events, pool) = app
        .store
        .read(move |txn| {
            let pool = super::pools::pools_of_nodes(txn, &cluster)?.remove(&node);
            Ok((GPUS.list_prefix(txn, &prefix)?, HEALTH_EVENTS.list_prefix(txn, &events_of)?, pool))
        })
        .await?;
    let mut latest = latest_gpu_events(events.iter().map(|(_, e)| e));
    let gpus = gpus
        .into_iter()
        .filter(|(_, g)| g.node == r.name)
        .map(|(_, g)| GpuView { last_event: latest.remove(&g.uuid), ..GpuView::from(g) })
        .collect();
    let (pool_id, pool_name) = pool.unzip();
    Ok(NodeView { pool_id, pool_name, ..NodeView::of(r, gpus) })
}

async fn admin_node_action(
    app: &InventoryState,
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
        return Err(ApiError::not_found(format!("cluster {id} has no node {}", crate::http::text::echo(node))));
    }
    match app.inventory.node_action(&id, node.to_string(), action, entry(AuditResult::Success)).await? {
        Ok(record) => {
            // The repeat-report memory needs no reset: the commit moved the store's generation.
            Ok(Json(node_view(app, record).await?))
        }
        Err(r) => {
            let err = r.into_error(None);
            crate::audit::record(
                &app.audit,
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
    State(app): State<InventoryState>,
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
    State(app): State<InventoryState>,
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
    State(app): State<InventoryState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<NodeView>, ApiError> {
    admin_node_action(&app, &admin, &meta, &id, &node, NodeAction::Decommission).await
}
