//! `/api/v1/offerings`, `/api/v1/sessions` and `GET /internal/connect/verify`.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

use super::connect::{Denied, VerifyRequest};
use super::model::*;
use super::offerings::{OfferingCreate, OfferingPatch};
use super::{CreateSession, SessionError, SessionQuery};
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::Gate;
use crate::auth::guard::{AdminCaller, SignedIn};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::extract::{ApiQuery, parse_json, query_number};
use crate::http::idempotency;

/// What the sessions' handlers and the relay use (made from the router state by the composition
/// root).
#[derive(Clone)]
pub struct SessionsState {
    pub config: Arc<crate::config::Config>,
    pub store: crate::store::Store,
    pub clock: crate::clock::Clock,
    pub sessions: Arc<super::Sessions>,
    pub idempotency: Arc<crate::http::idempotency::InFlight>,
    pub audit: Arc<crate::audit::AuditLog>,
    /// The live TLS certificate when serving HTTPS (the relay's scheme).
    pub tls: Option<Arc<crate::http::tls::CertReloader>>,
    /// The accounts held in memory: whether a session's owner names one (admins' views).
    pub signin: Arc<crate::auth::login::SignIn>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    SessionsState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: list_offerings, create_offering))
        .routes(routes!(D: show_offering, patch_offering, delete_offering))
        .routes(routes!(D: list_sessions, create_session))
        .routes(routes!(D: show_session, delete_session))
        .routes(routes!(D: pause_session))
        .routes(routes!(D: resume_session))
        .routes(routes!(D: connect_session))
        .routes(routes!(D: connect_verify))
        .routes(routes!(D: drain_node))
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Invalid { field, message, kind } => ApiError::field(&["body", field], message, kind),
            SessionError::NotFound(m) => ApiError::not_found(m),
            SessionError::Conflict { code, message, details } => {
                ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
            SessionError::Cluster { code, message, source, session } => {
                let mut details = serde_json::json!({ "cause": source.to_string() });
                if let Some(s) = session {
                    details["session_id"] = serde_json::json!(s);
                }
                if code == ErrorCode::ClusterUnreachable {
                    details["hint"] = serde_json::json!(
                        "check the cluster on the Clusters page; if it is gone for good, delete with ?force=true"
                    );
                }
                ApiError::new(StatusCode::BAD_GATEWAY, code, message).with_details(details)
            }
            SessionError::Store(e) => ApiError::from(e),
        }
    }
}

// ---- offerings ---------------------------------------------------------------------------

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct OfferingParams {
    /// `active` or `inactive`.
    #[param(value_type = Option<crate::sessions::model::OfferingStatus>, inline)]
    status: Option<String>,
}

