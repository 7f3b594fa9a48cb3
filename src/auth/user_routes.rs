//! The lab's accounts, for admins: `GET /api/v1/users` (filtered by role, group or a name
//! fragment), `POST /api/v1/users` (an admin or a member, with a first password given or
//! generated and shown once), `PATCH /api/v1/users/{username}` (role, group, disabled). A
//! disabled account's tokens and cookies stop at its next request; its sessions keep running.
//! Removal is `DELETE /api/v1/admins/{username}` (any account; never the last enabled admin).

use axum::extract::{FromRef, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AuthState;
use super::account_routes::{account_error, hash, password_rules};
use super::accounts::{self, AccountPatch, AccountSummary, Role, Username};
use super::guard::AdminCaller;
use super::guard::Gate;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, FieldError};
use crate::http::extract::ApiJson;

pub fn routes<S>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(list_users, create_user)).routes(routes!(patch_user))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UserParams {
    /// `admin` or `member`.
    #[param(value_type = Option<Role>, inline)]
    role: Option<String>,
    group: Option<String>,
    /// Part of the username, without regard to case.
    q: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    pub data: Vec<AccountSummary>,
    pub total: usize,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub username: String,
    /// Default `member`.
    #[serde(default)]
    pub role: Option<Role>,
    pub group: Option<String>,
    /// A first password (the rules of any new password); omitted: one is generated and answered once.
    pub password: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedUser {
    pub user: AccountSummary,
    /// The generated first password, shown this once (absent when the request gave one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserPatch {
    pub role: Option<Role>,
    /// A group, or `null` to clear it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub group: Option<Option<String>>,
    pub disabled: Option<bool>,
}

fn double_option<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// The lab's accounts, by username.
#[utoipa::path(get, path = "/api/v1/users", tag = "auth", params(UserParams),
    responses((status = 200, body = UserList), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 422, body = ErrorBody, description = "a role that is not admin or member")))]
async fn list_users(
    State(app): State<AuthState>,
    _admin: AdminCaller,
    Query(p): Query<UserParams>,
) -> Result<axum::Json<UserList>, ApiError> {
    let role = match p.role.as_deref() {
        None | Some("") => None,
        Some("admin") => Some(Role::Admin),
        Some("member") => Some(Role::Member),
        Some(_) => return Err(ApiError::field(&["query", "role"], "must be admin or member", "enum")),
    };
    let q = p.q.unwrap_or_default().to_ascii_lowercase();
    let group = p.group.filter(|g| !g.is_empty());
    let all = app.store.read(accounts::list).await?;
    let mut data: Vec<AccountSummary> = all
        .iter()
        .filter(|a| role.is_none_or(|r| a.role == r))
        .filter(|a| group.as_ref().is_none_or(|g| a.group.as_ref() == Some(g)))
        .filter(|a| q.is_empty() || a.username.as_str().to_ascii_lowercase().contains(&q))
        .map(AccountSummary::from)
        .collect();
    data.sort_by(|a, b| a.username.cmp(&b.username));
    Ok(axum::Json(UserList { total: data.len(), data }))
}

/// Add an account: a member (the default) or an admin, with an optional group. Without a
/// `password` one is generated and answered once.
#[utoipa::path(post, path = "/api/v1/users", tag = "auth", request_body = NewUser,
    responses(
        (status = 201, body = CreatedUser),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 409, body = ErrorBody, description = "the username is taken (without regard to case)"),
        (status = 422, body = ErrorBody, description = "a field error per problem")))]
async fn create_user(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    ApiJson(body): ApiJson<NewUser>,
) -> Result<Response, ApiError> {
    let (added, password) = create_account(&app, &admin, &meta, "user.create", body).await?;
    let answer = CreatedUser { user: AccountSummary::from(&added), password };
    let mut res = (StatusCode::CREATED, axum::Json(answer)).into_response();
    res.headers_mut().insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    Ok(res)
}

