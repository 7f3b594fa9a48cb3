//! Accounts in the running server (the offline CLI does the same with the server stopped):
//! `GET /api/v1/account` (who am I, and whether the initial password must still be replaced),
//! `POST /api/v1/account/password` (change one's own password), `POST /api/v1/account/sign-out-everywhere`,
//! and `GET/POST /api/v1/admins`, `DELETE /api/v1/admins/{username}` (the users route's deletion), `POST /api/v1/admins/{username}/password`
//! (another admin's password, as `gshare admin set-password` sets it).
//!
//! Refusals are 422 with one `details.errors[]` entry per field, in words a person can act on.

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::AuthState;
use super::accounts::{
    self, AccountError, AccountSummary, INITIAL_ADMIN, INITIAL_PASSWORD_FILE, MAX_PASSWORD_LEN, MIN_PASSWORD_LEN,
    Username,
};
use super::guard::Gate;
use super::guard::{AdminCaller, SignedIn};
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode, FieldError};
use crate::http::extract::ApiJson;

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: account))
        .routes(routes!(D: change_password))
        .routes(routes!(D: sign_out_everywhere))
        .routes(routes!(D: list_admins, add_admin))
        .routes(routes!(D: remove_admin))
        .routes(routes!(D: set_admin_password))
}

/// The signed-in admin's account.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccountView {
    pub username: String,
    /// True while `admin` still has the password the first start wrote to
    /// `<data_dir>/initial-admin-password`, or while an account has a password an admin set (a
    /// first password, a reset): the console asks for a new one first.
    pub must_change_password: bool,
    pub created_at: Option<String>,
    pub password_changed_at: Option<String>,
    /// The resource policy that applies to this account's sessions and what they hold now.
    pub policy: crate::policy::EffectiveView,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub current_password: String,
    pub new_password: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewAdmin {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPassword {
    pub password: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdminList {
    pub data: Vec<AccountSummary>,
}

fn initial_password(app: &AuthState) -> Option<String> {
    let text = std::fs::read_to_string(app.config.data_dir.join(INITIAL_PASSWORD_FILE)).ok()?;
    let p = text.trim();
    (!p.is_empty()).then(|| p.to_string())
}

/// Whether `account` still has the first start's password (never changed since, and the file
/// that holds it is still there).
pub(super) fn still_initial(app: &AuthState, account: &accounts::Account) -> bool {
    account.username.as_str() == INITIAL_ADMIN
        && account.password_changed_at_ms == account.created_at_ms
        && initial_password(app).is_some()
}

/// The rules for a new password (length, not trivially weak), as a field error.
pub(super) fn password_rules(field: &str, password: &str) -> Option<FieldError> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_LEN {
        return Some(FieldError::new(
            &["body", field],
            format!("must be at least {MIN_PASSWORD_LEN} characters (this one has {n}); a few words make a good one"),
            "length",
        ));
    }
    if password.len() > MAX_PASSWORD_LEN {
        return Some(FieldError::new(&["body", field], format!("must be at most {MAX_PASSWORD_LEN} bytes"), "length"));
    }
    if let Err(AccountError::WeakPassword(why)) = accounts::check_new_password(password) {
        return Some(FieldError::new(
            &["body", field],
            format!("is too easy to guess: {why}; a few words make a good one"),
            "weak",
        ));
    }
    None
}

/// Hashes a new password on the hashing pool (waiting its turn: admin and account work).
pub(super) async fn hash(app: &AuthState, password: String) -> Result<String, ApiError> {
    app.signin
        .hashing
        .run_queued(move || accounts::hash_password(&password))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)
}

async fn verify(app: &AuthState, hash: String, password: String) -> Result<bool, ApiError> {
    app.signin.hashing.run(move || accounts::verify_password(&hash, &password)).await.map_err(super::login::pool_error)
}

fn now_rfc(ms: i64) -> String {
    crate::clock::rfc3339_ms(ms)
}

/// The signed-in admin's account, and whether its password must be replaced first.
#[utoipa::path(get, path = "/api/v1/account", tag = "auth",
    responses((status = 200, body = AccountView), (status = 401, body = ErrorBody)))]
async fn account(State(app): State<AuthState>, caller: SignedIn) -> Result<axum::Json<AccountView>, ApiError> {
    let (name, now) = (caller.username.clone(), app.clock.now_ms());
    let (found, policy) = app
        .store
        .read(move |txn| Ok((accounts::get(txn, &name)?, crate::policy::effective_view(txn, &name, now)?)))
        .await?;
    Ok(axum::Json(match found {
        Some(a) => AccountView {
            username: caller.username,
            must_change_password: a.must_change_password || still_initial(&app, &a),
            created_at: Some(now_rfc(a.created_at_ms)),
            password_changed_at: Some(now_rfc(a.password_changed_at_ms)),
            policy,
        },
        // A CLI-minted token may name an admin without an account: nothing to change.
        None => AccountView {
            username: caller.username,
            must_change_password: false,
            created_at: None,
            password_changed_at: None,
            policy,
        },
    }))
}

