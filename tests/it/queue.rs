//! Fair sharing's queue and budgets end to end. The queue: a GPU session that does not fit now is
//! queued when the owner's policy allows `max_queued` (phase pending, nothing applied, its place
//! shown), served strictly in order per cluster as cards free (one start in flight at a time, so
//! two passes cannot both take the last card), and its bad inputs: over `max_queued`, a request
//! no card could ever hold, a cancel, a deactivated offering, a disabled owner, a limit lowered
//! below use. Budgets: a group's monthly GPU-hour budget warns at 80 %, refuses new GPU sessions
//! at 100 % and pauses running ones after a 10-minute grace (`budget_exhausted`); a new month
//! starts clean. Passes are called directly (the timer's and the woken task's work), with the
//! test clock; the state is asserted, not the pass's own list (the background task may serve
//! first).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, operator, register, report, send, server, ts};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";

fn token(s: &TestServer, name: &str) -> String {
    s.app().auth.api.mint(&format!("admin:{name}"), Duration::from_secs(3600)).unwrap()
}

async fn call_as(s: &TestServer, who: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token(s, who));
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

async fn json_of(res: reqwest::Response, want: u16) -> Value {
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// A whole-card A100 offering.
async fn whole_card(s: &TestServer, name: &str) -> String {
    let body = json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
                      "mode": "exclusive", "gpu_mem_mb": 1024, "cpu": 1, "mem_gb": 1});
    send(s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

/// The cluster's cards: (node, uuid).
async fn cards(s: &TestServer, cid: &str) -> Vec<(String, String)> {
    let nodes = send(s, Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
    let mut out = Vec::new();
    for n in nodes.as_array().unwrap() {
        for g in n["gpus"].as_array().unwrap() {
            out.push((n["name"].as_str().unwrap().to_string(), g["uuid"].as_str().unwrap().to_string()));
        }
    }
    out
}

fn crs(c: &gshare_fake_kube::FakeCluster) -> Vec<String> {
    c.store()
        .list("gshare.io", "v1", "gsharesessions", Some(NS))
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn get(s: &TestServer, id: &str) -> Value {
    send(s, Method::GET, &format!("/api/v1/sessions/{id}"), None, 200).await
}

/// Creates a session of `off` for `owner` (as an admin) and answers the raw response.
async fn create(s: &TestServer, off: &str, owner: &str) -> reqwest::Response {
    call(s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": owner}))).await
}

/// The operator runs the session on `card`.
async fn runs_on(s: &TestServer, cid: &str, v: &Value, card: &(String, String)) {
    let body = json!({"phase": "Running", "ts": ts(s), "bound_gpu_uuid": card.1, "node_name": card.0, "generation": 1});
    report(s, &operator(s, cid), v["cr_name"].as_str().unwrap(), body).await;
}

async fn ends(s: &TestServer, cid: &str, v: &Value) {
    let body = json!({"phase": "Terminated", "ts": ts(s), "generation": 1});
    report(s, &operator(s, cid), v["cr_name"].as_str().unwrap(), body).await;
}

/// The operator calls back now (its liveness written at once, not at the next flush).
async fn heard_from(s: &TestServer, cid: &str) {
    crate::sessions::operator_calls_back(s, cid).await;
    s.app().inventory.flush_liveness().await.unwrap();
}

async fn serve(s: &TestServer) {
    s.app().sessions.serve_queue().await.unwrap();
}

/// A cluster whose every card runs a whole-card session; the sessions in card order.
async fn full_cluster(s: &TestServer, c: &gshare_fake_kube::FakeCluster, name: &str) -> (String, String, Vec<Value>) {
    let cid = register(s, name, c).await;
    let off = whole_card(s, &format!("{name}-whole")).await;
    let all = cards(s, &cid).await;
    assert!(all.len() >= 2, "{all:?}");
    let mut running = Vec::new();
    for card in &all {
        let v = json_of(create(s, &off, "runner").await, 201).await;
        assert_eq!(v["queue_position"], Value::Null, "{v}");
        runs_on(s, &cid, &v, card).await;
        running.push(v);
    }
    (cid, off, running)
}

#[tokio::test]
async fn a_session_that_does_not_fit_is_queued_and_started_in_order_as_cards_free() {
    let s = server().await;
    let c = cluster("queue-order").await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50, "max_queued": 2})),
        201,
    )
    .await;
    let (cid, off, running) = full_cluster(&s, &c, "queue-order").await;
    crate::users::create_own(&s, json!({"username": "ann", "password": "correct horse battery staple"})).await;
    let all = cards(&s, &cid).await;
    let applied = crs(&c).len();

    // No card is free: queued, nothing applied, its place shown.
    let first = json_of(create(&s, &off, "ann").await, 201).await;
    assert_eq!(
        (&first["phase"], &first["queue_position"], &first["queued_reason"], &first["actions"]),
        (&json!("pending"), &json!(1), &json!("no_gpu_capacity"), &json!(["delete"])),
        "{first}"
    );
    assert!(first["queued_at"].is_string(), "{first}");
    let second = json_of(create(&s, &off, "ann").await, 201).await;
    assert_eq!((&second["queue_position"], &second["queued_reason"]), (&json!(2), &json!("queue_ahead")), "{second}");
    assert_eq!(crs(&c).len(), applied, "nothing applied for a queued session");
    // Over max_queued: upstream's shape.
    let e = expect_error(create(&s, &off, "ann").await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"limit": 2, "queued": 2}), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("max_queued"), "{e}");
    // Another owner may queue too (max_queued is per owner): third in line.
    let third = json_of(create(&s, &off, "bob").await, 201).await;
    assert_eq!(third["queue_position"], 3, "{third}");
    // What no card could ever hold is refused, not queued.
    let body = json!({"name": "two-cards", "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
                      "gpu_mem_mb": 163_840, "gpu_cores": 50, "cpu": 1, "mem_gb": 1});
    let huge = send(&s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string();
    expect_error(create(&s, &huge, "bob").await, 409, "unserviceable").await;
    // The list shows the places too (members' and admins' views read the same).
    let list = send(&s, Method::GET, "/api/v1/sessions?owner=ann", None, 200).await;
    let places: Vec<(Value, Value)> =
        list["data"].as_array().unwrap().iter().map(|v| (v["id"].clone(), v["queue_position"].clone())).collect();
    assert!(places.contains(&(first["id"].clone(), json!(1))) && places.contains(&(second["id"].clone(), json!(2))));
    let mine = json_of(call_as(&s, "ann", Method::GET, "/api/v1/sessions", None).await, 200).await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 2, "{mine}");
    assert!(mine["data"].as_array().unwrap().iter().all(|v| v["queue_position"].is_u64()), "{mine}");

    // Still full: the queue waits.
    serve(&s).await;
    assert_eq!(get(&s, first["id"].as_str().unwrap()).await["queue_position"], 1);
    // A card frees: the head starts (its CR applied), the rest move up (and bob's live events,
    // whose session was not written, hear of it).
    let bob_key = gshare::sessions::model::owner_sessions_key("bob");
    let bob_seen = s.app().store.table_generation(&[&bob_key]);
    ends(&s, &cid, &running[0]).await;
    serve(&s).await;
    assert!(s.app().store.table_generation(&[&bob_key]) > bob_seen, "bob hears his place changed");
    let v = get(&s, first["id"].as_str().unwrap()).await;
    assert_eq!(
        (&v["queue_position"], &v["queued_reason"], &v["phase"]),
        (&Value::Null, &Value::Null, &json!("pending")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("started after waiting"), "{v}");
    assert_eq!(v["actions"], json!(["pause", "delete"]));
    assert!(crs(&c).contains(&v["cr_name"].as_str().unwrap().to_string()), "the started session's CR is applied");
    assert_eq!(get(&s, second["id"].as_str().unwrap()).await["queue_position"], 1);
    assert_eq!(get(&s, third["id"].as_str().unwrap()).await["queue_position"], 2);
    // A second card frees while the first start is not bound yet: the next waits for it (the
    // started session's slice is booked only when it runs), so one card is never given twice.
    ends(&s, &cid, &running[1]).await;
    serve(&s).await;
    assert_eq!(get(&s, second["id"].as_str().unwrap()).await["queue_position"], 1, "one start in flight at a time");
    runs_on(&s, &cid, &v, &all[0]).await;
    serve(&s).await;
    let v2 = get(&s, second["id"].as_str().unwrap()).await;
    assert_eq!(v2["queue_position"], Value::Null, "{v2}");
    assert!(crs(&c).contains(&v2["cr_name"].as_str().unwrap().to_string()));
    assert_eq!(get(&s, third["id"].as_str().unwrap()).await["queue_position"], 1);
    s.stop().await;
}

