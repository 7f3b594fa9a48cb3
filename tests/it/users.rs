//! Lab users: members sign in with the same route as admins, own their sessions and nothing
//! else; admins create, change and disable accounts.

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{cluster, offering, register, send, server};
use crate::support::{TestServer, expect_error};

/// Signs in and returns the bearer token and the answer.
async fn login(s: &TestServer, username: &str, password: &str) -> reqwest::Response {
    s.client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap()
}

async fn token(s: &TestServer, username: &str, password: &str) -> String {
    let res = login(s, username, password).await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    v["access_token"].as_str().unwrap().to_string()
}

async fn as_user(s: &TestServer, token: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

/// Creates a member and returns its first password (generated when `password` is None).
/// A member of group `vision` whose password is their own (`password`, or one chosen here):
/// made with an invite link and accepted, as an admin-set password opens nothing but its change.
async fn member(s: &TestServer, name: &str, password: Option<&str>) -> String {
    let password = password.map_or_else(|| format!("{name}'s own long passphrase"), str::to_string);
    let v = create_own(s, json!({"username": name, "group": "vision", "password": password})).await;
    assert_eq!(v["user"]["role"], "member", "{v}");
    assert_eq!(v["user"]["group"], "vision", "{v}");
    password
}

/// Creates an account whose owner chose its password (an admin-set one opens nothing but the
/// password change, `password_change_required`): `POST /api/v1/users` with `invite: true`, then
/// the link accepted with the body's `password`. Answers the create's answer.
pub async fn create_own(s: &TestServer, mut body: Value) -> Value {
    let password = body.as_object_mut().unwrap().remove("password").expect("a password to choose");
    body["invite"] = json!(true);
    let v = send(s, Method::POST, "/api/v1/users", Some(body), 201).await;
    assert!(v.get("password").is_none(), "an invited account's generated password is shown to nobody: {v}");
    let token = v["invite"]["token"].as_str().unwrap();
    let res = s
        .client
        .post(s.url("/api/v1/auth/invite"))
        .json(&json!({"token": token, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap_or_default());
    v
}

#[tokio::test]
async fn members_own_their_sessions_and_nothing_else() {
    let s = server().await;
    let c = cluster("gpu-u").await;
    let cid = register(&s, "gpu-u", &c).await;
    let off = offering(&s, "slice").await;
    let alice_pw = member(&s, "alice", None).await;
    member(&s, "bob", Some("bob's long passphrase")).await;
    // One username rule, unique without regard to case.
    let res = crate::sessions::call(&s, Method::POST, "/api/v1/users", Some(json!({"username": "Alice"}))).await;
    expect_error(res, 409, "conflict").await;

    let res = login(&s, "alice", &alice_pw).await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["role"], "member", "{v}");
    let alice = v["access_token"].as_str().unwrap().to_string();
    let bob = token(&s, "bob", "bob's long passphrase").await;
    let me: Value = as_user(&s, &alice, Method::GET, "/api/v1/auth/me", None).await.json().await.unwrap();
    assert_eq!((me["username"].as_str(), me["role"].as_str()), (Some("alice"), Some("member")), "{me}");

    // Alice starts one: hers. Naming another owner is an admin's right.
    let res =
        as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid})));
    let res = res.await;
    assert_eq!(res.status(), 201);
    let mine: Value = res.json().await.unwrap();
    assert_eq!(mine["owner"], "alice", "{mine}");
    let sid = mine["id"].as_str().unwrap().to_string();
    let body = json!({"offering_id": off, "cluster_id": cid, "owner": "bob"});
    let res = as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(body)).await;
    expect_error(res, 403, "forbidden_role").await;
    // An admin may start one for someone.
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "bob"})), 201).await;
    assert_eq!(v["owner"], "bob");

    // Lists: each member sees their own; naming someone else is 403; an admin sees all.
    let list = |t: String, q: &'static str| {
        let s = &s;
        async move { as_user(s, &t, Method::GET, &format!("/api/v1/sessions{q}"), None).await }
    };
    let v: Value = list(alice.clone(), "").await.json().await.unwrap();
    let owners: Vec<&str> = v["data"].as_array().unwrap().iter().map(|x| x["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["alice"], "{v}");
    let v: Value = list(bob.clone(), "").await.json().await.unwrap();
    let owners: Vec<&str> = v["data"].as_array().unwrap().iter().map(|x| x["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["bob"], "{v}");
    expect_error(list(bob.clone(), "?owner=alice").await, 403, "forbidden_role").await;
    assert_eq!(list(alice.clone(), "?owner=alice").await.status(), 200);
    let v = send(&s, Method::GET, "/api/v1/sessions", None, 200).await;
    assert_eq!(v["pagination"]["total"], 2, "{v}");

    // Bob and Alice's session: the same 404 as an id that never existed, on every action.
    let ghost = "ses_01JZZZZZZZZZZZZZZZZZZZZZZZ";
    for (method, suffix, body) in [
        (Method::GET, "", None),
        (Method::POST, "/pause", None),
        (Method::POST, "/resume", None),
        (Method::POST, "/connect", Some(json!({"kind": "lab"}))),
        (Method::DELETE, "", None),
    ] {
        let theirs = as_user(&s, &bob, method.clone(), &format!("/api/v1/sessions/{sid}{suffix}"), body.clone()).await;
        let a = expect_error(theirs, 404, "not_found").await;
        let none = as_user(&s, &bob, method.clone(), &format!("/api/v1/sessions/{ghost}{suffix}"), body).await;
        let b = expect_error(none, 404, "not_found").await;
        assert_eq!(a["error"]["message"], b["error"]["message"], "{method} {suffix}");
        assert_eq!(a["error"]["details"], b["error"]["details"], "{method} {suffix}");
    }
    let v = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    assert_eq!(v["phase"], "pending", "bob's attempts changed nothing: {v}");
    // Alice acts on hers.
    let res = as_user(&s, &alice, Method::DELETE, &format!("/api/v1/sessions/{sid}"), None).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    // The audit names the member.
    let v = send(&s, Method::GET, "/api/v1/audit?action=session.delete", None, 200).await;
    assert!(v["data"].as_array().unwrap().iter().any(|e| e["actor"] == "user:alice"), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_disabled_account_stops_at_its_next_request_and_the_last_admin_stays() {
    let s = TestServer::start().await;
    let pw = member(&s, "carol", None).await;
    let carol = token(&s, "carol", &pw).await;
    assert_eq!(as_user(&s, &carol, Method::GET, "/api/v1/account", None).await.status(), 200);
    // (Tokens end by the second they were minted in: let one pass.)
    s.clock.advance(std::time::Duration::from_secs(2));
    let v = send(&s, Method::PATCH, "/api/v1/users/carol", Some(json!({"disabled": true})), 200).await;
    assert_eq!(v["disabled"], true);
    expect_error(as_user(&s, &carol, Method::GET, "/api/v1/account", None).await, 401, "unauthenticated").await;
    expect_error(login(&s, "carol", &pw).await, 403, "account_disabled").await;
    expect_error(login(&s, "carol", "not her password").await, 401, "invalid_credentials").await;
    send(&s, Method::PATCH, "/api/v1/users/carol", Some(json!({"disabled": false})), 200).await;
    // Enabling does not bring back the tokens it had before.
    expect_error(as_user(&s, &carol, Method::GET, "/api/v1/account", None).await, 401, "unauthenticated").await;
    let fresh = token(&s, "carol", &pw).await;
    assert_eq!(as_user(&s, &fresh, Method::GET, "/api/v1/account", None).await.status(), 200);

    // Promoted: the same token may now call admin routes; demoted again, it may not.
    expect_error(as_user(&s, &fresh, Method::GET, "/api/v1/users", None).await, 403, "forbidden_role").await;
    send(&s, Method::PATCH, "/api/v1/users/carol", Some(json!({"role": "admin"})), 200).await;
    assert_eq!(as_user(&s, &fresh, Method::GET, "/api/v1/users", None).await.status(), 200);
    send(&s, Method::PATCH, "/api/v1/users/carol", Some(json!({"role": "member", "group": null})), 200).await;
    expect_error(as_user(&s, &fresh, Method::GET, "/api/v1/users", None).await, 403, "forbidden_role").await;

    // The last enabled admin can be neither demoted nor disabled nor removed.
    for body in [json!({"role": "member"}), json!({"disabled": true})] {
        let res = crate::sessions::call(&s, Method::PATCH, "/api/v1/users/admin", Some(body)).await;
        expect_error(res, 409, "conflict").await;
    }
    // Bad input: an unknown role, a bad group, an unknown account, unknown fields.
    for (body, status) in
        [(json!({"role": "root"}), 422), (json!({"group": "a b"}), 422), (json!({"colour": "red"}), 422)]
    {
        let res = crate::sessions::call(&s, Method::PATCH, "/api/v1/users/carol", Some(body.clone())).await;
        assert_eq!(res.status(), status, "{body}");
    }
    let res = crate::sessions::call(&s, Method::PATCH, "/api/v1/users/nobody", Some(json!({"disabled": true}))).await;
    expect_error(res, 404, "not_found").await;
    for body in [
        json!({"username": "bad name"}),
        json!({"username": "dave", "password": "short"}),
        json!({"username": "dave", "role": "owner"}),
        json!({"username": "dave\u{200b}"}),
        json!({"username": "=cmd"}),
    ] {
        let res = crate::sessions::call(&s, Method::POST, "/api/v1/users", Some(body.clone())).await;
        assert_eq!(res.status(), 422, "{body}");
    }
    let v = send(&s, Method::GET, "/api/v1/users?role=member", None, 200).await;
    let names: Vec<&str> = v["data"].as_array().unwrap().iter().map(|u| u["username"].as_str().unwrap()).collect();
    assert_eq!(names, ["carol"], "nothing refused was stored: {v}");
    s.stop().await;
}

/// Routes a member may call (method, path as the OpenAPI document writes it).
const MEMBER_ROUTES: &[(&str, &str)] = &[
    ("get", "/api/v1/account"),
    ("post", "/api/v1/account/password"),
    ("post", "/api/v1/account/sign-out-everywhere"),
    ("get", "/api/v1/auth/me"),
    ("post", "/api/v1/auth/login"),
    ("post", "/api/v1/auth/logout"),
    ("post", "/api/v1/auth/invite"),
    ("get", "/api/v1/auth/options"),
    // Single sign-on (no credential; 404 while no issuer is configured).
    ("get", "/api/v1/auth/oidc/start"),
    ("get", "/api/v1/auth/oidc/callback"),
    ("get", "/api/v1/offerings"),
    ("get", "/api/v1/offerings/{id}"),
    ("get", "/api/v1/sessions"),
    ("post", "/api/v1/sessions"),
    ("get", "/api/v1/sessions/{id}"),
    ("delete", "/api/v1/sessions/{id}"),
    ("post", "/api/v1/sessions/{id}/pause"),
    ("post", "/api/v1/sessions/{id}/resume"),
    ("post", "/api/v1/sessions/{id}/connect"),
    ("get", "/api/v1/events"),
    // Their own notifications.
    ("get", "/api/v1/notifications"),
    ("post", "/api/v1/notifications/{id}/read"),
    ("post", "/api/v1/notifications/read"),
    ("get", "/api/v1/volumes"),
    ("post", "/api/v1/volumes"),
    ("get", "/api/v1/volumes/{id}"),
    ("patch", "/api/v1/volumes/{id}"),
    ("delete", "/api/v1/volumes/{id}"),
    ("put", "/api/v1/volumes/{id}/share"),
    ("delete", "/api/v1/volumes/{id}/share"),
    ("get", "/api/v1/resource-policies/effective"),
    // Their own GPU time (`?user=` another name: 403).
    ("get", "/api/v1/usage"),
];

#[tokio::test]
async fn a_members_token_walks_every_route_of_the_document() {
    let s = TestServer::start().await;
    let pw = member(&s, "erin", None).await;
    let erin = token(&s, "erin", &pw).await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    let before = send(&s, Method::GET, "/api/v1/users", None, 200).await;
    let (mut refused, mut allowed) = (0, 0);
    let mut walk: Vec<(String, String)> = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if path.starts_with("/api/v1/") && ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                walk.push((method.clone(), path.clone()));
            }
        }
    }
    // The two that end the member's sign-ins go last.
    let ends = |p: &str| p.ends_with("/auth/logout") || p.ends_with("/sign-out-everywhere");
    walk.sort_by_key(|(_, p)| ends(p));
    for (method, path) in &walk {
        {
            let concrete = path.split('/').map(|seg| if seg.starts_with('{') { "x" } else { seg }).collect::<Vec<_>>();
            let url = concrete.join("/");
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = (m != Method::GET && m != Method::DELETE).then(|| json!({}));
            let res = as_user(&s, &erin, m, &url, body).await;
            let status = res.status().as_u16();
            // The live events never end by themselves: the stream's head is the answer.
            if path == "/api/v1/events" && status == 200 {
                assert_eq!(res.headers()["content-type"], "text/event-stream");
                allowed += 1;
                continue;
            }
            let text = res.text().await.unwrap();
            if MEMBER_ROUTES.contains(&(method.as_str(), path.as_str())) {
                assert!(status != 403 && status != 401 && status < 500, "{method} {path}: {status} {text}");
                allowed += 1;
            } else {
                assert_eq!(status, 403, "{method} {path} answered a member: {text}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "forbidden_role", "{method} {path}: {text}");
                refused += 1;
            }
        }
    }
    // Every member route is in the document (none renamed away from the list).
    assert_eq!(allowed, MEMBER_ROUTES.len(), "member routes found in the document");
    assert!(refused >= 30, "admin routes walked: {refused}");
    eprintln!("route walk: {allowed} member routes answered, {refused} admin routes refused with forbidden_role");
    let after = send(&s, Method::GET, "/api/v1/users", None, 200).await;
    assert_eq!(before, after, "the walk changed no account");
    s.stop().await;
}
