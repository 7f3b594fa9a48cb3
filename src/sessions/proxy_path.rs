//! Which session a `/proxy/<cr>/…` request is for, decided the way the session ingress will route
//! it — and refused when that is not certain.
//!
//! nginx matches `location`s against the *normalised* path: percent-escapes decoded, `//` merged,
//! `.` and `..` resolved. The forward-auth check (`GET /internal/connect/verify`) is handed the raw
//! `$request_uri` instead, so reading the session from the raw text lets a cookie for session A
//! open `/proxy/A/../B/lab`, `/proxy//B/lab` or `/proxy/A/%2e%2e/B/lab`, all of which nginx routes to
//! session B. [`route`] therefore normalises what is unambiguous (unreserved escapes such as `%2D`,
//! repeated slashes) and refuses everything whose routing depends on a proxy's normalisation rules:
//! dot-segments (raw or escaped), escaped `/` or `\`, backslashes, control and non-ASCII bytes,
//! malformed escapes, a fragment, a `/proxy/` prefix or session name in another letter case (regex
//! locations are case-insensitive) and paths without a `/proxy/<cr>/` prefix. The verify endpoint and
//! the `/proxy/` relay both use it, and the relay forwards [`Routed::path`], never the raw text.
//!
//! A pure function over a string, so it can be fuzzed.

/// A request target whose session is certain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The GShareSession name (`ses-…`) the path routes to.
    pub cr: String,
    /// The normalised path, `/proxy/<cr>/…` (a trailing `/` kept).
    pub path: String,
    /// The raw query after `?` (`None` when there is no `?`).
    pub query: Option<String>,
}

impl Routed {
    /// `path?query`, as the relay forwards it.
    pub fn path_and_query(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }

    /// Whether [`Self::path_and_query`] is `target` (an origin-form target that needed no
    /// normalising), read without making it: the relay then forwards the request's own, already
    /// parsed, path and query.
    pub fn is_target(&self, target: &str) -> bool {
        match &self.query {
            None => target == self.path,
            Some(q) => {
                target.len() == self.path.len() + 1 + q.len()
                    && target.starts_with(self.path.as_str())
                    && target.as_bytes()[self.path.len()] == b'?'
                    && target.ends_with(q.as_str())
            }
        }
    }
}

/// Why a request target was refused (the `reason` a 401 or 400 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Neither `/…` nor `http(s)://host/…`.
    NotAPath,
    /// A control character (NUL, CR, LF, TAB, DEL…), a space or a non-ASCII byte.
    ControlOrNonAscii,
    /// A `#`: browsers never send one, proxies differ on what follows it.
    Fragment,
    /// `\` raw or escaped (`%5C`): some proxies treat it as `/`.
    Backslash,
    /// `%2F`: whether it separates segments depends on the proxy.
    EncodedSlash,
    /// `%` not followed by two hex digits.
    BadEscape,
    /// A `.` or `..` segment (or one made only of dots), raw or escaped (`%2e%2e`).
    DotSegment,
    /// `/PROXY/` or an upper-case session name: case-insensitive regex locations may route it.
    LetterCase,
    /// No `/proxy/<cr>/` prefix.
    NotProxied,
    /// The segment after `/proxy/` is not a GShareSession name (DNS label).
    BadSessionName,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAPath => "uri_not_a_path",
            Self::ControlOrNonAscii => "uri_control_or_non_ascii",
            Self::Fragment => "uri_fragment",
            Self::Backslash => "uri_backslash",
            Self::EncodedSlash => "uri_encoded_slash",
            Self::BadEscape => "uri_bad_escape",
            Self::DotSegment => "uri_dot_segment",
            Self::LetterCase => "uri_letter_case",
            Self::NotProxied => "uri_not_proxied",
            Self::BadSessionName => "uri_bad_session_name",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Self::NotAPath => "the original URI is neither a path nor an http(s) URL",
            Self::ControlOrNonAscii => "the original URI has a control, space or non-ASCII character",
            Self::Fragment => "the original URI has a fragment (#)",
            Self::Backslash => "the original URI has a backslash",
            Self::EncodedSlash => "the original URI has an escaped slash (%2F)",
            Self::BadEscape => "the original URI has a malformed %-escape",
            Self::DotSegment => "the original URI has a dot-segment (. or .., raw or escaped)",
            Self::LetterCase => "the /proxy/<session>/ prefix must be lower-case",
            Self::NotProxied => "the original URI is not under /proxy/<session>/",
            Self::BadSessionName => "the segment after /proxy/ is not a session name",
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Decodes `%XX` of unreserved characters (RFC 3986 §2.3: equivalent either way) and upper-cases
/// the hex of every other escape; refuses escapes that could change the path's structure.
fn decode_unreserved(path: &str) -> Result<String, Refusal> {
    let b = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(char::from(b[i]));
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) else {
            return Err(Refusal::BadEscape);
        };
        let v = hi * 16 + lo;
        match v {
            b'/' => return Err(Refusal::EncodedSlash),
            b'\\' => return Err(Refusal::Backslash),
            0..=0x1f | 0x7f => return Err(Refusal::ControlOrNonAscii),
            v if is_unreserved(v) => out.push(char::from(v)),
            v => out.push_str(&format!("%{v:02X}")),
        }
        i += 3;
    }
    Ok(out)
}

