//! Request guards: `AdminCaller` for `/api/v1` (an admin JWT, `aud=gshare-api`) and
//! `OperatorCaller` for `/internal` (an internal JWT, `aud=gshare-internal`,
//! `sub=operator:<cluster_id>`). Each refuses the other's tokens.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::tokens::VerifyError;
use crate::App;
use crate::clusters::ClusterId;
use crate::http::error::ApiError;
use crate::http::extract::bearer_token;

/// Subject prefix of admin tokens: `admin:<username>`.
pub const ADMIN_PREFIX: &str = "admin:";
/// Subject prefix of operator tokens: `operator:<cluster_id>`.
pub const OPERATOR_PREFIX: &str = "operator:";

/// An authenticated administrator.
#[derive(Debug, Clone)]
pub struct AdminCaller {
    pub username: String,
    /// The token's `jti`, for the audit log.
    pub token_id: Option<String>,
}

impl AdminCaller {
    /// `admin:<name>`, the actor recorded in audit entries.
    pub fn actor(&self) -> String {
        format!("{ADMIN_PREFIX}{}", self.username)
    }
}

fn unauthenticated(e: &VerifyError) -> ApiError {
    ApiError::unauthenticated(format!("invalid bearer token: {e}"))
}

impl FromRequestParts<Arc<App>> for AdminCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Self::Rejection> {
        let Some(token) = bearer_token(&parts.headers) else {
            return Err(ApiError::unauthenticated("an admin token is required (Authorization: Bearer …)"));
        };
        match app.auth.api.verify(&token) {
            Ok(claims) => {
                let username = claims.sub.strip_prefix(ADMIN_PREFIX).unwrap_or_default();
                if username.is_empty() {
                    return Err(ApiError::forbidden("this token is not an admin token"));
                }
                Ok(AdminCaller { username: username.to_string(), token_id: claims.jti.clone() })
            }
            Err(e) => {
                if app.auth.internal.verify(&token).is_ok() {
                    return Err(ApiError::forbidden("operator tokens cannot call the admin API"));
                }
                Err(unauthenticated(&e))
            }
        }
    }
}

/// An authenticated cluster operator.
#[derive(Debug, Clone)]
pub struct OperatorCaller {
    pub cluster_id: ClusterId,
}

impl FromRequestParts<Arc<App>> for OperatorCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Self::Rejection> {
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
                Ok(OperatorCaller { cluster_id: id })
            }
            Err(e) => {
                if app.auth.api.verify(&token).is_ok() {
                    return Err(ApiError::forbidden("admin tokens cannot call /internal"));
                }
                Err(unauthenticated(&e))
            }
        }
    }
}
