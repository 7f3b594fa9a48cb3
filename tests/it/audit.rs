//! The audit log over the API: logins with result, username, client address, user agent and
//! request id; filters; pagination; bad query input; and `audit::record` for other domains.

use serde_json::{Value, json};

use crate::signin::{initial_password, login};
use crate::support::{TestServer, expect_error};
use gshare::audit::{AuditEntry, AuditResult};

#[tokio::test]
async fn logins_are_audited_and_listed_with_filters_and_pages() {
    let s = TestServer::start_with(&[("GSHARE_TRUSTED_PROXY_HOPS", "1")]).await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .header("user-agent", "audit-test/2")
        .header("x-forwarded-for", "203.0.113.20")
        .header("x-request-id", "req-wrong-1")
        .json(&json!({"username":"admin","password":"not the password"}))
        .send()
        .await
        .unwrap();
    expect_error(res, 401, "invalid_credentials").await;
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .header("user-agent", "audit-test/2")
        .header("x-forwarded-for", "203.0.113.21")
        .json(&json!({"username":"admin","password":initial_password(&s)}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_string();
    let (token, _, _) = login(&s, Some("203.0.113.22")).await;

    let page: Value =
        s.client.get(s.url("/api/v1/audit")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!(page["pagination"], json!({"page":1,"size":50,"total":3,"total_pages":1}));
    let data = page["data"].as_array().unwrap();
    // Newest first.
    let failed = &data[2];
    assert_eq!(failed["action"], "auth.login");
    assert_eq!(failed["result"], "failure");
    assert_eq!(failed["actor"], "anonymous");
    assert_eq!(failed["target"], "admin");
    assert_eq!(failed["client_addr"], "203.0.113.20");
    assert_eq!(failed["user_agent"], "audit-test/2");
    assert_eq!(failed["request_id"], "req-wrong-1");
    assert_eq!(failed["details"]["reason"], "invalid_credentials");
    assert!(failed["at"].as_str().unwrap().ends_with('Z'));
    assert!(failed.to_string().find("not the password").is_none(), "passwords are never audited");
    let ok = &data[1];
    assert_eq!(ok["result"], "success");
    assert_eq!(ok["actor"], "admin:admin");
    assert_eq!(ok["request_id"], request_id);
    assert_eq!(ok["client_addr"], "203.0.113.21");

    // Other domains record through the same log.
    let app = s.server.as_ref().unwrap().app.clone();
    for i in 0..7 {
        gshare::audit::record(
            &app,
            AuditEntry::system("admin:admin", "cluster.register", AuditResult::Success).target(format!("clu_{i}")),
        )
        .await;
    }
    let get = |q: &'static str| {
        let s = &s;
        let token = token.clone();
        async move { s.client.get(s.url(&format!("/api/v1/audit{q}"))).bearer_auth(token).send().await.unwrap() }
    };
    let page: Value = get("?action=cluster.register&size=3&page=3").await.json().await.unwrap();
    assert_eq!(page["pagination"], json!({"page":3,"size":3,"total":7,"total_pages":3}));
    assert_eq!(page["data"][0]["target"], "clu_0");
    let page: Value = get("?action=auth.*&actor=anonymous").await.json().await.unwrap();
    assert_eq!(page["pagination"]["total"], 1);
    let page: Value = get("?page=99").await.json().await.unwrap();
    assert_eq!(page["data"], json!([]));
    for bad in ["?page=0", "?size=0", "?size=501", "?page=abc", "?size=-1"] {
        expect_error(get(bad).await, 422, "validation_failed").await;
    }
    // Unauthenticated: 401.
    expect_error(s.get("/api/v1/audit").await, 401, "unauthenticated").await;
    s.stop().await;
}

/// What a new admin types finds what they mean: part of an action (`cluster`, `session`,
/// `register`, any case), part of an actor (`admin` finds `admin:admin`); `*` stays a prefix and a
/// whole name finds only itself.
#[tokio::test]
async fn the_filters_find_parts_of_actions_and_actors() {
    let s = TestServer::start().await;
    let (token, _, _) = login(&s, None).await;
    let app = s.server.as_ref().unwrap().app.clone();
    for (actor, action) in [
        ("admin:admin", "cluster.register"),
        ("admin:admin", "cluster.patch"),
        ("admin:alice", "session.create"),
        ("admin:alice", "session.delete"),
        ("operator:clu_01JAAAAAAAAAAAAAAAAAAAAAAA", "node.cordon"),
        ("operator:clu_01JAAAAAAAAAAAAAAAAAAAAAAA", "node.uncordon"),
        ("cli", "offering.create"),
    ] {
        gshare::audit::record(&app, AuditEntry::system(actor, action, AuditResult::Success)).await;
    }
    let found = |q: &'static str| {
        let s = &s;
        let token = token.clone();
        async move {
            let res =
                s.client.get(s.url(&format!("/api/v1/audit?size=50&{q}"))).bearer_auth(token).send().await.unwrap();
            assert_eq!(res.status(), 200, "{q}");
            let page: Value = res.json().await.unwrap();
            let mut got: Vec<String> = page["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| format!("{} {}", e["actor"].as_str().unwrap(), e["action"].as_str().unwrap()))
                .collect();
            got.sort();
            assert_eq!(page["pagination"]["total"], got.len(), "{q}");
            got
        }
    };
    assert_eq!(found("action=cluster").await, ["admin:admin cluster.patch", "admin:admin cluster.register"]);
    assert_eq!(found("action=session").await, ["admin:alice session.create", "admin:alice session.delete"]);
    assert_eq!(found("action=Register").await, ["admin:admin cluster.register"]);
    assert_eq!(found("action=node.cordon").await, ["operator:clu_01JAAAAAAAAAAAAAAAAAAAAAAA node.cordon"]);
    assert_eq!(found("action=cluster.*").await, ["admin:admin cluster.patch", "admin:admin cluster.register"]);
    assert_eq!(found("action=CLUSTER.*").await, ["admin:admin cluster.patch", "admin:admin cluster.register"]);
    // `admin` finds every admin's entries (the sign-in above is admin:admin's auth.login).
    assert_eq!(
        found("actor=admin").await,
        [
            "admin:admin auth.login",
            "admin:admin cluster.patch",
            "admin:admin cluster.register",
            "admin:alice session.create",
            "admin:alice session.delete"
        ]
    );
    assert_eq!(found("actor=alice&action=delete").await, ["admin:alice session.delete"]);
    assert_eq!(found("actor=operator").await.len(), 2);
    assert_eq!(found("actor=admin:admin&action=auth.login").await, ["admin:admin auth.login"]);
    // Nothing like it, or text no actor has (non-ASCII included): an empty page, not an error.
    assert!(found("action=no-such-thing").await.is_empty());
    assert!(found("actor=%C3%A9l%C3%A8ve").await.is_empty());
    assert!(found("action=%E2%98%83*").await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn logout_and_throttled_logins_are_audited() {
    let s = TestServer::start_with(&[("GSHARE_LOGIN_MAX_FAILURES", "1")]).await;
    let (token, _, _) = login(&s, None).await;
    assert_eq!(s.client.post(s.url("/api/v1/auth/logout")).bearer_auth(&token).send().await.unwrap().status(), 204);
    let res =
        s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":"x","password":"y"})).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let res =
        s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":"x","password":"y"})).send().await.unwrap();
    assert_eq!(res.status(), 429);
    let app = s.server.as_ref().unwrap().app.clone();
    app.audit.flush().await;
    let (recs, _) = app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 10)).await.unwrap();
    let summary: Vec<(String, AuditResult)> = recs.iter().map(|r| (r.entry.action.clone(), r.entry.result)).collect();
    assert_eq!(
        summary,
        [
            ("auth.login".to_string(), AuditResult::Denied),
            ("auth.login".to_string(), AuditResult::Failure),
            ("auth.logout".to_string(), AuditResult::Success),
            ("auth.login".to_string(), AuditResult::Success),
        ]
    );
    s.stop().await;
}

/// A flood of throttled logins from one address writes one entry per window (plus the
/// first refusal at once), with the count; not one entry per request.
#[tokio::test]
async fn throttled_logins_are_aggregated_per_address_and_window() {
    let s = TestServer::start_with(&[("GSHARE_LOGIN_MAX_FAILURES", "1")]).await;
    let try_login = || s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username":"x","password":"y"})).send();
    assert_eq!(try_login().await.unwrap().status(), 401);
    for _ in 0..50 {
        assert_eq!(try_login().await.unwrap().status(), 429);
    }
    let app = s.app();
    let denied = || async {
        app.audit.flush().await;
        let (recs, _) = app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 500)).await.unwrap();
        recs.into_iter().filter(|r| r.entry.result == AuditResult::Denied).collect::<Vec<_>>()
    };
    assert_eq!(denied().await.len(), 1, "one entry for the window's first refusal");
    // The window closes: the other 49 become one entry with their count.
    s.clock.advance(app.config.login_failure_window);
    app.audit.close_windows(app.config.login_failure_window, false).await;
    let recs = denied().await;
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].entry.details["count"], 49, "{:?}", recs[0]);
    assert_eq!(recs[0].entry.details["reason"], "throttled_client_addr");
    s.stop().await;
}

