//! Reaching a running session: one-time connection tokens (`cnx_<ULID>.<secret>`, stored hashed,
//! 300 s), the `gshare_session` cookie (HS256 `{sid, owner, exp, iat, cnx}`), and the forward-auth
//! decision behind `GET /internal/connect/verify` (contract §4).
//!
//! Behind ingress-nginx the cookie verify sets reaches the browser only through `add_header
//! Set-Cookie`, which nginx applies to 200/201/204/206/301/302/303/304/307/308 answers alone; a
//! session's app often answers 502 right after it starts. So a token is checked (against the routed
//! session, its state, its client) before anything is spent, and spent for good only once the
//! cookie it gave comes back: until then, for [`REDEEM_GRACE_MS`] after its first use, the same
//! client may redeem it again. A HEAD (`X-Original-Method`, as ingress-nginx sends it) never
//! redeems one. Every verify that accepts a cookie older than [`COOKIE_RENEW_AFTER_S`] sends a
//! renewed one through the same `add_header` (sliding expiry, never past the run's
//! `max_runtime_sec`).
//!
//! A credential opens exactly one session: the one the original request routes to, decided by
//! [`super::proxy_path::route`] the way the ingress routes it (and refused when that is not
//! certain). The cookie is scoped to its session's `/proxy/<cr>/` path, so a browser holds one per
//! session and sends each only there; when several arrive, the one for the routed session counts.

use std::path::Path;
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::model::{CONNECT_TOKENS, ConnectTokenRecord, Connection, Phase, SESSIONS, cr_name};
use super::proxy_path::{Refusal, Routed, route};
use super::{SessionError, Sessions, conflict};
use crate::clock::rfc3339_ms;
use crate::clusters::model::CLUSTERS;
use crate::http::error::ErrorCode;
use crate::locks::lock;
use crate::store::StoreError;

/// The data-plane cookie the ingress forwards back to verify.
pub const COOKIE: &str = "gshare_session";
pub const COOKIE_TTL_S: i64 = 3600;
/// A cookie accepted at least this long after it was issued is renewed (sliding expiry).
pub const COOKIE_RENEW_AFTER_S: i64 = 300;
pub const TOKEN_TTL_MS: i64 = 300_000;
/// How long a redeemed token stays good for the client that redeemed it while its cookie has not
/// come back (the app's first answers may be errors that carry no cookie).
pub const REDEEM_GRACE_MS: i64 = 120_000;
/// A cookie bounded by the end of its run still lives at least this long.
const MIN_COOKIE_S: i64 = 60;
const KEY_FILE: &str = "session-cookie.key";
const KEY_BYTES: usize = 32;

/// The HS256 secret of the `gshare_session` cookie: `<data_dir>/keys/session-cookie.key`
/// (0600 in a 0700 directory), created on first start.
pub struct ConnectKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// Cookies whose signature was checked, by their exact value (an HS256 check and two JSON
    /// parses per request otherwise): the same bytes always check the same, and expiry is still
    /// compared on every use. Only signed values get in, so a flood of junk cannot fill it.
    checked: std::sync::Mutex<std::collections::HashMap<Arc<str>, Arc<Checked>>>,
}

/// A cookie whose signature was checked: its claims, and the CR name of the session it opens.
/// Shared by every request that sends it (nothing of it is copied per request).
#[derive(Debug)]
pub(crate) struct Checked {
    pub claims: CookieClaims,
    pub cr: String,
}

/// Checked cookies kept at most (one per open browser tab of a session); beyond, it starts over.
const MAX_CHECKED: usize = 4096;

impl std::fmt::Debug for ConnectKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectKeys(<redacted>)")
    }
}

