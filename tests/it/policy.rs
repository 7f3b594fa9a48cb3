//! Fair sharing end to end: groups and resource policies (upstream's fields, merge order and
//! routes), enforcement on create and resume with upstream's 409 `quota_exceeded` shapes, racing
//! creates for the last slot, the policy's idle limit in the CR, and the fit check (409
//! `unserviceable`) before anything is applied. Every bad input gets its refusal and changes
//! nothing.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, register, send, server};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";

fn as_user(s: &TestServer, name: &str) -> String {
    s.app().auth.api.mint(&format!("admin:{name}"), Duration::from_secs(3600)).unwrap()
}

async fn call_as(s: &TestServer, token: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

async fn policies(s: &TestServer) -> Value {
    send(s, Method::GET, "/api/v1/resource-policies", None, 200).await["data"].clone()
}

/// A GPU offering: `mem` MiB and `cores` % of an A100 (the fake cluster has 2 x 4 A100 80GB).
async fn gpu_offering(s: &TestServer, name: &str, model: &str, mem: i64, cores: i64) -> String {
    let body = json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": model,
                      "gpu_mem_mb": mem, "gpu_cores": cores, "cpu": 4, "mem_gb": 16});
    send(s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

async fn create(s: &TestServer, off: &str) -> reqwest::Response {
    call(s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off}))).await
}

async fn live_sessions(s: &TestServer) -> usize {
    s.app().store.read(gshare::sessions::model::live_sessions).await.unwrap().len()
}

