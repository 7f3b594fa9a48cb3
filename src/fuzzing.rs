//! Entry points of the fuzz targets in `fuzz/` (cargo-fuzz; `hack/fuzz.sh`): each takes arbitrary
//! bytes and drives one parser the way a request or a cluster would, then checks what must hold
//! whatever the input. A panic here is a finding. Not an API: the functions may change with the
//! parsers they reach.

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::auth::keys::{KeyRingDir, SigningKey};
use crate::auth::tokens::{AUD_INTERNAL, LEEWAY_S, TokenAuthority};
use crate::callbacks::intake;
use crate::clock::Clock;
use crate::clusters::kubeconfig::{self, Origin};
use crate::http::error::ApiError;
use crate::sessions::connect::ConnectKeys;

/// A refused body is the client's fault (400 or 422) and says where, never a 5xx.
fn client_error(e: &ApiError) {
    let status = e.status.as_u16();
    assert!(status == 400 || status == 422, "a body was answered {status}: {}", e.message);
    if status == 422 {
        let errors = e.details["errors"].as_array().map_or(0, Vec::len);
        assert!(errors > 0, "a 422 without details.errors: {}", e.message);
    }
}

/// `POST /api/v1/clusters` intake: `kubeconfig_b64` decoded, the YAML checked, and a client built
/// from what passed (no network: building a client reads certificates and keys only).
pub fn kubeconfig(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(decoded) = kubeconfig::decode_b64(text) {
        assert!(decoded.len() <= kubeconfig::MAX_KUBECONFIG_BYTES);
        kubeconfig_text(&decoded);
    }
    kubeconfig_text(text);
}

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().ok()).as_ref()
}

fn kubeconfig_text(text: &str) {
    let Ok(kc) = kubeconfig::check(text, Origin::Submitted, &[]) else { return };
    assert!(!kc.context.is_empty());
    assert!(kubeconfig::parse_server(&kc.server).is_ok(), "accepted server {:?} does not parse", kc.server);
    assert!(!kc.auth_kind.starts_with("exec:") && !kc.auth_kind.starts_with("auth-provider:"));
    if let Some(rt) = runtime() {
        let _ = rt.block_on(kubeconfig::client_for(&kc, None, std::time::Duration::from_secs(1)));
    }
}

struct Jwt {
    authority: TokenAuthority,
    cookies: ConnectKeys,
    cookie_secret: Vec<u8>,
    signer: jsonwebtoken::EncodingKey,
    kid: String,
    /// A valid operator token minted at start: any change to it must stop it verifying.
    minted: String,
}

