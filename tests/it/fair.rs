//! Fair sharing's last gaps end to end: creates racing for the last free slice (exactly one wins:
//! the fit check and the insert are one transaction, and an admitted session's slice is held on
//! a card until the operator reports the card it was bound to, then counted once, from the card);
//! a queued head no card it may use could ever hold (passed over at once, gone `unserviceable`
//! after a grace, its owner told, the sessions behind it served); a queued session of a group
//! with a node pool started only on its pool's nodes; a query parameter given twice refused
//! naming it. Queue passes are called directly with the test clock; the state is asserted.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, operator, register, report, send, server, ts};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";
const N0: &str = "gpu-node-0";
const N1: &str = "gpu-node-1";

fn token(s: &TestServer, name: &str) -> String {
    s.app().auth.api.mint(&format!("admin:{name}"), Duration::from_secs(3600)).unwrap()
}

async fn call_as(s: &TestServer, who: &str, method: Method, path: &str) -> reqwest::Response {
    s.client.request(method, s.url(path)).bearer_auth(token(s, who)).send().await.unwrap()
}

async fn json_of(res: reqwest::Response, want: u16) -> Value {
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn offering(s: &TestServer, body: Value) -> String {
    send(s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

/// A whole-card A100 offering.
async fn whole_card(s: &TestServer, name: &str) -> String {
    offering(
        s,
        json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
               "mode": "exclusive", "gpu_mem_mb": 1024, "cpu": 1, "mem_gb": 1}),
    )
    .await
}

/// An A100 slice offering.
async fn slice(s: &TestServer, name: &str, mem_mb: u64, cores: u64) -> String {
    offering(
        s,
        json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
               "gpu_mem_mb": mem_mb, "gpu_cores": cores, "cpu": 1, "mem_gb": 1}),
    )
    .await
}

/// The cluster's cards: (node, uuid), node by node.
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

/// The `excludedNodes` of the CR a session got.
fn excluded(c: &gshare_fake_kube::FakeCluster, v: &Value) -> Value {
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), v["cr_name"].as_str().unwrap()).unwrap();
    cr["spec"]["excludedNodes"].clone()
}

async fn get(s: &TestServer, v: &Value) -> Value {
    send(s, Method::GET, &format!("/api/v1/sessions/{}", v["id"].as_str().unwrap()), None, 200).await
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

/// `owner`'s sessions (any phase).
async fn sessions_of(s: &TestServer, owner: &str) -> Vec<Value> {
    let v = send(s, Method::GET, &format!("/api/v1/sessions?owner={owner}"), None, 200).await;
    v["data"].as_array().unwrap().clone()
}

/// `who`'s notifications, newest first: (kind, session id).
async fn kinds_of(s: &TestServer, who: &str) -> Vec<(String, Value)> {
    let v = json_of(call_as(s, who, Method::GET, "/api/v1/notifications").await, 200).await;
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["kind"].as_str().unwrap().to_string(), n["session_id"].clone()))
        .collect()
}

/// `n` creates of `off` at once, one per owner `<prefix><i>`: (owner, status, body) each.
async fn race(s: &TestServer, off: &str, prefix: &str, n: usize) -> Vec<(String, u16, Value)> {
    let owners: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let answers = futures::future::join_all(owners.iter().map(|o| create(s, off, o))).await;
    let mut out = Vec::new();
    for (owner, res) in owners.into_iter().zip(answers) {
        let status = res.status().as_u16();
        let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
        out.push((owner, status, body));
    }
    out
}

/// A cluster whose first `busy` cards each run a whole-card session (bound); the sessions.
async fn busy_cluster(s: &TestServer, cid: &str, busy: usize) -> Vec<Value> {
    let off = whole_card(s, &format!("{cid}-whole")).await;
    let all = cards(s, cid).await;
    let mut running = Vec::new();
    for card in &all[..busy] {
        let v = json_of(create(s, &off, "runner").await, 201).await;
        runs_on(s, cid, &v, card).await;
        running.push(v);
    }
    running
}

