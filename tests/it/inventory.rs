//! Operator callbacks replayed as upstream's operator sends them (§2 of the contract): inventory
//! with its retries, two clusters at once, unregister mid-stream, liveness and the sweep, cordon
//! and decommission, volumes/status/samples/health/audit, every bad input and every JWT attack
//! over HTTP, and `/metrics`.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use gshare::clusters::model::CLUSTERS;
use gshare::inventory::model::GPUS;
use gshare::sessions::model::Phase;
use gshare::sessions::{SESSIONS, SessionRecord};
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::{Value, json};

use crate::support::{TestServer, expect_error};

fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

fn operator(s: &TestServer, id: &str) -> String {
    s.app().auth.internal.mint(&format!("operator:{id}"), Duration::from_secs(7 * 86400)).unwrap()
}

async fn fake(name: &str) -> FakeCluster {
    FakeCluster::start(ClusterSpec { name: name.into(), ..ClusterSpec::default() }).await.unwrap()
}

async fn register(s: &TestServer, name: &str, c: &FakeCluster) -> String {
    let body = json!({"name": name, "role": "primary", "kubeconfig_b64": STANDARD.encode(c.kubeconfig_yaml())});
    let res = s.client.post(s.url("/api/v1/clusters")).bearer_auth(admin(s)).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let v: Value = res.json().await.unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// A callback as the operator sends it: JSON, bearer token.
async fn call(s: &TestServer, token: &str, path: &str, body: &Value) -> reqwest::Response {
    s.client.post(s.url(path)).bearer_auth(token).json(body).send().await.unwrap()
}

/// The operator's retry rule: 2xx and 409 are success; 5xx retried (4 attempts).
async fn send_like_operator(s: &TestServer, token: &str, path: &str, body: &Value) -> u16 {
    let mut last = 0;
    for backoff in [200u64, 400, 800, 0] {
        last = call(s, token, path, body).await.status().as_u16();
        if (200..300).contains(&last) || last == 409 || (400..500).contains(&last) && last != 401 {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(backoff / 100)).await;
    }
    last
}

fn node_report(cluster: &str, node: &str) -> Value {
    json!({"node_id": node, "node_cpu": 64, "node_mem_gb": 512, "node_disk_gb": 900, "role": "gpu", "node_ready": true, "cluster_id": cluster})
}

fn gpu_report(cluster: &str, node: &str, uuid: &str, mem: u64) -> Value {
    json!({"node_id": node, "uuid": uuid, "model": "NVIDIA A100-SXM4-80GB", "mode": "fractional",
        "total_mem_mb": mem, "used_mem_mb": 0, "total_cores": 100, "used_cores": 0, "status": "ready",
        "node_ready": true, "node_cpu": 64, "node_mem_gb": 512, "node_disk_gb": 900, "cluster_id": cluster})
}

async fn admin_get(s: &TestServer, path: &str) -> Value {
    let res = s.client.get(s.url(path)).bearer_auth(admin(s)).send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.json().await.unwrap()
}

async fn operator_get(s: &TestServer, token: &str, path: &str) -> Value {
    let res = s.client.get(s.url(path)).bearer_auth(token).send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.json().await.unwrap()
}

/// Asserts the running counters equal a recount from the rows.
async fn assert_counters(s: &TestServer, id: &str) -> (u64, u64, u64) {
    let key = id.to_string();
    let (rec, recount) = s
        .app()
        .store
        .read(move |txn| {
            Ok((
                gshare::inventory::model::CLUSTER_COUNTS.get(txn, &key)?.unwrap(),
                gshare::sessions::model::recount(txn, &key)?,
            ))
        })
        .await
        .unwrap();
    assert_eq!((rec.node_count, rec.gpu_count, rec.vram_total_mb, rec.running_sessions), recount, "{id}");
    (rec.node_count, rec.gpu_count, rec.vram_total_mb)
}

#[tokio::test]
async fn inventory_reports_with_retries_keep_counters_exact() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    assert_eq!(assert_counters(&s, &id).await, (2, 8, 8 * 81920));
    let seeded = admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await;
    let uuid0 = seeded[0]["gpus"][0]["uuid"].as_str().unwrap().to_string();

    // Our bookkeeping owns occupancy: a report must never overwrite it.
    let key = format!("{id}/{uuid0}");
    s.app()
        .store
        .write(move |txn| {
            let mut g = GPUS.get_in_write(txn, &key)?.unwrap();
            g.used_mem_mb = 4096;
            g.used_cores = 30;
            GPUS.put(txn, &key, &g)
        })
        .await
        .unwrap();

    // The existing nodes and cards, then a third node with 8 new cards; every report twice
    // (the operator retries), and both answers are 202.
    for n in ["gpu-node-0", "gpu-node-1", "gpu-node-2"] {
        for _ in 0..2 {
            let res = call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, n)).await;
            assert_eq!(res.status(), 202);
            assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": true}));
        }
    }
    for i in 0..8 {
        let body = gpu_report(&id, "gpu-node-2", &format!("GPU-new-{i}"), 40960);
        assert_eq!(send_like_operator(&s, &tok, "/internal/inventory/gpu-devices", &body).await, 202);
        assert_eq!(send_like_operator(&s, &tok, "/internal/inventory/gpu-devices", &body).await, 202);
    }
    let body = gpu_report(&id, "gpu-node-0", &uuid0, 81920);
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &body).await.status(), 202);
    assert_eq!(assert_counters(&s, &id).await, (3, 16, 8 * 81920 + 8 * 40960));
    let key = format!("{id}/{uuid0}");
    let g = s.app().store.read(move |txn| GPUS.get(txn, &key)).await.unwrap().unwrap();
    assert_eq!((g.used_mem_mb, g.used_cores), (4096, 30));

    // A card grows and moves to another node: counters follow.
    let body = gpu_report(&id, "gpu-node-1", "GPU-new-0", 81920);
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &body).await.status(), 202);
    assert_eq!(assert_counters(&s, &id).await, (3, 16, 9 * 81920 + 7 * 40960));
    let nodes = admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await;
    let counts: Vec<usize> = nodes.as_array().unwrap().iter().map(|n| n["gpus"].as_array().unwrap().len()).collect();
    assert_eq!(counts, vec![4, 5, 7]);

    // The cluster views show the live data and the heartbeat.
    let detail = admin_get(&s, &format!("/api/v1/clusters/{id}")).await;
    assert_eq!(detail["node_count"], 3);
    assert_eq!(detail["gpu_count"], 16);
    assert!(detail["heartbeat_at"].as_str().is_some(), "{detail}");

    // A repeat changes nothing: no commit.
    let before = s.app().store.generation();
    for _ in 0..5 {
        assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &body).await.status(), 202);
        assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, "gpu-node-1")).await.status(), 202);
    }
    assert_eq!(s.app().store.generation(), before);

    // Drift: recorded, 202.
    let drift = json!({"cluster_id": id, "uuid": uuid0, "used_mem_mb": 90000, "total_mem_mb": 81920});
    assert_eq!(call(&s, &tok, "/internal/inventory/drift", &drift).await.status(), 202);
    s.stop().await;
}

