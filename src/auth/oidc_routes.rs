//! Single sign-on by the `[oidc]` issuer (issue 26): `GET /api/v1/auth/oidc/start` sends the
//! browser to the issuer and sets a short-lived binding cookie; the issuer sends it back to
//! `GET /api/v1/auth/oidc/callback`, which finishes the flow (`auth::directory::oidc`), makes or
//! updates the account (as the LDAP directory does: `accounts::sync_directory`, source `oidc`,
//! linked to the issuer's `sub`), sets the console's session cookies and sends the browser to the
//! console. Local sign-in is untouched: an issuer that is down answers 503 here, nothing more.

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;

use super::AuthState;
use super::accounts::{DirectoryVerdict, Standing, Username};
use super::directory::oidc::{FLOW_TTL, OidcError};
use super::guard::Gate;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};

/// Where the sign-in page's single sign-on button goes.
pub const START: &str = "/api/v1/auth/oidc/start";
/// The binding cookie: sent back only to the callback's path, gone after ten minutes.
const FLOW_COOKIE: &str = "gshare_oidc";
const FLOW_PATH: &str = "/api/v1/auth/oidc";

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(D: oidc_start)).routes(routes!(D: oidc_callback))
}

fn not_configured() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "single sign-on is not configured on this server ([oidc])",
    )
}

fn answer(e: OidcError) -> ApiError {
    match e {
        OidcError::Unavailable { step, message } => {
            tracing::warn!(step, error = %message, "oidc sign-in: the issuer did not answer");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                format!(
                    "the lab's sign-on service did not answer ({step}); try again later — local accounts can still sign in"
                ),
            )
            .with_details(serde_json::json!({ "directory": "oidc", "step": step }))
        }
        OidcError::BadState(m) => ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, m)
            .with_details(serde_json::json!({ "directory": "oidc", "reason": "state" })),
        OidcError::Rejected(m) => {
            tracing::warn!(error = %m, "oidc sign-in refused");
            ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::InvalidCredentials, m)
                .with_details(serde_json::json!({ "directory": "oidc", "reason": "rejected" }))
        }
        OidcError::Busy => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ServerBusy, e.to_string())
            .with_header(header::RETRY_AFTER, HeaderValue::from_static("60")),
        OidcError::TooMany => ApiError::new(StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited, e.to_string())
            .with_details(serde_json::json!({ "retry_after_s": FLOW_TTL.as_secs(), "scope": "client_addr" }))
            .with_header(header::RETRY_AFTER, HeaderValue::from(FLOW_TTL.as_secs())),
    }
}

fn flow_cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    // Lax, not Strict: the issuer's redirect back is a top-level navigation from another site.
    let mut c = format!("{FLOW_COOKIE}={value}; Path={FLOW_PATH}; Max-Age={max_age}; SameSite=Lax; HttpOnly");
    if secure {
        c.push_str("; Secure");
    }
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static("gshare_oidc=; Max-Age=0"))
}

/// Start single sign-on: a redirect (303) to the issuer's authorization endpoint (code flow,
/// PKCE S256, `state`, `nonce`), with a binding cookie for the callback.
#[utoipa::path(get, path = "/api/v1/auth/oidc/start", tag = "auth",
    responses(
        (status = 303, description = "to the issuer; `Set-Cookie: gshare_oidc=…; HttpOnly; SameSite=Lax` (10 minutes)"),
        (status = 404, body = ErrorBody, description = "no `[oidc]` issuer is configured"),
        (status = 429, body = ErrorBody, description = "`rate_limited`: 256 unfinished sign-ins from this address"),
        (status = 503, body = ErrorBody, description = "`unavailable`: the issuer did not answer; `server_busy`: too many sign-ins in progress. A browser's navigation (`Accept: text/html`) is sent to `/?sso_error=<code>` instead of these errors")))]
async fn oidc_start(
    State(app): State<AuthState>,
    meta: RequestMeta,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let oidc = app.signin.oidc.clone().ok_or_else(not_configured)?;
    let started = match oidc.start(meta.client_addr).await {
        Ok(s) => s,
        // The sign-in page's button is a navigation: its refusal (the issuer down, too many
        // sign-ins) is shown there, not as a JSON page; other clients get the JSON error.
        Err(e) if is_browser(&headers) => return Ok(to_sign_in_page(&answer(e))),
        Err(e) => return Err(answer(e)),
    };
    let location = HeaderValue::from_str(&started.authorize_url).map_err(ApiError::internal)?;
    let mut res = StatusCode::SEE_OTHER.into_response();
    let h = res.headers_mut();
    h.insert(header::LOCATION, location);
    h.append(header::SET_COOKIE, flow_cookie(&started.binding, FLOW_TTL.as_secs(), app.signin.secure_cookies()));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

/// A browser's navigation (it accepts HTML), not the console's or a script's request.
fn is_browser(headers: &axum::http::HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// A refusal for a browser: back to the sign-in page (`/?sso_error=<code>`), which words it.
fn to_sign_in_page(e: &ApiError) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    let to = format!("/?sso_error={}", e.code.as_str());
    let h = res.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_str(&to).unwrap_or(HeaderValue::from_static("/")));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// What the issuer sends the browser back with.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The sign-in's `state`, from `start`.
    pub state: Option<String>,
    /// The authorization code.
    pub code: Option<String>,
    /// The issuer's refusal (`access_denied`, …) instead of a code.
    pub error: Option<String>,
    pub error_description: Option<String>,
    /// RFC 9207: the issuer that answered.
    pub iss: Option<String>,
}

