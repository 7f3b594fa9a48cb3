//! Extractors that answer in our error envelope instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ErrorCode, FieldError};

/// Largest JSON body any route takes unless it says otherwise.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// A JSON body, parsed whatever the `Content-Type` says (the seed's `curl -d` sends
/// `application/x-www-form-urlencoded`). Syntax errors are 400; shape errors are 422 with
/// `details.errors[{loc,msg,type}]`; bodies over 1 MiB are 413.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(MAX_JSON_BODY)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {rejection}"))
            }
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parses JSON into `T` with the error shapes described on [`ApiJson`].
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::field(&["body"], "a JSON body is required", "missing"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                ErrorCode::InvalidJson,
                format!("the body is not valid JSON: {inner}"),
            );
        }
        let mut loc = vec!["body".to_string()];
        loc.extend(e.path().to_string().split('.').filter(|s| !s.is_empty() && *s != "?").map(str::to_string));
        let msg = inner.to_string();
        let kind = if msg.starts_with("missing field") {
            "missing"
        } else if msg.starts_with("unknown field") {
            "extra_forbidden"
        } else if msg.starts_with("unknown variant") {
            "enum"
        } else {
            "type_error"
        };
        // serde names the missing/unknown field in the message; put it in loc like upstream does.
        if let Some(name) = msg.split('`').nth(1).filter(|_| kind == "missing" || kind == "extra_forbidden") {
            loc.push(name.to_string());
        }
        let loc: Vec<&str> = loc.iter().map(String::as_str).collect();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        ApiError::validation(vec![FieldError::new(&loc, msg, kind)])
    })
}

/// Query parameters parsed into `T`, refused in our envelope: 422 `validation_failed` with
/// `loc: ["query", <parameter>]` naming the parameter serde names (a parameter given twice, an
/// unknown one where `T` denies them, a value of the wrong type), `["query"]` otherwise; never
/// axum's plain-text 400.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(q)| ApiQuery(q))
            .map_err(|rejection| query_error(&rejection.body_text()))
    }
}

/// The error of a query string `T` cannot be read from (axum's rejection text: "Failed to
/// deserialize query string: duplicate field `limit`", or with the parameter's path first:
/// "…: other: unknown field `other`, expected `limit`").
fn query_error(text: &str) -> ApiError {
    let cause = text.split_once(": ").map_or(text, |(_, rest)| rest);
    let is_name = |n: &&str| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let (path, cause) = match cause.split_once(": ") {
        Some((path, rest)) if is_name(&path) => (Some(path), rest),
        _ => (None, cause),
    };
    let named = path.or_else(|| cause.split('`').nth(1).filter(is_name));
    let (msg, kind) = if cause.starts_with("duplicate field") {
        ("given more than once; give it once".to_string(), "duplicate")
    } else if cause.starts_with("unknown field") {
        ("not a parameter of this route".to_string(), "extra_forbidden")
    } else {
        (format!("cannot be read: {cause}"), "query")
    };
    match named {
        Some(name) => ApiError::field(&["query", name], msg, kind),
        None => ApiError::field(&["query"], format!("the query string cannot be read: {cause}"), "query"),
    }
}

/// The bearer token of the `Authorization` header, if any.
pub struct Bearer(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Bearer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Bearer(bearer_token(&parts.headers)))
    }
}

/// `Authorization: Bearer <token>` (scheme case-insensitive), trimmed.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// A positive integer query parameter (`page`, `size`): absent -> `default`; otherwise it must
/// be 1..=`max`, else 422 naming the parameter.
pub fn query_number(name: &'static str, v: Option<String>, default: u64, max: u64) -> Result<u64, ApiError> {
    match v {
        None => Ok(default),
        Some(s) => s.parse::<u64>().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
            ApiError::field(&["query", name], format!("must be an integer between 1 and {max}"), "value_error")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        count: u32,
    }

    #[test]
    fn json_error_shapes() {
        let e = parse_json::<Body>(b"{nope").unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        let e = parse_json::<Body>(b"{\"name\":\"a\"}").unwrap_err();
        assert_eq!(e.status.as_u16(), 422);
        assert_eq!(e.details["errors"][0]["loc"], serde_json::json!(["body", "count"]));
        assert_eq!(e.details["errors"][0]["type"], "missing");
        let e = parse_json::<Body>(b"{\"name\":\"a\",\"count\":-1}").unwrap_err();
        assert_eq!(e.details["errors"][0]["loc"], serde_json::json!(["body", "count"]));
        let e = parse_json::<Body>(b"{\"name\":\"a\",\"count\":1,\"x\":1}").unwrap_err();
        assert_eq!(e.details["errors"][0]["type"], "extra_forbidden", "{}", e.details);
        let e = parse_json::<Body>(b"  ").unwrap_err();
        assert_eq!(e.status.as_u16(), 422);
    }

    #[test]
    fn a_query_refusal_names_its_parameter() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Params {
            limit: Option<String>,
        }
        let parse = |q: &str| {
            let uri: axum::http::Uri = format!("/x?{q}").parse().unwrap();
            axum::extract::Query::<Params>::try_from_uri(&uri).map(drop).map_err(|r| query_error(&r.body_text()))
        };
        assert!(parse("limit=1").is_ok());
        let e = parse("limit=1&limit=2").unwrap_err();
        assert_eq!(e.status.as_u16(), 422);
        assert_eq!(e.details["errors"][0]["loc"], serde_json::json!(["query", "limit"]));
        assert_eq!(e.details["errors"][0]["type"], "duplicate");
        let e = parse("other=1").unwrap_err();
        assert_eq!(e.details["errors"][0]["loc"], serde_json::json!(["query", "other"]));
        assert_eq!(e.details["errors"][0]["type"], "extra_forbidden", "{}", e.details);
    }

    #[test]
    fn bearer_parsing() {
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "bearer  abc ".parse().unwrap());
        assert_eq!(bearer_token(&h).as_deref(), Some("abc"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }
}
