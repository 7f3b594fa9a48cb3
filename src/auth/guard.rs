//! Request guards: `AdminCaller` for `/api/v1` (an admin JWT, `aud=gshare-api`, as a bearer token
//! or as the console's session cookie) and `OperatorCaller` for `/internal` (an internal JWT,
//! `aud=gshare-internal`, `sub=operator:<cluster_id>`). Each refuses the other's tokens.
//! Cookie-authenticated requests that may change state need the session's CSRF token.

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use subtle::ConstantTimeEq;

use super::Authorities;
use super::accounts::Role;
use super::cookies::{CSRF_HEADER, console_cookie_names, cookie, csrf_token_for};
use super::login::SignIn;
use super::tokens::VerifyError;
use crate::clock::Clock;
use crate::cluster_id::ClusterId;
use crate::http::admin_socket::LocalPeer;
use crate::http::error::{ApiError, ErrorCode};
use crate::http::extract::bearer_token;

/// Subject prefix of admin tokens: `admin:<username>`.
pub const ADMIN_PREFIX: &str = "admin:";
/// Subject prefix of members' tokens: `user:<username>`.
pub const USER_PREFIX: &str = "user:";
/// Subject prefix of operator tokens: `operator:<cluster_id>`.
pub const OPERATOR_PREFIX: &str = "operator:";
/// Actor prefix of callers on the local admin socket: `local:<uid>`.
pub const LOCAL_PREFIX: &str = "local:";

/// What the guards read: the token authorities, the accounts' standing and ended sessions, the
/// clock (made from the router state by the composition root).
#[derive(Clone)]
pub struct Gate {
    pub auth: Authorities,
    pub signin: Arc<SignIn>,
    pub clock: Clock,
}

/// How an admin request was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthVia {
    /// `Authorization: Bearer` (CLI-minted or login token): no CSRF exposure.
    Bearer,
    /// The console's `gshare_console` cookie: state-changing requests carry `X-CSRF-Token`.
    Cookie,
    /// The local admin socket (`http::admin_socket`): the socket file's permission and the peer's
    /// uid are the credential; the caller is `local:<uid>`.
    Local,
}

/// Whoever signed in: an admin or a member, with the role their account has now (read at every
/// request, so a demotion or a disabled account takes effect at the next one). Routes members may
/// call take this; every other route takes [`AdminCaller`].
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub username: String,
    /// The token's `jti`, for the audit log.
    pub token_id: Option<String>,
    pub via: AuthVia,
    /// The token's `exp` (unix seconds).
    pub expires_at: i64,
    pub role: Role,
}

impl SignedIn {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// May this caller see and act on what `owner` owns? Admins on everything, members on their own.
    pub fn may_act_for(&self, owner: &str) -> bool {
        self.is_admin() || self.username == owner
    }
}

/// An authenticated administrator.
#[derive(Debug, Clone)]
pub struct AdminCaller {
    pub username: String,
    /// The token's `jti`, for the audit log.
    pub token_id: Option<String>,
    pub via: AuthVia,
    /// The token's `exp` (unix seconds).
    pub expires_at: i64,
}

/// Who did it, as audit entries name them.
pub trait Actor {
    fn actor(&self) -> String;
}

impl Actor for AdminCaller {
    /// `admin:<name>` (`local:<uid>` on the admin socket).
    fn actor(&self) -> String {
        match self.via {
            AuthVia::Local => self.username.clone(),
            _ => format!("{ADMIN_PREFIX}{}", self.username),
        }
    }
}

impl Actor for SignedIn {
    /// `admin:<name>` for admins, `user:<name>` for members (`local:<uid>` on the admin socket).
    fn actor(&self) -> String {
        match (self.via, self.role) {
            (AuthVia::Local, _) => self.username.clone(),
            (_, Role::Admin) => format!("{ADMIN_PREFIX}{}", self.username),
            (_, Role::Member) => format!("{USER_PREFIX}{}", self.username),
        }
    }
}

impl AdminCaller {
    /// `admin:<name>`, the actor recorded in audit entries.
    pub fn actor(&self) -> String {
        Actor::actor(self)
    }
}

impl SignedIn {
    pub fn actor(&self) -> String {
        Actor::actor(self)
    }
}