/// The offerings catalogue, by name: an admin sees every offering, a member those visible to every
/// member or to their group (`visible_to`).
#[utoipa::path(get, path = "/api/v1/offerings", tag = "sessions", params(OfferingParams),
    responses((status = 200, body = OfferingList), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn list_offerings(
    State(app): State<SessionsState>,
    caller: SignedIn,
    ApiQuery(p): ApiQuery<OfferingParams>,
) -> Result<axum::Json<OfferingList>, ApiError> {
    let status = match p.status.as_deref() {
        None | Some("") => None,
        Some("active") => Some(OfferingStatus::Active),
        Some("inactive") => Some(OfferingStatus::Inactive),
        Some(_) => return Err(ApiError::field(&["query", "status"], "must be active or inactive", "enum")),
    };
    let viewer = viewer(&app, &caller).await?;
    Ok(axum::Json(OfferingList { data: app.sessions.offerings(status, viewer).await? }))
}

/// What the caller may see of the catalogue: an admin all, a member what their group may.
async fn viewer(app: &SessionsState, caller: &SignedIn) -> Result<Viewer, ApiError> {
    if caller.is_admin() {
        return Ok(Viewer::Admin);
    }
    let name = caller.username.clone();
    let account = app.store.read(move |txn| crate::auth::accounts::get(txn, &name)).await?;
    Ok(Viewer::Member { group: account.and_then(|a| a.group) })
}

/// Add an offering.
#[utoipa::path(post, path = "/api/v1/offerings", tag = "sessions", request_body = OfferingCreate,
    responses((status = 201, body = OfferingView), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the name is taken"), (status = 422, body = ErrorBody)))]
async fn create_offering(
    State(app): State<SessionsState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: OfferingCreate = parse_json(&body)?;
    let name = req.name.clone();
    let outcome = app.sessions.create_offering(req).await.map_err(ApiError::from);
    let target = outcome.as_ref().map(|o| o.id.clone()).unwrap_or_default();
    audit(&app.audit, &meta, &admin, "offering.create", &target, serde_json::json!({ "name": name }), &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

/// One offering (to a member, one not visible to them answers 404 like a missing one).
#[utoipa::path(get, path = "/api/v1/offerings/{id}", tag = "sessions",
    params(("id" = String, Path, description = "off_<ULID>")),
    responses((status = 200, body = OfferingView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn show_offering(
    State(app): State<SessionsState>,
    caller: SignedIn,
    Path(id): Path<String>,
) -> Result<axum::Json<OfferingView>, ApiError> {
    let viewer = viewer(&app, &caller).await?;
    Ok(axum::Json(app.sessions.offering(&id, viewer).await?))
}

/// Edit an offering or (de)activate it; sessions keep the shape they were created with.
#[utoipa::path(patch, path = "/api/v1/offerings/{id}", tag = "sessions", request_body = OfferingPatch,
    params(("id" = String, Path, description = "off_<ULID>")),
    responses((status = 200, body = OfferingView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn patch_offering(
    State(app): State<SessionsState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<OfferingView>, ApiError> {
    let req: OfferingPatch = parse_json(&body)?;
    let outcome = app.sessions.patch_offering(&id, req).await.map_err(ApiError::from);
    let fields = outcome.as_ref().map(|(_, f)| f.clone()).unwrap_or_default();
    audit(&app.audit, &meta, &admin, "offering.patch", &id, serde_json::json!({ "fields": fields }), &outcome).await;
    Ok(axum::Json(outcome?.0))
}

/// Delete an offering no session was created from (otherwise 409 `offering_in_use`).
#[utoipa::path(delete, path = "/api/v1/offerings/{id}", tag = "sessions",
    params(("id" = String, Path, description = "off_<ULID>")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "offering_in_use: details.sessions")))]
async fn delete_offering(
    State(app): State<SessionsState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let outcome = app.sessions.delete_offering(&id).await.map_err(ApiError::from);
    let name = outcome.as_ref().cloned().unwrap_or_default();
    audit(&app.audit, &meta, &admin, "offering.delete", &id, serde_json::json!({ "name": name }), &outcome).await;
    outcome?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- sessions ----------------------------------------------------------------------------

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SessionParams {
    cluster_id: Option<String>,
    /// pending, preparing, running, paused, terminating, terminated or error.
    #[param(value_type = Option<Phase>, inline)]
    phase: Option<String>,
    owner: Option<String>,
    /// `true`: live only; `false`: ended only.
    #[param(value_type = Option<bool>)]
    live: Option<String>,
    /// 1-based page (default 1). Its cost grows with its distance from the nearer end of the list
    /// (the rows between are walked, keys only; the middle page costs most): to read through the
    /// history, page with `after`. Not with `after`.
    #[param(value_type = Option<u64>, minimum = 1, maximum = 18446744073709551_u64)]
    page: Option<String>,
    /// Page size 1–100 (default 20).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 100)]
    size: Option<String>,
    /// Cursor: the `next` of the previous answer (a session id, `ses_<ULID>`). Answers the rows
    /// after it, newest first, at the cost of one page at any depth; an id that is not (or no
    /// longer) listed answers from where it would sort. Not with `page`.
    #[param(value_type = Option<String>, min_length = 30, max_length = 30, pattern = "^ses_[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$")]
    after: Option<String>,
}

/// Sessions, newest first, with their total; by `page`, or by the cursor `after` (each answer's
/// `next`), which keeps its place while new sessions are created.
#[utoipa::path(get, path = "/api/v1/sessions", tag = "sessions", params(SessionParams),
    responses((status = 200, body = SessionPage), (status = 401, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "a bad filter, page, size or cursor (`after`), or `page` with `after`")))]
async fn list_sessions(
    State(app): State<SessionsState>,
    caller: SignedIn,
    ApiQuery(p): ApiQuery<SessionParams>,
) -> Result<axum::Json<SessionPage>, ApiError> {
    // A member lists their own: `owner` naming someone else is refused, not quietly widened.
    let owner = p.owner.filter(|o| !o.is_empty());
    let owner = match owner {
        Some(o) if !caller.may_act_for(&o) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::ForbiddenRole,
                "a member lists only their own sessions; leave out owner or name yourself",
            )
            .with_details(serde_json::json!({ "owner": o })));
        }
        Some(o) => Some(o),
        None if caller.is_admin() => None,
        None => Some(caller.username.clone()),
    };
    let phase = match p.phase.as_deref() {
        None | Some("") => None,
        Some(s) => Some(Phase::parse(s).ok_or_else(|| {
            ApiError::field(
                &["query", "phase"],
                "must be pending, preparing, running, paused, terminating, terminated or error",
                "enum",
            )
        })?),
    };
    let live = match p.live.as_deref() {
        None | Some("") => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(ApiError::field(&["query", "live"], "must be true or false", "bool_parsing")),
    };
    let after = match p.after.as_deref() {
        None | Some("") => None,
        Some(text) => Some(super::listing::parse_cursor(text).ok_or_else(|| {
            ApiError::field(
                &["query", "after"],
                "must be the `next` of a previous answer: a session id, ses_ and 26 characters of a ULID",
                "value_error",
            )
        })?),
    };
    if after.is_some() && p.page.as_deref().is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::field(&["query", "after"], "page by `after` or by `page`, not both", "value_error"));
    }
    let q = SessionQuery {
        cluster_id: p.cluster_id.filter(|c| !c.is_empty()),
        phase,
        owner,
        live,
        page: query_number("page", p.page, 1, u64::MAX / 1000)?,
        size: query_number("size", p.size, 20, 100)?,
        after,
    };
    let mut page = app.sessions.list(q).await?;
    mark_owner(&app, &caller, &mut page.data);
    app.sessions.with_disks(&mut page.data).await?;
    Ok(axum::Json(page))
}

