//! Public key publication: `GET /.well-known/gshare-internal-jwks.json`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;

pub fn routes() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(jwks))
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
async fn jwks(State(app): State<Arc<App>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300")),
        ],
        app.auth.internal.jwks_json().to_vec(),
    )
        .into_response()
}