fn unauthenticated(e: &VerifyError) -> ApiError {
    ApiError::unauthenticated(format!("invalid bearer token: {e}"))
}

impl<S> FromRequestParts<S> for AdminCaller
where
    S: Send + Sync,
    Gate: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let caller = SignedIn::from_request_parts(parts, state).await?;
        if !caller.is_admin() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::ForbiddenRole,
                format!("this needs an admin; {} is signed in as a member", caller.username),
            )
            .with_details(serde_json::json!({ "role": caller.role.as_str(), "needs": "admin" })));
        }
        Ok(AdminCaller {
            username: caller.username,
            token_id: caller.token_id,
            via: caller.via,
            expires_at: caller.expires_at,
        })
    }
}

impl<S> FromRequestParts<S> for SignedIn
where
    S: Send + Sync,
    Gate: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = Gate::from_ref(state);
        // Only the admin socket puts a `LocalPeer` on a request; its uid was checked there. The
        // name is no account's (`:` is not allowed in one), so it owns nothing and changes no
        // account's own password.
        if let Some(peer) = parts.extensions.get::<LocalPeer>() {
            crate::http::body::mark_authenticated(&parts.extensions);
            return Ok(SignedIn {
                username: format!("{LOCAL_PREFIX}{}", peer.uid),
                token_id: None,
                via: AuthVia::Local,
                expires_at: app.clock.now() + 300,
                role: Role::Admin,
            });
        }
        let (token, via) = match bearer_token(&parts.headers) {
            Some(t) => (t, AuthVia::Bearer),
            // Under TLS only the `__Host-` name counts: a cookie without it may come from a sibling host.
            None => match cookie(&parts.headers, console_cookie_names(app.signin.secure_cookies()).0) {
                Some(t) => (t.to_string(), AuthVia::Cookie),
                None => {
                    return Err(ApiError::unauthenticated(
                        "sign in (POST /api/v1/auth/login) or send an admin token (Authorization: Bearer …)",
                    ));
                }
            },
        };
        let claims = match app.auth.api.verify(&token) {
            Ok(claims) => claims,
            Err(e) => {
                if app.auth.internal.verify(&token).is_ok() {
                    return Err(ApiError::forbidden("operator tokens cannot call the admin API"));
                }
                return Err(match via {
                    AuthVia::Bearer | AuthVia::Local => unauthenticated(&e),
                    AuthVia::Cookie => ApiError::unauthenticated(format!("session cookie: {e}; sign in again")),
                });
            }
        };
        let (username, member_token) =
            match (claims.sub.strip_prefix(ADMIN_PREFIX), claims.sub.strip_prefix(USER_PREFIX)) {
                (Some(name), _) => (name, false),
                (None, Some(name)) => (name, true),
                (None, None) => ("", false),
            };
        if username.is_empty() {
            return Err(ApiError::forbidden("this token is not an admin or user token"));
        }
        if !app.signin.is_current(username, claims.jti.as_deref(), claims.iat) {
            return Err(ApiError::unauthenticated("this session has ended (signed out or password changed)"));
        }
        // The account's role now, not the one it had when the token was minted. An `admin:` token
        // without an account is one the command line minted with the key ring (root's): an admin.
        let (role, must_change) = match app.signin.standing(username) {
            Some(s) if s.disabled => {
                return Err(ApiError::unauthenticated(format!("the account {username} is disabled")));
            }
            Some(s) => (s.role, s.must_change_password),
            None if member_token => {
                return Err(ApiError::unauthenticated(format!("no account {username}: sign in again")));
            }
            None => (Role::Admin, false),
        };
        if via == AuthVia::Cookie && !is_safe_method(&parts.method) {
            let expected = csrf_token_for(claims.jti.as_deref().unwrap_or_default());
            let sent = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if claims.jti.is_none() || !bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    ErrorCode::CsrfFailed,
                    "cookie-authenticated changes need the session's X-CSRF-Token header (see GET /api/v1/auth/me)",
                ));
            }
        }
        if must_change && !reachable_before_password_change(&parts.method, parts.uri.path()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::PasswordChangeRequired,
                format!(
                    "an admin set the password of {username}: change it first (POST /api/v1/account/password); \
                     until then this account can only read itself and sign out"
                ),
            )
            .with_details(serde_json::json!({ "change_at": PASSWORD_CHANGE_PATH })));
        }
        crate::http::body::mark_authenticated(&parts.extensions);
        Ok(SignedIn { username: username.to_string(), token_id: claims.jti.clone(), via, expires_at: claims.exp, role })
    }
}

