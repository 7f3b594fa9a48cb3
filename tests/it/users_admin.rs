//! Lab users, the admin's side: deleting accounts (history kept), resetting passwords (shown
//! once, changed at first sign-in), paging and exporting the list, bulk imports (all or nothing,
//! a result per row) and single-use invite links.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, offering, register, send, server};
use crate::support::{TestServer, expect_error};

async fn login(s: &TestServer, username: &str, password: &str) -> reqwest::Response {
    s.client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap()
}

async fn signed_in(s: &TestServer, username: &str, password: &str) -> Value {
    let res = login(s, username, password).await;
    let status = res.status();
    let v: Value = res.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

async fn as_user(s: &TestServer, token: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

fn names(v: &Value) -> Vec<String> {
    v["data"].as_array().unwrap().iter().map(|u| u["username"].as_str().unwrap().to_string()).collect()
}

/// A token minted with the key ring for an admin name without an account (as the CLI can).
fn ghost_admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:ghost", Duration::from_secs(3600)).unwrap()
}

async fn bulk(s: &TestServer, content_type: &str, body: String) -> reqwest::Response {
    s.client
        .post(s.url("/api/v1/users/bulk"))
        .bearer_auth(crate::sessions::admin(s))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn accept(s: &TestServer, token: &str, password: &str) -> reqwest::Response {
    s.client
        .post(s.url("/api/v1/auth/invite"))
        .json(&json!({"token": token, "password": password}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_reset_password_is_shown_once_and_replaced_at_first_sign_in() {
    let s = TestServer::start().await;
    let v = send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "dana"})), 201).await;
    assert_eq!(v["user"]["must_change_password"], true, "{v}");
    let first = v["password"].as_str().unwrap().to_string();
    // The generated first password: the sign-in and the account both say to replace it.
    let v = signed_in(&s, "dana", &first).await;
    assert_eq!(v["must_change_password"], true, "{v}");
    let dana = v["access_token"].as_str().unwrap().to_string();
    let me: Value = as_user(&s, &dana, Method::GET, "/api/v1/account", None).await.json().await.unwrap();
    assert_eq!(me["must_change_password"], true, "{me}");
    let body = json!({"current_password": first, "new_password": "dana's own long phrase"});
    let res = as_user(&s, &dana, Method::POST, "/api/v1/account/password", Some(body)).await;
    assert_eq!(res.status(), 204);
    let v = signed_in(&s, "dana", "dana's own long phrase").await;
    assert_eq!(v["must_change_password"], false, "her own choice: {v}");
    let dana = v["access_token"].as_str().unwrap().to_string();

    // An admin resets it: a new one, answered once and not cached; her sign-ins end.
    s.clock.advance(Duration::from_secs(2));
    let res = call(&s, Method::POST, "/api/v1/users/dana/password", None).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["username"], "dana");
    let reset = v["password"].as_str().unwrap().to_string();
    assert!(reset.len() >= 24, "{v}");
    expect_error(as_user(&s, &dana, Method::GET, "/api/v1/account", None).await, 401, "unauthenticated").await;
    expect_error(login(&s, "dana", "dana's own long phrase").await, 401, "invalid_credentials").await;
    let v = signed_in(&s, "dana", &reset).await;
    assert_eq!(v["must_change_password"], true, "a reset password is replaced at sign-in: {v}");
    let listed = send(&s, Method::GET, "/api/v1/users?q=dana", None, 200).await;
    assert_eq!(listed["data"][0]["must_change_password"], true, "{listed}");

    // Bad input: an unknown account, a name outside the rule; nothing is answered or changed.
    expect_error(call(&s, Method::POST, "/api/v1/users/nobody/password", None).await, 404, "not_found").await;
    expect_error(call(&s, Method::POST, "/api/v1/users/..%2fadmin/password", None).await, 404, "not_found").await;
    let v = send(&s, Method::GET, "/api/v1/audit?action=user.reset_password", None, 200).await;
    let results: Vec<&str> = v["data"].as_array().unwrap().iter().map(|e| e["result"].as_str().unwrap()).collect();
    assert!(results.contains(&"success") && results.contains(&"failure"), "{v}");
    assert!(!v.to_string().contains(&reset), "the password is in no audit entry");
    s.stop().await;
}

