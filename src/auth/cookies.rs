//! The console's cookies and the CSRF token bound to them: the names and the derivation that both
//! the sign-in routes (`login`, which sets them) and the request guard (`guard`, which reads them)
//! use. It depends on neither, so neither depends on the other through it.

use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The console's session cookie: the access token itself, `HttpOnly`.
pub const CONSOLE_COOKIE: &str = "gshare_console";
/// A readable copy of the session's CSRF token, for the console to echo (double submit).
pub const CSRF_COOKIE: &str = "gshare_csrf";
/// Under TLS the console's cookies carry the `__Host-` prefix: a browser then takes them only
/// with `Secure`, `Path=/` and no `Domain`, so no other host (a session domain that is a sibling
/// of the console's, say) can set or shadow them.
pub const HOST_PREFIX: &str = "__Host-";

/// The names the console's cookies have on this server: (session, CSRF).
pub fn console_cookie_names(secure: bool) -> (&'static str, &'static str) {
    if secure { ("__Host-gshare_console", "__Host-gshare_csrf") } else { (CONSOLE_COOKIE, CSRF_COOKIE) }
}

/// The header cookie-authenticated state-changing requests must carry.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The CSRF token bound to a session: derived from the token's `jti`, which only the holder of
/// the (HttpOnly) cookie can read, so another site can neither read nor forge it.
pub fn csrf_token_for(jti: &str) -> String {
    let digest = Sha256::digest(format!("gshare-csrf\0{jti}").as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..24])
}

/// A cookie's value from all `Cookie` header lines; the first occurrence wins.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| cookie_value(v))
}

/// A cookie's value as [`cookie`] reads it from what follows `name=`: without surrounding blanks
/// and quotes; `None` when that leaves nothing.
pub fn cookie_value(raw: &str) -> Option<&str> {
    Some(raw.trim().trim_matches('"')).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn cookies_across_lines() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; gshare_console=tok".parse().unwrap());
        h.append(header::COOKIE, "gshare_console=second".parse().unwrap());
        assert_eq!(cookie(&h, CONSOLE_COOKIE), Some("tok"));
        assert_eq!(cookie(&h, "a"), Some("1"));
        assert_eq!(cookie(&h, "missing"), None);
    }

    #[test]
    fn names_under_tls_carry_the_host_prefix() {
        assert_eq!(console_cookie_names(false), (CONSOLE_COOKIE, CSRF_COOKIE));
        let (session, csrf) = console_cookie_names(true);
        assert_eq!(session, format!("{HOST_PREFIX}{CONSOLE_COOKIE}"));
        assert_eq!(csrf, format!("{HOST_PREFIX}{CSRF_COOKIE}"));
    }

    #[test]
    fn csrf_is_bound_to_the_session() {
        assert_ne!(csrf_token_for("a"), csrf_token_for("b"));
        assert_eq!(csrf_token_for("a"), csrf_token_for("a"));
    }
}
