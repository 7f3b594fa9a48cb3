//! `GET /api/v1/audit`: the audit log, newest first, paginated (by page, or by key with
//! `cursor`) and filterable.

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use super::AuditState;
use super::{AuditFilter, AuditRecord};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::ApiQuery;

pub const DEFAULT_PAGE_SIZE: u64 = 50;
pub const MAX_PAGE_SIZE: u64 = 500;

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuditState: FromRef<S>,
    Gate: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(D: list_audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// 1-based page number (default 1).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
    page: Option<String>,
    /// Entries per page, 1-500 (default 50).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 500)]
    size: Option<String>,
    /// Part of the action's name, ignoring case (`cluster` finds `cluster.register`, `register`
    /// too; a whole name finds itself), or a prefix ending in `*` (`cluster.*`).
    action: Option<String>,
    /// Part of the actor, ignoring case (`admin` finds `admin:admin` and `admin:alice`; actors are
    /// `admin:<name>`, `user:<name>`, `operator:<cluster id>`, `anonymous`, `cli`, `system`).
    actor: Option<String>,
    /// Key paging: entries older than this id (a `next_cursor`), newest first; `page` is then
    /// ignored and nothing beyond the page is read (no `total`: it is 0).
    cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Pagination {
    pub page: u64,
    pub size: u64,
    pub total: u64,
    pub total_pages: u64,
    /// Pass as `cursor` for the next (older) page; absent on the last page. In page mode, the id
    /// of this page's oldest entry when more follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub data: Vec<AuditRecord>,
    pub pagination: Pagination,
}

fn number(name: &str, raw: Option<&str>, default: u64, max: u64) -> Result<u64, ApiError> {
    let Some(raw) = raw else { return Ok(default) };
    match raw.trim().parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::field(&["query", name], format!("must be a whole number between 1 and {max}"), "range")),
    }
}

/// The audit log: logins (with result, username, client address and user agent) and admin
/// changes, each with its actor and request id. Newest first.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", params(AuditQuery),
    responses(
        (status = 200, body = AuditPage),
        (status = 401, body = ErrorBody, description = "no or invalid admin credentials"),
        (status = 403, body = ErrorBody, description = "an operator token"),
        (status = 422, body = ErrorBody, description = "page or size out of range, or a cursor that is no entry id")))]
async fn list_audit(
    State(app): State<AuditState>,
    _caller: AdminCaller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<axum::Json<AuditPage>, ApiError> {
    let page = number("page", q.page.as_deref(), 1, u64::from(u32::MAX))?;
    let size = number("size", q.size.as_deref(), DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
    let filter = AuditFilter { action: q.action.filter(|a| !a.is_empty()), actor: q.actor.filter(|a| !a.is_empty()) };
    let cursor = q.cursor.filter(|c| !c.is_empty());
    if let Some(c) = &cursor
        && ulid::Ulid::from_string(c).is_err()
    {
        return Err(ApiError::field(&["query", "cursor"], "must be an entry id (a next_cursor)", "value_error"));
    }
    // Read-your-writes: what this admin just did is in the answer.
    app.audit.flush().await;
    if let Some(cursor) = cursor {
        let (data, next_cursor) =
            app.store.read(move |txn| super::list_before(txn, &filter, Some(&cursor), size)).await?;
        return Ok(axum::Json(AuditPage {
            data,
            pagination: Pagination { page: 1, size, total: 0, total_pages: 0, next_cursor },
        }));
    }
    let (data, total) = app.store.read(move |txn| super::list(txn, &filter, page, size)).await?;
    let next_cursor = (page.saturating_mul(size) < total).then(|| data.last().map(|r| r.id.clone())).flatten();
    Ok(axum::Json(AuditPage {
        data,
        pagination: Pagination { page, size, total, total_pages: total.div_ceil(size), next_cursor },
    }))
}
