//! Minting and verifying RS256 JWTs for one audience (`gshare-internal` for operators,
//! `gshare-api` for admins). Verification pins RS256, finds the key by `kid` (an unknown `kid`:
//! each key of the ring, bounded, as upstream), requires `aud`,
//! `exp` and `sub`, allows at most 60 s of clock skew, and remembers verified tokens (keyed by a
//! hash of the token, until `exp`) so a callback with an already-seen token costs no RSA work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::keys::{KeyError, KeyRingDir, KeyState, LoadedRing, SigningKey};
use crate::clock::Clock;

/// Clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_S: i64 = 60;
/// Longest token lifetime any command mints; retired keys stay this long before `keys prune`.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 86400);
/// Tokens longer than this are refused before any parsing (a 1 MB header is an attack, not a JWT).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
const CACHE_ENTRIES: u64 = 16_384;
/// Keys tried for a token whose `kid` is unknown (a ring holds the active key and a few retired).
pub const MAX_KID_FALLBACK: usize = 8;

pub const AUD_INTERNAL: &str = "gshare-internal";
pub const AUD_API: &str = "gshare-api";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("token is too long")]
    TooLong,
    #[error("not a JWT")]
    Malformed,
    #[error("token header has no kid")]
    MissingKid,
    #[error("token was signed by an unknown key (kid {0:?})")]
    UnknownKid(String),
    #[error("token algorithm is not RS256")]
    WrongAlgorithm,
    #[error("token signature is invalid")]
    BadSignature,
    #[error("token audience is not {0}")]
    WrongAudience(&'static str),
    #[error("token lacks the required claim {0}")]
    MissingClaim(String),
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token says it was issued in the future")]
    IssuedInFuture,
    #[error("token lives longer than any token this server issues")]
    LifetimeTooLong,
}

impl VerifyError {
    /// A fixed reason code: what may be stored or shown of a refusal (never the token's own
    /// text, such as the `kid` it claims, which anyone can write).
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLong => "too_long",
            Self::Malformed => "malformed",
            Self::MissingKid => "missing_kid",
            Self::UnknownKid(_) => "unknown_kid",
            Self::WrongAlgorithm => "wrong_algorithm",
            Self::BadSignature => "bad_signature",
            Self::WrongAudience(_) => "wrong_audience",
            Self::MissingClaim(_) => "missing_claim",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::IssuedInFuture => "issued_in_future",
            Self::LifetimeTooLong => "lifetime_too_long",
        }
    }
}

/// Claims of a verified token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub sub: String,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
}

#[derive(Serialize)]
struct MintClaims<'a> {
    iss: &'a str,
    aud: &'a str,
    sub: &'a str,
    iat: i64,
    nbf: i64,
    exp: i64,
    jti: String,
}

/// What `keys list` and the JWKS show about each key.
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub kid: String,
    pub created_at: Option<i64>,
    /// `active`, `retired` or `configured` (set by config, not on disk).
    pub state: String,
    pub retired_at: Option<i64>,
    pub bits: usize,
}

struct KeySet {
    fingerprint: String,
    signer: Option<(String, EncodingKey)>,
    verifiers: HashMap<String, DecodingKey>,
    jwks: Arc<[u8]>,
    listing: Vec<KeyInfo>,
}

/// Signs and verifies the tokens of one audience with one key ring.
pub struct TokenAuthority {
    audience: &'static str,
    ring: KeyRingDir,
    configured: Option<SigningKey>,
    keys: RwLock<Arc<KeySet>>,
    cache: moka::sync::Cache<[u8; 32], Arc<Claims>>,
    clock: Clock,
    validation: Validation,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
}

impl std::fmt::Debug for TokenAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthority")
            .field("audience", &self.audience)
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

struct UntilExp;

