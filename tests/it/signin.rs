//! Sign-in: the initial account, login/logout/me, cookies and CSRF, token refusals across the
//! admin API and /internal, login throttling by client address (and behind proxies), security
//! headers, and the account CLI.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::{TestServer, expect_error, gshare, stderr, stdout};

/// The initial admin password the first start wrote.
pub fn initial_password(s: &TestServer) -> String {
    std::fs::read_to_string(s.data_dir().join("initial-admin-password")).expect("password file").trim().to_string()
}

/// Logs in as `admin` from `xff` (when given); returns (access token, session cookie, csrf token).
pub async fn login(s: &TestServer, xff: Option<&str>) -> (String, String, String) {
    let mut req =
        s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":"admin","password":initial_password(s)}));
    if let Some(x) = xff {
        req = req.header("x-forwarded-for", x);
    }
    let res = req.send().await.unwrap();
    assert_eq!(res.status(), 200);
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("gshare_console="))
        .expect("session cookie");
    let session = cookie.split(';').next().unwrap().to_string();
    let body: Value = res.json().await.unwrap();
    (body["access_token"].as_str().unwrap().to_string(), session, body["csrf_token"].as_str().unwrap().to_string())
}

async fn try_login(s: &TestServer, user: &str, password: &str, xff: Option<&str>) -> reqwest::Response {
    let mut req = s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":user,"password":password}));
    if let Some(x) = xff {
        req = req.header("x-forwarded-for", x);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn first_start_login_me_logout_with_cookie_and_csrf() {
    let s = TestServer::start().await;
    let file = s.data_dir().join("initial-admin-password");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let password = initial_password(&s);
    assert!(password.len() >= 32);

    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .header("user-agent", "signin-test/1")
        .json(&json!({"username":"admin","password":password}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let cookies: Vec<String> =
        res.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let session = cookies.iter().find(|c| c.starts_with("gshare_console=")).unwrap();
    assert!(session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Path=/"));
    assert!(!session.contains("Secure"), "plain HTTP: no Secure flag: {session}");
    let csrf_cookie = cookies.iter().find(|c| c.starts_with("gshare_csrf=")).unwrap();
    assert!(!csrf_cookie.contains("HttpOnly"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3600);
    let token = body["access_token"].as_str().unwrap();
    let claims = s.app().auth.api.verify(token).unwrap();
    assert_eq!(claims.sub, "admin:admin");
    let cookie = session.split(';').next().unwrap();
    let csrf = body["csrf_token"].as_str().unwrap();

    // me: by cookie (with the CSRF token to echo) and by bearer.
    let me: Value =
        s.client.get(s.url("/api/v1/auth/me")).header("cookie", cookie).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["username"], "admin");
    assert_eq!(me["auth"], "cookie");
    assert_eq!(me["account"], true);
    assert_eq!(me["csrf_token"], csrf);
    let me: Value =
        s.client.get(s.url("/api/v1/auth/me")).bearer_auth(token).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["auth"], "bearer");
    assert!(me.get("csrf_token").is_none());

    // A cookie-authenticated change without (or with a wrong) CSRF header is refused.
    let res = s.client.post(s.url("/api/v1/auth/logout")).header("cookie", cookie).send().await.unwrap();
    expect_error(res, 403, "csrf_failed").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/logout"))
        .header("cookie", cookie)
        .header("x-csrf-token", "forged")
        .send()
        .await
        .unwrap();
    expect_error(res, 403, "csrf_failed").await;
    // Still signed in.
    assert_eq!(s.client.get(s.url("/api/v1/auth/me")).header("cookie", cookie).send().await.unwrap().status(), 200);

    let res = s
        .client
        .post(s.url("/api/v1/auth/logout"))
        .header("cookie", cookie)
        .header("x-csrf-token", csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let cleared: Vec<String> =
        res.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    assert!(cleared.iter().any(|c| c.starts_with("gshare_console=;") && c.contains("Max-Age=0")), "{cleared:?}");
    // The token is dead both ways.
    let res = s.client.get(s.url("/api/v1/auth/me")).header("cookie", cookie).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    let res = s.client.get(s.url("/api/v1/auth/me")).bearer_auth(token).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    // Logging out again, or without any credentials, is harmless.
    assert_eq!(s.client.post(s.url("/api/v1/auth/logout")).send().await.unwrap().status(), 204);
    s.stop().await;
}

#[tokio::test]
async fn revocation_survives_a_restart() {
    let s = TestServer::start().await;
    let (token, _, _) = login(&s, None).await;
    let res = s.client.post(s.url("/api/v1/auth/logout")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(res.status(), 204);
    let TestServer { server, dir, .. } = s;
    server.unwrap().stop().await;
    // Same data dir, new process state: wait for the old store handle to close by retrying the open.
    let config =
        gshare::config::Config::for_data_dir(&dir.path().join("data"), &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    // The old server's tasks release the state file as they wind down; retry the open until then.
    let server = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match gshare::RunningServer::start(config.clone(), gshare::clock::Clock::system()).await {
                Ok(s) => return s,
                Err(gshare::StartError::Store(gshare::store::StoreError::AlreadyOpen { .. })) => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the old server released the state file");
    let res = reqwest::Client::new()
        .get(format!("{}/api/v1/auth/me", server.base_url()))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    expect_error(res, 401, "unauthenticated").await;
    server.stop().await;
}

#[tokio::test]
async fn wrong_password_and_unknown_user_look_alike() {
    // hops=1 so each attempt can come from its own address and no limit interferes.
    let s = TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "1")]).await;
    let checks = || s.app().signin.password_checks.load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..4 {
        // Same work either way: one argon2 verification (a decoy hash for an unknown user), so
        // the timing cannot tell them apart. Asserted on the work done, not on the clock.
        let before = checks();
        let res = try_login(&s, "admin", "wrong password!", Some(&format!("192.0.2.{i}"))).await;
        let a = expect_error(res, 401, "invalid_credentials").await;
        assert_eq!(checks(), before + 1);
        let res = try_login(&s, "nobody", "wrong password!", Some(&format!("198.51.100.{i}"))).await;
        let b = expect_error(res, 401, "invalid_credentials").await;
        assert_eq!(checks(), before + 2);
        assert_eq!(a["error"]["message"], b["error"]["message"]);
        assert_eq!(a["error"]["details"], b["error"]["details"]);
    }
    s.stop().await;
}

#[tokio::test]
async fn empty_and_huge_credentials_are_422() {
    let s = TestServer::start().await;
    let big = "x".repeat(1_000_000);
    for (user, pass, field) in [
        ("", "pw", "username"),
        ("admin", "", "password"),
        (big.as_str(), "pw", "username"),
        ("admin", big.as_str(), "password"),
    ] {
        let res = try_login(&s, user, pass, None).await;
        let body = expect_error(res, 422, "validation_failed").await;
        assert!(body["error"]["details"]["errors"].to_string().contains(field), "{body}");
    }
    // Missing fields, unknown fields, not JSON.
    let res = s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":"admin"})).send().await.unwrap();
    expect_error(res, 422, "validation_failed").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username":"a","password":"b","x":1}))
        .send()
        .await
        .unwrap();
    expect_error(res, 422, "validation_failed").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    expect_error(res, 400, "invalid_json").await;
    // Over the 1 MiB body limit.
    let res = try_login(&s, "admin", &"y".repeat(2 << 20), None).await;
    expect_error(res, 413, "payload_too_large").await;
    // The 422s count against the address like wrong passwords (see
    // `bad_shape_logins_are_throttled_and_coalesced`), but four stay under its limit.
    login(&s, None).await;
    s.stop().await;
}

#[tokio::test]
async fn a_thousand_logins_from_one_address() {
    let s = Arc::new(TestServer::start().await);
    let password = initial_password(&s);
    let started = Instant::now();
    let statuses: Vec<(u16, Option<String>)> = futures::stream::iter(0..1000)
        .map(|i| {
            let s = s.clone();
            async move {
                // Distinct usernames: only the per-address limit applies.
                let res = try_login(&s, &format!("user{i}"), "wrong password!", None).await;
                (res.status().as_u16(), res.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string()))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!("1000 logins from one address in {:?}", started.elapsed());
    assert_eq!(statuses.iter().filter(|(st, _)| *st == 401).count(), 10);
    assert_eq!(statuses.iter().filter(|(st, _)| *st == 429).count(), 990);
    let retry: u64 = statuses.iter().find_map(|(_, r)| r.clone()).unwrap().parse().unwrap();
    assert!((1..=300).contains(&retry), "{retry}");
    // The right password is throttled too, with the JSON envelope.
    let res = try_login(&s, "admin", &password, None).await;
    let body = expect_error(res, 429, "rate_limited").await;
    assert_eq!(body["error"]["details"]["scope"], "client_addr");
    // The message says how long to wait (the same figure as Retry-After) and that no password
    // is checked meanwhile; it does not end in a vague "try again later".
    let wait = body["error"]["details"]["retry_after_s"].as_u64().unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("wait {} minutes", wait.div_ceil(60))), "{message}");
    assert!(message.contains("no password is checked") && !message.contains("later"), "{message}");
    // After the window the address may try again.
    s.clock.advance(Duration::from_secs(301));
    assert_eq!(try_login(&s, "admin", &password, None).await.status(), 200);
    let (addrs, _) = s.app().signin.throttle.tracked();
    assert_eq!(addrs, 1);
}

/// Wrong passwords for `admin` from one address throttle that address, never the owner
/// signing in from another one; only an attack from many addresses spends the username's budget.
#[tokio::test]
async fn an_attacker_cannot_lock_the_admin_out() {
    // Six failures per address and window (budget per username: 20 x 6), to keep it short; the
    // attack on the code before the per-address throttle took five to lock the username for every address.
    let s = TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "1"), ("GSHARE_LOGIN_MAX_FAILURES", "6")]).await;
    let attacker = "192.0.2.66";
    for _ in 0..6 {
        expect_error(try_login(&s, "admin", "wrong password!", Some(attacker)).await, 401, "invalid_credentials").await;
    }
    // The attacker is throttled, the right password from a fresh address is accepted, and the
    // attacker stays throttled while the owner signs in again and again.
    for _ in 0..3 {
        let body =
            expect_error(try_login(&s, "admin", "wrong password!", Some(attacker)).await, 429, "rate_limited").await;
        assert_eq!(body["error"]["details"]["scope"], "client_addr");
        login(&s, Some("203.0.113.50")).await;
        s.clock.advance(Duration::from_secs(60));
    }
    // A distributed attack (the username's budget: 20 addresses x 6) does hold the username,
    // for every address, until the window slides.
    let budget = s.app().signin.throttle.user_budget();
    for i in 0..budget {
        let addr = format!("198.51.{}.{}", 100 + i / 6, i % 6);
        try_login(&s, "admin", "wrong password!", Some(&addr)).await;
    }
    let res = try_login(&s, "admin", &initial_password(&s), Some("203.0.113.51")).await;
    assert!(res.headers().contains_key("retry-after"));
    let body = expect_error(res, 429, "rate_limited").await;
    assert_eq!(body["error"]["details"]["scope"], "username");
    s.clock.advance(Duration::from_secs(601));
    login(&s, Some("203.0.113.51")).await;
    s.stop().await;
}

/// 11 failed logins with the given XFF lines; returns the status of the 11th and the address the
/// audit log recorded for the first.
async fn forge(s: &TestServer, xff: impl Fn(usize) -> Vec<String>) -> (u16, String) {
    let mut last = 0;
    for i in 0..11 {
        let mut req = s
            .client
            .post(s.url("/api/v1/auth/login"))
            .json(&json!({"username": format!("u{i}"), "password":"wrong password!"}));
        for line in xff(i) {
            req = req.header("x-forwarded-for", line);
        }
        last = req.send().await.unwrap().status().as_u16();
    }
    s.app().audit.flush().await;
    let page = s.app().store.read(|t| gshare::audit::list(t, &Default::default(), 1, 100)).await.unwrap().0;
    let first = page.last().unwrap().entry.client_addr.clone().unwrap();
    (last, first)
}

#[tokio::test]
async fn forged_forwarded_for_with_zero_hops_is_ignored() {
    let s = TestServer::start().await;
    let (status, addr) = forge(&s, |i| vec![format!("10.9.9.{i}")]).await;
    assert_eq!(status, 429, "a client cannot pick its address with hops=0");
    assert_eq!(addr, "127.0.0.1");
    s.stop().await;
}

#[tokio::test]
async fn forged_forwarded_for_with_one_hop_takes_the_rightmost() {
    let s = TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "1")]).await;
    // The client forges a left entry each time; the proxy appended the real one.
    let (status, addr) = forge(&s, |i| vec![format!("10.9.9.{i}, 203.0.113.7")]).await;
    assert_eq!(status, 429);
    assert_eq!(addr, "203.0.113.7");
    s.stop().await;
}

