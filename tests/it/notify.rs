//! Issue 29's notifications, node drain and session liveness: a user's own notifications (list,
//! mark read, bounded, live on the events stream), `POST …/nodes/{node}/drain` in both modes with
//! its refusals, and the liveness sweep (`node_offline`, `pod_lost`), all on the test clock.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, offering, operator, register, report, send, ts};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";

/// The sessions' test server with upstream's `session_stale_after` (the suite's default is a day).
async fn server() -> TestServer {
    TestServer::start_with(&[
        ("GSHARE_SESSION_DOMAIN", "sessions.lab.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
        ("GSHARE_SESSION_STALE_AFTER", "300s"),
    ])
    .await
}

fn member(s: &TestServer, name: &str) -> String {
    s.app().auth.api.mint(&format!("user:{name}"), Duration::from_secs(3600)).unwrap()
}

async fn as_user(s: &TestServer, token: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

async fn notes(s: &TestServer, token: &str, query: &str) -> Value {
    let res = as_user(s, token, Method::GET, &format!("/api/v1/notifications{query}"), None).await;
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

fn kinds(v: &Value) -> Vec<String> {
    v["data"].as_array().unwrap().iter().map(|n| n["kind"].as_str().unwrap().to_string()).collect()
}

async fn people(s: &TestServer, names: &[&str]) {
    for n in names {
        crate::users::create_own(s, json!({"username": n, "password": "a long enough passphrase"})).await;
    }
}

/// A session for `owner`, running on `node` (on its card `card`).
async fn running(s: &TestServer, cid: &str, off: &str, owner: &str, node: &str, card: &str) -> (String, String) {
    let v = send(s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": owner})), 201).await;
    let (sid, cr) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    let body = json!({"phase": "Running", "ts": ts(s), "node_name": node, "bound_gpu_uuid": card, "restart_count": 0});
    report(s, &operator(s, cid), &cr, body).await;
    (sid, cr)
}

fn card(c: &gshare_fake_kube::FakeCluster, node: &str, i: usize) -> String {
    gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), node, i)
}

fn cr_of(c: &gshare_fake_kube::FakeCluster, name: &str) -> Option<Value> {
    c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), name)
}

async fn node_report(s: &TestServer, cid: &str, node: &str, ready: bool) {
    let body = json!({"node_id": node, "node_ready": ready, "cluster_id": cid});
    let res = s.client.post(s.url("/internal/inventory/nodes")).bearer_auth(operator(s, cid)).json(&body).send();
    assert_eq!(res.await.unwrap().status(), 202);
}

/// POSTs a drain (answering 200) while the operator acknowledges each pause it makes with a
/// Paused report, as a rescheduling drain waits for that before it resumes a session.
pub(crate) async fn drain_acked(s: &TestServer, cid: &str, path: &str, body: Option<Value>) -> Value {
    let op = operator(s, cid);
    let drain = send(s, Method::POST, path, body, 200);
    tokio::pin!(drain);
    let mut acked = std::collections::HashSet::new();
    let mut seen = s.app().store.generation();
    loop {
        tokio::select! {
            v = &mut drain => return v,
            g = s.app().store.changed_since(seen) => seen = g,
        }
        let list = send(s, Method::GET, "/api/v1/sessions?size=100", None, 200).await;
        for v in list["data"].as_array().unwrap() {
            if v["phase"] == "paused" && v["reason"] == "drained" && acked.insert(v["id"].clone()) {
                let body = json!({"phase": "Paused", "ts": ts(s), "generation": 2});
                report(s, &op, v["cr_name"].as_str().unwrap(), body).await;
            }
        }
    }
}