#[tokio::test]
async fn creates_racing_for_the_last_free_slice_one_wins_and_a_bound_session_counts_once() {
    let s = server().await;
    let c = cluster("fair-race").await;
    let policy = send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50})),
        201,
    )
    .await;
    let cid = register(&s, "fair-race", &c).await;
    let all = cards(&s, &cid).await;
    assert_eq!(all.len(), 8, "{all:?}");
    // Seven of eight cards run whole-card sessions: one card (80 GiB, 100 %) is free.
    busy_cluster(&s, &cid, 7).await;
    let big = slice(&s, "big", 61_440, 60).await;
    let small = slice(&s, "small", 20_480, 40).await;
    let applied = crs(&c).len();
    assert_eq!(applied, 7);

    // Six creates race for the one slice the free card has: exactly one wins.
    let answers = race(&s, &big, "r", 6).await;
    let won: Vec<&(String, u16, Value)> = answers.iter().filter(|(_, st, _)| *st == 201).collect();
    assert_eq!(won.len(), 1, "exactly one create wins the last slice: {answers:?}");
    for (owner, status, body) in answers.iter().filter(|(_, st, _)| *st != 201) {
        assert_eq!(*status, 409, "{owner}: {body}");
        assert_eq!(body["error"]["code"], "unserviceable", "{owner}: {body}");
        assert!(sessions_of(&s, owner).await.is_empty(), "a refused create records nothing ({owner})");
    }
    let (winner, _, w) = won[0].clone();
    assert_eq!(sessions_of(&s, &winner).await.len(), 1);
    assert_eq!(crs(&c).len(), applied + 1, "one CR more, the winner's");
    assert_eq!(w["phase"], "pending", "{w}");

    // The winner is not bound yet: its 60 GiB are held, so only a slice of what is left fits.
    let s1 = json_of(create(&s, &small, "s1").await, 201).await;
    expect_error(create(&s, &small, "s2").await, 409, "unserviceable").await;
    // The winner binds: the card shows its slice, and its hold is gone (counted once): still
    // full, since s1's hold remains.
    runs_on(&s, &cid, &w, &all[7]).await;
    assert_eq!(get(&s, &w).await["phase"], "running");
    expect_error(create(&s, &small, "s2").await, 409, "unserviceable").await;
    // s1 ends before it binds: its hold goes with it, and exactly its slice is free again (were
    // the winner counted twice, on the card and as a hold, nothing would be).
    send(&s, Method::DELETE, &format!("/api/v1/sessions/{}", s1["id"].as_str().unwrap()), None, 200).await;
    let s3 = json_of(create(&s, &small, "s3").await, 201).await;
    assert_eq!(s3["phase"], "pending", "{s3}");
    expect_error(create(&s, &small, "s4").await, 409, "unserviceable").await;

    // With a queue allowed, the losers of a race wait instead: one starts, the others queue.
    let pid = policy["id"].as_str().unwrap();
    send(&s, Method::PATCH, &format!("/api/v1/resource-policies/{pid}"), Some(json!({"max_queued": 2})), 200).await;
    let runner = sessions_of(&s, "runner").await;
    ends(&s, &cid, runner.iter().find(|v| v["phase"] == "running").unwrap()).await;
    let answers = race(&s, &big, "q", 4).await;
    assert!(answers.iter().all(|(_, st, _)| *st == 201), "{answers:?}");
    let started: Vec<_> = answers.iter().filter(|(_, _, v)| v["queue_position"].is_null()).collect();
    assert_eq!(started.len(), 1, "exactly one starts on the freed card: {answers:?}");
    let mut places: Vec<u64> = Vec::new();
    for (_, _, v) in &answers {
        places.extend(get(&s, v).await["queue_position"].as_u64());
    }
    places.sort();
    assert_eq!(places, [1, 2, 3], "the others wait in order");
    assert_eq!(crs(&c).len(), applied + 1 + 1 + 1, "CRs: the winner, s3, and the one started (s1's is deleted)");
    s.stop().await;
}