impl ConnectKeys {
    pub fn open(keys_dir: &Path) -> Result<Self, String> {
        crate::auth::jwt_crypto::install();
        let path = keys_dir.join(KEY_FILE);
        let secret = match std::fs::read(&path) {
            Ok(bytes) if bytes.len() >= KEY_BYTES => bytes,
            Ok(_) => {
                return Err(format!(
                    "{} is shorter than {KEY_BYTES} bytes; delete it to have a new one made",
                    path.display()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::auth::keys::create_private_dir(keys_dir).map_err(|e| e.to_string())?;
                let mut bytes = vec![0u8; KEY_BYTES];
                getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for {}: {e}", path.display()))?;
                crate::auth::keys::write_private_file(&path, &bytes)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                bytes
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let bad = |e: jsonwebtoken::errors::Error| format!("{}: {e}", path.display());
        Ok(Self {
            encoding: EncodingKey::from_secret(&secret).map_err(bad)?,
            decoding: DecodingKey::from_secret(&secret).map_err(bad)?,
            checked: Default::default(),
        })
    }

    fn sign(&self, c: &CookieClaims) -> Result<String, String> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), c, &self.encoding).map_err(|e| e.to_string())
    }

    /// The checked cookie `token`, when signed with this key and not expired at `now_s`.
    pub(crate) fn verify(&self, token: &str, now_s: i64) -> Option<Arc<Checked>> {
        self.remembered(token).and_then(|(_, c)| (c.claims.exp > now_s).then_some(c))
    }

    /// The checked cookie `token` whatever its expiry, with the value as remembered (shared, not
    /// copied), when signed with this key.
    fn remembered(&self, token: &str) -> Option<(Arc<str>, Arc<Checked>)> {
        let lock = || lock(&self.checked);
        if let Some((value, c)) = lock().get_key_value(token) {
            return Some((value.clone(), c.clone()));
        }
        let claims = self.check(token)?;
        let c = Arc::new(Checked { cr: cr_name(&claims.sid), claims });
        let value: Arc<str> = Arc::from(token);
        let mut map = lock();
        if map.len() >= MAX_CHECKED {
            map.clear();
        }
        map.insert(value.clone(), c.clone());
        Some((value, c))
    }

    /// The claims of a cookie signed with this key (expiry not compared).
    fn check(&self, token: &str) -> Option<CookieClaims> {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_required_spec_claims(&["exp"]);
        v.validate_exp = false; // checked below against the passed-in clock
        v.leeway = 0;
        Some(jsonwebtoken::decode::<CookieClaims>(token, &self.decoding, &v).ok()?.claims)
    }
}

/// The header the `/proxy/` relay passes a verified console user in (the console's cookie itself
/// never crosses the relay): an HS256 value signed with the session-cookie key, `{cu, adm, exp}`,
/// good for [`CONSOLE_USER_TTL_S`]. The ingress hands it to verify with the request's headers.
/// It can only narrow what verify allows (a member's name refuses other members' links; no
/// value allows what a browser without a console cookie is allowed), and a client cannot make
/// one: the relay drops every client-sent `X-GShare-*` and verify checks the signature.
pub const CONSOLE_USER_HEADER: &str = "x-gshare-console-user";
pub const CONSOLE_USER_TTL_S: i64 = 60;

/// What [`CONSOLE_USER_HEADER`] carries. Its fields differ from a cookie's (`sid`, `owner`), so
/// neither is ever read as the other.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleUserClaims {
    cu: String,
    adm: bool,
    exp: i64,
}

impl ConnectKeys {
    /// The relay's signed statement that the browser is signed in to the console as `name`.
    pub(crate) fn console_user_assertion(&self, name: &str, admin: bool, now_s: i64) -> Option<String> {
        let c = ConsoleUserClaims { cu: name.to_string(), adm: admin, exp: now_s + CONSOLE_USER_TTL_S };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &c, &self.encoding).ok()
    }

    /// The console user a relay's [`CONSOLE_USER_HEADER`] names, when signed here and not expired.
    pub(crate) fn asserted_console_user(&self, value: &str, now_s: i64) -> Option<(String, bool)> {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_required_spec_claims(&["exp"]);
        v.validate_exp = false;
        v.leeway = 0;
        let c = jsonwebtoken::decode::<ConsoleUserClaims>(value, &self.decoding, &v).ok()?.claims;
        (c.exp > now_s).then_some((c.cu, c.adm))
    }
}

/// The last session cookie asked about (see [`Sessions::cookie_opens`]): one per client
/// connection of the relay.
#[derive(Default)]
pub struct CookieMemo(Mutex<Option<Remembered>>);

struct Remembered {
    value: Arc<str>,
    /// What it was checked to be (`None`: not signed with our key).
    checked: Option<Arc<Checked>>,
}