#[tokio::test]
async fn the_list_pages_filters_and_exports_without_formulas() {
    let s = TestServer::start().await;
    for (name, group) in [("erin", "vision"), ("frank", "nlp"), ("@gail", "-lab"), ("-hal", "vision")] {
        let body = json!({"username": name, "group": group, "password": "a long enough phrase"});
        send(&s, Method::POST, "/api/v1/users", Some(body), 201).await;
    }
    send(&s, Method::PATCH, "/api/v1/users/frank", Some(json!({"disabled": true})), 200).await;
    // Sorted by name, in pages.
    let v = send(&s, Method::GET, "/api/v1/users?size=2", None, 200).await;
    assert_eq!(names(&v), ["-hal", "@gail"], "{v}");
    assert_eq!(v["pagination"], json!({"page": 1, "size": 2, "total": 5, "total_pages": 3}));
    let v = send(&s, Method::GET, "/api/v1/users?size=2&page=3", None, 200).await;
    assert_eq!(names(&v), ["frank"], "{v}");
    let v = send(&s, Method::GET, "/api/v1/users?size=2&page=9", None, 200).await;
    assert_eq!(names(&v), Vec::<String>::new(), "past the end: empty, not an error");
    // Filters.
    let v = send(&s, Method::GET, "/api/v1/users?group=vision&role=member", None, 200).await;
    assert_eq!(names(&v), ["-hal", "erin"]);
    let v = send(&s, Method::GET, "/api/v1/users?disabled=true", None, 200).await;
    assert_eq!(names(&v), ["frank"]);
    let v = send(&s, Method::GET, "/api/v1/users?disabled=false&role=admin", None, 200).await;
    assert_eq!(names(&v), ["admin"]);
    for bad in ["size=0", "size=101", "page=0", "page=x", "disabled=yes", "format=xml", "role=root"] {
        expect_error(call(&s, Method::GET, &format!("/api/v1/users?{bad}"), None).await, 422, "validation_failed")
            .await;
    }

    // The export: every match, cells a spreadsheet would run escaped.
    let res = call(&s, Method::GET, "/api/v1/users?format=csv", None).await;
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    assert_eq!(res.headers()["cache-control"], "no-store");
    let text = res.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "username,role,group,disabled,must_change_password,created_at,password_changed_at");
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines.iter().any(|l| l.starts_with("'-hal,member,vision,false,true,")), "{text}");
    assert!(lines.iter().any(|l| l.starts_with("'@gail,member,'-lab,false,true,")), "{text}");
    for line in &lines {
        for cell in line.split(',') {
            assert!(!cell.starts_with(['=', '+', '-', '@']), "a formula cell in {line}");
        }
    }
    let res = call(&s, Method::GET, "/api/v1/users?format=csv&disabled=true", None).await;
    assert_eq!(res.text().await.unwrap().lines().count(), 2, "the export takes the filters");
    s.stop().await;
}

#[tokio::test]
async fn a_deleted_account_is_gone_but_its_sessions_and_history_stay() {
    let s = server().await;
    let c = cluster("gpu-d").await;
    let cid = register(&s, "gpu-d", &c).await;
    let off = offering(&s, "slice").await;
    let body = json!({"username": "ida", "password": "ida's long passphrase"});
    crate::users::create_own(&s, body).await;
    let v = signed_in(&s, "ida", "ida's long passphrase").await;
    let ida = v["access_token"].as_str().unwrap().to_string();
    let res = as_user(&s, &ida, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid})));
    let mine: Value = res.await.json().await.unwrap();
    let sid = mine["id"].as_str().unwrap().to_string();
    let invite = send(&s, Method::POST, "/api/v1/users/ida/invite", None, 201).await;

    // Refused: oneself, the last enabled admin (asked by a key-ring admin without an account).
    let res = call(&s, Method::DELETE, "/api/v1/users/admin", None).await;
    let v = expect_error(res, 409, "conflict").await;
    assert_eq!(v["error"]["details"]["reason"], "self");
    let res = as_user(&s, &ghost_admin(&s), Method::DELETE, "/api/v1/users/admin", None).await;
    let v = expect_error(res, 409, "conflict").await;
    assert_eq!(v["error"]["details"]["reason"], "last");
    expect_error(call(&s, Method::DELETE, "/api/v1/users/nobody", None).await, 404, "not_found").await;

    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/ida", None).await.status(), 204);
    // Her token stops at the next request; she cannot sign in; her invite link went with her.
    expect_error(as_user(&s, &ida, Method::GET, "/api/v1/sessions", None).await, 401, "unauthenticated").await;
    expect_error(login(&s, "ida", "ida's long passphrase").await, 401, "invalid_credentials").await;
    let res = accept(&s, invite["token"].as_str().unwrap(), "a brand new passphrase").await;
    expect_error(res, 404, "not_found").await;
    // Her session keeps running under her name, visible to admins.
    let v = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    assert_eq!((v["owner"].as_str(), v["phase"].as_str()), (Some("ida"), Some("pending")), "{v}");
    let v = send(&s, Method::GET, "/api/v1/sessions?owner=ida", None, 200).await;
    assert_eq!(v["pagination"]["total"], 1, "{v}");
    // Her history keeps the name, which is never given again (in any case).
    let v = send(&s, Method::GET, "/api/v1/audit?actor=user:ida", None, 200).await;
    assert!(!v["data"].as_array().unwrap().is_empty(), "{v}");
    let v = send(&s, Method::GET, "/api/v1/audit?action=user.delete", None, 200).await;
    assert_eq!(v["data"][0]["target"], "ida", "{v}");
    assert_eq!(v["data"][0]["actor"], "admin:admin", "{v}");
    for name in ["ida", "IDA"] {
        let res = call(&s, Method::POST, "/api/v1/users", Some(json!({"username": name}))).await;
        let v = expect_error(res, 409, "conflict").await;
        assert_eq!(v["error"]["details"]["reason"], "deleted", "{v}");
    }
    expect_error(call(&s, Method::DELETE, "/api/v1/users/ida", None).await, 404, "not_found").await;
    let v = send(&s, Method::GET, "/api/v1/users", None, 200).await;
    assert_eq!(names(&v), ["admin"]);
    s.stop().await;
}

