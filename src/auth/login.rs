//! Console and API sign-in: `POST /api/v1/auth/login` checks a username and password (argon2id,
//! the same work for unknown users), returns an admin access token and sets it as an
//! `HttpOnly; SameSite=Strict` cookie (`Secure` under TLS). Cookie-authenticated requests that
//! change state must echo the session's CSRF token in `X-CSRF-Token`. `logout` revokes the token;
//! changing a password or removing an account revokes every token issued to it before.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::time::Duration;

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::AuthState;
use super::accounts::{self, MAX_PASSWORD_LEN, MAX_USERNAME_LEN};
use super::cookies::{console_cookie_names, csrf_token_for};
use super::guard::Gate;
use super::guard::{ADMIN_PREFIX, AuthVia, SignedIn, USER_PREFIX};
use super::throttle::LoginThrottle;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::clock::Clock;
use crate::config::Config;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::http::extract::ApiJson;
use crate::locks::{read, write};
use crate::store::{Store, StoreError};

/// jti -> exp of tokens ended by logout.
const REVOKED: TableDefinition<'static, &'static str, i64> = TableDefinition::new("auth_revoked_tokens");
/// username -> unix seconds before which its tokens are refused (password change, removal).
const NOT_BEFORE: TableDefinition<'static, &'static str, i64> = TableDefinition::new("auth_tokens_not_before");

/// Sign-in state shared by the login routes and the `AdminCaller` guard.
pub struct SignIn {
    pub throttle: LoginThrottle,
    revoked: RwLock<HashMap<String, i64>>,
    not_before: RwLock<HashMap<String, i64>>,
    /// Each account's role and enabled state, read at every request by the guard (kept current
    /// by the running server's account writes; loaded at start).
    standings: RwLock<HashMap<String, accounts::Standing>>,
    /// The names of deleted accounts (kept, never given again): a session's `owner` among them
    /// was an account's. Loaded at start, added to by the running server's deletes.
    deleted: RwLock<HashSet<String>>,
    /// A hash of a random password, verified against for unknown usernames (same timing).
    dummy_hash: String,
    /// Where argon2 runs: one hash per core, a short queue, 429 beyond it.
    pub hashing: super::hash_pool::HashPool,
    secure_cookies: bool,
    ttl: Duration,
    /// argon2 verifications run, real or decoy: every login attempt that reaches the password
    /// check costs exactly one, whether or not the user exists (tests check this, not timing).
    pub password_checks: std::sync::atomic::AtomicU64,
    /// The lab's directory, when `[ldap]` is configured (set by the composition root).
    pub directory: Option<std::sync::Arc<super::directory::Directory>>,
    /// The OpenID Connect issuer, when `[oidc]` is configured (set by the composition root).
    pub oidc: Option<std::sync::Arc<super::directory::oidc::OidcProvider>>,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIn").field("throttle", &self.throttle).finish_non_exhaustive()
    }
}

impl SignIn {
    /// Loads revocations (dropping expired ones) and prepares the timing decoy. Blocking parts run
    /// on the blocking pool.
    pub async fn open(config: &Config, store: &Store, clock: &Clock) -> Result<Self, StoreError> {
        let now = clock.now();
        let (revoked, not_before) = store
            .write(move |txn| {
                let mut revoked = HashMap::new();
                {
                    let mut t = txn.open_table(REVOKED)?;
                    let mut dead = Vec::new();
                    for item in t.iter()? {
                        let (k, v) = item?;
                        if v.value() + super::tokens::LEEWAY_S < now {
                            dead.push(k.value().to_string());
                        } else {
                            revoked.insert(k.value().to_string(), v.value());
                        }
                    }
                    for k in dead {
                        t.remove(k.as_str())?;
                    }
                }
                let mut not_before = HashMap::new();
                let t = txn.open_table(NOT_BEFORE)?;
                for item in t.iter()? {
                    let (k, v) = item?;
                    not_before.insert(k.value().to_string(), v.value());
                }
                Ok((revoked, not_before))
            })
            .await?;
        let standings = store
            .read(|txn| {
                Ok(accounts::list(txn)?
                    .iter()
                    .map(|a| (a.username.as_str().to_string(), accounts::Standing::from(a)))
                    .collect::<HashMap<_, _>>())
            })
            .await?;
        let deleted = store.read(|txn| Ok(accounts::deleted_names(txn)?.into_iter().collect::<HashSet<_>>())).await?;
        // No argon2id run at start: a decoy PHC string costs a full run to verify against all the same.
        // Without it unknown usernames would answer at once: refuse to start instead.
        let dummy_hash = accounts::decoy_hash().map_err(|e| StoreError::Io { full: false, message: e.to_string() })?;
        Ok(Self {
            throttle: LoginThrottle::new(config.login_max_failures, config.login_failure_window),
            revoked: RwLock::new(revoked),
            not_before: RwLock::new(not_before),
            standings: RwLock::new(standings),
            deleted: RwLock::new(deleted),
            dummy_hash,
            hashing: super::hash_pool::HashPool::for_cores(),
            secure_cookies: config.tls_enabled(),
            ttl: config.login_ttl,
            password_checks: Default::default(),
            directory: None,
            oidc: None,
        })
    }