impl Remembered {
    /// Signed for the session named `cr`, and not expired at `now_s`.
    fn opens(&self, cr: &str, now_s: i64) -> bool {
        self.checked.as_ref().is_some_and(|c| c.claims.exp > now_s && c.cr == cr)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CookieClaims {
    sid: String,
    owner: String,
    exp: i64,
    /// When it was issued (renewal is due [`COOKIE_RENEW_AFTER_S`] later); older cookies have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<i64>,
    /// The token (its stored hash) this cookie was issued for: seeing the cookie spends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cnx: Option<String>,
}

/// What the ingress sent to verify.
#[derive(Debug, Clone, Default)]
pub struct VerifyRequest {
    /// Every `gshare_session` cookie value sent (a browser sends one per open session path).
    pub cookies: Vec<String>,
    /// Every `X-Original-URI` header (plain nginx `auth_request` setups send `$request_uri`).
    pub original_uri: Vec<String>,
    /// Every `X-Original-URL` header (ingress-nginx sends `$scheme://$http_host$request_uri`).
    pub original_url: Vec<String>,
    /// `?token=` on the verify URL itself.
    pub query_token: Option<String>,
    /// `X-Gshare-Cnx`.
    pub header_token: Option<String>,
    /// `X-Original-Method` (ingress-nginx sends the client's method): a HEAD redeems nothing.
    pub method: Option<String>,
    /// The client as the ingress saw it: `X-Real-IP`, else the first `X-Forwarded-For` entry.
    pub client_addr: Option<String>,
    pub user_agent: Option<String>,
    /// The account the browser is signed in to the console as, when its console cookie came
    /// along (or, through the `/proxy/` relay, which drops that cookie, the relay's signed
    /// [`CONSOLE_USER_HEADER`]), and whether it is an admin's: a token minted for another account is refused to a
    /// member (a forwarded link opens nothing for a colleague); an admin may open any session.
    pub console_user: Option<(String, bool)>,
}

/// A yes from verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub session_id: String,
    /// Set when a token was redeemed (`X-GShare-User`): the owner it was minted for.
    pub owner: Option<String>,
    /// A cookie to set: a fresh one when a token was redeemed, a renewed one when the cookie sent
    /// was due for renewal.
    pub cookie: Option<String>,
}

/// Why verify said no (in the 401's details; never a secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    NoCredentials,
    UnknownOrUsed,
    Expired,
    /// Redeemed already, by another client (address and User-Agent).
    OtherClient,
    NotRunning,
    OtherSession,
    /// The token was minted for another account than the member the browser is signed in to
    /// the console as (a forwarded link).
    OtherUser,
    /// No `X-Original-URL` or `X-Original-URI`: which session is asked for is unknown.
    MissingUri,
    /// A header repeated, or `X-Original-URL` and `X-Original-URI` naming different targets (a
    /// client can send either; ingress-nginx sets only the URL).
    ConflictingUri,
    /// The original URI does not route to one certain session.
    Uri(Refusal),
}

impl Denied {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoCredentials => "no_credentials",
            Self::UnknownOrUsed => "token_unknown_or_used",
            Self::Expired => "token_expired",
            Self::OtherClient => "token_other_client",
            Self::NotRunning => "session_not_running",
            Self::OtherSession => "other_session",
            Self::OtherUser => "other_user",
            Self::MissingUri => "uri_missing",
            Self::ConflictingUri => "uri_conflict",
            Self::Uri(r) => r.as_str(),
        }
    }
}

/// The target the ingress asks about, from its `X-Original-URL` / `X-Original-URI` headers: each at
/// most once, and the same target when both are sent.
pub fn original_target(uri: &[String], url: &[String]) -> Result<Routed, Denied> {
    if uri.len() > 1 || url.len() > 1 {
        return Err(Denied::ConflictingUri);
    }
    let parse = |v: &String| route(v).map_err(Denied::Uri);
    match (url.first().map(parse).transpose()?, uri.first().map(parse).transpose()?) {
        (None, None) => Err(Denied::MissingUri),
        (Some(a), Some(b)) if a != b => Err(Denied::ConflictingUri),
        (Some(r), _) | (None, Some(r)) => Ok(r),
    }
}

