//! Forward-auth binds every credential to the one session the ingress will route the request to,
//! the `/proxy/` relay forwards only what verify would route and carries no credential or
//! identity across, and two sessions stay open side by side in one browser. Each bypass class is
//! exercised through `GET /internal/connect/verify` and through the relay in front of an ingress
//! that authenticates the way ingress-nginx does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::sessions::{cluster, offering, operator, register, report, send, server, ts, verify};
use crate::support::TestServer;

const DOMAIN: &str = "sessions.lab.test";

struct Open {
    sid: String,
    cr: String,
    owner: String,
}

/// A server with two running sessions, owned by alice and bob.
async fn two_sessions(cluster_name: &str) -> (TestServer, gshare_fake_kube::FakeCluster, String, [Open; 2]) {
    let s = server().await;
    let c = cluster(cluster_name).await;
    let cid = register(&s, cluster_name, &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let mut open = Vec::new();
    for owner in ["alice", "bob"] {
        let v =
            send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": owner})), 201)
                .await;
        let (sid, cr) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
        report(&s, &op, &cr, json!({"phase": "Running", "ts": ts(&s)})).await;
        open.push(Open { sid, cr, owner: owner.into() });
    }
    let [a, b]: [Open; 2] = open.try_into().ok().unwrap();
    (s, c, cid, [a, b])
}

async fn token(s: &TestServer, sid: &str) -> String {
    let v =
        send(s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), Some(json!({"kind": "lab"})), 200)
            .await;
    v["token"].as_str().unwrap().to_string()
}

/// Opens a session as a browser does (redeems a token at its URL); returns `gshare_session=<jwt>`.
async fn cookie(s: &TestServer, o: &Open) -> String {
    let t = token(s, &o.sid).await;
    let res = verify(s, &[("X-Original-URL", &format!("http://{DOMAIN}/proxy/{}/lab?gshare_cnx={t}", o.cr))]).await;
    assert_eq!(res.status(), 200);
    let set = res.headers()["set-cookie"].to_str().unwrap().to_string();
    // Scoped to the session's own path, so a second session's cookie lives beside it.
    assert!(set.contains(&format!("; Path=/proxy/{}/;", o.cr)), "{set}");
    set.split(';').next().unwrap().to_string()
}

async fn outcome(res: reqwest::Response) -> (u16, String, String) {
    let status = res.status().as_u16();
    let session = res.headers().get("x-gshare-session").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    let reason = body["error"]["details"]["reason"].as_str().unwrap_or_default().to_string();
    (status, session, reason)
}