/// Finish single sign-on: checks `state` (this browser's, unused, unexpired), redeems the code
/// with the PKCE verifier, verifies the ID token (signature by an allowed asymmetric algorithm,
/// issuer, audience, expiry, nonce), makes or updates the account from its claims, sets the
/// console's session cookies and redirects (303) to the console.
#[utoipa::path(get, path = "/api/v1/auth/oidc/callback", tag = "auth", params(CallbackQuery),
    responses(
        (status = 303, description = "signed in: `Set-Cookie: gshare_console=…` and `gshare_csrf`; to `/`. A refused browser navigation (`Accept: text/html`) is sent to `/?sso_error=<code>` instead of the errors below"),
        (status = 400, body = ErrorBody, description = "`bad_request`: unknown, used, expired or another browser's `state`"),
        (status = 401, body = ErrorBody, description = "`invalid_credentials`: the issuer refused, or its ID token is not accepted"),
        (status = 403, body = ErrorBody, description = "`account_disabled`: in no mapped group, or disabled"),
        (status = 404, body = ErrorBody, description = "no `[oidc]` issuer is configured"),
        (status = 409, body = ErrorBody, description = "`conflict`: the name is a local, deleted, or another identity's account"),
        (status = 503, body = ErrorBody, description = "`unavailable`: the issuer did not answer")))]
async fn oidc_callback(
    State(app): State<AuthState>,
    meta: RequestMeta,
    headers: axum::http::HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Result<Response, ApiError> {
    let oidc = app.signin.oidc.clone().ok_or_else(not_configured)?;
    let secure = app.signin.secure_cookies();
    let binding = super::cookies::cookie(&headers, FLOW_COOKIE).map(str::to_string);
    let result = callback(&app, &oidc, &meta, q, binding.as_deref()).await;
    let audit = |result: AuditResult, reason: &str| {
        AuditEntry::new(&meta, "anonymous", "auth.login", result)
            .details(serde_json::json!({ "method": "oidc", "reason": reason }))
    };
    // A browser's navigation gets its refusal on the sign-in page (`/?sso_error=<code>`); other
    // clients get the JSON error.
    let browser = is_browser(&headers);
    let refuse = |e: ApiError| -> Result<Response, ApiError> {
        if browser {
            let mut res = to_sign_in_page(&e);
            res.headers_mut().append(header::SET_COOKIE, flow_cookie("", 0, secure));
            return Ok(res);
        }
        Err(e.with_header(header::SET_COOKIE, flow_cookie("", 0, secure)))
    };
    let (username, standing) = match result {
        Ok(ok) => ok,
        Err(e) => {
            crate::audit::record(&app.audit, audit(AuditResult::Failure, e.code.as_str())).await;
            return refuse(e);
        }
    };
    if standing.disabled {
        crate::audit::record(&app.audit, audit(AuditResult::Denied, "account_disabled").target(username)).await;
        return refuse(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "this account is disabled; ask an admin of the lab to enable it",
        ));
    }
    let session = super::login::mint_session(&app, &username, standing.role)?;
    crate::audit::record(
        &app.audit,
        AuditEntry::new(&meta, session.actor.clone(), "auth.login", AuditResult::Success)
            .target(username)
            .details(serde_json::json!({ "method": "oidc" })),
    )
    .await;
    let mut res = StatusCode::SEE_OTHER.into_response();
    let h = res.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_static("/"));
    h.append(header::SET_COOKIE, flow_cookie("", 0, secure));
    super::login::set_session_cookies(h, secure, &session);
    Ok(res)
}

async fn callback(
    app: &AuthState,
    oidc: &super::directory::oidc::OidcProvider,
    meta: &RequestMeta,
    q: CallbackQuery,
    binding: Option<&str>,
) -> Result<(String, Standing), ApiError> {
    let state = q
        .state
        .filter(|s| !s.is_empty() && s.len() <= 512)
        .ok_or_else(|| answer(OidcError::BadState("the issuer's answer has no sign-in state; start again".into())))?;
    if let Some(err) = q.error {
        oidc.abandon(&state);
        let err = crate::audit::truncate(err);
        let desc = q.error_description.map(crate::audit::truncate).map(|d| format!(": {d}")).unwrap_or_default();
        return Err(answer(OidcError::Rejected(format!("the issuer did not sign you in ({err}{desc})"))));
    }
    let Some(code) = q.code.filter(|c| !c.is_empty() && c.len() <= 4096) else {
        oidc.abandon(&state);
        return Err(answer(OidcError::Rejected("the issuer's answer has no code".into())));
    };
    if let Some(iss) = &q.iss
        && iss.trim_end_matches('/') != oidc.settings.issuer
    {
        oidc.abandon(&state);
        return Err(answer(OidcError::Rejected(format!(
            "the answer names another issuer ({})",
            crate::audit::truncate(iss.clone())
        ))));
    }
    let user = oidc.finish(&state, &code, binding).await.map_err(answer)?;
    let Ok(name) = Username::parse(&user.username) else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "the issuer's name for you is not a gshare username (1-64 of A-Z a-z 0-9 - _ . @); ask an admin of the lab",
        )
        .with_details(serde_json::json!({ "directory": "oidc", "claim": oidc.settings.username_claim })));
    };
    let verdict = DirectoryVerdict {
        source: "oidc",
        id: user.subject.clone(),
        groups: user.groups.clone(),
        role: user.role,
        group: user.group.clone(),
        allowed: user.allowed,
    };
    let account = super::directory::sync(app, meta, name.clone(), verdict).await?;
    match account {
        Some(a) if user.allowed => Ok((name.to_string(), Standing::from(&a))),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "the lab's sign-on service knows you, but you are in none of the groups allowed to use gshare; ask an admin of the lab",
        )
        .with_details(serde_json::json!({ "directory": "oidc", "groups": user.groups }))),
    }
}
