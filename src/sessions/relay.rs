//! The `/proxy/<cr>/…` relay: for installs whose session domain points at this server, requests
//! for a session's apps are passed to its cluster's ingress (`host:port`), WebSockets included.
//! Only requests sent to the session's own domain are relayed (421 on any other host: an app
//! served on the console's origin would run its user's code with the console's cookies).
//! The ingress itself authenticates every request against `GET /internal/connect/verify`, so the
//! relay adds no authentication, but it decides the session exactly as verify does
//! ([`super::proxy_path::route`]: ambiguous paths are refused with 400) and forwards the normalised
//! path it routed, never the raw one. Credentials and identity do not cross it: the request loses
//! `Authorization`, the console's cookies, other sessions' `gshare_session` cookies, any client-sent
//! `X-GShare-*`, `X-Original-*` and `X-Forwarded-*`; it gains `X-GShare-Session`/`X-GShare-User` from
//! the session record, the session's own `Host`, and, when the browser sent a valid console
//! cookie, `X-GShare-Console-User`: who that cookie signs in, signed for verify (the
//! `other_user` check), never the cookie. The response loses any `Set-Cookie` for the
//! console's cookies or for another session's path; otherwise the app's answer is passed on as it
//! came (its error pages and headers: no JSON envelope, no console CSP or frame options).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::model::Phase;
use super::proxy_path::{Refusal, Routed, route};
use super::routes::SessionsState;
use crate::http::error::{ApiError, ErrorCode};
use crate::http::middleware::PassedThrough;
use crate::http::server::{ConnectionTicket, NoRoom};
use crate::locks::lock;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for the ingress to answer with its response head (bodies and WebSockets may last).
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);

/// Header names the relay adds, made at compile time (`from_static` at run time parses the name
/// on every request).
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_GSHARE_SESSION: HeaderName = HeaderName::from_static("x-gshare-session");
const X_GSHARE_USER: HeaderName = HeaderName::from_static("x-gshare-user");
const X_GSHARE_CONSOLE_USER: HeaderName = HeaderName::from_static(super::connect::CONSOLE_USER_HEADER);

/// Drops the console's cookies (an admin's token must never reach a session's app) and every
/// `gshare_session` cookie `keep_session` refuses (those of other sessions).
pub(crate) fn filter_cookies(v: &HeaderValue, keep_session: &dyn Fn(&str) -> bool) -> Option<HeaderValue> {
    let kept: Vec<&str> =
        v.to_str().ok()?.split(';').map(str::trim).filter(|c| !c.is_empty() && cookie_kept(c, keep_session)).collect();
    if kept.is_empty() { None } else { HeaderValue::from_str(&kept.join("; ")).ok() }
}

/// What the relay reads from a request's `Cookie` lines, in one pass over their text (a
/// browser's carry this session's cookie, a few hundred bytes).
pub(crate) struct CookieScan<'a> {
    /// This session's cookie (the first `gshare_session`), as [`crate::auth::cookies::cookie`]
    /// reads it.
    pub session: Option<&'a str>,
    /// The cookie named `console` (the console's), read the same way.
    pub console: Option<&'a str>,
    /// Every line would go on as it came through [`filter_cookies`] (true without any line).
    pub all_kept: bool,
}

/// Reads `h`'s `Cookie` lines once (see [`CookieScan`]).
pub(crate) fn scan_cookies<'a>(
    h: &'a HeaderMap,
    console: Option<&str>,
    keep_session: &dyn Fn(&str) -> bool,
) -> CookieScan<'a> {
    let mut scan = CookieScan { session: None, console: None, all_kept: true };
    let (mut seen_session, mut seen_console) = (false, console.is_none());
    for line in h.get_all(header::COOKIE) {
        let Ok(text) = line.to_str() else {
            scan.all_kept = false;
            continue;
        };
        let mut any = false;
        for c in text.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            any = true;
            if scan.all_kept && !cookie_kept(c, keep_session) {
                scan.all_kept = false;
            }
            let Some((name, value)) = c.split_once('=') else { continue };
            // The first of each name counts, even when empty (as `cookies::cookie` reads them).
            if !seen_session && name == super::connect::COOKIE {
                seen_session = true;
                scan.session = crate::auth::cookies::cookie_value(value);
            }
            if !seen_console && Some(name) == console {
                seen_console = true;
                scan.console = crate::auth::cookies::cookie_value(value);
            }
        }
        // A line of nothing but separators goes.
        scan.all_kept &= any;
    }
    scan
}

/// Whether one `name=value` of a `Cookie` header goes on to a session's app.
fn cookie_kept(c: &str, keep_session: &dyn Fn(&str) -> bool) -> bool {
    let (name, value) = c.split_once('=').unwrap_or((c, ""));
    if name == super::connect::COOKIE {
        return keep_session(value);
    }
    // The console's cookies, in any form (`__Host-` under TLS), never reach an app; nor a nameless
    // one (`=gshare_…=…`) that an app's cookie parser could read as one.
    let nameless_ours = name.trim().is_empty() && is_our_cookie_name(value.split('=').next().unwrap_or(""));
    !is_our_cookie_name(name) && !nameless_ours
}