#[tokio::test]
async fn verify_binds_a_credential_to_the_session_the_ingress_routes_to() {
    let (s, _c, _cid, [a, b]) = two_sessions("gpu-fa").await;
    let ca = cookie(&s, &a).await;
    let cb = cookie(&s, &b).await;
    let (ar, br) = (a.cr.as_str(), b.cr.as_str());
    let url = |path: &str| format!("http://{DOMAIN}{path}");

    // Each case: alice's cookie and a request the ingress routes to bob's session (or cannot
    // route with certainty). None may answer 200; each names why.
    let lab_b = format!("/proxy/{br}/lab");
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, &'a str);
    let cases: Vec<Case> = vec![
        ("merged slashes (URL)", vec![("X-Original-URL", url(&format!("/proxy//{br}/lab")))], "other_session"),
        ("merged slashes (URI)", vec![("X-Original-URI", format!("//proxy///{br}/lab"))], "other_session"),
        ("dot-segments", vec![("X-Original-URL", url(&format!("/proxy/{ar}/../{br}/lab")))], "uri_dot_segment"),
        ("dot-segments (URI)", vec![("X-Original-URI", format!("/proxy/{ar}/../{br}/lab"))], "uri_dot_segment"),
        (
            "encoded dots %2e%2e",
            vec![("X-Original-URL", url(&format!("/proxy/{ar}/%2e%2e/{br}/lab")))],
            "uri_dot_segment",
        ),
        ("encoded dots %2E%2e/", vec![("X-Original-URI", format!("/proxy/{ar}/%2E%2e/{br}/lab"))], "uri_dot_segment"),
        ("mixed dots .%2e", vec![("X-Original-URI", format!("/proxy/{ar}/.%2e/{br}/lab"))], "uri_dot_segment"),
        ("encoded slash %2f", vec![("X-Original-URI", format!("/proxy/{ar}%2f..%2f{br}/lab"))], "uri_encoded_slash"),
        ("encoded backslash", vec![("X-Original-URI", format!("/proxy/{ar}/..%5c{br}/lab"))], "uri_backslash"),
        ("backslash", vec![("X-Original-URI", format!("/proxy/{ar}/..\\{br}/lab"))], "uri_backslash"),
        (
            "encoded NUL",
            vec![("X-Original-URI", format!("/proxy/{ar}/x%00/../../{br}/lab"))],
            "uri_control_or_non_ascii",
        ),
        ("fragment", vec![("X-Original-URI", format!("/proxy/{ar}/lab#/../../{br}/lab"))], "uri_fragment"),
        ("letter case", vec![("X-Original-URI", format!("/PROXY/{br}/lab"))], "uri_letter_case"),
        (
            "URI and URL disagree (a client-sent X-Original-URI)",
            vec![("X-Original-URI", format!("/proxy/{ar}/lab")), ("X-Original-URL", url(&lab_b))],
            "uri_conflict",
        ),
        (
            "duplicate X-Original-URL",
            vec![("X-Original-URL", url(&lab_b)), ("X-Original-URL", url(&format!("/proxy/{ar}/lab")))],
            "uri_conflict",
        ),
        (
            "duplicate X-Original-URI",
            vec![("X-Original-URI", format!("/proxy/{ar}/lab")), ("X-Original-URI", format!("/proxy/{ar}/lab"))],
            "uri_conflict",
        ),
        ("no URI header", vec![], "uri_missing"),
        ("not under /proxy/", vec![("X-Original-URI", "/api/v1/sessions".into())], "uri_not_proxied"),
        ("no path after the session", vec![("X-Original-URI", format!("/proxy/{ar}"))], "uri_not_proxied"),
        ("URL without a path", vec![("X-Original-URL", format!("http://{DOMAIN}"))], "uri_not_proxied"),
    ];
    let mut wrong = Vec::new();
    for (what, headers, want) in &cases {
        let mut h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        h.push(("Cookie", &ca));
        let got = outcome(verify(&s, &h).await).await;
        if got != (401, String::new(), want.to_string()) {
            wrong.push(format!("{what}: {got:?}, want 401 {want}"));
        }
    }
    assert!(wrong.is_empty(), "bypasses:\n{}", wrong.join("\n"));

    // The same normalisation routes bob's own cookie where nginx sends it; alice's opens only alice's.
    let ok =
        outcome(verify(&s, &[("Cookie", &cb), ("X-Original-URL", &url(&format!("/proxy//{br}/lab")))]).await).await;
    assert_eq!(ok, (200, b.sid.clone(), String::new()));
    let both = [("X-Original-URI", format!("/proxy/{ar}/lab")), ("X-Original-URL", url(&format!("/proxy//{ar}//lab")))];
    let h: Vec<(&str, &str)> = both.iter().map(|(k, v)| (*k, v.as_str())).chain([("Cookie", ca.as_str())]).collect();
    assert_eq!(outcome(verify(&s, &h).await).await, (200, a.sid.clone(), String::new()), "URI and URL agree");

    // A connection token opens only its session too, and a refused URI does not spend it.
    let t = token(&s, &a.sid).await;
    let dotted = url(&format!("/proxy/{br}/../{ar}/lab?gshare_cnx={t}"));
    assert_eq!(outcome(verify(&s, &[("X-Original-URL", &dotted)]).await).await.2, "uri_dot_segment");
    assert_eq!(outcome(verify(&s, &[("X-Gshare-Cnx", &t)]).await).await.2, "uri_missing");
    let other = url(&format!("/proxy//{br}/lab"));
    assert_eq!(outcome(verify(&s, &[("X-Gshare-Cnx", &t), ("X-Original-URL", &other)]).await).await.2, "other_session");
    let t = token(&s, &a.sid).await;
    let q = s.url(&format!("/internal/connect/verify?token={t}"));
    let res = s.client.get(q).header("X-Original-URL", url(&lab_b)).send().await.unwrap();
    assert_eq!(outcome(res).await.2, "other_session", "?token= is bound to the routed session too");
    let t = token(&s, &a.sid).await;
    let refused = s.client.get(s.url(&format!("/internal/connect/verify?token={t}")));
    let res = refused.header("X-Original-URI", format!("/proxy/{ar}/%2e%2e/{br}/lab")).send().await.unwrap();
    assert_eq!(outcome(res).await.2, "uri_dot_segment");
    let res = s.client.get(s.url(&format!("/internal/connect/verify?token={t}")));
    let res = res.header("X-Original-URI", format!("/proxy/{ar}/lab")).send().await.unwrap();
    assert_eq!(outcome(res).await.0, 200, "the token was not spent by the refused request");
    s.stop().await;
}