    /// Is a verified admin token still good (not logged out, not older than a password change)?
    pub fn is_current(&self, username: &str, jti: Option<&str>, iat: Option<i64>) -> bool {
        if let Some(jti) = jti
            && read(&self.revoked).contains_key(jti)
        {
            return false;
        }
        match read(&self.not_before).get(username) {
            Some(nb) => iat.is_some_and(|iat| iat >= *nb),
            None => true,
        }
    }

    /// Ends one token (logout): remembered until it would have expired anyway.
    pub async fn revoke(&self, store: &Store, jti: &str, exp: i64) -> Result<(), StoreError> {
        write(&self.revoked).insert(jti.to_string(), exp);
        let jti = jti.to_string();
        store
            .write(move |txn| {
                txn.open_table(REVOKED)?.insert(jti.as_str(), exp)?;
                Ok(())
            })
            .await
    }

    /// Refuses every token issued to `username` before `now` (password changed, account removed).
    pub async fn revoke_all_before(&self, store: &Store, username: &str, now: i64) -> Result<(), StoreError> {
        write(&self.not_before).insert(username.to_string(), now);
        let name = username.to_string();
        store.write(move |txn| set_not_before(txn, &name, now)).await
    }

    /// An account's role and enabled state (`None`: no such account).
    pub fn standing(&self, username: &str) -> Option<accounts::Standing> {
        read(&self.standings).get(username).copied()
    }

    /// An account was added or changed: the guard sees it at the next request.
    pub fn note_account(&self, account: &accounts::Account) {
        write(&self.standings).insert(account.username.as_str().to_string(), accounts::Standing::from(account));
    }

    /// An account was removed.
    pub fn forget_account(&self, username: &str) {
        write(&self.standings).remove(username);
    }

    /// An account was deleted for good (its name is kept as a deleted account's).
    pub fn note_deleted(&self, username: &str) {
        write(&self.deleted).insert(username.to_string());
    }

    /// Was `username` a deleted account's name? (Exact name, as sessions record their owner.)
    pub fn was_deleted(&self, username: &str) -> bool {
        read(&self.deleted).contains(username)
    }

    /// Signs names without a local account in against the lab's directory.
    pub fn with_directory(mut self, directory: Option<super::directory::Directory>) -> Self {
        self.directory = directory.map(std::sync::Arc::new);
        self
    }

    /// Signs users in with the OpenID Connect issuer.
    pub fn with_oidc(mut self, oidc: Option<super::directory::oidc::OidcProvider>) -> Self {
        self.oidc = oidc.map(std::sync::Arc::new);
        self
    }

    pub fn secure_cookies(&self) -> bool {
        self.secure_cookies
    }
}

/// The same, inside a caller's transaction (the offline CLI; a running server reads it at start).
pub fn set_not_before(txn: &crate::store::WriteTxn, username: &str, now: i64) -> Result<(), StoreError> {
    txn.open_table(NOT_BEFORE)?.insert(username, now)?;
    Ok(())
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: login))
        .routes(routes!(D: logout))
        .routes(routes!(D: me))
        .routes(routes!(D: sign_in_options))
}

/// What the sign-in page offers, asked before anyone signs in.
#[derive(Serialize, ToSchema)]
pub struct SignInOptions {
    /// The first start's admin password still waits in `<data_dir>/initial-admin-password` (the
    /// page says where to find it; once `admin` chose their own the file is gone and so is the hint).
    pub initial_admin_password: bool,
    /// How names sign in with the password form: `local` accounts always; `ldap` too when the lab's
    /// directory is configured (a name with no local account is asked of it); `oidc` when an
    /// OpenID Connect issuer is configured (the page shows a button to `oidc_start`).
    pub methods: Vec<&'static str>,
    /// With `oidc`: what the single sign-on button says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_label: Option<String>,
    /// With `oidc`: where the button goes (`GET`, a full-page navigation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_start: Option<&'static str>,
}