#[tokio::test]
async fn two_clusters_at_once_and_unregister_mid_stream() {
    let s = TestServer::start().await;
    let (ca, cb) = (fake("a").await, fake("b").await);
    let a = register(&s, "gpu-a", &ca).await;
    let b = register(&s, "gpu-b", &cb).await;
    let (ta, tb) = (operator(&s, &a), operator(&s, &b));

    // A's stream signals after its first round; the unregister then lands while it goes on.
    let first_round = std::sync::Arc::new(tokio::sync::Notify::new());
    let stream = |id: String, tok: String, rounds: usize, signal: Option<std::sync::Arc<tokio::sync::Notify>>| {
        let client = s.client.clone();
        let base = s.base.clone();
        async move {
            let mut statuses = Vec::new();
            for r in 0..rounds {
                for n in 0..4 {
                    let node = format!("node-{n}");
                    let nb = node_report(&id, &node);
                    let res = client
                        .post(format!("{base}/internal/inventory/nodes"))
                        .bearer_auth(&tok)
                        .json(&nb)
                        .send()
                        .await
                        .unwrap();
                    statuses.push(res.status().as_u16());
                    for g in 0..4 {
                        let gb = gpu_report(&id, &node, &format!("GPU-{id}-{n}-{g}"), 1000 + (r as u64 % 3) * 10);
                        let res = client
                            .post(format!("{base}/internal/inventory/gpu-devices"))
                            .bearer_auth(&tok)
                            .json(&gb)
                            .send()
                            .await
                            .unwrap();
                        statuses.push(res.status().as_u16());
                    }
                }
                if let Some(signal) = &signal {
                    signal.notify_one();
                }
            }
            statuses
        }
    };
    let unregister = async {
        first_round.notified().await;
        let res = s.client.delete(s.url(&format!("/api/v1/clusters/{a}"))).bearer_auth(admin(&s)).send().await.unwrap();
        assert_eq!(res.status(), 204);
    };
    let (sa, sb, ()) = tokio::join!(
        stream(a.clone(), ta.clone(), 6, Some(first_round.clone())),
        stream(b.clone(), tb.clone(), 6, None),
        unregister
    );
    // Upstream answers an unregistered cluster's reports with 202 too (a no-op).
    assert!(sa.iter().chain(&sb).all(|s| *s == 202), "{sa:?} {sb:?}");

    // A's inventory is gone and stays gone; B has its 2 seeded + 4 reported nodes.
    let ka = a.clone();
    let rec = s.app().store.read(move |txn| CLUSTERS.get(txn, &ka)).await.unwrap().unwrap();
    assert!(rec.deleted_at.is_some());
    let pa = format!("{a}/");
    let left = s
        .app()
        .store
        .read(move |txn| {
            Ok((gshare::inventory::model::NODES.list_prefix(txn, &pa)?.len(), GPUS.list_prefix(txn, &pa)?.len()))
        })
        .await
        .unwrap();
    assert_eq!(left, (0, 0));
    let before = s.app().store.generation();
    assert_eq!(call(&s, &ta, "/internal/inventory/nodes", &node_report(&a, "node-9")).await.status(), 202);
    assert_eq!(
        call(&s, &ta, "/internal/inventory/gpu-devices", &gpu_report(&a, "node-9", "GPU-x", 1)).await.status(),
        202
    );
    assert_eq!(operator_get(&s, &ta, "/internal/nodes/cordoned").await, json!({"hostnames": []}));
    assert_eq!(s.app().store.generation(), before, "an unregistered cluster's report changed the store");
    let (nodes, gpus, vram) = assert_counters(&s, &b).await;
    assert_eq!((nodes, gpus), (6, 8 + 16));
    assert_eq!(vram, 8 * 81920 + 16 * (1000 + 5 % 3 * 10));
    s.stop().await;
}

#[tokio::test]
async fn another_clusters_payload_is_forbidden() {
    let s = TestServer::start().await;
    let (ca, cb) = (fake("a").await, fake("b").await);
    let a = register(&s, "gpu-a", &ca).await;
    let b = register(&s, "gpu-b", &cb).await;
    let ta = operator(&s, &a);
    for (path, body) in [
        ("/internal/inventory/nodes", node_report(&b, "n1")),
        ("/internal/inventory/gpu-devices", gpu_report(&b, "n1", "GPU-1", 1)),
        ("/internal/inventory/drift", json!({"cluster_id": b, "uuid": "GPU-1"})),
        ("/internal/nodes/health-events", json!({"node_id": "n1", "kind": "xid", "cluster_id": b})),
        ("/internal/volumes/sync", json!({"volumes": [], "cluster_id": b})),
        (
            "/internal/sessions/ses-x/status",
            json!({"phase": "Running", "ts": "2025-05-01T10:00:00.12Z", "cluster_id": b}),
        ),
        (
            "/internal/audit/operator",
            json!({"actor": format!("operator:{b}"), "action": "node.cordon", "target": "n1", "result": "ok", "ts": "2025-05-01T10:00:00Z"}),
        ),
    ] {
        let body = expect_error(call(&s, &ta, path, &body).await, 403, "forbidden").await;
        assert_eq!(body["error"]["details"], json!({"token_cluster": a, "cluster_id": b}), "{path}");
    }
    // Absent and null cluster_id pass, and land on the token's cluster.
    let mut r = node_report(&a, "n-null");
    r["cluster_id"] = Value::Null;
    assert_eq!(call(&s, &ta, "/internal/inventory/nodes", &r).await.status(), 202);
    r.as_object_mut().unwrap().remove("cluster_id");
    r["node_id"] = "n-absent".into();
    assert_eq!(call(&s, &ta, "/internal/inventory/nodes", &r).await.status(), 202);
    let nodes = admin_get(&s, &format!("/api/v1/clusters/{a}/nodes")).await;
    let names: Vec<&str> = nodes.as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"n-null") && names.contains(&"n-absent"), "{names:?}");

    // A session of cluster B, reported by A's operator (by CR name): 403.
    let sb = b.clone();
    s.app()
        .store
        .write(move |txn| {
            SESSIONS.put(txn, "ses_01JAAAAAAAAAAAAAAAAAAAAAAA", &session("ses_01JAAAAAAAAAAAAAAAAAAAAAAA", &sb))
        })
        .await
        .unwrap();
    let st = json!({"phase": "Heartbeat", "ts": "2025-05-01T10:00:00.12Z"});
    let body = expect_error(
        call(&s, &ta, "/internal/sessions/ses-01jaaaaaaaaaaaaaaaaaaaaaaa/status", &st).await,
        403,
        "forbidden",
    )
    .await;
    // The refusal names the caller's own cluster, never the owner's.
    assert!(!body.to_string().contains(b.as_str()), "another cluster's id leaked: {body}");
    assert_eq!(body["error"]["details"], json!({ "token_cluster": a }), "{body}");
    s.stop().await;
}

fn session(id: &str, cluster: &str) -> SessionRecord {
    SessionRecord { phase: Phase::Running, ..SessionRecord::new(id, cluster, "x", "u", 0) }
}

