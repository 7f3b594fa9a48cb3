//! Reaching a running session: one-time connection tokens (`cnx_<ULID>.<secret>`, stored hashed,
//! 300 s, single use), the `gshare_session` cookie (HS256 `{sid, owner, exp}`), and the
//! forward-auth decision behind `GET /internal/connect/verify` (contract §4).
//!
//! A credential opens exactly one session: the one the original request routes to, decided by
//! [`super::proxy_path::route`] the way the ingress routes it (and refused when that is not
//! certain). The cookie is scoped to its session's `/proxy/<cr>/` path, so a browser holds one per
//! session and sends each only there; when several arrive, the one for the routed session counts.

use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::model::{CONNECT_TOKENS, ConnectTokenRecord, Connection, Phase, SESSIONS, cr_name};
use super::proxy_path::{Refusal, Routed, route};
use super::{SessionError, Sessions, conflict};
use crate::clock::rfc3339_ms;
use crate::clusters::model::CLUSTERS;
use crate::store::StoreError;

/// The data-plane cookie the ingress forwards back to verify.
pub const COOKIE: &str = "gshare_session";
pub const COOKIE_TTL_S: i64 = 3600;
pub const TOKEN_TTL_MS: i64 = 300_000;
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
    checked: std::sync::Mutex<std::collections::HashMap<String, CookieClaims>>,
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

    pub(crate) fn verify(&self, token: &str, now_s: i64) -> Option<CookieClaims> {
        let lock = || self.checked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = lock().get(token) {
            return (c.exp > now_s).then(|| c.clone());
        }
        let c = self.check(token)?;
        let mut map = lock();
        if map.len() >= MAX_CHECKED {
            map.clear();
        }
        map.insert(token.to_string(), c.clone());
        (c.exp > now_s).then_some(c)
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CookieClaims {
    sid: String,
    owner: String,
    exp: i64,
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
}

/// A yes from verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub session_id: String,
    /// Set when a token was redeemed (`X-GShare-User`).
    pub owner: Option<String>,
    /// A fresh cookie to set when a token was redeemed.
    pub cookie: Option<String>,
}

