//! The one error type at the HTTP edge. Every failure leaves as
//! `{"error":{"code","message","details","request_id"}}` with a stable, greppable `code`.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

pub use super::error_code::ErrorCode;

tokio::task_local! {
    /// The id of the request being served (set by the request-context middleware): the
    /// `X-Request-Id` it answers with.
    pub static REQUEST_ID: RequestId;
}

/// The current request's id, or `""` outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID.try_with(|id| id.as_str().to_string()).unwrap_or_default()
}

/// A request's id: a ULID, or a client's own id when it is a plain token (1–64 of
/// `A-Za-z0-9-_.:`). Held inline and copied, not shared: setting it for a request writes no
/// count another core reads.
#[derive(Clone, Copy)]
pub struct RequestId {
    len: u8,
    text: [u8; RequestId::MAX],
}

impl RequestId {
    /// The longest id a client may send.
    pub const MAX: usize = 64;

    /// `text` if it is a plain token, else `None`.
    pub fn new(text: &[u8]) -> Option<Self> {
        let plain = !text.is_empty()
            && text.len() <= Self::MAX
            && text.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':'));
        if !plain {
            return None;
        }
        let mut id = Self { len: text.len() as u8, text: [0; Self::MAX] };
        id.text[..text.len()].copy_from_slice(text);
        Some(id)
    }

    /// A new ULID.
    pub fn generate() -> Self {
        let mut text = [0u8; ulid::ULID_LEN];
        let id = ulid::Ulid::new();
        // Crockford base 32: always a plain token.
        Self::new(id.array_to_str(&mut text).as_bytes()).unwrap_or(Self { len: 1, text: [b'-'; Self::MAX] })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or_default()
    }

    /// As the `X-Request-Id` header's value.
    pub fn header_value(&self) -> HeaderValue {
        HeaderValue::from_str(self.as_str()).unwrap_or(HeaderValue::from_static("-"))
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `1 session`, `2 sessions`: counts in messages people read.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `unauthenticated`, `validation_failed`, `probe_failed`.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// Structured context (field errors, probe checks, conflicting names…); `{}` when none.
    #[schema(value_type = Object)]
    pub details: Value,
    /// Echoed in the `X-Request-Id` response header and in the server log.
    pub request_id: String,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub details: Value,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: Value::Object(Default::default()), headers: Vec::new() }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, message)
            .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, ErrorCode::Conflict, message)
    }
    /// 422 with `details.errors[{loc,msg,type}]`, the shape upstream's clients expect.
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let message = match errors.first() {
            Some(e) => format!(
                "{}: {}",
                e.loc.iter().map(|l| l.to_string().trim_matches('"').to_string()).collect::<Vec<_>>().join("."),
                e.msg
            ),
            None => "request is invalid".to_string(),
        };
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::ValidationFailed, message)
            .with_details(serde_json::json!({ "errors": errors }))
    }
    pub fn field(loc: &[&str], msg: impl Into<String>, kind: &str) -> Self {
        Self::validation(vec![FieldError::new(loc, msg, kind)])
    }
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {limit} bytes"),
        )
        .with_details(serde_json::json!({ "limit_bytes": limit }))
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable, message)
    }
    /// A server-side failure: the cause is logged with the request id; the client gets no internals.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(request_id = %current_request_id(), error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; the server log has details under this request id",
        )
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message.clone(),
                details: self.details.clone(),
                request_id: current_request_id(),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut res =
            (self.status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
        for (k, v) in self.headers {
            res.headers_mut().insert(k, v);
        }
        res
    }
}

/// One field-level validation problem: `loc` is the path (`["body","role"]`), `type` a short kind.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldError {
    #[schema(value_type = Vec<String>)]
    pub loc: Vec<Value>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
}

impl FieldError {
    pub fn new(loc: &[&str], msg: impl Into<String>, kind: &str) -> Self {
        Self {
            loc: loc.iter().map(|s| Value::String(s.to_string())).collect(),
            msg: msg.into(),
            kind: kind.to_string(),
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match &e {
            // A full disk: the client may retry once the admin frees space; reads go on.
            StoreError::NotWritable { dir, avail_bytes, full: true, .. } => {
                Self::new(StatusCode::INSUFFICIENT_STORAGE, ErrorCode::StorageFull, e.to_string()).with_details(
                    serde_json::json!({ "data_dir": dir.display().to_string(), "avail_bytes": avail_bytes }),
                )
            }
            StoreError::NotWritable { .. } => {
                tracing::error!(request_id = %current_request_id(), error = %e, "write refused");
                Self::unavailable("the state store cannot write now; reads go on (the server log has the cause)")
            }
            _ => ApiError::internal(e),
        }
    }
}

/// Maps a status (from a layer that produced no JSON, e.g. a 405 or a timeout) to our envelope.
pub fn from_status(status: StatusCode) -> ApiError {
    let (code, message) = match status {
        StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => (ErrorCode::MethodNotAllowed, "method not allowed on this route"),
        StatusCode::PAYLOAD_TOO_LARGE => (ErrorCode::PayloadTooLarge, "request body is too large"),
        StatusCode::REQUEST_TIMEOUT => (ErrorCode::Timeout, "the request took too long"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (ErrorCode::HeadersTooLarge, "request headers are too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (ErrorCode::UnsupportedMediaType, "unsupported content type"),
        StatusCode::TOO_MANY_REQUESTS => (ErrorCode::RateLimited, "too many requests"),
        s if s.is_server_error() => {
            (ErrorCode::Internal, "internal error; the server log has details under this request id")
        }
        _ => (ErrorCode::BadRequest, "request refused"),
    };
    ApiError::new(status, code, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    async fn render(e: ApiError) -> (StatusCode, Value) {
        let res = REQUEST_ID.scope(RequestId::new(b"req-1").unwrap(), async move { e.into_response() }).await;
        let status = res.status();
        let body = to_bytes(res.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_constructor_maps_to_its_status_and_code() {
        let cases = [
            (ApiError::bad_request("x"), 400, "bad_request"),
            (ApiError::unauthenticated("x"), 401, "unauthenticated"),
            (ApiError::forbidden("x"), 403, "forbidden"),
            (ApiError::not_found("x"), 404, "not_found"),
            (ApiError::conflict("x"), 409, "conflict"),
            (ApiError::field(&["body", "role"], "bad", "enum"), 422, "validation_failed"),
            (ApiError::payload_too_large(10), 413, "payload_too_large"),
            (ApiError::unavailable("x"), 503, "unavailable"),
            (ApiError::internal("secret cause"), 500, "internal"),
            (from_status(StatusCode::METHOD_NOT_ALLOWED), 405, "method_not_allowed"),
        ];
        for (err, status, code) in cases {
            let (s, body) = render(err).await;
            assert_eq!(s.as_u16(), status);
            assert_eq!(body["error"]["code"], code);
            assert_eq!(body["error"]["request_id"], "req-1");
            assert!(body["error"]["details"].is_object());
            assert!(!body.to_string().contains("secret cause"));
        }
    }

    #[tokio::test]
    async fn validation_errors_carry_loc_msg_type() {
        let (_, body) = render(ApiError::field(&["body", "role"], "must be primary or standby", "enum")).await;
        assert_eq!(body["error"]["details"]["errors"][0]["loc"], serde_json::json!(["body", "role"]));
        assert_eq!(body["error"]["details"]["errors"][0]["type"], "enum");
        assert_eq!(body["error"]["message"], "body.role: must be primary or standby");
    }
}
