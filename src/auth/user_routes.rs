//! The lab's accounts, for admins: `GET /api/v1/users` (filtered by role, group, state or a name
//! fragment; paged, or every match as CSV), `POST /api/v1/users` (an admin or a member, with a
//! first password given or generated and shown once), `POST /api/v1/users/bulk` (up to 1,000 at
//! once, all or none), `PATCH /api/v1/users/{username}` (role, group, disabled),
//! `DELETE /api/v1/users/{username}`, `POST /api/v1/users/{username}/password` (a reset: a
//! generated password shown once) and `POST /api/v1/users/{username}/invite` (a single-use link,
//! 72 h, accepted by `POST /api/v1/auth/invite`). A disabled or deleted account's tokens and
//! cookies stop at its next request; its sessions keep running. A password an admin set (given,
//! generated or reset) is replaced by its owner at first sign-in (`must_change_password`).

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::AuthState;
use super::account_routes::{account_error, hash, password_rules};
use super::accounts::{self, AccountPatch, AccountSummary, Role, Username};
use super::guard::AdminCaller;
use super::guard::Gate;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, FieldError};
use crate::http::extract::{ApiJson, ApiQuery};

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: list_users, create_user))
        .routes(routes!(D: patch_user, delete_user))
        .routes(routes!(D: reset_password))
        .routes(routes!(D: bulk_create))
        .routes(routes!(D: invite_user))
        .routes(routes!(D: accept_invite))
}

/// A name the routes keep for themselves (`/api/v1/users/bulk`): no account may have it.
const RESERVED: &[&str] = &["bulk"];

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UserParams {
    /// `admin` or `member`.
    #[param(value_type = Option<Role>, inline)]
    role: Option<String>,
    group: Option<String>,
    /// Part of the username, without regard to case.
    q: Option<String>,
    /// `true`: disabled accounts only; `false`: enabled ones only.
    #[param(value_type = Option<bool>)]
    disabled: Option<String>,
    /// 1-based page (default 1).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 18446744073709551_u64)]
    page: Option<String>,
    /// Page size 1–100 (default 20).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 100)]
    size: Option<String>,
    /// `json` (default: one page) or `csv` (every match, no paging; cells that a spreadsheet would
    /// run as a formula — starting with `=`, `+`, `-`, `@`, tab or CR — are prefixed with `'`).
    #[param(value_type = Option<String>)]
    format: Option<String>,
}

/// One page of accounts, by username.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    pub data: Vec<AccountSummary>,
    pub pagination: UserPagination,
}

/// Where a page of accounts is (the same fields as the sessions list's `pagination`).
#[derive(Debug, Serialize, ToSchema)]
pub struct UserPagination {
    pub page: u64,
    pub size: u64,
    pub total: u64,
    pub total_pages: u64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    pub username: String,
    /// Default `member`.
    #[serde(default)]
    pub role: Option<Role>,
    pub group: Option<String>,
    /// A first password (the rules of any new password); omitted: one is generated and answered
    /// once (unless `invite`).
    pub password: Option<String>,
    /// `true`: answer a single-use invite link (72 h) instead of a password; its owner chooses
    /// their own with it. Not with `password`.
    #[serde(default)]
    pub invite: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedUser {
    pub user: AccountSummary,
    /// The generated first password, shown this once (absent when the request gave one, or
    /// asked for an invite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The invite link, shown this once, when the request asked for one (`invite: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite: Option<InviteLink>,
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

/// The lab's accounts, by username: one page (`page`, `size`), or with `format=csv` every match
/// as a CSV file (`username,role,group,disabled,must_change_password,created_at,password_changed_at`).
#[utoipa::path(get, path = "/api/v1/users", tag = "auth", params(UserParams),
    responses((status = 200, content((UserList = "application/json"), (String = "text/csv"))),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 422, body = ErrorBody, description = "a bad role, state, page, size or format")))]
