//! The console: the web/ SPA embedded in the binary (built and precompressed by `build.rs`) and
//! served as the router's fallback. Unknown paths get index.html so the SPA can route them; the API
//! prefixes never do — they keep the JSON 404 envelope.

use std::borrow::Cow;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

use crate::http::error::{ApiError, ErrorCode};

#[derive(RustEmbed)]
#[folder = "$OUT_DIR/console"]
struct Assets;

/// First path segments that belong to the server, never to the SPA.
pub const RESERVED_PREFIXES: &[&str] = &["api", "internal", "proxy", ".well-known"];

/// No inline scripts or styles anywhere in the build (Vite emits only external files); the same
/// policy the security-headers layer gives every other response.
pub const CONTENT_SECURITY_POLICY: &str = crate::http::middleware::CONSOLE_CSP;

const INDEX: &str = "index.html";
/// Vite puts content-hashed files here; they never change under the same name.
const HASHED_DIR: &str = "assets/";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The router's fallback: an embedded file, index.html for client-side routes, or a JSON error.
pub async fn serve(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().trim_start_matches('/');
    let first = path.split('/').next().unwrap_or_default();
    if RESERVED_PREFIXES.contains(&first) {
        return ApiError::not_found("no such route").into_response();
    }
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            "the console only answers GET and HEAD",
        )
        .with_header(header::ALLOW, HeaderValue::from_static("GET, HEAD"))
        .into_response();
    }
    let key = match path {
        "" => INDEX,
        p if is_variant(p) => return ApiError::not_found("no such file").into_response(),
        p if Assets::get(p).is_some() => p,
        // A hashed file that no longer exists must not turn into HTML (the browser would run it as JS).
        p if p.starts_with(HASHED_DIR) => return ApiError::not_found("no such file").into_response(),
        _ => INDEX,
    };
    respond(key, &headers)
}

fn is_variant(path: &str) -> bool {
    path.ends_with(".gz") || path.ends_with(".br")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

impl Encoding {
    fn suffix(self) -> &'static str {
        match self {
            Encoding::Brotli => ".br",
            Encoding::Gzip => ".gz",
            Encoding::Identity => "",
        }
    }
    fn header(self) -> Option<&'static str> {
        match self {
            Encoding::Brotli => Some("br"),
            Encoding::Gzip => Some("gzip"),
            Encoding::Identity => None,
        }
    }
}

fn respond(key: &str, headers: &HeaderMap) -> Response {
    let Some(file) = Assets::get(key) else {
        // Only reachable if the build staged no index.html, which build.rs refuses.
        return ApiError::not_found("the console is not part of this build").into_response();
    };
    let accept = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut chosen = (Encoding::Identity, file.data);
    for enc in [Encoding::Brotli, Encoding::Gzip] {
        if accepts(accept, enc)
            && let Some(variant) = Assets::get(&format!("{key}{}", enc.suffix()))
        {
            chosen = (enc, variant.data);
            break;
        }
    }
    let (encoding, data) = chosen;
    let hash = file.metadata.sha256_hash();
    let etag = format!("\"{}{}\"", hex::encode(&hash[..12]), encoding.suffix());

    let mut res = if if_none_match(headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let body = match data {
            Cow::Borrowed(b) => Bytes::from_static(b),
            Cow::Owned(v) => Bytes::from(v),
        };
        let mut res = Response::new(Body::from(body));
        let h = res.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(key)));
        if let Some(enc) = encoding.header() {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(enc));
        }
        res
    };
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if key.starts_with(HASHED_DIR) { IMMUTABLE } else { "no-cache" }),
    );
    security_headers(h);
    res
}

/// The headers every console response carries.
pub fn security_headers(h: &mut HeaderMap) {
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
}

/// Whether `Accept-Encoding` allows `enc` (q=0 refuses; `*` counts).
fn accepts(accept: &str, enc: Encoding) -> bool {
    let Some(name) = enc.header() else { return true };
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .filter_map(|q| q.trim().parse::<f32>().ok())
            .next()
            .unwrap_or(1.0);
        if coding.eq_ignore_ascii_case(name) || (name == "gzip" && coding.eq_ignore_ascii_case("x-gzip")) {
            return q > 0.0;
        }
        if coding == "*" {
            star = Some(q > 0.0);
        }
    }
    star.unwrap_or(false)
}

/// `If-None-Match` with weak comparison (RFC 9110 §13.1.2).
fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').map(str::trim).any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag))
}