#[tokio::test]
async fn a_queued_head_no_card_could_ever_hold_is_passed_over_and_leaves_unserviceable_after_a_grace() {
    let s = server().await;
    let c = cluster("fair-never").await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50, "max_queued": 2})),
        201,
    )
    .await;
    let cid = register(&s, "fair-never", &c).await;
    let running = busy_cluster(&s, &cid, 8).await;
    for g in ["vision", "nlp"] {
        send(&s, Method::POST, "/api/v1/groups", Some(json!({ "name": g })), 201).await;
    }
    for (name, group) in [("ann", "vision"), ("bob", "nlp")] {
        let body = json!({"username": name, "password": "correct horse battery staple", "group": group});
        crate::users::create_own(&s, body).await;
    }
    let off = whole_card(&s, "whole-never").await;
    // The cluster is full: ann's session waits first in line, bob's behind it.
    let a = json_of(create(&s, &off, "ann").await, 201).await;
    let b = json_of(create(&s, &off, "bob").await, 201).await;
    assert_eq!((&a["queue_position"], &b["queue_position"]), (&json!(1), &json!(2)));
    // Every node moves into a pool for nlp only: no card ann may use is left.
    let body = json!({"cluster_id": cid, "name": "nlp-all", "nodes": [N0, N1], "groups": ["nlp"]});
    let pool = send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    let pool_id = pool["id"].as_str().unwrap().to_string();
    serve(&s).await;
    let v = get(&s, &a).await;
    assert_eq!((&v["phase"], &v["queued_reason"]), (&json!("pending"), &json!("unserviceable")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("leaves the queue at"), "{v}");
    // A card frees: ann's head is passed over, bob behind it starts on his pool's card.
    let all = cards(&s, &cid).await;
    ends(&s, &cid, &running[0]).await;
    serve(&s).await;
    let vb = get(&s, &b).await;
    assert_eq!(vb["queue_position"], Value::Null, "the session behind the head is served: {vb}");
    assert!(crs(&c).contains(&vb["cr_name"].as_str().unwrap().to_string()));
    assert_eq!(get(&s, &a).await["queue_position"], 1, "ann still waits, within the grace");
    runs_on(&s, &cid, &vb, &all[0]).await;

    // Ann's group is let into the pool: she waits as before (no card free now), blocking the queue.
    let patch = json!({"groups": ["nlp", "vision"]});
    send(&s, Method::PATCH, &format!("/api/v1/node-pools/{pool_id}"), Some(patch), 200).await;
    serve(&s).await;
    let v = get(&s, &a).await;
    assert_eq!((&v["queued_reason"], &v["message"]), (&json!("no_gpu_capacity"), &Value::Null), "{v}");
    // Taken out again: passed over anew; its grace starts again.
    send(&s, Method::PATCH, &format!("/api/v1/node-pools/{pool_id}"), Some(json!({"groups": ["nlp"]})), 200).await;
    serve(&s).await;
    assert_eq!(get(&s, &a).await["queued_reason"], "unserviceable");
    s.clock.advance(Duration::from_secs(9 * 60));
    heard_from(&s, &cid).await;
    serve(&s).await;
    assert_eq!(get(&s, &a).await["phase"], "pending", "still within the grace");
    s.clock.advance(Duration::from_secs(60));
    heard_from(&s, &cid).await;
    serve(&s).await;
    let v = get(&s, &a).await;
    assert_eq!(
        (&v["phase"], &v["reason"], &v["queue_position"]),
        (&json!("terminated"), &json!("unserviceable"), &Value::Null),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("left the queue unstarted"), "{v}");
    assert!(!crs(&c).contains(&v["cr_name"].as_str().unwrap().to_string()), "never applied");
    let told = kinds_of(&s, "ann").await;
    assert!(told.iter().any(|(k, sid)| k == "queue_dropped" && sid == &v["id"]), "{told:?}");
    s.stop().await;
}

#[tokio::test]
async fn a_queued_session_of_a_pooled_group_starts_only_on_its_pools_nodes() {
    let s = server().await;
    let c = cluster("fair-pools").await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "global", "max_concurrent": 50, "max_queued": 2})),
        201,
    )
    .await;
    let cid = register(&s, "fair-pools", &c).await;
    let running = busy_cluster(&s, &cid, 8).await;
    let all = cards(&s, &cid).await;
    assert!(all[..4].iter().all(|(n, _)| n == N0) && all[4..].iter().all(|(n, _)| n == N1), "{all:?}");
    send(&s, Method::POST, "/api/v1/groups", Some(json!({ "name": "vision" })), 201).await;
    for (name, group) in [("ann", Some("vision")), ("bob", None)] {
        let mut body = json!({"username": name, "password": "correct horse battery staple"});
        if let Some(g) = group {
            body["group"] = json!(g);
        }
        crate::users::create_own(&s, body).await;
    }
    // Node 0 is vision's (running sessions keep running there).
    let body = json!({"cluster_id": cid, "name": "vision-n0", "nodes": [N0], "groups": ["vision"]});
    send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    let off = whole_card(&s, "whole-pools").await;
    let a = json_of(create(&s, &off, "ann").await, 201).await;
    let b = json_of(create(&s, &off, "bob").await, 201).await;
    assert_eq!((&a["queued_reason"], &b["queued_reason"]), (&json!("no_gpu_capacity"), &json!("queue_ahead")));

    // A card frees on the shared node: ann may not use it, so nothing starts (strict order).
    ends(&s, &cid, &running[4]).await;
    serve(&s).await;
    assert_eq!(get(&s, &a).await["queue_position"], 1);
    assert_eq!(get(&s, &b).await["queue_position"], 2);
    // A card frees on her pool's node: ann starts there; her CR keeps her off the shared node.
    ends(&s, &cid, &running[0]).await;
    serve(&s).await;
    let va = get(&s, &a).await;
    assert_eq!(va["queue_position"], Value::Null, "{va}");
    assert_eq!(excluded(&c, &va), json!([N1]), "a pooled group's session lands only on its pool's nodes");
    // Once she is bound, bob starts on the shared node's card, kept off vision's node.
    runs_on(&s, &cid, &va, &all[0]).await;
    serve(&s).await;
    let vb = get(&s, &b).await;
    assert_eq!(vb["queue_position"], Value::Null, "{vb}");
    assert_eq!(excluded(&c, &vb), json!([N0]), "another group's session stays off the pool");
    s.stop().await;
}

