//! Accounts in the running server: change one's own password (refusals per field, the initial
//! password never reused, older sessions ended), add and remove admins, sign out everywhere.

use std::time::Duration;

use serde_json::{Value, json};

use crate::signin::{initial_password, login};
use crate::support::{TestServer, expect_error};

async fn call(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

fn field_errors(body: &Value) -> Vec<(String, String)> {
    body["error"]["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["loc"][1].as_str().unwrap().to_string(), e["msg"].as_str().unwrap().to_string()))
        .collect()
}

#[tokio::test]
async fn initial_password_is_replaced_from_the_console_with_each_refusal_per_field() {
    let s = TestServer::start().await;
    let initial = initial_password(&s);
    let (token, _, _) = login(&s, None).await;
    let me: Value = call(&s, reqwest::Method::GET, "/api/v1/account", &token, None).await.json().await.unwrap();
    assert_eq!(me["must_change_password"], true, "{me}");
    let change = |current: &str, new: &str| {
        call(
            &s,
            reqwest::Method::POST,
            "/api/v1/account/password",
            &token,
            Some(json!({"current_password": current, "new_password": new})),
        )
    };
    // Too short, and a wrong current password: both fields named at once.
    let body = expect_error(change("not it", "short").await, 422, "validation_failed").await;
    let errs = field_errors(&body);
    assert_eq!(errs[0], ("current_password".into(), "is not your current password".into()));
    assert_eq!(errs[1].0, "new_password");
    assert!(errs[1].1.starts_with("must be at least 12 characters (this one has 5)"), "{errs:?}");
    // The same as the current (initial) one.
    let body = expect_error(change(&initial, &initial).await, 422, "validation_failed").await;
    assert_eq!(field_errors(&body), [("new_password".into(), "must differ from the current password".into())]);
    // Nothing was changed by the refusals.
    assert!(s.data_dir().join("initial-admin-password").exists());
    // A real change: the initial file goes, the caller's session ends, the new password signs in,
    // the old one does not.
    s.clock.advance(Duration::from_secs(1));
    assert_eq!(change(&initial, "a long passphrase of mine").await.status(), 204);
    assert!(!s.data_dir().join("initial-admin-password").exists());
    assert_eq!(call(&s, reqwest::Method::GET, "/api/v1/account", &token, None).await.status(), 401);
    let ok = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "admin", "password": "a long passphrase of mine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let fresh = ok.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_string();
    let me: Value = call(&s, reqwest::Method::GET, "/api/v1/account", &fresh, None).await.json().await.unwrap();
    assert_eq!(me["must_change_password"], false, "{me}");
    let old = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "admin", "password": initial}))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 401);
    // Audited (success and refusals), never with a password in it.
    let log: Value = call(&s, reqwest::Method::GET, "/api/v1/audit?action=admin.set_password", &fresh, None)
        .await
        .json()
        .await
        .unwrap();
    let results: Vec<&str> = log["data"].as_array().unwrap().iter().map(|e| e["result"].as_str().unwrap()).collect();
    assert_eq!(results, ["success", "failure", "failure"], "{log}");
    assert!(!log.to_string().contains("passphrase") && !log.to_string().contains(&initial));
    s.stop().await;
}

#[tokio::test]
async fn the_sign_in_page_hints_at_the_initial_password_file_only_while_it_is_there() {
    let s = TestServer::start().await;
    let options =
        || async { s.client.get(s.url("/api/v1/auth/options")).send().await.unwrap().json::<Value>().await.unwrap() };
    // No credential needed: the page asks before anyone signs in.
    assert_eq!(options().await, json!({"initial_admin_password": true, "methods": ["local"]}));
    let (token, _, _) = login(&s, None).await;
    let res = call(
        &s,
        reqwest::Method::POST,
        "/api/v1/account/password",
        &token,
        Some(json!({"current_password": initial_password(&s), "new_password": "admin chose this passphrase"})),
    )
    .await;
    assert_eq!(res.status(), 204);
    assert_eq!(options().await, json!({"initial_admin_password": false, "methods": ["local"]}));
    s.stop().await;
}