/// Every value of the `gshare_session` cookie in a request's `Cookie` headers, in order.
pub fn session_cookies(headers: &axum::http::HeaderMap) -> Vec<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .filter(|(k, v)| *k == COOKIE && !v.is_empty())
        .map(|(_, v)| v.to_string())
        .collect()
}

fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Who redeems a token: its address as the ingress saw it and its User-Agent, digested.
fn client_digest(addr: Option<&str>, user_agent: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(addr.unwrap_or("").trim().as_bytes());
    h.update([0]);
    h.update(user_agent.unwrap_or("").as_bytes());
    hex::encode(&h.finalize()[..16])
}

/// Whether a stored token may open the routed session for this client now. Nothing is spent.
fn check_token(t: &ConnectTokenRecord, routed_cr: &str, client: &str, now: i64) -> Result<(), Denied> {
    match t.redeemed_at {
        None if t.expires_at <= now => return Err(Denied::Expired),
        Some(at) if now >= at.saturating_add(REDEEM_GRACE_MS) => return Err(Denied::UnknownOrUsed),
        _ => {}
    }
    if cr_name(&t.session_id) != routed_cr {
        return Err(Denied::OtherSession);
    }
    if t.client.as_deref().is_some_and(|c| c != client) {
        return Err(Denied::OtherClient);
    }
    Ok(())
}

/// Until when a stored token is worth keeping.
fn token_live_until(t: &ConnectTokenRecord) -> i64 {
    t.redeemed_at.map_or(t.expires_at, |at| at.saturating_add(REDEEM_GRACE_MS))
}

pub(crate) fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

pub fn app_path(kind: &str) -> Option<&'static str> {
    match kind {
        "code" => Some("code/"),
        "lab" => Some("lab"),
        "terminal" => Some("terminal"),
        _ => None,
    }
}

impl Sessions {
    /// Mints a one-time token and the URL that redeems it.
    /// Mints it for the session's owner (an admin opening another's session is audited by the
    /// caller as such).
    pub async fn connect(&self, id: &str, kind: &str) -> Result<Connection, SessionError> {
        let path = app_path(kind).ok_or_else(|| SessionError::Invalid {
            field: "kind",
            message: "must be code, lab or terminal".into(),
            kind: "enum",
        })?;
        let s = self.get(id).await?;
        if s.phase != Phase::Running {
            return Err(conflict(
                ErrorCode::SessionNotRunning,
                format!("session {} is {}; only a running session can be opened", s.id, s.phase.as_str()),
                json!({ "phase": s.phase }),
            ));
        }
        let cid = s.cluster_id.clone();
        let cluster = self.store().read(move |txn| CLUSTERS.get(txn, &cid)).await?;
        let domain = cluster.as_ref().and_then(|c| self.session_domain(c)).ok_or_else(|| {
            conflict(
                ErrorCode::NoSessionDomain,
                "no session domain is set for this cluster or the server (session_domain); set one on the cluster",
                json!({ "cluster_id": s.cluster_id }),
            )
        })?;
        let mut secret = [0u8; 24];
        getrandom::fill(&mut secret).map_err(|e| StoreError::Join(format!("no randomness: {e}")))?;
        let token = format!("cnx_{}.{}", ulid::Ulid::new(), hex::encode(secret));
        let now = self.clock().now_ms();
        let rec = ConnectTokenRecord {
            session_id: s.id.clone(),
            owner: s.owner.clone(),
            expires_at: now + TOKEN_TTL_MS,
            redeemed_at: None,
            client: None,
        };
        let key = hash(&token);
        self.store()
            .write(move |txn| {
                // Dead tokens go whenever a new one is made, so the table stays small.
                for (k, t) in CONNECT_TOKENS.list_in_write(txn)? {
                    if token_live_until(&t) <= now {
                        CONNECT_TOKENS.delete(txn, &k)?;
                    }
                }
                CONNECT_TOKENS.put(txn, &key, &rec)
            })
            .await?;
        let scheme = &self.config().session_url_scheme;
        Ok(Connection {
            kind: kind.to_string(),
            url: format!("{scheme}://{domain}/proxy/{}/{path}?gshare_cnx={token}", s.cr_name()),
            token,
            expires_at: rfc3339_ms(now + TOKEN_TTL_MS),
        })
    }

