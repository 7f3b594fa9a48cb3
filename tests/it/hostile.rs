//! Hostile input on the newer admin routes (attach/detach, operator tokens, snapshots, account and
//! admins, events): no or forged credentials, an operator token, a console cookie without its CSRF
//! token, wrong methods, bad and huge bodies, odd content types and ids with path tricks. Every
//! answer is the JSON error envelope with the right status, and nothing changes.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::signin::login;
use crate::support::{TestServer, expect_error};

const NO_CLUSTER: &str = "clu_01J0000000000000000000000Z";

fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

/// Every state-changing route of this pass, with a body it would accept.
fn writes() -> Vec<(Method, String, Option<Value>)> {
    vec![
        (Method::POST, format!("/api/v1/clusters/{NO_CLUSTER}/attach"), None),
        (Method::POST, format!("/api/v1/clusters/{NO_CLUSTER}/detach"), None),
        (Method::POST, format!("/api/v1/clusters/{NO_CLUSTER}/operator-token"), Some(json!({"ttl": "1h"}))),
        (Method::POST, "/api/v1/snapshots".into(), Some(json!({"reason": "manual"}))),
        (
            Method::POST,
            "/api/v1/account/password".into(),
            Some(json!({"current_password": "x", "new_password": "a long enough password 1"})),
        ),
        (Method::POST, "/api/v1/account/sign-out-everywhere".into(), None),
        (Method::POST, "/api/v1/admins".into(), Some(json!({"username": "mallory", "password": "p4ssword-long-1"}))),
        (Method::DELETE, "/api/v1/admins/admin".into(), None),
    ]
}

fn reads() -> Vec<String> {
    vec![
        format!("/api/v1/clusters/{NO_CLUSTER}/operator-manifests"),
        "/api/v1/snapshots".into(),
        "/api/v1/account".into(),
        "/api/v1/admins".into(),
        "/api/v1/events".into(),
    ]
}

async fn send(
    s: &TestServer,
    method: Method,
    path: &str,
    body: Option<&Value>,
    auth: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
) -> reqwest::Response {
    let mut r = auth(s.client.request(method, s.url(path)));
    if let Some(b) = body {
        r = r.json(b);
    }
    r.send().await.unwrap()
}

/// What must not change: the admins, the audit log's size, the snapshots, the key rings.
async fn state(s: &TestServer, token: &str) -> (Value, usize, Value) {
    let get = |p: &'static str| {
        let t = token.to_string();
        async move {
            let r = s.client.get(s.url(p)).bearer_auth(t).send().await.unwrap();
            assert_eq!(r.status(), 200, "{p}");
            r.json::<Value>().await.unwrap()
        }
    };
    let admins = get("/api/v1/admins").await;
    let audit = get("/api/v1/audit?size=100").await["data"].as_array().unwrap().len();
    let snapshots = get("/api/v1/snapshots").await;
    (admins, audit, snapshots)
}