async fn list_users(
    State(app): State<AuthState>,
    _admin: AdminCaller,
    ApiQuery(p): ApiQuery<UserParams>,
) -> Result<Response, ApiError> {
    let role = match p.role.as_deref() {
        None | Some("") => None,
        Some("admin") => Some(Role::Admin),
        Some("member") => Some(Role::Member),
        Some(_) => return Err(ApiError::field(&["query", "role"], "must be admin or member", "enum")),
    };
    let disabled = match p.disabled.as_deref() {
        None | Some("") => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(ApiError::field(&["query", "disabled"], "must be true or false", "bool_parsing")),
    };
    let csv = match p.format.as_deref() {
        None | Some("") | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::field(&["query", "format"], "must be json or csv", "enum")),
    };
    let page = crate::http::extract::query_number("page", p.page, 1, u64::MAX / 1000)?;
    let size = crate::http::extract::query_number("size", p.size, 20, 100)?;
    let q = p.q.unwrap_or_default().to_ascii_lowercase();
    let group = p.group.filter(|g| !g.is_empty());
    let all = app.store.read(accounts::list).await?;
    let mut matches: Vec<&accounts::Account> = all
        .iter()
        .filter(|a| role.is_none_or(|r| a.role == r))
        .filter(|a| disabled.is_none_or(|d| a.disabled == d))
        .filter(|a| group.as_ref().is_none_or(|g| a.group.as_ref() == Some(g)))
        .filter(|a| q.is_empty() || a.username.as_str().to_ascii_lowercase().contains(&q))
        .collect();
    matches.sort_by(|a, b| a.username.cmp(&b.username));
    if csv {
        return export_csv(&matches);
    }
    let total = matches.len() as u64;
    let skip = usize::try_from((page - 1).saturating_mul(size)).unwrap_or(usize::MAX);
    let data = matches.iter().skip(skip).take(size as usize).map(|a| AccountSummary::from(*a)).collect();
    let pagination = UserPagination { page, size, total, total_pages: total.div_ceil(size.max(1)) };
    Ok(axum::Json(UserList { data, pagination }).into_response())
}

/// A cell a spreadsheet will not run as a formula: one starting with `=`, `+`, `-`, `@`, a tab or
/// a carriage return gets a leading `'` (OWASP's advice for CSV injection).
pub fn csv_cell(text: &str) -> std::borrow::Cow<'_, str> {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}").into(),
        _ => text.into(),
    }
}

fn export_csv(accounts: &[&accounts::Account]) -> Result<Response, ApiError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = ["username", "role", "group", "disabled", "must_change_password", "created_at", "password_changed_at"];
    w.write_record(header).map_err(ApiError::internal)?;
    for a in accounts {
        let s = AccountSummary::from(*a);
        let row = [
            s.username.as_str().to_string(),
            s.role.as_str().to_string(),
            s.group.unwrap_or_default(),
            s.disabled.to_string(),
            s.must_change_password.to_string(),
            s.created_at,
            s.password_changed_at,
        ];
        w.write_record(row.iter().map(|c| csv_cell(c).into_owned())).map_err(ApiError::internal)?;
    }
    let bytes = w.into_inner().map_err(ApiError::internal)?;
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("text/csv; charset=utf-8")),
            (
                axum::http::header::CONTENT_DISPOSITION,
                axum::http::HeaderValue::from_static("attachment; filename=\"users.csv\""),
            ),
            (axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store")),
        ],
        bytes,
    )
        .into_response())
}