/// Change one's own password. Every session signed in before (this one included) ends; the
/// console signs in again with the new password. The initial password cannot be reused.
#[utoipa::path(post, path = "/api/v1/account/password", tag = "auth", request_body = PasswordChange,
    responses(
        (status = 204, description = "changed; older sessions ended"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "the token names an admin without an account"),
        (status = 422, body = ErrorBody, description = "a field error per problem: wrong current password, too short, the same as before, the initial password"),
        (status = 429, body = ErrorBody, description = "too many wrong current passwords, with Retry-After")))]
async fn change_password(
    State(app): State<AuthState>,
    caller: SignedIn,
    meta: RequestMeta,
    ApiJson(body): ApiJson<PasswordChange>,
) -> Result<Response, ApiError> {
    let name = caller.username.clone();
    let Some(account) = app.store.read(move |txn| accounts::get(txn, &name)).await? else {
        return Err(ApiError::not_found(format!(
            "no account {}: this token was minted for a name without an account",
            caller.username
        )));
    };
    let mut errors = Vec::new();
    if let Some(e) = password_rules("new_password", &body.new_password) {
        errors.push(e);
    } else if body.new_password == body.current_password {
        errors.push(FieldError::new(&["body", "new_password"], "must differ from the current password", "value_error"));
    } else if initial_password(&app).is_some_and(|p| p == body.new_password) {
        errors.push(FieldError::new(
            &["body", "new_password"],
            "must not be the initial password from initial-admin-password",
            "value_error",
        ));
    }
    // Guessing the current password through this route counts like failed sign-ins.
    let attempt = app.signin.throttle.begin(meta.client_addr, &caller.username, app.clock.now_ms()).map_err(|l| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::RateLimited,
            super::throttle::wait_message(l.retry_after_s),
        )
        .with_details(serde_json::json!({ "retry_after_s": l.retry_after_s, "scope": l.scope }))
        .with_header(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(l.retry_after_s))
    })?;
    if body.current_password.is_empty()
        || body.current_password.len() > MAX_PASSWORD_LEN
        || !verify(&app, account.password_hash.clone(), body.current_password.clone()).await?
    {
        errors.insert(0, FieldError::new(&["body", "current_password"], "is not your current password", "value_error"));
    } else {
        app.signin.throttle.succeeded(attempt);
    }
    let audit =
        |result| AuditEntry::new(&meta, caller.actor(), "admin.set_password", result).target(caller.username.clone());
    if !errors.is_empty() {
        let reasons: Vec<&str> = errors.iter().filter_map(|e| e.loc.last().and_then(|l| l.as_str())).collect();
        crate::audit::record(&app.audit, audit(AuditResult::Failure).details(serde_json::json!({ "fields": reasons })))
            .await;
        return Err(ApiError::validation(errors));
    }
    let new_hash = hash(&app, body.new_password).await?;
    let now_ms = app.clock.now_ms();
    let user = account.username.clone();
    let changed = accounts::store_password(&app.store, user, new_hash, now_ms).await.map_err(account_error)?;
    // `must_change_password` is false now: the guard lets the account reach everything again.
    app.signin.note_account(&changed);
    // Older sessions end (tokens issued before this second), and this one explicitly (its second
    // may be this one); the console signs in again with the new password.
    app.signin.revoke_all_before(&app.store, &caller.username, now_ms.div_euclid(1000)).await?;
    if let Some(jti) = &caller.token_id {
        app.signin.revoke(&app.store, jti, caller.expires_at).await?;
    }
    if caller.username == INITIAL_ADMIN {
        accounts::forget_initial_password(&app.config.data_dir);
    }
    crate::audit::record(&app.audit, audit(AuditResult::Success)).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// End every session of the signed-in admin, this one included.
#[utoipa::path(post, path = "/api/v1/account/sign-out-everywhere", tag = "auth",
    responses((status = 204, description = "every token issued before now is refused"), (status = 401, body = ErrorBody)))]
async fn sign_out_everywhere(
    State(app): State<AuthState>,
    caller: SignedIn,
    meta: RequestMeta,
) -> Result<Response, ApiError> {
    // One second past now: tokens minted this very second end too.
    let now_s = app.clock.now_ms().div_euclid(1000) + 1;
    app.signin.revoke_all_before(&app.store, &caller.username, now_s).await?;
    crate::audit::record(
        &app.audit,
        AuditEntry::new(&meta, caller.actor(), "auth.sign_out_everywhere", AuditResult::Success)
            .target(caller.username.clone()),
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The admin accounts.
#[utoipa::path(get, path = "/api/v1/admins", tag = "auth",
    responses((status = 200, body = AdminList), (status = 401, body = ErrorBody)))]