/// Request headers a client must not set on a relayed request: credentials for this server, and
/// identity or routing headers only the relay (or the ingress) may assert.
pub(crate) fn is_client_forbidden(name: &str) -> bool {
    matches!(name, "authorization" | "host" | "forwarded" | "x-real-ip" | "x-gshare-cnx")
        || name.starts_with("x-gshare-")
        || name.starts_with("x-original-")
        || name.starts_with("x-forwarded-")
        || name.starts_with("x-auth-request-")
}

/// Whether a cookie name is one of this server's, in any of its forms (`gshare_…`, with a
/// `__Host-` or `__Secure-` prefix, in any case: an app must not set, shadow or confuse them).
pub(crate) fn is_our_cookie_name(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower.strip_prefix("__host-").or_else(|| lower.strip_prefix("__secure-")).unwrap_or(&lower);
    bare.starts_with("gshare_") || bare.starts_with("gshare-")
}

/// One `Set-Cookie` of a relayed answer, read as a browser reads it (RFC 6265bis §5.6): the pair
/// before the first `;` (no `=`: a nameless cookie whose value is all of it), then attributes whose
/// names are matched without regard to case, the last `Path` counting. Cookies named like ours are
/// dropped, but for this session's own `gshare_session` (the one verify sets, passed back by the
/// ingress): scoped to `own_path` and verified by `keep_session`. `Domain` is removed from every
/// cookie kept, so an app never sets a cookie for the console's host or its siblings.
pub(crate) fn filter_set_cookie(text: &str, own_path: &str, keep_session: &dyn Fn(&str) -> bool) -> Option<String> {
    let mut parts = text.split(';');
    let pair = parts.next()?.trim();
    let (name, value) = match pair.split_once('=') {
        Some((n, v)) => (n.trim(), v.trim()),
        None => ("", pair),
    };
    let mut path = None;
    let mut attributes = Vec::new();
    for a in parts {
        let a = a.trim();
        if a.is_empty() {
            continue;
        }
        let key = a.split_once('=').map_or(a, |(k, _)| k).trim();
        if key.eq_ignore_ascii_case("domain") {
            continue;
        }
        if key.eq_ignore_ascii_case("path") {
            path = a.split_once('=').map(|(_, v)| v.trim());
        }
        attributes.push(a);
    }
    if is_our_cookie_name(name) || (name.is_empty() && is_our_cookie_name(value.split('=').next().unwrap_or(""))) {
        let ours = name == super::connect::COOKIE && path == Some(own_path) && keep_session(value);
        if !ours {
            return None;
        }
    }
    let mut out = pair.to_string();
    for a in attributes {
        out.push_str("; ");
        out.push_str(a);
    }
    Some(out)
}

/// [`filter_set_cookie`] over every `Set-Cookie` of an answer (those that are not text go).
pub(crate) fn filter_set_cookies(h: &mut HeaderMap, cr: &str, keep_session: &dyn Fn(&str) -> bool) {
    if !h.contains_key(header::SET_COOKIE) {
        return;
    }
    let own_path = format!("/proxy/{cr}/");
    let kept: Vec<HeaderValue> = h
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|text| filter_set_cookie(text, &own_path, keep_session))
        .filter_map(|text| HeaderValue::from_str(&text).ok())
        .collect();
    h.remove(header::SET_COOKIE);
    for v in kept {
        h.append(header::SET_COOKIE, v);
    }
}

/// Whether `name` is a hop-by-hop header of RFC 9110 §7.6.1 (a comparison, not a hash lookup per
/// name): never forwarded, but for what an upgrade needs.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Removes the hop-by-hop headers (RFC 9110 §7.6.1) — the fixed list and every header the
/// message's `Connection` names — and those `also` selects; with `keep_upgrade`, an upgrade's own
/// `Connection` and `Upgrade` stay. One pass over the names: usually none but the hop-by-hop ones
/// go, and nothing is allocated or hashed for the rest.
fn remove_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool, also: impl Fn(&str) -> bool) {
    let connection = h.get_all(header::CONNECTION);
    let named = |name: &str| {
        connection
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(name))
    };
    let gone: Vec<HeaderName> = h
        .keys()
        .filter(|n| {
            if keep_upgrade && (*n == header::CONNECTION || *n == header::UPGRADE) {
                return false;
            }
            is_hop_by_hop(n) || also(n.as_str()) || named(n.as_str())
        })
        .cloned()
        .collect();
    for name in gone {
        h.remove(name);
    }
}

pub(crate) fn is_upgrade(h: &HeaderMap) -> bool {
    h.get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
        && h.contains_key(header::UPGRADE)
}

/// Drops the hop-by-hop headers of an answer: the fixed list and what its `Connection` names.
pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) {
    remove_hop_by_hop(h, false, |_| false);
}