/// Add an account: a member (the default) or an admin, with an optional group. Without a
/// `password` one is generated and answered once; with `invite: true` an invite link is answered
/// instead (the generated password is shown to nobody: the link is the way in).
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
    let invite = body.invite == Some(true);
    if invite && body.password.is_some() {
        return Err(ApiError::field(
            &["body", "invite"],
            "an invite link lets its owner choose the password: send `invite: true` or a `password`, not both",
            "value_error",
        ));
    }
    let (added, password) = create_account(&app, &admin, &meta, "user.create", body).await?;
    let answer = if invite {
        let link = make_invite(&app, &admin, &meta, &added.username).await?;
        CreatedUser { user: AccountSummary::from(&added), password: None, invite: Some(link) }
    } else {
        CreatedUser { user: AccountSummary::from(&added), password, invite: None }
    };
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
    if let Some(why) = name_problem(body.username.trim()) {
        errors.push(FieldError::new(&["body", "username"], why, "value_error"));
    }
    let group = body.group.map(|g| g.trim().to_string()).filter(|g| !g.is_empty());
    if let Some(why) = group.as_deref().and_then(group_problem) {
        errors.push(FieldError::new(&["body", "group"], why, "value_error"));
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
    let password_hash = hash(app, password.clone()).await?;
    let now_ms = app.clock.now_ms();
    // A password an admin chose or generated is replaced by its owner at first sign-in: a member's
    // and an admin's added on the Account page (`admin.add`: "their first password") alike.
    let must_change_password = matches!(action, "user.create" | "admin.add");
    let new = accounts::NewAccount { role, group, must_change_password };
    let added = accounts::store_account(&app.store, name.clone(), password_hash, new, now_ms).await;
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
    let name = account_in_path(&username)?;
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

/// What is wrong with a name under the username rule (1–64 of `A-Z a-z 0-9 - _ . @`, not a
/// reserved one), in words a person can act on; `None` when it is fine.
pub fn name_problem(name: &str) -> Option<String> {
    if let Some(why) = rule_problem(name, accounts::MAX_USERNAME_LEN) {
        return Some(why);
    }
    RESERVED
        .iter()
        .any(|r| r.eq_ignore_ascii_case(name))
        .then(|| format!("`{name}` is kept for the route /api/v1/users/{name}; choose another name"))
}

/// The same for a group name (no reserved ones).
pub fn group_problem(group: &str) -> Option<String> {
    rule_problem(group, accounts::MAX_GROUP_LEN)
}

fn rule_problem(text: &str, max: usize) -> Option<String> {
    let n = text.chars().count();
    if n == 0 {
        return Some("must not be empty".into());
    }
    if let Some(c) = text.chars().find(|c| invisible(*c)) {
        return Some(format!(
            "has an invisible or direction-changing character (U+{:04X}): it would look like another name; type it again",
            u32::from(c)
        ));
    }
    if let Some(c) = text.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_.@".contains(*c))) {
        let shown = if c.is_control() { format!("U+{:04X}", u32::from(c)) } else { format!("`{c}`") };
        return Some(format!("has {shown}: use 1–{max} characters: letters A-Z a-z, digits and - _ . @"));
    }
    (n > max).then(|| format!("must be at most {max} characters (this one has {n})"))
}

/// Characters that show as nothing or reorder what follows (zero-width, bidi controls, BOM…).
fn invisible(c: char) -> bool {
    matches!(u32::from(c),
        0x00AD | 0x061C | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF)
}

/// Delete an account for good: it can no longer sign in (its tokens and cookies stop at the next
/// request), its pending invites go; its sessions keep running (an admin still sees and ends
/// them; their `owner` stays the name, shown as a deleted account's) and the audit log keeps its
/// name, which is not given to another account, in any letter case. Never the last enabled
/// admin, and not oneself. `DELETE /api/v1/admins/{username}` is the same deletion.
#[utoipa::path(delete, path = "/api/v1/users/{username}", tag = "auth",
    params(("username" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the last enabled admin (`details.reason`: last), or oneself (self)")))]
async fn delete_user(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
) -> Result<Response, ApiError> {
    delete_account(&app, &admin, &meta, &username, "user.delete").await
}

/// The one deletion of an account, whichever route asks (`action` names it in the audit log):
/// the name is kept in `deleted_accounts` and never given again (a new account of that name
/// would otherwise inherit the old one's sessions, which are matched by name), the account's
/// sign-ins end, its pending invites go, its sessions keep running until an admin ends them.
pub(super) async fn delete_account(
    app: &AuthState,
    admin: &AdminCaller,
    meta: &RequestMeta,
    username: &str,
    action: &'static str,
) -> Result<Response, ApiError> {
    let audit = |result| {
        AuditEntry::new(meta, admin.actor(), action, result).target(crate::audit::truncate(username.to_string()))
    };
    if username == admin.username {
        crate::audit::record(&app.audit, audit(AuditResult::Failure)).await;
        return Err(ApiError::conflict("you cannot delete the account you are signed in with; ask another admin")
            .with_details(serde_json::json!({ "username": username, "reason": "self" })));
    }
    let name = account_in_path(username)?;
    let (by, now_ms) = (admin.actor(), app.clock.now_ms());
    let deleted = app.store.write_with(move |txn| accounts::delete_account(txn, &name, &by, now_ms)).await;
    if let Ok(account) = &deleted {
        app.signin.forget_account(account.username.as_str());
        app.signin.note_deleted(account.username.as_str());
        app.signin.revoke_all_before(&app.store, account.username.as_str(), now_ms.div_euclid(1000) + 1).await?;
    }
    let result = if deleted.is_ok() { AuditResult::Success } else { AuditResult::Failure };
    let details = deleted.as_ref().map_or(serde_json::json!({}), |a| serde_json::json!({ "role": a.role.as_str() }));
    crate::audit::record(&app.audit, audit(result).details(details)).await;
    deleted.map_err(account_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The account a `/users/{username}` path names: a name no account could have is a missing one.
fn account_in_path(username: &str) -> Result<Username, ApiError> {
    Username::parse(username)
        .map_err(|_| ApiError::not_found(format!("no account {}", crate::http::text::echo(username))))
}

/// A password reset's answer: the new password, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResetPassword {
    pub username: String,
    /// Generated; its owner replaces it at the next sign-in.
    pub password: String,
}

/// Reset an account's password: a generated one, answered once (`Cache-Control: no-store`), which
/// its owner replaces at the next sign-in. The account's sign-ins end at once. No body.
#[utoipa::path(post, path = "/api/v1/users/{username}/password", tag = "auth",
    params(("username" = String, Path)),
    responses(
        (status = 200, body = ResetPassword),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 404, body = ErrorBody)))]