fn content_type(key: &str) -> &'static str {
    let ext = key.rsplit('.').next().unwrap_or_default();
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::Router;
    use axum::body::to_bytes;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn call(router: &Router, method: Method, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        router.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap()
    }

    fn console_only() -> Router {
        Router::new().fallback(serve)
    }

    fn hashed_js() -> String {
        Assets::iter()
            .map(|p| p.into_owned())
            .find(|p| p.starts_with(HASHED_DIR) && p.ends_with(".js"))
            .expect("the build has a hashed script")
    }

    #[tokio::test]
    async fn index_for_root_and_client_routes_with_security_headers() {
        let r = console_only();
        for path in ["/", "/clusters", "/clusters/clu_01J/edit", "/login?next=/audit"] {
            let res = call(&r, Method::GET, path, &[]).await;
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            let h = res.headers();
            assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert!(h[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("frame-ancestors 'none'"));
            assert!(!h[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("unsafe-inline"));
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
            let body = to_bytes(res.into_body(), 1 << 20).await.unwrap();
            let html = String::from_utf8_lossy(&body);
            assert!(html.contains("<div id=\"app\">"), "{html}");
            // No inline script: every <script> has a src.
            assert!(html.match_indices("<script").all(|(i, _)| html[i..].split('>').next().unwrap().contains("src=")));
        }
    }

    #[tokio::test]
    async fn hashed_assets_are_immutable_compressed_and_revalidate() {
        let r = console_only();
        let js = format!("/{}", hashed_js());
        let plain = call(&r, Method::GET, &js, &[]).await;
        assert_eq!(plain.status(), StatusCode::OK);
        assert_eq!(plain.headers()[header::CACHE_CONTROL], IMMUTABLE);
        assert_eq!(plain.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        let plain_tag = plain.headers()[header::ETAG].to_str().unwrap().to_string();

        let br = call(&r, Method::GET, &js, &[("accept-encoding", "gzip, deflate, br")]).await;
        assert_eq!(br.headers()[header::CONTENT_ENCODING], "br");
        assert_eq!(br.headers()[header::VARY], "Accept-Encoding");
        let br_tag = br.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_ne!(br_tag, plain_tag, "each representation has its own tag");

        let gz = call(&r, Method::GET, &js, &[("accept-encoding", "gzip, br;q=0")]).await;
        assert_eq!(gz.headers()[header::CONTENT_ENCODING], "gzip");
        let body = to_bytes(gz.into_body(), 1 << 22).await.unwrap();
        assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzip stream");

        let again = call(&r, Method::GET, &js, &[("accept-encoding", "br"), ("if-none-match", &br_tag)]).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], br_tag.as_str());
        assert!(to_bytes(again.into_body(), 1024).await.unwrap().is_empty());

        let weak = format!("\"other\", W/{plain_tag}");
        let again = call(&r, Method::GET, &js, &[("if-none-match", &weak)]).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        let other = call(&r, Method::GET, &js, &[("if-none-match", "\"nope\"")]).await;
        assert_eq!(other.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn missing_hashed_files_and_variants_are_404_not_html() {
        let r = console_only();
        for path in ["/assets/index-gone.js", "/index.html.gz", "/favicon.svg.br"] {
            let res = call(&r, Method::GET, path, &[]).await;
            assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
        }
        let res = call(&r, Method::POST, "/clusters", &[]).await;
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(res.headers()[header::ALLOW], "GET, HEAD");
    }

    #[tokio::test]
    async fn server_prefixes_never_fall_through_in_the_real_router() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let config = crate::config::Config::for_data_dir(&dir.path().join("data"), &[]).unwrap();
        let app = crate::App::open(config, crate::clock::Clock::system()).await.unwrap();
        let r = crate::http::router(app);
        for path in
            ["/api/v1/nope", "/api", "/api/", "/internal/x", "/proxy/abc/code", "/.well-known/nope", "//api/v1/x"]
        {
            for method in [Method::GET, Method::POST] {
                let res = call(&r, method.clone(), path, &[("accept", "text/html")]).await;
                assert_eq!(res.status(), StatusCode::NOT_FOUND, "{method} {path}");
                assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json", "{method} {path}");
                let body: serde_json::Value =
                    serde_json::from_slice(&to_bytes(res.into_body(), 1 << 20).await.unwrap()).unwrap();
                assert_eq!(body["error"]["code"], "not_found", "{method} {path}");
            }
        }
        let res = call(&r, Method::GET, "/clusters", &[]).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let res = call(&r, Method::GET, "/.well-known/gshare-internal-jwks.json", &[]).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    #[test]
    fn accept_encoding_parsing() {
        assert!(accepts("gzip, br", Encoding::Brotli));
        assert!(!accepts("gzip", Encoding::Brotli));
        assert!(!accepts("br;q=0, gzip", Encoding::Brotli));
        assert!(accepts("*", Encoding::Gzip));
        assert!(!accepts("*;q=0", Encoding::Gzip));
        assert!(!accepts("", Encoding::Gzip));
        assert!(accepts("", Encoding::Identity));
    }
}
