//! The connect path through a real nginx (Debian's `nginx`, installed by `hack/deps.sh`) configured
//! as ingress-nginx renders a session's apps Ingress from upstream's annotations: podbuilder
//! (Mkpong/gShare `operator/internal/podbuilder/podbuilder.go`, `authAnnotations`) sets only
//! `auth-url` (our verify) and `auth-response-headers: Set-Cookie`, so ingress-nginx renders
//! `auth_request` to an internal location that proxies to verify with `X-Original-URL`,
//! `X-Original-Method`, `X-Real-IP` and the client's headers, and passes verify's cookie on with
//! `add_header Set-Cookie $auth_cookie` — which nginx applies only to 200, 201, 204, 206, 301, 302,
//! 303, 304, 307 and 308 answers.
//!
//! nginx starts on loopback with a temporary prefix and config (no root needed: the port is above
//! 1024). Without an nginx binary the tests say so and pass; CI installs it (`hack/deps.sh`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::sessions::{cluster, offering, operator, register, report, send, server, ts};
use crate::support::TestServer;

const DOMAIN: &str = "sessions.lab.test";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

fn nginx_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GSHARE_TEST_NGINX") {
        return Some(PathBuf::from(p));
    }
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// A running nginx: started with `daemon on`, so the command returns only once the listening
/// sockets are open (nginx binds them before it forks); stopped by the pid it wrote.
struct Nginx {
    bin: PathBuf,
    prefix: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    fn start(bin: &Path, config: impl Fn(&Path, u16) -> String) -> Self {
        let prefix = tempfile::tempdir().unwrap();
        let mut last = String::new();
        // A free port picked by the kernel, then handed to nginx: another process may take it in
        // between, so a failed start is tried on another port (a few times at most).
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let conf = prefix.path().join("nginx.conf");
            std::fs::write(&conf, config(prefix.path(), port)).unwrap();
            let out = std::process::Command::new(bin)
                .arg("-p")
                .arg(prefix.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(prefix.path().join("error.log"))
                .output()
                .unwrap();
            if out.status.success() {
                return Self { bin: bin.to_path_buf(), prefix, port };
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start: {last}");
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.prefix.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let conf = self.prefix.path().join("nginx.conf");
        let _ = std::process::Command::new(&self.bin)
            .arg("-p")
            .arg(self.prefix.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(self.prefix.path().join("error.log"))
            .args(["-s", "stop"])
            .output();
    }
}

/// One session's apps Ingress as ingress-nginx (controller v1.x `nginx.tmpl`) renders it for
/// upstream's annotations: the internal auth location, then `location /proxy/<cr>/lab` with
/// `auth_request`, `auth_request_set $auth_cookie $upstream_http_set_cookie`, `add_header
/// Set-Cookie $auth_cookie`, the `auth-response-headers` pair for Set-Cookie, the WebSocket
/// headers and the 1 MiB `client_max_body_size` default. `apps` maps each CR name to its app.
fn ingress_config(prefix: &Path, port: u16, verify: std::net::SocketAddr, apps: &[(&str, u16)]) -> String {
    let p = prefix.display();
    let mut locations = String::new();
    for (cr, app) in apps {
        let auth = format!("/_external-auth-{cr}-lab-Prefix");
        locations.push_str(&format!(
            r#"
        location = {auth} {{
            internal;
            proxy_pass_request_body     off;
            proxy_set_header            Content-Length          "";
            proxy_set_header            X-Forwarded-Proto       "";
            proxy_set_header            X-Request-ID            $request_id;
            proxy_set_header            Host                    {verify};
            proxy_set_header            X-Original-URL          $scheme://$http_host$request_uri;
            proxy_set_header            X-Original-Method       $request_method;
            proxy_set_header            X-Sent-From             "nginx-ingress-controller";
            proxy_set_header            X-Real-IP               $remote_addr;
            proxy_set_header            X-Forwarded-For         $remote_addr;
            proxy_set_header            X-Auth-Request-Redirect $request_uri;
            proxy_buffering             off;
            proxy_buffer_size           4k;
            proxy_buffers               4 4k;
            proxy_request_buffering     on;
            proxy_ssl_server_name       on;
            proxy_pass_request_headers  on;
            client_max_body_size        1m;
            proxy_http_version          1.1;
            set $target http://{verify}/internal/connect/verify;
            proxy_pass $target;
        }}

        location /proxy/{cr}/lab {{
            auth_request        {auth};
            auth_request_set    $auth_cookie $upstream_http_set_cookie;
            add_header          Set-Cookie $auth_cookie;
            auth_request_set $authHeader0 $upstream_http_set_cookie;
            proxy_set_header 'Set-Cookie' $authHeader0;
            client_max_body_size                    1m;
            proxy_set_header Host                   $http_host;
            proxy_set_header Upgrade                $http_upgrade;
            proxy_set_header Connection             $connection_upgrade;
            proxy_set_header X-Request-ID           $request_id;
            proxy_set_header X-Real-IP              $remote_addr;
            proxy_set_header X-Forwarded-For        $remote_addr;
            proxy_set_header X-Forwarded-Host       $http_host;
            proxy_set_header X-Forwarded-Proto      $scheme;
            proxy_set_header X-Original-Forwarded-For $http_x_forwarded_for;
            proxy_set_header Proxy                  "";
            proxy_connect_timeout                   5s;
            proxy_buffering                         off;
            proxy_http_version                      1.1;
            proxy_pass http://127.0.0.1:{app};
        }}
"#
        ));
    }
    format!(
        r#"worker_processes 1;
user root;
pid {p}/nginx.pid;
error_log {p}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name {DOMAIN};
{locations}
    }}
}}
"#
    )
}