async fn reset_password(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
) -> Result<Response, ApiError> {
    let audit = |result| {
        AuditEntry::new(&meta, admin.actor(), "user.reset_password", result)
            .target(crate::audit::truncate(username.clone()))
    };
    let name = account_in_path(&username)?;
    let lookup = name.clone();
    if app.store.read(move |txn| accounts::get(txn, lookup.as_str())).await?.is_none() {
        crate::audit::record(&app.audit, audit(AuditResult::Failure)).await;
        return Err(ApiError::not_found(format!("no account {username}")));
    }
    let password = accounts::random_password().map_err(ApiError::internal)?;
    let password_hash = hash(&app, password.clone()).await?;
    let now_ms = app.clock.now_ms();
    let target = name.clone();
    let set =
        app.store.write_with(move |txn| accounts::set_password_as(txn, &target, password_hash, now_ms, true)).await;
    if let Ok(account) = &set {
        // The guard holds the account to the change from its next request on.
        app.signin.note_account(account);
        // Tokens minted before this second end (not those of this second: its owner signs in
        // with the new password at once; an older one within the same second is the window).
        app.signin.revoke_all_before(&app.store, name.as_str(), now_ms.div_euclid(1000)).await?;
        if name.as_str() == accounts::INITIAL_ADMIN {
            accounts::forget_initial_password(&app.config.data_dir);
        }
    }
    crate::audit::record(&app.audit, audit(if set.is_ok() { AuditResult::Success } else { AuditResult::Failure }))
        .await;
    let account = set.map_err(account_error)?;
    no_store(
        StatusCode::OK,
        axum::Json(ResetPassword { username: account.username.to_string(), password }).into_response(),
    )
}

fn no_store(status: StatusCode, mut res: Response) -> Result<Response, ApiError> {
    *res.status_mut() = status;
    res.headers_mut().insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    Ok(res)
}

/// Most rows one bulk import takes.
pub const MAX_BULK_ROWS: usize = 1000;

/// `POST /api/v1/users/bulk` as JSON.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkUsers {
    /// At most 1,000.
    pub users: Vec<BulkRow>,
}

/// One account to create (CSV: a line under the header `username,role,group`; role and group may
/// be empty or left out).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRow {
    pub username: String,
    /// `member` (default) or `admin`.
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
}

/// One row's outcome.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkResult {
    /// 1-based, in the order sent (the CSV's header is not a row).
    pub row: usize,
    pub username: String,
    /// `created`, or `error` (then nothing at all was created).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The generated first password, shown this once (created rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// What is wrong with the row (error rows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A bulk import's answer: every row created.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkCreated {
    pub created: usize,
    pub results: Vec<BulkResult>,
}