#[tokio::test]
async fn policies_and_groups_keep_upstreams_names_and_refuse_bad_input() {
    let s = TestServer::start().await;
    s.seed_policy().await;
    // Upstream's seeded global policy.
    let all = policies(&s).await;
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    let g = &all[0];
    assert_eq!((g["scope"].as_str(), g["scope_id"].as_str()), (Some("global"), Some("*")));
    assert_eq!(
        [&g["max_concurrent"], &g["max_queued"], &g["max_runtime_min"], &g["idle_timeout_sec"]],
        [&json!(1), &json!(2), &json!(720), &json!(3600)]
    );
    assert_eq!(
        g["limits"],
        json!({"cpu": 24, "mem_gb": 256, "gpu_mem_mb": 98304, "gpu_cores": 100, "storage_gb": 500,
               "volume_gb": null, "shared_pool": null, "allow_privileged": null})
    );
    let global_id = g["id"].as_str().unwrap().to_string();

    // A group policy needs a group that exists.
    let body = json!({"scope": "group", "scope_id": "vision", "max_concurrent": 3});
    let e = expect_error(
        call(&s, Method::POST, "/api/v1/resource-policies", Some(body.clone())).await,
        422,
        "validation_failed",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("no group named vision"), "{e}");
    send(&s, Method::POST, "/api/v1/groups", Some(json!({"name": "vision", "description": "Vision lab"})), 201).await;
    let e =
        expect_error(call(&s, Method::POST, "/api/v1/groups", Some(json!({"name": "VISION"}))).await, 409, "conflict")
            .await;
    assert_eq!(e["error"]["details"]["name"], "vision");
    let vision = send(&s, Method::POST, "/api/v1/resource-policies", Some(body.clone()), 201).await;
    let vision_id = vision["id"].as_str().unwrap().to_string();
    // One per subject.
    let e = expect_error(call(&s, Method::POST, "/api/v1/resource-policies", Some(body)).await, 409, "conflict").await;
    assert_eq!(e["error"]["details"]["policy_id"], vision_id.as_str());

    // Negative and absurd values, unknown keys, a bad subject: 422 naming the field; nothing stored.
    let before = policies(&s).await;
    for (body, loc) in [
        (json!({"scope": "user", "scope_id": "ann", "max_concurrent": -1}), "max_concurrent"),
        (json!({"scope": "user", "scope_id": "ann", "max_queued": 10_000_000}), "max_queued"),
        (json!({"scope": "user", "scope_id": "ann", "idle_timeout_sec": -30}), "idle_timeout_sec"),
        (json!({"scope": "user", "scope_id": "ann", "max_runtime_min": 999_999_999}), "max_runtime_min"),
        (json!({"scope": "user", "scope_id": "ann", "limits": {"gpu_mem_mb": -5}}), "gpu_mem_mb"),
        (json!({"scope": "user", "scope_id": "ann", "limits": {"cpu": 1e12}}), "cpu"),
        (json!({"scope": "user", "scope_id": "ann", "limits": {"gpus": 4}}), "limits"),
        (json!({"scope": "user", "scope_id": "ann", "max_concurrent": "many"}), "max_concurrent"),
        (json!({"scope": "user", "scope_id": "a b"}), "scope_id"),
        (json!({"scope": "user"}), "scope_id"),
        (json!({"scope": "global", "scope_id": "lab"}), "scope_id"),
        (json!({"scope": "org", "scope_id": "x"}), "scope"),
    ] {
        let res = call(&s, Method::POST, "/api/v1/resource-policies", Some(body.clone())).await;
        let e = expect_error(res, 422, "validation_failed").await;
        let locs = e["error"]["details"]["errors"].to_string();
        assert!(locs.contains(loc), "{body}: {e}");
    }
    // A PATCH with a bad value changes nothing; an unknown id is 404.
    let res = call(
        &s,
        Method::PATCH,
        &format!("/api/v1/resource-policies/{global_id}"),
        Some(json!({"max_concurrent": -2, "max_queued": 5})),
    )
    .await;
    expect_error(res, 422, "validation_failed").await;
    assert_eq!(policies(&s).await, before, "a refused change was stored");
    let res = call(&s, Method::PATCH, "/api/v1/resource-policies/pol_nope", Some(json!({"max_concurrent": 2}))).await;
    expect_error(res, 404, "not_found").await;
    let res = call(&s, Method::DELETE, "/api/v1/resource-policies/pol_nope", None).await;
    expect_error(res, 404, "not_found").await;

    // A member of `vision`: the merge is user → group → global, per field.
    crate::users::create_own(
        &s,
        json!({"username": "ann", "group": "vision", "password": "correct horse battery staple"}),
    )
    .await;
    send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "user", "scope_id": "ann", "limits": {"cpu": 8}})),
        201,
    )
    .await;
    let ann = as_user(&s, "ann");
    let res = call_as(&s, &ann, Method::GET, "/api/v1/resource-policies/effective", None).await;
    assert_eq!(res.status(), 200);
    let eff: Value = res.json().await.unwrap();
    assert_eq!((eff["user"].as_str(), eff["group"].as_str()), (Some("ann"), Some("vision")), "{eff}");
    assert_eq!(eff["max_concurrent"], 3, "the group's: {eff}");
    assert_eq!(eff["limits"]["cpu"], 8, "the user's: {eff}");
    assert_eq!(eff["limits"]["gpu_mem_mb"], 98304, "the global's: {eff}");
    assert_eq!(
        eff["sources"],
        json!({"max_concurrent": "group", "max_queued": "global", "max_runtime_min": "global",
        "max_runtime_action": "global", "idle_timeout_sec": "global", "limits.cpu": "user", "limits.mem_gb": "global", "limits.gpu_mem_mb": "global",
        "limits.gpu_cores": "global", "limits.storage_gb": "global"})
    );
    assert_eq!(eff["used"]["active"], 0);
    assert_eq!(eff["remaining"]["sessions"], 3);
    // Her account page shows the same.
    let res = call_as(&s, &ann, Method::GET, "/api/v1/account", None).await;
    let me: Value = res.json().await.unwrap();
    assert_eq!(me["policy"], eff, "{me}");
    // Members read only their own and manage nothing.
    let res = call_as(&s, &ann, Method::GET, "/api/v1/resource-policies/effective?user=admin", None).await;
    expect_error(res, 403, "forbidden").await;
    for (m, p) in [(Method::GET, "/api/v1/resource-policies"), (Method::GET, "/api/v1/groups")] {
        expect_error(call_as(&s, &ann, m, p, None).await, 403, "forbidden_role").await;
    }
    // Admins read anyone's.
    let other = send(&s, Method::GET, "/api/v1/resource-policies/effective?user=ann", None, 200).await;
    assert_eq!(other, eff);

    // A group with members or a policy stays.
    let groups = send(&s, Method::GET, "/api/v1/groups", None, 200).await;
    assert_eq!(groups["data"][0]["members"], json!(["ann"]), "{groups}");
    assert_eq!(groups["data"][0]["policy_id"], vision_id.as_str());
    let e = expect_error(call(&s, Method::DELETE, "/api/v1/groups/vision", None).await, 409, "group_in_use").await;
    assert_eq!(e["error"]["details"], json!({"members": ["ann"], "policy_id": vision_id, "node_pools": []}));
    // PATCH sets a field, `null` inherits again.
    let p = send(
        &s,
        Method::PATCH,
        &format!("/api/v1/resource-policies/{vision_id}"),
        Some(json!({"max_concurrent": null, "idle_timeout_sec": 600})),
        200,
    )
    .await;
    assert_eq!((p["max_concurrent"].clone(), p["idle_timeout_sec"].clone()), (Value::Null, json!(600)));
    let eff = send(&s, Method::GET, "/api/v1/resource-policies/effective?user=ann", None, 200).await;
    assert_eq!((eff["max_concurrent"].clone(), eff["idle_timeout_sec"].clone()), (json!(1), json!(600)));
    send(&s, Method::DELETE, &format!("/api/v1/resource-policies/{vision_id}"), None, 204).await;
    send(&s, Method::PATCH, "/api/v1/users/ann", Some(json!({"group": null})), 200).await;
    send(&s, Method::DELETE, "/api/v1/groups/vision", None, 204).await;
    s.stop().await;
}