/// A session's app whose answers are scripted: each request takes the next status (200 once the
/// script is used up) and gets back what it received.
#[derive(Default)]
struct App {
    script: Mutex<Vec<u16>>,
    seen: Mutex<Vec<Value>>,
}

async fn app_handler(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    let status = {
        let mut s = app.script.lock().unwrap();
        if s.is_empty() { 200 } else { s.remove(0) }
    };
    let mut headers = serde_json::Map::new();
    for (k, v) in req.headers() {
        headers
            .entry(k.as_str())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!(v.to_str().unwrap_or("<bytes>")));
    }
    let seen = json!({"method": req.method().as_str(), "uri": req.uri().to_string(), "headers": headers});
    app.seen.lock().unwrap().push(seen.clone());
    (StatusCode::from_u16(status).unwrap(), axum::Json(seen)).into_response()
}

async fn start_app() -> (u16, Arc<App>) {
    let app = Arc::new(App::default());
    let router = axum::Router::new().fallback(app_handler).with_state(app.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (port, app)
}

struct Lab {
    s: TestServer,
    nginx: Nginx,
    /// (session id, CR name, app) of two running sessions.
    sessions: Vec<(String, String, Arc<App>)>,
    cluster_id: String,
    browser: reqwest::Client,
    _cluster: gshare_fake_kube::FakeCluster,
}

async fn lab(bin: &Path, name: &str) -> Lab {
    let s = server().await;
    let c = cluster(name).await;
    let cid = register(&s, name, &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let mut sessions = Vec::new();
    for owner in ["alice", "bob"] {
        let v =
            send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": owner})), 201)
                .await;
        let (sid, cr) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
        report(&s, &op, &cr, json!({"phase": "Running", "ts": ts(&s)})).await;
        let (_port, app) = start_app().await;
        sessions.push((sid, cr, app, _port));
    }
    let verify = s.app_addr();
    let apps: Vec<(&str, u16)> = sessions.iter().map(|(_, cr, _, port)| (cr.as_str(), *port)).collect();
    let nginx = Nginx::start(bin, |prefix, port| ingress_config(prefix, port, verify, &apps));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", nginx.port).parse().unwrap();
    // A browser without a cookie jar: each test says which cookie it sends, as a browser would.
    let browser = reqwest::Client::builder()
        .resolve(DOMAIN, addr)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    Lab {
        s,
        nginx,
        sessions: sessions.into_iter().map(|(sid, cr, app, _)| (sid, cr, app)).collect(),
        cluster_id: cid,
        browser,
        _cluster: c,
    }
}

/// What came back through nginx: status, the `gshare_session` Set-Cookie (if any), the body.
struct Answer {
    status: u16,
    cookie: Option<String>,
    body: String,
}

impl Lab {
    fn url(&self, path: &str) -> String {
        format!("http://{DOMAIN}:{}{path}", self.nginx.port)
    }

    async fn token(&self, sid: &str) -> String {
        let v = send(
            &self.s,
            reqwest::Method::POST,
            &format!("/api/v1/sessions/{sid}/connect"),
            Some(json!({"kind": "lab"})),
            200,
        )
        .await;
        v["token"].as_str().unwrap().to_string()
    }

    async fn go(&self, method: reqwest::Method, path: &str, ua: &str, cookie: Option<&str>) -> Answer {
        let mut r = self.browser.request(method, self.url(path)).header("User-Agent", ua);
        if let Some(c) = cookie {
            r = r.header("Cookie", c);
        }
        let res = r.send().await.unwrap();
        let status = res.status().as_u16();
        let cookie = res
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("gshare_session="))
            .map(str::to_string);
        Answer { status, cookie, body: res.text().await.unwrap_or_default() }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Answer {
        self.go(reqwest::Method::GET, path, FIREFOX, cookie).await
    }
}

/// `gshare_session=<jwt>` from a Set-Cookie value, and its Max-Age.
fn jar(set_cookie: &str) -> (String, i64) {
    let pair = set_cookie.split(';').next().unwrap().trim().to_string();
    let max_age = set_cookie
        .split(';')
        .filter_map(|a| a.trim().strip_prefix("Max-Age="))
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap();
    (pair, max_age)
}

macro_rules! nginx_or_skip {
    () => {
        match nginx_binary() {
            Some(b) => b,
            None if std::env::var_os("CI").is_some() => {
                panic!("no nginx binary on CI: hack/deps.sh installs Debian's `nginx`")
            }
            None => {
                eprintln!(
                    "SKIPPED: no nginx binary (/usr/sbin/nginx or $GSHARE_TEST_NGINX): install Debian's `nginx` (hack/deps.sh does) to run the real-ingress tests"
                );
                return;
            }
        }
    };
}

/// Items 10 and 12: the app's first answers are errors (502 while its pod is not listening, then
/// 503 and 404), so nginx drops the cookie verify sent; the user is not locked out, and the token
/// is spent for good once its cookie comes back. A token tried on another session's path, or by a
/// HEAD, is not spent; after its first use no other client redeems it.
#[tokio::test]
async fn a_first_error_from_the_app_does_not_lock_the_user_out() {
    let bin = nginx_or_skip!();
    let l = lab(&bin, "nginx-a").await;
    let (a_sid, a_cr, a_app) = &l.sessions[0];
    let (_b_sid, b_cr, _b_app) = &l.sessions[1];
    let t = l.token(a_sid).await;
    let open = format!("/proxy/{a_cr}/lab?gshare_cnx={t}");

    // The app is not listening yet, then not ready, then not routed: nginx passes each error on,
    // without verify's cookie (real nginx: add_header skips 5xx and 404).
    a_app.script.lock().unwrap().extend([502, 503, 404]);
    for want in [502, 503, 404] {
        let r = l.get(&open, None).await;
        assert_eq!(r.status, want, "{}\n{}", r.body, l.nginx.error_log());
        assert!(r.cookie.is_none(), "nginx added the cookie to a {want}: {:?}", r.cookie);
    }
    // The reload once the app answers: the same token still opens it, and this time the cookie
    // reaches the browser.
    let r = l.get(&open, None).await;
    assert_eq!(r.status, 200, "locked out after the app's first errors: {}", r.body);
    let (cookie, max_age) = jar(r.cookie.as_deref().expect("the session cookie on the 200"));
    assert!(max_age > 0 && max_age <= 3600, "{max_age}");
    assert_eq!(a_app.seen.lock().unwrap().len(), 4);

    // With the cookie, the app opens; the token is spent now that its cookie came back.
    let r = l.get(&format!("/proxy/{a_cr}/lab/tree"), Some(&cookie)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = l.get(&open, None).await;
    assert_eq!(r.status, 401, "a token whose cookie came back still opens the session");

    // A token tried on the wrong session's path is refused and not spent.
    let t = l.token(a_sid).await;
    let wrong = l.get(&format!("/proxy/{b_cr}/lab?gshare_cnx={t}"), None).await;
    assert_eq!(wrong.status, 401);
    let r = l.get(&format!("/proxy/{a_cr}/lab?gshare_cnx={t}"), None).await;
    assert_eq!(r.status, 200, "the token was burnt on the wrong session's path");
    assert!(r.cookie.is_some());

    // A link preview's HEAD spends nothing and binds nothing: the browser's GET after it opens.
    let t = l.token(a_sid).await;
    let path = format!("/proxy/{a_cr}/lab?gshare_cnx={t}");
    let head = l.go(reqwest::Method::HEAD, &path, "Slackbot-LinkExpanding 1.0", None).await;
    assert!(head.cookie.is_none(), "a HEAD got a cookie: {:?}", head.cookie);
    assert_eq!(head.status, 200);
    let r = l.get(&path, None).await;
    assert_eq!(r.status, 200, "the HEAD spent the token");
    assert!(r.cookie.is_some());

    // After its first use, another client (another User-Agent here: one address on loopback) is
    // refused, while the first one may still reload within the grace.
    let other = l.go(reqwest::Method::GET, &path, "curl/8.5.0", None).await;
    assert_eq!(other.status, 401, "a token replayed from another client opened the session");
    let r = verify_direct(&l, &path, "curl/8.5.0").await;
    assert_eq!(r, "token_other_client");
    assert_eq!(l.get(&path, None).await.status, 200, "the first client within the grace");
    // Past the grace, the token is gone even for its first client (its cookie never came back).
    l.s.clock.advance(Duration::from_secs(121));
    assert_eq!(l.get(&path, None).await.status, 401, "a redeemed token outlived its grace");

    // An unused token expires after 300 s; forged and expired cookies are refused.
    let t = l.token(a_sid).await;
    l.s.clock.advance(Duration::from_secs(301));
    let r = l.get(&format!("/proxy/{a_cr}/lab?gshare_cnx={t}"), None).await;
    assert_eq!(r.status, 401);
    assert_eq!(verify_direct(&l, &format!("/proxy/{a_cr}/lab?gshare_cnx={t}"), FIREFOX).await, "token_expired");
    let jwt = cookie.trim_start_matches("gshare_session=");
    let mut forged = jwt.to_string();
    forged.pop();
    forged.push(if jwt.ends_with('A') { 'B' } else { 'A' });
    for bad in [format!("gshare_session={forged}"), "gshare_session=garbage".to_string(), cookie.clone()] {
        // The real cookie too: issued 422 s ago at most an hour, but still unexpired — then expired.
        if bad == cookie {
            l.s.clock.advance(Duration::from_secs(3600));
        }
        let r = l.get(&format!("/proxy/{a_cr}/lab/tree"), Some(&bad)).await;
        assert_eq!(r.status, 401, "{bad}");
        assert!(r.cookie.is_none());
    }
    l.s.stop().await;
}

/// The reason verify gives for a request as nginx's auth location would send it.
async fn verify_direct(l: &Lab, path: &str, ua: &str) -> String {
    let res =
        l.s.client
            .get(l.s.url("/internal/connect/verify"))
            .header("X-Original-URL", l.url(path))
            .header("X-Original-Method", "GET")
            .header("X-Real-IP", "127.0.0.1")
            .header("User-Agent", ua)
            .send()
            .await
            .unwrap();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    body["error"]["details"]["reason"].as_str().unwrap_or("allowed").to_string()
}

/// Item 11: the cookie slides — a verify that accepts a cookie older than five minutes sends a
/// renewed one through the same add_header, so a user at work for more than an hour keeps the app;
/// the renewal never outlives the run (the offering's `max_runtime_sec`, 7200 s here).
#[tokio::test]
async fn the_session_cookie_is_renewed_through_the_ingress_and_bounded_by_the_run() {
    let bin = nginx_or_skip!();
    let l = lab(&bin, "nginx-b").await;
    let (a_sid, a_cr, _a_app) = &l.sessions[0];
    let t = l.token(a_sid).await;
    let r = l.get(&format!("/proxy/{a_cr}/lab?gshare_cnx={t}"), None).await;
    let (first, _) = jar(r.cookie.as_deref().unwrap());
    // Its first return spends the token and trades the cookie for one without the token's mark.
    let r = l.get(&format!("/proxy/{a_cr}/lab/tree"), Some(&first)).await;
    assert_eq!(r.status, 200);
    let (mut cookie, _) = jar(r.cookie.as_deref().expect("the cookie traded on its first return"));
    // Used again at once: nothing to renew.
    let r = l.get(&format!("/proxy/{a_cr}/lab/tree"), Some(&cookie)).await;
    assert_eq!((r.status, r.cookie.is_none()), (200, true));
    // Forty minutes of work, a request every twenty: renewed each time, past the first hour.
    for _ in 0..3 {
        l.s.clock.advance(Duration::from_secs(20 * 60));
        let r = l.get(&format!("/proxy/{a_cr}/lab/api/contents"), Some(&cookie)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let (renewed, max_age) = jar(r.cookie.as_deref().expect("a renewed cookie"));
        assert_ne!(renewed, cookie);
        assert!(max_age > 3000, "{max_age}");
        cookie = renewed;
    }
    // The first cookie (an hour old) no longer opens it; the renewed one does.
    assert_eq!(l.get(&format!("/proxy/{a_cr}/lab"), Some(&first)).await.status, 401);
    // Near the end of the run (7200 s), a renewal is cut to what is left of it.
    l.s.clock.advance(Duration::from_secs(55 * 60));
    let r = l.get(&format!("/proxy/{a_cr}/lab"), Some(&cookie)).await;
    assert_eq!(r.status, 200);
    let (_, max_age) = jar(r.cookie.as_deref().unwrap());
    assert!(max_age <= 7200 - 115 * 60 + 5, "a renewed cookie outlives the run: Max-Age {max_age}");
    l.s.stop().await;
}

/// Item 13, as it is: behind the ingress, what the client sends as `X-GShare-User` reaches the app
/// unchanged (auth-response-headers passes only Set-Cookie), while through the relay the app gets
/// the session's own. Item 14: a WebSocket upgrade refused by the ingress (its verify's 401) comes
/// back through the relay as that 401, not as 502 `relay_failed`.
#[tokio::test]
async fn what_reaches_the_app_on_each_path_and_a_refused_upgrade() {
    let bin = nginx_or_skip!();
    let l = lab(&bin, "nginx-c").await;
    let (a_sid, a_cr, a_app) = &l.sessions[0];
    let t = l.token(a_sid).await;
    let r = l.get(&format!("/proxy/{a_cr}/lab?gshare_cnx={t}"), None).await;
    let (cookie, _) = jar(r.cookie.as_deref().unwrap());
    let res = l
        .browser
        .get(l.url(&format!("/proxy/{a_cr}/lab/api")))
        .header("Cookie", &cookie)
        .header("X-GShare-User", "root")
        .header("X-GShare-Session", "ses_forged")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let seen = a_app.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["headers"]["x-gshare-user"], json!(["root"]), "{seen}");
    assert_eq!(seen["headers"]["x-gshare-session"], json!(["ses_forged"]), "{seen}");

    // Through the relay (session_ingress = this nginx), the app sees the session's own identity.
    let ingress = format!("127.0.0.1:{}", l.nginx.port);
    let body = json!({"session_ingress": ingress});
    send(&l.s, reqwest::Method::PATCH, &format!("/api/v1/clusters/{}", l.cluster_id), Some(body), 200).await;
    let r = relay_raw(&l.s, &format!("/proxy/{a_cr}/lab/api"), &[("Cookie", &cookie), ("X-GShare-User", "root")]).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let seen = a_app.seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen["headers"]["x-gshare-user"], json!(["alice"]), "{seen}");

    // A WebSocket without credentials: the ingress answers 401, and so does the relay.
    let ws = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let r = relay_raw(&l.s, &format!("/proxy/{a_cr}/lab/api/kernels/k1/channels"), &ws).await;
    assert!(r.starts_with("HTTP/1.1 401"), "the ingress's 401 on an upgrade: {r}");
    assert!(!r.contains("relay_failed"), "{r}");
    l.s.stop().await;
}

/// One request to the relay with its target as written; the whole answer as text.
async fn relay_raw(s: &TestServer, target: &str, headers: &[(&str, &str)]) -> String {
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: {DOMAIN}\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("connection")) {
        req.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    // An upgrade answered with an error keeps the connection open: read the head and what the
    // Content-Length says, then stop.
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await.unwrap().unwrap();
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|len| body.len() >= len) {
                break;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