impl moka::Expiry<[u8; 32], Arc<Claims>> for UntilExp {
    fn expire_after_create(&self, _k: &[u8; 32], v: &Arc<Claims>, _now: std::time::Instant) -> Option<Duration> {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        Some(Duration::from_secs((v.exp + LEEWAY_S - now).clamp(0, MAX_TTL.as_secs() as i64) as u64))
    }
}

impl TokenAuthority {
    /// Opens the ring at `ring`; with no `configured` key, generates the first key if there is none.
    /// Returns the kid of a newly generated key, so the caller can log it.
    pub fn open(
        audience: &'static str,
        ring: KeyRingDir,
        configured: Option<SigningKey>,
        clock: Clock,
    ) -> Result<(Self, Option<String>), KeyError> {
        super::jwt_crypto::install();
        let (loaded, generated) =
            if configured.is_some() { (ring.load()?, None) } else { ring.load_or_init(clock.now())? };
        let mut validation = Validation::new(Algorithm::RS256);
        validation.algorithms = vec![Algorithm::RS256];
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        // exp/nbf are checked against our clock, below.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.leeway = 0;
        let keys = Self::build(&loaded, configured.as_ref())?;
        let authority = Self {
            audience,
            ring,
            configured,
            keys: RwLock::new(Arc::new(keys)),
            cache: moka::sync::Cache::builder().max_capacity(CACHE_ENTRIES).expire_after(UntilExp).build(),
            clock,
            validation,
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
        };
        Ok((authority, generated))
    }

    fn build(ring: &LoadedRing, configured: Option<&SigningKey>) -> Result<KeySet, KeyError> {
        let mut verifiers = HashMap::new();
        let mut listing = Vec::new();
        let mut jwks = Vec::new();
        let mut signer = None;
        let mut add = |key: &SigningKey, info: KeyInfo| -> Result<(), KeyError> {
            if verifiers.contains_key(key.kid()) {
                return Ok(());
            }
            let dk = DecodingKey::from_rsa_components(key.n_b64(), key.e_b64())
                .map_err(|e| KeyError::Invalid(e.to_string()))?;
            verifiers.insert(key.kid().to_string(), dk);
            jwks.push(key.public_jwk());
            listing.push(info);
            Ok(())
        };
        if let Some(k) = configured {
            signer = Some((k.kid().to_string(), encoding_key(k)?));
            add(
                k,
                KeyInfo {
                    kid: k.kid().into(),
                    created_at: None,
                    state: "configured".into(),
                    retired_at: None,
                    bits: k.bits(),
                },
            )?;
        }
        for (entry, key) in &ring.entries {
            if signer.is_none() && entry.state == KeyState::Active {
                signer = Some((key.kid().to_string(), encoding_key(key)?));
            }
            let state = match (entry.state, configured.is_some()) {
                (KeyState::Active, false) => "active",
                // With a configured key, the ring's former active key only verifies.
                (KeyState::Active, true) => "verify-only",
                (KeyState::Retired, _) => "retired",
            };
            add(
                key,
                KeyInfo {
                    kid: entry.kid.clone(),
                    created_at: Some(entry.created_at),
                    state: state.into(),
                    retired_at: entry.retired_at,
                    bits: key.bits(),
                },
            )?;
        }
        let jwks = serde_json::to_vec(&serde_json::json!({ "keys": jwks })).unwrap_or_default();
        Ok(KeySet { fingerprint: ring.fingerprint.clone(), signer, verifiers, jwks: jwks.into(), listing })
    }