#[tokio::test]
async fn the_initial_password_cannot_come_back_as_a_new_one() {
    let s = TestServer::start().await;
    let initial = initial_password(&s);
    let (token, _, _) = login(&s, None).await;
    // Changed once (the file is deleted then), so put it back as an operator might have kept it.
    let path = s.data_dir().join("initial-admin-password");
    let first = call(
        &s,
        reqwest::Method::POST,
        "/api/v1/account/password",
        &token,
        Some(json!({"current_password": initial, "new_password": "an interim passphrase"})),
    )
    .await;
    assert_eq!(first.status(), 204);
    std::fs::write(&path, format!("{initial}\n")).unwrap();
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "admin", "password": "an interim passphrase"}))
        .send()
        .await
        .unwrap();
    let token: String = res.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().into();
    let res = call(
        &s,
        reqwest::Method::POST,
        "/api/v1/account/password",
        &token,
        Some(json!({"current_password": "an interim passphrase", "new_password": initial})),
    )
    .await;
    let body = expect_error(res, 422, "validation_failed").await;
    assert_eq!(
        field_errors(&body),
        [("new_password".into(), "must not be the initial password from initial-admin-password".into())]
    );
    s.stop().await;
}

#[tokio::test]
async fn admins_are_added_and_removed_while_serving() {
    let s = TestServer::start().await;
    let (token, _, _) = login(&s, None).await;
    let post = |body: Value| call(&s, reqwest::Method::POST, "/api/v1/admins", &token, Some(body));
    // Bad inputs, each named.
    let body =
        expect_error(post(json!({"username": "carol smith", "password": "short"})).await, 422, "validation_failed")
            .await;
    let fields: Vec<String> = field_errors(&body).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["username", "password"]);
    let res = post(json!({"username": "carol", "password": "carol's first passphrase"})).await;
    assert_eq!(res.status(), 201);
    expect_error(post(json!({"username": "carol", "password": "another passphrase"})).await, 409, "conflict").await;
    // Names are unique without regard to case; the answer names the one taken.
    let taken =
        expect_error(post(json!({"username": "Carol", "password": "another passphrase"})).await, 409, "conflict").await;
    assert_eq!(taken["error"]["details"]["username"], "carol", "{taken}");
    // Blank and trivially weak passwords are refused, each saying why.
    for weak in [
        " ".repeat(12),
        "\u{0}".repeat(12),
        "z".repeat(40),
        "abcdefghijklmnop".to_string(),
        "1212121212121212".to_string(),
    ] {
        let body =
            expect_error(post(json!({"username": "dave", "password": weak})).await, 422, "validation_failed").await;
        let errs = field_errors(&body);
        assert_eq!(errs.len(), 1, "{body}");
        assert_eq!(errs[0].0, "password", "{body}");
        assert!(errs[0].1.contains("too easy to guess"), "{body}");
    }
    let list: Value = call(&s, reqwest::Method::GET, "/api/v1/admins", &token, None).await.json().await.unwrap();
    let names: Vec<&str> = list["data"].as_array().unwrap().iter().map(|a| a["username"].as_str().unwrap()).collect();
    assert_eq!(names, ["admin", "carol"]);
    assert!(!list.to_string().contains("argon2"), "{list}");
    // Carol signs in; removing her ends her session. Nobody removes themselves.
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "carol", "password": "carol's first passphrase"}))
        .send()
        .await
        .unwrap();
    let signed: Value = res.json().await.unwrap();
    // Another admin chose her first password: she replaces it at sign-in, as a new member does.
    assert_eq!(signed["must_change_password"], true, "{signed}");
    let carol: String = signed["access_token"].as_str().unwrap().into();
    let me: Value = call(&s, reqwest::Method::GET, "/api/v1/account", &carol, None).await.json().await.unwrap();
    assert_eq!(me["must_change_password"], true, "{me}");
    // Until she has, her token reaches nothing else, her own removal included.
    expect_error(
        call(&s, reqwest::Method::DELETE, "/api/v1/admins/carol", &carol, None).await,
        403,
        "password_change_required",
    )
    .await;
    assert_eq!(call(&s, reqwest::Method::DELETE, "/api/v1/admins/carol", &token, None).await.status(), 204);
    assert_eq!(call(&s, reqwest::Method::GET, "/api/v1/account", &carol, None).await.status(), 401);
    expect_error(call(&s, reqwest::Method::DELETE, "/api/v1/admins/carol", &token, None).await, 404, "not_found").await;
    // Sign out everywhere ends the caller's sessions too.
    assert_eq!(
        call(&s, reqwest::Method::POST, "/api/v1/account/sign-out-everywhere", &token, None).await.status(),
        204
    );
    assert_eq!(call(&s, reqwest::Method::GET, "/api/v1/admins", &token, None).await.status(), 401);
    s.stop().await;
}
