//! The usage ledger end to end: GPU time from phase changes (a run opens when the operator
//! reports Running and closes when the session stops), split at a UTC month boundary, counted
//! while it runs, rolled up per user and group by day and month; `GET /api/v1/usage` with its
//! filters, members' own view, CSV, and every bad input. And the runtime limit the control plane
//! keeps: a warning 10 minutes before, the end at the limit, from its timer task's sweep.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, offering, operator, register, report, send, server, ts};
use crate::support::{TestServer, expect_error};

const HOUR: Duration = Duration::from_secs(3600);

fn member(s: &TestServer, name: &str) -> String {
    s.app().auth.api.mint(&format!("admin:{name}"), Duration::from_secs(3600)).unwrap()
}

async fn get_as(s: &TestServer, token: &str, path: &str) -> reqwest::Response {
    s.client.get(s.url(path)).bearer_auth(token).send().await.unwrap()
}

/// The rows' (period, hours) in order, hours to 0.01.
fn hours(v: &Value, field: &str) -> Vec<(String, f64)> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["period"].as_str().unwrap().to_string(), (r[field].as_f64().unwrap() * 100.0).round() / 100.0))
        .collect()
}

#[tokio::test]
async fn gpu_time_is_split_at_the_month_boundary_rolled_up_and_exported() {
    let s = server().await;
    let c = cluster("usage").await;
    let cid = register(&s, "usage", &c).await;
    let off = offering(&s, "A100 slice").await; // 20 GiB, 30 % cores, 4 CPUs
    crate::users::create_own(
        &s,
        json!({"username": "ann", "group": "vision", "password": "correct horse battery staple"}),
    )
    .await;
    crate::users::create_own(&s, json!({"username": "bob", "password": "correct horse battery staple"})).await;

    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "ann"})), 201).await;
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    report(&s, &operator(&s, &cid), &name, json!({"phase": "Preparing", "ts": ts(&s), "cluster_id": cid})).await;

    // It starts running an hour before the next UTC month starts.
    use gshare::policy::usage::{day_of, midnight_ms, month_end, month_key};
    let now = s.clock.now_ms();
    let last_day = month_end(day_of(now));
    let boundary = midnight_ms(last_day.next_day().unwrap());
    s.clock.advance(Duration::from_millis((boundary - 3_600_000 - now) as u64));
    let (m1, m2) = (month_key(last_day), month_key(last_day.next_day().unwrap()));
    let (d1, d2) = (last_day.to_string(), last_day.next_day().unwrap().to_string());
    // Not running yet: nothing counts.
    let months = format!("/api/v1/usage?granularity=month&from={m1}&to={m2}");
    let v = send(&s, Method::GET, &months, None, 200).await;
    assert_eq!(v["data"], json!([]), "{v}");
    let op = operator(&s, &cid);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "node_name": "gpu-node-0", "generation": 1})).await;

    // Three hours later, still running: an hour in the old month, two in the new, as it runs.
    s.clock.advance(3 * HOUR);
    let op = operator(&s, &cid);
    let v = send(&s, Method::GET, &months, None, 200).await;
    assert_eq!(hours(&v, "running_hours"), [(m1.clone(), 1.0), (m2.clone(), 2.0)], "{v}");
    // It stops: the ledger keeps the same split.
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s), "generation": 1})).await;
    let phase = send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await["phase"].clone();
    assert_eq!(phase, "terminated");
    s.clock.advance(HOUR);
    let v = send(&s, Method::GET, &months, None, 200).await;
    assert_eq!(hours(&v, "running_hours"), [(m1.clone(), 1.0), (m2.clone(), 2.0)], "{v}");
    assert_eq!(hours(&v, "gpu_mem_gib_hours"), [(m1.clone(), 20.0), (m2.clone(), 40.0)], "{v}");
    assert_eq!(hours(&v, "slice_hours"), [(m1.clone(), 1.0), (m2.clone(), 2.0)], "{v}");
    assert_eq!(hours(&v, "cpu_hours"), [(m1.clone(), 4.0), (m2.clone(), 8.0)], "{v}");
    assert_eq!((v["data"][0]["user"].as_str(), v["data"][0]["group"].as_str()), (Some("ann"), Some("vision")));
    assert_eq!((v["totals"]["running_hours"].as_f64().unwrap() * 100.0).round(), 300.0, "{v}");
    // By day: the last day of one month and the first of the next.
    let v = send(&s, Method::GET, &format!("/api/v1/usage?from={d1}&to={d2}"), None, 200).await;
    assert_eq!(hours(&v, "running_hours"), [(d1.clone(), 1.0), (d2.clone(), 2.0)], "{v}");
    // By group.
    let v = send(&s, Method::GET, &format!("{months}&by=group&group=vision"), None, 200).await;
    assert_eq!(hours(&v, "slice_hours"), [(m1.clone(), 1.0), (m2.clone(), 2.0)], "{v}");
    assert_eq!((v["data"][0]["user"].clone(), v["data"][0]["group"].clone()), (Value::Null, json!("vision")));

    // Members see their own only.
    let (ann, bob) = (member(&s, "ann"), member(&s, "bob"));
    let mine: Value = get_as(&s, &ann, &months).await.json().await.unwrap();
    assert_eq!(hours(&mine, "running_hours").len(), 2, "{mine}");
    let none: Value = get_as(&s, &bob, &months).await.json().await.unwrap();
    assert_eq!(none["data"], json!([]), "bob sees none of ann's: {none}");
    expect_error(get_as(&s, &bob, &format!("{months}&user=ann")).await, 403, "forbidden").await;

    // CSV, by parameter or by Accept.
    for res in [
        call(&s, Method::GET, &format!("{months}&format=csv"), None).await,
        s.client
            .get(s.url(&months))
            .bearer_auth(crate::sessions::admin(&s))
            .header("accept", "text/csv")
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(res.status(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
        let text = res.text().await.unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "period,user,group,running_hours,gpu_mem_gib_hours,slice_hours,cpu_hours");
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].starts_with(&format!("{m1},ann,vision,")), "{text}");
    }

    // Bad input: each a clear 4xx with the error body.
    for (query, status, code, loc) in [
        ("from=2026-13-01", 422, "validation_failed", "from"),
        ("to=yesterday", 422, "validation_failed", "to"),
        ("from=2026-03-02&to=2026-03-01", 422, "validation_failed", "from"),
        ("from=2020-01-01&to=2026-01-01", 422, "validation_failed", "to"),
        ("granularity=week", 422, "validation_failed", "granularity"),
        ("by=cluster", 422, "validation_failed", "by"),
        ("format=xml", 422, "validation_failed", "format"),
        ("user=%0aann", 422, "validation_failed", "user"),
        ("user=nobody", 404, "not_found", ""),
        ("group=nogroup", 404, "not_found", ""),
    ] {
        let e = expect_error(call(&s, Method::GET, &format!("/api/v1/usage?{query}"), None).await, status, code).await;
        if !loc.is_empty() {
            assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", loc]), "{query}: {e}");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn a_run_is_warned_ten_minutes_before_its_runtime_limit_and_ended_at_it() {
    let s = server().await;
    let c = cluster("runtime").await;
    let cid = register(&s, "runtime", &c).await;
    let off = offering(&s, "A100 slice").await; // max_runtime_sec 7200
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "alice"})), 201).await;
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    let cr = |c: &gshare_fake_kube::FakeCluster| {
        c.store().get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), &name)
    };
    assert!(cr(&c).is_some());
    let op = operator(&s, &cid);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "node_name": "gpu-node-0", "generation": 1})).await;
    let sweep = || s.app().sessions.enforce_runtime();
    let session_path = format!("/api/v1/sessions/{sid}");

    // Far from the limit: nothing.
    assert_eq!(sweep().await.unwrap(), Default::default());
    // Nine minutes before it: warned, once.
    s.clock.advance(Duration::from_secs(7200 - 9 * 60));
    let done = sweep().await.unwrap();
    assert_eq!((done.warned.as_slice(), done.ended.len()), (std::slice::from_ref(&sid), 0));
    let v = send(&s, Method::GET, &session_path, None, 200).await;
    assert_eq!(v["phase"], "running", "{v}");
    assert!(v["message"].as_str().unwrap().contains("in 9 min"), "{v}");
    assert_eq!(sweep().await.unwrap(), Default::default(), "a run is warned once");
    // At the limit: ended, its CR deleted, reason max_runtime.
    s.clock.advance(Duration::from_secs(9 * 60));
    let done = sweep().await.unwrap();
    assert_eq!((done.warned.len(), done.ended.as_slice()), (0, std::slice::from_ref(&sid)));
    let v = send(&s, Method::GET, &session_path, None, 200).await;
    assert!(["terminating", "terminated"].contains(&v["phase"].as_str().unwrap()), "{v}");
    assert_eq!(v["reason"], "max_runtime", "{v}");
    assert!(cr(&c).is_none(), "the CR is deleted");
    // Its GPU time is in the ledger: two hours.
    let started = gshare::policy::usage::day_of(s.clock.now_ms() - 7_200_000);
    let today = gshare::policy::usage::day_of(s.clock.now_ms());
    let path = format!("/api/v1/usage?granularity=month&from={started}&to={today}");
    let v = send(&s, Method::GET, &path, None, 200).await;
    assert_eq!((v["totals"]["running_hours"].as_f64().unwrap() * 100.0).round(), 200.0, "{v}");
    assert_eq!(sweep().await.unwrap(), Default::default(), "an ended session is left alone");
    s.stop().await;
}