/// The request's headers as they go on, filtered in place (no second map): hop-by-hop headers and
/// what `Connection` names go, and what [`is_client_forbidden`] names; `Host` is the session's
/// ([`TEST_HOST`] here); `Cookie` keeps only what [`filter_cookies`] keeps; an upgrade keeps
/// `Connection: upgrade` and its `Upgrade`. (The relay scans the cookies for more than this and
/// calls [`forward_scanned`] itself.)
#[cfg(any(test, fuzzing))]
pub(crate) fn forward_headers(h: HeaderMap, upgrade: bool, keep_session: &dyn Fn(&str) -> bool) -> HeaderMap {
    let all_kept = scan_cookies(&h, None, keep_session).all_kept;
    forward_scanned(h, upgrade, keep_session, all_kept, TEST_HOST)
}

/// The session domain [`forward_headers`] puts in `Host`.
#[cfg(any(test, fuzzing))]
pub(crate) const TEST_HOST: HeaderValue = HeaderValue::from_static("session.test");

/// [`forward_headers`], where `all_kept` is what [`scan_cookies`] found of the same headers and
/// `host` the session's domain.
fn forward_scanned(
    mut h: HeaderMap,
    upgrade: bool,
    keep_session: &dyn Fn(&str) -> bool,
    all_kept: bool,
    host: HeaderValue,
) -> HeaderMap {
    // The client's `Host` is replaced below, in its place (not removed and added again).
    remove_hop_by_hop(&mut h, upgrade, |n| n != "host" && is_client_forbidden(n));
    h.insert(header::HOST, host);
    // Usually every cookie a browser sends here goes on (the session's own, the app's): then the
    // header goes on as it came.
    if !all_kept {
        let kept: Vec<HeaderValue> =
            h.get_all(header::COOKIE).iter().filter_map(|v| filter_cookies(v, keep_session)).collect();
        h.remove(header::COOKIE);
        for v in kept {
            h.append(header::COOKIE, v);
        }
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    h
}

/// Appends `ip` as its `Display` writes it; IPv4 without the formatting machinery (which costs
/// the relay more than the rest of `X-Forwarded-For`).
fn push_ip(out: &mut String, ip: std::net::IpAddr) {
    let std::net::IpAddr::V4(v4) = ip else {
        use std::fmt::Write as _;
        let _ = write!(out, "{ip}");
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

#[cold]
fn relay_error(status: StatusCode, code: ErrorCode, message: String) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// `ANY /proxy/{cr}/…`.
pub async fn relay(
    State(app): State<SessionsState>,
    State(gate): State<crate::auth::guard::Gate>,
    req: Request,
) -> Response {
    // One request of its connection here: no lookup of its own to keep.
    let connection = req.extensions().get::<ConnectionTicket>().map(|t| RelayConnection {
        ticket: t.clone(),
        lookup: None,
        cookies: Default::default(),
    });
    relay_request(&app, &gate, req, connection.as_ref()).await
}

/// What the relay keeps per client connection: the connection, and its last session lookup.
pub struct RelayConnection {
    ticket: ConnectionTicket,
    lookup: Option<super::lookup::ConnectionLookup>,
    /// The last session cookie its requests sent.
    cookies: super::connect::CookieMemo,
}

impl RelayConnection {
    pub fn new(ticket: ConnectionTicket) -> Self {
        Self { ticket, lookup: Some(Default::default()), cookies: Default::default() }
    }

    /// The connection is a reserve one (health probes only).
    pub fn reserve(&self) -> bool {
        self.ticket.reserve()
    }
}

/// What the relay reads, made once for the listeners' direct path (`crate::http::relay_handle`):
/// the handler's two states without a clone of each per request.
pub struct RelayState {
    pub sessions: SessionsState,
    pub gate: crate::auth::guard::Gate,
}

/// [`relay`] with its state borrowed. The usual request's path is kept short and every refusal
/// is made out of line (`#[cold]` functions below): a relayed request runs through the server,
/// the pooled client and the app's ingress, and the less code it passes, the fewer instruction
/// cache misses it pays.
pub async fn relay_request(
    app: &SessionsState,
    gate: &crate::auth::guard::Gate,
    mut req: Request,
    on: Option<&RelayConnection>,
) -> Response {
    let connection = on.map(|c| &c.ticket);
    let raw = req.uri().path_and_query().map_or_else(|| req.uri().path(), |p| p.as_str());
    let routed = match route(raw) {
        Ok(r) => r,
        Err(r) => return refused_target(r),
    };
    let as_sent = routed.is_target(raw);
    // The session and where its requests go, as of the last commit (see `super::lookup`).
    let found = match on.and_then(|c| c.lookup.as_ref()) {
        Some(lookup) => app.sessions.connection_target(&routed.cr, lookup).await,
        None => app.sessions.target(&routed.cr).await,
    };
    let session = match found {
        Ok(Some(found)) => found,
        Ok(None) => return no_session(),
        Err(e) => return lookup_failed(e),
    };
    if session.phase.is_final() {
        return ended(&session);
    }
    // A session's app runs its user's code: served on any other host (the console's above all) its
    // pages would run with that origin's cookies. Only the session's own domain is relayed.
    let on_own_domain = session.domain.as_deref().is_some_and(|domain| {
        (session.headers.plain_domain && sent_to_plain_domain(&req, domain))
            || request_host(&req).is_some_and(|host| host.eq_ignore_ascii_case(domain))
    });
    if !on_own_domain {
        return wrong_host(&session, &req);
    }
    let Some(target) = session.ingress.as_deref() else {
        return no_ingress(&session);
    };
    if session.phase != Phase::Running {
        not_running(&session);
    }

    // The answer goes out in the client's HTTP version, not the ingress's (an HTTP/1.0 app would
    // otherwise turn the client's keep-alive connection into HTTP/1.0).
    let client_version = req.version();
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let peer = match connection {
        Some(c) => c.peer().ip(),
        // Only in router tests without a listener.
        None => req
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
    };
    let trust = crate::http::client_addr::ProxyTrust::from_config(&app.config);
    let client_ip = crate::http::client_addr::resolve(trust, peer, req.headers());
    let scheme = if app.tls.is_some() { "https" } else { "http" };
    let (parts, body) = req.into_parts();
    // Only this session's cookie goes on (verify needs it); other sessions' stay with the browser.
    // Its signature is checked once per connection (see `Sessions::cookie_opens`).
    let own_memo;
    let memo = match on {
        Some(c) => &c.cookies,
        None => {
            own_memo = super::connect::CookieMemo::default();
            &own_memo
        }
    };
    let keep_session = |c: &str| app.sessions.cookie_opens(c, &routed.cr, memo);
    // Read from the client's headers before they are filtered for the ingress.
    let cookies = scan_cookies(&parts.headers, Some(crate::auth::guard::console_cookie_name(gate)), &keep_session);
    // A browser with this session's cookie is its user: its body (an upload to the app) is not
    // counted among the bodies read before a credential check (`http::body`).
    if cookies.session.is_some_and(keep_session) {
        crate::http::body::mark_authenticated(&parts.extensions);
    }
    let console_user = cookies.console.and_then(|token| crate::auth::guard::console_user_of(gate, token));
    let all_kept = cookies.all_kept;
    let mut xff = String::new();
    if let Some(prior) = parts.headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok())
        && app.config.trusted_proxy_hops > 0
    {
        xff.reserve(prior.len() + 2 + 15);
        xff.push_str(prior);
        xff.push_str(", ");
    }
    push_ip(&mut xff, client_ip);
    // The ingress routes by Host: always the session's own domain, whatever the client sent.
    let Some(host) = session.headers.host.clone() else {
        return relay_error(
            StatusCode::BAD_GATEWAY,
            ErrorCode::RelayFailed,
            "the session domain is not a header value".into(),
        );
    };
    let mut headers = forward_scanned(parts.headers, upgrade, &keep_session, all_kept, host.clone());
    // The console's cookie does not cross (it is a credential), but who it signs in matters to
    // verify (a member's browser opens no other member's link): passed on as the relay's signed
    // statement, which verify checks as it would the cookie (see `CONSOLE_USER_HEADER`).
    if let Some((name, admin)) = console_user
        && let Some(v) = app.sessions.console_user_assertion(&name, admin).and_then(|v| HeaderValue::from_str(&v).ok())
    {
        headers.insert(X_GSHARE_CONSOLE_USER, v);
    }
    // Room for what is added below, so the map grows at most once.
    headers.reserve(5);
    headers.insert(X_FORWARDED_HOST, host);
    for (name, value) in [(X_GSHARE_SESSION, &session.headers.session), (X_GSHARE_USER, &session.headers.user)] {
        if let Some(v) = value {
            headers.insert(name, v.clone());
        }
    }
    if let Ok(v) = HeaderValue::try_from(xff) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(scheme));
    // The normalised path verify will route, never the raw one. Plain requests go by the pooled
    // client (an absolute URI names the ingress); an upgrade goes on a connection of its own
    // (origin form). Usually the target needed no normalising and the request's own parsed path
    // and query go on with the ingress's parsed authority (no text made and parsed again); else
    // made in one string the URI then owns.
    let sent = parts.uri.into_parts().path_and_query.filter(|_| as_sent);
    let uri = match (sent, &session.headers.ingress) {
        // An upgrade's own connection takes the origin form.
        (Some(pq), _) if upgrade => Some(Uri::from(pq)),
        (Some(pq), Some(authority)) => {
            let mut uri = axum::http::uri::Parts::default();
            uri.scheme = Some(axum::http::uri::Scheme::HTTP);
            uri.authority = Some(authority.clone());
            uri.path_and_query = Some(pq);
            Uri::from_parts(uri).ok()
        }
        _ => made_uri(&routed, target, upgrade),
    };
    let Some(uri) = uri else {
        return relay_error(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, "unusable request target".into());
    };
    let mut out = hyper::Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = headers;

    if let Some(client_upgrade) = client_upgrade {
        // Its own future (boxed): the usual request's is not made larger by a tunnel's states.
        let upgrade =
            Upgrade { app, session: &session, target, cr: &routed.cr, client_version, keep_session: &keep_session };
        return Box::pin(upgrade.relay(out, client_upgrade, connection)).await;
    }

    let resp = match within(connection, HEAD_TIMEOUT, app.sessions.relay.client.request(out)).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => return unreachable(target, &error_chain(&e)),
        None => return unreachable(target, "no response within 60 s"),
    };
    let (mut parts, incoming) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    filter_set_cookies(&mut parts.headers, &routed.cr, &keep_session);
    parts.version = client_version;
    parts.extensions.insert(PassedThrough);
    Response::from_parts(parts, Body::new(incoming))
}

