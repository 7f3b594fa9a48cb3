//! OpenID Connect sign-in (issue 26): the authorization code flow with PKCE against the `[oidc]`
//! issuer, by the `openidconnect` crate. Its HTTP goes through hyper + hyper-rustls (ring,
//! the configured CA file or the system's roots), each request bounded by `oidc.timeout`, bodies
//! capped, no redirects followed, and no plain-http request once the issuer is https.
//!
//! `start` fetches the issuer's discovery document and keys (kept; the keys are fetched again when
//! an ID token names a key the kept set lacks: a rotation), and keeps the flow's `state`, `nonce`
//! and PKCE verifier here, on the server, bound to a random value the browser holds in a
//! short-lived cookie. `finish` takes them out (single use: a replayed or forged `state` finds
//! nothing), checks the cookie, redeems the code, and verifies the ID token: signature by an
//! allowed asymmetric algorithm (never `none` or HS*), issuer, audience, expiry and nonce.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Request, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreIdToken, CoreJwsSigningAlgorithm, CoreProviderMetadata,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, IssuerUrl, JsonWebKeySet, Nonce,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope, SignatureVerificationError,
};
use subtle::ConstantTimeEq;

use crate::auth::accounts::Role;
use crate::clock::Clock;
use crate::config::OidcSettings;
use crate::config::directory::Unmapped;
use crate::locks::lock;

/// How long a started sign-in waits for the browser to come back.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// Sign-ins in progress at once (beyond: 503 until some finish or expire).
pub const MAX_PENDING: usize = 10_000;
/// Sign-ins in progress from one client address (beyond: 429): a class behind one NAT address
/// fits, one client cannot fill the table for everyone.
pub const MAX_PENDING_PER_ADDRESS: usize = 256;
/// How long the discovery document is kept before it is fetched again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// The largest answer read from the issuer.
const MAX_BODY: usize = 1 << 20;

/// Why a sign-in by the issuer did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The issuer did not answer (in time, with TLS we trust, or with a usable document).
    #[error("the issuer did not answer ({step}): {message}")]
    Unavailable { step: &'static str, message: String },
    /// The `state` is unknown, used, expired, or not this browser's.
    #[error("{0}")]
    BadState(String),
    /// The issuer refused the code, or answered with an ID token we do not accept.
    #[error("{0}")]
    Rejected(String),
    /// Too many sign-ins in progress.
    #[error("too many sign-ins are in progress; try again in a minute")]
    Busy,
    /// Too many sign-ins in progress from this client address.
    #[error("too many unfinished sign-ins from your address; finish one or wait ten minutes")]
    TooMany,
}

/// The bounded HTTP client `openidconnect` sends its requests through.
#[derive(Clone)]
struct Http {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    https_only: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

impl Http {
    fn new(settings: &OidcSettings) -> Result<Self, String> {
        let tls = super::ldap::tls_client_config(settings.ca_file.as_deref(), "oidc.ca_file")?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(settings.timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { client, timeout: settings.timeout, https_only: settings.issuer.starts_with("https://") })
    }