fn jwt_keys() -> Option<&'static Jwt> {
    static KEYS: OnceLock<Option<Jwt>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let key = SigningKey::generate().ok()?;
        let signer = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_pem().expose().as_bytes()).ok()?;
        let kid = key.kid().to_string();
        // A ring directory that does not exist: the configured key is the only one.
        let ring = KeyRingDir::new(std::env::temp_dir().join(format!("gshare-fuzz-none-{}", std::process::id())));
        let (authority, _) = TokenAuthority::open(AUD_INTERNAL, ring, Some(key), Clock::system()).ok()?;
        let dir = std::env::temp_dir().join(format!("gshare-fuzz-cookie-{}", std::process::id()));
        let cookies = ConnectKeys::open(&dir).ok()?;
        let cookie_secret = std::fs::read(dir.join("session-cookie.key")).ok()?;
        let _ = std::fs::remove_dir_all(&dir);
        let minted = authority.mint("operator:clu_local", std::time::Duration::from_secs(3600)).ok()?;
        Some(Jwt { authority, cookies, cookie_secret, signer, kid, minted })
    })
    .as_ref()
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Bearer tokens (RS256 operator and admin JWTs) and the HS256 `gshare_session` cookie. The first
/// byte picks: a raw token; fuzzed claims signed with the real key (so claim parsing past the
/// signature is reached); fuzzed header and claims; a valid token with bytes changed.
pub fn jwt(data: &[u8]) {
    crate::auth::jwt_crypto::install();
    let Some(k) = jwt_keys() else { return };
    let Some((&mode, rest)) = data.split_first() else { return };
    let now = k.authority.clock().now();
    let check = |token: &str| {
        let cached = k.authority.verify(token);
        let uncached = k.authority.verify_uncached(token, now);
        assert_eq!(cached.is_ok(), uncached.is_ok(), "cache and full check disagree on {token:?}");
        if let Ok(c) = uncached {
            assert!(!c.sub.is_empty() && c.exp + LEEWAY_S >= now);
            assert!(c.nbf.is_none_or(|nbf| nbf <= now + LEEWAY_S));
        }
        let _ = k.cookies.verify(token, now).is_some();
    };
    match mode % 4 {
        0 => {
            let token = String::from_utf8_lossy(rest);
            check(&token);
            assert!(k.authority.verify_uncached(&token, now).is_err() || *token == *k.minted, "forged: {token:?}");
        }
        1 => {
            let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": k.kid}).to_string();
            let message = format!("{}.{}", b64(header.as_bytes()), b64(rest));
            if let Ok(sig) = jsonwebtoken::crypto::sign(message.as_bytes(), &k.signer, jsonwebtoken::Algorithm::RS256) {
                check(&format!("{message}.{sig}"));
            }
            // The same claims as a cookie, signed with the cookie's secret.
            let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
            let message = format!("{header}.{}", b64(rest));
            if let Ok(key) = jsonwebtoken::EncodingKey::from_secret(&k.cookie_secret)
                && let Ok(sig) = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)
            {
                let _ = k.cookies.verify(&format!("{message}.{sig}"), now).is_some();
            }
        }
        2 => {
            // Header and claims both fuzzed, split at the first 0xff; signed with the real key.
            let split = rest.iter().position(|b| *b == 0xff).unwrap_or(rest.len());
            let (header, claims) = rest.split_at(split);
            let message = format!("{}.{}", b64(header), b64(claims.get(1..).unwrap_or_default()));
            if let Ok(sig) = jsonwebtoken::crypto::sign(message.as_bytes(), &k.signer, jsonwebtoken::Algorithm::RS256) {
                check(&format!("{message}.{sig}"));
            }
        }
        _ => {
            // Pairs of (position, xor) applied to the minted token: a changed token never verifies.
            let mut token = k.minted.clone().into_bytes();
            for pair in rest.chunks_exact(2) {
                let at = usize::from(pair[0]) * token.len() / 256;
                if let Some(b) = token.get_mut(at) {
                    *b ^= pair[1];
                }
            }
            let token = String::from_utf8_lossy(&token).into_owned();
            let verified = k.authority.verify_uncached(&token, now).is_ok();
            assert!(!verified || token == k.minted, "a changed token verified: {token:?}");
            check(&token);
        }
    }
}

/// Every `/internal/*` POST body through its handler's intake. The first byte picks the route; a
/// refusal must be a 400 or a 422 with details.
pub fn internal_body(data: &[u8]) {
    let Some((&route, body)) = data.split_first() else { return };
    let outcome = match route % 10 {
        0 => intake::node_report(body).map(drop),
        1 => intake::gpu_report(body).map(drop),
        2 => intake::drift(body).map(drop),
        // Any name is accepted here (compat: answered 202); the handler acts only on DNS names.
        3 => intake::decommissioned(body).map(|h| {
            if let Some(h) = h {
                assert!(!h.is_empty() && h.trim() == h, "hostname {h:?}");
            }
        }),
        4 => intake::health_event(body).map(drop),
        5 => intake::operator_audit(body).map(drop),
        6 => intake::volume_sync(body).map(drop),
        7 => intake::session_samples(body).map(drop),
        8 => intake::session_status("ses-01jabcdefghjkmnpqrstvwxyz0", body).map(drop),
        _ => {
            // The path's CR name is fuzzed too: up to the first 0xff, the rest is the body.
            let split = body.iter().position(|b| *b == 0xff).unwrap_or(body.len());
            let id = String::from_utf8_lossy(&body[..split]);
            intake::session_status(&id, body.get(split + 1..).unwrap_or_default()).map(drop)
        }
    };
    if let Err(e) = outcome {
        client_error(&e);
        // What the client would receive serialises.
        let _ = axum::response::IntoResponse::into_response(e);
    }
}