/// The sign-in page's options: which methods the password form serves and whether the first
/// admin's password file is still there. Needs no credential and names nobody.
#[utoipa::path(get, path = "/api/v1/auth/options", tag = "auth",
    responses((status = 200, body = SignInOptions)))]
async fn sign_in_options(State(app): State<AuthState>) -> axum::Json<SignInOptions> {
    let initial_admin_password = app.config.data_dir.join(accounts::INITIAL_PASSWORD_FILE).is_file();
    let mut methods = vec!["local"];
    if app.config.ldap.is_some() {
        methods.push("ldap");
    }
    let oidc_label = app.config.oidc.as_ref().map(|o| o.button_label.clone());
    if oidc_label.is_some() {
        methods.push("oidc");
    }
    let oidc_start = oidc_label.as_ref().map(|_| super::oidc_routes::START);
    axum::Json(SignInOptions { initial_admin_password, methods, oidc_label, oidc_start })
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// 1-64 characters.
    #[schema(min_length = 1, max_length = 64)]
    pub username: String,
    /// 1-1024 bytes.
    #[schema(min_length = 1, max_length = 1024)]
    pub password: String,
}

#[derive(Serialize, ToSchema)]
pub struct LoginResponse {
    /// Admin JWT (`aud=gshare-api`), also set as the `gshare_console` cookie.
    pub access_token: String,
    /// `Bearer`
    pub token_type: &'static str,
    /// Seconds until the token expires.
    pub expires_in: u64,
    pub expires_at: String,
    pub username: String,
    /// `admin` (the whole console) or `member` (their own sessions).
    pub role: accounts::Role,
    /// An admin set this password (a first password, a reset, or `admin`'s initial one): the
    /// console asks for a new one before anything else (`POST /api/v1/account/password`).
    pub must_change_password: bool,
    /// Echo it in `X-CSRF-Token` on cookie-authenticated POST/PUT/PATCH/DELETE.
    pub csrf_token: String,
}

fn cookie_header(name: &str, value: &str, max_age: u64, http_only: bool, secure: bool) -> HeaderValue {
    let mut c = format!("{name}={value}; Path=/; Max-Age={max_age}; SameSite=Strict");
    if http_only {
        c.push_str("; HttpOnly");
    }
    if secure {
        c.push_str("; Secure");
    }
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static("gshare_invalid=; Max-Age=0"))
}

fn too_many(retry_after_s: u64, scope: &str) -> ApiError {
    let message = crate::auth::throttle::wait_message(retry_after_s);
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited, message)
        .with_details(serde_json::json!({ "retry_after_s": retry_after_s, "scope": scope }))
        .with_header(header::RETRY_AFTER, HeaderValue::from(retry_after_s))
}

/// The check of the routes that set the console's cookies (sign-in and sign-out): a request a
/// browser sends from another site's page is refused (403 `cross_origin`) — no login CSRF, no
/// spending of a username's failure budget from many visitors' browsers. A browser says where a
/// request comes from in `Sec-Fetch-Site` (only `same-origin`, or `none` for one the user typed,
/// passes) and `Origin` (it must name this server: the request's own `Host`, or `public_url`).
/// Clients that are not browsers send neither and pass.
pub struct SameOrigin;

impl<S> FromRequestParts<S> for SameOrigin
where
    S: Send + Sync,
    AuthState: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = AuthState::from_ref(state);
        let refuse = |why: String| ApiError::new(StatusCode::FORBIDDEN, ErrorCode::CrossOrigin, why);
        let h = &parts.headers;
        if let Some(site) = h.get("sec-fetch-site") {
            let site = site.to_str().unwrap_or_default();
            if !matches!(site, "same-origin" | "none") {
                return Err(refuse(format!(
                    "sign-in is accepted only from this server's own pages (Sec-Fetch-Site: {site})"
                )));
            }
        }
        if let Some(origin) = h.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let named = origin.split_once("://").map(|(_, authority)| authority);
            let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
            let public = app.config.public_url.split_once("://").map(|(_, rest)| rest.trim_end_matches('/'));
            let ours = named.is_some_and(|named| {
                host.is_some_and(|h| h.eq_ignore_ascii_case(named))
                    || public.is_some_and(|p| p.eq_ignore_ascii_case(named))
            });
            if !ours {
                return Err(refuse(format!(
                    "sign-in is accepted only from this server's own pages (Origin: {origin})"
                )));
            }
        }
        Ok(SameOrigin)
    }
}