/// The account a request's console cookie signs in as, when it carries one that the guard would
/// accept (signed, not ended, account not disabled): what `/internal/connect/verify` compares a
/// connection token's account with. Answers the name and whether it is an admin's. Any other
/// cookie or none: `None`.
pub fn console_user(app: &Gate, headers: &axum::http::HeaderMap) -> Option<(String, bool)> {
    console_user_of(app, cookie(headers, console_cookie_name(app))?)
}

/// The name of the console's session cookie on this server.
pub fn console_cookie_name(app: &Gate) -> &'static str {
    console_cookie_names(app.signin.secure_cookies()).0
}

/// [`console_user`] for the console cookie's value `token`, read by the caller.
pub fn console_user_of(app: &Gate, token: &str) -> Option<(String, bool)> {
    let claims = app.auth.api.verify(token).ok()?;
    let name = claims.sub.strip_prefix(ADMIN_PREFIX).or_else(|| claims.sub.strip_prefix(USER_PREFIX))?;
    if !app.signin.is_current(name, claims.jti.as_deref(), claims.iat) {
        return None;
    }
    match app.signin.standing(name) {
        Some(s) if s.disabled => None,
        Some(s) => Some((name.to_string(), s.role == Role::Admin)),
        // An `admin:` token without an account (the CLI's) is an admin's; a `user:` one is nobody's.
        None => claims.sub.starts_with(ADMIN_PREFIX).then(|| (name.to_string(), true)),
    }
}

/// Where an account changes its own password.
pub const PASSWORD_CHANGE_PATH: &str = "/api/v1/account/password";

/// What an account whose password an admin set (`must_change_password`) may reach before it
/// changes it: reading itself (`GET /api/v1/auth/me`, `GET /api/v1/account`), the change, and
/// signing out. Everything else is 403 `password_change_required`: a first password or a reset
/// one was seen by an admin (and maybe a spreadsheet), so it opens nothing until replaced.
pub fn reachable_before_password_change(method: &Method, path: &str) -> bool {
    matches!(
        (method.as_str(), path),
        ("GET" | "HEAD", "/api/v1/auth/me" | "/api/v1/account")
            | ("POST", PASSWORD_CHANGE_PATH | "/api/v1/auth/logout" | "/api/v1/account/sign-out-everywhere")
    )
}

fn is_safe_method(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Where the operator guard leaves the cluster it verified, for a layer around the handler (the
/// callback counters of `/metrics`): that layer puts one in the request's extensions.
#[derive(Debug, Clone, Default)]
pub struct CallerSlot(pub Arc<std::sync::OnceLock<ClusterId>>);

/// An authenticated cluster operator.
#[derive(Debug, Clone)]
pub struct OperatorCaller {
    pub cluster_id: ClusterId,
}

impl<S> FromRequestParts<S> for OperatorCaller
where
    S: Send + Sync,
    Gate: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = Gate::from_ref(state);
        let Some(token) = bearer_token(&parts.headers) else {
            return Err(ApiError::unauthenticated("an operator token is required (Authorization: Bearer …)"));
        };
        match app.auth.internal.verify(&token) {
            Ok(claims) => {
                let id = claims
                    .sub
                    .strip_prefix(OPERATOR_PREFIX)
                    .and_then(|id| ClusterId::parse(id).ok())
                    .ok_or_else(|| ApiError::unauthenticated("token subject is not operator:<cluster_id>"))?;
                if let Some(slot) = parts.extensions.get::<CallerSlot>() {
                    let _ = slot.0.set(id.clone());
                }
                crate::http::body::mark_authenticated(&parts.extensions);
                Ok(OperatorCaller { cluster_id: id })
            }
            Err(e) => {
                if app.auth.api.verify(&token).is_ok() {
                    return Err(ApiError::forbidden("admin tokens cannot call /internal"));
                }
                // Shown on the cluster the token claims: why its operator is silent.
                app.auth.rejected(&token, &e);
                Err(unauthenticated(&e))
            }
        }
    }
}