#[tokio::test]
async fn racing_queue_passes_start_one_session_for_one_free_card() {
    let s = server().await;
    let c = cluster("queue-race").await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50, "max_queued": 5})),
        201,
    )
    .await;
    let (cid, off, running) = full_cluster(&s, &c, "queue-race").await;
    let mut queued = Vec::new();
    for _ in 0..3 {
        queued.push(json_of(create(&s, &off, "ann").await, 201).await["id"].as_str().unwrap().to_string());
    }
    ends(&s, &cid, &running[0]).await;
    let app = s.app();
    let (a, b, c2) = tokio::join!(app.sessions.serve_queue(), app.sessions.serve_queue(), app.sessions.serve_queue());
    let started = a.unwrap().started.len() + b.unwrap().started.len() + c2.unwrap().started.len();
    assert!(started <= 1, "{started}");
    let mut waiting = 0;
    for id in &queued {
        waiting += usize::from(get(&s, id).await["queue_position"].is_u64());
    }
    assert_eq!(waiting, 2, "exactly one of three started for one free card");
    s.stop().await;
}

#[tokio::test]
async fn bad_queue_entries_leave_with_a_reason_and_a_lowered_limit_holds_only_its_owner() {
    let s = server().await;
    let c = cluster("queue-bad").await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50, "max_queued": 3})),
        201,
    )
    .await;
    let (cid, off, running) = full_cluster(&s, &c, "queue-bad").await;
    for name in ["ann", "bob", "cat", "dan"] {
        crate::users::create_own(&s, json!({"username": name, "password": "correct horse battery staple"})).await;
    }
    let other = whole_card(&s, "queue-bad-other").await;
    // Members queue their own.
    let body = |o: &str| Some(json!({"offering_id": o}));
    let a = json_of(call_as(&s, "ann", Method::POST, "/api/v1/sessions", body(&other)).await, 201).await;
    let b = json_of(call_as(&s, "bob", Method::POST, "/api/v1/sessions", body(&off)).await, 201).await;
    let a2 = json_of(call_as(&s, "ann", Method::POST, "/api/v1/sessions", body(&off)).await, 201).await;
    // Cat queues two (the first will run before her limit is lowered); dan queues behind her.
    let cat_runs =
        json_of(call_as(&s, "cat", Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off}))).await, 201)
            .await;
    let cat = json_of(call_as(&s, "cat", Method::POST, "/api/v1/sessions", body(&off)).await, 201).await;
    let dan = json_of(call_as(&s, "dan", Method::POST, "/api/v1/sessions", body(&off)).await, 201).await;
    assert_eq!(dan["queue_position"], 6, "{dan}");
    assert_eq!(cat_runs["queue_position"], 4, "{cat_runs}");

    // A cancel ends a queued session; no CR ever existed.
    let id = a2["id"].as_str().unwrap();
    let v = json_of(call_as(&s, "ann", Method::DELETE, &format!("/api/v1/sessions/{id}"), None).await, 200).await;
    assert_eq!(
        (&v["phase"], &v["reason"], &v["queue_position"]),
        (&json!("terminated"), &json!("deleted"), &Value::Null),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("cancelled while queued"), "{v}");
    // Bob cannot cancel ann's (another's answers as a missing one).
    let aid = a["id"].as_str().unwrap();
    expect_error(call_as(&s, "bob", Method::DELETE, &format!("/api/v1/sessions/{aid}"), None).await, 404, "not_found")
        .await;

    // Ann's offering is deactivated and bob is disabled while they wait: both leave, unstarted.
    send(&s, Method::PATCH, &format!("/api/v1/offerings/{other}"), Some(json!({"status": "inactive"})), 200).await;
    send(&s, Method::PATCH, "/api/v1/users/bob", Some(json!({"disabled": true})), 200).await;
    // A card frees.
    ends(&s, &cid, &running[0]).await;
    serve(&s).await;
    let v = get(&s, aid).await;
    assert_eq!(
        (&v["phase"], &v["reason"], &v["queue_position"]),
        (&json!("terminated"), &json!("offering_inactive"), &Value::Null),
        "{v}"
    );
    let v = get(&s, b["id"].as_str().unwrap()).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("terminated"), &json!("account_disabled")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("disabled"), "{v}");
    // Cat's first (queued before the limit changed) starts: it already counted.
    let v = get(&s, cat_runs["id"].as_str().unwrap()).await;
    assert_eq!(v["queue_position"], Value::Null, "{v}");
    runs_on(&s, &cid, &v, &cards(&s, &cid).await[0]).await;
    // Cat's limit is lowered below her use (a running and a queued session); another card frees.
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "user", "scope_id": "cat", "max_concurrent": 1})),
        201,
    )
    .await;
    ends(&s, &cid, &running[1]).await;
    serve(&s).await;
    // Her second is held by her lowered limit; dan behind her is served.
    let v = get(&s, cat["id"].as_str().unwrap()).await;
    assert_eq!((&v["queue_position"], &v["queued_reason"]), (&json!(1), &json!("quota_exceeded")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("max_concurrent"), "{v}");
    let d = get(&s, dan["id"].as_str().unwrap()).await;
    assert_eq!(d["queue_position"], Value::Null, "{d}");
    // Nothing of the dropped or cancelled was ever applied.
    let names = crs(&c);
    for v in [&a, &b, &a2, &cat] {
        assert!(!names.contains(&v["cr_name"].as_str().unwrap().to_string()), "{v}");
    }
    assert!(names.contains(&d["cr_name"].as_str().unwrap().to_string()));
    s.stop().await;
}

