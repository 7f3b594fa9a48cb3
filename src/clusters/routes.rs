//! `/api/v1/clusters`: register, edit, unregister, unclaimed directories. (The list, one cluster
//! and the connection test answer with the operator's part too: `crate::views`.)

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use super::ClusterId;
use super::model::*;
use super::registry::{ClusterError, PatchRequest, RegisterRequest};
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::extract::parse_json;
use crate::http::idempotency;

/// What the clusters' handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct ClustersState {
    pub store: crate::store::Store,
    pub clock: crate::clock::Clock,
    pub clusters: Arc<super::Clusters>,
    pub idempotency: Arc<crate::http::idempotency::InFlight>,
    pub audit: Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    ClustersState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: register))
        .routes(routes!(D: unclaimed))
        .routes(routes!(D: patch, unregister))
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Invalid { field, message, kind } => ApiError::field(&["body", field], message, kind),
            ClusterError::ProbeFailed(outcome) => {
                let failure = outcome.failure.clone().unwrap_or(ProbeError {
                    stage: Stage::Unknown,
                    cause: String::new(),
                    hint: String::new(),
                });
                let reason = failure.stage.failure_reason();
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::ProbeFailed,
                    format!("probe failed at stage {}: {}", failure.stage, failure.cause),
                )
                .with_details(serde_json::json!({
                    "stage": failure.stage,
                    "cause": failure.cause,
                    "hint": failure.hint,
                    "reason": reason.as_str(),
                    "checks": outcome.checks,
                    "missing": outcome.missing,
                }))
            }
            ClusterError::Conflict { field, value, existing, existing_name } => {
                let message = match field {
                    "kube_system_uid" => format!(
                        "this is the same cluster as \"{existing_name}\", which is already registered \
                         (same kube-system namespace UID)"
                    ),
                    "api_server" => format!("cluster \"{existing_name}\" is already registered at this API address"),
                    _ => format!("a cluster named \"{existing_name}\" is already registered"),
                };
                ApiError::conflict(message).with_details(
                    serde_json::json!({ field: value, "cluster_id": existing, "cluster_name": existing_name }),
                )
            }
            ClusterError::NotFound(id) => ApiError::not_found(format!("no cluster {id}")),
            ClusterError::InUse(in_use) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::ClusterInUse, in_use.message())
                    .with_details(in_use.details())
            }
            ClusterError::OtherCluster(message) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::KubeconfigOtherCluster, message)
            }
            ClusterError::Store(e) => ApiError::from(e),
            ClusterError::Io(e) => ApiError::internal(e),
        }
    }
}

fn parse_id(raw: &str) -> Result<ClusterId, ApiError> {
    ClusterId::parse(raw).map_err(|e| ApiError::not_found(e.to_string()))
}

/// Register a GPU cluster: probe it through its kubeconfig, then store the kubeconfig as a file.
#[utoipa::path(post, path = "/api/v1/clusters", tag = "clusters",
    request_body = RegisterRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "replays the first answer for 24 h")),
    responses(
        (status = 201, body = ClusterDetail),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "name, kube-system UID or api_server taken; or the key is in use"),
        (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "validation_failed, probe_failed (details: stage, cause, hint, checks, missing) or idempotency_key_reused"),
    ))]
async fn register(
    State(app): State<ClustersState>,
    admin: AdminCaller,
    meta: RequestMeta,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = idempotency::key_from(&headers)?;
    let req: RegisterRequest = parse_json(&body)?;
    let raw: serde_json::Value = parse_json(&body)?;
    let scope = admin.actor();
    let name = req.name.clone();
    idempotency::run(&app.store, &app.clock, &app.idempotency, &scope, key, &raw, || async {
        let outcome = app.clusters.register(req).await.map_err(ApiError::from);
        // A refused registration has no id: its target is the existing cluster it collided
        // with, else the name it was attempted under.
        let target = match &outcome {
            Ok(d) => d.cluster.id.clone(),
            Err(e) => e.details.get("cluster_id").and_then(|v| v.as_str()).unwrap_or(&name).to_string(),
        };
        audit(&app.audit, &meta, &admin, "cluster.register", &target, serde_json::json!({ "name": name }), &outcome)
            .await;
        let value = serde_json::to_value(&outcome?).map_err(ApiError::internal)?;
        Ok((StatusCode::CREATED, value))
    })
    .await
}

/// Directories in the kubeconfig directory that no registered cluster claims.
#[utoipa::path(get, path = "/api/v1/clusters/unclaimed", tag = "clusters",
    responses((status = 200, body = Vec<UnclaimedDir>), (status = 401, body = ErrorBody)))]
async fn unclaimed(State(app): State<ClustersState>, _admin: AdminCaller) -> axum::Json<Vec<UnclaimedDir>> {
    axum::Json(app.clusters.unclaimed())
}

/// Edit name, role, API address or session domain; new credentials only for the same cluster.
#[utoipa::path(patch, path = "/api/v1/clusters/{id}", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    request_body = PatchRequest,
    responses(
        (status = 200, body = ClusterDetail),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "name or api_server taken"),
        (status = 422, body = ErrorBody, description = "validation_failed, probe_failed or kubeconfig_other_cluster"),
    ))]
async fn patch(
    State(app): State<ClustersState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<ClusterDetail>, ApiError> {
    let id = parse_id(&id)?;
    let req: PatchRequest = parse_json(&body)?;
    // Which fields changed, never their values (a kubeconfig is a secret).
    let fields: Vec<&str> = [
        ("name", req.name.is_some()),
        ("role", req.role.is_some()),
        ("api_server", req.api_server.is_some()),
        ("session_domain", req.session_domain.is_some()),
        ("session_ingress", req.session_ingress.is_some()),
        ("kubeconfig", req.kubeconfig_b64.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, set)| set.then_some(f))
    .collect();
    let outcome = app.clusters.patch(&id, req).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "cluster.patch", id.as_str(), serde_json::json!({ "fields": fields }), &outcome)
        .await;
    Ok(axum::Json(outcome?))
}

/// Unregister: refused while sessions or allocations are live; keeps session history.
#[utoipa::path(delete, path = "/api/v1/clusters/{id}", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    responses(
        (status = 204, description = "unregistered; nodes, GPUs, pools and the kubeconfig directory are gone"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "cluster_in_use: details.sessions, details.allocations"),
    ))]
async fn unregister(
    State(app): State<ClustersState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let outcome = app.clusters.delete(&id).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "cluster.delete", id.as_str(), serde_json::json!({}), &outcome).await;
    outcome?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