/// `work`'s output, or `None` once `limit` has passed: on `connection`'s kept timer (see
/// `crate::http::timer`), so that no timer is registered and removed per request in the wheel
/// every core shares.
async fn within<F: std::future::Future>(
    connection: Option<&ConnectionTicket>,
    limit: Duration,
    work: F,
) -> Option<F::Output> {
    let at = tokio::time::Instant::now().into_std() + limit;
    let deadline = match connection {
        Some(ticket) => ticket.deadline(at),
        // Only in router tests without a listener.
        None => crate::http::timer::Deadlines::new().until(at),
    };
    tokio::select! {
        biased;
        r = work => Some(r),
        () = deadline => None,
    }
}

/// The target made as text: a normalised path, or an upgrade's origin form.
fn made_uri(routed: &Routed, target: &str, upgrade: bool) -> Option<Uri> {
    let mut uri = String::with_capacity(
        "http://".len() + target.len() + routed.path.len() + routed.query.as_ref().map_or(0, |q| q.len() + 1),
    );
    if !upgrade {
        uri.push_str("http://");
        uri.push_str(target);
    }
    uri.push_str(&routed.path);
    if let Some(q) = &routed.query {
        uri.push('?');
        uri.push_str(q);
    }
    Uri::try_from(uri).ok()
}