/// Reads the rows of a bulk import from JSON or CSV.
fn bulk_rows(content_type: &str, body: &[u8]) -> Result<Vec<BulkRow>, ApiError> {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(crate::http::extract::parse_json::<BulkUsers>(body)?.users),
        "text/csv" => {
            let mut r = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(false).from_reader(body);
            let header = r.headers().map_err(|e| csv_error(&e))?.clone();
            let mut columns = [None; 3];
            for (i, h) in header.iter().enumerate() {
                let slot = match h.to_ascii_lowercase().as_str() {
                    "username" => 0,
                    "role" => 1,
                    "group" => 2,
                    other => {
                        return Err(ApiError::field(
                            &["body", "header"],
                            format!("has the column `{other}`; the columns are username, role, group"),
                            "value_error",
                        ));
                    }
                };
                if columns[slot].replace(i).is_some() {
                    return Err(ApiError::field(&["body", "header"], format!("names `{h}` twice"), "value_error"));
                }
            }
            let Some(user_col) = columns[0] else {
                return Err(ApiError::field(
                    &["body", "header"],
                    "must start the file and name the columns: username,role,group (role and group may be left out)",
                    "missing",
                ));
            };
            let mut rows = Vec::new();
            for record in r.records() {
                let record = record.map_err(|e| csv_error(&e))?;
                let cell = |c: Option<usize>| c.and_then(|i| record.get(i)).map(str::to_string);
                rows.push(BulkRow {
                    username: cell(Some(user_col)).unwrap_or_default(),
                    role: cell(columns[1]),
                    group: cell(columns[2]),
                });
                if rows.len() > MAX_BULK_ROWS {
                    // Enough to refuse: the rest is not read.
                    break;
                }
            }
            Ok(rows)
        }
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            crate::http::error::ErrorCode::UnsupportedMediaType,
            "send the accounts as JSON ({\"users\": […]}) or CSV (Content-Type: text/csv, header username,role,group)",
        )
        .with_details(serde_json::json!({ "content_type": content_type }))),
    }
}

fn csv_error(e: &csv::Error) -> ApiError {
    let line = e.position().map(|p| p.line());
    ApiError::field(&["body"], format!("is not CSV this server can read: {e}"), "csv").with_details(
        serde_json::json!({ "line": line, "errors": [{"loc": ["body"], "msg": e.to_string(), "type": "csv"}] }),
    )
}

/// Checks every row against the rules, the file itself and the names taken; answers each row's
/// problems (empty when it is fine).
fn check_rows(rows: &[BulkRow], taken: &std::collections::HashMap<String, bool>) -> Vec<Vec<String>> {
    let mut first_seen: std::collections::HashMap<String, (usize, &str)> = std::collections::HashMap::new();
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let mut errors = Vec::new();
            let name = row.username.trim();
            if let Some(why) = name_problem(name) {
                errors.push(format!("username {why}"));
            } else {
                let key = name.to_ascii_lowercase();
                match first_seen.get(&key) {
                    Some((n, first)) if *first == name => errors.push(format!("username `{name}` is also on row {n}")),
                    Some((n, first)) => errors.push(format!(
                        "username `{name}` differs only in case from `{first}` on row {n}; names are unique without regard to case"
                    )),
                    None => {
                        first_seen.insert(key.clone(), (i + 1, name));
                    }
                }
                match taken.get(&key) {
                    Some(false) => errors.push(format!("username `{name}` is taken by an existing account (without regard to case)")),
                    Some(true) => errors.push(format!(
                        "username `{name}` belonged to a deleted account; its history keeps the name, so it is not given again"
                    )),
                    None => {}
                }
            }
            match row.role.as_deref().map(str::trim) {
                None | Some("") | Some("member") | Some("admin") => {}
                Some(other) => errors.push(format!("role `{}` is not admin or member", other.escape_debug())),
            }
            if let Some(why) = row.group.as_deref().map(str::trim).filter(|g| !g.is_empty()).and_then(group_problem) {
                errors.push(format!("group {why}"));
            }
            errors
        })
        .collect()
}