#[tokio::test]
async fn bad_input_is_refused_with_field_errors() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    let long_node = "a".repeat(254);
    let cases: Vec<(&str, Value, Vec<&str>, &str)> = vec![
        ("/internal/inventory/nodes", json!({"node_ready": true}), vec!["body", "node_id"], "missing"),
        ("/internal/inventory/nodes", json!({"node_id": 5}), vec!["body", "node_id"], "type_error"),
        (
            "/internal/inventory/nodes",
            json!({"node_id": "n", "node_cpu": "many"}),
            vec!["body", "node_cpu"],
            "type_error",
        ),
        (
            "/internal/inventory/nodes",
            json!({"node_id": "n", "node_mem_gb": -1}),
            vec!["body", "node_mem_gb"],
            "greater_than_equal",
        ),
        ("/internal/inventory/gpu-devices", json!({"node_id": "n"}), vec!["body", "uuid"], "missing"),
        (
            "/internal/inventory/gpu-devices",
            json!({"node_id": "n", "uuid": "GPU-1", "total_mem_mb": -5}),
            vec!["body", "total_mem_mb"],
            "greater_than_equal",
        ),
        (
            "/internal/inventory/gpu-devices",
            json!({"node_id": "n", "uuid": "GPU-1", "node_ready": "yes"}),
            vec!["body", "node_ready"],
            "type_error",
        ),
        (
            "/internal/sessions/ses-1/status",
            json!({"phase": "Running", "ts": "yesterday"}),
            vec!["body", "ts"],
            "datetime_parsing",
        ),
        ("/internal/sessions/ses-1/status", json!({"phase": "Running"}), vec!["body", "ts"], "missing"),
        ("/internal/sessions/ses-1/status", json!({"ts": "2025-05-01T10:00:00Z"}), vec!["body", "phase"], "missing"),
        (
            "/internal/audit/operator",
            json!({"actor": "operator:x", "action": "a", "target": "t", "result": "ok", "ts": "10:00"}),
            vec!["body", "ts"],
            "datetime_parsing",
        ),
        ("/internal/volumes/sync", json!({"cluster_id": null}), vec!["body", "volumes"], "missing"),
        (
            "/internal/volumes/sync",
            json!({"volumes": [], "pools": [{"storage_class": "zfs", "capacity_bytes": -1}]}),
            vec!["body", "pools", "0", "capacity_bytes"],
            "greater_than_equal",
        ),
        ("/internal/nodes/health-events", json!({"node_id": "n"}), vec!["body", "kind"], "missing"),
        (
            "/internal/metrics/session-samples",
            json!({"node": "n", "samples": [{"session": "s", "at": 1.0, "cpu_cores": -1.0, "mem_bytes": 1}]}),
            vec!["body", "samples", "0", "cpu_cores"],
            "greater_than_equal",
        ),
        ("/internal/inventory/drift", json!([1, 2]), vec!["body"], "dict_type"),
    ];
    for (path, body, loc, kind) in cases {
        let res = call(&s, &tok, path, &body).await;
        let b = expect_error(res, 422, "validation_failed").await;
        let e = &b["error"]["details"]["errors"][0];
        assert_eq!(e["loc"], json!(loc), "{path} {body}: {b}");
        assert_eq!(e["type"], kind, "{path} {body}: {b}");
        assert!(e["msg"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Names no node or card can have are read and stored nowhere: 202 accepted:false, never a
    // 4xx the operator would treat as final (upstream takes any string).
    let counts = |v: Value| (v["node_count"].as_u64(), v["gpu_count"].as_u64());
    let before = counts(admin_get(&s, &format!("/api/v1/clusters/{id}")).await);
    for (path, body) in [
        ("/internal/inventory/nodes", json!({"node_id": long_node})),
        ("/internal/inventory/nodes", json!({"node_id": "a/b"})),
        ("/internal/inventory/nodes", json!({"node_id": ""})),
        ("/internal/inventory/gpu-devices", json!({"node_id": "n", "uuid": "G".repeat(300)})),
        ("/internal/inventory/gpu-devices", json!({"node_id": "n", "uuid": ""})),
    ] {
        let res = call(&s, &tok, path, &body).await;
        assert_eq!(res.status(), 202, "{path} {body}");
        assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": false}), "{path} {body}");
    }
    assert_eq!(counts(admin_get(&s, &format!("/api/v1/clusters/{id}")).await), before, "nothing stored");
    // Unknown fields are ignored, as upstream does.
    let mut r = node_report(&id, "n-extra");
    r["shiny_new_field"] = json!({"x": 1});
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &r).await.status(), 202);
    // A node name of exactly 253 characters is a valid Kubernetes name.
    let ok_name = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join(".");
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, &ok_name)).await.status(), 202);
    // Not JSON: 400; over 1 MiB: 413; decommissioned with an empty body: 422.
    let res = s.client.post(s.url("/internal/inventory/nodes")).bearer_auth(&tok).body("{nope").send().await.unwrap();
    expect_error(res, 400, "invalid_json").await;
    let big = json!({"node_id": "n", "role": "x".repeat(1 << 20)});
    let res = call(&s, &tok, "/internal/inventory/nodes", &big).await;
    expect_error(res, 413, "payload_too_large").await;
    let res = s.client.post(s.url("/internal/nodes/decommissioned")).bearer_auth(&tok).send().await.unwrap();
    assert_eq!(res.status(), 422);
    s.stop().await;
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

fn claims(s: &TestServer, sub: &str) -> Value {
    let now = s.app().clock.now();
    json!({"iss": "gshare-internal", "aud": "gshare-internal", "sub": sub, "iat": now, "nbf": now, "exp": now + 600})
}

fn signing_key(s: &TestServer) -> gshare::auth::keys::SigningKey {
    gshare::auth::internal_ring(&s.app().config).load().unwrap().active().unwrap().clone()
}

fn sign(s: &TestServer, kid: Option<&str>, claims: &Value) -> String {
    sign_with(&signing_key(s), kid, claims)
}

fn sign_with(key: &gshare::auth::keys::SigningKey, kid: Option<&str>, claims: &Value) -> String {
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    h.kid = kid.map(str::to_string);
    let ek = jsonwebtoken::EncodingKey::from_rsa_pem(key.private_pem().expose().as_bytes()).unwrap();
    jsonwebtoken::encode(&h, claims, &ek).unwrap()
}

#[tokio::test]
async fn jwt_attacks_over_http_are_refused() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let sub = format!("operator:{id}");
    let key = signing_key(&s);
    let kid = key.kid().to_string();
    let now = s.app().clock.now();
    let good = sign(&s, Some(&kid), &claims(&s, &sub));
    let report = node_report(&id, "n1");
    assert_eq!(call(&s, &good, "/internal/inventory/nodes", &report).await.status(), 202);
    // A kid this server does not know, on a token its key signed: accepted, as upstream's verifier
    // tries every key of its JWKS.
    let renamed = sign(&s, Some("internal"), &claims(&s, &sub));
    assert_eq!(call(&s, &renamed, "/internal/inventory/nodes", &report).await.status(), 202);
    let foreign = gshare::auth::keys::SigningKey::generate_for_tests();

    let none = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT", "kid": kid})), b64(&claims(&s, &sub)));
    let hs256 = {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        h.kid = Some(kid.clone());
        let secret = jsonwebtoken::EncodingKey::from_secret(key.public_pem().unwrap().as_bytes()).unwrap();
        jsonwebtoken::encode(&h, &claims(&s, &sub), &secret).unwrap()
    };
    let mut wrong_aud = claims(&s, &sub);
    wrong_aud["aud"] = "gshare-api".into();
    let mut expired = claims(&s, &sub);
    expired["exp"] = (now - 120).into();
    let mut future = claims(&s, &sub);
    future["nbf"] = (now + 3600).into();
    let tampered = {
        let parts: Vec<&str> = good.split('.').collect();
        let mut c = claims(&s, &sub);
        c["sub"] = "operator:clu_local".into();
        format!("{}.{}.{}", parts[0], b64(&c), parts[2])
    };
    let attacks = [
        ("alg none", none),
        ("HS256 with the public key", hs256),
        ("wrong aud", sign(&s, Some(&kid), &wrong_aud)),
        ("expired", sign(&s, Some(&kid), &expired)),
        ("nbf in the future", sign(&s, Some(&kid), &future)),
        ("unknown kid, another key", sign_with(&foreign, Some("nope"), &claims(&s, &sub))),
        ("this server's kid, another key", sign_with(&foreign, Some(&kid), &claims(&s, &sub))),
        ("missing kid", sign(&s, None, &claims(&s, &sub))),
        ("tampered payload", tampered),
        ("not a JWT", "not-a-jwt".to_string()),
        ("garbage segments", "a.b.c".to_string()),
    ];
    let before = s.app().store.generation();
    for (name, tok) in attacks {
        let res = call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, "evil")).await;
        assert_eq!(res.headers().get("www-authenticate").map(|v| v.to_str().unwrap()), Some("Bearer"), "{name}");
        expect_error(res, 401, "unauthenticated").await;
        let res = s.client.get(s.url("/internal/nodes/cordoned")).bearer_auth(&tok).send().await.unwrap();
        expect_error(res, 401, "unauthenticated").await;
    }
    assert_eq!(s.app().store.generation(), before, "a refused token changed the store");
    // No token, an admin token, a token for an unknown subject form.
    let res = s.client.post(s.url("/internal/inventory/nodes")).json(&report).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    expect_error(call(&s, &admin(&s), "/internal/inventory/nodes", &report).await, 403, "forbidden").await;
    let res = call(&s, &sign(&s, Some(&kid), &claims(&s, "admin:admin")), "/internal/inventory/nodes", &report).await;
    expect_error(res, 401, "unauthenticated").await;
    // A 1 MB Authorization header: 431 in our JSON envelope, from the middleware.
    let res = s
        .client
        .post(s.url("/internal/inventory/nodes"))
        .header("authorization", format!("Bearer {}", "a".repeat(1 << 20)))
        .json(&report)
        .send()
        .await
        .unwrap();
    expect_error(res, 431, "headers_too_large").await;

    // A pruned key: its tokens stop verifying at once (even cached ones).
    let ring = gshare::auth::internal_ring(&s.app().config);
    ring.rotate(now).unwrap();
    assert!(s.app().auth.internal.reload_if_changed().unwrap());
    assert_eq!(call(&s, &good, "/internal/inventory/nodes", &report).await.status(), 202);
    let max = gshare::auth::tokens::MAX_TTL.as_secs() as i64;
    ring.prune(now + max + 1, max).unwrap();
    assert!(s.app().auth.internal.reload_if_changed().unwrap());
    expect_error(call(&s, &good, "/internal/inventory/nodes", &report).await, 401, "unauthenticated").await;
    let fresh = operator(&s, &id);
    assert_eq!(call(&s, &fresh, "/internal/inventory/nodes", &report).await.status(), 202);
    s.stop().await;
}

