//! `/api/v1/resource-policies` (admins; `GET …/effective` for everyone signed in, their own) and
//! `/api/v1/groups` (admins).

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::model::Scope;
use super::usage;
use super::*;
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::Gate;
use crate::auth::guard::{AdminCaller, SignedIn};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::{ApiQuery, parse_json};

/// What the policy room's handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct PolicyState {
    pub policies: std::sync::Arc<Policies>,
    pub audit: std::sync::Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    PolicyState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: list_policies, create_policy))
        .routes(routes!(D: effective_policy))
        .routes(routes!(D: patch_policy, delete_policy))
        .routes(routes!(D: list_groups, create_group))
        .routes(routes!(D: patch_group, delete_group))
        .routes(routes!(D: get_usage))
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
    ApiQuery(p): ApiQuery<PolicyParams>,
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
        (status = 403, body = ErrorBody, description = "`?user=` from a member"),
        (status = 404, body = ErrorBody, description = "`?user=` names no account"),
        (status = 422, body = ErrorBody, description = "`?user=` is not a username")))]
async fn effective_policy(
    State(app): State<PolicyState>,
    caller: SignedIn,
    ApiQuery(p): ApiQuery<EffectiveParams>,
) -> Result<axum::Json<EffectiveView>, ApiError> {
    let user = match p.user.filter(|u| !u.is_empty()) {
        Some(u) if u != caller.username && !caller.is_admin() => {
            return Err(ApiError::forbidden("only admins may read another user's policy"));
        }
        Some(u) => u,
        None => return Ok(axum::Json(app.policies.effective(&caller.username).await?)),
    };
    if crate::auth::accounts::Username::parse(&user).is_err() {
        return Err(ApiError::field(
            &["query", "user"],
            format!("{} is not a username: 1-64 characters from A-Z a-z 0-9 - _ . @", crate::http::text::echo(&user)),
            "value_error",
        ));
    }
    Ok(axum::Json(app.policies.effective_of_account(&user).await?))
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

// ---- usage -----------------------------------------------------------------------------------

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageParams {
    /// Whose use (members: only their own, the default for them).
    user: Option<String>,
    /// Only runs of users while they were in this group.
    group: Option<String>,
    /// First day, `YYYY-MM-DD` (`YYYY-MM` with `granularity=month`); default: the first of this
    /// month. Days are UTC.
    from: Option<String>,
    /// Last day, inclusive; default: today.
    to: Option<String>,
    /// `day` (default) or `month` (whole months: `from` and `to` are widened to theirs).
    granularity: Option<String>,
    /// `user` (default: a row per user and the group they were in) or `group`.
    by: Option<String>,
    /// `json` (default) or `csv` (as is `Accept: text/csv`).
    format: Option<String>,
}

/// One row of the usage answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageRow {
    /// `YYYY-MM-DD` or `YYYY-MM` (UTC).
    pub period: String,
    /// `null` in rows by group.
    pub user: Option<String>,
    /// The group the user was in while the sessions ran (`null`: none).
    pub group: Option<String>,
    /// Hours sessions were running.
    pub running_hours: f64,
    /// GPU memory held × hours, in GiB-hours.
    pub gpu_mem_gib_hours: f64,
    /// GPU slices (one per GPU session, a whole card counting as one) × hours.
    pub slice_hours: f64,
    /// CPU cores × hours.
    pub cpu_hours: f64,
}

/// `GET /api/v1/usage`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageReport {
    /// First and last day covered (UTC, inclusive).
    pub from: String,
    pub to: String,
    /// `day` or `month`.
    pub granularity: String,
    /// `user` or `group`.
    pub by: String,
    /// By period, then user or group.
    pub data: Vec<UsageRow>,
    /// The sum of every row (`period`: the range).
    pub totals: UsageRow,
}

const HOUR_MS: f64 = 3_600_000.0;