#[tokio::test]
async fn two_sessions_stay_open_in_one_browser() {
    let (s, _c, _cid, [a, b]) = two_sessions("gpu-fb").await;
    let ca = cookie(&s, &a).await;
    let cb = cookie(&s, &b).await;
    // A browser sends every cookie whose path matches; on a shared path, both, in either order.
    for jar in [format!("{ca}; {cb}"), format!("{cb}; {ca}")] {
        for o in [&a, &b] {
            let url = format!("http://{DOMAIN}/proxy/{}/lab", o.cr);
            let res = verify(&s, &[("Cookie", &jar), ("X-Original-URL", &url)]).await;
            assert_eq!(outcome(res).await, (200, o.sid.clone(), String::new()), "{jar}");
        }
    }
    // Split over two Cookie headers (HTTP/2 does that) as well.
    let code_b = format!("/proxy/{}/code/", b.cr);
    let res = verify(&s, &[("Cookie", &ca), ("Cookie", &cb), ("X-Original-URI", &code_b)]).await;
    assert_eq!(outcome(res).await.1, b.sid);
    // Only its own session's cookie: bob's alone does not open alice's.
    let lab_a = format!("/proxy/{}/lab", a.cr);
    let res = verify(&s, &[("Cookie", &cb), ("X-Original-URI", &lab_a)]).await;
    assert_eq!(outcome(res).await, (401, String::new(), "other_session".into()));
    s.stop().await;
}

/// A stand-in for ingress-nginx with `auth-url` set to this server's verify: every request is
/// first checked by a subrequest carrying the client's headers plus `X-Original-URL`
/// (`$scheme://$http_host$request_uri`); a 401 goes back as it is; otherwise the app answers with
/// what it received, and the auth response's `Set-Cookie` is added (`auth_request_set` +
/// `add_header`). The app also tries to set the console's cookies.
struct Ingress {
    verify_url: String,
    client: reqwest::Client,
    hits: AtomicUsize,
}

async fn ingress_handler(State(st): State<Arc<Ingress>>, req: axum::extract::Request) -> Response {
    st.hits.fetch_add(1, Ordering::SeqCst);
    let uri = req.uri().to_string();
    let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let mut sub = st.client.get(&st.verify_url);
    for (k, v) in req.headers() {
        if !matches!(k.as_str(), "host" | "content-length" | "x-original-url") {
            sub = sub.header(k, v);
        }
    }
    let auth = sub.header("X-Original-URL", format!("http://{host}{uri}")).send().await.unwrap();
    let status = auth.status().as_u16();
    let set_cookie = auth.headers().get("set-cookie").cloned();
    let authed_session = auth.headers().get("x-gshare-session").cloned();
    let auth_body = auth.bytes().await.unwrap();
    if status != 200 {
        let mut h = HeaderMap::new();
        h.insert("content-type", "application/json".parse().unwrap());
        return (StatusCode::from_u16(status).unwrap(), h, auth_body).into_response();
    }
    let mut seen = serde_json::Map::new();
    for (k, v) in req.headers() {
        let e = seen.entry(k.as_str()).or_insert_with(|| json!([]));
        e.as_array_mut().unwrap().push(json!(v.to_str().unwrap_or("<bytes>")));
    }
    let mut h = HeaderMap::new();
    for c in ["gshare_console=APP; Path=/", "gshare_csrf=APP; Path=/", "jupyter=1; Path=/"] {
        h.append("set-cookie", c.parse().unwrap());
    }
    if let Some(c) = set_cookie {
        h.append("set-cookie", c);
    }
    if let Some(sid) = authed_session {
        h.insert("x-authed-session", sid);
    }
    (h, axum::Json(json!({"uri": uri, "headers": seen}))).into_response()
}

async fn auth_ingress(s: &TestServer) -> (std::net::SocketAddr, Arc<Ingress>) {
    let st = Arc::new(Ingress {
        verify_url: s.url("/internal/connect/verify"),
        client: s.client.clone(),
        hits: AtomicUsize::new(0),
    });
    let app = axum::Router::new().fallback(ingress_handler).with_state(st.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, st)
}

struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Raw {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }
}

/// One request with its target exactly as written (an HTTP client library would normalise it).
async fn raw(s: &TestServer, target: &str, headers: &[(&str, &str)]) -> Raw {
    let mut req = format!("GET {target} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {DOMAIN}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).to_string();
    let (head, mut body) = text.split_once("\r\n\r\n").map(|(h, b)| (h.to_string(), b.to_string())).unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        let mut out = String::new();
        let mut rest = body.as_str();
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        body = out;
    }
    Raw { status, headers, body: serde_json::from_str(&body).unwrap_or(Value::Null) }
}