    fn current(&self) -> Arc<KeySet> {
        match self.keys.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the ring if it changed on disk (`keys rotate`/`prune` from the CLI); forgets
    /// cached verifications when it does, so a pruned key stops verifying at once.
    pub fn reload_if_changed(&self) -> Result<bool, KeyError> {
        if self.ring.current_fingerprint() == self.current().fingerprint {
            return Ok(false);
        }
        let loaded = self.ring.load()?;
        let set = Self::build(&loaded, self.configured.as_ref())?;
        match self.keys.write() {
            Ok(mut g) => *g = Arc::new(set),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(set),
        }
        self.cache.invalidate_all();
        Ok(true)
    }

    pub fn audience(&self) -> &'static str {
        self.audience
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// kid of the key that signs new tokens.
    pub fn signing_kid(&self) -> Option<String> {
        self.current().signer.as_ref().map(|(kid, _)| kid.clone())
    }

    pub fn has_signer(&self) -> bool {
        self.current().signer.is_some()
    }

    pub fn keys(&self) -> Vec<KeyInfo> {
        self.current().listing.clone()
    }

    /// `{"keys":[…]}`: every key that may still verify, public parts only.
    pub fn jwks_json(&self) -> Arc<[u8]> {
        self.current().jwks.clone()
    }

    /// Signs a token for `sub`, valid for `ttl` (1 s ..= 30 d).
    pub fn mint(&self, sub: &str, ttl: Duration) -> Result<String, KeyError> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(KeyError::Invalid(format!(
                "ttl must be between 1s and {}",
                humantime::format_duration(MAX_TTL)
            )));
        }
        let keys = self.current();
        let Some((kid, key)) = keys.signer.as_ref() else {
            return Err(KeyError::Invalid("no signing key".into()));
        };
        let now = self.clock.now();
        let claims = MintClaims {
            iss: self.audience,
            aud: self.audience,
            sub,
            iat: now,
            nbf: now,
            exp: now + ttl.as_secs() as i64,
            jti: ulid::Ulid::new().to_string(),
        };
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.clone());
        jsonwebtoken::encode(&header, &claims, key).map_err(|e| KeyError::Invalid(e.to_string()))
    }

    /// Verifies a bearer token; cached when seen before and still valid.
    pub fn verify(&self, token: &str) -> Result<Arc<Claims>, VerifyError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(VerifyError::TooLong);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = self.clock.now();
        if let Some(claims) = self.cache.get(&digest) {
            if claims.exp + LEEWAY_S >= now {
                self.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(claims);
            }
            self.cache.invalidate(&digest);
            return Err(VerifyError::Expired);
        }
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
        let claims = Arc::new(self.verify_uncached(token, now)?);
        self.cache.insert(digest, claims.clone());
        Ok(claims)
    }

    /// The full check, with no cache (benchmarks compare the two).
    pub fn verify_uncached(&self, token: &str, now: i64) -> Result<Claims, VerifyError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(VerifyError::TooLong);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| VerifyError::Malformed)?;
        if header.alg != Algorithm::RS256 {
            return Err(VerifyError::WrongAlgorithm);
        }
        let kid = header.kid.ok_or(VerifyError::MissingKid)?;
        let keys = self.current();
        let decode = |key: &DecodingKey| {
            jsonwebtoken::decode::<Claims>(token, key, &self.validation).map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                match e.kind() {
                    K::InvalidSignature => VerifyError::BadSignature,
                    K::InvalidAlgorithm | K::InvalidAlgorithmName => VerifyError::WrongAlgorithm,
                    K::InvalidAudience => VerifyError::WrongAudience(self.audience),
                    K::MissingRequiredClaim(c) => VerifyError::MissingClaim(c.clone()),
                    K::ExpiredSignature => VerifyError::Expired,
                    K::ImmatureSignature => VerifyError::NotYetValid,
                    K::Json(_) => VerifyError::MissingClaim("sub/exp".into()),
                    _ => VerifyError::Malformed,
                }
            })
        };
        let data = match keys.verifiers.get(&kid) {
            Some(key) => decode(key)?,
            None => self.decode_by_any_key(&keys, &kid, decode)?,
        };
        let claims = data.claims;
        if claims.exp + LEEWAY_S < now {
            return Err(VerifyError::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now + LEEWAY_S) {
            return Err(VerifyError::NotYetValid);
        }
        // A future `iat` would outlive "sign out everywhere" (which refuses tokens issued before
        // it), and no token this server mints lives longer than MAX_TTL.
        if claims.iat.is_some_and(|iat| iat > now + LEEWAY_S) {
            return Err(VerifyError::IssuedInFuture);
        }
        if claims.exp > now + MAX_TTL.as_secs() as i64 + LEEWAY_S {
            return Err(VerifyError::LifetimeTooLong);
        }
        if claims.sub.is_empty() {
            return Err(VerifyError::MissingClaim("sub".into()));
        }
        Ok(claims)
    }

    /// A token whose `kid` names no key of the ring: each key is tried, the signing key first, at
    /// most [`MAX_KID_FALLBACK`] of them, as upstream's verifier does (python-jose's `jwt.decode`
    /// over the whole JWKS tries every key whatever the `kid`). A lab moved from upstream without
    /// `internal_jwt_kid` keeps its operators' tokens this way; the key that matched is logged
    /// (once per token: a verified token is remembered).
    fn decode_by_any_key(
        &self,
        keys: &KeySet,
        kid: &str,
        decode: impl Fn(&DecodingKey) -> Result<jsonwebtoken::TokenData<Claims>, VerifyError>,
    ) -> Result<jsonwebtoken::TokenData<Claims>, VerifyError> {
        let claimed: String = kid.chars().take(64).collect();
        let signing = keys.signer.as_ref().map(|(k, _)| k.as_str());
        let mut order: Vec<(&String, &DecodingKey)> = keys.verifiers.iter().collect();
        order.sort_by_key(|(k, _)| (Some(k.as_str()) != signing, k.as_str()));
        for (matched, key) in order.into_iter().take(MAX_KID_FALLBACK) {
            match decode(key) {
                Err(VerifyError::BadSignature) => continue,
                outcome => {
                    tracing::info!(audience = self.audience, claimed_kid = %claimed, matched_kid = %matched,
                        "a token named an unknown kid; its signature matched another key of the ring");
                    return outcome;
                }
            }
        }
        Err(VerifyError::UnknownKid(claimed))
    }

    /// (hits, misses) of the verified-token cache.
    pub fn cache_stats(&self) -> (u64, u64) {
        (self.cache_hits.load(Ordering::Relaxed), self.cache_misses.load(Ordering::Relaxed))
    }
}

