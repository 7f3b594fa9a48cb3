//! `/api/v1/resource-policies` (admins; `GET …/effective` for everyone signed in, their own) and
//! `/api/v1/groups` (admins).

use axum::body::Bytes;
use axum::extract::{FromRef, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::model::Scope;
use super::*;
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::Gate;
use crate::auth::guard::{AdminCaller, SignedIn};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::parse_json;

/// What the policy room's handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct PolicyState {
    pub policies: std::sync::Arc<Policies>,
    pub audit: std::sync::Arc<crate::audit::AuditLog>,
}

pub fn routes<S>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    PolicyState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(effective_policy))
        .routes(routes!(patch_policy, delete_policy))
        .routes(routes!(list_groups, create_group))
        .routes(routes!(patch_group, delete_group))
}

impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        match e {
            PolicyError::Invalid(errors) => ApiError::validation(errors),
            PolicyError::NotFound(m) => ApiError::not_found(m),
            PolicyError::Conflict { code, message, details } => {
                ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
            PolicyError::Store(e) => ApiError::from(e),
        }
    }
}

/// `GET /api/v1/resource-policies`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyList {
    pub data: Vec<PolicyView>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct PolicyParams {
    /// `global`, `group` or `user`.
    #[param(value_type = Option<Scope>, inline)]
    scope: Option<String>,
}

/// Every resource policy, global first, then by group and user name.
#[utoipa::path(get, path = "/api/v1/resource-policies", tag = "policies", params(PolicyParams),
    responses((status = 200, body = PolicyList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
async fn list_policies(
    State(app): State<PolicyState>,
    _admin: AdminCaller,
    Query(p): Query<PolicyParams>,
) -> Result<axum::Json<PolicyList>, ApiError> {
    let scope = match p.scope.as_deref() {
        None | Some("") => None,
        Some("global") => Some(Scope::Global),
        Some("group") => Some(Scope::Group),
        Some("user") => Some(Scope::User),
        Some(_) => return Err(ApiError::field(&["query", "scope"], "must be global, group or user", "enum")),
    };
    Ok(axum::Json(PolicyList { data: app.policies.list(scope).await? }))
}

/// Add a policy for the global scope, a group (one that exists) or a user; one per subject
/// (409 `conflict` names the existing one). Numbers are 0 or more and bounded (422 otherwise).
#[utoipa::path(post, path = "/api/v1/resource-policies", tag = "policies", request_body = PolicyCreate,
    responses((status = 201, body = PolicyView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the subject has a policy"), (status = 422, body = ErrorBody)))]
async fn create_policy(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: PolicyCreate = parse_json(&body)?;
    let details = serde_json::json!({ "scope": req.scope, "scope_id": req.scope_id });
    let outcome = app.policies.create(req).await.map_err(ApiError::from);
    let target = outcome.as_ref().map(|p| p.id.clone()).unwrap_or_default();
    audit(&app.audit, &meta, &admin, "policy.create", &target, details, &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct EffectiveParams {
    /// Admins only: whose policy (default: the caller's).
    user: Option<String>,
}

/// The policy that applies to the caller (admins: `?user=`), merged per field user → group →
/// global, with current use and what is left.
#[utoipa::path(get, path = "/api/v1/resource-policies/effective", tag = "policies", params(EffectiveParams),
    responses((status = 200, body = EffectiveView), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`?user=` from a member")))]
async fn effective_policy(
    State(app): State<PolicyState>,
    caller: SignedIn,
    Query(p): Query<EffectiveParams>,
) -> Result<axum::Json<EffectiveView>, ApiError> {
    let user = match p.user.filter(|u| !u.is_empty()) {
        Some(u) if u != caller.username && !caller.is_admin() => {
            return Err(ApiError::forbidden("only admins may read another user's policy"));
        }
        Some(u) => u,
        None => caller.username.clone(),
    };
    Ok(axum::Json(app.policies.effective(&user).await?))
}

/// Change a policy: a field given is set (`null`: inherit from the wider scope); `limits`, when
/// given, replaces the whole object. Lowering a limit below current use keeps running sessions
/// running; new ones (and resumes) are refused.
#[utoipa::path(patch, path = "/api/v1/resource-policies/{id}", tag = "policies", request_body = PolicyPatch,
    params(("id" = String, Path, description = "pol_<ULID>")),
    responses((status = 200, body = PolicyView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn patch_policy(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<PolicyView>, ApiError> {
    let req: PolicyPatch = parse_json(&body)?;
    let outcome = app.policies.patch(&id, req).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "policy.update", &id, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// Delete a policy (the global one too: then only group and user policies limit).
#[utoipa::path(delete, path = "/api/v1/resource-policies/{id}", tag = "policies",
    params(("id" = String, Path, description = "pol_<ULID>")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn delete_policy(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = app.policies.delete(&id).await.map_err(ApiError::from);
    let details = match &outcome {
        Ok(p) => serde_json::json!({ "scope": p.scope, "scope_id": p.scope_id }),
        Err(_) => serde_json::json!({}),
    };
    audit(&app.audit, &meta, &admin, "policy.delete", &id, details, &outcome).await;
    outcome?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/v1/groups`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GroupList {
    pub data: Vec<GroupView>,
}

/// The groups, by name, with their members (accounts whose `group` names one; a group accounts
/// name that was never created here is listed too, `created_at` null) and policy.
#[utoipa::path(get, path = "/api/v1/groups", tag = "policies",
    responses((status = 200, body = GroupList), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn list_groups(State(app): State<PolicyState>, _admin: AdminCaller) -> Result<axum::Json<GroupList>, ApiError> {
    Ok(axum::Json(GroupList { data: app.policies.groups().await? }))
}

/// Add a group (names are unique without regard to case). Members join by their account's
/// `group` (`PATCH /api/v1/users/{username}`).
#[utoipa::path(post, path = "/api/v1/groups", tag = "policies", request_body = GroupCreate,
    responses((status = 201, body = GroupView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn create_group(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: GroupCreate = parse_json(&body)?;
    let name = req.name.clone();
    let outcome = app.policies.create_group(req).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "group.create", &name, serde_json::json!({}), &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

/// Change a group's description.
#[utoipa::path(patch, path = "/api/v1/groups/{name}", tag = "policies", request_body = GroupPatch,
    params(("name" = String, Path)),
    responses((status = 200, body = GroupView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn patch_group(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<axum::Json<GroupView>, ApiError> {
    let req: GroupPatch = parse_json(&body)?;
    let outcome = app.policies.patch_group(&name, req).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "group.update", &name, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// Delete a group with no members and no policy (409 `group_in_use` names them).
#[utoipa::path(delete, path = "/api/v1/groups/{name}", tag = "policies", params(("name" = String, Path)),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "group_in_use")))]
async fn delete_group(
    State(app): State<PolicyState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = app.policies.delete_group(&name).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "group.delete", &name, serde_json::json!({}), &outcome).await;
    outcome?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