    /// The console user a relay asserted in [`CONSOLE_USER_HEADER`] (see there).
    pub fn asserted_console_user(&self, value: &str) -> Option<(String, bool)> {
        self.connect.asserted_console_user(value, self.clock().now_ms().div_euclid(1000))
    }

    /// [`CONSOLE_USER_HEADER`]'s value for a browser signed in to the console as `name`.
    pub fn console_user_assertion(&self, name: &str, admin: bool) -> Option<String> {
        self.connect.console_user_assertion(name, admin, self.clock().now_ms().div_euclid(1000))
    }

    /// Whether `cookie` is a valid (signed, unexpired) `gshare_session` cookie for the session
    /// named `cr`, through `memo`: a browser sends the same cookie with every request of a
    /// connection, and its signature is checked once; its expiry, every time.
    pub fn cookie_opens(&self, cookie: &str, cr: &str, memo: &CookieMemo) -> bool {
        let now_s = self.clock().now_ms().div_euclid(1000);
        let mut last = lock(&memo.0);
        if let Some(r) = last.as_ref()
            && *r.value == *cookie
        {
            return r.opens(cr, now_s);
        }
        // The claims whatever their expiry (compared in `opens`, so a remembered one expires too).
        let r = match self.connect.remembered(cookie) {
            Some((value, checked)) => Remembered { value, checked: Some(checked) },
            None => Remembered { value: Arc::from(cookie), checked: None },
        };
        let opens = r.opens(cr, now_s);
        *last = Some(r);
        opens
    }

    /// The forward-auth decision for the session the original URI routes to: a valid cookie for
    /// that session while it runs (renewed when due), else a token for that session, checked before
    /// it is spent (see the module's notes).
    pub async fn verify(&self, req: VerifyRequest) -> Result<Result<Verified, Denied>, SessionError> {
        let now = self.clock().now_ms();
        let now_s = now.div_euclid(1000);
        let routed = match original_target(&req.original_uri, &req.original_url) {
            Ok(r) => r,
            Err(d) => return Ok(Err(d)),
        };
        let mut other_session = false;
        for checked in req.cookies.iter().filter_map(|c| self.connect.verify(c, now_s)) {
            if checked.cr != routed.cr {
                other_session = true;
                continue;
            }
            let claims = &checked.claims;
            // The session as of the last commit (remembered per CR name until the next one); read
            // by id when the name stands for another id than the cookie's.
            let (running, ends_at) = match self.target(&routed.cr).await? {
                Some(t) if t.session_id == claims.sid => {
                    (t.phase == Phase::Running && t.owner == claims.owner, t.ends_at)
                }
                _ => {
                    let sid = claims.sid.clone();
                    let current = self.store().read(move |txn| SESSIONS.get(txn, &sid)).await?;
                    current.map_or((false, None), |s| {
                        (s.phase == Phase::Running && s.owner == claims.owner, super::lookup::run_ends_at(&s))
                    })
                }
            };
            if !running {
                continue;
            }
            // The browser holds the cookie: the token it came from is spent now.
            if let Some(key) = &claims.cnx {
                self.spend_token(key).await?;
            }
            let due = claims.cnx.is_some() || claims.iat.is_none_or(|iat| now_s - iat >= COOKIE_RENEW_AFTER_S);
            let cookie = if due {
                Some(self.session_cookie(&claims.sid, &claims.owner, None, ends_at, &routed.cr, now_s)?)
            } else {
                None
            };
            return Ok(Ok(Verified { session_id: claims.sid.clone(), owner: None, cookie }));
        }
        let token = req
            .query_token
            .clone()
            .filter(|t| !t.is_empty())
            .or_else(|| query_param(routed.query.as_deref().unwrap_or(""), "gshare_cnx").map(str::to_string))
            .or_else(|| req.header_token.clone().filter(|t| !t.is_empty()));
        let Some(token) = token else {
            return Ok(Err(if other_session { Denied::OtherSession } else { Denied::NoCredentials }));
        };
        // This endpoint has no other authentication: junk never reaches the store, and an unknown,
        // expired or misdirected token costs a read, not a durable write.
        if !token.starts_with("cnx_") || token.len() > 128 {
            return Ok(Err(Denied::UnknownOrUsed));
        }
        let key = hash(&token);
        let client = client_digest(req.client_addr.as_deref(), req.user_agent.as_deref());
        let probe = key.clone();
        let found = self
            .store()
            .read(move |txn| {
                let Some(t) = CONNECT_TOKENS.get(txn, &probe)? else { return Ok(None) };
                let s = SESSIONS.get(txn, &t.session_id)?;
                Ok(Some((t, s)))
            })
            .await?;
        let Some((t, session)) = found else { return Ok(Err(Denied::UnknownOrUsed)) };
        // Checked against the routed session, its state and its client before anything is spent.
        if let Err(d) = check_token(&t, &routed.cr, &client, now) {
            return Ok(Err(d));
        }
        let Some(session) = session.filter(|s| s.phase == Phase::Running) else {
            return Ok(Err(Denied::NotRunning));
        };
        // A link minted for A opens nothing in a browser signed in to the console as member B.
        if req.console_user.as_ref().is_some_and(|(b, admin)| !admin && *b != t.owner) {
            return Ok(Err(Denied::OtherUser));
        }
        // A HEAD (a link preview, a prefetch) is answered but redeems nothing: no cookie, no binding.
        if req.method.as_deref().is_some_and(|m| m.eq_ignore_ascii_case("HEAD")) {
            return Ok(Ok(Verified { session_id: t.session_id, owner: None, cookie: None }));
        }
        if t.redeemed_at.is_none() {
            // The first redemption binds the token to this client: one write, which a second
            // client racing it sees.
            let (k, cr, c) = (key.clone(), routed.cr.clone(), client.clone());
            let bound = self
                .store()
                .write(move |txn| {
                    let Some(mut t) = CONNECT_TOKENS.get_in_write(txn, &k)? else {
                        return Ok(Err(Denied::UnknownOrUsed));
                    };
                    if let Err(d) = check_token(&t, &cr, &c, now) {
                        return Ok(Err(d));
                    }
                    if t.redeemed_at.is_none() {
                        t.redeemed_at = Some(now);
                        t.client = Some(c);
                        CONNECT_TOKENS.put(txn, &k, &t)?;
                    }
                    Ok(Ok(()))
                })
                .await?;
            if let Err(d) = bound {
                return Ok(Err(d));
            }
        }
        let ends_at = super::lookup::run_ends_at(&session);
        let cookie = self.session_cookie(&t.session_id, &t.owner, Some(key), ends_at, &routed.cr, now_s)?;
        Ok(Ok(Verified { session_id: t.session_id, owner: Some(t.owner), cookie: Some(cookie) }))
    }