/// Start a session from an offering: the record is written, then its GShareSession is applied.
#[utoipa::path(post, path = "/api/v1/sessions", tag = "sessions", request_body = CreateSession,
    params(("Idempotency-Key" = Option<String>, Header, description = "replays the first answer for 24 h")),
    responses(
        (status = 201, body = SessionView, description = "started (its GShareSession applied), or queued: phase pending with queue_position and queued_reason when the owner's policy allows max_queued and the cluster has no room now (nothing applied until the queue starts it)"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody, description = "no such offering or cluster"),
        (status = 409, body = ErrorBody, description = "offering_inactive, cluster_unavailable, no_cluster, operator_not_connected (details.operator_state: the cluster's operator has not called back recently), quota_exceeded (the owner's policy: {limit, active}, {limit, queued}, or {resource, limit, used, request} with resource gpu_hours for a used-up budget), or unserviceable (no schedulable card could hold it)"),
        (status = 422, body = ErrorBody),
        (status = 502, body = ErrorBody, description = "cluster_apply_failed: recorded with phase error; details.session_id, details.cause"),
    ))]
async fn create_session(
    State(app): State<SessionsState>,
    admin: SignedIn,
    meta: RequestMeta,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = idempotency::key_from(&headers)?;
    let req: CreateSession = parse_json(&body)?;
    if let Some(owner) = req.owner.as_deref()
        && !admin.may_act_for(owner)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenRole,
            "only an admin may start a session for someone else; leave out owner",
        )
        .with_details(serde_json::json!({ "owner": owner })));
    }
    let raw: serde_json::Value = parse_json(&body)?;
    let scope = admin.actor();
    let viewer = viewer(&app, &admin).await?;
    idempotency::run(&app.store, &app.clock, &app.idempotency, &scope, key, &raw, || async {
        let offering = req.offering_id.clone();
        let outcome = app.sessions.create(req, &admin.username, viewer).await.map_err(ApiError::from);
        let target = match &outcome {
            Ok(s) => s.id.clone(),
            Err(e) => e.details.get("session_id").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        };
        let details = match &outcome {
            Ok(s) => serde_json::json!({ "offering_id": offering, "cluster_id": s.cluster_id }),
            Err(_) => serde_json::json!({ "offering_id": offering }),
        };
        audit(&app.audit, &meta, &admin, "session.create", &target, details, &outcome).await;
        let mut view = SessionView::from(&outcome?);
        mark_owner(&app, &admin, std::slice::from_mut(&mut view));
        app.sessions.with_queue_positions(std::slice::from_mut(&mut view)).await?;
        let value = serde_json::to_value(view).map_err(ApiError::internal)?;
        Ok((StatusCode::CREATED, value))
    })
    .await
}

