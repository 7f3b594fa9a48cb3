//! Per-request plumbing: a request id (echoed as `X-Request-Id`, used in logs and error bodies),
//! a cap on total header size, an access log line, a last pass that turns any bodiless
//! error from a lower layer (404, 405, 413, timeouts) into our JSON envelope, and the security
//! headers.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::body::BodyWatch;
use super::error::{ApiError, ErrorCode, REQUEST_ID, RequestId, from_status};
use super::server::ReserveConnection;

pub const REQUEST_ID_HEADER: axum::http::HeaderName = axum::http::HeaderName::from_static("x-request-id");

/// A response extension for answers passed on from elsewhere (a session app's, through the
/// `/proxy/` relay): they keep their own status, body and headers. No JSON envelope replaces a
/// relayed error page and no console header (CSP, frame options) is added to an app's answer.
#[derive(Clone, Copy, Debug)]
pub struct PassedThrough;
/// A response extension: an HTTP/1 connection closes after this answer.
#[derive(Clone, Copy, Debug)]
struct CloseConnection;

/// Total bytes of request headers accepted (a 1 MB `Authorization` header gets a clean 431).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The client's `X-Request-Id` when it is a plain token (see [`RequestId`]), else a new ULID.
fn request_id_from(req: &Request) -> RequestId {
    req.headers().get(REQUEST_ID_HEADER).and_then(|v| RequestId::new(v.as_bytes())).unwrap_or_else(RequestId::generate)
}

/// The per-request pass every route shares (one layer, not one per concern: each layer costs a
/// service clone and a boxed future on every request): request id, header cap, JSON envelope for
/// bodiless errors, access log, and [`security_headers`].
pub async fn request_context(req: Request, next: Next) -> Response {
    let reserve = req.extensions().get::<ReserveConnection>().is_some();
    with_context(req, reserve, |req| next.run(req)).await
}

/// [`request_context`] around any inner service: the axum layer's `Next`, or the relay, which
/// the listeners call directly (`server::Routes`: no router, layer clones or boxed futures).
/// `reserve`: the request came on a reserve connection (health probes only).
pub async fn with_context<F, Fut>(req: Request, reserve: bool, inner: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let id = request_id_from(&req);
    let method = req.method().clone();
    // A cheap handle (the URI's bytes are shared), read only if the line is logged.
    let uri = req.uri().clone();
    let started = Instant::now();
    let header_bytes: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    let body_watch = req.extensions().get::<std::sync::Arc<BodyWatch>>().cloned();
    let http1 = req.version() <= axum::http::Version::HTTP_11;
    let response = REQUEST_ID
        .scope(id, async move {
            if let Some(refused) = refused_head(&req, header_bytes, reserve) {
                return refused;
            }
            let res = inner(req).await;
            if let Some(refusal) = body_watch.as_ref().and_then(|w| w.refusal()) {
                return body_refused(refusal);
            }
            let error = res.status().is_client_error() || res.status().is_server_error();
            if error && res.extensions().get::<PassedThrough>().is_none() {
                return enveloped(res);
            }
            res
        })
        .await;
    let mut response = response;
    if http1 && response.extensions().get::<CloseConnection>().is_some() {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    security_headers(&mut response);
    access_log(&id, &method, &uri, response.status(), started);
    response.headers_mut().insert(REQUEST_ID_HEADER, id.header_value());
    response
}

// What follows is out of the usual request's way (`#[cold]`, or not inlined): the less code every
// request passes, the fewer instruction cache misses it pays.

/// A refusal for the request's head: over the header cap, two `Host`s, or a reserve connection
/// asking for anything but health.
fn refused_head(req: &Request, header_bytes: usize, reserve: bool) -> Option<Response> {
    if header_bytes > MAX_HEADER_BYTES {
        return Some(headers_too_large());
    }
    if req.headers().get_all(header::HOST).iter().nth(1).is_some() {
        return Some(two_hosts());
    }
    if reserve && !matches!(req.uri().path(), "/healthz" | "/readyz") {
        return Some(reserve_busy());
    }
    None
}

#[cold]
fn headers_too_large() -> Response {
    ApiError::new(
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ErrorCode::HeadersTooLarge,
        format!("request headers exceed {MAX_HEADER_BYTES} bytes"),
    )
    .into_response()
}

#[cold]
fn two_hosts() -> Response {
    // Which one would a proxy in front have routed by? Refuse rather than guess.
    ApiError::bad_request("the request has more than one Host header").into_response()
}

#[cold]
fn reserve_busy() -> Response {
    // One of the connections let in beyond max_connections for monitoring only.
    let mut busy = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ServerBusy,
        "every connection slot is taken; this one answers only /healthz and /readyz",
    )
    .with_header(header::RETRY_AFTER, HeaderValue::from_static("1"))
    .into_response();
    busy.extensions_mut().insert(CloseConnection);
    busy
}

/// The body broke a rule (too slow, too late, over a budget): whatever the handler made of the
/// cut body, this is the answer, and the connection does not carry on.
#[cold]
fn body_refused(refusal: ApiError) -> Response {
    let mut refused = refusal.into_response();
    refused.extensions_mut().insert(CloseConnection);
    refused
}

/// An error answer of our own without a JSON body (a lower layer's 404, 405, 413, timeout) in
/// the JSON envelope, with the headers that say what to do about it.
#[cold]
fn enveloped(res: Response) -> Response {
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return res;
    }
    let mut replaced = from_status(res.status()).into_response();
    for name in [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE] {
        if let Some(v) = res.headers().get(&name) {
            replaced.headers_mut().insert(name, v.clone());
        }
    }
    replaced
}

/// The access log line (debug; a warning for a 5xx). Paths never carry secrets here (tokens
/// travel in headers); query strings are not logged.
#[inline(never)]
fn access_log(
    id: &RequestId,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    status: StatusCode,
    started: Instant,
) {
    let status = status.as_u16();
    let (path, request_id) = (uri.path(), id.as_str());
    if status >= 500 {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        tracing::warn!(request_id, %method, %path, status, ms, "request");
    } else if tracing::enabled!(tracing::Level::DEBUG) {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        tracing::debug!(request_id, %method, %path, status, ms, "request");
    }
}

/// The Content-Security-Policy for the console and every other response that sets none: scripts,
/// styles and connections only from this origin (no inline scripts), no plugins, no framing.
pub const CONSOLE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Security headers on every response (a route's own `Content-Security-Policy`, like the API
/// reference page's, is kept): CSP without inline scripts, `nosniff`, `Referrer-Policy`,
/// `frame-ancestors 'none'` (and `X-Frame-Options: DENY` for old browsers). Answers
/// [`PassedThrough`] from a session app are left as the app sent them.
fn security_headers(res: &mut Response) {
    if res.extensions().get::<PassedThrough>().is_some() {
        return;
    }
    let h = res.headers_mut();
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONSOLE_CSP));
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}