/// HAMi's `hami.io/node-nvidia-register` annotation and the capacity fallback, as the probe reads a
/// Node. The first byte picks: a whole Node as JSON; the annotation's value; a capacity quantity.
pub fn hami_node(data: &[u8]) {
    use crate::clusters::kinds::{Node, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let Some((&mode, rest)) = data.split_first() else { return };
    let node = match mode % 3 {
        0 => match serde_json::from_slice::<Node>(rest) {
            Ok(n) => n,
            Err(_) => return,
        },
        1 => {
            let mut n = Node::default();
            n.metadata.name = Some("gpu-1".into());
            n.metadata.annotations =
                Some([("hami.io/node-nvidia-register".to_string(), String::from_utf8_lossy(rest).into_owned())].into());
            n
        }
        _ => {
            let q = Quantity(String::from_utf8_lossy(rest).into_owned());
            let capacity: std::collections::BTreeMap<String, Quantity> =
                ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpumem"].map(|k| (k.to_string(), q.clone())).into();
            let mut n = Node::default();
            n.metadata.name = Some("gpu-1".into());
            n.status = Some(NodeStatus {
                capacity: Some(capacity.clone()),
                allocatable: Some(capacity),
                ..Default::default()
            });
            n
        }
    };
    let read = crate::clusters::probe::read_node(&node);
    for g in &read.gpus {
        assert!(g.cores <= 100, "cores {} above 100", g.cores);
        assert!(!g.uuid.is_empty());
    }
    assert!(["master", "storage", "gpu", "cpu"].contains(&read.role.as_str()));
}

/// The forward-auth verify request's target (`X-Original-URI` / `X-Original-URL`, `sessions::proxy_path`):
/// the session it routes to, the normalised path the relay forwards, and the `gshare_cnx` token of
/// its query. Input: one URI, or two (URI and URL) split at the first 0xff.
pub fn verify_uri(data: &[u8]) {
    use crate::sessions::proxy_path::route;
    let (a, b) = match data.iter().position(|x| *x == 0xff) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let uri = String::from_utf8_lossy(a).into_owned();
    if let Ok(r) = route(&uri) {
        assert!(!r.cr.is_empty() && !r.cr.contains('/'), "session {:?} from {uri:?}", r.cr);
        assert!(r.path.starts_with(&format!("/proxy/{}", r.cr)), "{r:?} from {uri:?}");
        // No dot-segment and no empty segment, except the one a trailing `/` leaves.
        let segments: Vec<&str> = r.path.split('/').skip(1).collect();
        for (i, seg) in segments.iter().enumerate() {
            let last = i + 1 == segments.len();
            assert!(*seg != "." && *seg != "..", "{r:?} from {uri:?} keeps a dot-segment");
            assert!(!seg.is_empty() || last, "{r:?} from {uri:?} keeps an empty segment");
        }
        assert!(!r.path.to_ascii_lowercase().contains("%2f"), "{r:?} from {uri:?} keeps an encoded slash");
        // What the relay forwards routes to the same session, unchanged.
        assert_eq!(route(&r.path_and_query()).as_ref(), Ok(&r), "not a fixed point: {uri:?}");
        assert!(r.is_target(&r.path_and_query()), "{r:?}");
        assert_eq!(r.is_target(&uri), r.path_and_query() == uri, "{uri:?}");
        if let Some(q) = &r.query {
            let _ = crate::sessions::connect::query_param(q, "gshare_cnx");
        }
    }
    let second: Vec<String> = b.map(|b| String::from_utf8_lossy(b).into_owned()).into_iter().collect();
    let first = vec![uri];
    if let Ok(r) = crate::sessions::connect::original_target(&first, &second) {
        // Two headers are accepted only when they route to the same place.
        assert_eq!(route(&first[0]).as_ref(), Ok(&r));
        if let Some(u) = second.first() {
            assert_eq!(route(u).as_ref(), Ok(&r));
        }
    }
}

/// A `Set-Cookie` as a browser reads it (RFC 6265bis §5.6, independently of the relay's code):
/// name, value, the last `Path`, and whether any `Domain` attribute is there.
fn browser_cookie(text: &str) -> (String, String, Option<String>, bool) {
    let mut parts = text.split(';');
    let pair = parts.next().unwrap_or("");
    let (name, value) = match pair.find('=') {
        Some(i) => (pair[..i].trim(), pair[i + 1..].trim()),
        None => ("", pair.trim()),
    };
    let (mut path, mut domain) = (None, false);
    for a in parts {
        let (k, v) = match a.find('=') {
            Some(i) => (a[..i].trim(), a[i + 1..].trim()),
            None => (a.trim(), ""),
        };
        if k.eq_ignore_ascii_case("path") {
            path = Some(v.to_string());
        }
        domain |= k.eq_ignore_ascii_case("domain");
    }
    (name.to_string(), value.to_string(), path, domain)
}

/// Would a browser take this cookie as one of the server's (`gshare_…`, `__Host-`/`__Secure-`
/// forms, any case; a nameless cookie whose value reads `gshare_…=` too)?
fn named_like_ours(name: &str, value: &str) -> bool {
    let ours = |n: &str| {
        let n = n.trim().to_ascii_lowercase();
        let bare = n.strip_prefix("__host-").or_else(|| n.strip_prefix("__secure-")).unwrap_or(&n).to_string();
        bare.starts_with("gshare_") || bare.starts_with("gshare-")
    };
    ours(name) || (name.is_empty() && ours(value.split('=').next().unwrap_or("")))
}

/// The relay's `Set-Cookie` filter on an app's answer. First byte: bit 0 says whether this
/// session's cookie value verifies; the rest is the header's text (only what a header can carry).
/// Whatever is kept: no `Domain`, and a cookie a browser would take as ours only when it is this
/// session's own `gshare_session`, scoped to its own path, with a value that verifies. Filtering
/// again changes nothing.
pub fn set_cookie(data: &[u8]) {
    use crate::sessions::relay::{filter_set_cookie, filter_set_cookies};
    let Some((&mode, rest)) = data.split_first() else { return };
    let accept = mode & 1 == 1;
    let own = "/proxy/ses-01jaaaaaaaaaaaaaaaaaaaaaaa/";
    let keep = |_: &str| accept;
    let values: Vec<axum::http::HeaderValue> =
        rest.split(|b| *b == b'\n').filter_map(|l| axum::http::HeaderValue::from_bytes(l).ok()).collect();
    for v in &values {
        let Ok(text) = v.to_str() else { continue };
        let Some(out) = filter_set_cookie(text, own, &keep) else { continue };
        let (name, value, path, domain) = browser_cookie(&out);
        assert!(!domain, "kept a Domain: {text:?} -> {out:?}");
        if named_like_ours(&name, &value) {
            assert!(
                name == crate::sessions::connect::COOKIE && path.as_deref() == Some(own) && accept,
                "an app set one of ours: {text:?} -> {out:?}"
            );
        }
        assert_eq!(filter_set_cookie(&out, own, &keep).as_deref(), Some(out.as_str()), "not a fixed point: {text:?}");
    }
    // The same through a whole answer's headers: every kept value passes the same checks.
    let mut h = axum::http::HeaderMap::new();
    for v in values {
        h.append(axum::http::header::SET_COOKIE, v);
    }
    filter_set_cookies(&mut h, "ses-01jaaaaaaaaaaaaaaaaaaaaaaa", &keep);
    for v in h.get_all(axum::http::header::SET_COOKIE) {
        let out = v.to_str().unwrap_or_default();
        let (name, value, path, domain) = browser_cookie(out);
        assert!(!domain && (!named_like_ours(&name, &value) || (accept && path.as_deref() == Some(own))), "{out:?}");
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), written out here apart from the relay's own test.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The headers a message's `Connection` names (for this hop only), in lower case.
fn connection_named(h: &axum::http::HeaderMap) -> Vec<String> {
    h.get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The relay's request and answer header handling. First byte: bit 0, does a `gshare_session`
/// value verify; the rest is header lines `name: value`. What the relay forwards holds no
/// credential or identity header a client may not set, no hop-by-hop header (but the upgrade's
/// own), nothing the request's `Connection` names, and no cookie of the server's but a session
/// cookie that verifies; an answer loses every hop-by-hop header (a 101 all but its `Connection`
/// and `Upgrade`). The host a request was sent to has no port and no userinfo.
pub fn relay_headers(data: &[u8]) {
    use crate::sessions::relay::{
        TEST_HOST, forward_headers, is_client_forbidden, is_upgrade, keep_upgrade_headers, request_host, scan_cookies,
        strip_hop_by_hop,
    };
    use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
    let Some((&mode, rest)) = data.split_first() else { return };
    let accept = mode & 1 == 1;
    let mut h = HeaderMap::new();
    for line in rest.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        h.append(name, value);
    }
    let upgrade = is_upgrade(&h);
    let named = connection_named(&h);
    // The relay's one pass over the cookies reads them as the guard does.
    let scan = scan_cookies(&h, Some(crate::auth::cookies::CONSOLE_COOKIE), &|_| accept);
    assert_eq!(scan.session, crate::auth::cookies::cookie(&h, crate::sessions::connect::COOKIE));
    assert_eq!(scan.console, crate::auth::cookies::cookie(&h, crate::auth::cookies::CONSOLE_COOKIE));
    let out = forward_headers(h.clone(), upgrade, &|_| accept);
    for (name, value) in &out {
        let n = name.as_str();
        if name == header::HOST {
            assert_eq!(value, TEST_HOST, "Host is the session's");
            continue;
        }
        assert!(!is_client_forbidden(n), "forwarded {n}");
        if upgrade && (name == header::CONNECTION || name == header::UPGRADE) {
            continue;
        }
        assert!(!HOP_BY_HOP.contains(&n), "forwarded hop-by-hop {n}");
        assert!(!named.iter().any(|c| c == n), "forwarded {n}, which Connection names");
        if name == header::COOKIE {
            for c in value.to_str().unwrap_or_default().split(';') {
                let (cn, cv) = c.split_once('=').unwrap_or((c, ""));
                let cn = cn.trim();
                if named_like_ours(cn, cv) {
                    assert!(cn == crate::sessions::connect::COOKIE && accept, "forwarded cookie {cn}");
                }
            }
        }
    }
    if upgrade {
        assert_eq!(out.get(header::CONNECTION).map(HeaderValue::as_bytes), Some(&b"upgrade"[..]));
    }
    let mut answer = h.clone();
    strip_hop_by_hop(&mut answer);
    for n in HOP_BY_HOP.iter().copied().chain(named.iter().map(String::as_str)) {
        assert!(!answer.contains_key(n), "answer kept {n}");
    }
    // A 101 keeps its `Connection` and `Upgrade`, and nothing else hop-by-hop.
    let mut switched = h.clone();
    keep_upgrade_headers(&mut switched);
    for n in HOP_BY_HOP.iter().copied().chain(named.iter().map(String::as_str)) {
        let kept = matches!(n, "connection" | "upgrade");
        assert_eq!(switched.contains_key(n), kept && h.contains_key(n), "101 answer and {n}");
    }
    for (name, _) in &h {
        let hop = HOP_BY_HOP.contains(&name.as_str()) || named.iter().any(|c| c == name.as_str());
        assert_eq!(switched.contains_key(name), !hop || matches!(name.as_str(), "connection" | "upgrade"), "{name}");
    }
    let mut req = axum::extract::Request::new(axum::body::Body::empty());
    *req.headers_mut() = h;
    if let Some(host) = request_host(&req) {
        assert!(!host.contains('@') && !host.contains('/') && !host.ends_with('.'), "host {host:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz entry points run on the seeds of `fuzz/seeds/` (so they keep compiling and
    /// passing their own checks in the normal test run).
    #[test]
    fn seeds_pass() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        type Entry = fn(&[u8]);
        let targets: [(&str, Entry); 7] = [
            ("kubeconfig", kubeconfig),
            ("jwt", jwt),
            ("internal_body", internal_body),
            ("hami_node", hami_node),
            ("verify_uri", verify_uri),
            ("set_cookie", set_cookie),
            ("relay_headers", relay_headers),
        ];
        for (name, run) in targets {
            let dir = seeds.join(name);
            let mut n = 0;
            for entry in std::fs::read_dir(&dir).unwrap() {
                run(&std::fs::read(entry.unwrap().path()).unwrap());
                n += 1;
            }
            assert!(n > 0, "no seeds in {}", dir.display());
        }
    }

    type Entry = fn(&[u8]);
    const TARGETS: [(&str, Entry); 7] = [
        ("kubeconfig", kubeconfig),
        ("jwt", jwt),
        ("internal_body", internal_body),
        ("hami_node", hami_node),
        ("verify_uri", verify_uri),
        ("set_cookie", set_cookie),
        ("relay_headers", relay_headers),
    ];

    /// Feeds `run` mutations of the seeds of `fuzz/seeds/<name>/` (bit flips, byte changes,
    /// inserts, cuts, splices with another seed) from a xorshift generator started at `seed`,
    /// while `more(executions)` says so. A panicking input is written to
    /// `fuzz/artifacts/<name>/mutated-crash` before the panic goes on. Returns the executions.
    fn mutate_seeds(name: &str, run: Entry, seed: u64, mut more: impl FnMut(usize) -> bool) -> usize {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(dir.join("seeds").join(name))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        inputs.sort();
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut done = 0;
        while more(done) {
            let mut data = inputs[done % inputs.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = if data.is_empty() { 0 } else { (next() as usize) % data.len() };
                match next() % 6 {
                    0 if !data.is_empty() => data[at] ^= 1 << (next() % 8),
                    1 if !data.is_empty() => data[at] = next() as u8,
                    2 => data.insert(at, [b'/', b'.', b'%', b'"', b'{', b'}', b'\0', 0xff][next() as usize % 8]),
                    3 => data.truncate(at),
                    4 if !data.is_empty() => drop(data.remove(at)),
                    _ => {
                        let other = &inputs[next() as usize % inputs.len()];
                        let from = if other.is_empty() { 0 } else { next() as usize % other.len() };
                        let tail = data.split_off(at);
                        data.extend(other[from..].iter().take(64));
                        data.extend(tail);
                    }
                }
            }
            if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
                let out = dir.join("artifacts").join(name);
                let _ = std::fs::create_dir_all(&out);
                let _ = std::fs::write(out.join("mutated-crash"), &data);
                std::panic::resume_unwind(panic);
            }
            done += 1;
        }
        done
    }

    /// A brief deterministic fuzz run for CI (cargo-fuzz needs nightly flags and minutes): every
    /// seed of `fuzz/seeds/` mutated 150 times through the same entry points.
    #[test]
    fn mutated_seeds_pass() {
        for (name, run) in TARGETS {
            let seeds =
                std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(name))
                    .unwrap()
                    .count();
            assert_eq!(mutate_seeds(name, run, 0x9e37_79b9_7f4a_7c15, |n| n < seeds * 150), seeds * 150);
        }
    }

    /// The same mutations for as long as asked, without coverage guidance (for machines where the
    /// instrumented cargo-fuzz build is not available):
    /// `GSHARE_FUZZ_TARGET=jwt GSHARE_FUZZ_SECONDS=600 cargo test --lib fuzzing::tests::soak -- --ignored --nocapture`
    #[test]
    #[ignore = "runs for GSHARE_FUZZ_SECONDS"]
    fn soak() {
        let seconds: u64 = std::env::var("GSHARE_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
        let only = std::env::var("GSHARE_FUZZ_TARGET").ok();
        for (name, run) in TARGETS.into_iter().filter(|(n, _)| only.as_deref().is_none_or(|o| o == *n)) {
            let start = std::time::Instant::now();
            let seed =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
            let done = mutate_seeds(name, run, seed, |_| start.elapsed().as_secs() < seconds);
            println!("soak {name}: {} s, {done} executions, 0 crashes (seed {seed:#x})", start.elapsed().as_secs());
        }
    }

    /// Inputs the mutation run found that broke the harness's own checks (not the parsers): a
    /// routed path ending in `/`, and a decommissioned hostname that is not a DNS name (answered
    /// 202, acted on only when it is one).
    #[test]
    fn harness_regressions() {
        verify_uri(b"https://s.example.aom/proxy/lab/");
        verify_uri(b"/proxy/ses-1/\xff/proxy/ses-1/");
        internal_body(b"\x03{\"hostname\": \"Not_A.DNS name\"}");
    }

    #[test]
    fn a_minted_token_verifies_and_a_changed_one_does_not() {
        let k = jwt_keys().unwrap();
        assert!(k.authority.verify_uncached(&k.minted, k.authority.clock().now()).is_ok());
        // Mode 3 with no changes, then with one byte of the signature flipped.
        jwt(&[3]);
        jwt(&[3, 250, 1]);
    }
}