#[tokio::test]
async fn liveness_notready_and_the_sweep() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    for n in ["gpu-node-0", "gpu-node-1"] {
        assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, n)).await.status(), 202);
    }
    // NotReady: offline at once, last_seen does not move.
    let seen0 = admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await[1]["last_seen"].clone();
    s.clock.advance(Duration::from_secs(10));
    let mut r = node_report(&id, "gpu-node-1");
    r["node_ready"] = false.into();
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &r).await.status(), 202);
    let nodes = admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await;
    assert_eq!((nodes[1]["offline"].clone(), nodes[1]["ready"].clone()), (json!(true), json!(false)));
    assert_eq!(nodes[1]["last_seen"], seen0);
    assert_eq!(nodes[0]["offline"], false);

    // Silence: after heartbeat_stale_after the cluster is degraded, after node_stale_after the
    // nodes are offline. The clock moves; nothing sleeps.
    s.clock.advance(Duration::from_secs(95));
    let report = gshare::inventory::sweep(s.app()).await.unwrap();
    assert_eq!(report.clusters_degraded, vec![id.clone()]);
    assert!(report.nodes_offline.is_empty(), "{report:?}");
    let detail = admin_get(&s, &format!("/api/v1/clusters/{id}")).await;
    assert_eq!(detail["status"], "degraded");
    assert_eq!(detail["last_error"]["stage"], "heartbeat");
    // A passing probe keeps it degraded while the operator is silent.
    let res = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{id}/connection-test")))
        .bearer_auth(admin(&s))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(admin_get(&s, &format!("/api/v1/clusters/{id}")).await["status"], "degraded");
    s.clock.advance(Duration::from_secs(30));
    let report = gshare::inventory::sweep(s.app()).await.unwrap();
    assert_eq!(report.nodes_offline, vec![format!("{id}/gpu-node-0")]);
    assert_eq!(admin_get(&s, &format!("/api/v1/clusters/{id}")).await["nodes"]["offline"], 2);
    // Nothing more to do: a second sweep writes nothing.
    let g = s.app().store.generation();
    assert_eq!(gshare::inventory::sweep(s.app()).await.unwrap(), Default::default());
    assert_eq!(s.app().store.generation(), g);

    // The operator is back: connected again, the node online again.
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, "gpu-node-0")).await.status(), 202);
    let detail = admin_get(&s, &format!("/api/v1/clusters/{id}")).await;
    assert_eq!(detail["status"], "connected", "{detail}");
    assert_eq!(detail["heartbeat_age_s"], 0);
    assert_eq!(detail["nodes"]["offline"], 1);
    s.stop().await;
}

/// A stored cluster's `heartbeat_at` and one node's `last_seen`, as the state file has them.
async fn stored_liveness(s: &TestServer, id: &str, node: &str) -> (Option<i64>, Option<i64>) {
    let (cid, key) = (id.to_string(), format!("{id}/{node}"));
    s.app()
        .store
        .read(move |txn| {
            let c = gshare::inventory::model::CLUSTER_COUNTS.get(txn, &cid)?.and_then(|c| c.heartbeat_at);
            let n = gshare::inventory::model::NODES.get(txn, &key)?.and_then(|n| n.last_seen);
            Ok((c, n))
        })
        .await
        .unwrap()
}

/// Reports that change nothing durable cost no write: their liveness waits in memory and is
/// written by the flush (every 5 s, before a sweep, and at the stop) in one commit. What is
/// durable in between is what a crash (kill -9) leaves: at most one flush interval of liveness
/// times is lost, nothing else. The clock moves; nothing sleeps.
#[tokio::test]
async fn liveness_of_repeats_waits_in_memory_for_the_flush() {
    // The background flush waits a minute of real time: this test flushes by hand.
    let mut s = TestServer::start_with(&[("GSHARE_LIVENESS_FLUSH_EVERY", "60s")]).await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    let node = node_report(&id, "gpu-node-0");
    let card = gpu_report(&id, "gpu-node-0", "GPU-live-0", 81920);
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node).await.status(), 202);
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    let (hb0, seen0) = stored_liveness(&s, &id, "gpu-node-0").await;
    assert!(hb0.is_some() && seen0.is_some());

    s.clock.advance(Duration::from_secs(6));
    let t1 = s.clock.now_ms();
    let g = s.app().store.generation();
    for i in 0..3 {
        assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node).await.status(), 202);
        // `used_*` are advisory: a card whose only news is its occupancy is a repeat too.
        let mut busy = card.clone();
        busy["used_mem_mb"] = (1024 * i).into();
        assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &busy).await.status(), 202);
    }
    assert_eq!(s.app().store.generation(), g, "a repeat was written");
    // What a crash would leave now: the times from before the repeats.
    assert_eq!(stored_liveness(&s, &id, "gpu-node-0").await, (hb0, seen0));
    // The flush writes the cluster's heartbeat and the node's last_seen in one commit.
    assert_eq!(s.app().inventory.flush_liveness().await.unwrap(), 2);
    assert_eq!(s.app().store.generation(), g + 1);
    let (hb1, seen1) = stored_liveness(&s, &id, "gpu-node-0").await;
    assert!(hb1.unwrap() >= t1 && seen1.unwrap() >= t1, "{hb1:?} {seen1:?} < {t1}");
    assert_eq!(s.app().inventory.flush_liveness().await.unwrap(), 0);
    assert_eq!(s.app().store.generation(), g + 1);

    // A report with news is written at once, its liveness with it.
    s.clock.advance(Duration::from_secs(6));
    let t2 = s.clock.now_ms();
    let mut grown = node.clone();
    grown["node_cpu"] = 128.into();
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &grown).await.status(), 202);
    assert_eq!(s.app().store.generation(), g + 2);
    let (hb2, seen2) = stored_liveness(&s, &id, "gpu-node-0").await;
    assert!(hb2.unwrap() >= t2 && seen2.unwrap() >= t2);
    assert_eq!(admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await[0]["name"], "gpu-node-0");

    // A node that goes NotReady is a change (offline at once), not a repeat; its liveness stops.
    s.clock.advance(Duration::from_secs(6));
    let mut down = grown.clone();
    down["node_ready"] = false.into();
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &down).await.status(), 202);
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &down).await.status(), 202);
    s.app().inventory.flush_liveness().await.unwrap();
    assert_eq!(stored_liveness(&s, &id, "gpu-node-0").await.1, seen2);
    assert_eq!(admin_get(&s, &format!("/api/v1/clusters/{id}/nodes")).await[0]["offline"], true);

    // The sweep writes what memory holds before it judges silence: a cluster whose operator
    // only repeated itself for 95 s is not silent.
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &grown).await.status(), 202);
    let mut card = card.clone();
    card["node_cpu"] = 128.into();
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    let g = s.app().store.generation();
    for _ in 0..19 {
        s.clock.advance(Duration::from_secs(5));
        assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    }
    assert_eq!(s.app().store.generation(), g, "a repeat was written");
    let report = gshare::inventory::sweep(s.app()).await.unwrap();
    assert_eq!(report, Default::default(), "90 s of repeats judged as silence");

    // A graceful stop writes the last liveness.
    s.clock.advance(Duration::from_secs(6));
    let t3 = s.clock.now_ms();
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    let server = s.server.take().unwrap();
    let app = server.app.clone();
    server.stop().await;
    let (cid, key) = (id.clone(), format!("{id}/gpu-node-0"));
    let (hb, seen) = app
        .store
        .read(move |txn| {
            let c = gshare::inventory::model::CLUSTER_COUNTS.get(txn, &cid)?.and_then(|c| c.heartbeat_at);
            let n = gshare::inventory::model::NODES.get(txn, &key)?.and_then(|n| n.last_seen);
            Ok((c, n))
        })
        .await
        .unwrap();
    assert!(hb.unwrap() >= t3 && seen.unwrap() >= t3, "{hb:?} {seen:?} < {t3}");
}