#[tokio::test]
async fn forged_forwarded_for_with_two_hops_across_header_lines() {
    let s = TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "2")]).await;
    // Forged entries first, then the balancer's entry, then the proxy's, on separate lines.
    let (status, addr) =
        forge(&s, |i| vec![format!("10.9.9.{i}, 10.8.8.{i}"), "198.51.100.7".into(), "10.0.0.2".into()]).await;
    assert_eq!(status, 429);
    assert_eq!(addr, "198.51.100.7");
    s.stop().await;
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let s =
        TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "1"), ("GSHARE_TRUSTED_PROXIES", "10.0.0.0/8")]).await;
    let (status, addr) = forge(&s, |i| vec![format!("203.0.113.{i}")]).await;
    assert_eq!(status, 429);
    assert_eq!(addr, "127.0.0.1");
    s.stop().await;
}

#[tokio::test]
async fn expired_forged_and_foreign_tokens_and_cookies() {
    let s = TestServer::start().await;
    let (token, cookie, _) = login(&s, None).await;
    let internal = s.app().auth.internal.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
    let mut forged = token.clone();
    forged.replace_range(forged.len() - 6.., "AAAAAA");
    for path in ["/api/v1/auth/me", "/api/v1/audit"] {
        // Forged signature: 401 as bearer and as cookie.
        let res = s.client.get(s.url(path)).bearer_auth(&forged).send().await.unwrap();
        expect_error(res, 401, "unauthenticated").await;
        let res = s.client.get(s.url(path)).header("cookie", format!("gshare_console={forged}")).send().await.unwrap();
        expect_error(res, 401, "unauthenticated").await;
        let res = s.client.get(s.url(path)).header("cookie", "gshare_console=not-a-jwt").send().await.unwrap();
        expect_error(res, 401, "unauthenticated").await;
        // An internal (operator) token: 403 either way.
        let res = s.client.get(s.url(path)).bearer_auth(&internal).send().await.unwrap();
        expect_error(res, 403, "forbidden").await;
        let res =
            s.client.get(s.url(path)).header("cookie", format!("gshare_console={internal}")).send().await.unwrap();
        expect_error(res, 403, "forbidden").await;
        // The good ones work.
        assert_eq!(s.client.get(s.url(path)).header("cookie", &cookie).send().await.unwrap().status(), 200);
        assert_eq!(s.client.get(s.url(path)).bearer_auth(&token).send().await.unwrap().status(), 200);
    }
    // CLI-minted bearer tokens keep working as before.
    let out = gshare(&s.data_dir(), &["admin", "token", "--ttl", "5m"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let cli_token = stdout(&out).lines().last().unwrap().to_string();
    assert_eq!(s.client.get(s.url("/api/v1/auth/me")).bearer_auth(&cli_token).send().await.unwrap().status(), 200);
    // Expired: move the clock past the hour (plus the 60 s leeway).
    s.clock.advance(Duration::from_secs(3600 + 61));
    let res = s.client.get(s.url("/api/v1/auth/me")).header("cookie", &cookie).send().await.unwrap();
    let body = expect_error(res, 401, "unauthenticated").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
    let res = s.client.get(s.url("/api/v1/auth/me")).bearer_auth(&token).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    s.stop().await;
}

#[tokio::test]
async fn admin_tokens_are_refused_on_internal_routes() {
    use gshare::auth::guard::{AdminCaller, OperatorCaller};
    use tower::ServiceExt;
    let s = TestServer::start().await;
    let app = s.server.as_ref().unwrap().app.clone();
    let (token, cookie, _) = login(&s, None).await;
    // /internal routes arrive with the inventory issue; the guard is what they will use.
    let router = axum::Router::new()
        .route("/internal/probe", axum::routing::post(|c: OperatorCaller| async move { c.cluster_id.to_string() }))
        .route("/api/v1/probe", axum::routing::post(|c: AdminCaller| async move { c.username }))
        .with_state(app.clone());
    let call = |path: &str, auth: Option<String>, cookie: Option<String>| {
        let mut req = axum::http::Request::post(path);
        if let Some(a) = auth {
            req = req.header("authorization", format!("Bearer {a}"));
        }
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        let router = router.clone();
        async move { router.oneshot(req.body(axum::body::Body::empty()).unwrap()).await.unwrap().status().as_u16() }
    };
    let internal = app.auth.internal.mint("operator:clu_local", Duration::from_secs(600)).unwrap();
    assert_eq!(call("/internal/probe", Some(internal.clone()), None).await, 200);
    assert_eq!(call("/internal/probe", Some(token.clone()), None).await, 403);
    assert_eq!(call("/internal/probe", None, Some(cookie.clone())).await, 401, "cookies never authenticate operators");
    assert_eq!(call("/api/v1/probe", Some(internal), None).await, 403);
    assert_eq!(call("/api/v1/probe", Some(token), None).await, 200);
    s.stop().await;
}

#[tokio::test]
async fn security_headers_on_every_response() {
    let s = TestServer::start().await;
    for path in ["/healthz", "/api/v1/nope", "/api/v1/auth/me"] {
        let res = s.get(path).await;
        let h = res.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
    }
    // The reference page keeps its own (stricter, no-script) policy.
    let res = s.get("/api/docs").await;
    assert!(res.headers()["content-security-policy"].to_str().unwrap().starts_with("default-src 'none'"));
    s.stop().await;
}

#[tokio::test]
async fn openapi_documents_the_signin_and_audit_routes() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    for (path, method) in [
        ("/api/v1/auth/login", "post"),
        ("/api/v1/auth/logout", "post"),
        ("/api/v1/auth/me", "get"),
        ("/api/v1/audit", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{path} {method} missing");
        assert!(op["responses"]["401"].is_object() || op["responses"]["204"].is_object(), "{path}");
    }
    assert!(doc["paths"]["/api/v1/auth/login"]["post"]["requestBody"].is_object());
    assert!(doc["paths"]["/api/v1/auth/login"]["post"]["responses"]["429"].is_object());
    s.stop().await;
}

#[test]
fn account_cli_works_offline_and_through_a_running_server() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"));
        cmd.args(args).env_clear().env("GSHARE_DATA_DIR", &data).env("GSHARE_CONFIG", "/dev/null");
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    };
    // Before any server: the initial account appears, then bob is added.
    let out = run(&["admin", "add", "bob"], Some("bob's long password\n"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(data.join("initial-admin-password").exists());
    let out = run(&["admin", "list"], None);
    let listed = stdout(&out);
    assert!(listed.contains("admin") && listed.contains("bob"), "{listed}");
    // Bad input.
    let out = run(&["admin", "add", "bob"], Some("another long password\n"));
    assert!(!out.status.success() && stderr(&out).contains("exists already"), "{}", stderr(&out));
    let out = run(&["admin", "add", "b b"], Some("another long password\n"));
    assert!(!out.status.success() && stderr(&out).contains("username"));
    let out = run(&["admin", "set-password", "bob"], Some("short\n"));
    assert!(!out.status.success() && stderr(&out).contains("12-1024"), "{}", stderr(&out));
    let out = run(&["admin", "set-password", "carol"], Some("a long enough password\n"));
    assert!(!out.status.success() && stderr(&out).contains("no account named `carol`"));
    // set-password for admin removes the initial password file.
    let out = run(&["admin", "set-password"], Some("the admin's own password\n"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!data.join("initial-admin-password").exists());
    // Never the last account.
    let out = run(&["admin", "remove", "bob"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["admin", "remove", "admin"], None);
    assert!(!out.status.success() && stderr(&out).contains("last enabled admin account"), "{}", stderr(&out));
    // Every change is in the audit log, newest last.
    let out = run(&["audit", "tail", "-n", "10"], None);
    let tail = stdout(&out);
    let actions: Vec<&str> = tail.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(actions, ["admin.add", "admin.set_password", "admin.remove"], "{tail}");

    // With a server holding the state file the same commands go through its admin socket.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(async {
        crate::support::init();
        let config = gshare::config::Config::for_data_dir(&data, &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
        gshare::RunningServer::start(config, gshare::clock::Clock::system()).await.unwrap()
    });
    let out = gshare(&data, &["admin", "list"], &[]);
    assert!(out.status.success() && stdout(&out).contains("admin"), "{}", stderr(&out));
    let out = gshare(&data, &["audit", "tail"], &[]);
    assert!(out.status.success() && stdout(&out).contains("admin.remove"), "{}", stderr(&out));
    // The server signs in with the password set offline.
    rt.block_on(async {
        let res = reqwest::Client::new()
            .post(format!("{}/api/v1/auth/login", server.base_url()))
            .json(&json!({"username":"admin","password":"the admin's own password"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        server.stop().await;
    });
}

/// Logins of the wrong shape (422) cost the address like wrong passwords and are
/// written once per address and window, so a flood of them neither passes the throttle nor grows
/// the audit log.
#[tokio::test]
async fn bad_shape_logins_are_throttled_and_coalesced() {
    let s = TestServer::start_with(&[("GSHARE_LOGIN_MAX_FAILURES", "5")]).await;
    let long = "u".repeat(65);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..300 {
        let (user, pass) = match i % 3 {
            0 => ("", "pw"),
            1 => (long.as_str(), "pw"),
            _ => ("admin", ""),
        };
        *statuses.entry(try_login(&s, user, pass, None).await.status().as_u16()).or_default() += 1;
    }
    assert_eq!(statuses, [(422, 5), (429, 295)].into_iter().collect());
    // The address is throttled for the right password too; another address is not.
    let res = try_login(&s, "admin", &initial_password(&s), None).await;
    expect_error(res, 429, "rate_limited").await;
    let app = s.app();
    app.audit.flush().await;
    let (recs, total) = app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 500)).await.unwrap();
    let reasons: Vec<String> =
        recs.iter().map(|r| r.entry.details["reason"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(total, 2, "the window's first of each kind, the rest counted: {reasons:?}");
    assert!(reasons.contains(&"invalid_input".to_string()) && reasons.contains(&"throttled_client_addr".to_string()));
    s.stop().await;
}

/// Sign-in takes JSON only, and not from another site's page.
#[tokio::test]
async fn login_is_json_only_and_same_origin() {
    let s = TestServer::start().await;
    let body = json!({"username":"admin","password":initial_password(&s)}).to_string();
    for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data")] {
        let mut req = s.client.post(s.url("/api/v1/auth/login")).body(body.clone());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let err = expect_error(req.send().await.unwrap(), 415, "unsupported_media_type").await;
        assert!(err["error"]["message"].as_str().unwrap().contains("application/json"), "{err}");
    }
    let post = |origin: Option<&str>, site: Option<&str>| {
        let mut req =
            s.client.post(s.url("/api/v1/auth/login")).header("content-type", "application/json; charset=utf-8");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(site) = site {
            req = req.header("sec-fetch-site", site);
        }
        req.body(body.clone()).send()
    };
    for (origin, site) in [
        (Some("https://evil.example"), None),
        (Some("null"), None),
        (None, Some("cross-site")),
        (None, Some("same-site")),
        (Some(s.base.as_str()), Some("cross-site")),
    ] {
        expect_error(post(origin, site).await.unwrap(), 403, "cross_origin").await;
    }
    // The console's own page (same origin), a typed request, and a client that is no browser.
    assert_eq!(post(Some(s.base.as_str()), Some("same-origin")).await.unwrap().status(), 200);
    assert_eq!(post(None, Some("none")).await.unwrap().status(), 200);
    assert_eq!(post(None, None).await.unwrap().status(), 200);
    // Nothing refused above spent the address's failures: none reached the password check.
    s.stop().await;
}

/// Two Host headers are refused; so are tokens issued in the future.
#[tokio::test]
async fn two_host_headers_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestServer::start().await;
    let mut sock = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = String::new();
    sock.read_to_string(&mut got).await.unwrap();
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert!(got.contains("more than one Host header"), "{got}");
    s.stop().await;
}