#[tokio::test]
async fn bulk_imports_are_all_or_nothing_with_a_result_per_row() {
    let s = TestServer::start().await;
    send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "taken"})), 201).await;
    send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "gone"})), 201).await;
    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/gone", None).await.status(), 204);
    let before = send(&s, Method::GET, "/api/v1/users?size=100", None, 200).await;

    // Every kind of bad row, each named in its own result; nothing is created.
    let csv = "username,role,group\n\
               kim,member,vision\n\
               kim,member,vision\n\
               Kim,member,vision\n\
               TAKEN,,\n\
               gone,,\n\
               =cmd,,\n\
               +sum,,\n\
               lee,root,\n\
               max,member,a b\n\
               \"ann\u{200b}\",,\n\
               \"\u{202e}nimda\",,\n\
               bulk,,\n\
               ok-row,admin,ops\n";
    let res = bulk(&s, "text/csv", csv.to_string()).await;
    let v = expect_error(res, 422, "validation_failed").await;
    assert!(v["error"]["message"].as_str().unwrap().contains("nothing was created"), "{v}");
    let results = v["error"]["details"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 13, "{v}");
    let err = |row: usize| results[row - 1]["errors"].to_string();
    assert_eq!(results[0]["status"], "ok");
    assert!(err(2).contains("also on row 1"), "{}", err(2));
    assert!(err(3).contains("differs only in case"), "{}", err(3));
    assert!(err(4).contains("existing account"), "{}", err(4));
    assert!(err(5).contains("deleted account"), "{}", err(5));
    assert!(err(6).contains("`=`"), "{}", err(6));
    assert!(err(7).contains("`+`"), "{}", err(7));
    assert!(err(8).contains("role"), "{}", err(8));
    assert!(err(9).contains("group"), "{}", err(9));
    assert!(err(10).contains("U+200B") && err(10).contains("invisible"), "{}", err(10));
    assert!(err(11).contains("U+202E"), "{}", err(11));
    assert!(err(12).contains("kept for the route"), "{}", err(12));
    assert_eq!(results[12]["status"], "ok");
    assert!(results.iter().all(|r| r.get("password").is_none()), "no password for a refused import");
    assert_eq!(send(&s, Method::GET, "/api/v1/users?size=100", None, 200).await, before, "nothing created");

    // Too many rows: refused before any row is checked (1,001 and 10,000; JSON and CSV).
    for n in [1001usize, 10_000] {
        let rows: Vec<Value> = (0..n).map(|i| json!({"username": format!("u{i}")})).collect();
        let res = bulk(&s, "application/json", json!({"users": rows}).to_string()).await;
        let v = expect_error(res, 413, "payload_too_large").await;
        assert_eq!(v["error"]["details"]["max_rows"], 1000);
        let csv: String = std::iter::once("username".to_string())
            .chain((0..n).map(|i| format!("u{i}")))
            .collect::<Vec<_>>()
            .join("\n");
        expect_error(bulk(&s, "text/csv", csv).await, 413, "payload_too_large").await;
    }
    // Not rows at all.
    expect_error(bulk(&s, "application/json", json!({"users": []}).to_string()).await, 422, "validation_failed").await;
    expect_error(bulk(&s, "text/csv", "name,role\nx,member\n".into()).await, 422, "validation_failed").await;
    expect_error(bulk(&s, "text/csv", "role,group\nmember,x\n".into()).await, 422, "validation_failed").await;
    expect_error(bulk(&s, "text/csv", "username,role\nx,member,extra\n".into()).await, 422, "validation_failed").await;
    expect_error(bulk(&s, "text/plain", "username\nx\n".into()).await, 415, "unsupported_media_type").await;
    expect_error(bulk(&s, "application/json", "{\"users\": [".into()).await, 400, "invalid_json").await;
    let body = json!({"users": [{"username": "x", "colour": "red"}]}).to_string();
    expect_error(bulk(&s, "application/json", body).await, 422, "validation_failed").await;
    assert_eq!(send(&s, Method::GET, "/api/v1/users?size=100", None, 200).await, before, "still nothing created");

    // A good import: every row created, each with a first password shown once.
    let res =
        bulk(&s, "text/csv", "username,group,role\nkim,vision,\n\"lee\",nlp,admin\n-dash,@lab,member\n".into()).await;
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["created"], 3, "{v}");
    let rows = v["results"].as_array().unwrap();
    assert_eq!((rows[1]["username"].as_str(), rows[1]["role"].as_str()), (Some("lee"), Some("admin")), "{v}");
    assert_eq!(rows[2]["group"], "@lab");
    let kim_pw = rows[0]["password"].as_str().unwrap();
    let signed = signed_in(&s, "kim", kim_pw).await;
    assert_eq!((signed["role"].as_str(), signed["must_change_password"].as_bool()), (Some("member"), Some(true)));
    let body = json!({"users": [{"username": "nia", "group": "vision"}, {"username": "oto", "role": "member"}]});
    let v: Value = bulk(&s, "application/json", body.to_string()).await.json().await.unwrap();
    assert_eq!(v["created"], 2, "{v}");
    let v = send(&s, Method::GET, "/api/v1/audit?action=user.create", None, 200).await;
    assert!(v["data"].as_array().unwrap().iter().any(|e| e["target"] == "nia" && e["details"]["bulk"] == true), "{v}");
    // Exported again, the group starting with @ is escaped.
    let text = call(&s, Method::GET, "/api/v1/users?format=csv", None).await.text().await.unwrap();
    assert!(text.lines().any(|l| l.starts_with("'-dash,member,'@lab,")), "{text}");
    s.stop().await;
}