/// Why verify said no (in the 401's details; never a secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    NoCredentials,
    UnknownOrUsed,
    Expired,
    NotRunning,
    OtherSession,
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
            Self::NotRunning => "session_not_running",
            Self::OtherSession => "other_session",
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
    pub async fn connect(&self, id: &str, kind: &str) -> Result<Connection, SessionError> {
        let path = app_path(kind).ok_or_else(|| SessionError::Invalid {
            field: "kind",
            message: "must be code, lab or terminal".into(),
            kind: "enum",
        })?;
        let s = self.get(id).await?;
        if s.phase != Phase::Running {
            return Err(conflict(
                "session_not_running",
                format!("session {} is {}; only a running session can be opened", s.id, s.phase.as_str()),
                json!({ "phase": s.phase }),
            ));
        }
        let cid = s.cluster_id.clone();
        let cluster = self.store().read(move |txn| CLUSTERS.get(txn, &cid)).await?;
        let domain = cluster.as_ref().and_then(|c| self.session_domain(c)).ok_or_else(|| {
            conflict(
                "no_session_domain",
                "no session domain is set for this cluster or the server (session_domain); set one on the cluster",
                json!({ "cluster_id": s.cluster_id }),
            )
        })?;
        let mut secret = [0u8; 24];
        getrandom::fill(&mut secret).map_err(|e| StoreError::Join(format!("no randomness: {e}")))?;
        let token = format!("cnx_{}.{}", ulid::Ulid::new(), hex::encode(secret));
        let now = self.clock().now_ms();
        let rec =
            ConnectTokenRecord { session_id: s.id.clone(), owner: s.owner.clone(), expires_at: now + TOKEN_TTL_MS };
        let key = hash(&token);
        self.store()
            .write(move |txn| {
                // Expired tokens go whenever a new one is made, so the table stays small.
                for (k, t) in CONNECT_TOKENS.list_in_write(txn)? {
                    if t.expires_at <= now {
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

    /// The sid of a valid (signed, unexpired) `gshare_session` cookie.
    pub fn cookie_session(&self, cookie: &str) -> Option<String> {
        self.connect.verify(cookie, self.clock().now_ms().div_euclid(1000)).map(|c| c.sid)
    }

    /// The forward-auth decision for the session the original URI routes to: a valid cookie for
    /// that session while it runs, else a token for that session, redeemed once.
    pub async fn verify(&self, req: VerifyRequest) -> Result<Result<Verified, Denied>, SessionError> {
        let now = self.clock().now_ms();
        let routed = match original_target(&req.original_uri, &req.original_url) {
            Ok(r) => r,
            Err(d) => return Ok(Err(d)),
        };
        let mut other_session = false;
        for claims in req.cookies.iter().filter_map(|c| self.connect.verify(c, now.div_euclid(1000))) {
            if cr_name(&claims.sid) != routed.cr {
                other_session = true;
                continue;
            }
            // The session as of the last commit (remembered per CR name until the next one); read
            // by id when the name stands for another id than the cookie's.
            let running = match self.target(&routed.cr).await? {
                Some(t) if t.session_id == claims.sid => t.phase == Phase::Running && t.owner == claims.owner,
                _ => {
                    let sid = claims.sid.clone();
                    let current = self.store().read(move |txn| SESSIONS.get(txn, &sid)).await?;
                    current.is_some_and(|s| s.phase == Phase::Running && s.owner == claims.owner)
                }
            };
            if running {
                return Ok(Ok(Verified { session_id: claims.sid, owner: None, cookie: None }));
            }
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
        // This endpoint has no other authentication: junk never reaches the store, and an unknown
        // token costs a read, not a durable write.
        if !token.starts_with("cnx_") || token.len() > 128 {
            return Ok(Err(Denied::UnknownOrUsed));
        }
        let key = hash(&token);
        let probe = key.clone();
        let routed_cr = routed.cr.clone();
        if self.store().read(move |txn| CONNECT_TOKENS.get(txn, &probe)).await?.is_none() {
            return Ok(Err(Denied::UnknownOrUsed));
        }
        let outcome = self
            .store()
            .write(move |txn| {
                // Redeemed means gone, whatever happens next: a token never works twice.
                let Some(t) = CONNECT_TOKENS.get_in_write(txn, &key)? else { return Ok(Err(Denied::UnknownOrUsed)) };
                CONNECT_TOKENS.delete(txn, &key)?;
                if t.expires_at <= now {
                    return Ok(Err(Denied::Expired));
                }
                if cr_name(&t.session_id) != routed_cr {
                    return Ok(Err(Denied::OtherSession));
                }
                let running = SESSIONS.get_in_write(txn, &t.session_id)?.is_some_and(|s| s.phase == Phase::Running);
                Ok(if running { Ok(t) } else { Err(Denied::NotRunning) })
            })
            .await?;
        let t = match outcome {
            Ok(t) => t,
            Err(d) => return Ok(Err(d)),
        };
        let claims = CookieClaims {
            sid: t.session_id.clone(),
            owner: t.owner.clone(),
            exp: now.div_euclid(1000) + COOKIE_TTL_S,
        };
        let jwt = self.connect.sign(&claims).map_err(StoreError::Join)?;
        let secure = if self.config().session_url_scheme == "https" { "; Secure" } else { "" };
        Ok(Ok(Verified {
            session_id: t.session_id,
            owner: Some(t.owner),
            // One cookie per session: scoped to its own path, a second session's cookie lives
            // beside it instead of replacing it.
            cookie: Some(format!(
                "{COOKIE}={jwt}; Path=/proxy/{}/; HttpOnly; SameSite=Lax; Max-Age={COOKIE_TTL_S}{secure}",
                routed.cr
            )),
        }))
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
        let c = CookieClaims { sid: "ses_1".into(), owner: "alice".into(), exp: 1000 };
        let t = keys.sign(&c).unwrap();
        assert_eq!(keys.verify(&t, 999).unwrap().sid, "ses_1");
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
        let other_claims = CookieClaims { sid: "ses_2".into(), owner: "alice".into(), exp: 1000 };
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
