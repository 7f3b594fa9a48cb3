//! `/api/v1/notifications`: the caller's own notifications (members and admins alike; nobody
//! reads another's), and marking them read.

use crate::http::api_router::{Docs, routes};
use axum::Json;
use axum::extract::{FromRef, Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::{NotificationPage, NotificationView};
use crate::auth::guard::Gate;
use crate::auth::guard::SignedIn;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::ApiQuery;

/// What the notifications' handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct NotificationsState {
    pub store: crate::store::Store,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    NotificationsState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(D: list)).routes(routes!(D: mark_one)).routes(routes!(D: mark_all))
}

/// The most a list answers.
const MAX_LIMIT: usize = super::KEEP as usize;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// `true`: only unread ones.
    unread: Option<String>,
    /// At most this many (1–200, default 50).
    limit: Option<String>,
}

/// The caller's notifications, newest first, with the unread count.
#[utoipa::path(get, path = "/api/v1/notifications", tag = "notifications", params(ListParams),
    responses((status = 200, body = NotificationPage), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "`unread` not true/false, `limit` not 1–200")))]
async fn list(
    State(app): State<NotificationsState>,
    caller: SignedIn,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<Json<NotificationPage>, ApiError> {
    let unread = match p.unread.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::field(&["query", "unread"], "must be true or false", "bool_parsing")),
    };
    let limit = match p.limit.as_deref() {
        None | Some("") => 50,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::field(&["query", "limit"], format!("must be 1 to {MAX_LIMIT}"), "value_error"));
            }
        },
    };
    let user = caller.username.clone();
    let page = app.store.read(move |txn| super::list(txn, &user, unread, limit)).await?;
    Ok(Json(page))
}

/// Mark one of the caller's notifications read.
#[utoipa::path(post, path = "/api/v1/notifications/{id}/read", tag = "notifications",
    params(("id" = u64, Path, description = "the notification's `id`")),
    responses((status = 200, body = NotificationView), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "not one of the caller's notifications")))]
async fn mark_one(
    State(app): State<NotificationsState>,
    caller: SignedIn,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, ApiError> {
    let missing = || ApiError::not_found(format!("no notification {}", crate::http::text::echo(&id)));
    let seq: u64 = id.parse().map_err(|_| missing())?;
    let user = caller.username.clone();
    let marked = app.store.write(move |txn| super::mark_read(txn, &user, Some(seq))).await?;
    marked.and_then(|v| v.into_iter().next()).map(Json).ok_or_else(missing)
}

/// What marking all read did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MarkedAll {
    /// Notifications that were unread.
    pub marked: u64,
    pub unread: u64,
}

/// Mark all the caller's notifications read.
#[utoipa::path(post, path = "/api/v1/notifications/read", tag = "notifications",
    responses((status = 200, body = MarkedAll), (status = 401, body = ErrorBody)))]
async fn mark_all(State(app): State<NotificationsState>, caller: SignedIn) -> Result<Json<MarkedAll>, ApiError> {
    let user = caller.username.clone();
    let before = {
        let user = user.clone();
        app.store.read(move |txn| super::list(txn, &user, true, MAX_LIMIT)).await?.unread
    };
    app.store.write(move |txn| super::mark_read(txn, &user, None)).await?;
    Ok(Json(MarkedAll { marked: before, unread: 0 }))
}