/// Create up to 1,000 accounts at once from JSON (`{"users": [{username, role?, group?}]}`) or
/// CSV (`text/csv`, header `username,role,group`). All or nothing: every row is checked first
/// (the username rule, invisible and bidi characters, a name twice or differing only in case in
/// the file, a name taken, the role, the group) and a single bad row creates nothing — the 422
/// answer's `details.results` says what is wrong with each row. Otherwise every account is
/// created in one transaction with a generated first password, answered this once
/// (`Cache-Control: no-store`) and replaced by its owner at first sign-in.
#[utoipa::path(post, path = "/api/v1/users/bulk", tag = "auth",
    request_body(content((BulkUsers = "application/json"), (String = "text/csv"))),
    responses(
        (status = 201, body = BulkCreated),
        (status = 400, body = ErrorBody, description = "not JSON"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 409, body = ErrorBody, description = "a name was taken while the import ran; nothing was created"),
        (status = 413, body = ErrorBody, description = "more than 1,000 rows (`details.max_rows`)"),
        (status = 415, body = ErrorBody, description = "neither JSON nor CSV"),
        (status = 422, body = ErrorBody, description = "no rows, a bad CSV header, or rows with problems: `details.results[]` per row; nothing was created")))]
async fn bulk_create(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let rows = bulk_rows(ct, &body)?;
    if rows.len() > MAX_BULK_ROWS {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            crate::http::error::ErrorCode::PayloadTooLarge,
            format!("one import takes at most {MAX_BULK_ROWS} rows; split the file and send each part"),
        )
        .with_details(serde_json::json!({ "max_rows": MAX_BULK_ROWS })));
    }
    if rows.is_empty() {
        return Err(ApiError::field(&["body", "users"], "has no rows", "missing"));
    }
    let taken = app.store.read(accounts::taken_names).await?;
    let problems = check_rows(&rows, &taken);
    let bad = problems.iter().filter(|p| !p.is_empty()).count();
    if bad > 0 {
        let results: Vec<BulkResult> = rows
            .iter()
            .zip(problems)
            .enumerate()
            .map(|(i, (row, errors))| BulkResult {
                row: i + 1,
                username: row.username.clone(),
                status: if errors.is_empty() { "ok" } else { "error" },
                role: None,
                group: None,
                password: None,
                errors,
            })
            .collect();
        crate::audit::record(
            &app.audit,
            AuditEntry::new(&meta, admin.actor(), "user.bulk_create", AuditResult::Failure)
                .details(serde_json::json!({ "rows": rows.len(), "bad_rows": bad })),
        )
        .await;
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            crate::http::error::ErrorCode::ValidationFailed,
            format!(
                "{bad} of {} rows have problems; nothing was created: fix them and send the file again",
                rows.len()
            ),
        )
        .with_details(serde_json::json!({ "results": results })));
    }
    // Every row is good: passwords are generated and hashed (on the hashing pool, a core each).
    let mut plans = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = Username::parse(row.username.trim()).map_err(ApiError::internal)?;
        let role = if row.role.as_deref().map(str::trim) == Some("admin") { Role::Admin } else { Role::Member };
        let group = row.group.as_deref().map(str::trim).filter(|g| !g.is_empty()).map(str::to_string);
        let password = accounts::random_password().map_err(ApiError::internal)?;
        plans.push((name, role, group, password));
    }
    let hashes = futures::future::try_join_all(plans.iter().map(|(_, _, _, p)| hash(&app, p.clone()))).await?;
    let now_ms = app.clock.now_ms();
    let to_add: Vec<_> = plans
        .iter()
        .zip(hashes)
        .map(|((name, role, group, _), h)| {
            let new = accounts::NewAccount { role: *role, group: group.clone(), must_change_password: true };
            (name.clone(), h, new)
        })
        .collect();
    let added = app.store.write_with(move |txn| accounts::add_many(txn, to_add, now_ms)).await;
    let added = match added {
        Ok(a) => a,
        Err(e) => {
            crate::audit::record(
                &app.audit,
                AuditEntry::new(&meta, admin.actor(), "user.bulk_create", AuditResult::Failure)
                    .details(serde_json::json!({ "rows": rows.len(), "cause": e.to_string() })),
            )
            .await;
            return Err(account_error(e));
        }
    };
    let mut results = Vec::with_capacity(added.len());
    for (i, (account, (_, _, _, password))) in added.iter().zip(plans).enumerate() {
        app.signin.note_account(account);
        crate::audit::record(
            &app.audit,
            AuditEntry::new(&meta, admin.actor(), "user.create", AuditResult::Success)
                .target(account.username.to_string())
                .details(serde_json::json!({ "role": account.role.as_str(), "bulk": true })),
        )
        .await;
        results.push(BulkResult {
            row: i + 1,
            username: account.username.to_string(),
            status: "created",
            role: Some(account.role),
            group: account.group.clone(),
            password: Some(password),
            errors: Vec::new(),
        });
    }
    crate::audit::record(
        &app.audit,
        AuditEntry::new(&meta, admin.actor(), "user.bulk_create", AuditResult::Success)
            .details(serde_json::json!({ "rows": results.len() })),
    )
    .await;
    no_store(StatusCode::CREATED, axum::Json(BulkCreated { created: results.len(), results }).into_response())
}