#[tokio::test]
async fn effective_for_a_name_no_account_has_is_404_and_a_name_no_account_could_have_422() {
    let s = TestServer::start().await;
    s.seed_policy().await;
    let path = |u: &str| format!("/api/v1/resource-policies/effective?user={u}");
    let admin = send(&s, Method::GET, &path("admin"), None, 200).await;
    assert_eq!(admin["sources"]["max_concurrent"], "global", "{admin}");
    // A well-formed name no account has: no policy to show, not the global one.
    let e = expect_error(call(&s, Method::GET, &path("nobody"), None).await, 404, "not_found").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("nobody"), "{e}");
    // Names no account could have: a newline before a real name, a right-to-left override, too
    // long, a space. Each is 422 on the query parameter, repeated bounded and visible.
    let long = "a".repeat(3000);
    for (raw, shown) in
        [("%0aadmin", "U+000Aadmin"), ("ad%E2%80%AEmin", "adU+202Emin"), (long.as_str(), "…"), ("a%20b", "a b")]
    {
        let e = expect_error(call(&s, Method::GET, &path(raw), None).await, 422, "validation_failed").await;
        let msg = e["error"]["message"].to_string() + &e["error"]["details"].to_string();
        assert!(msg.contains(shown), "{raw}: {e}");
        assert!(msg.len() < 1000, "{raw}: the answer grows with the name: {e}");
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", "user"]), "{raw}: {e}");
    }
    s.stop().await;
}