fn is_session_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && !s.starts_with('-')
        && !s.ends_with('-')
        // Without early exit, so it is a vector loop (every relayed request asks).
        && s.bytes().fold(true, |ok, b| ok & (b.is_ascii_lowercase() | b.is_ascii_digit() | (b == b'-')))
}

/// A session name, or why the segment is not one (an upper-case name is refused as such).
fn check_session_name(cr: &str) -> Result<(), Refusal> {
    if is_session_name(cr) {
        return Ok(());
    }
    let lower = cr.to_ascii_lowercase();
    Err(if lower != cr && is_session_name(&lower) { Refusal::LetterCase } else { Refusal::BadSessionName })
}

/// The path and query of an origin-form target (`/…`) or of an `http(s)://host/…` URL.
fn origin_target(uri: &str) -> Result<&str, Refusal> {
    if uri.starts_with('/') {
        return Ok(uri);
    }
    let lower = uri.get(..8).unwrap_or(uri).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &uri[7..]
    } else if lower.starts_with("https://") {
        &uri[8..]
    } else {
        return Err(Refusal::NotAPath);
    };
    // The authority ends at the first `/` or `?`; a URL without a path is not proxied.
    match rest.find(['/', '?']) {
        _ if rest.is_empty() => Err(Refusal::NotAPath),
        Some(0) => Err(Refusal::NotAPath),
        Some(i) if rest.as_bytes()[i] == b'/' => Ok(&rest[i..]),
        _ => Err(Refusal::NotProxied),
    }
}