    /// Deletes a redeemed token whose cookie came back (a read when it is already gone).
    async fn spend_token(&self, key: &str) -> Result<(), StoreError> {
        let probe = key.to_string();
        if self.store().read(move |txn| CONNECT_TOKENS.get(txn, &probe)).await?.is_none() {
            return Ok(());
        }
        let key = key.to_string();
        self.store().write(move |txn| CONNECT_TOKENS.delete(txn, &key).map(|_| ())).await
    }

    /// The `Set-Cookie` value for a session's cookie: an hour from now, never past the end of the
    /// run (but at least [`MIN_COOKIE_S`]), scoped to the session's own path so a second
    /// session's cookie lives beside it instead of replacing it.
    fn session_cookie(
        &self,
        sid: &str,
        owner: &str,
        cnx: Option<String>,
        ends_at_ms: Option<i64>,
        cr: &str,
        now_s: i64,
    ) -> Result<String, StoreError> {
        let mut exp = now_s + COOKIE_TTL_S;
        if let Some(end) = ends_at_ms.map(|e| e.div_euclid(1000)) {
            exp = exp.min(end.max(now_s + MIN_COOKIE_S));
        }
        let claims = CookieClaims { sid: sid.to_string(), owner: owner.to_string(), exp, iat: Some(now_s), cnx };
        let jwt = self.connect.sign(&claims).map_err(StoreError::Join)?;
        let secure = if self.config().session_url_scheme == "https" { "; Secure" } else { "" };
        Ok(format!("{COOKIE}={jwt}; Path=/proxy/{cr}/; HttpOnly; SameSite=Lax; Max-Age={}{secure}", exp - now_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn original_targets() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cr = |uri: &[&str], url: &[&str]| original_target(&v(uri), &v(url)).map(|r| r.cr);
        assert_eq!(cr(&["/proxy/ses-1/lab?gshare_cnx=cnx_A.b"], &[]), Ok("ses-1".into()));
        assert_eq!(cr(&[], &["https://s.example.com/proxy/ses-1/code/"]), Ok("ses-1".into()));
        // Both sent: they must name the same target (as normalised).
        assert_eq!(cr(&["/proxy/ses-1/lab"], &["https://s/proxy//ses-1/lab"]), Ok("ses-1".into()));
        assert_eq!(cr(&["/proxy/ses-1/lab"], &["https://s/proxy/ses-2/lab"]), Err(Denied::ConflictingUri));
        assert_eq!(cr(&["/proxy/ses-1/lab?a"], &["https://s/proxy/ses-1/lab?b"]), Err(Denied::ConflictingUri));
        // A header twice, none at all, or one that does not route: refused.
        assert_eq!(cr(&["/proxy/ses-1/lab", "/proxy/ses-1/lab"], &[]), Err(Denied::ConflictingUri));
        assert_eq!(cr(&[], &["https://s/proxy/ses-1/lab", "https://s/proxy/ses-2/lab"]), Err(Denied::ConflictingUri));
        assert_eq!(cr(&[], &[]), Err(Denied::MissingUri));
        assert_eq!(
            cr(&["/proxy/ses-1/lab"], &["https://s/proxy/ses-1/../ses-2/lab"]),
            Err(Denied::Uri(Refusal::DotSegment))
        );
        assert_eq!(Denied::Uri(Refusal::EncodedSlash).as_str(), "uri_encoded_slash");
        let mut h = axum::http::HeaderMap::new();
        h.append("cookie", "a=1; gshare_session=one; gshare_session=".parse().unwrap());
        h.append("cookie", "gshare_session=two".parse().unwrap());
        assert_eq!(session_cookies(&h), ["one", "two"]);
        assert_eq!(query_param("a=1&gshare_cnx=t&b", "gshare_cnx"), Some("t"));
        assert_eq!(query_param("gshare_cnx=", "gshare_cnx"), None);
    }

    #[test]
    fn cookies_are_pinned_to_hs256_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let keys = ConnectKeys::open(dir.path()).unwrap();
        let c = CookieClaims { sid: "ses_1".into(), owner: "alice".into(), exp: 1000, iat: None, cnx: None };
        let t = keys.sign(&c).unwrap();
        let checked = keys.verify(&t, 999).unwrap();
        assert_eq!((checked.claims.sid.as_str(), checked.cr.as_str()), ("ses_1", "ses-1"));
        assert!(keys.verify(&t, 1000).is_none(), "expired at exp");
        // Same key re-read from disk; a different key refuses.
        assert!(ConnectKeys::open(dir.path()).unwrap().verify(&t, 10).is_some());
        let other = ConnectKeys::open(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other.verify(&t, 10).is_none());
        // alg=none and a tampered payload are refused.
        let parts: Vec<&str> = t.split('.').collect();
        assert!(keys.verify(&format!("eyJhbGciOiJub25lIn0.{}.", parts[1]), 10).is_none());
        // Remembered by exact value once checked: a changed signature or payload is still
        // refused, junk is never remembered, and expiry is compared on every use.
        let mut forged_sig = t.clone();
        forged_sig.pop();
        forged_sig.push(if t.ends_with('A') { 'B' } else { 'A' });
        assert!(keys.verify(&forged_sig, 10).is_none());
        let other_claims = CookieClaims { sid: "ses_2".into(), owner: "alice".into(), exp: 1000, iat: None, cnx: None };
        let other_payload = other.sign(&other_claims).unwrap();
        let spliced = format!("{}.{}.{}", parts[0], other_payload.split('.').nth(1).unwrap(), parts[2]);
        assert!(keys.verify(&spliced, 10).is_none(), "a payload under another session's name");
        assert_eq!(keys.checked.lock().unwrap().len(), 1, "only the signed cookie is remembered");
        assert!(keys.verify(&t, 2000).is_none(), "a remembered cookie still expires");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