#[tokio::test]
async fn quotas_refuse_in_upstreams_shapes_and_a_lowered_limit_keeps_running_sessions() {
    let s = server().await;
    s.seed_policy().await;
    let c = cluster("fair-q").await;
    register(&s, "fair-q", &c).await;
    let off = gpu_offering(&s, "a100-20g", "A100", 20_480, 30).await;

    // The seeded global policy: one live session per owner (admins too).
    let first = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
    // The policy's idle limit (3600 s) is bounded by the offering's (1800 s by default).
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), first["cr_name"].as_str().unwrap()).unwrap();
    assert_eq!(cr["metadata"]["annotations"]["gshare.io/idle-timeout-sec"], "1800");
    assert_eq!(cr["metadata"]["annotations"]["gshare.io/max-runtime-sec"], "43200", "720 min from the policy");
    let e = expect_error(create(&s, &off).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"limit": 1, "active": 1}));
    assert_eq!(live_sessions(&s).await, 1, "a refused session was stored");

    // A user policy lifts the count for admin; the sums still hold: 3 x 30 % cores = 90, a
    // fourth would make 120 > 100.
    let mine = send(
        &s,
        Method::POST,
        "/api/v1/resource-policies",
        Some(json!({"scope": "user", "scope_id": "admin", "max_concurrent": 10, "idle_timeout_sec": 600})),
        201,
    )
    .await;
    let second = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), second["cr_name"].as_str().unwrap()).unwrap();
    assert_eq!(
        cr["metadata"]["annotations"]["gshare.io/idle-timeout-sec"], "600",
        "the policy's, tighter than the offering's"
    );
    send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
    let e = expect_error(create(&s, &off).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"resource": "gpu_cores", "limit": 100, "used": 90, "request": 30}));
    let account = send(&s, Method::GET, "/api/v1/account", None, 200).await;
    assert_eq!(account["policy"]["used"]["active"], 3, "{account}");
    assert_eq!(account["policy"]["used"]["gpu_mem_mb"], 61_440);
    assert_eq!(account["policy"]["remaining"]["gpu_cores"], 10);

    // Lowered below use: the three keep running, new ones and resumes are refused.
    let id = mine["id"].as_str().unwrap();
    send(&s, Method::PATCH, &format!("/api/v1/resource-policies/{id}"), Some(json!({"max_concurrent": 1})), 200).await;
    assert_eq!(live_sessions(&s).await, 3);
    let e = expect_error(create(&s, &off).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"limit": 1, "active": 3}));
    let sid = first["id"].as_str().unwrap();
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/pause"), None, 200).await;
    let e = expect_error(
        call(&s, Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None).await,
        409,
        "quota_exceeded",
    )
    .await;
    assert_eq!(e["error"]["details"], json!({"limit": 1, "active": 2}), "the others count, not itself");
    assert_eq!(send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await["phase"], "paused");
    // Raised again: it resumes.
    send(&s, Method::PATCH, &format!("/api/v1/resource-policies/{id}"), Some(json!({"max_concurrent": 3})), 200).await;
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    // An ended session stops counting.
    send(&s, Method::DELETE, &format!("/api/v1/sessions/{sid}?force=true"), None, 200).await;
    let eff = send(&s, Method::GET, "/api/v1/resource-policies/effective", None, 200).await;
    assert_eq!((eff["used"]["active"].clone(), eff["used"]["gpu_cores"].clone()), (json!(2), json!(60)), "{eff}");
    s.stop().await;
}

/// Two (here eight) creates racing for the last slot: exactly one wins (the check and the record
/// are one transaction).
#[tokio::test]
async fn creates_racing_for_the_last_slot_let_exactly_one_in() {
    let s = server().await;
    s.seed_policy().await;
    let c = cluster("fair-race").await;
    register(&s, "fair-race", &c).await;
    let off = gpu_offering(&s, "a100-10g", "A100", 10_240, 10).await;
    let results = futures::future::join_all((0..8).map(|_| create(&s, &off))).await;
    let mut codes = Vec::new();
    for r in results {
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        codes.push((status, v["error"]["code"].as_str().map(str::to_string)));
    }
    let won = codes.iter().filter(|(st, _)| *st == 201).count();
    let refused = codes.iter().filter(|(st, c)| *st == 409 && c.as_deref() == Some("quota_exceeded")).count();
    assert_eq!((won, refused), (1, 7), "{codes:?}");
    assert_eq!(live_sessions(&s).await, 1);
    let eff = send(&s, Method::GET, "/api/v1/resource-policies/effective", None, 200).await;
    assert_eq!(eff["used"]["active"], 1);
    s.stop().await;
}

