//! `/api/v1/node-pools` (admins): node pools reserved for groups, upstream's routes and names.

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::pools::{NodePoolView, PoolCreate, PoolError, PoolUpdate};
use super::routes::InventoryState;
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::{AdminCaller, Gate};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::{ApiQuery, parse_json};

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    InventoryState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: list_pools, create_pool))
        .routes(routes!(D: get_pool, update_pool, delete_pool))
}

impl From<PoolError> for ApiError {
    fn from(e: PoolError) -> Self {
        let code = e.code();
        match e {
            PoolError::Invalid(errors) => ApiError::validation(errors),
            PoolError::NotFound(m) => ApiError::not_found(m),
            PoolError::Conflict { message, details } => {
                ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
            PoolError::Store(e) => ApiError::from(e),
        }
    }
}

/// `GET /api/v1/node-pools`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PoolList {
    pub data: Vec<NodePoolView>,
    pub total: u64,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct PoolParams {
    /// Only this cluster's pools.
    cluster_id: Option<String>,
}

/// Every node pool (of one cluster), by cluster and name, with its nodes, the groups it is
/// reserved for and how many of its cards have a slice booked.
#[utoipa::path(get, path = "/api/v1/node-pools", tag = "clusters", params(PoolParams),
    responses((status = 200, body = PoolList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn list_pools(
    State(app): State<InventoryState>,
    _admin: AdminCaller,
    ApiQuery(p): ApiQuery<PoolParams>,
) -> Result<axum::Json<PoolList>, ApiError> {
    let data = app.inventory.pools.list(p.cluster_id.filter(|c| !c.is_empty())).await?;
    Ok(axum::Json(PoolList { total: data.len() as u64, data }))
}

/// Add a pool of a cluster's nodes, reserved (`kind` `dedicated`, the default) for the groups it
/// lists: other groups' sessions no longer place on its nodes. A node is in one pool at most
/// (409 names the other); unknown nodes or groups are 422, an unknown cluster 404.
#[utoipa::path(post, path = "/api/v1/node-pools", tag = "clusters", request_body = PoolCreate,
    responses((status = 201, body = NodePoolView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such cluster"),
        (status = 409, body = ErrorBody, description = "a node is in another pool, or the name is taken"),
        (status = 422, body = ErrorBody)))]
async fn create_pool(
    State(app): State<InventoryState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: PoolCreate = parse_json(&body)?;
    let details = serde_json::json!({
        "cluster_id": req.cluster_id, "name": req.name, "kind": req.kind, "nodes": req.nodes.len(), "groups": req.groups,
    });
    let outcome = app.inventory.pools.create(req).await.map_err(ApiError::from);
    let target = outcome.as_ref().map(|p| p.id.clone()).unwrap_or_default();
    audit(&app.audit, &meta, &admin, "pool.create", &target, details, &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

/// One pool.
#[utoipa::path(get, path = "/api/v1/node-pools/{id}", tag = "clusters",
    params(("id" = String, Path, description = "npl_<ULID>")),
    responses((status = 200, body = NodePoolView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn get_pool(
    State(app): State<InventoryState>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<axum::Json<NodePoolView>, ApiError> {
    Ok(axum::Json(app.inventory.pools.get(&id).await?))
}

/// Change a pool: its name, description, kind, nodes or groups (lists replace the pool's).
/// Sessions running on a node that leaves the pool keep running; new placements follow.
#[utoipa::path(patch, path = "/api/v1/node-pools/{id}", tag = "clusters", request_body = PoolUpdate,
    params(("id" = String, Path, description = "npl_<ULID>")),
    responses((status = 200, body = NodePoolView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn update_pool(
    State(app): State<InventoryState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<NodePoolView>, ApiError> {
    let req: PoolUpdate = parse_json(&body)?;
    let outcome = app.inventory.pools.update(&id, req).await.map_err(ApiError::from);
    let changes = outcome.as_ref().map(|(_, c)| c.clone()).unwrap_or_default();
    let outcome = outcome.map(|(v, _)| v);
    audit(&app.audit, &meta, &admin, "pool.update", &id, serde_json::json!({ "changes": changes }), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// Delete a pool: its nodes become shared again (sessions on them keep running).
#[utoipa::path(delete, path = "/api/v1/node-pools/{id}", tag = "clusters",
    params(("id" = String, Path, description = "npl_<ULID>")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn delete_pool(
    State(app): State<InventoryState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = app.inventory.pools.delete(&id).await.map_err(ApiError::from);
    let details = match &outcome {
        Ok(p) => {
            serde_json::json!({ "cluster_id": p.cluster_id, "name": p.name, "nodes": p.nodes, "groups": p.groups })
        }
        Err(_) => serde_json::json!({}),
    };
    audit(&app.audit, &meta, &admin, "pool.delete", &id, details, &outcome).await;
    outcome?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