/// An invite link, shown this once (only a hash of its secret is kept).
#[derive(Debug, Serialize, ToSchema)]
pub struct InviteLink {
    pub username: String,
    /// `inv_…`: what `POST /api/v1/auth/invite` takes.
    pub token: String,
    /// The console's page for it (`<public_url>/invite#<token>`: the fragment never reaches a
    /// server log or a `Referer`).
    pub url: String,
    pub expires_at: String,
}

/// Make a single-use invite link for an account (good for 72 hours): its owner sets their own
/// password with it. A new link replaces the account's unused one. Answered once
/// (`Cache-Control: no-store`); only a hash of the secret is stored.
#[utoipa::path(post, path = "/api/v1/users/{username}/invite", tag = "auth",
    params(("username" = String, Path)),
    responses(
        (status = 201, body = InviteLink),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`forbidden_role`: not an admin"),
        (status = 404, body = ErrorBody)))]
async fn invite_user(
    State(app): State<AuthState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(username): Path<String>,
) -> Result<Response, ApiError> {
    let name = account_in_path(&username)?;
    let link = make_invite(&app, &admin, &meta, &name).await?;
    no_store(StatusCode::CREATED, axum::Json(link).into_response())
}

/// Makes (and audits) an invite link for `name`, replacing its unused one.
async fn make_invite(
    app: &AuthState,
    admin: &AdminCaller,
    meta: &RequestMeta,
    name: &Username,
) -> Result<InviteLink, ApiError> {
    let token = super::invites::new_token().map_err(ApiError::internal)?;
    let now_ms = app.clock.now_ms();
    // The inviter's own account, when it has one: deleting it voids the links it sent.
    let inviter_account = match admin.via {
        super::guard::AuthVia::Local => None,
        _ => {
            let me = admin.username.clone();
            app.store.read(move |txn| accounts::get(txn, &me)).await?.map(|a| a.username.to_string())
        }
    };
    let invite = super::invites::Invite {
        username: name.to_string(),
        inviter: admin.actor(),
        inviter_account,
        created_at_ms: now_ms,
        expires_at_ms: now_ms + super::invites::INVITE_TTL_MS,
        used_at_ms: None,
    };
    let secret = token.clone();
    let made = app.store.write_with(move |txn| super::invites::create(txn, &secret, invite)).await;
    crate::audit::record(
        &app.audit,
        AuditEntry::new(
            meta,
            admin.actor(),
            "user.invite",
            if made.is_ok() { AuditResult::Success } else { AuditResult::Failure },
        )
        .target(name.to_string()),
    )
    .await;
    let invite = made.map_err(account_error)?;
    let base = app.config.public_url.trim_end_matches('/');
    Ok(InviteLink {
        username: invite.username,
        url: format!("{base}/invite#{token}"),
        token,
        expires_at: crate::clock::rfc3339_ms(invite.expires_at_ms),
    })
}

/// Accepting an invite link.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptInvite {
    /// The link's `inv_…` token.
    #[schema(max_length = 128)]
    pub token: String,
    /// The password to set (the rules of any new password).
    pub password: String,
}

/// An accepted invite link: whose password was set.
#[derive(Debug, Serialize, ToSchema)]
pub struct InviteAccepted {
    /// The account's name: what to sign in with.
    pub username: String,
}