async fn list_admins(State(app): State<AuthState>, _caller: AdminCaller) -> Result<axum::Json<AdminList>, ApiError> {
    let all = app.store.read(accounts::list).await?;
    let mut data: Vec<AccountSummary> =
        all.iter().filter(|a| a.role == accounts::Role::Admin).map(AccountSummary::from).collect();
    data.sort_by(|a, b| a.username.cmp(&b.username));
    Ok(axum::Json(AdminList { data }))
}

/// Add an admin with a first password (at least 12 characters).
#[utoipa::path(post, path = "/api/v1/admins", tag = "auth", request_body = NewAdmin,
    responses(
        (status = 201, body = AccountSummary),
        (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the username is taken"),
        (status = 422, body = ErrorBody, description = "a field error per problem")))]
async fn add_admin(
    State(app): State<AuthState>,
    caller: AdminCaller,
    meta: RequestMeta,
    ApiJson(body): ApiJson<NewAdmin>,
) -> Result<Response, ApiError> {
    let new = super::user_routes::NewUser {
        username: body.username,
        role: Some(accounts::Role::Admin),
        group: None,
        password: Some(body.password),
        invite: None,
    };
    let (added, _) = super::user_routes::create_account(&app, &caller, &meta, "admin.add", new).await?;
    Ok((StatusCode::CREATED, axum::Json(AccountSummary::from(&added))).into_response())
}

/// Remove an account: the same deletion as `DELETE /api/v1/users/{username}` (kept for
/// `gshare admin remove` and the Account page). Its sign-ins end at the next request; its
/// sessions keep running until an admin ends them; the name is kept and never given again. Never
/// the last enabled admin, and not oneself (sign in as another).
#[utoipa::path(delete, path = "/api/v1/admins/{username}", tag = "auth",
    params(("username" = String, Path)),
    responses(
        (status = 204, description = "removed; its sign-ins ended, the name kept"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the last admin, or the caller itself")))]
async fn remove_admin(
    State(app): State<AuthState>,
    caller: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
) -> Result<Response, ApiError> {
    super::user_routes::delete_account(&app, &caller, &meta, &username, "admin.remove").await
}

/// Set an admin's password (no current password: an admin may add and remove admins, so may also
/// reset one). The account's sessions end; `admin`'s initial-password file goes.
#[utoipa::path(post, path = "/api/v1/admins/{username}/password", tag = "auth", request_body = NewPassword,
    params(("username" = String, Path)),
    responses(
        (status = 204, description = "set; the account's sessions ended"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "a field error per problem: too short, too easy to guess")))]
async fn set_admin_password(
    State(app): State<AuthState>,
    caller: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
    ApiJson(body): ApiJson<NewPassword>,
) -> Result<Response, ApiError> {
    let audit = |result| {
        AuditEntry::new(&meta, caller.actor(), "admin.set_password", result)
            .target(crate::audit::truncate(username.clone()))
    };
    let Ok(name) = Username::parse(&username) else {
        return Err(ApiError::not_found(format!("no admin account {}", crate::http::text::echo(&username))));
    };
    if let Some(e) = password_rules("password", &body.password) {
        crate::audit::record(&app.audit, audit(AuditResult::Failure)).await;
        return Err(ApiError::validation(vec![e]));
    }
    let new_hash = hash(&app, body.password).await?;
    let now_ms = app.clock.now_ms();
    let set = accounts::store_password(&app.store, name.clone(), new_hash, now_ms).await;
    if let Ok(account) = &set {
        app.signin.note_account(account);
        app.signin.revoke_all_before(&app.store, name.as_str(), now_ms.div_euclid(1000) + 1).await?;
        if name.as_str() == INITIAL_ADMIN {
            accounts::forget_initial_password(&app.config.data_dir);
        }
    }
    crate::audit::record(&app.audit, audit(if set.is_ok() { AuditResult::Success } else { AuditResult::Failure }))
        .await;
    set.map_err(account_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) fn account_error(e: AccountError) -> ApiError {
    match e {
        AccountError::NotFound(n) => ApiError::not_found(format!("no account {n}")),
        AccountError::Exists(n) => ApiError::conflict(format!("an account named {n} already exists"))
            .with_details(serde_json::json!({ "username": n })),
        AccountError::Deleted(n) => ApiError::conflict(format!(
            "an account named {n} was deleted; its history keeps the name, so it is not given to another account"
        ))
        .with_details(serde_json::json!({ "username": n, "reason": "deleted" })),
        AccountError::LastAccount(n) => ApiError::conflict(format!(
            "{n} is the last enabled admin account; add another admin before removing, disabling or demoting it"
        ))
        .with_details(serde_json::json!({ "username": n, "reason": "last" })),
        AccountError::BadGroup => {
            ApiError::field(&["body", "group"], "must be 1–64 characters: letters, digits and - _ . @", "value_error")
        }
        AccountError::Store(e) => ApiError::from(e),
        other => ApiError::internal(other),
    }
}