/// The operator's two GETs are answered from a per-cluster list kept until an inventory write
/// of that cluster: every change that moves a node in or out of them shows at once, another
/// cluster's changes leave them alone, and answering them writes nothing.
#[tokio::test]
async fn hostname_lists_follow_every_change() {
    let s = TestServer::start().await;
    let (ca, cb) = (fake("a").await, fake("b").await);
    let (a, b) = (register(&s, "gpu-a", &ca).await, register(&s, "gpu-b", &cb).await);
    let (ta, tb) = (operator(&s, &a), operator(&s, &b));
    for (id, tok) in [(&a, &ta), (&b, &tb)] {
        for n in ["gpu-node-0", "gpu-node-1"] {
            assert_eq!(call(&s, tok, "/internal/inventory/nodes", &node_report(id, n)).await.status(), 202);
        }
    }
    let lists = |tok: String| {
        let s = &s;
        async move {
            (
                operator_get(s, &tok, "/internal/nodes/cordoned").await,
                operator_get(s, &tok, "/internal/nodes/decommissioning").await,
            )
        }
    };
    let empty = (json!({"hostnames": []}), json!({"hostnames": []}));
    assert_eq!(lists(ta.clone()).await, empty);
    let g = s.app().store.generation();
    assert_eq!(lists(ta.clone()).await, empty);
    assert_eq!(s.app().store.generation(), g);
    // A health event with action cordon (the operator's own path).
    let ev =
        json!({"node_id": "gpu-node-1", "kind": "xid", "severity": "critical", "action": "cordon", "cluster_id": a});
    assert_eq!(call(&s, &ta, "/internal/nodes/health-events", &ev).await.status(), 202);
    assert_eq!(lists(ta.clone()).await, (json!({"hostnames": ["gpu-node-1"]}), json!({"hostnames": []})));
    assert_eq!(lists(tb.clone()).await, empty);
    // The admin's cordon and decommission.
    let post_admin = |path: String| {
        let (client, url, t) = (s.client.clone(), s.url(&path), admin(&s));
        async move { client.post(url).bearer_auth(t).send().await.unwrap().status() }
    };
    assert_eq!(post_admin(format!("/api/v1/clusters/{a}/nodes/gpu-node-0/cordon")).await, 200);
    assert_eq!(lists(ta.clone()).await.0, json!({"hostnames": ["gpu-node-0", "gpu-node-1"]}));
    assert_eq!(post_admin(format!("/api/v1/clusters/{a}/nodes/gpu-node-1/decommission")).await, 200);
    assert_eq!(lists(ta.clone()).await, (json!({"hostnames": ["gpu-node-0"]}), json!({"hostnames": ["gpu-node-1"]})));
    // The operator deleted the node: it leaves the list.
    let done = json!({"hostname": "gpu-node-1"});
    assert_eq!(call(&s, &ta, "/internal/nodes/decommissioned", &done).await.status(), 202);
    assert_eq!(lists(ta.clone()).await, (json!({"hostnames": ["gpu-node-0"]}), json!({"hostnames": []})));
    assert_eq!(post_admin(format!("/api/v1/clusters/{a}/nodes/gpu-node-0/uncordon")).await, 200);
    assert_eq!(lists(ta).await, empty);
    assert_eq!(lists(tb).await, empty);
    s.stop().await;
}

#[tokio::test]
async fn cordon_and_decommission_round_trip() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    let post_admin = |path: String| {
        let (client, url, t) = (s.client.clone(), s.url(&path), admin(&s));
        async move { client.post(url).bearer_auth(t).send().await.unwrap() }
    };
    for n in ["gpu-node-1", "gpu-node-0"] {
        let res = post_admin(format!("/api/v1/clusters/{id}/nodes/{n}/cordon")).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.json::<Value>().await.unwrap()["cordoned"], true);
    }
    assert_eq!(
        operator_get(&s, &tok, "/internal/nodes/cordoned").await,
        json!({"hostnames": ["gpu-node-0", "gpu-node-1"]})
    );
    assert_eq!(post_admin(format!("/api/v1/clusters/{id}/nodes/gpu-node-0/uncordon")).await.status(), 200);
    assert_eq!(operator_get(&s, &tok, "/internal/nodes/cordoned").await, json!({"hostnames": ["gpu-node-1"]}));
    expect_error(post_admin(format!("/api/v1/clusters/{id}/nodes/nope/cordon")).await, 404, "not_found").await;
    expect_error(post_admin("/api/v1/clusters/clu_nope/nodes/gpu-node-0/cordon".into()).await, 404, "not_found").await;
    let res = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{id}/nodes/gpu-node-0/cordon")))
        .bearer_auth(&tok)
        .send()
        .await
        .unwrap();
    expect_error(res, 403, "forbidden").await;

    // Decommission: the node's cards leave, it is listed for the operator, reports are ignored.
    let res = post_admin(format!("/api/v1/clusters/{id}/nodes/gpu-node-1/decommission")).await;
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!((v["decommissioning"].clone(), v["gpus"].clone()), (json!(true), json!([])));
    assert_eq!(assert_counters(&s, &id).await, (2, 4, 4 * 81920));
    assert_eq!(operator_get(&s, &tok, "/internal/nodes/decommissioning").await, json!({"hostnames": ["gpu-node-1"]}));
    assert_eq!(operator_get(&s, &tok, "/internal/nodes/cordoned").await, json!({"hostnames": []}));
    let body = gpu_report(&id, "gpu-node-1", "GPU-back", 1000);
    assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &body).await.status(), 202);
    assert_eq!(assert_counters(&s, &id).await, (2, 4, 4 * 81920));
    expect_error(
        post_admin(format!("/api/v1/clusters/{id}/nodes/gpu-node-1/uncordon")).await,
        409,
        "node_decommissioning",
    )
    .await;
    // The operator deleted the Node and confirms (one attempt, as it does); then a repeat.
    for _ in 0..2 {
        let res = call(&s, &tok, "/internal/nodes/decommissioned", &json!({"hostname": "gpu-node-1"})).await;
        assert_eq!(res.status(), 202);
        assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": true}));
    }
    assert_eq!(assert_counters(&s, &id).await, (1, 4, 4 * 81920));
    assert_eq!(operator_get(&s, &tok, "/internal/nodes/decommissioning").await, json!({"hostnames": []}));

    // Every admin action is in the audit log, and so is the operator's deletion.
    s.app().audit.flush().await;
    let audit = admin_get(&s, "/api/v1/audit?action=node.*&size=50").await;
    let actions: Vec<(String, String)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap().to_string(), e["result"].as_str().unwrap().to_string()))
        .collect();
    for want in ["node.cordon", "node.uncordon", "node.decommission", "node.delete"] {
        assert!(actions.iter().any(|(a, r)| a == want && r == "success"), "{want}: {actions:?}");
    }
    assert!(actions.iter().any(|(a, r)| a == "node.uncordon" && r == "failure"), "{actions:?}");
    s.stop().await;
}