/// Sign-in takes `application/json` only (415 otherwise, before the body is read): a form or a
/// `text/plain` body is what another site's page can make a browser send without asking.
pub struct JsonOnly;

impl<S: Send + Sync> FromRequestParts<S> for JsonOnly {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let ct = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let essence = ct.split(';').next().unwrap_or_default().trim();
        if essence.eq_ignore_ascii_case("application/json") {
            return Ok(JsonOnly);
        }
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            "send the sign-in as JSON (Content-Type: application/json)",
        )
        .with_details(serde_json::json!({ "content_type": ct })))
    }
}

fn invalid_credentials() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, ErrorCode::InvalidCredentials, "wrong username or password")
}

/// Sign in with a username and password.
///
/// Returns an admin access token and sets it as an `HttpOnly; SameSite=Strict` cookie for the
/// console. Wrong credentials take as long for an unknown user as for a wrong password. After
/// `login_max_failures` failures from one client address within `login_failure_window`
/// (`scope=client_addr`), or 20 times that many for one username from all addresses together
/// (`scope=username`), the answer is 429 with `Retry-After`.
#[utoipa::path(post, path = "/api/v1/auth/login", tag = "auth", request_body = LoginRequest,
    responses(
        (status = 200, body = LoginResponse, description = "signed in; `Set-Cookie: gshare_console=…; HttpOnly; SameSite=Strict` and `gshare_csrf`"),
        (status = 400, body = ErrorBody, description = "body is not JSON"),
        (status = 401, body = ErrorBody, description = "`invalid_credentials`"),
        (status = 403, body = ErrorBody, description = "`cross_origin`: sent from another site's page"),
        (status = 413, body = ErrorBody, description = "body over 1 MiB"),
        (status = 415, body = ErrorBody, description = "`unsupported_media_type`: not `application/json`"),
        (status = 422, body = ErrorBody, description = "empty or over-long username or password"),
        (status = 429, body = ErrorBody, description = "`rate_limited`, with `Retry-After`")))]