/// A slice no schedulable node can hold now is refused before anything is applied, naming the
/// largest free slice and the models the cluster reports; cordoned nodes do not count.
#[tokio::test]
async fn a_slice_no_schedulable_node_can_hold_is_refused_before_apply() {
    let s = server().await;
    let c = cluster("fair-fit").await;
    let cid = register(&s, "fair-fit", &c).await;
    let model = {
        let nodes = send(&s, Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
        nodes[0]["gpus"][0]["model"].as_str().map(str::to_string)
    }
    .unwrap_or_else(|| "NVIDIA A100-SXM4-80GB".into());
    let crs = || c.store().list("gshare.io", "v1", "gsharesessions", Some(NS)).len();

    let huge = gpu_offering(&s, "two-cards", "A100", 163_840, 50).await;
    let e = expect_error(create(&s, &huge).await, 409, "unserviceable").await;
    let d = &e["error"]["details"];
    assert_eq!(d["largest_free"], json!({"gpu_mem_mb": 81920, "gpu_cores": 100, "gpu_model": model}), "{e}");
    assert_eq!(d["reported_models"], json!([model]));
    assert_eq!(d["cluster_id"], cid.as_str());
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.contains("163840 MiB / 50 %") && m.contains("81920 MiB / 100 %"), "{m}");

    let h100 = gpu_offering(&s, "h100", "H100", 10_240, 10).await;
    let e = expect_error(create(&s, &h100).await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["reported_models"], json!([model]), "{e}");
    assert_eq!(crs(), 0, "nothing applied");
    assert_eq!(live_sessions(&s).await, 0, "nothing recorded");

    // Every node cordoned: nothing is schedulable; uncordoned: it fits again.
    let small = gpu_offering(&s, "a100-10g", "A100", 10_240, 10).await;
    let nodes = send(&s, Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
    let names: Vec<String> =
        nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    assert!(!names.is_empty());
    for n in &names {
        send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{n}/cordon"), None, 200).await;
    }
    let e = expect_error(create(&s, &small).await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["schedulable_cards"], 0, "{e}");
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{}/uncordon", names[0]), None, 200).await;
    send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": small})), 201).await;
    assert_eq!(crs(), 1);
    s.stop().await;
}

/// `max_runtime_action` (ours, not upstream's): `end` or `pause`; anything else is a 422 naming
/// the field, on create and on PATCH, and nothing is stored; `null` inherits; the seeded global
/// policy says `end`.
#[tokio::test]
async fn max_runtime_action_is_end_or_pause_and_anything_else_is_refused() {
    let s = TestServer::start().await;
    s.seed_policy().await;
    assert_eq!(policies(&s).await[0]["max_runtime_action"], "end");
    let before = policies(&s).await;
    for bad in [json!("stop"), json!("Pause"), json!(""), json!(5), json!(["pause"])] {
        let body = json!({"scope": "user", "scope_id": "ann", "max_runtime_action": bad});
        let res = call(&s, Method::POST, "/api/v1/resource-policies", Some(body.clone())).await;
        let e = expect_error(res, 422, "validation_failed").await;
        assert!(e["error"]["details"]["errors"].to_string().contains("max_runtime_action"), "{body}: {e}");
    }
    let body = json!({"scope": "user", "scope_id": "ann", "max_runtime_action": "stop"});
    let e =
        expect_error(call(&s, Method::POST, "/api/v1/resource-policies", Some(body)).await, 422, "validation_failed")
            .await;
    let err = &e["error"]["details"]["errors"][0];
    assert_eq!(err["loc"], json!(["body", "max_runtime_action"]), "{e}");
    assert!(err["msg"].as_str().unwrap().contains("end or pause"), "{e}");
    assert_eq!(policies(&s).await, before, "a refused policy was stored");

    let body = json!({"scope": "user", "scope_id": "ann", "max_runtime_action": "pause"});
    let p = send(&s, Method::POST, "/api/v1/resource-policies", Some(body), 201).await;
    assert_eq!(p["max_runtime_action"], "pause");
    let path = format!("/api/v1/resource-policies/{}", p["id"].as_str().unwrap());
    let before = policies(&s).await;
    let res = call(&s, Method::PATCH, &path, Some(json!({"max_runtime_action": "halt", "max_concurrent": 2}))).await;
    let e = expect_error(res, 422, "validation_failed").await;
    assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["body", "max_runtime_action"]), "{e}");
    assert_eq!(policies(&s).await, before, "a refused change was stored");
    let p = send(&s, Method::PATCH, &path, Some(json!({"max_runtime_action": "end"})), 200).await;
    assert_eq!(p["max_runtime_action"], "end");
    let p = send(&s, Method::PATCH, &path, Some(json!({"max_runtime_action": null})), 200).await;
    assert_eq!(p["max_runtime_action"], Value::Null);
    s.stop().await;
}