#[tokio::test]
async fn volumes_status_samples_health_and_operator_audit() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);

    let sync = json!({
        "cluster_id": id,
        "volumes": [
            {"name": "vol-01abc", "volume_id": "vol_01ABC", "capacity_gb": 10, "used_bytes": 1024, "mounted": true, "storage_class": "zfs"},
            {"name": "stray-pvc", "capacity_gb": 5, "mounted": false}
        ],
        "sessions": [{"name": "ses-01x", "ephemeral_used_bytes": 10, "ephemeral_limit_bytes": 100}],
        "pools": [{"storage_class": "zfs", "capacity_bytes": 1_000_000_000_000u64}, {"storage_class": "none", "capacity_bytes": 0}]
    });
    for _ in 0..2 {
        let res = call(&s, &tok, "/internal/volumes/sync", &sync).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.json::<Value>().await.unwrap(),
            json!({"volumes": [
                {"name": "vol-01abc", "volume_id": "vol_01ABC", "quota_gb": null, "reclaim": false},
                {"name": "stray-pvc", "volume_id": null, "quota_gb": null, "reclaim": false}
            ], "orphans": 2}),
            "as upstream's volume_sync.py: a PVC no volume record explains is an orphan, annotated or not"
        );
    }
    let key = format!("{id}/zfs");
    let pool = s.app().store.read(move |txn| gshare::inventory::model::POOLS.get(txn, &key)).await.unwrap().unwrap();
    assert_eq!(pool["capacity_bytes"], 1_000_000_000_000u64);

    // Status: unknown session is a 202 no-op; a known one (by CR name) is recorded.
    let st = json!({"phase": "Heartbeat", "bound_gpu_uuid": "GPU-8f", "node_name": "gpu-node-0", "pod_ref": "gshare-sessions/ses-ses-01j",
        "restart_count": 0, "container_state": "Running", "generation": 3, "cluster_id": id, "ts": "2025-05-01T10:00:00.12Z"});
    let res = call(&s, &tok, "/internal/sessions/ses-unknown/status", &st).await;
    assert_eq!(res.status(), 202);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": true}));
    let sid = "ses_01JBBBBBBBBBBBBBBBBBBBBBBB";
    let cid = id.clone();
    s.app().store.write(move |txn| gshare::sessions::model::put_session(txn, &session(sid, &cid))).await.unwrap();
    assert_counters(&s, &id).await;
    assert_eq!(admin_get(&s, &format!("/api/v1/clusters/{id}")).await["running_sessions"], 1);
    for _ in 0..2 {
        assert_eq!(call(&s, &tok, "/internal/sessions/ses-01jbbbbbbbbbbbbbbbbbbbbbbb/status", &st).await.status(), 202);
    }
    // A running session's heartbeats wait in memory for the flush.
    assert_eq!(s.app().sessions.flush_heartbeats().await.unwrap(), 1);
    let rec = s.app().store.read(move |txn| SESSIONS.get(txn, sid)).await.unwrap().unwrap();
    assert!(rec.last_report_at.is_some());
    let report =
        s.app().store.read(move |txn| gshare::sessions::reports::SESSION_REPORTS.get(txn, sid)).await.unwrap().unwrap();
    assert_eq!(report.container_state.as_deref(), Some("Running"));

    // Samples: the latest per known session; unknown ones counted.
    let samples = json!({"node": "gpu-node-0", "samples": [
        {"session": "ses-01jbbbbbbbbbbbbbbbbbbbbbbb", "at": 10.5, "cpu_cores": 1.5, "mem_bytes": 100},
        {"session": "ses-01jbbbbbbbbbbbbbbbbbbbbbbb", "at": 11.5, "cpu_cores": 2.5, "mem_bytes": 200},
        {"session": "ses-nobody", "at": 11.0, "cpu_cores": 0.0, "mem_bytes": 0}
    ]});
    let res = call(&s, &tok, "/internal/metrics/session-samples", &samples).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": 2, "unknown": 1}));
    let latest =
        s.app().store.read(move |txn| gshare::sessions::reports::SESSION_SAMPLES.get(txn, sid)).await.unwrap().unwrap();
    assert_eq!(latest.mem_bytes, 200);
    let res = call(&s, &tok, "/internal/metrics/session-samples", &json!({"node": "gpu-node-0"})).await;
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": 0}));

    // Health: a critical Xid with a cordon marks the node cordoned; unknown nodes are only logged.
    let ev = json!({"node_id": "gpu-node-0", "kind": "xid", "severity": "critical", "action": "cordon", "gpu_uuid": "GPU-1", "cluster_id": id});
    let res = call(&s, &tok, "/internal/nodes/health-events", &ev).await;
    assert_eq!(res.status(), 202);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"accepted": true}));
    let ev2 = json!({"node_id": "ghost", "kind": "temp", "severity": "warn", "action": "alert"});
    assert_eq!(call(&s, &tok, "/internal/nodes/health-events", &ev2).await.status(), 202);
    assert_eq!(operator_get(&s, &tok, "/internal/nodes/cordoned").await, json!({"hostnames": ["gpu-node-0"]}));

    // Operator audit: in the log when the 202 arrives.
    let au = json!({"actor": format!("operator:{id}"), "action": "node.cordon", "target": "gpu-node-0", "result": "ok",
        "detail": {"reason": "xid 79"}, "trace_id": "0af7651916cd43dd8448eb211c80319c", "ts": "2025-05-01T10:00:00.12Z"});
    assert_eq!(call(&s, &tok, "/internal/audit/operator", &au).await.status(), 202);
    let audit = admin_get(&s, &format!("/api/v1/audit?actor=operator:{id}")).await;
    let e = &audit["data"][0];
    assert_eq!((e["action"].as_str(), e["target"].as_str()), (Some("node.cordon"), Some("gpu-node-0")), "{audit}");
    assert_eq!(e["details"]["detail"]["reason"], "xid 79");
    s.stop().await;
}