fn encoding_key(k: &SigningKey) -> Result<EncodingKey, KeyError> {
    EncodingKey::from_rsa_pem(k.private_pem().expose().as_bytes()).map_err(|e| KeyError::Invalid(e.to_string()))
}

/// Parses a TTL such as `24h`, `7d` or `90m`, refusing zero, negatives and more than 30 days.
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("ttl `{t}` is negative"));
    }
    let d = humantime::parse_duration(t).map_err(|e| format!("ttl `{t}` is not a duration like 24h or 7d: {e}"))?;
    if d < Duration::from_secs(1) {
        return Err(format!("ttl `{t}` is zero"));
    }
    if d > MAX_TTL {
        return Err(format!("ttl `{t}` is longer than the 30d maximum"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    fn authority() -> (tempfile::TempDir, TokenAuthority) {
        let tmp = tempfile::tempdir().unwrap();
        let (a, generated) =
            TokenAuthority::open(AUD_INTERNAL, KeyRingDir::new(tmp.path().join("keys")), None, Clock::system())
                .unwrap();
        assert!(generated.is_some());
        (tmp, a)
    }

    fn b64(v: &serde_json::Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    }

    fn claims_now(a: &TokenAuthority) -> serde_json::Value {
        let now = a.clock().now();
        serde_json::json!({"iss":"gshare-internal","aud":"gshare-internal","sub":"operator:clu_local","iat":now,"nbf":now,"exp":now+300})
    }

    /// Signs arbitrary claims with the authority's own key (for attack cases that need a valid signature).
    fn sign_raw(a: &TokenAuthority, kid: Option<&str>, claims: &serde_json::Value) -> String {
        let keys = a.current();
        let (signing_kid, key) = keys.signer.as_ref().unwrap();
        let mut h = Header::new(Algorithm::RS256);
        h.kid = kid.map(str::to_string).or(Some(signing_kid.clone()));
        if kid == Some("") {
            h.kid = None;
        }
        jsonwebtoken::encode(&h, claims, key).unwrap()
    }

    #[test]
    fn mint_then_verify_and_cache() {
        let (_t, a) = authority();
        let tok = a.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
        let c = a.verify(&tok).unwrap();
        assert_eq!(c.sub, "operator:clu_local");
        assert_eq!(c.exp - c.iat.unwrap(), 600);
        assert!(c.jti.is_some());
        assert_eq!(a.cache_stats(), (0, 1));
        a.verify(&tok).unwrap();
        assert_eq!(a.cache_stats(), (1, 1));
    }

    #[test]
    fn alg_none_is_refused() {
        let (_t, a) = authority();
        let kid = a.signing_kid().unwrap();
        let tok =
            format!("{}.{}.", b64(&serde_json::json!({"alg":"none","typ":"JWT","kid":kid})), b64(&claims_now(&a)));
        assert!(a.verify(&tok).is_err());
    }

    #[test]
    fn hs256_with_public_key_bytes_is_refused() {
        let (_t, a) = authority();
        let kid = a.signing_kid().unwrap();
        let (entry_key,) = {
            let ring = a.ring.load().unwrap();
            (ring.entries[0].1.clone(),)
        };
        let public_pem = entry_key.public_pem().unwrap();
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some(kid);
        let tok = jsonwebtoken::encode(&h, &claims_now(&a), &EncodingKey::from_secret(public_pem.as_bytes()).unwrap())
            .unwrap();
        assert_eq!(a.verify(&tok), Err(VerifyError::WrongAlgorithm));
    }

    #[test]
    fn wrong_audience_expired_future_kid_cases() {
        let (_t, a) = authority();
        let now = a.clock().now();
        let mut c = claims_now(&a);
        c["aud"] = "gshare-api".into();
        assert_eq!(a.verify(&sign_raw(&a, None, &c)), Err(VerifyError::WrongAudience(AUD_INTERNAL)));

        let mut c = claims_now(&a);
        c["exp"] = (now - LEEWAY_S - 1).into();
        assert_eq!(a.verify(&sign_raw(&a, None, &c)), Err(VerifyError::Expired));
        // Within the leeway it still passes.
        let mut c = claims_now(&a);
        c["exp"] = (now - 30).into();
        assert!(a.verify(&sign_raw(&a, None, &c)).is_ok());

        let mut c = claims_now(&a);
        c["nbf"] = (now + LEEWAY_S + 10).into();
        assert_eq!(a.verify(&sign_raw(&a, None, &c)), Err(VerifyError::NotYetValid));

        // An unknown kid: the ring's keys are tried (upstream's verifier ignores the kid), so a
        // token of this key under another name passes and one of a foreign key does not.
        assert_eq!(a.verify(&sign_raw(&a, Some("nope"), &claims_now(&a))).unwrap().sub, "operator:clu_local");
        let (_t2, foreign) = authority();
        assert!(matches!(
            a.verify(&sign_raw(&foreign, Some("nope"), &claims_now(&a))),
            Err(VerifyError::UnknownKid(_))
        ));
        // … and what the matching key says about the claims still holds.
        let mut c = claims_now(&a);
        c["exp"] = (now - LEEWAY_S - 1).into();
        assert_eq!(a.verify(&sign_raw(&a, Some("internal"), &c)), Err(VerifyError::Expired));

        // Issued in the future (it would survive sign-out-everywhere), or living past MAX_TTL.
        let mut c = claims_now(&a);
        c["iat"] = (now + LEEWAY_S + 10).into();
        assert_eq!(a.verify(&sign_raw(&a, None, &c)), Err(VerifyError::IssuedInFuture));
        let mut c = claims_now(&a);
        // Well past the bound (the test's `now` may be a second behind the verifier's).
        c["exp"] = (a.clock().now() + MAX_TTL.as_secs() as i64 + LEEWAY_S + 30).into();
        assert_eq!(a.verify(&sign_raw(&a, None, &c)), Err(VerifyError::LifetimeTooLong));
        let mut c = claims_now(&a);
        c["exp"] = (a.clock().now() + MAX_TTL.as_secs() as i64).into();
        assert!(a.verify(&sign_raw(&a, None, &c)).is_ok(), "the longest TTL itself passes");
        assert_eq!(a.verify(&sign_raw(&a, Some(""), &claims_now(&a))), Err(VerifyError::MissingKid));

        for missing in ["aud", "exp", "sub"] {
            let mut c = claims_now(&a);
            c.as_object_mut().unwrap().remove(missing);
            assert!(a.verify(&sign_raw(&a, None, &c)).is_err(), "missing {missing} accepted");
        }
    }

    #[test]
    fn tampered_payload_and_garbage() {
        let (_t, a) = authority();
        let tok = a.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
        let parts: Vec<&str> = tok.split('.').collect();
        let mut c = claims_now(&a);
        c["sub"] = "operator:clu_01HZZZZZZZZZZZZZZZZZZZZZZZ".into();
        let forged = format!("{}.{}.{}", parts[0], b64(&c), parts[2]);
        assert_eq!(a.verify(&forged), Err(VerifyError::BadSignature));
        assert_eq!(a.verify("not a jwt"), Err(VerifyError::Malformed));
        assert_eq!(a.verify(""), Err(VerifyError::Malformed));
        assert_eq!(a.verify(&"a".repeat(1 << 20)), Err(VerifyError::TooLong));
    }

    #[test]
    fn expired_after_caching_is_refused() {
        let (_t, a) = authority();
        let tok = a.mint("operator:clu_local", Duration::from_secs(120)).unwrap();
        a.verify(&tok).unwrap();
        a.clock().advance(Duration::from_secs(120 + LEEWAY_S as u64 + 1));
        assert_eq!(a.verify(&tok), Err(VerifyError::Expired));
    }

    #[test]
    fn rotation_keeps_old_tokens_and_prune_kills_them() {
        let (tmp, a) = authority();
        let old = a.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
        a.verify(&old).unwrap();
        let ring = KeyRingDir::new(tmp.path().join("keys"));
        let now = a.clock().now();
        ring.rotate(now).unwrap();
        assert!(a.reload_if_changed().unwrap());
        assert!(!a.reload_if_changed().unwrap());
        let new = a.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
        assert_ne!(jsonwebtoken::decode_header(&new).unwrap().kid, jsonwebtoken::decode_header(&old).unwrap().kid);
        a.verify(&old).unwrap();
        a.verify(&new).unwrap();
        let jwks: serde_json::Value = serde_json::from_slice(&a.jwks_json()).unwrap();
        assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);

        ring.prune(now + MAX_TTL.as_secs() as i64 + 1, MAX_TTL.as_secs() as i64).unwrap();
        a.reload_if_changed().unwrap();
        assert!(matches!(a.verify(&old), Err(VerifyError::UnknownKid(_))));
        a.verify(&new).unwrap();
    }

    #[test]
    fn ttl_parsing() {
        assert_eq!(parse_ttl("7d").unwrap(), Duration::from_secs(7 * 86400));
        assert_eq!(parse_ttl("24h").unwrap(), Duration::from_secs(86400));
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("0").is_err());
        assert!(parse_ttl("-1d").is_err());
        assert!(parse_ttl("999d").is_err());
        assert!(parse_ttl("31d").is_err());
        assert!(parse_ttl("soon").is_err());
    }
}