#[tokio::test]
async fn credentials_are_checked_on_every_new_route() {
    let s = TestServer::start().await;
    let token = admin(&s);
    let (_, cookie, csrf) = login(&s, None).await;
    let before = state(&s, &token).await;

    let operator = s.app().auth.internal.mint(&format!("operator:{NO_CLUSTER}"), Duration::from_secs(600)).unwrap();
    // An admin token from a key this server never had, and an unsigned one.
    let ring = tempfile::tempdir().unwrap();
    let (foreign, _) = gshare::auth::tokens::TokenAuthority::open(
        gshare::auth::tokens::AUD_API,
        gshare::auth::keys::KeyRingDir::new(ring.path().join("api")),
        None,
        s.clock.clone(),
    )
    .unwrap();
    let forged = foreign.mint("admin:admin", Duration::from_secs(600)).unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let unsigned = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");

    let mut paths: Vec<(Method, String, Option<Value>)> = writes();
    paths.extend(reads().into_iter().map(|p| (Method::GET, p, None)));
    for (method, path, body) in &paths {
        let what = format!("{method} {path}");
        let res = send(&s, method.clone(), path, body.as_ref(), |r| r).await;
        expect_error(res, 401, "unauthenticated").await;
        for bad in [&forged, &unsigned, &"a.b.c".to_string()] {
            let res = send(&s, method.clone(), path, body.as_ref(), |r| r.bearer_auth(bad)).await;
            assert_eq!(res.status(), 401, "{what} with {bad}");
            expect_error(res, 401, "unauthenticated").await;
        }
        let res = send(&s, method.clone(), path, body.as_ref(), |r| r.bearer_auth(&operator)).await;
        expect_error(res, 403, "forbidden").await;
        // A forged console cookie is no better than a forged bearer token.
        let res =
            send(&s, method.clone(), path, body.as_ref(), |r| r.header("cookie", format!("gshare_console={forged}")))
                .await;
        expect_error(res, 401, "unauthenticated").await;
    }
    // The console's cookie without its CSRF token (what a cross-site form would send), or with
    // another session's: refused before the handler runs.
    for (method, path, body) in writes() {
        for sent in [None, Some("not-the-token"), Some(&csrf[..csrf.len() - 1])] {
            let res = send(&s, method.clone(), &path, body.as_ref(), |r| {
                let r = r.header("cookie", &cookie);
                match sent {
                    Some(v) => r.header("x-csrf-token", v),
                    None => r,
                }
            })
            .await;
            let what = format!("{method} {path} csrf {sent:?}");
            assert_eq!(res.status(), 403, "{what}");
            expect_error(res, 403, "csrf_failed").await;
        }
    }
    assert_eq!(state(&s, &token).await.0, before.0, "admins unchanged");
    assert_eq!(state(&s, &token).await.2, before.2, "no snapshot taken");
    assert!(std::fs::read_dir(s.data_dir().join("keys").join("internal")).unwrap().count() > 0);
}