#[tokio::test]
async fn invite_links_are_single_use_for_72_hours_and_die_with_their_inviter() {
    let s = TestServer::start().await;
    send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "ivy"})), 201).await;
    let res = call(&s, Method::POST, "/api/v1/users/ivy/invite", None).await;
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let v: Value = res.json().await.unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("inv_"), "{v}");
    assert!(v["url"].as_str().unwrap().ends_with(&format!("/invite#{token}")), "{v}");
    // Only a hash of the secret is stored: the one row's key is its SHA-256, and neither key
    // nor value holds the secret.
    let rows = s
        .app()
        .store
        .read(|txn| {
            let t = txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("auth_invites"))?;
            let mut rows = Vec::new();
            for item in redb::ReadableTable::iter(&t)? {
                let (k, v) = item?;
                rows.push((k.value().to_string(), String::from_utf8_lossy(v.value()).to_string()));
            }
            Ok(rows)
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let secret = token.trim_start_matches("inv_");
    assert_eq!(rows[0].0, gshare::auth::invites::token_key(&token));
    assert!(!rows[0].0.contains(secret) && !rows[0].1.contains(secret), "{rows:?}");

    // Bad input first: it does not use the link up.
    let res = accept(&s, &token, "short").await;
    expect_error(res, 422, "validation_failed").await;
    expect_error(accept(&s, "inv_not-a-real-one", "a fine long passphrase").await, 404, "not_found").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/invite"))
        .header("content-type", "text/plain")
        .body(json!({"token": token, "password": "a fine long passphrase"}).to_string())
        .send()
        .await
        .unwrap();
    expect_error(res, 415, "unsupported_media_type").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/invite"))
        .header("origin", "https://evil.example")
        .json(&json!({"token": token, "password": "a fine long passphrase"}))
        .send()
        .await
        .unwrap();
    expect_error(res, 403, "cross_origin").await;

    // Accepted: her password, no change asked; the link is used up.
    let res = accept(&s, &token, "ivy's own passphrase").await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v, json!({"username": "ivy"}), "whose password was set: the console signs in as it");
    let v = signed_in(&s, "ivy", "ivy's own passphrase").await;
    assert_eq!(v["must_change_password"], false, "{v}");
    let v = expect_error(accept(&s, &token, "another passphrase here").await, 410, "invite_used").await;
    assert_eq!(v["error"]["details"]["reason"], "used");
    signed_in(&s, "ivy", "ivy's own passphrase").await;

    // 72 hours: good a second before, refused at the hour (the test clock is shifted, no sleep).
    let first = send(&s, Method::POST, "/api/v1/users/ivy/invite", None, 201).await;
    let second = send(&s, Method::POST, "/api/v1/users/ivy/invite", None, 201).await;
    let res = accept(&s, first["token"].as_str().unwrap(), "a replaced link's try").await;
    expect_error(res, 404, "not_found").await;
    s.clock.advance(Duration::from_secs(72 * 3600));
    let res = accept(&s, second["token"].as_str().unwrap(), "too late for this link").await;
    let v = expect_error(res, 410, "invite_expired").await;
    assert_eq!(v["error"]["details"]["reason"], "expired");
    let third = send(&s, Method::POST, "/api/v1/users/ivy/invite", None, 201).await;
    s.clock.advance(Duration::from_secs(72 * 3600 - 1));
    assert_eq!(accept(&s, third["token"].as_str().unwrap(), "just in time for this").await.status(), 200);

    // An inviter deleted since: the links they sent stop working.
    let body = json!({"username": "root2", "role": "admin", "password": "root2's long passphrase"});
    crate::users::create_own(&s, body).await;
    let root2 = signed_in(&s, "root2", "root2's long passphrase").await["access_token"].as_str().unwrap().to_string();
    send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "jay"})), 201).await;
    let res = as_user(&s, &root2, Method::POST, "/api/v1/users/jay/invite", None).await;
    let v: Value = res.json().await.unwrap();
    let jay = v["token"].as_str().unwrap().to_string();
    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/root2", None).await.status(), 204);
    let v = expect_error(accept(&s, &jay, "jay's long passphrase").await, 410, "invite_revoked").await;
    assert_eq!(v["error"]["details"]["reason"], "inviter_deleted");
    // An invite for an account that does not exist.
    expect_error(call(&s, Method::POST, "/api/v1/users/nobody/invite", None).await, 404, "not_found").await;
    let v = send(&s, Method::GET, "/api/v1/audit?action=auth.invite_accept", None, 200).await;
    let reasons: Vec<&str> =
        v["data"].as_array().unwrap().iter().filter_map(|e| e["details"]["reason"].as_str()).collect();
    for r in ["accepted", "used", "expired", "inviter_deleted", "unknown"] {
        assert!(reasons.contains(&r), "{r} in {reasons:?}");
    }
    assert!(!v.to_string().contains(&jay), "no token in the audit log");
    s.stop().await;
}