/// One session.
#[utoipa::path(get, path = "/api/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "ses_<ULID>")),
    responses((status = 200, body = SessionView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn show_session(
    State(app): State<SessionsState>,
    caller: SignedIn,
    Path(id): Path<String>,
) -> Result<axum::Json<SessionView>, ApiError> {
    let mut view = SessionView::from(&owned(&app, &caller, &id).await?);
    mark_owner(&app, &caller, std::slice::from_mut(&mut view));
    app.sessions.with_disks(std::slice::from_mut(&mut view)).await?;
    app.sessions.with_queue_positions(std::slice::from_mut(&mut view)).await?;
    Ok(axum::Json(view))
}

/// For an admin, whether each session's owner names an account, a deleted one or none (free
/// text from before accounts): read from the accounts the server holds in memory, two map
/// lookups a row, so a page costs the same however many accounts there are. Members' views
/// leave it out (their sessions are their own account's).
fn mark_owner(app: &SessionsState, caller: &SignedIn, views: &mut [SessionView]) {
    if !caller.is_admin() {
        return;
    }
    for v in views {
        v.owner_account = Some(if app.signin.standing(&v.owner).is_some() {
            OwnerAccount::Account
        } else if app.signin.was_deleted(&v.owner) {
            OwnerAccount::Deleted
        } else {
            OwnerAccount::External
        });
    }
}

/// The session, if the caller may see it: an admin any, a member their own. Another member's
/// session answers exactly as a missing one (same read, same 404), so ids tell nothing.
async fn owned(app: &SessionsState, caller: &SignedIn, id: &str) -> Result<SessionRecord, ApiError> {
    let session = app.sessions.get(id).await;
    match session {
        Ok(s) if caller.may_act_for(&s.owner) => Ok(s),
        Ok(_) => Err(SessionError::NotFound("no such session".into()).into()),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct DeleteParams {
    /// `true`: mark it terminated without asking the cluster (for a cluster that is gone).
    force: Option<String>,
}

/// End a session: its GShareSession is deleted; the operator's finalizer reports Terminated.
#[utoipa::path(delete, path = "/api/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path), DeleteParams),
    responses((status = 200, body = SessionView, description = "terminating (or terminated when nothing holds the CR, or at once for a queued session: nothing was applied)"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "session_conflict: already ended"),
        (status = 502, body = ErrorBody, description = "cluster_unreachable or cluster_apply_failed")))]
async fn delete_session(
    State(app): State<SessionsState>,
    admin: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
    ApiQuery(p): ApiQuery<DeleteParams>,
) -> Result<axum::Json<SessionView>, ApiError> {
    let force = match p.force.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::field(&["query", "force"], "must be true or false", "bool_parsing")),
    };
    owned(&app, &admin, &id).await?;
    let outcome = app.sessions.delete(&id, force, &admin.username).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "session.delete", &id, serde_json::json!({ "force": force }), &outcome).await;
    Ok(axum::Json(SessionView::from(&outcome?)))
}

/// Pause (cold): the pod goes, the CR and its volumes stay.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/pause", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "session_conflict"), (status = 502, body = ErrorBody)))]
async fn pause_session(
    State(app): State<SessionsState>,
    admin: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<axum::Json<SessionView>, ApiError> {
    owned(&app, &admin, &id).await?;
    let outcome = app.sessions.pause(&id, &admin.username).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "session.pause", &id, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(SessionView::from(&outcome?)))
}