async fn login(
    State(app): State<AuthState>,
    _: SameOrigin,
    _: JsonOnly,
    meta: RequestMeta,
    ApiJson(body): ApiJson<LoginRequest>,
) -> Result<Response, ApiError> {
    let typed = crate::audit::truncate(body.username.clone());
    let audit = |result: AuditResult, reason: &str| {
        AuditEntry::new(&meta, "anonymous", "auth.login", result)
            .target(typed.clone())
            .details(serde_json::json!({ "reason": reason }))
    };
    let mut errors = Vec::new();
    if body.username.is_empty() || body.username.len() > MAX_USERNAME_LEN {
        errors.push(crate::http::error::FieldError::new(
            &["body", "username"],
            format!("must have 1-{MAX_USERNAME_LEN} characters"),
            "length",
        ));
    }
    if body.password.is_empty() || body.password.len() > MAX_PASSWORD_LEN {
        errors.push(crate::http::error::FieldError::new(
            &["body", "password"],
            format!("must have 1-{MAX_PASSWORD_LEN} bytes"),
            "length",
        ));
    }
    let signin = &app.signin;
    let window = app.config.login_failure_window;
    if !errors.is_empty() {
        // A failure like a wrong password, against the address (no username to charge); the
        // address's first in a window is written, the rest counted into one entry.
        // (The same keys as the throttle's own refusals below: one entry per address and window.)
        let (key, entry, refusal) = match signin.throttle.fail_address(meta.client_addr, app.clock.now_ms()) {
            Ok(()) => (
                format!("auth.login/invalid_input/{}", meta.client_addr),
                audit(AuditResult::Failure, "invalid_input"),
                ApiError::validation(errors),
            ),
            Err(limited) => (
                format!("auth.login/{}/{}", limited.scope, meta.client_addr),
                audit(AuditResult::Denied, &format!("throttled_{}", limited.scope)),
                too_many(limited.retry_after_s, limited.scope),
            ),
        };
        app.audit.record_coalesced(&key, window, entry).await;
        return Err(refusal);
    }
    let attempt = match signin.throttle.begin(meta.client_addr, &body.username, app.clock.now_ms()) {
        Ok(a) => a,
        Err(limited) => {
            // One entry per address and window (the rest counted): a flood costs no log growth.
            let key = format!("auth.login/{}/{}", limited.scope, meta.client_addr);
            let entry = audit(AuditResult::Denied, &format!("throttled_{}", limited.scope));
            app.audit.record_coalesced(&key, window, entry).await;
            return Err(too_many(limited.retry_after_s, limited.scope));
        }
    };
    // A name without a local account goes to the lab's directory when one is configured
    // (`auth::directory`); a local account is always checked here, so the first admin (local)
    // signs in whatever the directory does.
    let checked = match super::directory::local_or_directory(&app, &body.username).await {
        Ok(super::directory::Route::Local) => check_password(&app, &body.username, body.password)
            .await
            .map(|c| c.map(|(standing, must_change)| (body.username.clone(), standing, must_change))),
        Ok(super::directory::Route::Directory(dir)) => {
            super::directory::check(&app, &dir, &body.username, &body.password, &meta).await
        }
        Err(e) => Err(e),
    };
    let checked = match checked {
        Ok(c) => c,
        Err(e) => {
            // Not checked (the hashing pool is full, the directory did not answer, or it
            // refused a right password): no failure to count.
            signin.throttle.succeeded(attempt);
            return Err(e);
        }
    };
    let Some((username, standing, must_change_password)) = checked else {
        crate::audit::record(&app.audit, audit(AuditResult::Failure, "invalid_credentials")).await;
        return Err(invalid_credentials());
    };
    signin.throttle.succeeded(attempt);
    if standing.disabled {
        // The password was right, so saying why is no help to a guesser.
        crate::audit::record(&app.audit, audit(AuditResult::Denied, "account_disabled")).await;
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "this account is disabled; ask an admin of the lab to enable it",
        ));
    }
    let session = mint_session(&app, &username, standing.role)?;
    crate::audit::record(
        &app.audit,
        AuditEntry::new(&meta, session.actor.clone(), "auth.login", AuditResult::Success).target(username.clone()),
    )
    .await;
    let body = LoginResponse {
        access_token: session.token.clone(),
        token_type: "Bearer",
        expires_in: session.ttl_s,
        expires_at: crate::clock::rfc3339_ms(session.exp * 1000),
        username,
        role: standing.role,
        must_change_password,
        csrf_token: session.csrf.clone(),
    };
    let mut res = axum::Json(body).into_response();
    set_session_cookies(res.headers_mut(), signin.secure_cookies(), &session);
    Ok(res)
}

/// A console session just minted for a signed-in account.
pub(super) struct Session {
    pub token: String,
    pub csrf: String,
    /// Unix seconds.
    pub exp: i64,
    pub ttl_s: u64,
    /// `admin:<name>` or `user:<name>`.
    pub actor: String,
}

/// Mints the API token of a signed-in account (password form or single sign-on).
pub(super) fn mint_session(app: &AuthState, username: &str, role: accounts::Role) -> Result<Session, ApiError> {
    let subject = match role {
        accounts::Role::Admin => format!("{ADMIN_PREFIX}{username}"),
        accounts::Role::Member => format!("{USER_PREFIX}{username}"),
    };
    let token = app.auth.api.mint(&subject, app.signin.ttl).map_err(ApiError::internal)?;
    let claims = app.auth.api.verify(&token).map_err(ApiError::internal)?;
    let csrf = csrf_token_for(claims.jti.as_deref().unwrap_or_default());
    Ok(Session { token, csrf, exp: claims.exp, ttl_s: app.signin.ttl.as_secs(), actor: subject })
}