/// Checks and stores a new account, audited under `action`; answers it and the first password
/// when one was generated. Also behind `POST /api/v1/admins`.
pub(super) async fn create_account(
    app: &AuthState,
    admin: &AdminCaller,
    meta: &RequestMeta,
    action: &str,
    body: NewUser,
) -> Result<(accounts::Account, Option<String>), ApiError> {
    let mut errors = Vec::new();
    let name = Username::parse(body.username.trim());
    if name.is_err() {
        errors.push(FieldError::new(
            &["body", "username"],
            "must be 1–64 characters: letters, digits and - _ . @",
            "value_error",
        ));
    }
    let group = body.group.map(|g| g.trim().to_string()).filter(|g| !g.is_empty());
    if let Some(g) = &group
        && accounts::check_group(g).is_err()
    {
        errors.push(FieldError::new(
            &["body", "group"],
            "must be 1–64 characters: letters, digits and - _ . @",
            "value_error",
        ));
    }
    if let Some(p) = &body.password
        && let Some(e) = password_rules("password", p)
    {
        errors.push(e);
    }
    let role = body.role.unwrap_or(Role::Member);
    let audit = |result, target: &str| {
        AuditEntry::new(meta, admin.actor(), action, result)
            .target(crate::audit::truncate(target.to_string()))
            .details(serde_json::json!({ "role": role.as_str() }))
    };
    let name = match name {
        Ok(n) if errors.is_empty() => n,
        _ => {
            crate::audit::record(&app.audit, audit(AuditResult::Failure, body.username.trim())).await;
            return Err(ApiError::validation(errors));
        }
    };
    let (password, generated) = match body.password {
        Some(p) => (p, false),
        None => (accounts::random_password().map_err(ApiError::internal)?, true),
    };
    let password_hash = hash(password.clone()).await?;
    let now_ms = app.clock.now_ms();
    let added = accounts::store_account(&app.store, name.clone(), password_hash, role, group, now_ms).await;
    crate::audit::record(
        &app.audit,
        audit(if added.is_ok() { AuditResult::Success } else { AuditResult::Failure }, name.as_str()),
    )
    .await;
    let added = added.map_err(account_error)?;
    app.signin.note_account(&added);
    Ok((added, generated.then_some(password)))
}

/// Change an account's role, group or enabled state. Disabling ends its sign-ins at their next
/// request (its sessions keep running); the last enabled admin cannot be disabled or demoted.
#[utoipa::path(patch, path = "/api/v1/users/{username}", tag = "auth", request_body = UserPatch,
    params(("username" = String, Path)),
    responses(
        (status = 200, body = AccountSummary),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the last enabled admin"),
        (status = 422, body = ErrorBody, description = "a bad group")))]
async fn patch_user(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
    ApiJson(body): ApiJson<UserPatch>,
) -> Result<axum::Json<AccountSummary>, ApiError> {
    let Ok(name) = Username::parse(&username) else {
        return Err(ApiError::not_found(format!("no account {username}")));
    };
    let change = AccountPatch {
        role: body.role,
        group: body.group.map(|g| g.map(|g| g.trim().to_string()).filter(|g| !g.is_empty())),
        disabled: body.disabled,
    };
    let details = serde_json::json!({
        "role": change.role.map(Role::as_str),
        "group": change.group,
        "disabled": change.disabled,
    });
    let patched = accounts::store_patch(&app.store, name.clone(), change).await;
    let result = if patched.is_ok() { AuditResult::Success } else { AuditResult::Failure };
    crate::audit::record(
        &app.audit,
        AuditEntry::new(&meta, admin.actor(), "user.update", result)
            .target(crate::audit::truncate(username.clone()))
            .details(details),
    )
    .await;
    let account = patched.map_err(account_error)?;
    app.signin.note_account(&account);
    if body.disabled == Some(true) {
        // Enabling again later must not bring back the tokens it had: they end here for good
        // (those minted before this second; a sign-in after re-enabling may fall in it).
        let this_second = app.clock.now_ms().div_euclid(1000);
        app.signin.revoke_all_before(&app.store, account.username.as_str(), this_second).await?;
    }
    Ok(axum::Json(AccountSummary::from(&account)))
}