    async fn send(&self, req: openidconnect::HttpRequest) -> Result<openidconnect::HttpResponse, HttpError> {
        if self.https_only && req.uri().scheme_str() != Some("https") {
            return Err(HttpError(format!("refusing {}: the issuer is https, this is not", req.uri())));
        }
        let uri = req.uri().clone();
        let (parts, body) = req.into_parts();
        let req = Request::from_parts(parts, Full::new(Bytes::from(body)));
        let call = async {
            let res = self.client.request(req).await.map_err(|e| HttpError(describe(&e)))?;
            let (parts, body) = res.into_parts();
            let body = Limited::new(body, MAX_BODY)
                .collect()
                .await
                .map_err(|e| HttpError(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok(Response::from_parts(parts, body.to_vec()))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(HttpError(format!("{uri}: no answer within {}", humantime::format_duration(self.timeout)))),
        }
    }
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = HttpError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send + 'c>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

/// An error with its sources (hyper's top-level message alone says only "client error (Connect)").
fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

struct Pending {
    addr: std::net::IpAddr,
    binding: String,
    nonce: Nonce,
    verifier: PkceCodeVerifier,
    /// The app clock's milliseconds after which this sign-in is refused.
    expires_ms: i64,
}

/// A user the issuer signed in, and what the mapping makes of them.
#[derive(Debug, Clone)]
pub struct OidcUser {
    /// The issuer's subject (`sub`): the account's link, checked at every later sign-in.
    pub subject: String,
    /// The configured claim's value (not yet checked against the username rule).
    pub username: String,
    pub groups: Vec<String>,
    pub role: Role,
    pub group: Option<String>,
    pub allowed: bool,
}

/// A started sign-in: where to send the browser, and the cookie value that binds it.
pub struct Started {
    pub authorize_url: String,
    pub binding: String,
}

/// The configured issuer, its kept documents, and the sign-ins in progress.
pub struct OidcProvider {
    pub settings: OidcSettings,
    redirect: RedirectUrl,
    issuer: IssuerUrl,
    algs: Vec<CoreJwsSigningAlgorithm>,
    http: Http,
    metadata: tokio::sync::Mutex<Option<(CoreProviderMetadata, Instant)>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// The app's clock, which the pending sign-ins' expiry reads (tests move it).
    clock: Clock,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider").field("issuer", &self.settings.issuer).finish_non_exhaustive()
    }
}

impl OidcProvider {
    pub fn new(settings: &OidcSettings, public_url: &str, clock: Clock) -> Result<Self, String> {
        let redirect =
            RedirectUrl::new(settings.redirect_url_for(public_url)).map_err(|e| format!("oidc.redirect_url: {e}"))?;
        let issuer = IssuerUrl::new(settings.issuer.clone()).map_err(|e| format!("oidc.issuer: {e}"))?;
        let algs = settings
            .signing_algs
            .iter()
            .map(|a| serde_json::from_value(serde_json::Value::String(a.clone())))
            .collect::<Result<Vec<CoreJwsSigningAlgorithm>, _>>()
            .map_err(|e| format!("oidc.signing_algs: {e}"))?;
        Ok(Self {
            settings: settings.clone(),
            redirect,
            issuer,
            algs,
            http: Http::new(settings)?,
            metadata: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            clock,
        })
    }

    /// The discovery document with its keys (kept for an hour; a kept one serves while the issuer
    /// is away only if still fresh).
    async fn metadata(&self, refresh_keys: bool) -> Result<CoreProviderMetadata, OidcError> {
        let mut kept = self.metadata.lock().await;
        let http = &self.http;
        let fresh = kept.as_ref().filter(|(_, at)| at.elapsed() < METADATA_TTL).map(|(m, _)| m.clone());
        let meta = match fresh {
            Some(m) if refresh_keys => {
                let jwks = JsonWebKeySet::fetch_async(m.jwks_uri(), http)
                    .await
                    .map_err(|e| OidcError::Unavailable { step: "keys", message: describe(&e) })?;
                m.set_jwks(jwks)
            }
            Some(m) => return Ok(m),
            None => CoreProviderMetadata::discover_async(self.issuer.clone(), http)
                .await
                .map_err(|e| OidcError::Unavailable { step: "discovery", message: describe(&e) })?,
        };
        *kept = Some((meta.clone(), Instant::now()));
        Ok(meta)
    }

    /// Begins a sign-in: the authorization URL (code flow, PKCE S256, `state`, `nonce`) and the
    /// value for the browser's binding cookie.
    pub async fn start(&self, addr: std::net::IpAddr) -> Result<Started, OidcError> {
        let meta = self.metadata(false).await?;
        let client = CoreClient::from_provider_metadata(
            meta,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.as_ref().map(|s| ClientSecret::new(s.expose().to_string())),
        )
        .set_redirect_uri(self.redirect.clone());
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req =
            client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
        for s in self.settings.scopes.iter().filter(|s| *s != "openid") {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.set_pkce_challenge(challenge).url();
        let binding = CsrfToken::new_random().secret().clone();
        let now = self.clock.now_ms();
        let mut pending = lock(&self.pending);
        pending.retain(|_, p| p.expires_ms > now);
        if pending.len() >= MAX_PENDING {
            return Err(OidcError::Busy);
        }
        if pending.values().filter(|p| p.addr == addr).count() >= MAX_PENDING_PER_ADDRESS {
            return Err(OidcError::TooMany);
        }
        pending.insert(
            state.secret().clone(),
            Pending { addr, binding: binding.clone(), nonce, verifier, expires_ms: now + FLOW_TTL.as_millis() as i64 },
        );
        Ok(Started { authorize_url: url.to_string(), binding })
    }

    /// Takes the sign-in `state` names out (whatever follows, it cannot be used again) and checks
    /// that this browser started it.
    fn take(&self, state: &str, binding: Option<&str>) -> Result<Pending, OidcError> {
        let p = lock(&self.pending).remove(state).ok_or_else(|| {
            OidcError::BadState("this sign-in is unknown, already used or expired; start again".into())
        })?;
        if p.expires_ms <= self.clock.now_ms() {
            return Err(OidcError::BadState("this sign-in expired; start again".into()));
        }
        let ours = binding.is_some_and(|b| bool::from(b.as_bytes().ct_eq(p.binding.as_bytes())));
        if !ours {
            return Err(OidcError::BadState("this sign-in was started in another browser; start again".into()));
        }
        Ok(p)
    }

    /// Forgets a sign-in the issuer answered with an error.
    pub fn abandon(&self, state: &str) {
        lock(&self.pending).remove(state);
    }

    /// Sign-ins in progress (tests and metrics).
    pub fn pending(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Finishes a sign-in: redeems `code` with the PKCE verifier and verifies the ID token.
    pub async fn finish(&self, state: &str, code: &str, binding: Option<&str>) -> Result<OidcUser, OidcError> {
        let p = self.take(state, binding)?;
        let meta = self.metadata(false).await?;
        let client = CoreClient::from_provider_metadata(
            meta,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.as_ref().map(|s| ClientSecret::new(s.expose().to_string())),
        )
        .set_redirect_uri(self.redirect.clone());
        let http = &self.http;
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| OidcError::Unavailable { step: "token", message: e.to_string() })?
            .set_pkce_verifier(p.verifier)
            .request_async(http)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => OidcError::Rejected(format!(
                    "the issuer refused the sign-in code ({}{})",
                    r.error().as_ref(),
                    r.error_description().map(|d| format!(": {d}")).unwrap_or_default()
                )),
                RequestTokenError::Request(e) => OidcError::Unavailable { step: "token", message: e.to_string() },
                RequestTokenError::Parse(e, _) => {
                    OidcError::Rejected(format!("the issuer's token answer is not one we accept: {e}"))
                }
                RequestTokenError::Other(m) => OidcError::Unavailable { step: "token", message: m },
            })?;
        let id_token = token
            .extra_fields()
            .id_token()
            .ok_or_else(|| OidcError::Rejected("the issuer's answer has no ID token".into()))?
            .clone();
        let claims = match self.verify(client.id_token_verifier(), &id_token, &p.nonce) {
            Err(ClaimsVerificationError::SignatureVerification(SignatureVerificationError::NoMatchingKey)) => {
                // The issuer signs with a key we have not seen: fetch its keys again, once.
                let meta = self.metadata(true).await?;
                let client = CoreClient::from_provider_metadata(
                    meta,
                    ClientId::new(self.settings.client_id.clone()),
                    self.settings.client_secret.as_ref().map(|s| ClientSecret::new(s.expose().to_string())),
                );
                self.verify(client.id_token_verifier(), &id_token, &p.nonce)
            }
            other => other,
        }
        .map_err(|e| OidcError::Rejected(format!("the issuer's ID token is not accepted: {}", describe(&e))))?;
        self.map(claims)
    }

    /// Verifies the ID token (signature by an allowed algorithm, issuer, audience, expiry,
    /// nonce) and answers its payload.
    fn verify(
        &self,
        verifier: openidconnect::core::CoreIdTokenVerifier<'_>,
        id_token: &CoreIdToken,
        nonce: &Nonce,
    ) -> Result<serde_json::Value, ClaimsVerificationError> {
        let verifier = verifier.set_allowed_algs(self.algs.clone());
        id_token.claims(&verifier, nonce)?;
        // Verified: read the claims the configuration names from the payload itself.
        let raw = id_token.to_string();
        let payload = raw.split('.').nth(1).unwrap_or_default();
        let bytes =
            URL_SAFE_NO_PAD.decode(payload).map_err(|e| ClaimsVerificationError::Other(format!("payload: {e}")))?;
        serde_json::from_slice(&bytes).map_err(|e| ClaimsVerificationError::Other(format!("payload: {e}")))
    }

    /// Claims → username, groups → role and group.
    fn map(&self, claims: serde_json::Value) -> Result<OidcUser, OidcError> {
        let s = &self.settings;
        let subject = claims["sub"].as_str().unwrap_or_default().to_string();
        let username = match &claims[&s.username_claim] {
            serde_json::Value::String(u) if !u.is_empty() => u.clone(),
            _ => {
                return Err(OidcError::Rejected(format!(
                    "the issuer's ID token has no `{}` claim to name your account; ask an admin of the lab",
                    s.username_claim
                )));
            }
        };
        let groups: Vec<String> = match &claims[&s.groups_claim] {
            serde_json::Value::Array(a) => a.iter().filter_map(|g| g.as_str().map(str::to_string)).collect(),
            serde_json::Value::String(g) => vec![g.clone()],
            _ => Vec::new(),
        };
        let admin = groups.iter().any(|g| s.admin_groups.contains(g));
        let group = s.groups.iter().find(|m| groups.contains(&m.directory)).map(|m| m.group.clone());
        let allowed = admin || group.is_some() || s.unmapped == Unmapped::Member;
        Ok(OidcUser { subject, username, groups, role: if admin { Role::Admin } else { Role::Member }, group, allowed })
    }
}