#[tokio::test]
async fn retention_and_size_cap_remove_the_oldest_entries() {
    let s = TestServer::start().await;
    let app = s.app();
    for i in 0..5 {
        app.audit.record(AuditEntry::system("system", "test.old", AuditResult::Success).target(format!("o{i}"))).await;
    }
    app.audit.flush().await;
    s.clock.advance(std::time::Duration::from_secs(401 * 86400));
    for i in 0..150 {
        app.audit.record(AuditEntry::system("system", "test.new", AuditResult::Success).target(format!("n{i}"))).await;
    }
    app.audit.flush().await;
    let count = || async { app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 1)).await.unwrap().1 };
    let before = count().await;
    assert!(before >= 155, "{before}");
    // Default retention (400 days): the five old ones go.
    let removed = gshare::audit::prune(&app.store, s.clock.now_ms(), app.config.audit_retention, 1_000_000).await;
    assert_eq!(removed.unwrap(), before - 150);
    let (recs, _) = app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 500)).await.unwrap();
    assert!(recs.iter().all(|r| r.entry.action != "test.old"));
    // Size cap: the oldest beyond it go.
    gshare::audit::prune(&app.store, s.clock.now_ms(), app.config.audit_retention, 100).await.unwrap();
    let (recs, total) = app.store.read(|t| gshare::audit::list(t, &Default::default(), 1, 500)).await.unwrap();
    assert_eq!(total, 100);
    assert_eq!(recs[0].entry.target.as_deref(), Some("n149"));
    assert_eq!(recs[99].entry.target.as_deref(), Some("n50"));
    s.stop().await;
}

#[tokio::test]
async fn the_audit_api_pages_by_key() {
    let s = TestServer::start().await;
    for i in 0..25 {
        s.app()
            .audit
            .record(AuditEntry::system("system", "test.page", AuditResult::Success).target(format!("t{i}")))
            .await;
    }
    let admin = s.app().auth.api.mint("admin:admin", std::time::Duration::from_secs(600)).unwrap();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = "/api/v1/audit?size=10&action=test.page".to_string();
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = s.client.get(s.url(&url)).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
        seen.extend(page["data"].as_array().unwrap().iter().map(|r| r["target"].as_str().unwrap().to_string()));
        match page["pagination"]["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let want: Vec<String> = (0..25).rev().map(|i| format!("t{i}")).collect();
    assert_eq!(seen, want);
    // Page mode says where key paging would continue; a bad cursor is a 422.
    let page: Value =
        s.client.get(s.url("/api/v1/audit?size=10")).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
    assert!(page["pagination"]["next_cursor"].is_string(), "{page}");
    let res = s.client.get(s.url("/api/v1/audit?cursor=nope")).bearer_auth(&admin).send().await.unwrap();
    expect_error(res, 422, "validation_failed").await;
    s.stop().await;
}