/// What a relayed upgrade (a WebSocket) needs of the request it came in.
struct Upgrade<'a> {
    app: &'a SessionsState,
    session: &'a super::lookup::SessionTarget,
    target: &'a str,
    cr: &'a str,
    client_version: axum::http::Version,
    keep_session: &'a (dyn Fn(&str) -> bool + Sync),
}

impl Upgrade<'_> {
    /// An upgrade gets a connection of its own, handed over to the two ends after the 101. It
    /// keeps the client's connection counted under `max_connections` and its address's cap,
    /// counts the upstream one too, and is bounded per session.
    async fn relay(
        self,
        out: hyper::Request<Body>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        ticket: Option<&ConnectionTicket>,
    ) -> Response {
        let Self { app, session, target, cr, client_version, keep_session } = self;
        let Some(session_tunnel) = app.sessions.relay.enter_tunnel(&session.session_id) else {
            return relay_error(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyTunnels,
                format!(
                    "session {} has {MAX_TUNNELS_PER_SESSION} WebSockets open; close some first",
                    session.session_id
                ),
            );
        };
        let tunnel = match ticket.map(ConnectionTicket::tunnel) {
            Some(Ok(t)) => Some(t),
            Some(Err(NoRoom::Server)) => {
                return relay_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::ServerBusy,
                    "every connection slot is taken; the WebSocket was not opened".into(),
                );
            }
            Some(Err(NoRoom::Address(limit))) => {
                return relay_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::TooManyTunnels,
                    format!(
                        "your address has {limit} connections open (max_connections_per_address; a WebSocket holds two); close some first"
                    ),
                );
            }
            // Only in router tests without a socket.
            None => None,
        };
        let stream = match within(ticket, CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target)).await {
            Some(Ok(s)) => s,
            Some(Err(e)) => return unreachable(target, &e.to_string()),
            None => return unreachable(target, "no connection within 10 s"),
        };
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return unreachable(target, &e.to_string()),
        };
        let conn_task = tokio::spawn(conn.with_upgrades());
        let mut resp = match within(ticket, HEAD_TIMEOUT, sender.send_request(out)).await {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                conn_task.abort();
                return unreachable(target, &e.to_string());
            }
            None => {
                conn_task.abort();
                return unreachable(target, "no response within 60 s");
            }
        };

        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            // The counts move into the tunnel's task and end with it.
            tokio::spawn(async move {
                let _tunnel = tunnel;
                let sid = &session_tunnel.session_id;
                match tokio::try_join!(client_upgrade, upstream_upgrade) {
                    Ok((client, upstream)) => {
                        let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(upstream));
                        if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
                            tracing::debug!(session_id = %sid, error = %e, "relayed WebSocket closed");
                        }
                    }
                    Err(e) => tracing::debug!(session_id = %sid, error = %e, "WebSocket upgrade not completed"),
                }
            });
            let (mut parts, _) = resp.into_parts();
            parts.version = client_version;
            let mut r = Response::from_parts(parts, Body::empty());
            keep_upgrade_headers(r.headers_mut());
            filter_set_cookies(r.headers_mut(), cr, keep_session);
            r.extensions_mut().insert(PassedThrough);
            return r;
        }

        // Not switched: the ingress's own answer (its verify's 401, a 404 for a path it does not
        // route, the app's error) goes back as it came, as for any other request.
        let (mut parts, incoming) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        filter_set_cookies(&mut parts.headers, cr, keep_session);
        parts.version = client_version;
        parts.extensions.insert(PassedThrough);
        Response::from_parts(parts, Body::new(incoming))
    }
}