#[tokio::test]
async fn members_see_and_use_only_the_offerings_visible_to_them() {
    let s = server().await;
    let c = cluster("gpu-v").await;
    let cid = register(&s, "gpu-v", &c).await;
    let everyone = offering(&s, "everyone").await;
    let vision_only = offering(&s, "vision-only").await;
    let nlp_only = offering(&s, "nlp-only").await;
    let patch = |id: &str, v: Value| {
        let (s, path) = (&s, format!("/api/v1/offerings/{id}"));
        async move { send(s, Method::PATCH, &path, Some(json!({ "visible_to": v })), 200).await }
    };
    let v = patch(&vision_only, json!(["vision"])).await;
    assert_eq!(v["visible_to"], json!(["vision"]), "{v}");
    patch(&nlp_only, json!(["nlp", " nlp"])).await;
    for bad in [json!([]), json!(["a b"]), json!(["x\u{202e}"]), json!("vision")] {
        let path = format!("/api/v1/offerings/{nlp_only}");
        let res = call(&s, Method::PATCH, &path, Some(json!({"visible_to": bad}))).await;
        assert_eq!(res.status(), 422, "{bad}");
    }
    let body = json!({"name": "made-visible", "resource_class": "cpu", "image": "lab:1", "visible_to": ["vision"]});
    let made = send(&s, Method::POST, "/api/v1/offerings", Some(body), 201).await;
    assert_eq!(made["visible_to"], json!(["vision"]));

    let body = json!({"username": "vic", "group": "vision", "password": "vic's long passphrase"});
    crate::users::create_own(&s, body).await;
    let body = json!({"username": "nog", "password": "nog's long passphrase"});
    crate::users::create_own(&s, body).await;
    let vic = signed_in(&s, "vic", "vic's long passphrase").await["access_token"].as_str().unwrap().to_string();
    let nog = signed_in(&s, "nog", "nog's long passphrase").await["access_token"].as_str().unwrap().to_string();
    let listed = |t: String| {
        let s = &s;
        async move {
            let v: Value = as_user(s, &t, Method::GET, "/api/v1/offerings", None).await.json().await.unwrap();
            v["data"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(vic.clone()).await, ["everyone", "made-visible", "vision-only"]);
    // How many live sessions each offering has is the admin's to know, not a member's.
    let v: Value = as_user(&s, &vic, Method::GET, "/api/v1/offerings", None).await.json().await.unwrap();
    assert!(v["data"].as_array().unwrap().iter().all(|o| o.get("sessions").is_none()), "{v}");
    let one = format!("/api/v1/offerings/{}", made["id"].as_str().unwrap());
    let v: Value = as_user(&s, &vic, Method::GET, &one, None).await.json().await.unwrap();
    assert!(v.get("sessions").is_none() && v["name"] == "made-visible", "{v}");
    let v = send(&s, Method::GET, "/api/v1/offerings", None, 200).await;
    assert!(v["data"].as_array().unwrap().iter().all(|o| o["sessions"].is_u64()), "{v}");
    assert!(send(&s, Method::GET, &one, None, 200).await["sessions"].is_u64());
    assert_eq!(listed(nog.clone()).await, ["everyone"], "no group: only what every member sees");
    let v = send(&s, Method::GET, "/api/v1/offerings", None, 200).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 4, "an admin sees all: {v}");

    // One not visible answers like one that does not exist: read, and create from it.
    let ghost = "off_01JZZZZZZZZZZZZZZZZZZZZZZZ";
    let hidden = expect_error(
        as_user(&s, &vic, Method::GET, &format!("/api/v1/offerings/{nlp_only}"), None).await,
        404,
        "not_found",
    )
    .await;
    let missing = expect_error(
        as_user(&s, &vic, Method::GET, &format!("/api/v1/offerings/{ghost}"), None).await,
        404,
        "not_found",
    )
    .await;
    assert_eq!(hidden["error"]["message"], missing["error"]["message"]);
    let create = |t: &str, off: &str| {
        let body = json!({"offering_id": off, "cluster_id": cid});
        let (s, t) = (&s, t.to_string());
        async move { as_user(s, &t, Method::POST, "/api/v1/sessions", Some(body)).await }
    };
    let hidden = expect_error(create(&vic, &nlp_only).await, 404, "not_found").await;
    let missing = expect_error(create(&vic, ghost).await, 404, "not_found").await;
    assert_eq!(
        hidden["error"]["message"].as_str().unwrap().replace(&nlp_only, "ID"),
        missing["error"]["message"].as_str().unwrap().replace(ghost, "ID")
    );
    assert_eq!(hidden["error"]["details"], missing["error"]["details"]);
    expect_error(create(&nog, &vision_only).await, 404, "not_found").await;
    assert_eq!(create(&vic, &vision_only).await.status(), 201);
    assert_eq!(create(&nog, &everyone).await.status(), 201);
    // Opened to all again (null), nog sees it.
    patch(&vision_only, Value::Null).await;
    assert!(listed(nog.clone()).await.contains(&"vision-only".to_string()));
    s.stop().await;
}

#[tokio::test]
async fn a_disabled_or_deleted_members_console_cookie_stops_at_the_next_request() {
    let s = TestServer::start().await;
    let mut cookies = Vec::new();
    for name in ["cora", "dirk"] {
        let body = json!({"username": name, "password": format!("{name}'s long passphrase")});
        send(&s, Method::POST, "/api/v1/users", Some(body), 201).await;
        let res = login(&s, name, &format!("{name}'s long passphrase")).await;
        let set: Vec<String> =
            res.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
        let console = set.iter().find(|c| c.starts_with("gshare_console=")).unwrap();
        cookies.push(console.split(';').next().unwrap().to_string());
    }
    let account = |cookie: String| {
        let s = &s;
        async move { s.client.get(s.url("/api/v1/account")).header("cookie", cookie).send().await.unwrap() }
    };
    for c in &cookies {
        assert_eq!(account(c.clone()).await.status(), 200);
    }
    s.clock.advance(Duration::from_secs(2));
    send(&s, Method::PATCH, "/api/v1/users/cora", Some(json!({"disabled": true})), 200).await;
    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/dirk", None).await.status(), 204);
    for c in &cookies {
        expect_error(account(c.clone()).await, 401, "unauthenticated").await;
    }
    s.stop().await;
}

#[tokio::test]
async fn an_admin_sees_whether_a_sessions_owner_is_an_account_a_deleted_one_or_free_text() {
    let s = server().await;
    let c = cluster("gpu-o").await;
    let cid = register(&s, "gpu-o", &c).await;
    let off = offering(&s, "slice").await;
    for name in ["olga", "pete"] {
        let body = json!({"username": name, "password": format!("{name}'s long passphrase")});
        crate::users::create_own(&s, body).await;
    }
    // Owners: two accounts, a free-text name from before accounts, and one differing from an
    // account's only in case (sessions match their owner exactly, so it is not olga's).
    let mut ids = Vec::new();
    for owner in ["olga", "pete", "lab-guest", "Olga"] {
        let body = json!({"offering_id": off, "cluster_id": cid, "owner": owner});
        let v = send(&s, Method::POST, "/api/v1/sessions", Some(body), 201).await;
        ids.push((owner, v["id"].as_str().unwrap().to_string()));
        let want = if owner == "olga" || owner == "pete" { "account" } else { "external" };
        assert_eq!(v["owner_account"], want, "the created view: {v}");
    }
    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/pete", None).await.status(), 204);
    let want = |owner: &str| match owner {
        "olga" => "account",
        "pete" => "deleted",
        _ => "external",
    };
    let v = send(&s, Method::GET, "/api/v1/sessions", None, 200).await;
    let rows = v["data"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{v}");
    for row in rows {
        let owner = row["owner"].as_str().unwrap();
        assert_eq!(row["owner_account"], want(owner), "{owner}: {row}");
    }
    for (owner, id) in &ids {
        let v = send(&s, Method::GET, &format!("/api/v1/sessions/{id}"), None, 200).await;
        assert_eq!(v["owner_account"], want(owner), "{owner}: {v}");
    }
    // A member's own views carry no mark (their sessions are their account's).
    let olga = signed_in(&s, "olga", "olga's long passphrase").await["access_token"].as_str().unwrap().to_string();
    let v: Value = as_user(&s, &olga, Method::GET, "/api/v1/sessions", None).await.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    assert!(v["data"][0].get("owner_account").is_none(), "{v}");
    let path = format!("/api/v1/sessions/{}", ids[0].1);
    let v: Value = as_user(&s, &olga, Method::GET, &path, None).await.json().await.unwrap();
    assert!(v.get("owner_account").is_none(), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn one_deletion_whichever_route_keeps_the_name_and_the_sessions() {
    let s = server().await;
    let c = cluster("gpu-del").await;
    let cid = register(&s, "gpu-del", &c).await;
    let off = offering(&s, "slice").await;
    crate::users::create_own(&s, json!({"username": "fay", "password": "fay's long passphrase"})).await;
    let fay = signed_in(&s, "fay", "fay's long passphrase").await["access_token"].as_str().unwrap().to_string();
    let res = as_user(&s, &fay, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid})));
    let hers: Value = res.await.json().await.unwrap();
    let sid = hers["id"].as_str().unwrap().to_string();
    let body = json!({"username": "gus", "password": "gus's long passphrase"});
    send(&s, Method::POST, "/api/v1/admins", Some(body), 201).await;

    // The older admins route deletes as the users route does: the name is kept.
    assert_eq!(call(&s, Method::DELETE, "/api/v1/admins/fay", None).await.status(), 204);
    assert_eq!(call(&s, Method::DELETE, "/api/v1/users/gus", None).await.status(), 204);
    expect_error(as_user(&s, &fay, Method::GET, "/api/v1/account", None).await, 401, "unauthenticated").await;
    for name in ["fay", "FAY", "gus", "Gus"] {
        let v = expect_error(
            call(&s, Method::POST, "/api/v1/users", Some(json!({"username": name}))).await,
            409,
            "conflict",
        )
        .await;
        assert_eq!(v["error"]["details"]["reason"], "deleted", "{name}: {v}");
        let body = json!({"username": name, "password": "a new owner's long phrase"});
        let v = expect_error(call(&s, Method::POST, "/api/v1/admins", Some(body)).await, 409, "conflict").await;
        assert_eq!(v["error"]["details"]["reason"], "deleted", "{name}: {v}");
        let rows = format!("username\n{name}\n");
        let res = bulk(&s, "text/csv", rows).await;
        assert_eq!(res.status(), 422, "{name}");
    }
    // Her session keeps running under her name, marked as a deleted account's; nobody new owns it.
    let v = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    assert_eq!((v["owner"].as_str(), v["owner_account"].as_str()), (Some("fay"), Some("deleted")), "{v}");
    assert_eq!(v["phase"], hers["phase"], "{v}");
    // Deleting again (either route) finds nothing; the audit names each route's action.
    expect_error(call(&s, Method::DELETE, "/api/v1/admins/gus", None).await, 404, "not_found").await;
    expect_error(call(&s, Method::DELETE, "/api/v1/users/fay", None).await, 404, "not_found").await;
    let v = send(&s, Method::GET, "/api/v1/audit?action=admin.remove", None, 200).await;
    let fay_removed = |e: &&Value| e["target"] == "fay" && e["result"] == "success";
    assert!(v["data"].as_array().unwrap().iter().any(|e| fay_removed(&e)), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_name_a_404_repeats_is_bounded_and_shows_hidden_characters() {
    let s = TestServer::start().await;
    let long = "a".repeat(5000);
    let bidi = "%E2%80%AEnimda";
    let paths = [
        (Method::PATCH, format!("/api/v1/users/{long}"), Some(json!({"disabled": true}))),
        (Method::DELETE, format!("/api/v1/users/{long}"), None),
        (Method::POST, format!("/api/v1/users/{long}/password"), None),
        (Method::POST, format!("/api/v1/users/{long}/invite"), None),
        (Method::DELETE, format!("/api/v1/admins/{long}"), None),
        (Method::POST, format!("/api/v1/admins/{long}/password"), Some(json!({"password": "a long enough phrase"}))),
        (Method::DELETE, format!("/api/v1/users/{bidi}"), None),
        (Method::POST, format!("/api/v1/users/{bidi}/password"), None),
        (Method::DELETE, format!("/api/v1/admins/{bidi}"), None),
    ];
    for (method, path, body) in paths {
        let v = expect_error(call(&s, method.clone(), &path, body).await, 404, "not_found").await;
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.chars().count() < 120, "{method} {}…: {} characters", &path[..40], message.len());
        assert!(!message.contains('\u{202E}'), "{method} {path}: {message:?}");
        if path.contains("%E2%80%AE") {
            assert!(message.contains("U+202Enimda"), "{method} {path}: {message:?}");
        } else {
            assert!(message.ends_with('…'), "{method}: {message:?}");
        }
    }
    // The server kept serving.
    assert_eq!(s.client.get(s.url("/healthz")).send().await.unwrap().status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn an_admin_set_password_opens_nothing_but_its_change() {
    let s = TestServer::start().await;
    let body = json!({"username": "hal", "password": "hal's first long phrase"});
    let v = send(&s, Method::POST, "/api/v1/users", Some(body), 201).await;
    assert!(v.get("password").is_none(), "a given password is not echoed: {v}");
    let res = login(&s, "hal", "hal's first long phrase").await;
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("gshare_console="))
        .unwrap();
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["must_change_password"], true, "{v}");
    let hal = v["access_token"].as_str().unwrap().to_string();
    // What changing the password needs answers; nothing else does, by token or by cookie.
    for path in ["/api/v1/auth/me", "/api/v1/account"] {
        assert_eq!(as_user(&s, &hal, Method::GET, path, None).await.status(), 200, "{path}");
    }
    let refused = [
        (Method::GET, "/api/v1/sessions", None),
        (Method::GET, "/api/v1/offerings", None),
        (Method::GET, "/api/v1/events", None),
        (Method::POST, "/api/v1/sessions", Some(json!({"offering_id": "off_x"}))),
        (Method::GET, "/api/v1/users", None),
    ];
    for (method, path, body) in &refused {
        let res = as_user(&s, &hal, method.clone(), path, body.clone()).await;
        let v = expect_error(res, 403, "password_change_required").await;
        assert_eq!(v["error"]["details"]["change_at"], "/api/v1/account/password", "{v}");
    }
    let res = s.client.get(s.url("/api/v1/sessions")).header("cookie", &cookie).send().await.unwrap();
    expect_error(res, 403, "password_change_required").await;
    // Changed: everything a member may reach opens again (sign in anew: the change ends sessions).
    let body = json!({"current_password": "hal's first long phrase", "new_password": "hal's very own phrase"});
    assert_eq!(as_user(&s, &hal, Method::POST, "/api/v1/account/password", Some(body)).await.status(), 204);
    let hal = signed_in(&s, "hal", "hal's very own phrase").await["access_token"].as_str().unwrap().to_string();
    assert_eq!(as_user(&s, &hal, Method::GET, "/api/v1/sessions", None).await.status(), 200);
    assert_eq!(as_user(&s, &hal, Method::GET, "/api/v1/offerings", None).await.status(), 200);
    // A reset holds the account to a change again, from its first sign-in with the new password.
    let reset = send(&s, Method::POST, "/api/v1/users/hal/password", None, 200).await;
    let hal =
        signed_in(&s, "hal", reset["password"].as_str().unwrap()).await["access_token"].as_str().unwrap().to_string();
    expect_error(as_user(&s, &hal, Method::GET, "/api/v1/sessions", None).await, 403, "password_change_required").await;
    // Signing out still works.
    assert_eq!(as_user(&s, &hal, Method::POST, "/api/v1/auth/logout", None).await.status(), 204);
    expect_error(as_user(&s, &hal, Method::GET, "/api/v1/account", None).await, 401, "unauthenticated").await;
    // An admin with an admin-set password is held the same way (not told `forbidden_role`).
    let body = json!({"username": "ike", "role": "admin", "password": "ike's first long phrase"});
    send(&s, Method::POST, "/api/v1/users", Some(body), 201).await;
    let ike = signed_in(&s, "ike", "ike's first long phrase").await["access_token"].as_str().unwrap().to_string();
    expect_error(as_user(&s, &ike, Method::GET, "/api/v1/users", None).await, 403, "password_change_required").await;
    s.stop().await;
}

#[tokio::test]
async fn an_account_created_with_an_invite_answers_the_link_not_a_password() {
    let s = TestServer::start().await;
    let v = send(&s, Method::POST, "/api/v1/users", Some(json!({"username": "joy", "invite": true})), 201).await;
    assert!(v.get("password").is_none(), "{v}");
    assert_eq!(v["user"]["username"], "joy");
    let url = v["invite"]["url"].as_str().unwrap();
    let token = v["invite"]["token"].as_str().unwrap();
    assert!(token.starts_with("inv_") && url.ends_with(&format!("/invite#{token}")), "{v}");
    assert!(v["invite"]["expires_at"].is_string(), "{v}");
    let res = accept(&s, token, "joy's own long phrase").await;
    assert_eq!(res.status(), 200);
    let joy = signed_in(&s, "joy", "joy's own long phrase").await;
    assert_eq!(joy["must_change_password"], false, "{joy}");
    // Bad input: an invite and a password at once; a non-boolean invite.
    let body = json!({"username": "kim", "invite": true, "password": "kim's long passphrase"});
    let v = expect_error(call(&s, Method::POST, "/api/v1/users", Some(body)).await, 422, "validation_failed").await;
    assert_eq!(v["error"]["details"]["errors"][0]["loc"], json!(["body", "invite"]), "{v}");
    let body = json!({"username": "kim", "invite": "yes"});
    expect_error(call(&s, Method::POST, "/api/v1/users", Some(body)).await, 422, "validation_failed").await;
    // Nothing was made for kim.
    let v = send(&s, Method::GET, "/api/v1/users?q=kim", None, 200).await;
    assert!(names(&v).is_empty(), "{v}");
    s.stop().await;
}