#[tokio::test]
async fn metrics_and_openapi_cover_the_callbacks() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, "n1")).await.status(), 202);
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &json!({})).await.status(), 422);
    assert_eq!(call(&s, "x", "/internal/inventory/nodes", &json!({})).await.status(), 401);
    assert_eq!(
        call(&s, &tok, "/internal/sessions/ses-1/status", &json!({"phase":"Running","ts":"2025-05-01T10:00:00Z"}))
            .await
            .status(),
        202
    );
    // As an admin: per-cluster series carry the cluster id (anonymous callers get none).
    let res = s.client.get(s.url("/metrics")).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = res.text().await.unwrap();
    for want in [
        "gshare_callbacks_total{route=\"/internal/inventory/nodes\",status=\"202\"} 1",
        "gshare_callbacks_total{route=\"/internal/inventory/nodes\",status=\"422\"} 1",
        "gshare_callbacks_total{route=\"/internal/inventory/nodes\",status=\"401\"} 1",
        "gshare_callbacks_total{route=\"/internal/sessions/{id}/status\",status=\"202\"} 1",
        "gshare_token_verify_cache_hits_total{audience=\"gshare-internal\"}",
        "gshare_token_verify_cache_misses_total{audience=\"gshare-internal\"}",
        "# TYPE gshare_store_commit_seconds histogram",
        "gshare_store_commit_seconds_bucket{le=\"+Inf\"}",
        "gshare_store_commit_seconds_count",
        "gshare_clusters{status=\"connected\"} 1",
        "gshare_clusters{status=\"degraded\"} 0",
        "# TYPE gshare_store_batch_writes histogram",
        "gshare_store_batch_writes_bucket{le=\"+Inf\"}",
        "# TYPE gshare_store_writer_queue_depth gauge",
        "gshare_store_writer_queue_depth 0",
    ] {
        assert!(text.contains(want), "missing {want}:\n{text}");
    }
    // By cluster: the two calls whose token verified (the 422 too), not the 401.
    let want =
        format!("gshare_callbacks_by_cluster_total{{route=\"/internal/inventory/nodes\",cluster_id=\"{id}\"}} 2\n");
    assert!(text.contains(&want), "missing {want}:\n{text}");
    assert_eq!(text.matches("gshare_callbacks_by_cluster_total{route=\"/internal/inventory/nodes\"").count(), 1);
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    for (path, method) in [
        ("/internal/inventory/nodes", "post"),
        ("/internal/inventory/gpu-devices", "post"),
        ("/internal/inventory/drift", "post"),
        ("/internal/nodes/cordoned", "get"),
        ("/internal/nodes/decommissioning", "get"),
        ("/internal/nodes/decommissioned", "post"),
        ("/internal/nodes/health-events", "post"),
        ("/internal/audit/operator", "post"),
        ("/internal/volumes/sync", "post"),
        ("/internal/metrics/session-samples", "post"),
        ("/internal/sessions/{id}/status", "post"),
        ("/api/v1/clusters/{id}/nodes/{node}/cordon", "post"),
        ("/api/v1/clusters/{id}/nodes/{node}/uncordon", "post"),
        ("/api/v1/clusters/{id}/nodes/{node}/decommission", "post"),
        ("/metrics", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} not documented");
        if method == "post" && path.starts_with("/internal") && path != "/internal/nodes/decommissioned" {
            assert!(op["requestBody"].is_object(), "{path} has no request body");
            assert!(op["responses"]["422"].is_object(), "{path} has no 422");
        }
    }
    s.stop().await;
}

/// The node page is kept rendered per cluster while nothing writes nodes or cards: every kind
/// of change shows on the next request, a page never answers for another cluster, and an
/// unregistered cluster's page is gone even while rendered.
#[tokio::test]
async fn the_node_page_follows_every_change() {
    let s = TestServer::start_with(&[("GSHARE_LIVENESS_FLUSH_EVERY", "60s")]).await;
    let (ca, cb) = (fake("a").await, fake("b").await);
    let (a, b) = (register(&s, "gpu-a", &ca).await, register(&s, "gpu-b", &cb).await);
    let (ta, tb) = (operator(&s, &a), operator(&s, &b));
    let card = gpu_report(&a, "gpu-node-0", "GPU-page-0", 81920);
    assert_eq!(call(&s, &ta, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    assert_eq!(call(&s, &tb, "/internal/inventory/nodes", &node_report(&b, "b-node")).await.status(), 202);
    let page = |id: String| {
        let s = &s;
        async move { admin_get(s, &format!("/api/v1/clusters/{id}/nodes")).await }
    };
    let first = page(a.clone()).await;
    // The cards the registration seeded from the fake's HAMi annotations, and the reported one.
    let cards = first[0]["gpus"].as_array().unwrap().len();
    assert!(first[0]["gpus"].as_array().unwrap().iter().any(|g| g["uuid"] == "GPU-page-0"), "{first}");
    assert_eq!(page(a.clone()).await, first, "asked twice, nothing changed");
    // Another cluster, then back: each its own nodes.
    assert_eq!(page(b.clone()).await[0]["name"], "b-node");
    assert_eq!(page(a.clone()).await, first);

    // A new card.
    let second = gpu_report(&a, "gpu-node-0", "GPU-page-1", 40960);
    assert_eq!(call(&s, &ta, "/internal/inventory/gpu-devices", &second).await.status(), 202);
    assert_eq!(page(a.clone()).await[0]["gpus"].as_array().unwrap().len(), cards + 1);
    // Liveness of repeats, once flushed.
    let seen = page(a.clone()).await[0]["last_seen"].clone();
    s.clock.advance(Duration::from_secs(6));
    assert_eq!(call(&s, &ta, "/internal/inventory/gpu-devices", &card).await.status(), 202);
    assert_eq!(page(a.clone()).await[0]["last_seen"], seen, "not flushed yet");
    assert!(s.app().inventory.flush_liveness().await.unwrap() > 0);
    assert_ne!(page(a.clone()).await[0]["last_seen"], seen, "the flushed time shows");
    // The admin's cordon.
    let res = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{a}/nodes/gpu-node-0/cordon")))
        .bearer_auth(admin(&s))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(page(a.clone()).await[0]["cordoned"], true);
    // Silence: the sweep's offline mark.
    s.clock.advance(Duration::from_secs(200));
    let report = gshare::inventory::sweep(s.app()).await.unwrap();
    assert!(!report.nodes_offline.is_empty());
    assert_eq!(page(a.clone()).await[0]["offline"], true);
    assert_eq!(page(b.clone()).await[0]["offline"], true);
    // Unregistered while its page is rendered: 404.
    let res = s.client.delete(s.url(&format!("/api/v1/clusters/{b}"))).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 204);
    let res = s.client.get(s.url(&format!("/api/v1/clusters/{b}/nodes"))).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.headers()["content-type"], "application/json");
    s.stop().await;
}