#[cold]
fn refused_target(r: Refusal) -> Response {
    if let Refusal::NotProxied = r {
        return relay_error(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no session in this path".into());
    }
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, r.message())
        .with_details(serde_json::json!({ "reason": r.as_str() }))
        .into_response()
}

#[cold]
fn no_session() -> Response {
    relay_error(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such session".into())
}

#[cold]
fn lookup_failed(e: crate::store::StoreError) -> Response {
    ApiError::internal(e).into_response()
}

#[cold]
fn ended(session: &super::lookup::SessionTarget) -> Response {
    relay_error(StatusCode::NOT_FOUND, ErrorCode::NotFound, format!("session {} has ended", session.session_id))
}

#[cold]
fn wrong_host(session: &super::lookup::SessionTarget, req: &Request) -> Response {
    let asked = request_host(req);
    let served_on = session.domain.as_deref().map_or_else(
        || "no host: no session domain is set for its cluster or the server".to_string(),
        |d| format!("its session domain {d}"),
    );
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        ErrorCode::WrongHost,
        format!("session {} is relayed only on {served_on}", session.session_id),
    )
    .with_details(serde_json::json!({ "host": asked, "session_domain": session.domain }))
    .into_response()
}

#[cold]
fn no_ingress(session: &super::lookup::SessionTarget) -> Response {
    relay_error(
        StatusCode::NOT_FOUND,
        ErrorCode::NoSessionIngress,
        format!(
            "this server does not relay /proxy/ for cluster {}: set the cluster's session ingress (host:port of its ingress controller) or point the session domain at the cluster",
            session.cluster_name
        ),
    )
}

#[cold]
fn not_running(session: &super::lookup::SessionTarget) {
    tracing::debug!(session_id = %session.session_id, phase = session.phase.as_str(), "relaying to a session that is not running");
}

/// A domain any authority parser reads as itself (no `@`, `:`, `[`, no trailing dot, which
/// `request_host` drops), so [`sent_to_plain_domain`] may compare it as text. Decided once per
/// session lookup (`super::lookup::RelayHeaders`), not per request.
pub(crate) fn is_plain_domain(domain: &str) -> bool {
    !domain.is_empty()
        && !domain.ends_with('.')
        && domain.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// Whether the request was sent to `domain` (which [`is_plain_domain`] accepts: what
/// [`request_host`] would find equal to it), read without parsing or allocating for the usual
/// `Host: <domain>` or `Host: <domain>:<port>`; `false` means "not by this quick reading" (the
/// caller then asks [`request_host`]).
fn sent_to_plain_domain(req: &Request, domain: &str) -> bool {
    if req.uri().authority().is_some() {
        return false;
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let (Some(v), None) = (hosts.next(), hosts.next()) else { return false };
    let v = v.as_bytes();
    let Some(rest) = v.get(domain.len()..) else { return false };
    v[..domain.len()].eq_ignore_ascii_case(domain.as_bytes())
        && (rest.is_empty()
            || rest.len() <= 6 && rest[0] == b':' && rest.len() > 1 && rest[1..].iter().all(u8::is_ascii_digit))
}

/// The host a request was sent to, without its port: HTTP/2's `:authority` (the URI), else the
/// `Host` header. A proxy in front of this server must pass `Host` on (nginx: `proxy_set_header
/// Host $host`); `X-Forwarded-Host` is not read, a client could write it.
pub(crate) fn request_host(req: &Request) -> Option<String> {
    let from_header;
    let authority = match req.uri().authority() {
        Some(a) => a,
        None => {
            from_header = axum::http::uri::Authority::try_from(req.headers().get(header::HOST)?.as_bytes()).ok()?;
            &from_header
        }
    };
    // Userinfo has no place in a Host (RFC 9110 §7.2): no browser sends `user@host`.
    if authority.as_str().contains('@') {
        return None;
    }
    Some(authority.host().trim_end_matches('.').to_string())
}

/// The pooled HTTP/1 client plain relayed requests use (keep-alive to each ingress).
pub struct RelayClient {
    client: Client<HttpConnector, Body>,
    /// Relayed WebSockets open now, by session id.
    tunnels: Arc<TunnelCounts>,
}

type TunnelCounts = std::sync::Mutex<std::collections::HashMap<String, usize>>;

/// Relayed WebSockets one session may hold open at once (a JupyterLab tab uses a few).
pub const MAX_TUNNELS_PER_SESSION: usize = 64;

/// One session's relayed WebSocket, counted while it lives.
struct SessionTunnel {
    counts: Arc<TunnelCounts>,
    session_id: String,
}

impl RelayClient {
    fn enter_tunnel(&self, session_id: &str) -> Option<SessionTunnel> {
        let mut map = lock(&self.tunnels);
        match map.get_mut(session_id) {
            Some(n) if *n >= MAX_TUNNELS_PER_SESSION => return None,
            Some(n) => *n += 1,
            None => {
                map.insert(session_id.to_string(), 1);
            }
        }
        Some(SessionTunnel { counts: self.tunnels.clone(), session_id: session_id.to_string() })
    }
}

impl Drop for SessionTunnel {
    fn drop(&mut self) {
        let mut map = lock(&self.counts);
        if let Some(n) = map.get_mut(&self.session_id) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.session_id);
            }
        }
    }
}