/// Resume a paused session.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/resume", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "session_conflict"), (status = 502, body = ErrorBody)))]
async fn resume_session(
    State(app): State<SessionsState>,
    admin: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<axum::Json<SessionView>, ApiError> {
    owned(&app, &admin, &id).await?;
    let outcome = app.sessions.resume(&id).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &admin, "session.resume", &id, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(SessionView::from(&outcome?)))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectRequest {
    /// `code`, `lab` or `terminal` (default `lab`).
    #[serde(default)]
    pub kind: Option<String>,
}

/// A one-time URL (300 s) that opens a running session's app through the session domain.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/connect", tag = "sessions", params(("id" = String, Path)),
    request_body = ConnectRequest,
    responses((status = 200, body = Connection), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "session_not_running or no_session_domain"),
        (status = 422, body = ErrorBody)))]
async fn connect_session(
    State(app): State<SessionsState>,
    admin: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<Connection>, ApiError> {
    let req: ConnectRequest = if body.is_empty() { ConnectRequest { kind: None } } else { parse_json(&body)? };
    let kind = req.kind.unwrap_or_else(|| "lab".into());
    let session = owned(&app, &admin, &id).await?;
    // Minted for the owner; an admin opening someone else's session is audited as such.
    let outcome = app.sessions.connect(&id, &kind).await.map_err(ApiError::from);
    let details = serde_json::json!({
        "kind": kind,
        "owner": session.owner,
        "as_admin": session.owner != admin.username,
    });
    audit(&app.audit, &meta, &admin, "session.connect", &id, details, &outcome).await;
    Ok(axum::Json(outcome?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct VerifyParams {
    /// A connection token (`cnx_…`), when the ingress passes it here.
    token: Option<String>,
}

/// Forward-auth for session ingresses (no JWT). The session is the one `X-Original-URL` (or
/// `X-Original-URI`; both must agree when both are sent) routes to; an ambiguous target (dot-segments,
/// escaped slashes, control characters, repeated headers, none at all…) is refused. Credentials for
/// that session only: its `gshare_session` cookie, else a one-time token from `?token=`,
/// `gshare_cnx` in the original URI, or `X-Gshare-Cnx`. A token is checked before it is spent
/// and stays good for the client that first redeemed it (`X-Real-IP` and `User-Agent`) until its
/// cookie comes back or 120 s pass; a HEAD (`X-Original-Method`) redeems nothing; an accepted cookie
/// older than 5 minutes is renewed (Set-Cookie). Every refusal is a 401 (an nginx `auth_request`
/// turns any other status into a 500) naming the reason.
#[utoipa::path(get, path = "/internal/connect/verify", tag = "internal", params(VerifyParams),
    responses(
        (status = 200, description = "allowed: X-GShare-Session (and X-GShare-User + Set-Cookie when a token was redeemed; Set-Cookie alone when the cookie was renewed)"),
        (status = 401, body = ErrorBody, description = "unauthenticated: details.reason"),
    ))]
async fn connect_verify(
    State(app): State<SessionsState>,
    State(gate): State<crate::auth::guard::Gate>,
    ApiQuery(p): ApiQuery<VerifyParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    // Every value, lossily: a repeated header is refused, a non-ASCII byte is refused by the parser.
    let all =
        |name: &str| headers.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
    let req = VerifyRequest {
        cookies: super::connect::session_cookies(&headers),
        original_uri: all("x-original-uri"),
        original_url: all("x-original-url"),
        query_token: p.token,
        header_token: text("x-gshare-cnx"),
        method: text("x-original-method"),
        client_addr: text("x-real-ip")
            .or_else(|| text("x-forwarded-for").and_then(|v| v.split(',').next().map(|a| a.trim().to_string()))),
        user_agent: text("user-agent"),
        // The console cookie when the ingress forwards it; through our relay (which drops it)
        // the user the relay verified and signed.
        console_user: crate::auth::guard::console_user(&gate, &headers)
            .or_else(|| text(super::connect::CONSOLE_USER_HEADER).and_then(|v| app.sessions.asserted_console_user(&v))),
    };
    match app.sessions.verify(req).await? {
        Ok(v) => {
            let mut h = HeaderMap::new();
            let put = |h: &mut HeaderMap, name: &'static str, value: &str| {
                if let Ok(v) = HeaderValue::from_str(value) {
                    h.insert(HeaderName::from_static(name), v);
                }
            };
            put(&mut h, "x-gshare-session", &v.session_id);
            if let Some(owner) = &v.owner {
                put(&mut h, "x-gshare-user", owner);
            }
            if let Some(c) = v.cookie.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
                h.insert(header::SET_COOKIE, c);
            }
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            Ok((StatusCode::OK, h).into_response())
        }
        Err(d) => Err(denied(d)),
    }
}

