//! Node pools end to end: `/api/v1/node-pools` (upstream's routes and names; admins only; every
//! bad input refused with the store unchanged), pool membership on the node list and pool use on
//! the Overview; the fit check and the CR's `excludedNodes` keeping other groups' sessions off a
//! pool's nodes and a pool's group on its pool unless `limits.shared_pool` lets it spill; a node
//! moved between pools while a session runs on it; a pool's group deleted.

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{call, cluster, operator, register, report, send, server, ts};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";
const N0: &str = "gpu-node-0";
const N1: &str = "gpu-node-1";

async fn pools(s: &TestServer) -> Value {
    send(s, Method::GET, "/api/v1/node-pools", None, 200).await
}

async fn group(s: &TestServer, name: &str) {
    send(s, Method::POST, "/api/v1/groups", Some(json!({ "name": name })), 201).await;
}

async fn account(s: &TestServer, name: &str, group: Option<&str>) {
    let mut body = json!({"username": name, "password": "correct horse battery staple"});
    if let Some(g) = group {
        body["group"] = json!(g);
    }
    crate::users::create_own(s, body).await;
}

/// A whole-card offering (an exclusive A100).
async fn whole_card(s: &TestServer) -> String {
    let body = json!({"name": "whole A100", "resource_class": "gpu", "mode": "exclusive", "gpu_model": "A100",
                      "image": "ghcr.io/lab/x:1", "gpu_mem_mb": 1});
    send(s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

/// A session for `owner` (created by the admin on their behalf).
async fn create_for(s: &TestServer, off: &str, owner: &str) -> reqwest::Response {
    call(s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": owner}))).await
}

/// The `excludedNodes` of the CR a session got.
fn excluded(c: &gshare_fake_kube::FakeCluster, v: &Value) -> Value {
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), v["cr_name"].as_str().unwrap()).unwrap();
    cr["spec"]["excludedNodes"].clone()
}

async fn node_pool_of(s: &TestServer, cid: &str, node: &str) -> (Value, Value) {
    let nodes = send(s, Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
    let n = nodes.as_array().unwrap().iter().find(|n| n["name"] == node).unwrap().clone();
    (n["pool_id"].clone(), n["pool_name"].clone())
}

#[tokio::test]
async fn node_pools_keep_upstreams_names_and_refuse_bad_input() {
    let s = server().await;
    let c = cluster("pools-api").await;
    let cid = register(&s, "pools-api", &c).await;
    group(&s, "vision").await;
    group(&s, "nlp").await;

    let body = json!({"cluster_id": cid, "name": "vision-a100", "description": "Vision's cards", "nodes": [N0],
                      "groups": ["vision"]});
    let p = send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    let id = p["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("npl_"), "{p}");
    assert_eq!(
        (&p["cluster_id"], &p["cluster_name"], &p["name"], &p["kind"], &p["node_count"], &p["groups"]),
        (&json!(cid), &json!("pools-api"), &json!("vision-a100"), &json!("dedicated"), &json!(1), &json!(["vision"])),
        "{p}"
    );
    assert_eq!(p["nodes"], json!([{"hostname": N0, "status": "ready", "device_count": 4}]), "{p}");
    assert_eq!((&p["gpus_total"], &p["gpus_used"]), (&json!(4), &json!(0)));
    assert_eq!(send(&s, Method::GET, &format!("/api/v1/node-pools/{id}"), None, 200).await["name"], "vision-a100");

    // Pool membership on the node list; pool use on the Overview.
    assert_eq!(node_pool_of(&s, &cid, N0).await, (json!(id), json!("vision-a100")));
    assert_eq!(node_pool_of(&s, &cid, N1).await, (Value::Null, Value::Null));
    let ov = send(&s, Method::GET, "/api/v1/overview", None, 200).await;
    let cl = ov["clusters"].as_array().unwrap().iter().find(|x| x["id"] == cid.as_str()).unwrap();
    assert_eq!(
        cl["pools"],
        json!([{"id": id, "name": "vision-a100", "kind": "dedicated", "groups": ["vision"], "nodes": 1,
                "gpus_total": 4, "gpus_used": 0}]),
        "{cl}"
    );

    // Bad input: the right refusal, the store unchanged.
    let before = pools(&s).await;
    let ok = |over: Value| {
        let mut b = json!({"cluster_id": cid, "name": "second", "nodes": [N1], "groups": ["nlp"]});
        for (k, v) in over.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (ok(json!({"cluster_id": "clu_01jzzzzzzzzzzzzzzzzzzzzzzz"})), 404, "not_found", "no cluster"),
        (ok(json!({"cluster_id": "../etc"})), 404, "not_found", "no cluster"),
        (ok(json!({"nodes": [N1, N0]})), 409, "conflict", "is in pool vision-a100"),
        (ok(json!({"nodes": ["gpu-node-9"]})), 422, "validation_failed", "has no node gpu-node-9"),
        (ok(json!({"nodes": ["Not A Node"]})), 422, "validation_failed", "not a node name"),
        (ok(json!({"nodes": [N1, N1]})), 422, "validation_failed", "listed twice"),
        (ok(json!({"groups": ["ghosts"]})), 422, "validation_failed", "no group named ghosts"),
        (ok(json!({"groups": ["a b"]})), 422, "validation_failed", "not a group name"),
        (ok(json!({"name": "  "})), 422, "validation_failed", "must not be empty"),
        (ok(json!({"name": "x".repeat(65)})), 422, "validation_failed", "at most 64"),
        (ok(json!({"name": "a\nb"})), 422, "validation_failed", "control characters"),
        (ok(json!({"name": "VISION-A100"})), 409, "conflict", "has a pool named vision-a100"),
        (ok(json!({"description": "d".repeat(201)})), 422, "validation_failed", "at most 200"),
        (ok(json!({"kind": "exclusive"})), 422, "validation_failed", ""),
        (
            ok(json!({"nodes": (0..10_001).map(|i| format!("n{i}")).collect::<Vec<_>>()})),
            422,
            "validation_failed",
            "at most 10000",
        ),
        (ok(json!({"gpus": 4})), 422, "validation_failed", ""),
    ];
    for (body, status, code, says) in cases {
        let e =
            expect_error(call(&s, Method::POST, "/api/v1/node-pools", Some(body.clone())).await, status, code).await;
        let m = e["error"]["message"].as_str().unwrap().to_string() + &e["error"]["details"].to_string();
        assert!(m.contains(says), "{}: {e}", &body.to_string()[..body.to_string().len().min(200)]);
        assert!(m.len() < 4_000, "bounded: {}", m.len());
    }
    let res = call(&s, Method::POST, "/api/v1/node-pools", Some(json!({"name": "no cluster"}))).await;
    let e = expect_error(res, 422, "validation_failed").await;
    assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["body", "cluster_id"]), "{e}");
    let e = expect_error(
        call(&s, Method::POST, "/api/v1/node-pools", Some(ok(json!({"nodes": [N1, N0]})))).await,
        409,
        "conflict",
    )
    .await;
    assert_eq!(e["error"]["details"]["pool_id"], id.as_str(), "{e}");
    for (patch, status, code) in [
        (json!({"name": ""}), 422, "validation_failed"),
        (json!({"groups": ["ghosts"]}), 422, "validation_failed"),
        (json!({"nodes": [N0, "gpu-node-9"]}), 422, "validation_failed"),
        (json!({"kind": "mig"}), 422, "validation_failed"),
    ] {
        let res = call(&s, Method::PATCH, &format!("/api/v1/node-pools/{id}"), Some(patch.clone())).await;
        expect_error(res, status, code).await;
    }
    let res = call(&s, Method::PATCH, "/api/v1/node-pools/npl_nope", Some(json!({"name": "x"}))).await;
    expect_error(res, 404, "not_found").await;
    expect_error(call(&s, Method::DELETE, "/api/v1/node-pools/npl_nope", None).await, 404, "not_found").await;
    assert_eq!(pools(&s).await, before, "a refused change was stored");

    // Members may not read or change pools.
    account(&s, "ann", Some("vision")).await;
    let ann = s.app().auth.api.mint("admin:ann", std::time::Duration::from_secs(3600)).unwrap();
    for (m, path) in
        [(Method::GET, "/api/v1/node-pools".to_string()), (Method::DELETE, format!("/api/v1/node-pools/{id}"))]
    {
        let res = s.client.request(m, s.url(&path)).bearer_auth(&ann).send().await.unwrap();
        expect_error(res, 403, "forbidden_role").await;
    }

    // A pool's group is not deleted while the pool names it (nor are its members moved).
    let e = expect_error(call(&s, Method::DELETE, "/api/v1/groups/vision", None).await, 409, "group_in_use").await;
    assert_eq!(e["error"]["details"]["node_pools"], json!(["vision-a100"]), "{e}");
    send(&s, Method::PATCH, "/api/v1/users/ann", Some(json!({"group": "nlp"})), 200).await;
    let e = expect_error(call(&s, Method::DELETE, "/api/v1/groups/vision", None).await, 409, "group_in_use").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("vision-a100"), "{e}");
    let groups = send(&s, Method::GET, "/api/v1/groups", None, 200).await;
    assert!(groups["data"].as_array().unwrap().iter().any(|g| g["name"] == "vision"));

    // A change is audited with what changed; taking the group out lets it go.
    let v = send(&s, Method::PATCH, &format!("/api/v1/node-pools/{id}"), Some(json!({"groups": []})), 200).await;
    assert_eq!(v["groups"], json!([]));
    send(&s, Method::DELETE, "/api/v1/groups/vision", None, 204).await;
    s.app().audit.flush().await;
    let log = send(&s, Method::GET, "/api/v1/audit?action=pool.update", None, 200).await;
    let entry = &log["data"][0];
    assert_eq!(entry["target"], id.as_str(), "{log}");
    assert_eq!(entry["details"]["changes"]["groups"], json!({"from": ["vision"], "to": []}), "{log}");
    let log = send(&s, Method::GET, "/api/v1/audit?action=pool.create", None, 200).await;
    assert!(
        log["data"].as_array().unwrap().iter().any(|e| e["target"] == id.as_str() && e["result"] == "success"),
        "{log}"
    );

    // Deleted: its nodes are shared again.
    send(&s, Method::DELETE, &format!("/api/v1/node-pools/{id}"), None, 204).await;
    expect_error(call(&s, Method::GET, &format!("/api/v1/node-pools/{id}"), None).await, 404, "not_found").await;
    assert_eq!(node_pool_of(&s, &cid, N0).await, (Value::Null, Value::Null));
    assert_eq!(pools(&s).await["total"], 0);

    // A cluster unregistered takes its pools with it (and no longer holds their groups).
    let body = json!({"cluster_id": cid, "name": "nlp", "nodes": [N1], "groups": ["nlp"]});
    send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    expect_error(call(&s, Method::DELETE, "/api/v1/groups/nlp", None).await, 409, "group_in_use").await;
    send(&s, Method::DELETE, &format!("/api/v1/clusters/{cid}"), None, 204).await;
    assert_eq!(pools(&s).await["total"], 0);
    send(&s, Method::PATCH, "/api/v1/users/ann", Some(json!({"group": null})), 200).await;
    send(&s, Method::DELETE, "/api/v1/groups/nlp", None, 204).await;
    s.stop().await;
}