/// The console's two cookies for a session (and `no-store`).
pub(super) fn set_session_cookies(h: &mut axum::http::HeaderMap, secure: bool, s: &Session) {
    let (session_name, csrf_name) = console_cookie_names(secure);
    h.append(header::SET_COOKIE, cookie_header(session_name, &s.token, s.ttl_s, true, secure));
    h.append(header::SET_COOKIE, cookie_header(csrf_name, &s.csrf, s.ttl_s, false, secure));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Verifies on the bounded hashing pool (429 + `Retry-After` when it is full); unknown users
/// are checked against a decoy hash so they take the same time. Answers the account's standing
/// and whether its password must be replaced, when the password matched.
async fn check_password(
    app: &AuthState,
    username: &str,
    password: String,
) -> Result<Option<(accounts::Standing, bool)>, ApiError> {
    let name = username.to_string();
    let account = app.store.read(move |txn| accounts::get(txn, &name)).await?;
    let (hash, known) = match account {
        Some(a) => {
            let standing = accounts::Standing::from(&a);
            let must_change = a.must_change_password || super::account_routes::still_initial(app, &a);
            (a.password_hash, Some((standing, must_change)))
        }
        None => (app.signin.dummy_hash.clone(), None),
    };
    let matched =
        app.signin.hashing.run(move || accounts::verify_password(&hash, &password)).await.map_err(pool_error)?;
    app.signin.password_checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(known.filter(|_| matched))
}

/// The hashing pool's refusal as an answer: 429 with `Retry-After` (nothing was checked).
pub(super) fn pool_error(e: super::hash_pool::PoolError) -> ApiError {
    match e {
        super::hash_pool::PoolError::Busy(_) => {
            let s = super::hash_pool::RETRY_AFTER_S;
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                format!("many sign-ins at once: try again in {s} second (no password was checked)"),
            )
            .with_details(serde_json::json!({ "retry_after_s": s, "scope": "server" }))
            .with_header(header::RETRY_AFTER, HeaderValue::from(s))
        }
        other => ApiError::internal(other),
    }
}

/// Sign out: the token (cookie or bearer) stops working at once and the cookies are cleared.
/// Always 204, also without a valid session.
#[utoipa::path(post, path = "/api/v1/auth/logout", tag = "auth",
    responses(
        (status = 204, description = "signed out; cookies cleared"),
        (status = 403, body = ErrorBody, description = "cookie session without a valid `X-CSRF-Token`, or `cross_origin`")))]
async fn logout(
    State(app): State<AuthState>,
    _: SameOrigin,
    meta: RequestMeta,
    caller: Result<SignedIn, ApiError>,
) -> Result<Response, ApiError> {
    match caller {
        Ok(caller) => {
            if let Some(jti) = &caller.token_id {
                app.signin.revoke(&app.store, jti, caller.expires_at).await?;
            }
            crate::audit::record(
                &app.audit,
                AuditEntry::new(&meta, caller.actor(), "auth.logout", AuditResult::Success)
                    .target(caller.username.clone()),
            )
            .await;
        }
        Err(e) if e.code == ErrorCode::CsrfFailed => return Err(e),
        Err(_) => {}
    }
    let secure = app.signin.secure_cookies();
    let mut res = StatusCode::NO_CONTENT.into_response();
    let h = res.headers_mut();
    let (session_name, csrf_name) = console_cookie_names(secure);
    h.append(header::SET_COOKIE, cookie_header(session_name, "", 0, true, secure));
    h.append(header::SET_COOKIE, cookie_header(csrf_name, "", 0, false, secure));
    Ok(res)
}

#[derive(Serialize, ToSchema)]
pub struct Me {
    pub username: String,
    /// `cookie`, `bearer`, or `local` (the admin socket).
    pub auth: &'static str,
    pub expires_at: String,
    /// Whether an account with this name exists (CLI-minted tokens may name any admin).
    pub account: bool,
    /// `admin` or `member`: what the console shows.
    pub role: accounts::Role,
    /// For cookie sessions: the value to send in `X-CSRF-Token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csrf_token: Option<String>,
}

/// Who am I: the signed-in admin, how the request was authenticated, and (for cookie sessions)
/// the CSRF token to echo.
#[utoipa::path(get, path = "/api/v1/auth/me", tag = "auth",
    responses(
        (status = 200, body = Me),
        (status = 401, body = ErrorBody, description = "no, expired, forged or revoked credentials"),
        (status = 403, body = ErrorBody, description = "an operator token")))]
async fn me(State(app): State<AuthState>, caller: SignedIn) -> Result<axum::Json<Me>, ApiError> {
    let name = caller.username.clone();
    let account = app.store.read(move |txn| accounts::get(txn, &name)).await?.is_some();
    Ok(axum::Json(Me {
        username: caller.username.clone(),
        auth: match caller.via {
            AuthVia::Cookie => "cookie",
            AuthVia::Bearer => "bearer",
            AuthVia::Local => "local",
        },
        expires_at: crate::clock::rfc3339_ms(caller.expires_at * 1000),
        account,
        role: caller.role,
        csrf_token: match caller.via {
            AuthVia::Cookie => caller.token_id.as_deref().map(csrf_token_for),
            AuthVia::Bearer | AuthVia::Local => None,
        },
    }))
}