fn row(period: String, user: Option<String>, group: Option<String>, a: &usage::Amounts) -> UsageRow {
    let round = |v: f64| (v * 1e6).round() / 1e6;
    UsageRow {
        period,
        user,
        group,
        running_hours: round(a.running_ms as f64 / HOUR_MS),
        gpu_mem_gib_hours: round(a.gpu_mem_mib_ms as f64 / 1024.0 / HOUR_MS),
        slice_hours: round(a.slice_ms as f64 / HOUR_MS),
        cpu_hours: round(a.cpu_ms as f64 / HOUR_MS),
    }
}

fn parse_day(field: &str, text: &str, month_ok: bool) -> Result<time::Date, ApiError> {
    let day = time::macros::format_description!("[year]-[month]-[day]");
    if let Ok(d) = time::Date::parse(text, day) {
        return Ok(d);
    }
    // `YYYY-MM`: its first day.
    if month_ok
        && text.len() == 7
        && let Ok(d) = time::Date::parse(&format!("{text}-01"), day)
    {
        return Ok(d);
    }
    let want = if month_ok { "a date YYYY-MM-DD or a month YYYY-MM" } else { "a date YYYY-MM-DD" };
    Err(ApiError::field(
        &["query", field],
        format!("{} is not {want} (UTC)", crate::http::text::echo(text)),
        "date_parsing",
    ))
}

/// Most days one `granularity=day` answer covers, and most months a `month` one does.
const MAX_DAYS: i64 = 366;
const MAX_MONTHS: i64 = 120;

/// GPU time per user (or group) by UTC day or month, from the usage ledger: GPU-memory
/// GiB-hours, slice-hours, CPU-hours and running hours. Sessions still running count up to now.
/// Members see only their own; admins anyone's. `format=csv` (or `Accept: text/csv`) answers a
/// CSV file with the same columns.
#[utoipa::path(get, path = "/api/v1/usage", tag = "policies", params(UsageParams),
    responses((status = 200, content((UsageReport = "application/json"), (String = "text/csv"))),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "a member asking for another user's or a group's use"),
        (status = 404, body = ErrorBody, description = "no such account or group"),
        (status = 422, body = ErrorBody, description = "a bad date, `from` after `to`, a range too long, a bad name, granularity, by or format")))]