#[tokio::test]
async fn other_groups_never_land_on_a_pool_and_its_group_spills_only_when_its_policy_allows() {
    let s = server().await;
    let c = cluster("pools-fit").await;
    let cid = register(&s, "pools-fit", &c).await;
    group(&s, "vision").await;
    group(&s, "nlp").await;
    account(&s, "ann", Some("vision")).await;
    account(&s, "bob", Some("nlp")).await;
    account(&s, "carl", None).await;
    let off = whole_card(&s).await;
    let body = json!({"cluster_id": cid, "name": "vision", "nodes": [N0], "groups": ["vision"]});
    send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;

    // Other groups (and users without one) are kept off the pool's node; its group stays on it.
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "bob"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N0]));
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "carl"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N0]));
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "ann"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N1]), "no spilling without limits.shared_pool");

    // The shared node cordoned: bob's whole card fits nowhere he may go, though the pool has
    // free cards; the refusal names what he could get (nothing), not the pool's cards.
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{N1}/cordon"), None, 200).await;
    let crs = || c.store().list("gshare.io", "v1", "gsharesessions", Some(NS)).len();
    let before = crs();
    let e = expect_error(create_for(&s, &off, "bob").await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["largest_free"], Value::Null, "{e}");
    assert!(e["error"]["details"]["reported_models"].as_array().is_some_and(|m| !m.is_empty()), "{e}");
    assert_eq!(crs(), before, "nothing applied");
    // Ann's group fits in its pool.
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "ann"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N1]));

    // A slice bigger than any card: ann is told the largest slice of her pool's cards.
    let body = json!({"name": "two cards", "resource_class": "gpu", "gpu_model": "A100", "image": "ghcr.io/lab/x:1",
                      "gpu_mem_mb": 163_840, "gpu_cores": 50});
    let huge = send(&s, Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string();
    let e = expect_error(create_for(&s, &huge, "ann").await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["largest_free"]["gpu_mem_mb"], 81_920, "{e}");
    let e = expect_error(create_for(&s, &huge, "bob").await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["largest_free"], Value::Null, "{e}");

    // The pool's node cordoned and the shared one back: ann may not spill...
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{N1}/uncordon"), None, 200).await;
    send(&s, Method::POST, &format!("/api/v1/clusters/{cid}/nodes/{N0}/cordon"), None, 200).await;
    expect_error(create_for(&s, &off, "ann").await, 409, "unserviceable").await;
    // ... until her group's policy says shared_pool.
    let pol = json!({"scope": "group", "scope_id": "vision", "limits": {"shared_pool": true}});
    let pol = send(&s, Method::POST, "/api/v1/resource-policies", Some(pol), 201).await;
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "ann"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N0]), "only the cordoned node");
    // A user policy saying false wins over the group's true (user → group → global).
    let mine = json!({"scope": "user", "scope_id": "ann", "limits": {"shared_pool": false}});
    send(&s, Method::POST, "/api/v1/resource-policies", Some(mine), 201).await;
    expect_error(create_for(&s, &off, "ann").await, 409, "unserviceable").await;
    let pid = pol["id"].as_str().unwrap();
    send(&s, Method::DELETE, &format!("/api/v1/resource-policies/{pid}"), None, 204).await;
    // Bob was never limited by the pool's cordon.
    send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "bob"})), 201).await;
    s.stop().await;
}

