//! Who may call what: the internal JWT that operators present on `/internal/*`, the admin JWT on
//! `/api/v1`, the key rings behind both, and the JWKS that publishes the internal keys.

pub mod account_routes;
pub mod accounts;
pub mod cookies;
pub mod directory;
pub mod guard;
pub mod hash_pool;
pub mod invites;
pub mod jwt_crypto;
pub mod keys;
pub mod login;
pub mod offline;
pub mod oidc_routes;
pub mod routes;
pub mod throttle;
pub mod tokens;
pub mod user_routes;

use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use crate::config::Config;
use keys::{KeyError, KeyRingDir, SigningKey};
use tokens::{AUD_API, AUD_INTERNAL, TokenAuthority};

/// What the sign-in and account handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct AuthState {
    pub config: Arc<Config>,
    pub store: crate::store::Store,
    pub auth: Authorities,
    pub clock: Clock,
    pub signin: Arc<login::SignIn>,
    pub audit: Arc<crate::audit::AuditLog>,
}

/// Told of each operator token the guard refuses (its text and why): the operator domain,
/// above this one, keeps the last reason per claimed cluster for the cluster's operator view.
pub type RejectionHook = Arc<dyn Fn(&str, &tokens::VerifyError) + Send + Sync>;

/// The two token authorities a server (or an offline CLI command) works with.
#[derive(Clone)]
pub struct Authorities {
    /// Operator callbacks: `aud=gshare-internal`, `sub=operator:<cluster_id>`.
    pub internal: Arc<TokenAuthority>,
    /// Admin API: `aud=gshare-api`, `sub=admin:<username>`, its own key ring.
    pub api: Arc<TokenAuthority>,
    /// Set once by the composition root ([`Authorities::report_rejections_to`]).
    rejections: Arc<OnceLock<RejectionHook>>,
}

impl std::fmt::Debug for Authorities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorities").field("internal", &self.internal).field("api", &self.api).finish_non_exhaustive()
    }
}

impl Authorities {
    /// The server's: opens the key rings under `<data_dir>/keys/`, creating them on first use.
    /// Returns the kids of keys generated now, for the caller to log. The command line never
    /// calls this (a key ring made there would sign tokens the server rejects): it opens the
    /// existing rings through [`offline::existing_internal`] and [`offline::existing_api`].
    pub fn open(config: &Config, clock: Clock) -> Result<(Self, Vec<String>), KeyError> {
        keys::create_private_dir(&config.keys_dir())?;
        let configured = configured_internal_key(config)?;
        let (internal, generated) =
            TokenAuthority::open(AUD_INTERNAL, internal_ring(config), configured, clock.clone())?;
        let (api, generated_api) = TokenAuthority::open(AUD_API, api_ring(config), None, clock)?;
        Ok((
            Self { internal: Arc::new(internal), api: Arc::new(api), rejections: Default::default() },
            generated.into_iter().chain(generated_api).collect(),
        ))
    }
}

impl Authorities {
    /// Where refused operator tokens are reported (the first call wins; the server makes one).
    pub fn report_rejections_to(&self, hook: RejectionHook) {
        let _ = self.rejections.set(hook);
    }

    /// The guard refused an operator token.
    pub fn rejected(&self, token: &str, error: &tokens::VerifyError) {
        if let Some(hook) = self.rejections.get() {
            hook(token, error);
        }
    }
}

/// The internal signing key set by configuration (`internal_jwt_private_key`), if any: the one
/// place its PEM is parsed into a key (`config` only checks it at load).
pub fn configured_internal_key(config: &Config) -> Result<Option<SigningKey>, KeyError> {
    config
        .internal_jwt_private_key
        .as_ref()
        .map(|pem| SigningKey::from_pem(pem.expose(), config.internal_jwt_kid.as_deref()))
        .transpose()
}

/// The ring of internal (operator) signing keys.
pub fn internal_ring(config: &Config) -> KeyRingDir {
    KeyRingDir::new(config.keys_dir().join("internal"))
}

/// The ring of admin-API signing keys (never published: only this server verifies them).
pub fn api_ring(config: &Config) -> KeyRingDir {
    KeyRingDir::new(config.keys_dir().join("api"))
}