#[tokio::test]
async fn the_relay_routes_and_strips_as_verify_does() {
    let (s, _c, cid, [a, b]) = two_sessions("gpu-fc").await;
    let (ingress, st) = auth_ingress(&s).await;
    send(
        &s,
        reqwest::Method::PATCH,
        &format!("/api/v1/clusters/{cid}"),
        Some(json!({"session_ingress": ingress.to_string()})),
        200,
    )
    .await;
    let (ar, br) = (a.cr.as_str(), b.cr.as_str());

    let ca = cookie(&s, &a).await;
    let cb = cookie(&s, &b).await;

    // Every ambiguous variant is refused by the relay itself (400, the reason named), and the
    // ingress never sees it: the relay cannot be used to send a raw `../` past verify.
    let refused = [
        (format!("/proxy/{ar}/../{br}/lab"), "uri_dot_segment"),
        (format!("/proxy/{ar}/%2e%2e/{br}/lab"), "uri_dot_segment"),
        (format!("/proxy/{ar}/%2E%2e/{br}/lab"), "uri_dot_segment"),
        (format!("/proxy/{ar}/./lab"), "uri_dot_segment"),
        (format!("/proxy/{ar}%2f..%2f{br}/lab"), "uri_encoded_slash"),
        (format!("/proxy/{ar}/..%5c{br}/lab"), "uri_backslash"),
        (format!("/proxy/{ar}/x%00/lab"), "uri_control_or_non_ascii"),
        (format!("/proxy/{}/lab", br.to_uppercase()), "uri_letter_case"),
        ("/proxy/not_a_name/lab".to_string(), "uri_bad_session_name"),
    ];
    let before = st.hits.load(Ordering::SeqCst);
    let mut wrong = Vec::new();
    for (target, want) in &refused {
        let r = raw(&s, target, &[("Cookie", &ca)]).await;
        let got = (r.status, r.body["error"]["details"]["reason"].as_str().unwrap_or_default().to_string());
        if got != (400, want.to_string()) {
            wrong.push(format!("{target}: {got:?} {}, want 400 {want}", r.body));
        }
    }
    let reached = st.hits.load(Ordering::SeqCst) - before;
    if reached != 0 {
        wrong.push(format!("{reached} refused requests reached the ingress"));
    }

    // Merged slashes are relayed as the normalised path, which verify routes to bob: alice's
    // cookie (not even passed on, it is another session's) does not open it.
    let r = raw(&s, &format!("/proxy//{br}/lab"), &[("Cookie", &ca)]).await;
    let got = (r.status, r.body["error"]["details"]["reason"].as_str().unwrap_or_default().to_string());
    if got != (401, "no_credentials".to_string()) {
        wrong.push(format!("merged slashes: {got:?}, want 401 no_credentials"));
    }
    // A client-sent X-Original-URI naming alice's session does not cross the relay (ingress-nginx
    // would pass it to verify beside its own X-Original-URL).
    let lie = format!("/proxy/{ar}/lab");
    let r =
        raw(&s, &format!("/proxy/{br}/lab"), &[("Cookie", &ca), ("X-Original-URI", &lie), ("X-Original-URL", &lie)])
            .await;
    if r.status != 401 {
        wrong.push(format!("client-sent X-Original-URI: {} {}, want 401", r.status, r.body));
    }
    assert!(wrong.is_empty(), "relayed:\n{}", wrong.join("\n"));

    // Bob's cookie opens bob's, and the app sees the normalised path.
    let r = raw(&s, &format!("/proxy//{br}//lab/tree?x=1"), &[("Cookie", &cb)]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["uri"], format!("/proxy/{br}/lab/tree?x=1"));

    // Two sessions in one browser: both cookies sent; each request reaches its own session, and
    // each app sees only its own session's cookie.
    let jar = format!("{ca}; {cb}; _xsrf=lab");
    for (o, mine, theirs) in [(&a, &ca, &cb), (&b, &cb, &ca)] {
        let r = raw(&s, &format!("/proxy/{}/lab/api", o.cr), &[("Cookie", &jar)]).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.all("x-authed-session"), [o.sid.as_str()]);
        let sent = r.body["headers"]["cookie"].to_string();
        assert!(
            sent.contains(mine.as_str()) && !sent.contains(theirs.as_str()) && sent.contains("_xsrf=lab"),
            "{sent}"
        );
    }

    // Sent to another host (the console's), a session is not relayed at all: its app would run
    // with that origin's cookies (421, nothing reaches the ingress).
    let hits = st.hits.load(Ordering::SeqCst);
    let r = raw(&s, &format!("/proxy/{ar}/lab"), &[("Host", "console.lab.test"), ("Cookie", &ca)]).await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (421, Some("wrong_host")), "{:?}", r.body);
    assert_eq!(st.hits.load(Ordering::SeqCst), hits, "a misdirected request reached the ingress");
    // Credentials and identity do not cross: the app sees the session's own identity and host.
    let r = raw(
        &s,
        &format!("/proxy/{ar}/lab"),
        &[
            ("Cookie", &format!("gshare_console=ADMIN; gshare_csrf=CSRF; {ca}")),
            ("Authorization", "Bearer ADMIN-TOKEN"),
            ("Proxy-Authorization", "Basic c2VjcmV0"),
            ("X-GShare-User", "root"),
            ("X-GShare-Session", &b.sid),
            ("X-Forwarded-Host", "evil.test"),
            ("Forwarded", "for=6.6.6.6;host=evil.test"),
        ],
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let h = &r.body["headers"];
    assert_eq!(h["host"], json!([DOMAIN]), "the Host is pinned to the session domain");
    assert_eq!(h["x-forwarded-host"], json!([DOMAIN]));
    assert_eq!(h["x-gshare-user"], json!([a.owner]));
    assert_eq!(h["x-gshare-session"], json!([a.sid]));
    for gone in ["authorization", "proxy-authorization", "forwarded", "x-original-uri"] {
        assert!(h[gone].is_null(), "{gone} crossed: {h}");
    }
    let all = h.to_string();
    assert!(!all.contains("ADMIN") && !all.contains("CSRF") && !all.contains("root"), "{all}");

    // A browser opens a session through the relay: the token is redeemed by the ingress's
    // verify and the session cookie (scoped to alice's path) comes back; the app's attempts to set
    // the console's cookies do not.
    let t = token(&s, &a.sid).await;
    let r = raw(&s, &format!("/proxy/{ar}/lab?gshare_cnx={t}"), &[]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let cookies = r.all("set-cookie");
    let fresh = cookies.iter().find(|c| c.starts_with("gshare_session=")).expect("the session cookie").to_string();
    assert!(fresh.contains(&format!("Path=/proxy/{ar}/;")), "{fresh}");
    assert!(cookies.iter().all(|c| !c.starts_with("gshare_console=") && !c.starts_with("gshare_csrf=")), "{cookies:?}");
    assert!(cookies.iter().any(|c| c.starts_with("jupyter=1")), "the app's own cookies pass: {cookies:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_session_domain_cannot_be_the_consoles_host() {
    let s = TestServer::start_with(&[("GSHARE_PUBLIC_URL", "https://gshare.lab.test:8443")]).await;
    let c = cluster("gpu-fd").await;
    let cid = register(&s, "gpu-fd", &c).await;
    for d in ["gshare.lab.test", "GShare.Lab.Test."] {
        let res = crate::sessions::call(
            &s,
            reqwest::Method::PATCH,
            &format!("/api/v1/clusters/{cid}"),
            Some(json!({"session_domain": d})),
        )
        .await;
        let e = crate::support::expect_error(res, 422, "validation_failed").await;
        assert!(e.to_string().contains("console's own host"), "{e}");
    }
    send(
        &s,
        reqwest::Method::PATCH,
        &format!("/api/v1/clusters/{cid}"),
        Some(json!({"session_domain": "s.gshare.lab.test"})),
        200,
    )
    .await;
    s.stop().await;
}

/// Verify and the relay remember what they look up per request until the next commit:
/// a remembered answer never outlives a state change and never answers for another session.
#[tokio::test]
async fn remembered_lookups_end_with_the_session_and_stay_with_their_session() {
    let (s, _c, cid, [a, b]) = two_sessions("gpu-fd").await;
    let (ingress, _st) = auth_ingress(&s).await;
    let body = json!({"session_ingress": ingress.to_string()});
    send(&s, reqwest::Method::PATCH, &format!("/api/v1/clusters/{cid}"), Some(body), 200).await;
    let ca = cookie(&s, &a).await;
    let cb = cookie(&s, &b).await;
    let check = |jar: &str, o: &Open| {
        let (jar, uri) = (jar.to_string(), format!("/proxy/{}/lab", o.cr));
        let s = &s;
        async move { outcome(verify(s, &[("Cookie", &jar), ("X-Original-URI", &uri)]).await).await }
    };
    let ok = |o: &Open| (200, o.sid.clone(), String::new());
    let other = (401, String::new(), "other_session".to_string());

    // Both sessions' lookups are remembered, then answered from memory: each cookie still opens
    // its own session only, in any order and with both in the jar.
    assert_eq!(check(&ca, &a).await, ok(&a));
    assert_eq!(check(&cb, &b).await, ok(&b));
    let (hits0, _) = s.app().sessions.lookup_stats();
    let both = format!("{ca}; {cb}");
    for _ in 0..3 {
        assert_eq!(check(&ca, &a).await, ok(&a));
        assert_eq!(check(&cb, &b).await, ok(&b));
        assert_eq!(check(&ca, &b).await, other);
        assert_eq!(check(&cb, &a).await, other);
        assert_eq!(check(&both, &b).await, ok(&b));
        assert_eq!(check(&both, &a).await, ok(&a));
    }
    let (hits1, _) = s.app().sessions.lookup_stats();
    assert!(hits1 > hits0, "verify answered from memory ({hits0} -> {hits1} hits)");
    // Through the relay (whose lookup is the same entry), each session's app sees its own session.
    for (o, c) in [(&a, &ca), (&b, &cb), (&a, &ca)] {
        let r = raw(&s, &format!("/proxy/{}/lab", o.cr), &[("Cookie", c)]).await;
        assert_eq!((r.status, r.all("x-authed-session")), (200, vec![o.sid.as_str()]));
    }
    // A token is spent once its cookie comes back, remembered lookups or not.
    let t = token(&s, &a.sid).await;
    let url = format!("http://{DOMAIN}/proxy/{}/lab?gshare_cnx={t}", a.cr);
    let res = verify(&s, &[("X-Original-URL", &url)]).await;
    let set = res.headers()["set-cookie"].to_str().unwrap().to_string();
    assert_eq!(outcome(res).await.0, 200);
    let fresh = set.split(';').next().unwrap().to_string();
    assert_eq!(check(&fresh, &a).await, ok(&a));
    assert_eq!(outcome(verify(&s, &[("X-Original-URL", &url)]).await).await.2, "token_unknown_or_used");

    // Paused between two verifies: the second is refused, and so is the relayed request.
    assert_eq!(check(&ca, &a).await, ok(&a));
    send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{}/pause", a.sid), None, 200).await;
    assert_eq!(check(&ca, &a).await.0, 401);
    assert_eq!(raw(&s, &format!("/proxy/{}/lab", a.cr), &[("Cookie", &ca)]).await.status, 401);
    // Ended between two verifies: deleted (terminating), then reported gone; the relay refuses an
    // ended session itself.
    assert_eq!(check(&cb, &b).await, ok(&b));
    send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{}", b.sid), None, 200).await;
    assert_eq!(check(&cb, &b).await.0, 401);
    report(&s, &operator(&s, &cid), &b.cr, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    assert_eq!(check(&cb, &b).await.0, 401);
    let r = raw(&s, &format!("/proxy/{}/lab", b.cr), &[("Cookie", &cb)]).await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (404, Some("not_found")));
    s.stop().await;
}

/// A connection token is minted for the session's owner. A browser signed in to the
/// console as another member (its console cookie arrives at verify) cannot use it: a forwarded
/// link opens nothing for a colleague. The owner's own browser, one not signed in, and an admin's
/// (who may open any session; `session.connect` is audited with the owner) can.
#[tokio::test]
async fn a_link_minted_for_one_member_opens_nothing_for_another() {
    let (s, _c, _cid, [a, b]) = two_sessions("fa-members").await;
    // The free-text owners alice and bob become accounts: the sessions are theirs now.
    let mut console = std::collections::HashMap::new();
    for name in ["alice", "bob"] {
        let body = json!({"username": name, "password": format!("{name}'s long passphrase")});
        crate::users::create_own(&s, body).await;
        let res = s
            .client
            .post(s.url("/api/v1/auth/login"))
            .json(&json!({"username": name, "password": format!("{name}'s long passphrase")}))
            .send()
            .await
            .unwrap();
        let v: Value = res.json().await.unwrap();
        console.insert(name, format!("gshare_console={}", v["access_token"].as_str().unwrap()));
    }
    let admin_cookie = format!("gshare_console={}", crate::sessions::admin(&s));
    let url = |t: &str| format!("http://{DOMAIN}/proxy/{}/lab?gshare_cnx={t}", a.cr);

    // Alice's link in Bob's browser: refused, and the token is not spent.
    let t = token(&s, &a.sid).await;
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("Cookie", &console["bob"])]).await;
    let (status, _, reason) = outcome(res).await;
    assert_eq!((status, reason.as_str()), (401, "other_user"));
    // In her own browser it opens, as her.
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("Cookie", &console["alice"])]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-gshare-user"], "alice");
    // An admin's browser opens anyone's.
    let t = token(&s, &a.sid).await;
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("Cookie", &admin_cookie)]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-gshare-user"], a.owner.as_str(), "minted for the owner");
    // A console cookie that is not valid counts as none (a browser not signed in opens it).
    let t = token(&s, &a.sid).await;
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("Cookie", "gshare_console=forged.jwt.value")]).await;
    assert_eq!(res.status(), 200);
    // Bob's own session in Bob's browser: fine.
    let t = token(&s, &b.sid).await;
    let burl = format!("http://{DOMAIN}/proxy/{}/lab?gshare_cnx={t}", b.cr);
    assert_eq!(verify(&s, &[("X-Original-URL", &burl), ("Cookie", &console["bob"])]).await.status(), 200);
    let v = send(&s, reqwest::Method::GET, "/api/v1/audit?action=session.connect", None, 200).await;
    let entry = v["data"].as_array().unwrap().iter().find(|e| e["target"] == a.sid.as_str()).unwrap().clone();
    assert_eq!(entry["actor"], "admin:admin", "{entry}");
    assert_eq!(entry["details"]["owner"], "alice", "{entry}");
    assert_eq!(entry["details"]["as_admin"], true, "{entry}");
    // A member opening their own: as_admin false.
    let alice_token = console["alice"].trim_start_matches("gshare_console=").to_string();
    let res = s
        .client
        .post(s.url(&format!("/api/v1/sessions/{}/connect", a.sid)))
        .bearer_auth(&alice_token)
        .json(&json!({"kind": "lab"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let v = send(&s, reqwest::Method::GET, "/api/v1/audit?action=session.connect&actor=user:alice", None, 200).await;
    assert_eq!(v["data"][0]["details"]["as_admin"], false, "{v}");
    s.stop().await;
}

/// Signs `name` in to the console: `gshare_console=<token>`.
async fn console_cookie(s: &TestServer, name: &str) -> String {
    let body = json!({"username": name, "password": format!("{name}'s long passphrase")});
    let res = s.client.post(s.url("/api/v1/auth/login")).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    format!("gshare_console={}", v["access_token"].as_str().unwrap())
}

#[tokio::test]
async fn through_the_relay_a_members_console_cookie_opens_no_other_members_link() {
    let (s, _c, cid, [a, b]) = two_sessions("fa-relay-members").await;
    let (ingress, _st) = auth_ingress(&s).await;
    let body = json!({"session_ingress": ingress.to_string()});
    send(&s, reqwest::Method::PATCH, &format!("/api/v1/clusters/{cid}"), Some(body), 200).await;
    for name in ["alice", "bob"] {
        let body = json!({"username": name, "password": format!("{name}'s long passphrase")});
        crate::users::create_own(&s, body).await;
    }
    let (alice, bob) = (console_cookie(&s, "alice").await, console_cookie(&s, "bob").await);
    let admin = format!("gshare_console={}", crate::sessions::admin(&s));
    let ar = a.cr.as_str();

    // Alice's link opened through the relay in Bob's browser: the relay drops his console cookie
    // but tells verify who it signs in, and verify refuses (the token is not spent).
    let t = token(&s, &a.sid).await;
    let target = format!("/proxy/{ar}/lab?gshare_cnx={t}");
    let r = raw(&s, &target, &[("Cookie", &bob)]).await;
    assert_eq!((r.status, r.body["error"]["details"]["reason"].as_str()), (401, Some("other_user")), "{:?}", r.body);
    // A statement a client makes up itself does not cross the relay (nor pass verify's check).
    let r = raw(&s, &target, &[("Cookie", &bob), ("X-GShare-Console-User", "alice")]).await;
    assert_eq!(r.status, 401, "{:?}", r.body);
    // In her own browser it opens; the app sees neither console cookie.
    let r = raw(&s, &target, &[("Cookie", &alice)]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(!r.body["headers"].to_string().contains(alice.trim_start_matches("gshare_console=")), "{:?}", r.body);
    // An admin's browser opens anyone's; so does one signed in to no console (as before).
    let t = token(&s, &b.sid).await;
    let r = raw(&s, &format!("/proxy/{}/lab?gshare_cnx={t}", b.cr), &[("Cookie", &admin)]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);

    // Verify itself: the relay's statement is checked (signature, expiry), never taken on trust.
    let url = |t: &str| format!("http://{DOMAIN}/proxy/{ar}/lab?gshare_cnx={t}");
    let signed = s.app().sessions.console_user_assertion("bob", false).unwrap();
    let t = token(&s, &a.sid).await;
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("X-GShare-Console-User", &signed)]).await;
    assert_eq!(outcome(res).await.2, "other_user");
    for junk in
        ["bob", "eyJhbGciOiJub25lIn0.eyJjdSI6ImJvYiIsImFkbSI6ZmFsc2UsImV4cCI6OTk5OTk5OTk5OX0.", &"x".repeat(5000)]
    {
        // A HEAD: answered without redeeming, so the one token serves each try.
        let headers =
            [("X-Original-URL", url(&t)), ("X-Original-Method", "HEAD".into()), ("X-GShare-Console-User", junk.into())];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let res = verify(&s, &headers).await;
        assert_eq!(res.status(), 200, "an unsigned statement counts as none: {junk:.40}");
    }
    s.clock.advance(std::time::Duration::from_secs(gshare::sessions::connect::CONSOLE_USER_TTL_S as u64));
    let t = token(&s, &a.sid).await;
    let res = verify(&s, &[("X-Original-URL", &url(&t)), ("X-GShare-Console-User", &signed)]).await;
    assert_eq!(res.status(), 200, "an expired statement counts as none");
    s.stop().await;
}

/// One client connection kept open across requests, as a browser keeps one to a session domain.
struct KeptConnection(hyper::client::conn::http1::SendRequest<String>);

impl KeptConnection {
    async fn open(s: &TestServer) -> Self {
        let stream = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Self(sender)
    }

    /// `GET target` on this connection: status, the session the ingress's verify admitted, and
    /// the error code of a refusal.
    async fn get(&mut self, target: &str, cookie: &str) -> (u16, Option<String>, Option<String>) {
        use http_body_util::BodyExt;
        self.0.ready().await.expect("the connection is still open");
        let req = hyper::Request::get(target).header("host", DOMAIN).header("cookie", cookie).body(String::new());
        let res = self.0.send_request(req.unwrap()).await.unwrap();
        let status = res.status().as_u16();
        let authed = res.headers().get("x-authed-session").map(|v| v.to_str().unwrap().to_string());
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let code =
            serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["error"]["code"].as_str().map(String::from));
        (status, authed, code)
    }
}