/// A running session's Heartbeat changes only its `last_report_at` and kept report: it costs a
/// read, waits in memory and is written by the flush (every 5 s and at the stop). Any other
/// report is written at once, after the held heartbeat, so the last report kept is the last sent.
#[tokio::test]
async fn heartbeats_of_running_sessions_wait_in_memory_for_the_flush() {
    let mut s = TestServer::start_with(&[("GSHARE_LIVENESS_FLUSH_EVERY", "60s")]).await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    let (run, pend) = ("ses_01JCCCCCCCCCCCCCCCCCCCCCCC", "ses_01JDDDDDDDDDDDDDDDDDDDDDDD");
    let cid = id.clone();
    s.app()
        .store
        .write(move |txn| {
            gshare::sessions::model::put_session(txn, &session(run, &cid))?;
            let pending = SessionRecord { phase: Phase::Pending, ..SessionRecord::new(pend, &cid, "x", "u", 0) };
            gshare::sessions::model::put_session(txn, &pending)
        })
        .await
        .unwrap();
    let path = |sid: &str| format!("/internal/sessions/{}/status", sid.to_lowercase().replace('_', "-"));
    let beat = |ts: &str| json!({"phase": "Heartbeat", "restart_count": 0, "container_state": "Running", "ts": ts, "cluster_id": id});
    let stored = |sid: &'static str| {
        let s = &s;
        async move {
            let rec = s.app().store.read(move |txn| SESSIONS.get(txn, sid)).await.unwrap().unwrap();
            let rep =
                s.app().store.read(move |txn| gshare::sessions::reports::SESSION_REPORTS.get(txn, sid)).await.unwrap();
            (rec.phase, rec.last_report_at, rep.map(|r| r.ts))
        }
    };

    // Only the sessions' own tables: registration's audit entry may still be on its way to the store.
    let written =
        || s.app().store.table_generation(&[SESSIONS.name(), gshare::sessions::reports::SESSION_REPORTS.name()]);
    let g = written();
    assert_eq!(call(&s, &tok, &path(run), &beat("2025-05-01T10:00:00Z")).await.status(), 202);
    s.clock.advance(Duration::from_secs(1));
    let t1 = s.clock.now_ms();
    assert_eq!(call(&s, &tok, &path(run), &beat("2025-05-01T10:00:01Z")).await.status(), 202);
    let t1_end = s.clock.now_ms();
    assert_eq!(written(), g, "a heartbeat was written at once");
    assert_eq!(stored(run).await, (Phase::Running, None, None), "what a crash would leave");
    // The flush writes the latest, at the time it arrived.
    assert_eq!(s.app().sessions.flush_heartbeats().await.unwrap(), 1);
    assert!(written() > g, "the flush wrote the held heartbeat");
    let (phase, at, ts) = stored(run).await;
    assert_eq!((phase, ts.as_deref()), (Phase::Running, Some("2025-05-01T10:00:01Z")));
    assert!(at.is_some_and(|t| (t1..=t1_end).contains(&t)), "{at:?} not in {t1}..={t1_end}");
    assert_eq!(s.app().sessions.flush_heartbeats().await.unwrap(), 0);

    // A heartbeat of a pending session means the Running report was missed: written at once.
    assert_eq!(call(&s, &tok, &path(pend), &beat("2025-05-01T10:00:02Z")).await.status(), 202);
    assert_eq!(stored(pend).await.0, Phase::Running);

    // Held, then the session ends: the end is written after the heartbeat, in one commit, and
    // a flush afterwards replays nothing over it.
    s.clock.advance(Duration::from_secs(1));
    let t3 = s.clock.now_ms();
    assert_eq!(call(&s, &tok, &path(run), &beat("2025-05-01T10:00:03Z")).await.status(), 202);
    let t3_end = s.clock.now_ms();
    s.app().audit.flush().await;
    let g = s.app().store.generation();
    let end = json!({"phase": "Terminated", "message": "done", "ts": "2025-05-01T10:00:04Z", "cluster_id": id});
    assert_eq!(call(&s, &tok, &path(run), &end).await.status(), 202);
    assert_eq!(s.app().store.generation(), g + 1);
    let (phase, at, ts) = stored(run).await;
    assert_eq!((phase, ts.as_deref()), (Phase::Terminated, Some("2025-05-01T10:00:04Z")));
    assert!(at.is_some_and(|t| (t3..=t3_end).contains(&t)), "the held heartbeat's time: {at:?}");
    assert_eq!(s.app().sessions.flush_heartbeats().await.unwrap(), 0);
    // An ended session's heartbeat is not held (nothing to keep alive); it is recorded as sent.
    assert_eq!(call(&s, &tok, &path(run), &beat("2025-05-01T10:00:05Z")).await.status(), 202);
    assert_eq!(stored(run).await.0, Phase::Terminated);

    // Another cluster's token cannot park a heartbeat on this session.
    let other = fake("b").await;
    let b = register(&s, "gpu-b", &other).await;
    let mut foreign = beat("2025-05-01T10:00:06Z");
    foreign["cluster_id"] = json!(b);
    expect_error(call(&s, &operator(&s, &b), &path(pend), &foreign).await, 403, "forbidden").await;

    // The graceful stop writes what is held.
    s.clock.advance(Duration::from_secs(1));
    let t2 = s.clock.now_ms();
    assert_eq!(call(&s, &tok, &path(pend), &beat("2025-05-01T10:00:07Z")).await.status(), 202);
    let t2_end = s.clock.now_ms();
    let server = s.server.take().unwrap();
    let app = server.app.clone();
    server.stop().await;
    let rec = app.store.read(move |txn| SESSIONS.get(txn, pend)).await.unwrap().unwrap();
    assert!(rec.last_report_at.is_some_and(|t| (t2..=t2_end).contains(&t)), "{:?}", rec.last_report_at);
}

/// The node page names a card in error and why (the latest health event for its uuid), and says
/// since when a node is NotReady (its `last_seen` stands still meanwhile).
#[tokio::test]
async fn the_node_page_says_why_a_card_is_in_error_and_since_when_a_node_is_not_ready() {
    let s = TestServer::start().await;
    let c = fake("a").await;
    let id = register(&s, "gpu-a", &c).await;
    let tok = operator(&s, &id);
    for n in ["gpu-node-0", "gpu-node-1"] {
        assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, n)).await.status(), 202);
    }
    let node = |name: &'static str| {
        let (s, id) = (&s, id.clone());
        async move {
            let page = admin_get(s, &format!("/api/v1/clusters/{id}/nodes")).await;
            page.as_array().unwrap().iter().find(|n| n["name"] == name).unwrap().clone()
        }
    };
    assert_eq!(node("gpu-node-1").await["not_ready_since"], Value::Null);

    // Reported NotReady: since now; a repeat ten seconds later does not move it.
    s.clock.advance(Duration::from_secs(5));
    let before = gshare::clock::rfc3339_ms(s.clock.now_ms());
    let mut r = node_report(&id, "gpu-node-1");
    r["node_ready"] = false.into();
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &r).await.status(), 202);
    let after = gshare::clock::rfc3339_ms(s.clock.now_ms());
    let since = node("gpu-node-1").await["not_ready_since"].as_str().unwrap().to_string();
    // (The test clock is the real one, moved on: the report's time lies between the two readings.)
    assert!(before <= since && since <= after, "{before} <= {since} <= {after}");
    s.clock.advance(Duration::from_secs(10));
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &r).await.status(), 202);
    let n1 = node("gpu-node-1").await;
    assert_eq!((n1["ready"].clone(), n1["not_ready_since"].clone()), (json!(false), json!(since)));
    assert_eq!(node("gpu-node-0").await["not_ready_since"], Value::Null);
    // Ready again: no longer NotReady.
    assert_eq!(call(&s, &tok, "/internal/inventory/nodes", &node_report(&id, "gpu-node-1")).await.status(), 202);
    assert_eq!(node("gpu-node-1").await["not_ready_since"], Value::Null);

    // A card in error: the node page says which (its uuid and status) and why (the latest event).
    for uuid in ["GPU-ok", "GPU-bad"] {
        let mut g = gpu_report(&id, "gpu-node-0", uuid, 81920);
        if uuid == "GPU-bad" {
            g["status"] = "notready".into();
        }
        assert_eq!(call(&s, &tok, "/internal/inventory/gpu-devices", &g).await.status(), 202);
    }
    let mut sent_at = String::new();
    for (msg, at) in [("Xid 48: double-bit ECC error", 1), ("Xid 79: GPU has fallen off the bus", 2)] {
        s.clock.advance(Duration::from_secs(at));
        sent_at = gshare::clock::rfc3339_ms(s.clock.now_ms());
        let ev = json!({"node_id": "gpu-node-0", "kind": "xid", "severity": "critical", "action": "alert",
            "gpu_uuid": "GPU-bad", "message": msg, "cluster_id": id});
        assert_eq!(call(&s, &tok, "/internal/nodes/health-events", &ev).await.status(), 202);
    }
    let n0 = node("gpu-node-0").await;
    let card = |uuid: &str| n0["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == uuid).unwrap().clone();
    let bad = card("GPU-bad");
    assert_eq!(bad["status"], "notready");
    assert_eq!(bad["last_event"]["kind"], "xid");
    assert_eq!(bad["last_event"]["severity"], "critical");
    assert_eq!(bad["last_event"]["message"], "Xid 79: GPU has fallen off the bus");
    assert!(bad["last_event"]["at"].as_str().unwrap() >= sent_at.as_str(), "the latest event's time");
    assert_eq!(card("GPU-ok")["last_event"], Value::Null);
    // The admin's cordon answers the node with the same card detail.
    let res = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{id}/nodes/gpu-node-0/cordon")))
        .bearer_auth(admin(&s))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.unwrap();
    let bad = view["gpus"].as_array().unwrap().iter().find(|g| g["uuid"] == "GPU-bad").unwrap().clone();
    assert_eq!(bad["last_event"]["message"], "Xid 79: GPU has fallen off the bus");
    s.stop().await;
}
