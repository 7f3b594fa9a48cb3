//! Views that cross domains, put together here at the top with real types: a cluster as the
//! registry sees it (`clusters`) and the state of its operator (`operator`, above clusters, which
//! therefore may not name it). The handlers that answer with both: the cluster list, one
//! cluster, and the connection test.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use crate::App;
use crate::auth::guard::AdminCaller;
use crate::clusters::ClusterId;
use crate::clusters::model::{self, ClusterStatus, Pagination, Role};
use crate::clusters::registry::ListQuery;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::{ApiQuery, query_number};
use crate::operator::status::OperatorConnection;

pub fn routes<D: Docs>() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(D: list)).routes(routes!(D: show)).routes(routes!(D: connection_test))
}

/// A cluster as `GET /api/v1/clusters` lists it: the registry's view and its operator's state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterView {
    #[serde(flatten)]
    pub cluster: model::ClusterView,
    /// The operator on this cluster: attached, connected or silent (and why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorConnection>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterPage {
    pub data: Vec<ClusterView>,
    pub pagination: Pagination,
}

/// `GET /api/v1/clusters/{id}`: the registry's detail and its operator's state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterDetail {
    #[serde(flatten)]
    pub detail: model::ClusterDetail,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorConnection>,
}

/// `POST /api/v1/clusters/{id}/connection-test`: the probe's result and the operator's state,
/// its pods read fresh from the cluster when attached.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConnectionTest {
    #[serde(flatten)]
    pub test: model::ConnectionTest,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorConnection>,
}

fn parse_id(raw: &str) -> Result<ClusterId, ApiError> {
    ClusterId::parse(raw).map_err(|e| ApiError::not_found(e.to_string()))
}

/// The operator's state of one cluster view.
async fn operator_of(app: &App, cluster: &model::ClusterView) -> Result<OperatorConnection, ApiError> {
    let mut one = app.operator.connections(std::slice::from_ref(cluster)).await.map_err(ApiError::internal)?;
    one.pop().ok_or_else(|| ApiError::internal("no operator state for the cluster"))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// 1-based page (default 1).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 18446744073709551_u64)]
    page: Option<String>,
    /// Page size 1–100 (default 20).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 100)]
    size: Option<String>,
    /// `primary` or `standby`.
    #[param(value_type = Option<Role>, inline)]
    role: Option<String>,
    /// `pending`, `connected`, `degraded` or `unreachable`.
    #[param(value_type = Option<ClusterStatus>, inline)]
    status: Option<String>,
}

/// List live clusters with their state, counters and heartbeat.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters", params(ListParams),
    responses((status = 200, body = ClusterPage), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn list(
    State(app): State<Arc<App>>,
    _admin: AdminCaller,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<ClusterPage>, ApiError> {
    let page = query_number("page", p.page, 1, u64::MAX / 1000)?;
    let size = query_number("size", p.size, 20, 100)?;
    let role = match p.role.as_deref() {
        None | Some("") => None,
        Some(r) => Some(
            serde_json::from_value::<Role>(serde_json::Value::String(r.into()))
                .map_err(|_| ApiError::field(&["query", "role"], "must be primary or standby", "enum"))?,
        ),
    };
    let status = match p.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(
            serde_json::from_value::<ClusterStatus>(serde_json::Value::String(s.into()))
                .ok()
                .filter(|s| *s != ClusterStatus::Deleted)
                .ok_or_else(|| {
                    ApiError::field(&["query", "status"], "must be pending, connected, degraded or unreachable", "enum")
                })?,
        ),
    };
    let page = app.clusters.list(ListQuery { page, size, role, status }).await?;
    let operators = app.operator.connections(&page.data).await.map_err(ApiError::internal)?;
    let data = page.data.into_iter().zip(operators).map(|(cluster, op)| ClusterView { cluster, operator: Some(op) });
    Ok(Json(ClusterPage { data: data.collect(), pagination: page.pagination }))
}

/// One cluster with its checks, node and GPU totals.
#[utoipa::path(get, path = "/api/v1/clusters/{id}", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    responses((status = 200, body = ClusterDetail), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn show(
    State(app): State<Arc<App>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Json<ClusterDetail>, ApiError> {
    let id = parse_id(&id)?;
    let detail = app.clusters.get(&id).await?;
    let operator = operator_of(&app, &detail.cluster).await?;
    Ok(Json(ClusterDetail { detail, operator: Some(operator) }))
}

/// Probe the cluster now and record the result.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/connection-test", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    responses((status = 200, body = ConnectionTest), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn connection_test(
    State(app): State<Arc<App>>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<Json<ConnectionTest>, ApiError> {
    let id = parse_id(&id)?;
    let test = app.clusters.reprobe(&id).await?;
    // An attached operator's own pods are read on every test (bounded in time).
    if app.operator.attachment(id.as_str()).await.map_err(ApiError::internal)?.is_some() {
        app.operator.refresh_pods(&id).await;
    }
    let detail = app.clusters.get(&id).await?;
    let operator = operator_of(&app, &detail.cluster).await?;
    Ok(Json(ConnectionTest { test, operator: Some(operator) }))
}
