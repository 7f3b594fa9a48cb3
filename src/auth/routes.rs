//! Public key publication: `GET /.well-known/gshare-internal-jwks.json`; and
//! `POST /api/v1/keys/rotate` (what `gshare keys rotate` asks a running server: in force at once,
//! audited).

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::AuthState;
use super::guard::AdminCaller;
use super::guard::Gate;
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    AuthState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new().routes(routes!(D: jwks)).routes(routes!(D: rotate_keys))
}

/// The internal signing key made by a rotation.
#[derive(Serialize, ToSchema)]
pub struct Rotated {
    pub kid: String,
}

/// Make a new internal signing key, in force at once; tokens signed by older keys keep verifying
/// until `gshare keys prune`.
#[utoipa::path(post, path = "/api/v1/keys/rotate", tag = "auth",
    responses(
        (status = 201, body = Rotated),
        (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the signing key is set by configuration")))]
async fn rotate_keys(
    State(app): State<AuthState>,
    caller: AdminCaller,
    meta: RequestMeta,
) -> Result<(StatusCode, axum::Json<Rotated>), ApiError> {
    if app.config.internal_jwt_private_key.is_some() {
        return Err(ApiError::conflict(
            "the signing key is set by configuration (internal_jwt_private_key / GSHARE_INTERNAL_JWT_PRIVATE_KEY); \
             change it there",
        ));
    }
    let (ring, auth, now) = (super::internal_ring(&app.config), app.auth.clone(), app.clock.now());
    let rotated = tokio::task::spawn_blocking(move || {
        let entry = ring.rotate(now)?;
        auth.internal.reload_if_changed()?;
        Ok::<_, super::keys::KeyError>(entry)
    })
    .await
    .map_err(ApiError::internal)?;
    let result = if rotated.is_ok() { AuditResult::Success } else { AuditResult::Failure };
    let mut entry = AuditEntry::new(&meta, caller.actor(), "keys.rotate", result);
    if let Ok(e) = &rotated {
        entry = entry.target(e.kid.clone());
    }
    crate::audit::record(&app.audit, entry).await;
    let kid = rotated.map_err(ApiError::internal)?.kid;
    Ok((StatusCode::CREATED, axum::Json(Rotated { kid })))
}

/// One RSA public key (RFC 7517); never any private member.
#[derive(Serialize, ToSchema)]
pub struct Jwk {
    pub kty: String,
    pub n: String,
    pub e: String,
    pub kid: String,
    #[serde(rename = "use")]
    pub use_: String,
    pub alg: String,
}

#[derive(Serialize, ToSchema)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// The keys that verify operator tokens: the signing key and every older key not yet pruned.
#[utoipa::path(get, path = "/.well-known/gshare-internal-jwks.json", tag = "auth",
    responses((status = 200, body = Jwks, description = "cached by clients for 300 s")))]
async fn jwks(State(app): State<AuthState>) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300")),
        ],
        app.auth.internal.jwks_json().to_vec(),
    )
        .into_response()
}