/// The session an original URI (`/proxy/<cr>/…?…`) or URL (`https://host/proxy/<cr>/…`) routes to.
pub fn route(uri: &str) -> Result<Routed, Refusal> {
    // What refuses a URI wherever it is, looked for in one pass without early exit (the compiler
    // makes it a vector loop: the relay routes every request through here); which one it was is
    // then decided in order: control and non-ASCII bytes first, then `#`, then `\`.
    let suspect = uri.bytes().fold(false, |acc, b| acc | (b <= b' ') | (b >= 0x7f) | (b == b'#') | (b == b'\\'));
    if suspect {
        if uri.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(Refusal::ControlOrNonAscii);
        }
        return Err(if uri.contains('#') { Refusal::Fragment } else { Refusal::Backslash });
    }
    let target = origin_target(uri)?;
    // Bytes are looked for by plain loops here, not `str` searches: their searcher costs more
    // than the short paths and segments it would find (the relay routes every request here).
    let (raw_path, query) = match target.bytes().position(|b| b == b'?') {
        Some(i) => (target.get(..i).unwrap_or_default(), Some(target.get(i + 1..).unwrap_or_default().to_string())),
        None => (target, None),
    };
    // Usually there is nothing to decode and no `//` to merge: the path as sent is the normal one,
    // and is read without a copy.
    let path = if raw_path.bytes().any(|b| b == b'%') {
        std::borrow::Cow::Owned(decode_unreserved(raw_path)?)
    } else {
        std::borrow::Cow::Borrowed(raw_path)
    };
    // The segments in one pass (the path starts with `/`): the first two, how many, and whether
    // any is empty before the end (a `//` to merge).
    let bytes = path.as_bytes();
    let (mut first, mut second, mut count, mut merged) = (0..0, 0..0, 0usize, false);
    let mut start = 1;
    while start <= bytes.len() {
        let end =
            bytes.get(start..).unwrap_or_default().iter().position(|&b| b == b'/').map_or(bytes.len(), |i| start + i);
        let segment = bytes.get(start..end).unwrap_or_default();
        if segment.is_empty() {
            merged |= end < bytes.len();
        } else if segment.iter().all(|&b| b == b'.') {
            return Err(Refusal::DotSegment);
        } else {
            match count {
                0 => first = start..end,
                1 => second = start..end,
                _ => {}
            }
            count += 1;
        }
        start = end + 1;
    }
    // Ranges between `/`s: always on character boundaries.
    let (first, second) = (path.get(first).unwrap_or_default(), path.get(second).unwrap_or_default());
    let trailing = path.ends_with('/');
    match first {
        "proxy" => {}
        s if s.eq_ignore_ascii_case("proxy") => return Err(Refusal::LetterCase),
        _ => return Err(Refusal::NotProxied),
    }
    if count < 2 {
        return Err(Refusal::NotProxied);
    }
    let cr = second;
    check_session_name(cr)?;
    if count == 2 && !trailing {
        return Err(Refusal::NotProxied);
    }
    // The path starts with `/` (see `target`); without `//` its non-empty segments joined are it.
    let normal = if merged {
        let mut normal = String::with_capacity(path.len());
        for s in path.split('/').filter(|s| !s.is_empty()) {
            normal.push('/');
            normal.push_str(s);
        }
        if trailing {
            normal.push('/');
        }
        normal
    } else {
        path.to_string()
    };
    Ok(Routed { cr: cr.to_string(), path: normal, query })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward form [`route`] had before it was made one pass (a `Vec` of segments,
    /// `join`): kept to check that the two agree.
    fn route_reference(uri: &str) -> Result<Routed, Refusal> {
        if uri.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(Refusal::ControlOrNonAscii);
        }
        if uri.contains('#') {
            return Err(Refusal::Fragment);
        }
        if uri.contains('\\') {
            return Err(Refusal::Backslash);
        }
        let target = origin_target(uri)?;
        let (raw_path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q.to_string())),
            None => (target, None),
        };
        let path = decode_unreserved(raw_path)?;
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if segments.iter().any(|s| s.bytes().all(|b| b == b'.')) {
            return Err(Refusal::DotSegment);
        }
        let trailing = path.ends_with('/');
        match segments.first() {
            Some(&"proxy") => {}
            Some(s) if s.eq_ignore_ascii_case("proxy") => return Err(Refusal::LetterCase),
            _ => return Err(Refusal::NotProxied),
        }
        let Some(cr) = segments.get(1) else { return Err(Refusal::NotProxied) };
        check_session_name(cr)?;
        if segments.len() == 2 && !trailing {
            return Err(Refusal::NotProxied);
        }
        let mut normal = format!("/{}", segments.join("/"));
        if trailing {
            normal.push('/');
        }
        Ok(Routed { cr: cr.to_string(), path: normal, query })
    }

    #[test]
    fn the_one_pass_route_agrees_with_the_straightforward_one() {
        let parts = [
            "/",
            "//",
            "proxy",
            "PROXY",
            "Proxy",
            "ses-a1",
            "SES-A1",
            "ses-b2",
            "-x",
            ".",
            "..",
            "...",
            "%2e",
            "%2E%2e",
            "%2F",
            "%2f",
            "%5C",
            "%41",
            "%7e",
            "%20",
            "%zz",
            "%",
            "?",
            "#",
            "\\",
            "a",
            "lab",
            "a.b",
            "?x=/../",
            "http://h",
            "HTTPS://h:1",
            "\t",
            "\u{e9}",
            "~",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200_000 {
            let n = 1 + next() % 8;
            let mut uri = String::new();
            for _ in 0..n {
                uri.push_str(parts[(next() % parts.len() as u64) as usize]);
            }
            assert_eq!(route(&uri), route_reference(&uri), "{uri:?}");
            let prefixed = format!("/proxy/ses-a1/{uri}");
            assert_eq!(route(&prefixed), route_reference(&prefixed), "{prefixed:?}");
        }
    }

    const A: &str = "ses-01jaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "ses-01jbbbbbbbbbbbbbbbbbbbbbbb";

    /// Every input and what it routes to: `Ok((cr, normalised path and query))` or the refusal.
    #[test]
    fn a_table_of_targets() {
        let ok = |cr: &str, pq: &str| -> Result<(String, String), Refusal> { Ok((cr.to_string(), pq.to_string())) };
        type Want = Result<(String, String), Refusal>;
        let cases: Vec<(String, Want)> = vec![
            // Plain paths and URLs.
            (format!("/proxy/{A}/lab"), ok(A, &format!("/proxy/{A}/lab"))),
            (format!("/proxy/{A}/code/"), ok(A, &format!("/proxy/{A}/code/"))),
            (format!("/proxy/{A}/"), ok(A, &format!("/proxy/{A}/"))),
            (
                format!("/proxy/{A}/lab?gshare_cnx=cnx_X.y&a=%2F"),
                ok(A, &format!("/proxy/{A}/lab?gshare_cnx=cnx_X.y&a=%2F")),
            ),
            (format!("/proxy/{A}/lab?"), ok(A, &format!("/proxy/{A}/lab?"))),
            (format!("https://s.example.com/proxy/{A}/lab"), ok(A, &format!("/proxy/{A}/lab"))),
            (format!("HTTP://s.example.com:8443/proxy/{A}/terminal/ws"), ok(A, &format!("/proxy/{A}/terminal/ws"))),
            // Merged slashes route where nginx routes them: to B.
            (format!("https://s/proxy//{B}/lab"), ok(B, &format!("/proxy/{B}/lab"))),
            (format!("//proxy///{B}//lab//x"), ok(B, &format!("/proxy/{B}/lab/x"))),
            // Unreserved escapes are decoded; others kept (hex upper-cased), never double-decoded.
            (format!("/proxy/{}/lab", B.replace('-', "%2d")), ok(B, &format!("/proxy/{B}/lab"))),
            (format!("/%70roxy/{B}/lab"), ok(B, &format!("/proxy/{B}/lab"))),
            (format!("/proxy/{A}/lab/a%20b%3f%252e"), ok(A, &format!("/proxy/{A}/lab/a%20b%3F%252e"))),
            (format!("/proxy/{A}/lab/file.txt/...x/a..b"), ok(A, &format!("/proxy/{A}/lab/file.txt/...x/a..b"))),
            // Dot-segments, raw and escaped, anywhere.
            (format!("/proxy/{A}/../{B}/lab"), Err(Refusal::DotSegment)),
            (format!("https://s/proxy/{A}/../{B}/lab"), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/%2e%2e/{B}/lab"), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/%2E%2e/{B}/lab"), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/.%2e/{B}/lab"), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/./lab"), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/lab/.."), Err(Refusal::DotSegment)),
            (format!("/proxy/{A}/lab/..."), Err(Refusal::DotSegment)),
            (format!("/./proxy/{A}/lab"), Err(Refusal::DotSegment)),
            // Escaped separators and backslashes.
            (format!("/proxy/{A}%2f..%2f{B}/lab"), Err(Refusal::EncodedSlash)),
            (format!("/proxy/{A}/lab%2F"), Err(Refusal::EncodedSlash)),
            (format!("/proxy/{A}/..\\{B}/lab"), Err(Refusal::Backslash)),
            (format!("/proxy/{A}/%5c{B}"), Err(Refusal::Backslash)),
            // Control, space, non-ASCII, NUL (raw and escaped), fragments, bad escapes.
            (format!("/proxy/{A}/lab\0"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/lab%00"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/lab%0a"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/l ab"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/l\tab"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/läb"), Err(Refusal::ControlOrNonAscii)),
            (format!("/proxy/{A}/lab#/../{B}"), Err(Refusal::Fragment)),
            (format!("/proxy/{A}/lab%"), Err(Refusal::BadEscape)),
            (format!("/proxy/{A}/lab%2"), Err(Refusal::BadEscape)),
            (format!("/proxy/{A}/lab%zz"), Err(Refusal::BadEscape)),
            // Letter case: regex locations are case-insensitive.
            (format!("/PROXY/{B}/lab"), Err(Refusal::LetterCase)),
            (format!("/proxy/{}/lab", B.to_uppercase()), Err(Refusal::LetterCase)),
            (format!("/proxy/{}/lab", B.replace('b', "%42")), Err(Refusal::LetterCase)),
            // Not under /proxy/<cr>/, or not a session name.
            (String::new(), Err(Refusal::NotAPath)),
            ("proxy/x/lab".into(), Err(Refusal::NotAPath)),
            ("ftp://s/proxy/x/lab".into(), Err(Refusal::NotAPath)),
            ("https://".into(), Err(Refusal::NotAPath)),
            ("https://s".into(), Err(Refusal::NotProxied)),
            (format!("https://s?/proxy/{A}/lab"), Err(Refusal::NotProxied)),
            ("/".into(), Err(Refusal::NotProxied)),
            ("/proxy".into(), Err(Refusal::NotProxied)),
            ("/proxy/".into(), Err(Refusal::NotProxied)),
            (format!("/proxy/{A}"), Err(Refusal::NotProxied)),
            (format!("/proxy/{A}?x=/proxy/{B}/lab"), Err(Refusal::NotProxied)),
            (format!("/api/v1/proxy/{A}/lab"), Err(Refusal::NotProxied)),
            (format!("/proxyx/{A}/lab"), Err(Refusal::NotProxied)),
            ("/proxy/-ses/lab".into(), Err(Refusal::BadSessionName)),
            ("/proxy/ses_1/lab".into(), Err(Refusal::BadSessionName)),
            ("/proxy/ses%3b1/lab".into(), Err(Refusal::BadSessionName)),
            (format!("/proxy/{}/lab", "a".repeat(254)), Err(Refusal::BadSessionName)),
        ];
        for (input, want) in cases {
            let got = route(&input).map(|r| (r.cr.clone(), r.path_and_query()));
            assert_eq!(got, want, "{input:?}");
        }
    }

    /// What is accepted is stable: routing the normalised form again gives the same answer.
    #[test]
    fn normal_forms_are_fixed_points() {
        for input in [
            format!("https://s/proxy//{B}/lab"),
            format!("/proxy/{}/code/x%41%7e?q=1", B.replace('-', "%2D")),
            format!("//proxy/{A}//terminal/"),
        ] {
            let r = route(&input).unwrap();
            assert!(!r.is_target(&input), "{input} was normalised");
            assert!(r.is_target(&r.path_and_query()));
            assert_eq!(route(&r.path_and_query()).unwrap(), r, "{input}");
        }
    }

    /// A target is forwarded as it came only when routing left it unchanged.
    #[test]
    fn only_an_unchanged_target_is_forwarded_as_sent() {
        for (input, as_sent) in [
            (format!("/proxy/{A}/lab?x=1&y=%2F"), true),
            (format!("/proxy/{A}/lab/"), true),
            (format!("/proxy/{A}/x%2A"), true),
            (format!("/proxy/{A}/x%2a"), false),
            (format!("/proxy/{A}/x%41"), false),
            (format!("/proxy/{A}//lab"), false),
            (format!("http://h/proxy/{A}/lab"), false),
        ] {
            let r = route(&input).unwrap();
            assert_eq!(r.is_target(&input), as_sent, "{input}");
            assert_eq!(r.path_and_query() == input, as_sent, "{input}");
            // Not fooled by a target of the right length and ends.
            let mut other = r.path_and_query().into_bytes();
            if let Some(q) = other.iter().position(|&b| b == b'?') {
                other[q] = b'&';
                assert!(!r.is_target(std::str::from_utf8(&other).unwrap()), "{input}");
            }
        }
    }
}