/// Accept an invite link: sets the account's password (its owner's choice: no change asked at
/// sign-in) and uses the link up; then sign in with `POST /api/v1/auth/login` as the username
/// answered (the link itself does not show whose it is). JSON only and from
/// this server's own pages, like sign-in. A link used before, expired (72 h), for an account
/// deleted since, or sent by an admin whose account was deleted since is refused (410 with the
/// reason's code); an unknown one is 404.
#[utoipa::path(post, path = "/api/v1/auth/invite", tag = "auth", request_body = AcceptInvite,
    responses(
        (status = 200, body = InviteAccepted, description = "the password is set; sign in with it as `username`"),
        (status = 400, body = ErrorBody, description = "body is not JSON"),
        (status = 403, body = ErrorBody, description = "`cross_origin`: sent from another site's page"),
        (status = 404, body = ErrorBody, description = "no such invite link"),
        (status = 410, body = ErrorBody, description = "`invite_used`, `invite_expired` or `invite_revoked` (the account or the inviter was deleted)"),
        (status = 415, body = ErrorBody, description = "not `application/json`"),
        (status = 422, body = ErrorBody, description = "a password the rules refuse"),
        (status = 429, body = ErrorBody, description = "many sign-ins at once, with Retry-After")))]
async fn accept_invite(
    State(app): State<AuthState>,
    _: super::login::SameOrigin,
    _: super::login::JsonOnly,
    meta: RequestMeta,
    ApiJson(body): ApiJson<AcceptInvite>,
) -> Result<Response, ApiError> {
    let token = body.token;
    let audit = |result, target: String, reason: &str| {
        AuditEntry::new(&meta, "anonymous", "auth.invite_accept", result)
            .target(target)
            .details(serde_json::json!({ "reason": reason }))
    };
    if token.len() > 128 || !token.starts_with(super::invites::TOKEN_PREFIX) {
        return Err(invite_error(super::invites::InviteError::Unknown));
    }
    let now_ms = app.clock.now_ms();
    let t = token.clone();
    let checked = app.store.read(move |txn| Ok(super::invites::check(txn, &t, now_ms))).await?;
    let invite = match checked {
        Ok(i) => i,
        Err(e) => {
            crate::audit::record(&app.audit, audit(AuditResult::Denied, String::new(), invite_reason(&e))).await;
            return Err(invite_error(e));
        }
    };
    if let Some(e) = password_rules("password", &body.password) {
        return Err(ApiError::validation(vec![e]));
    }
    let password_hash = app
        .signin
        .hashing
        .run(move || accounts::hash_password(&body.password))
        .await
        .map_err(super::login::pool_error)?
        .map_err(ApiError::internal)?;
    let now_ms = app.clock.now_ms();
    let accepted = app.store.write_with(move |txn| super::invites::accept(txn, &token, password_hash, now_ms)).await;
    let account = match accepted {
        Ok(a) => a,
        Err(e) => {
            crate::audit::record(&app.audit, audit(AuditResult::Denied, invite.username.clone(), invite_reason(&e)))
                .await;
            return Err(invite_error(e));
        }
    };
    app.signin.note_account(&account);
    app.signin.revoke_all_before(&app.store, account.username.as_str(), now_ms.div_euclid(1000)).await?;
    crate::audit::record(&app.audit, audit(AuditResult::Success, account.username.to_string(), "accepted")).await;
    Ok(axum::Json(InviteAccepted { username: account.username.to_string() }).into_response())
}

fn invite_reason(e: &super::invites::InviteError) -> &'static str {
    use super::invites::InviteError as E;
    match e {
        E::Unknown => "unknown",
        E::Used => "used",
        E::Expired => "expired",
        E::InviterGone => "inviter_deleted",
        E::AccountGone => "account_deleted",
        E::Account(_) | E::Store(_) => "error",
    }
}

fn invite_error(e: super::invites::InviteError) -> ApiError {
    use super::invites::InviteError as E;
    use crate::http::error::ErrorCode;
    let gone = |code, e: &E| {
        ApiError::new(StatusCode::GONE, code, e.to_string())
            .with_details(serde_json::json!({ "reason": invite_reason(e) }))
    };
    match e {
        E::Unknown => ApiError::not_found(e.to_string()),
        E::Used => gone(ErrorCode::InviteUsed, &e),
        E::Expired => gone(ErrorCode::InviteExpired, &e),
        E::InviterGone | E::AccountGone => gone(ErrorCode::InviteRevoked, &e),
        E::Account(a) => account_error(a),
        E::Store(s) => ApiError::from(s),
    }
}