#[tokio::test]
async fn a_whole_card_counts_its_memory_not_the_offerings() {
    let s = server().await;
    let c = cluster("whole").await;
    let cid = register(&s, "whole", &c).await;
    let body = json!({"name": "whole card", "resource_class": "gpu", "mode": "exclusive", "image": "ghcr.io/lab/x:1", "gpu_mem_mb": 1});
    let off = send(&s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].clone();
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "alice"})), 201).await;
    let name = v["cr_name"].as_str().unwrap().to_string();
    let uuid = gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), "gpu-node-1", 0);
    let key = format!("{cid}/{uuid}");
    let card = s.app().store.read(move |txn| gshare::inventory::model::GPUS.get(txn, &key)).await.unwrap().unwrap();
    let op = operator(&s, &cid);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": uuid})).await;
    s.clock.advance(HOUR);
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    let from = gshare::policy::usage::day_of(s.clock.now_ms() - 3_600_000);
    let to = gshare::policy::usage::day_of(s.clock.now_ms());
    let v = send(&s, Method::GET, &format!("/api/v1/usage?granularity=month&from={from}&to={to}"), None, 200).await;
    let gib = v["totals"]["gpu_mem_gib_hours"].as_f64().unwrap();
    let want = card.total_mem_mb as f64 / 1024.0;
    assert!((gib - want).abs() < 0.05, "{gib} GiB-hours for a {want} GiB card over an hour: {v}");
    assert_eq!((v["totals"]["slice_hours"].as_f64().unwrap() * 100.0).round(), 100.0, "{v}");
    s.stop().await;
}