/// The relay keeps each connection's last lookup: the requests of one keep-alive connection go to
/// the session their path names whichever session the one before went to, to where that session's
/// requests go after any change commits (the cluster's ingress moved), and not at all once the
/// session has ended.
#[tokio::test]
async fn a_kept_connection_follows_each_change_of_its_sessions() {
    let (s, _c, cid, [a, b]) = two_sessions("gpu-fe").await;
    let (first, first_st) = auth_ingress(&s).await;
    let (second, second_st) = auth_ingress(&s).await;
    let patch = |ingress: std::net::SocketAddr| {
        let (s, cid) = (&s, cid.clone());
        async move {
            let body = json!({"session_ingress": ingress.to_string()});
            send(s, reqwest::Method::PATCH, &format!("/api/v1/clusters/{cid}"), Some(body), 200).await;
        }
    };
    patch(first).await;
    let (ca, cb) = (cookie(&s, &a).await, cookie(&s, &b).await);
    let both = format!("{ca}; {cb}");
    let (pa, pb) = (format!("/proxy/{}/lab", a.cr), format!("/proxy/{}/lab", b.cr));
    let mut conn = KeptConnection::open(&s).await;
    // Each request goes to the session its path names, in any order on the one connection.
    for (path, o) in [(&pa, &a), (&pa, &a), (&pb, &b), (&pa, &a), (&pb, &b), (&pb, &b)] {
        assert_eq!(conn.get(path, &both).await, (200, Some(o.sid.clone()), None));
    }
    assert_eq!(first_st.hits.load(Ordering::SeqCst), 6);
    // The cluster's ingress moves: the connection's next requests go to the new one.
    patch(second).await;
    for (path, o) in [(&pb, &b), (&pa, &a)] {
        assert_eq!(conn.get(path, &both).await, (200, Some(o.sid.clone()), None));
    }
    assert_eq!((first_st.hits.load(Ordering::SeqCst), second_st.hits.load(Ordering::SeqCst)), (6, 2));
    // Ended (deleted, then reported gone): the relay itself refuses it on the same connection,
    // and the other session's requests still go through.
    assert_eq!(conn.get(&pb, &both).await.0, 200);
    send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{}", b.sid), None, 200).await;
    report(&s, &operator(&s, &cid), &b.cr, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    assert_eq!(conn.get(&pb, &both).await, (404, None, Some("not_found".into())));
    assert_eq!(conn.get(&pa, &both).await, (200, Some(a.sid.clone()), None));
    assert_eq!(second_st.hits.load(Ordering::SeqCst), 4);
    s.stop().await;
}

/// A session cookie's signature is checked once per connection, its expiry every time: on a kept
/// connection, the cookie goes on to the app while it is valid and not once it has expired.
#[tokio::test]
async fn a_remembered_session_cookie_still_expires() {
    use http_body_util::BodyExt;
    let (s, _c, cid, [a, _b]) = two_sessions("gpu-ff").await;
    // An app that answers with the cookies it was sent.
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        req.headers().get("cookie").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ingress = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let body = json!({"session_ingress": ingress.to_string()});
    send(&s, reqwest::Method::PATCH, &format!("/api/v1/clusters/{cid}"), Some(body), 200).await;
    let ca = cookie(&s, &a).await;
    let mut conn = KeptConnection::open(&s).await;
    let sent_on = async |conn: &mut KeptConnection| {
        conn.0.ready().await.unwrap();
        let req = hyper::Request::get(format!("/proxy/{}/lab", a.cr)).header("host", DOMAIN).header("cookie", &ca);
        let res = conn.0.send_request(req.body(String::new()).unwrap()).await.unwrap();
        assert_eq!(res.status(), 200);
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    };
    for _ in 0..3 {
        assert_eq!(sent_on(&mut conn).await, ca, "a valid cookie goes on");
    }
    s.clock.advance(std::time::Duration::from_secs(2 * 3600));
    assert_eq!(sent_on(&mut conn).await, "", "an expired cookie stays with the browser");
    s.stop().await;
}