#[tokio::test]
async fn a_node_moved_between_pools_keeps_its_running_session_and_new_placements_follow() {
    let s = server().await;
    let c = cluster("pools-move").await;
    let cid = register(&s, "pools-move", &c).await;
    group(&s, "vision").await;
    group(&s, "nlp").await;
    account(&s, "ann", Some("vision")).await;
    account(&s, "bob", Some("nlp")).await;
    let off = whole_card(&s).await;
    let body = json!({"cluster_id": cid, "name": "vision", "nodes": [N0], "groups": ["vision"]});
    let vision = send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    let body = json!({"cluster_id": cid, "name": "nlp", "nodes": [N1], "groups": ["nlp"]});
    let nlp = send(&s, Method::POST, "/api/v1/node-pools", Some(body), 201).await;
    let (vid, nid) = (vision["id"].as_str().unwrap(), nlp["id"].as_str().unwrap());

    // Ann's session runs on a card of gpu-node-0.
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "ann"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([N1]));
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    let uuid = gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), N0, 0);
    let op = operator(&s, &cid);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": uuid, "node_name": N0})).await;
    let p = send(&s, Method::GET, &format!("/api/v1/node-pools/{vid}"), None, 200).await;
    assert_eq!((&p["gpus_total"], &p["gpus_used"]), (&json!(4), &json!(1)), "{p}");

    // A move straight into another pool is refused: take it out first.
    let res = call(&s, Method::PATCH, &format!("/api/v1/node-pools/{nid}"), Some(json!({"nodes": [N1, N0]}))).await;
    expect_error(res, 409, "conflict").await;
    send(&s, Method::PATCH, &format!("/api/v1/node-pools/{vid}"), Some(json!({"nodes": []})), 200).await;
    let p = send(&s, Method::PATCH, &format!("/api/v1/node-pools/{nid}"), Some(json!({"nodes": [N1, N0]})), 200).await;
    assert_eq!((&p["node_count"], &p["gpus_total"], &p["gpus_used"]), (&json!(2), &json!(8), &json!(1)), "{p}");
    assert_eq!(node_pool_of(&s, &cid, N0).await.1, json!("nlp"));

    // The running session keeps running, its CR untouched.
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), &name).unwrap();
    assert_eq!(cr["spec"]["excludedNodes"], json!([N1]));
    assert!(cr["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(send(&s, Method::GET, &format!("/api/v1/sessions/{sid}"), None, 200).await["phase"], "running");

    // New placements follow: vision's pool is empty now (and it may not spill), nlp has both.
    let e = expect_error(create_for(&s, &off, "ann").await, 409, "unserviceable").await;
    assert_eq!(e["error"]["details"]["largest_free"], Value::Null, "{e}");
    let v = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "bob"})), 201).await;
    assert_eq!(excluded(&c, &v), json!([]));
    // Her paused session's resume is placed by the new pools too.
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/pause"), None, 200).await;
    report(&s, &op, &name, json!({"phase": "Paused", "ts": ts(&s)})).await;
    let res = call(&s, Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None).await;
    expect_error(res, 409, "unserviceable").await;
    // The vision pool deleted: its group has no pool, so the shared nodes (none now) ... and
    // nlp's pool deleted: everything is shared again and she resumes, excluded from nothing.
    send(&s, Method::DELETE, &format!("/api/v1/node-pools/{vid}"), None, 204).await;
    send(&s, Method::DELETE, &format!("/api/v1/node-pools/{nid}"), None, 204).await;
    send(&s, Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    let cr = c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), &name).unwrap();
    assert_eq!(cr["spec"]["excludedNodes"], json!([]), "{cr}");
    s.stop().await;
}