#[tokio::test]
async fn a_query_parameter_given_twice_is_refused_naming_it() {
    let s = server().await;
    for (path, name) in [
        ("/api/v1/notifications?limit=1&limit=2", "limit"),
        ("/api/v1/sessions?owner=a&owner=b", "owner"),
        ("/api/v1/audit?page=1&page=2", "page"),
    ] {
        let e = expect_error(call(&s, Method::GET, path, None).await, 422, "validation_failed").await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", name]), "{path}: {e}");
        assert_eq!(e["error"]["details"]["errors"][0]["type"], "duplicate", "{path}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(name) && message.contains("more than once"), "{path}: {message}");
    }
    // The server goes on.
    let v = send(&s, Method::GET, "/api/v1/notifications?limit=1", None, 200).await;
    assert!(v["data"].is_array(), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_rescheduling_drain_resumes_a_session_only_once_the_operator_confirms_its_pause() {
    let s = server().await;
    let c = cluster("fair-drain").await;
    let cid = register(&s, "fair-drain", &c).await;
    let all = cards(&s, &cid).await;
    let off = slice(&s, "drain-slice", 20_480, 30).await;
    let v = json_of(create(&s, &off, "ann").await, 201).await;
    runs_on(&s, &cid, &v, &all[0]).await;
    let cr = v["cr_name"].as_str().unwrap().to_string();
    let spec = |c: &gshare_fake_kube::FakeCluster| {
        c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), &cr).unwrap()["spec"].clone()
    };
    // Upstream waits DRAIN_PAUSE_ACK_SEC; here long enough that only the acknowledgement ends it.
    s.app().sessions.set_pause_ack_wait(Duration::from_secs(3600));
    let path = format!("/api/v1/clusters/{cid}/nodes/{N0}/drain");
    let r = {
        let mut drain = std::pin::pin!(send(&s, Method::POST, &path, Some(json!({"mode": "reschedule"})), 200));
        // The drain pauses the session, then waits: no resume while its old pod may still run.
        let mut seen = s.app().store.generation();
        loop {
            tokio::select! {
                r = &mut drain => panic!("the drain answered before the operator confirmed the pause: {r}"),
                g = s.app().store.changed_since(seen) => seen = g,
            }
            if get(&s, &v).await["phase"] == "paused" {
                break;
            }
        }
        assert_eq!(spec(&c)["paused"], true, "not resumed yet");
        // The operator reports the pod gone (Paused): the drain resumes it away from the node.
        let body = json!({"phase": "Paused", "ts": ts(&s), "generation": 2});
        report(&s, &operator(&s, &cid), &cr, body).await;
        drain.await
    };
    assert_eq!(r["rescheduled"], json!([v["id"]]), "{r}");
    let message = r["sessions"][0]["message"].as_str().unwrap();
    assert!(message.contains("the operator confirmed the pause"), "{message}");
    assert_eq!((spec(&c)["paused"].clone(), spec(&c)["excludedNodes"].clone()), (json!(false), json!([N0])));
    assert_eq!(get(&s, &v).await["phase"], "running");

    // Without a confirmation the drain resumes after its wait all the same (as upstream).
    runs_on(&s, &cid, &v, &all[4]).await;
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{N0}/uncordon"), None, 200).await;
    s.app().sessions.set_pause_ack_wait(Duration::from_millis(1));
    let path = format!("/api/v1/clusters/{cid}/nodes/{N1}/drain");
    let r = send(&s, Method::POST, &path, Some(json!({"mode": "reschedule"})), 200).await;
    assert_eq!(r["rescheduled"], json!([v["id"]]), "{r}");
    let message = r["sessions"][0]["message"].as_str().unwrap();
    assert!(message.contains("did not confirm the pause within 1 ms"), "{message}");
    assert_eq!(spec(&c)["excludedNodes"], json!([N1]));
    s.stop().await;
}