#[tokio::test]
async fn a_groups_gpu_hour_budget_warns_refuses_and_pauses_after_the_grace_and_a_new_month_starts_clean() {
    let s = server().await;
    let c = cluster("budget").await;
    let cid = register(&s, "budget", &c).await;
    // A slice with no runtime limit (the timer's runtime sweep must not end it as the clock moves).
    let body = json!({"name": "budget slice", "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4",
                      "gpu_model": "A100", "gpu_mem_mb": 20480, "gpu_cores": 30, "cpu": 4, "mem_gb": 16});
    let off = send(&s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string();
    send(&s, Method::POST, "/api/v1/groups", Some(json!({"name": "vision"})), 201).await;
    for name in ["ann", "ben"] {
        crate::users::create_own(
            &s,
            json!({"username": name, "group": "vision", "password": "correct horse battery staple"}),
        )
        .await;
    }
    // Bad budgets: negative, absurd, global.
    for (body, loc) in [
        (json!({"scope": "group", "scope_id": "vision", "gpu_hours_month": -1}), "gpu_hours_month"),
        (json!({"scope": "group", "scope_id": "vision", "gpu_hours_month": 10_000_001}), "gpu_hours_month"),
        (json!({"scope": "global", "gpu_hours_month": 5}), "gpu_hours_month"),
    ] {
        let e = expect_error(
            call(&s, Method::POST, "/api/v1/resource-policies", Some(body)).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["body", loc]), "{e}");
    }
    let p = send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "group", "scope_id": "vision", "gpu_hours_month": 10})),
        201,
    )
    .await;
    assert_eq!(p["gpu_hours_month"], 10);

    // From the start of a month (so the test's hours stay in one).
    use gshare::policy::usage::{day_of, midnight_ms, month_end};
    let now = s.clock.now_ms();
    let next = midnight_ms(month_end(day_of(now)).next_day().unwrap());
    s.clock.advance(Duration::from_millis((next - now) as u64 + 60_000));
    heard_from(&s, &cid).await;
    let body = |o: &str| Some(json!({"offering_id": o}));
    let v = json_of(call_as(&s, "ann", Method::POST, "/api/v1/sessions", body(&off)).await, 201).await;
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    report(
        &s,
        &operator(&s, &cid),
        &name,
        json!({"phase": "Running", "ts": ts(&s), "node_name": "gpu-node-0", "generation": 1}),
    )
    .await;
    let sweep = || s.app().sessions.enforce_budgets();
    assert_eq!(sweep().await.unwrap(), Default::default());

    // 8 of 10 hours: warned once; the account view shows the budget.
    s.clock.advance(Duration::from_secs(8 * 3600));
    let done = sweep().await.unwrap();
    assert_eq!(done.warned, ["group:vision"]);
    let v = get(&s, &sid).await;
    assert!(
        v["message"].as_str().unwrap().contains("budget-warning") && v["message"].as_str().unwrap().contains("80 %"),
        "{v}"
    );
    assert_eq!(sweep().await.unwrap(), Default::default(), "warned once a month");
    let acct = json_of(call_as(&s, "ben", Method::GET, "/api/v1/account", None).await, 200).await;
    let b = &acct["policy"]["budgets"][0];
    assert_eq!(
        (&b["scope"], &b["subject"], &b["limit_gpu_hours"]),
        (&json!("group"), &json!("vision"), &json!(10)),
        "{acct}"
    );
    assert_eq!((b["used_gpu_hours"].as_f64(), b["percent"].as_f64()), (Some(8.0), Some(80.0)), "{b}");
    assert!(b["warned_at"].is_string() && b["exhausted_at"].is_null(), "{b}");

    // 10 of 10: new GPU sessions refused (ben's too: the group's budget), the running one told.
    s.clock.advance(Duration::from_secs(2 * 3600));
    let done = sweep().await.unwrap();
    assert_eq!(done.exhausted, ["group:vision"]);
    assert!(get(&s, &sid).await["message"].as_str().unwrap().contains("paused at"));
    heard_from(&s, &cid).await;
    let e = expect_error(call_as(&s, "ben", Method::POST, "/api/v1/sessions", body(&off)).await, 409, "quota_exceeded")
        .await;
    assert_eq!(e["error"]["details"], json!({"resource": "gpu_hours", "limit": 10, "used": 10.0, "request": 1}), "{e}");
    // The grace: nothing is paused before 10 minutes.
    s.clock.advance(Duration::from_secs(9 * 60));
    assert!(sweep().await.unwrap().paused.is_empty());
    s.clock.advance(Duration::from_secs(60));
    let done = sweep().await.unwrap();
    assert_eq!(done.paused, std::slice::from_ref(&sid));
    let v = get(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("paused"), &json!("budget_exhausted")), "{v}");
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), &name).unwrap();
    assert_eq!(cr["spec"]["paused"], true, "paused through the CR");
    // Resuming it is refused like a new one.
    let e = expect_error(
        call_as(&s, "ann", Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None).await,
        409,
        "quota_exceeded",
    )
    .await;
    assert_eq!(e["error"]["details"]["resource"], "gpu_hours");

    // A new month starts clean: no use, no warning, sessions admitted again.
    let now = s.clock.now_ms();
    let next = midnight_ms(month_end(day_of(now)).next_day().unwrap());
    s.clock.advance(Duration::from_millis((next - now) as u64 + 60_000));
    let acct = json_of(call_as(&s, "ann", Method::GET, "/api/v1/account", None).await, 200).await;
    let b = &acct["policy"]["budgets"][0];
    assert_eq!(
        (b["used_gpu_hours"].as_f64(), &b["warned_at"], &b["exhausted_at"]),
        (Some(0.0), &Value::Null, &Value::Null),
        "{b}"
    );
    json_of(call_as(&s, "ann", Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None).await, 200).await;
    s.stop().await;
}