async fn node_of(s: &TestServer, cid: &str, node: &str) -> Value {
    let nodes = send(s, Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
    nodes.as_array().unwrap().iter().find(|n| n["name"] == node).cloned().unwrap_or_else(|| panic!("{nodes}"))
}

#[tokio::test]
async fn a_users_notifications_are_their_own_bounded_marked_read_and_pushed_live() {
    let s = server().await;
    let c = cluster("notes").await;
    let cid = register(&s, "notes", &c).await;
    let off = offering(&s, "A100 slice").await;
    people(&s, &["ann", "bob"]).await;
    let (ann, bob) = (member(&s, "ann"), member(&s, "bob"));
    let op = operator(&s, &cid);

    // Ann's stream: hello names the topic; bob's notifications never reach it.
    let mut stream = as_user(&s, &ann, Method::GET, "/api/v1/events", None).await;
    let mut text = String::new();
    crate::events::read_until(&mut stream, &mut text, "event: hello\n").await;
    assert!(text.contains(r#""topics":["sessions","notifications","offerings"]"#), "{text}");

    let (sid, cr) = running(&s, &cid, &off, "ann", "gpu-node-0", &card(&c, "gpu-node-0", 0)).await;
    // The idle reaper's warning (seconds left) and its pause.
    report(&s, &op, &cr, json!({"phase": "IdleWarning", "ts": ts(&s), "message": "300"})).await;
    crate::events::read_until(&mut stream, &mut text, "event: notifications\n").await;
    report(&s, &op, &cr, json!({"phase": "Paused", "ts": ts(&s), "message": "idle-reaped"})).await;
    // An admin resumes, pauses and ends it: the two last are the owner's news.
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/pause"), None, 200).await;
    send(&s, Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    // Bob's own pause of his own session tells nobody anything.
    let (bsid, _) = running(&s, &cid, &off, "bob", "gpu-node-1", &card(&c, "gpu-node-1", 0)).await;
    let res = as_user(&s, &bob, Method::POST, &format!("/api/v1/sessions/{bsid}/pause"), None).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());

    let v = notes(&s, &ann, "").await;
    assert_eq!(kinds(&v), ["admin_ended", "admin_paused", "idle_paused", "idle_warning"], "{v}");
    assert_eq!((v["unread"].as_u64(), v["total"].as_u64()), (Some(4), Some(4)), "{v}");
    assert!(v["data"][3]["text"].as_str().unwrap().contains("in about 5 min"), "{v}");
    assert_eq!(v["data"][0]["session_id"], sid.as_str());
    assert!(v["data"][0]["text"].as_str().unwrap().contains("administrator (admin)"), "{v}");
    let none = notes(&s, &bob, "").await;
    assert_eq!((none["data"].clone(), none["unread"].as_u64()), (json!([]), Some(0)), "bob's list: {none}");

    // Bob cannot mark ann's: her ids are not his (404), and hers stay unread.
    let first = v["data"][3]["id"].as_u64().unwrap();
    let path = format!("/api/v1/notifications/{first}/read");
    expect_error(as_user(&s, &bob, Method::POST, &path, None).await, 404, "not_found").await;
    assert_eq!(notes(&s, &ann, "").await["unread"], 4);
    let res = as_user(&s, &ann, Method::POST, &path, None).await;
    assert_eq!(res.status(), 200);
    let one: Value = res.json().await.unwrap();
    assert_eq!((one["read"].clone(), one["kind"].clone()), (json!(true), json!("idle_warning")), "{one}");
    let v = notes(&s, &ann, "?unread=true").await;
    assert_eq!((kinds(&v).len(), v["unread"].as_u64()), (3, Some(3)), "{v}");
    assert_eq!(kinds(&notes(&s, &ann, "?limit=1").await), ["admin_ended"]);
    let res = as_user(&s, &ann, Method::POST, "/api/v1/notifications/read", None).await;
    let all: Value = res.json().await.unwrap();
    assert_eq!((all["marked"].as_u64(), all["unread"].as_u64()), (Some(3), Some(0)), "{all}");
    assert_eq!(notes(&s, &ann, "").await["unread"], 0);

    // Bad input.
    for (query, loc) in
        [("?limit=0", "limit"), ("?limit=201", "limit"), ("?limit=x", "limit"), ("?unread=maybe", "unread")]
    {
        let res = as_user(&s, &ann, Method::GET, &format!("/api/v1/notifications{query}"), None).await;
        let e = expect_error(res, 422, "validation_failed").await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", loc]), "{query}: {e}");
    }
    for id in ["x", "99", "-1", "%0a"] {
        let res = as_user(&s, &ann, Method::POST, &format!("/api/v1/notifications/{id}/read"), None).await;
        expect_error(res, 404, "not_found").await;
    }
    let anon = s.client.get(s.url("/api/v1/notifications")).send().await.unwrap();
    expect_error(anon, 401, "unauthenticated").await;

    // Live: a push for bob is not ann's event; one for ann is. A member's burst sends
    // `notifications` before `offerings`, so an offering written after a push is a marker: once
    // its event is read, any notification event of that burst (or before) is read too.
    offering(&s, "marker-0").await;
    let from = text.len();
    crate::events::read_until_from(&mut stream, &mut text, from, "event: offerings\n").await;
    let seen = text.len();
    let push = |user: &'static str| {
        let now = s.clock.now_ms();
        s.app().store.write(move |txn| {
            gshare::notifications::push(txn, now, user, gshare::notifications::Kind::BudgetWarning, None, "80 %")
        })
    };
    push("bob").await.unwrap();
    offering(&s, "marker-1").await;
    crate::events::read_until_from(&mut stream, &mut text, seen, "event: offerings\n").await;
    assert!(!text[seen..].contains("event: notifications\n"), "bob's notification reached ann: {text}");
    let seen = text.len();
    push("ann").await.unwrap();
    crate::events::read_until_from(&mut stream, &mut text, seen, "event: notifications\n").await;

    // Bounded: the newest 200 are kept, the oldest dropped with their unread count.
    for _ in 0..205 {
        push("carl").await.unwrap();
    }
    let carl = s.app().store.read(|txn| gshare::notifications::list(txn, "carl", false, 200)).await.unwrap();
    assert_eq!((carl.total, carl.unread, carl.data.len()), (200, 200, 200));
    assert_eq!((carl.data[0].id, carl.data[199].id), (204, 5));
    s.stop().await;
}

#[tokio::test]
async fn the_runtime_warning_and_end_are_the_owners_notifications() {
    let s = server().await;
    let c = cluster("rt-notes").await;
    let cid = register(&s, "rt-notes", &c).await;
    let off = offering(&s, "A100 slice").await; // max_runtime_sec 7200
    people(&s, &["ann"]).await;
    running(&s, &cid, &off, "ann", "gpu-node-0", &card(&c, "gpu-node-0", 0)).await;
    s.clock.advance(Duration::from_secs(7200 - 9 * 60));
    s.app().sessions.enforce_runtime().await.unwrap();
    let v = notes(&s, &member(&s, "ann"), "").await;
    assert_eq!(kinds(&v), ["runtime_warning"], "{v}");
    assert!(v["data"][0]["text"].as_str().unwrap().contains("in 9 min"), "{v}");
    s.clock.advance(Duration::from_secs(9 * 60));
    s.app().sessions.enforce_runtime().await.unwrap();
    assert_eq!(kinds(&notes(&s, &member(&s, "ann"), "").await), ["runtime_ended", "runtime_warning"]);
    s.stop().await;
}

#[tokio::test]
async fn a_drain_reschedules_where_the_fit_check_finds_room_parks_otherwise_and_can_terminate() {
    let s = server().await;
    let c = cluster("drain").await;
    let cid = register(&s, "drain", &c).await;
    let off = offering(&s, "A100 slice").await;
    people(&s, &["ann", "bob"]).await;
    let (s1, cr1) = running(&s, &cid, &off, "ann", "gpu-node-0", &card(&c, "gpu-node-0", 0)).await;
    let (s2, cr2) = running(&s, &cid, &off, "bob", "gpu-node-0", &card(&c, "gpu-node-0", 1)).await;
    let (s3, _) = running(&s, &cid, &off, "bob", "gpu-node-1", &card(&c, "gpu-node-1", 0)).await;
    let drain = |node: &str| format!("/api/v1/clusters/{cid}/nodes/{node}/drain");

    // Reschedule: node 1 has room for both.
    let r = drain_acked(&s, &cid, &drain("gpu-node-0"), Some(json!({"mode": "reschedule", "reason": "fan"}))).await;
    assert_eq!(
        (r["status"].as_str(), r["mode"].as_str(), r["node_id"].as_str()),
        (Some("cordoned"), Some("reschedule"), Some("gpu-node-0"))
    );
    assert_eq!(r["affected_sessions"], json!([s1, s2]), "{r}");
    assert_eq!((r["rescheduled"].clone(), r["parked"].clone()), (json!([s1, s2]), json!([])), "{r}");
    assert_eq!(r["sessions"][0]["outcome"], "rescheduled", "{r}");
    assert_eq!(node_of(&s, &cid, "gpu-node-0").await["cordoned"], true);
    for (sid, cr) in [(&s1, &cr1), (&s2, &cr2)] {
        let v = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await;
        assert_eq!(v["phase"], "running", "{v}");
        let o = cr_of(&c, cr).unwrap();
        assert_eq!(
            (o["spec"]["paused"].clone(), o["spec"]["excludedNodes"].clone()),
            (json!(false), json!(["gpu-node-0"]))
        );
    }
    assert_eq!(send(&s, Method::GET, &format!("/api/v1/sessions/{s3}"), None, 200).await["phase"], "running");
    let v = notes(&s, &member(&s, "ann"), "").await;
    assert_eq!(kinds(&v), ["drained"], "{v}");
    assert!(v["data"][0]["text"].as_str().unwrap().contains("another node"), "{v}");
    // Audited with what happened.
    let log = send(&s, Method::GET, "/api/v1/audit?action=node.drain", None, 200).await;
    let e = &log["data"][0];
    assert_eq!(
        (e["result"].as_str(), e["target"].as_str()),
        (Some("success"), Some(format!("{cid}/gpu-node-0").as_str())),
        "{log}"
    );
    assert_eq!(
        (e["details"]["mode"].clone(), e["details"]["rescheduled"].clone()),
        (json!("reschedule"), json!([s1, s2])),
        "{log}"
    );

    // The two now run on node 1; with node 0 still cordoned, a drain of node 1 finds no room:
    // all three are parked, paused, reason drained.
    let op = operator(&s, &cid);
    for (cr, i) in [(&cr1, 1), (&cr2, 2)] {
        let body = json!({"phase": "Running", "ts": ts(&s), "node_name": "gpu-node-1", "bound_gpu_uuid": card(&c, "gpu-node-1", i)});
        report(&s, &op, cr, body).await;
    }
    let r = drain_acked(&s, &cid, &drain("gpu-node-1"), Some(json!({}))).await;
    assert_eq!(r["mode"], "reschedule", "the default mode: {r}");
    let mut parked: Vec<String> = vec![s1.clone(), s2.clone(), s3.clone()];
    parked.sort();
    assert_eq!((r["parked"].clone(), r["rescheduled"].clone()), (json!(parked), json!([])), "{r}");
    assert!(r["sessions"][0]["message"].as_str().unwrap().contains("paused; not resumed"), "{r}");
    for sid in &parked {
        let v = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await;
        assert_eq!((v["phase"].as_str(), v["reason"].as_str()), (Some("paused"), Some("drained")), "{v}");
    }
    assert_eq!(kinds(&notes(&s, &member(&s, "bob"), "").await), ["drained", "drained", "drained"]);

    // force_terminate: node 0 back in service, ann's session resumed there, then ended by a drain.
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/gpu-node-0/uncordon"), None, 200).await;
    send(&s, Method::POST, &format!("/api/v1/sessions/{s1}/resume"), None, 200).await;
    let body = json!({"phase": "Running", "ts": ts(&s), "node_name": "gpu-node-0", "bound_gpu_uuid": card(&c, "gpu-node-0", 2)});
    report(&s, &op, &cr1, body).await;
    let r = send(&s, Method::POST, &drain("gpu-node-0"), Some(json!({"mode": "force_terminate"})), 200).await;
    assert_eq!((r["terminated"].clone(), r["affected_sessions"].clone()), (json!([s1]), json!([s1])), "{r}");
    let v = send(&s, Method::GET, &format!("/api/v1/sessions/{s1}"), None, 200).await;
    assert!(["terminating", "terminated"].contains(&v["phase"].as_str().unwrap()), "{v}");
    assert_eq!(v["reason"], "drained", "{v}");
    assert!(cr_of(&c, &cr1).is_none(), "the CR is deleted");
    // A drain of an empty node: cordoned, nothing else.
    let r = send(&s, Method::POST, &drain("gpu-node-0"), None, 200).await;
    assert_eq!(r["affected_sessions"], json!([]), "{r}");

    // Bad input, each changing nothing.
    for (body, status, code) in [
        (json!({"mode": "evacuate"}), 422, "validation_failed"),
        (json!({"mode": "reschedule", "extra": 1}), 422, "validation_failed"),
        (json!({"reason": "x".repeat(501)}), 422, "validation_failed"),
    ] {
        expect_error(call(&s, Method::POST, &drain("gpu-node-1"), Some(body.clone())).await, status, code).await;
    }
    let res = s.client.post(s.url(&drain("gpu-node-1"))).bearer_auth(crate::sessions::admin(&s)).body("{").send();
    expect_error(res.await.unwrap(), 400, "invalid_json").await;
    expect_error(call(&s, Method::POST, &drain("gpu-node-9"), Some(json!({}))).await, 404, "not_found").await;
    expect_error(call(&s, Method::POST, &drain("Not_A_Node"), Some(json!({}))).await, 404, "not_found").await;
    let other = "/api/v1/clusters/clu_01J00000000000000000000000/nodes/gpu-node-0/drain";
    expect_error(call(&s, Method::POST, other, Some(json!({}))).await, 404, "not_found").await;
    let res = as_user(&s, &member(&s, "ann"), Method::POST, &drain("gpu-node-1"), Some(json!({}))).await;
    expect_error(res, 403, "forbidden_role").await;
    s.stop().await;
}

#[tokio::test]
async fn a_drain_while_the_operator_is_silent_does_nothing_and_a_node_back_during_a_drain_stays_out() {
    let s = server().await;
    let c = cluster("drain-silent").await;
    let cid = register(&s, "drain-silent", &c).await;
    let off = offering(&s, "A100 slice").await;
    let (sid, cr) = running(&s, &cid, &off, "ann", "gpu-node-0", &card(&c, "gpu-node-0", 0)).await;
    let drain = format!("/api/v1/clusters/{cid}/nodes/gpu-node-0/drain");

    // Silent for three minutes: refused, and nothing cordoned, paused or ended.
    s.clock.advance(Duration::from_secs(180));
    let e = expect_error(call(&s, Method::POST, &drain, Some(json!({}))).await, 409, "operator_not_connected").await;
    assert_eq!(e["error"]["details"]["sessions"], json!([sid]), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("nothing was cordoned, paused or ended"), "{e}");
    assert_eq!(node_of(&s, &cid, "gpu-node-0").await["cordoned"], false);
    assert_eq!(send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await["phase"], "running");
    assert_ne!(cr_of(&c, &cr).unwrap()["spec"]["paused"], json!(true));
    let log = send(&s, Method::GET, "/api/v1/audit?action=node.drain", None, 200).await;
    assert_eq!(log["data"][0]["result"], "failure", "{log}");

    // The node goes NotReady, the operator is back; the drain moves the session off it. Then the
    // node comes back: it stays cordoned and the moved session's CR keeps excluding it.
    node_report(&s, &cid, "gpu-node-0", false).await;
    node_report(&s, &cid, "gpu-node-1", true).await;
    let r = drain_acked(&s, &cid, &drain, Some(json!({"mode": "reschedule"}))).await;
    assert_eq!(r["rescheduled"], json!([sid]), "{r}");
    node_report(&s, &cid, "gpu-node-0", true).await;
    let n = node_of(&s, &cid, "gpu-node-0").await;
    assert_eq!((n["cordoned"].clone(), n["offline"].clone()), (json!(true), json!(false)), "{n}");
    assert_eq!(cr_of(&c, &cr).unwrap()["spec"]["excludedNodes"], json!(["gpu-node-0"]));
    // The moved session is not judged by the node it left.
    s.app().inventory.flush_liveness().await.unwrap();
    assert_eq!(s.app().sessions.enforce_liveness().await.unwrap(), Default::default());
    s.stop().await;
}

async fn sweep(s: &TestServer) -> gshare::sessions::drain::LivenessSweep {
    s.app().inventory.flush_liveness().await.unwrap();
    s.app().sessions.enforce_liveness().await.unwrap()
}

async fn phase(s: &TestServer, sid: &str) -> Value {
    send(s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await
}

async fn beat(s: &TestServer, op: &str, cr: &str) {
    report(s, op, cr, json!({"phase": "Heartbeat", "ts": ts(s), "restart_count": 0})).await
}

#[tokio::test]
async fn sessions_on_an_offline_node_end_node_offline_and_silent_pods_end_pod_lost_while_the_operator_lives() {
    let s = server().await;
    let c = cluster("live").await;
    let cid = register(&s, "live", &c).await;
    let off = offering(&s, "A100 slice").await;
    people(&s, &["ann"]).await;
    let (s0, cr0) = running(&s, &cid, &off, "ann", "gpu-node-0", &card(&c, "gpu-node-0", 0)).await;
    let (s1, cr1) = running(&s, &cid, &off, "bob", "gpu-node-1", &card(&c, "gpu-node-1", 0)).await;
    let op = operator(&s, &cid);
    assert_eq!(sweep(&s).await, Default::default());

    // Node 0 goes NotReady: judged only after node_stale_after (120 s), while node 1 and the
    // sessions' pods keep reporting.
    node_report(&s, &cid, "gpu-node-0", false).await;
    assert_eq!(sweep(&s).await, Default::default(), "a node just gone NotReady");
    for _ in 0..4 {
        s.clock.advance(Duration::from_secs(30));
        node_report(&s, &cid, "gpu-node-1", true).await;
        beat(&s, &op, &cr0).await;
        beat(&s, &op, &cr1).await;
    }
    let done = sweep(&s).await;
    assert_eq!((done.node_offline.clone(), done.pod_lost.len()), (vec![s0.clone()], 0), "{done:?}");
    let v = phase(&s, &s0).await;
    assert_eq!((v["phase"].as_str(), v["reason"].as_str()), (Some("terminated"), Some("node_offline")), "{v}");
    assert!(cr_of(&c, &cr0).is_none(), "its CR is deleted");
    let n = notes(&s, &member(&s, "ann"), "").await;
    assert_eq!(kinds(&n), ["node_lost"], "{n}");
    assert_eq!(phase(&s, &s1).await["phase"], "running");

    // Session 1's pod goes quiet while the operator reports on: 299 s is not enough, 300 s is.
    let mut quiet = 0;
    while quiet < 299 {
        s.clock.advance(Duration::from_secs(23));
        quiet += 23;
        node_report(&s, &cid, "gpu-node-1", true).await;
    }
    assert_eq!(sweep(&s).await, Default::default(), "{quiet} s without a report");
    s.clock.advance(Duration::from_secs(300 - quiet + 1));
    node_report(&s, &cid, "gpu-node-1", true).await;
    let done = sweep(&s).await;
    assert_eq!(done.pod_lost, vec![s1.clone()], "{done:?}");
    let v = phase(&s, &s1).await;
    assert_eq!((v["phase"].as_str(), v["reason"].as_str()), (Some("terminated"), Some("pod_lost")), "{v}");
    assert!(cr_of(&c, &cr1).is_none());

    // With the operator silent, a quiet session is left alone (an outage is not lost work).
    let (s2, _) = running(&s, &cid, &off, "ann", "gpu-node-1", &card(&c, "gpu-node-1", 1)).await;
    s.clock.advance(Duration::from_secs(600));
    let done = sweep(&s).await;
    assert_eq!((done.pod_lost.len(), done.left.clone()), (0, vec![s2.clone()]), "{done:?}");
    assert_eq!(phase(&s, &s2).await["phase"], "running");
    s.stop().await;
}