impl RelayClient {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(64)
            .build(connector);
        Self { client, tunnels: Default::default() }
    }
}

impl Default for RelayClient {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RelayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayClient")
    }
}

/// An error with its causes (the legacy client's own message is only "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

/// A 101's headers as they go back: hop-by-hop ones go but for its `Connection` and `Upgrade`.
pub(crate) fn keep_upgrade_headers(h: &mut HeaderMap) {
    remove_hop_by_hop(h, true, |_| false);
}

#[cold]
fn unreachable(target: &str, cause: &str) -> Response {
    tracing::warn!(target, cause, "session relay: the ingress did not answer");
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        ErrorCode::IngressUnreachable,
        format!("the session ingress {target} did not answer"),
    )
    .with_details(serde_json::json!({ "target": target, "cause": cause }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay's quick Host check as a whole (the domain's part is decided per lookup).
    fn sent_to_domain(req: &Request, domain: &str) -> bool {
        is_plain_domain(domain) && sent_to_plain_domain(req, domain)
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut seed: u32 = 0x2545_f491;
        let mut addrs: Vec<std::net::IpAddr> =
            ["0.0.0.0", "255.255.255.255", "10.0.0.1", "100.10.1.0", "::1", "fe80::1:2"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect();
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            addrs.push(std::net::IpAddr::V4(std::net::Ipv4Addr::from(seed)));
        }
        for ip in addrs {
            let mut out = String::from("x, ");
            push_ip(&mut out, ip);
            assert_eq!(out, format!("x, {ip}"));
        }
    }

    #[test]
    fn console_cookies_never_leave() {
        let v = HeaderValue::from_static(
            "gshare_console=adm; gshare_session=mine; gshare_csrf=c; gshare_session=other; _xsrf=j",
        );
        let mine = |c: &str| c == "mine";
        assert_eq!(filter_cookies(&v, &mine).unwrap(), "gshare_session=mine; _xsrf=j");
        assert!(filter_cookies(&HeaderValue::from_static("gshare_console=adm"), &mine).is_none());
    }

    #[test]
    fn credentials_and_identity_do_not_cross() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer admin"),
            ("proxy-authorization", "Basic x"),
            ("host", "console.lab.test"),
            ("x-gshare-user", "root"),
            ("x-gshare-session", "ses_OTHER"),
            ("x-gshare-cnx", "cnx_x.y"),
            ("x-original-uri", "/proxy/other/lab"),
            ("x-original-url", "http://s/proxy/other/lab"),
            ("x-forwarded-host", "evil"),
            ("x-auth-request-redirect", "/x"),
            ("forwarded", "for=1.2.3.4"),
            ("accept", "text/html"),
            ("connection", "keep-alive, X-Hop-Only"),
            ("x-hop-only", "for the next hop alone"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let f = forward_headers(h.clone(), false, &|_| true);
        assert_eq!(f.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["host", "accept"]);
        assert_eq!(f[header::HOST], TEST_HOST);

        // A nameless cookie that reads as one of ours goes too (found by the relay_headers fuzz
        // target's seed: it was forwarded).
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("=gshare_console=x; = __Host-gshare_csrf=y; app=1"));
        let f = forward_headers(h.clone(), false, &|_| true);
        assert_eq!(f.get(header::COOKIE).map(|v| v.to_str().unwrap()), Some("app=1"));

        // An answer's hop-by-hop headers stay at this hop too.
        let mut r = HeaderMap::new();
        for (k, v) in [("connection", "close, x-app-hop"), ("x-app-hop", "1"), ("keep-alive", "5"), ("etag", "e")] {
            r.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut r);
        assert_eq!(r.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["etag"]);

        let mut r = HeaderMap::new();
        for v in [
            "gshare_console=x; Path=/",
            "gshare_csrf=x; Path=/",
            "__Host-gshare_console=x; Path=/; Secure",
            "GSHARE_CONSOLE=x",
            "gshare_session=x; Path=/",
            "gshare_session=x; Path=/proxy/ses-2/",
            // Browsers apply the last Path: this one is for the whole host.
            "gshare_session=ok; Path=/proxy/ses-1/; Path=/",
            // A value this session's verify did not sign.
            "gshare_session=forged; Path=/proxy/ses-1/",
            // A nameless cookie whose value reads as ours.
            "gshare_session",
            " gshare_session = ok ; path=/proxy/ses-1/; HttpOnly",
            "gshare_session=ok; Path=/proxy/ses-1/; Domain=lab.example; HttpOnly",
            "_xsrf=lab; Path=/proxy/ses-1/lab; domain=.lab.example",
            "theme=dark",
        ] {
            r.append(header::SET_COOKIE, HeaderValue::from_static(v));
        }
        filter_set_cookies(&mut r, "ses-1", &|v| v == "ok");
        let kept: Vec<_> = r.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect();
        assert_eq!(
            kept,
            [
                "gshare_session = ok; path=/proxy/ses-1/; HttpOnly",
                "gshare_session=ok; Path=/proxy/ses-1/; HttpOnly",
                "_xsrf=lab; Path=/proxy/ses-1/lab",
                "theme=dark",
            ]
        );
    }

    #[test]
    fn upgrades_and_paths() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
        let f = forward_headers(h.clone(), true, &|_| true);
        assert_eq!(f[header::CONNECTION], "upgrade");
        assert_eq!(f[header::UPGRADE], "websocket");
        assert!(forward_headers(h.clone(), false, &|_| true).get(header::UPGRADE).is_none());

        // A 101 goes back with its own `Connection` and `Upgrade`, and nothing else hop-by-hop.
        let mut r = HeaderMap::new();
        for (k, v) in [
            ("connection", "Upgrade, X-Hop"),
            ("upgrade", "websocket"),
            ("x-hop", "1"),
            ("keep-alive", "5"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ] {
            r.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        keep_upgrade_headers(&mut r);
        assert_eq!(r.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["connection", "upgrade", "sec-websocket-accept"]);
    }

    #[test]
    fn cookies_go_on_as_they_came_unless_one_is_dropped() {
        let mine = |c: &str| c == "mine";
        let forward = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.append(header::COOKIE, HeaderValue::from_static(v));
            let f = forward_headers(h, false, &mine);
            f.get_all(header::COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>()
        };
        // All kept: the very bytes the browser sent.
        assert_eq!(forward("gshare_session=mine;_xsrf=j"), ["gshare_session=mine;_xsrf=j"]);
        // One dropped: what is left, written anew.
        assert_eq!(forward("gshare_session=mine;gshare_console=adm; _xsrf=j"), ["gshare_session=mine; _xsrf=j"]);
        assert_eq!(forward("_xsrf=j; gshare_session=other"), ["_xsrf=j"]);
        assert!(forward("gshare_session=other").is_empty());
        assert!(forward(" ; ").is_empty());

        // The one pass reads this session's and the console's cookie as the guard reads them:
        // the first of each name, even an empty one.
        let mut h = HeaderMap::new();
        for v in ["a=1; gshare_session=\"\"; gshare_console=\"adm\"", "gshare_session=late; gshare_console=late"] {
            h.append(header::COOKIE, HeaderValue::from_static(v));
        }
        h.append(header::COOKIE, HeaderValue::from_bytes(b"x=\xff").unwrap());
        let scan = scan_cookies(&h, Some("gshare_console"), &mine);
        assert_eq!(scan.session, crate::auth::cookies::cookie(&h, "gshare_session"));
        assert_eq!((scan.session, scan.console), (None, Some("adm")));
        assert!(!scan.all_kept);
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("gshare_session=mine; theme=dark"));
        let scan = scan_cookies(&h, None, &mine);
        assert_eq!((scan.session, scan.console, scan.all_kept), (Some("mine"), None, true));
    }

    /// The quick reading of `Host` agrees with [`request_host`] whenever it says yes, and says
    /// yes for the usual forms (no parse, no allocation on the relay's path).
    #[test]
    fn the_quick_host_check_never_accepts_what_the_full_one_refuses() {
        let domains = ["s.lab.example", "S.Lab.Example", "lab", "a-b.c", "x@y", "[::1]", "h:80", "s.lab.example.", ""];
        let hosts = [
            "s.lab.example",
            "S.LAB.example",
            "s.lab.example:8443",
            "s.lab.example:",
            "s.lab.example:80x",
            "s.lab.example:1234567",
            "s.lab.example.",
            "s.lab.example.:80",
            "s.lab.examplex",
            "u@s.lab.example",
            "s.lab.example@evil",
            "lab",
            "lab:1",
            "x@y",
            "[::1]",
            "[::1]:80",
            "h:80",
            "h:80:80",
            "a-b.c",
            "",
        ];
        for d in domains {
            for h in hosts {
                let req = Request::builder().uri("/proxy/x/").header(header::HOST, h).body(Body::empty()).unwrap();
                let full = request_host(&req).is_some_and(|host| host.eq_ignore_ascii_case(d));
                if sent_to_domain(&req, d) {
                    assert!(full, "quick yes, full no: Host {h:?}, domain {d:?}");
                }
            }
        }
        let usual = |h: &str, d: &str| {
            let req = Request::builder().uri("/proxy/x/").header(header::HOST, h).body(Body::empty()).unwrap();
            sent_to_domain(&req, d)
        };
        assert!(usual("s.lab.example", "s.lab.example"));
        assert!(usual("S.LAB.example:8443", "s.lab.example"));
        assert!(!usual("s.lab.examplex", "s.lab.example"));
        // Two Host headers: never the quick way (the request context refuses them anyway).
        let two = Request::builder()
            .uri("/proxy/x/")
            .header(header::HOST, "s.lab.example")
            .header(header::HOST, "evil")
            .body(Body::empty())
            .unwrap();
        assert!(!sent_to_domain(&two, "s.lab.example"));
    }
}