#[tokio::test]
async fn wrong_methods_bodies_and_ids_are_refused_in_the_envelope() {
    let s = TestServer::start().await;
    let token = admin(&s);
    let before = state(&s, &token).await;
    let bearer = |r: reqwest::RequestBuilder| r.bearer_auth(admin(&s));

    // Wrong methods: 405 in the envelope, never the console's page.
    for (method, path) in [
        (Method::GET, format!("/api/v1/clusters/{NO_CLUSTER}/attach")),
        (Method::PUT, format!("/api/v1/clusters/{NO_CLUSTER}/detach")),
        (Method::DELETE, format!("/api/v1/clusters/{NO_CLUSTER}/operator-token")),
        (Method::PATCH, "/api/v1/snapshots".into()),
        (Method::DELETE, "/api/v1/account".into()),
        (Method::GET, "/api/v1/account/password".into()),
        (Method::PUT, "/api/v1/admins".into()),
        (Method::POST, "/api/v1/events".into()),
    ] {
        let res = send(&s, method.clone(), &path, None, bearer).await;
        assert_eq!(res.status(), 405, "{method} {path}");
        expect_error(res, 405, "method_not_allowed").await;
    }

    // Bodies: not JSON, the wrong shape, empty where one is required, and over 1 MiB.
    let raw = |method: Method, path: &str, body: Vec<u8>, ctype: &'static str| {
        s.client.request(method, s.url(path)).bearer_auth(admin(&s)).header("content-type", ctype).body(body).send()
    };
    let json_routes = [
        (Method::POST, format!("/api/v1/clusters/{NO_CLUSTER}/operator-token")),
        (Method::POST, "/api/v1/snapshots".into()),
        (Method::POST, "/api/v1/account/password".into()),
        (Method::POST, "/api/v1/admins".into()),
    ];
    for (method, path) in &json_routes {
        for ctype in ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"] {
            let res = raw(method.clone(), path, b"{\"unterminated".to_vec(), ctype).await.unwrap();
            assert_eq!(res.status(), 400, "{method} {path} {ctype}");
            expect_error(res, 400, "invalid_json").await;
        }
        let res = raw(method.clone(), path, b"[1, 2]".to_vec(), "application/json").await.unwrap();
        expect_error(res, 422, "validation_failed").await;
        let res = raw(method.clone(), path, b"{\"reason\": \"\xff\xfe\"}".to_vec(), "application/json").await.unwrap();
        assert!([400, 422].contains(&res.status().as_u16()), "{method} {path}: invalid UTF-8");
        let code = if res.status() == 400 { "invalid_json" } else { "validation_failed" };
        expect_error(res, res_status(code), code).await;
        let mut huge = b"{\"reason\": \"".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
        huge.extend(b"\"}");
        let res = raw(method.clone(), path, huge, "application/json").await.unwrap();
        expect_error(res, 413, "payload_too_large").await;
    }
    // Routes without a body: a huge one is refused or ignored, never acted on with a 5xx.
    for path in [format!("/api/v1/clusters/{NO_CLUSTER}/attach"), format!("/api/v1/clusters/{NO_CLUSTER}/detach")] {
        let res = raw(Method::POST, &path, vec![b'x'; 2 * 1024 * 1024], "application/json").await.unwrap();
        let status = res.status().as_u16();
        assert!([404, 413].contains(&status), "{path}: {status}");
        let body: Value = res.json().await.unwrap();
        assert!(body["error"]["code"].is_string(), "{body}");
    }
    // Query flags that are not booleans: 422 naming the parameter (axum's Query answered a bare
    // 400 "request refused" here); an empty one means false.
    for q in ["force=maybe", "force=1%00", "force=TRUE"] {
        let res = send(&s, Method::POST, &format!("/api/v1/clusters/{NO_CLUSTER}/attach?{q}"), None, bearer).await;
        let body = expect_error(res, 422, "validation_failed").await;
        assert_eq!(body["error"]["details"]["errors"][0]["loc"], json!(["query", "force"]), "?{q}: {body}");
    }
    let res = send(&s, Method::POST, &format!("/api/v1/clusters/{NO_CLUSTER}/attach?force="), None, bearer).await;
    expect_error(res, 404, "not_found").await;

    // Ids with path tricks: never another object, never a 5xx, always the envelope.
    let long = "a".repeat(5000);
    for id in [
        "..",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e",
        "clu_%00",
        "clu_01J0000000000000000000000Z%2Fattach",
        "clu_01j0000000000000000000000z",
        " clu_01J0000000000000000000000Z",
        long.as_str(),
        "%F0%9F%92%A3",
    ] {
        for action in ["attach", "detach", "operator-token", "operator-manifests"] {
            let method = if action == "operator-manifests" { Method::GET } else { Method::POST };
            let path = format!("/api/v1/clusters/{id}/{action}");
            let res = send(&s, method, &path, None, bearer).await;
            let status = res.status().as_u16();
            assert!([400, 404, 422].contains(&status), "{path}: {status}");
            let body: Value = res.json().await.unwrap_or_else(|e| panic!("{path}: not JSON: {e}"));
            assert!(body["error"]["message"].is_string(), "{path}: {body}");
        }
    }
    for name in ["..%2Fadmin", "admin%00", "ADMIN", "admin%2F..", long.as_str(), "%2e%2e"] {
        let path = format!("/api/v1/admins/{name}");
        let res = send(&s, Method::DELETE, &path, None, bearer).await;
        let status = res.status().as_u16();
        assert!([400, 404, 409, 422].contains(&status), "{path}: {status}");
        let body: Value = res.json().await.unwrap_or_else(|e| panic!("{path}: not JSON: {e}"));
        assert!(body["error"]["code"].is_string(), "{path}: {body}");
    }

    let after = state(&s, &token).await;
    assert_eq!(after.0, before.0, "admins unchanged");
    assert_eq!(after.2, before.2, "no snapshot taken");
}

fn res_status(code: &str) -> u16 {
    if code == "invalid_json" { 400 } else { 422 }
}