fn denied(d: Denied) -> ApiError {
    let message = match d {
        Denied::NoCredentials => "no session cookie or connection token",
        Denied::UnknownOrUsed => "the connection token is unknown or was already used",
        Denied::Expired => "the connection token expired; open the session again from the console",
        Denied::OtherClient => {
            "the connection token was redeemed by another client; open the session again from the console"
        }
        Denied::NotRunning => "the session is not running",
        Denied::OtherSession => "the credentials are for another session",
        Denied::OtherUser => {
            "this link was made for another account than the member signed in to the console here; open the session from your own console"
        }
        Denied::MissingUri => "no X-Original-URL or X-Original-URI: the session asked for is unknown",
        Denied::ConflictingUri => "X-Original-URL / X-Original-URI repeated or naming different targets",
        Denied::Uri(r) => r.message(),
    };
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, message)
        .with_details(serde_json::json!({ "reason": d.as_str() }))
}

/// Drain a node (upstream's `POST /nodes/{id}/drain`): the node is cordoned, then each session on
/// it is paused and resumed on another node when the fit check finds room (`reschedule`, parked
/// paused otherwise) or ended (`force_terminate`). Nothing is done while the cluster's operator is
/// silent (409 `operator_not_connected`, listing the sessions left alone). Admins only; audited.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/nodes/{node}/drain", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), ("node" = String, Path, description = "node name")),
    request_body = super::drain::DrainRequest,
    responses(
        (status = 200, body = super::drain::DrainReport, description = "what happened to each session on the node"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such cluster or node"),
        (status = 409, body = ErrorBody, description = "operator_not_connected: nothing was cordoned, paused or ended"),
        (status = 422, body = ErrorBody, description = "a mode other than reschedule or force_terminate, a reason over 500 characters"),
    ))]
async fn drain_node(
    State(app): State<SessionsState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((id, node)): Path<(String, String)>,
    body: Bytes,
) -> Result<axum::Json<super::drain::DrainReport>, ApiError> {
    let id = crate::clusters::ClusterId::parse(&id).map_err(|e| ApiError::not_found(e.to_string()))?;
    if !crate::callbacks::wire::is_dns_subdomain(&node) {
        return Err(ApiError::not_found(format!("cluster {id} has no node {}", crate::http::text::echo(&node))));
    }
    let req: super::drain::DrainRequest =
        if body.iter().all(u8::is_ascii_whitespace) { parse_json(b"{}")? } else { parse_json(&body)? };
    if req.reason.as_ref().is_some_and(|r| r.chars().count() > 500) {
        return Err(ApiError::field(&["body", "reason"], "at most 500 characters", "string_too_long"));
    }
    let target = format!("{id}/{node}");
    let cordon = crate::audit::AuditEntry::new(&meta, admin.actor(), "node.cordon", crate::audit::AuditResult::Success)
        .target(target.clone())
        .details(serde_json::json!({ "cluster_id": id.as_str(), "node": node, "by": "drain" }));
    let mode = req.mode;
    let reason = req.reason.clone();
    let outcome = app.sessions.drain(id.as_str(), &node, req, cordon).await.map_err(ApiError::from);
    let mut details =
        serde_json::json!({ "cluster_id": id.as_str(), "node": node, "mode": mode.as_str(), "reason": reason });
    if let Ok(r) = &outcome {
        details["drain_id"] = serde_json::json!(r.drain_id);
        details["affected"] = serde_json::json!(r.affected_sessions.len());
        details["rescheduled"] = serde_json::json!(r.rescheduled);
        details["parked"] = serde_json::json!(r.parked);
        details["terminated"] = serde_json::json!(r.terminated);
        details["failed"] = serde_json::json!(r.failed);
    }
    audit(&app.audit, &meta, &admin, "node.drain", &target, details, &outcome).await;
    Ok(axum::Json(outcome?))
}