async fn get_usage(
    State(app): State<PolicyState>,
    caller: SignedIn,
    headers: axum::http::HeaderMap,
    ApiQuery(p): ApiQuery<UsageParams>,
) -> Result<Response, ApiError> {
    let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
    let granularity = match p.granularity.as_deref() {
        None | Some("") | Some("day") => usage::Granularity::Day,
        Some("month") => usage::Granularity::Month,
        Some(_) => return Err(ApiError::field(&["query", "granularity"], "must be day or month", "enum")),
    };
    let by = match p.by.as_deref() {
        None | Some("") | Some("user") => usage::By::User,
        Some("group") => usage::By::Group,
        Some(_) => return Err(ApiError::field(&["query", "by"], "must be user or group", "enum")),
    };
    let accepts_csv = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.split(',').any(|t| t.trim().starts_with("text/csv")));
    let csv = match p.format.as_deref() {
        None | Some("") => accepts_csv,
        Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::field(&["query", "format"], "must be json or csv", "enum")),
    };
    let mut user = nonempty(p.user);
    let group = nonempty(p.group);
    for (field, name) in [("user", &user), ("group", &group)] {
        if let Some(n) = name
            && crate::auth::accounts::Username::parse(n).is_err()
        {
            return Err(ApiError::field(
                &["query", field],
                format!(
                    "{} is not a {field} name: 1-64 characters from A-Z a-z 0-9 - _ . @",
                    crate::http::text::echo(n)
                ),
                "value_error",
            ));
        }
    }
    if !caller.is_admin() {
        match &user {
            Some(u) if *u != caller.username => {
                return Err(ApiError::forbidden("members see only their own use"));
            }
            _ => user = Some(caller.username.clone()),
        }
    }
    let month_ok = granularity == usage::Granularity::Month;
    let today = app.policies.today();
    let from = match nonempty(p.from) {
        Some(t) => parse_day("from", &t, month_ok)?,
        None => usage::month_start(today),
    };
    let to = match nonempty(p.to) {
        Some(t) => {
            let d = parse_day("to", &t, month_ok)?;
            // `to=2026-02` means the whole of February.
            if month_ok && t.len() == 7 { usage::month_end(d) } else { d }
        }
        None => today,
    };
    if from > to {
        return Err(ApiError::field(&["query", "from"], format!("{from} is after to ({to})"), "value_error"));
    }
    let (first, last) = match granularity {
        usage::Granularity::Day => (from, to),
        usage::Granularity::Month => (usage::month_start(from), usage::month_end(to)),
    };
    let days = i64::from(last.to_julian_day() - first.to_julian_day()) + 1;
    let months = i64::from(last.year() - first.year()) * 12 + i64::from(u8::from(last.month()))
        - i64::from(u8::from(first.month()))
        + 1;
    match granularity {
        usage::Granularity::Day if days > MAX_DAYS => {
            return Err(ApiError::field(
                &["query", "to"],
                format!("{days} days asked; a daily answer covers at most {MAX_DAYS} (ask granularity=month)"),
                "value_error",
            ));
        }
        usage::Granularity::Month if months > MAX_MONTHS => {
            return Err(ApiError::field(
                &["query", "to"],
                format!("{months} months asked; a monthly answer covers at most {MAX_MONTHS}"),
                "value_error",
            ));
        }
        _ => {}
    }
    let (user_ok, group_ok) = app.policies.known(user.clone(), group.clone()).await?;
    if let (false, Some(u)) = (user_ok, &user) {
        return Err(ApiError::not_found(format!("no account {}", crate::http::text::echo(u))));
    }
    if let (false, Some(g)) = (group_ok, &group) {
        return Err(ApiError::not_found(format!("no group {}", crate::http::text::echo(g))));
    }
    let q = usage::Query { user, group, from: first, to: last, granularity, by };
    let rollup = app.policies.usage(q).await?;
    let mut total = usage::Amounts::default();
    let data: Vec<UsageRow> = rollup
        .into_iter()
        .map(|((period, user, group), a)| {
            total.add(&a);
            row(period, user, group, &a)
        })
        .collect();
    let (granularity, by) = (
        if month_ok { "month" } else { "day" }.to_string(),
        if by == usage::By::User { "user" } else { "group" }.to_string(),
    );
    if csv {
        return usage_csv(&data, &first.to_string(), &last.to_string());
    }
    let totals = row(format!("{first}..{last}"), None, None, &total);
    Ok(axum::Json(UsageReport { from: first.to_string(), to: last.to_string(), granularity, by, data, totals })
        .into_response())
}

fn usage_csv(rows: &[UsageRow], from: &str, to: &str) -> Result<Response, ApiError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["period", "user", "group", "running_hours", "gpu_mem_gib_hours", "slice_hours", "cpu_hours"])
        .map_err(ApiError::internal)?;
    for r in rows {
        let cells = [
            r.period.clone(),
            r.user.clone().unwrap_or_default(),
            r.group.clone().unwrap_or_default(),
            r.running_hours.to_string(),
            r.gpu_mem_gib_hours.to_string(),
            r.slice_hours.to_string(),
            r.cpu_hours.to_string(),
        ];
        w.write_record(cells.iter().map(|c| crate::auth::user_routes::csv_cell(c).into_owned()))
            .map_err(ApiError::internal)?;
    }
    let bytes = w.into_inner().map_err(ApiError::internal)?;
    let disposition = format!("attachment; filename=\"usage-{from}-{to}.csv\"");
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("text/csv; charset=utf-8")),
            (
                axum::http::header::CONTENT_DISPOSITION,
                axum::http::HeaderValue::from_str(&disposition)
                    .unwrap_or(axum::http::HeaderValue::from_static("attachment")),
            ),
            (axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store")),
        ],
        bytes,
    )
        .into_response())
}
