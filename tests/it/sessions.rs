//! Offerings and sessions end to end: the GShareSession lands on a fake cluster as the operator
//! expects it (contract §3), operator reports drive the state machine (§2.1), connection tokens
//! and the forward-auth verify (§4), and every bad input and cluster failure.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gshare::inventory::gpu_booking::ALLOCATIONS;
use gshare::sessions::SESSIONS;
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{TestServer, expect_error};

const CRD: &str = include_str!("../../packaging/crds/gshare.io_gsharesessions.yaml");
const NS: &str = "gshare-sessions";
const WAIT: Duration = Duration::from_secs(10);

pub(crate) fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

pub(crate) fn operator(s: &TestServer, id: &str) -> String {
    s.app().auth.internal.mint(&format!("operator:{id}"), Duration::from_secs(3600)).unwrap()
}

pub(crate) async fn server() -> TestServer {
    TestServer::start_with(&[("GSHARE_SESSION_DOMAIN", "sessions.lab.test"), ("GSHARE_SESSION_URL_SCHEME", "http")])
        .await
}

async fn kube_client(c: &FakeCluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&c.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A fake cluster with the product's CRD and the sessions namespace, as an attached cluster has.
pub(crate) async fn cluster(name: &str) -> FakeCluster {
    let c = FakeCluster::start(ClusterSpec { name: name.into(), ..ClusterSpec::default() }).await.unwrap();
    let client = kube_client(&c).await;
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client).create(&PostParams::default(), &ns).await.unwrap();
    c
}

/// Registers a fake cluster whose operator then calls back (sessions are placed only where one
/// is connected: 409 `operator_not_connected` otherwise).
pub(crate) async fn register(s: &TestServer, name: &str, c: &FakeCluster) -> String {
    let id = register_only(s, name, c).await;
    operator_calls_back(s, &id).await;
    id
}

pub(crate) async fn register_only(s: &TestServer, name: &str, c: &FakeCluster) -> String {
    let body = json!({"name": name, "role": "primary", "kubeconfig_b64": STANDARD.encode(c.kubeconfig_yaml())});
    let v = send(s, reqwest::Method::POST, "/api/v1/clusters", Some(body), 201).await;
    v["id"].as_str().unwrap().to_string()
}

/// The cluster's operator reports a node it runs on, as its inventory controller does: its
/// heartbeat.
pub(crate) async fn operator_calls_back(s: &TestServer, cid: &str) {
    let body = json!({"node_id": "gpu-node-0", "node_ready": true, "cluster_id": cid});
    let res = s.client.post(s.url("/internal/inventory/nodes")).bearer_auth(operator(s, cid)).json(&body).send();
    let res = res.await.unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
}

async fn post(s: &TestServer, path: &str, body: Value) -> reqwest::Response {
    call(s, reqwest::Method::POST, path, Some(body)).await
}

pub(crate) async fn call(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(admin(s));
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

pub(crate) async fn send(s: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>, want: u16) -> Value {
    let res = call(s, method, path, body).await;
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

pub(crate) async fn offering(s: &TestServer, name: &str) -> String {
    let body = json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
                      "gpu_mem_mb": 20480, "gpu_cores": 30, "cpu": 4, "mem_gb": 16, "max_runtime_sec": 7200});
    send(s, reqwest::Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

fn cr(c: &FakeCluster, name: &str) -> Option<Value> {
    c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), name)
}

pub(crate) async fn report(s: &TestServer, token: &str, cr: &str, body: Value) {
    let res = s.client.post(s.url(&format!("/internal/sessions/{cr}/status"))).bearer_auth(token).json(&body).send();
    let res = res.await.unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
}

pub(crate) fn ts(s: &TestServer) -> String {
    gshare::clock::rfc3339_ms(s.clock.now_ms())
}

pub(crate) async fn session(s: &TestServer, id: &str) -> Value {
    send(s, reqwest::Method::GET, &format!("/api/v1/sessions/{id}"), None, 200).await
}

async fn open_allocations(s: &TestServer, sid: &str) -> usize {
    let sid = sid.to_string();
    s.app()
        .store
        .read(move |txn| {
            Ok(ALLOCATIONS.list(txn)?.into_iter().filter(|(_, a)| a.session_id == sid && a.is_open()).count())
        })
        .await
        .unwrap()
}

async fn card_record(s: &TestServer, key: &str) -> gshare::inventory::model::GpuRecord {
    let key = key.to_string();
    s.app().store.read(move |txn| gshare::inventory::model::GPUS.get(txn, &key)).await.unwrap().unwrap()
}

async fn running_sessions(s: &TestServer, cluster: &str) -> u64 {
    send(s, reqwest::Method::GET, &format!("/api/v1/clusters/{cluster}"), None, 200).await["running_sessions"]
        .as_u64()
        .unwrap_or_else(|| panic!("running_sessions missing"))
}

pub(crate) async fn verify(s: &TestServer, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = s.client.get(s.url("/internal/connect/verify"));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

/// A session is placed only on a cluster whose operator is connected (it called
/// back within two heartbeat intervals); otherwise 409 `operator_not_connected` naming the state,
/// and nothing is stored or applied.
#[tokio::test]
async fn a_session_needs_a_connected_operator() {
    async fn sessions_now(s: &TestServer) -> usize {
        s.app().store.read(|txn| SESSIONS.list(txn)).await.unwrap().len()
    }
    let s = server().await;
    let c = cluster("gpu-op").await;
    let cid = register_only(&s, "gpu-op", &c).await;
    let off = offering(&s, "slice").await;
    for body in [json!({"offering_id": off, "cluster_id": cid}), json!({"offering_id": off})] {
        let res = call(&s, reqwest::Method::POST, "/api/v1/sessions", Some(body.clone())).await;
        let e = expect_error(res, 409, "operator_not_connected").await;
        assert_eq!(e["error"]["details"], json!({"cluster_id": cid, "operator_state": "not_attached"}), "{body}");
        let m = e["error"]["message"].as_str().unwrap();
        assert!(m.contains("gpu-op") && m.contains("not attached") && m.contains("attach"), "{m}");
    }
    assert_eq!(sessions_now(&s).await, 0, "a refused session was stored");
    assert!(c.store().list("gshare.io", "v1", "gsharesessions", Some(NS)).is_empty(), "a CR was applied");
    // The operator calls back: placed.
    operator_calls_back(&s, &cid).await;
    send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid})), 201)
        .await;
    // Silent for longer than two heartbeat intervals: refused again, with how long.
    s.clock.advance(Duration::from_secs(121));
    let res = call(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off}))).await;
    let e = expect_error(res, 409, "operator_not_connected").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("last callback was 121 s ago"), "{e}");
    assert_eq!(sessions_now(&s).await, 1);
    s.stop().await;
}

#[tokio::test]
async fn a_session_lives_and_ends_on_its_cluster() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let off = offering(&s, "A100 slice").await;
    let op = operator(&s, &cid);

    // Create (with an Idempotency-Key: a replay answers the same session, applies nothing new).
    let key = "7d0c6c9e-1a0e-4b1c-9a53-0c1f1f1f1f1f";
    let create = || {
        s.client
            .post(s.url("/api/v1/sessions"))
            .bearer_auth(admin(&s))
            .header("Idempotency-Key", key)
            .json(&json!({"offering_id": off, "name": "thesis", "owner": "alice"}))
            .send()
    };
    let first = create().await.unwrap();
    assert_eq!(first.status(), 201);
    let v: Value = first.json().await.unwrap();
    let again: Value = create().await.unwrap().json().await.unwrap();
    assert_eq!(again["id"], v["id"]);
    let sid = v["id"].as_str().unwrap().to_string();
    let name = v["cr_name"].as_str().unwrap().to_string();
    assert_eq!(name, sid.to_lowercase().replace('_', "-"));
    assert_eq!(v["phase"], "pending");
    assert_eq!(v["cluster_id"], cid.as_str());
    assert_eq!(v["owner"], "alice");
    assert_eq!(v["actions"], json!(["pause", "delete"]));

    // The CR is what the operator reads (contract §3).
    let o = cr(&c, &name).expect("the GShareSession exists");
    assert_eq!(o["metadata"]["labels"]["gshare.io/session"], name.as_str());
    let a = &o["metadata"]["annotations"];
    assert_eq!(a["gshare.io/idle-timeout-sec"], "1800");
    assert_eq!(a["gshare.io/max-runtime-sec"], "7200");
    assert!(a["gshare.io/traceparent"].as_str().unwrap().starts_with("00-"));
    let spec = &o["spec"];
    assert_eq!(
        (&spec["clusterId"], &spec["offeringId"], &spec["owner"], &spec["resourceClass"], &spec["mode"]),
        (&json!(cid), &json!(off), &json!("alice"), &json!("gpu"), &json!("fractional"))
    );
    assert_eq!(
        (spec["gpuMemMb"].as_i64(), spec["gpuCores"].as_i64(), spec["cpu"].as_i64()),
        (Some(20480), Some(30), Some(4))
    );
    assert_eq!(spec["image"], "ghcr.io/lab/jupyter:4");
    assert_eq!(spec["paused"], false);
    let list = send(&s, reqwest::Method::GET, "/api/v1/sessions", None, 200).await;
    assert_eq!(list["pagination"]["total"], 1, "the replay made no second session");

    // The operator starts it: Preparing, then Running with a card.
    report(&s, &op, &name, json!({"phase": "Preparing", "ts": ts(&s), "cluster_id": cid})).await;
    assert_eq!(session(&s, &sid).await["phase"], "preparing");
    // A card the registration seeded from the cluster's HAMi annotations.
    let gpu = &gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), "gpu-node-0", 1);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": gpu, "node_name": "gpu-node-0",
                                   "pod_ref": format!("{NS}/ses-{name}"), "restart_count": 0, "container_state": "Running", "generation": 1})).await;
    let v = session(&s, &sid).await;
    assert_eq!(
        (&v["phase"], &v["bound_gpu_uuid"], &v["node_name"]),
        (&json!("running"), &json!(gpu), &json!("gpu-node-0"))
    );
    assert!(v["started_at"].is_string() && v["last_report_at"].is_string());
    assert_eq!(v["actions"], json!(["pause", "connect", "delete"]));
    assert_eq!(open_allocations(&s, &sid).await, 1);
    assert_eq!(running_sessions(&s, &cid).await, 1);
    // The slice is booked on the card (the control plane owns the used_* counts).
    let card = |nodes: Value| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["gpus"].as_array().unwrap().clone())
            .find(|g| g["uuid"] == gpu.as_str())
            .unwrap()
    };
    let nodes_path = format!("/api/v1/clusters/{cid}/nodes");
    let g = card(send(&s, reqwest::Method::GET, &nodes_path, None, 200).await);
    assert_eq!((g["used_mem_mb"].as_u64(), g["used_cores"].as_u64()), (Some(20480), Some(30)), "{g}");
    let metrics = s.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("gshare_sessions{phase=\"running\"} 1\n"), "{metrics}");
    assert!(metrics.contains("gshare_sessions{phase=\"pending\"} 0\n"), "{metrics}");
    assert!(metrics.contains("gshare_gpu_allocations_open 1\n"), "{metrics}");

    // The cluster cannot be unregistered under it.
    let body = expect_error(
        call(&s, reqwest::Method::DELETE, &format!("/api/v1/clusters/{cid}"), None).await,
        409,
        "cluster_in_use",
    )
    .await;
    assert_eq!(body["error"]["details"]["sessions"], json!([sid]));
    assert_eq!(body["error"]["details"]["allocations"].as_array().unwrap().len(), 1);
    // The allocation as a person reads it: whose it is and on which card.
    let alloc = &body["error"]["details"]["allocation_list"][0];
    assert_eq!((&alloc["session_id"], &alloc["session_name"]), (&json!(sid), &json!("thesis")), "{body}");
    assert_eq!((&alloc["gpu_uuid"], &alloc["gpu_mem_mb"]), (&json!(gpu), &json!(20480)), "{body}");

    // Connect: a one-time URL on the session domain; verify redeems it once and sets the cookie.
    let conn =
        send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), Some(json!({"kind": "code"})), 200)
            .await;
    let url = conn["url"].as_str().unwrap();
    let token = conn["token"].as_str().unwrap();
    assert_eq!(url, format!("http://sessions.lab.test/proxy/{name}/code/?gshare_cnx={token}"));
    assert!(token.starts_with("cnx_") && token.len() > 60, "{token}");
    let uri = format!("/proxy/{name}/code/?gshare_cnx={token}");
    let ok = verify(&s, &[("X-Original-URI", &uri)]).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-gshare-session"], sid.as_str());
    assert_eq!(ok.headers()["x-gshare-user"], "alice");
    let set_cookie = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set_cookie.starts_with("gshare_session=")
            && set_cookie.contains(&format!("; Path=/proxy/{name}/;"))
            && set_cookie.contains("HttpOnly")
            && set_cookie.contains("SameSite=Lax")
            && set_cookie.contains("Max-Age=3600"),
        "{set_cookie}"
    );
    assert!(!set_cookie.contains("Secure"), "http session URLs: no Secure flag");
    // Until its cookie comes back the same client may redeem it again (an ingress drops the cookie
    // from an error answer); once the cookie is seen, the token is spent.
    assert_eq!(verify(&s, &[("X-Original-URI", &uri)]).await.status(), 200);
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let by_cookie = verify(&s, &[("Cookie", &cookie), ("X-Original-URI", &format!("/proxy/{name}/lab"))]).await;
    assert_eq!(by_cookie.status(), 200);
    assert_eq!(by_cookie.headers()["x-gshare-session"], sid.as_str());
    assert!(by_cookie.headers().get("x-gshare-user").is_none(), "only a redeemed token names the user");
    let body = expect_error(verify(&s, &[("X-Original-URI", &uri)]).await, 401, "unauthenticated").await;
    assert_eq!(body["error"]["details"]["reason"], "token_unknown_or_used");
    // The same cookie does not open another session's path.
    let other =
        verify(&s, &[("Cookie", &cookie), ("X-Original-URI", "/proxy/ses-01jzzzzzzzzzzzzzzzzzzzzzzz/lab")]).await;
    assert_eq!(expect_error(other, 401, "unauthenticated").await["error"]["details"]["reason"], "other_session");
    // The token also works from the header, and from ?token= (each once), for its session's URI.
    for how in ["header", "query"] {
        let t = send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), None, 200).await;
        let t = t["token"].as_str().unwrap().to_string();
        let lab = format!("/proxy/{name}/lab");
        let res = if how == "header" {
            verify(&s, &[("X-Gshare-Cnx", &t), ("X-Original-URI", &lab)]).await
        } else {
            let req = s.client.get(s.url(&format!("/internal/connect/verify?token={t}")));
            req.header("X-Original-URI", &lab).send().await.unwrap()
        };
        assert_eq!(res.status(), 200, "{how}");
    }

    // Pause: spec.paused by JSON Patch; the GPU goes back; an older Paused report is harmless.
    let v = send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/pause"), None, 200).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("paused"), &json!("user_stopped")));
    assert_eq!(v["actions"], json!(["resume", "delete"]));
    let o = cr(&c, &name).unwrap();
    assert_eq!((&o["spec"]["paused"], &o["spec"]["pauseMode"]), (&json!(true), &json!("cold")));
    let paused_generation = o["metadata"]["generation"].as_i64().unwrap();
    assert!(paused_generation >= 2);
    assert_eq!(open_allocations(&s, &sid).await, 0);
    assert_eq!(running_sessions(&s, &cid).await, 0);
    let g = card(send(&s, reqwest::Method::GET, &nodes_path, None, 200).await);
    assert_eq!((g["used_mem_mb"].as_u64(), g["used_cores"].as_u64()), (Some(0), Some(0)), "given back on pause: {g}");
    // A paused session's cookie no longer opens it.
    let paused = verify(&s, &[("Cookie", &cookie), ("X-Original-URI", &format!("/proxy/{name}/lab"))]).await;
    assert_eq!(paused.status(), 401);
    expect_error(
        call(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), None).await,
        409,
        "session_not_running",
    )
    .await;
    report(&s, &op, &name, json!({"phase": "Paused", "ts": ts(&s), "generation": paused_generation})).await;
    assert_eq!(session(&s, &sid).await["reason"], "user_stopped");

    // Resume: spec.paused=false with the run clock and annotations re-stamped.
    // As upstream, the session is running from the resume on, its slice reserved again.
    let v = send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    assert_eq!(v["phase"], "running");
    assert_eq!(open_allocations(&s, &sid).await, 1);
    assert_eq!(running_sessions(&s, &cid).await, 1);
    let o = cr(&c, &name).unwrap();
    assert_eq!(o["spec"]["paused"], false);
    assert_eq!(o["spec"]["excludedNodes"], json!([]));
    assert_eq!(o["metadata"]["annotations"]["gshare.io/pause-reason"], "");
    let started = o["metadata"]["annotations"]["gshare.io/run-started-at"].as_str().unwrap();
    assert!(started.len() == 20 && started.ends_with('Z'), "{started}");
    let resumed_generation = o["metadata"]["generation"].as_i64().unwrap();
    assert!(resumed_generation > paused_generation);
    // Reports from before the resume are stale: a late Paused and a late Terminated change nothing.
    report(
        &s,
        &op,
        &name,
        json!({"phase": "Paused", "ts": ts(&s), "message": "idle-reaped", "generation": paused_generation}),
    )
    .await;
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s), "generation": paused_generation})).await;
    assert_eq!(session(&s, &sid).await["phase"], "running");
    // A reason-less Paused within a minute of the resume is stale too (no generation sent).
    report(&s, &op, &name, json!({"phase": "Paused", "ts": ts(&s)})).await;
    assert_eq!(session(&s, &sid).await["phase"], "running");
    // The new pod's heartbeat keeps it running on its one allocation.
    report(
        &s,
        &op,
        &name,
        json!({"phase": "Heartbeat", "ts": ts(&s), "bound_gpu_uuid": gpu, "generation": resumed_generation}),
    )
    .await;
    assert_eq!(session(&s, &sid).await["phase"], "running");
    assert_eq!(open_allocations(&s, &sid).await, 1);

    // Delete: no finalizer holds the CR on this cluster (no operator), so it ends at once.
    let v = send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    assert_eq!((&v["phase"], &v["reason"], &v["live"]), (&json!("terminated"), &json!("deleted"), &json!(false)));
    assert!(cr(&c, &name).is_none());
    assert_eq!(open_allocations(&s, &sid).await, 0);
    assert_eq!(running_sessions(&s, &cid).await, 0);
    expect_error(
        call(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None).await,
        409,
        "session_conflict",
    )
    .await;
    // Ended: the list indexes moved it to terminated, and every filter finds it where it is.
    assert_list_indexes_exact(&s).await;
    let listed = |q: String| {
        let path = format!("/api/v1/sessions?{q}");
        let s = &s;
        async move { send(s, reqwest::Method::GET, &path, None, 200).await }
    };
    for q in ["owner=alice&phase=terminated".to_string(), format!("cluster_id={cid}&live=false")] {
        let v = listed(q.clone()).await;
        assert_eq!((&v["data"][0]["id"], &v["pagination"]["total"]), (&json!(sid), &json!(1)), "{q}");
    }
    for q in ["owner=alice&live=true", "phase=running"] {
        assert_eq!(listed(q.to_string()).await["pagination"]["total"], 0, "{q}");
    }
    // Now the cluster can go; the session stays in history.
    assert_eq!(call(&s, reqwest::Method::DELETE, &format!("/api/v1/clusters/{cid}"), None).await.status(), 204);
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["cluster_name"]), (&json!("terminated"), &json!("gpu-a")));

    // Every change was audited.
    let log = send(&s, reqwest::Method::GET, "/api/v1/audit?action=session.*&size=50", None, 200).await;
    let actions: Vec<&str> = log["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for a in ["session.create", "session.connect", "session.pause", "session.resume", "session.delete"] {
        assert!(actions.contains(&a), "{a} in {actions:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_operators_reports_drive_the_state_machine() {
    let s = server().await;
    let c = cluster("gpu-b").await;
    let cid = register(&s, "gpu-b", &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let new = || async {
        let v = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
        (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string())
    };

    // Error: the session ends, its allocation is released, and its CR is deleted (after the answer).
    let (sid, name) = new().await;
    assert_eq!(session(&s, &sid).await["owner"], "admin", "owner defaults to the signed-in admin");
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": "GPU-1"})).await;
    report(
        &s,
        &op,
        &name,
        json!({"phase": "Error", "ts": ts(&s), "message": "Evicted: ephemeral local storage usage exceeds the limit"}),
    )
    .await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("error"), &json!("disk_exceeded")));
    assert_eq!(open_allocations(&s, &sid).await, 0);
    let n = name.clone();
    assert!(
        c.store().wait_until(WAIT, move |st| st.get("gshare.io", "v1", "gsharesessions", Some(NS), &n).is_none()).await
    );
    // A final session ignores later reports.
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s)})).await;
    assert_eq!(session(&s, &sid).await["phase"], "error");

    // CrashLoopBackOff with 3 restarts ends it as crash_loop.
    let (sid, name) = new().await;
    report(
        &s,
        &op,
        &name,
        json!({"phase": "Running", "ts": ts(&s), "restart_count": 3, "container_state": "Waiting:CrashLoopBackOff"}),
    )
    .await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("error"), &json!("crash_loop")));

    // The reaper: IdleWarning, then Terminating (idle-reaped), then the finalizer's Terminated.
    let (sid, name) = new().await;
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": "GPU-2"})).await;
    report(&s, &op, &name, json!({"phase": "IdleWarning", "ts": ts(&s), "message": "300"})).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["message"]), (&json!("running"), &json!("idle: reaped in 300 s unless used")));
    report(&s, &op, &name, json!({"phase": "Terminating", "ts": ts(&s), "message": "idle-reaped"})).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("terminating"), &json!("idle")));
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"], &v["live"]), (&json!("terminated"), &json!("idle"), &json!(false)));
    assert!(v["ended_at"].is_string());

    // The reaper pauses a running session (max runtime): paused, GPU released.
    let (sid, name) = new().await;
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": "GPU-3"})).await;
    report(&s, &op, &name, json!({"phase": "Paused", "ts": ts(&s), "message": "max-runtime-exceeded"})).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("paused"), &json!("max_runtime")));
    assert_eq!(v["actions"], json!(["resume", "delete"]));
    assert_eq!(open_allocations(&s, &sid).await, 0);
    // A yielded pause keeps the card.
    let (sid, name) = new().await;
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": "GPU-4"})).await;
    report(&s, &op, &name, json!({"phase": "Paused", "ts": ts(&s), "yield_state": "Yielded", "message": "yield"}))
        .await;
    assert_eq!(open_allocations(&s, &sid).await, 1);

    // With a finalizer (as the operator sets), delete leaves it terminating until Terminated.
    let (sid, name) = new().await;
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(kube_client(&c).await, NS, &gshare::sessions::cr::api_resource());
    let fin = json!({"metadata": {"finalizers": ["gshare.io/session-finalizer"]}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&fin)).await.unwrap();
    let v = send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    assert_eq!(v["phase"], "terminating");
    assert!(cr(&c, &name).unwrap()["metadata"]["deletionTimestamp"].is_string());
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    assert_eq!(session(&s, &sid).await["phase"], "terminated");

    // An exclusive session books the whole card; its end gives it back.
    let body = json!({"name": "whole card", "resource_class": "gpu", "mode": "exclusive", "image": "ghcr.io/lab/x:1", "gpu_mem_mb": 1});
    let excl = send(&s, reqwest::Method::POST, "/api/v1/offerings", Some(body), 201).await;
    assert_eq!(excl["gpu_cores"], 100, "exclusive defaults to all cores");
    let v = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": excl["id"]})), 201).await;
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    let uuid = gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), "gpu-node-1", 0);
    report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": uuid})).await;
    let key = format!("{cid}/{uuid}");
    let g = card_record(&s, &key).await;
    assert_eq!((g.used_mem_mb, g.used_cores), (g.total_mem_mb, 100));
    report(&s, &op, &name, json!({"phase": "Terminated", "ts": ts(&s)})).await;
    assert_eq!(session(&s, &sid).await["phase"], "terminated");
    let g = card_record(&s, &key).await;
    assert_eq!((g.used_mem_mb, g.used_cores), (0, 0));

    // Unknown sessions and phases are accepted no-ops; the counters stay exact throughout.
    report(&s, &op, "ses-01jzzzzzzzzzzzzzzzzzzzzzzz", json!({"phase": "Running", "ts": ts(&s)})).await;
    let (sid, name) = new().await;
    report(&s, &op, &name, json!({"phase": "Pending", "ts": ts(&s)})).await;
    report(&s, &op, &name, json!({"phase": "Hibernating", "ts": ts(&s)})).await;
    assert_eq!(session(&s, &sid).await["phase"], "pending");
    let key = cid.clone();
    let (_, _, _, running) = s.app().store.read(move |txn| gshare::sessions::model::recount(txn, &key)).await.unwrap();
    assert_eq!(running_sessions(&s, &cid).await, running);

    // Lists are newest first, the fast paths agree with the filtered one, and the live index is
    // exactly the live sessions.
    let all = send(&s, reqwest::Method::GET, "/api/v1/sessions?size=100", None, 200).await;
    let ids: Vec<String> =
        all["data"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    assert_eq!(ids.len(), 8, "eight sessions were made above");
    assert_eq!(all["pagination"]["total"].as_u64().unwrap() as usize, ids.len());
    let second = send(&s, reqwest::Method::GET, "/api/v1/sessions?size=2&page=2", None, 200).await;
    let second: Vec<&str> = second["data"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(second, ids[2..4].iter().map(String::as_str).collect::<Vec<_>>());
    let live = send(&s, reqwest::Method::GET, "/api/v1/sessions?live=true&size=100", None, 200).await;
    let live_ids: Vec<String> =
        live["data"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect();
    let by_filter: Vec<String> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["live"] == true)
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!live_ids.is_empty());
    assert_eq!(live_ids, by_filter);
    let indexed: Vec<String> = s
        .app()
        .store
        .read(|txn| gshare::sessions::model::LIVE_SESSIONS.list(txn))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .rev()
        .collect();
    assert_eq!(indexed, live_ids, "the live index holds exactly the live sessions");
    // After errors, pauses, resumes, ends and stale reports, so do the list indexes.
    assert_list_indexes_exact(&s).await;
    assert_lists_agree(
        &s,
        &["phase=error", "phase=terminated", "phase=pending", "owner=admin&live=false", &format!("cluster_id={cid}")],
        3,
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn bad_input_and_cluster_failures_lose_nothing() {
    let s = server().await;

    // Offerings: every bad field named; a duplicate name; unknown fields.
    let cases: Vec<(Value, &str)> = vec![
        (json!({"name": "x", "resource_class": "gpu", "image": "i", "gpu_cores": 10}), "gpu_mem_mb"),
        (json!({"name": "x", "resource_class": "gpu", "image": "i", "gpu_mem_mb": 1, "gpu_cores": 101}), "gpu_cores"),
        (json!({"name": "x", "resource_class": "cpu", "image": "i", "gpu_mem_mb": 1}), "resource_class"),
        (json!({"name": "x", "resource_class": "tpu", "image": "i"}), "resource_class"),
        (json!({"name": "", "resource_class": "cpu", "image": "i"}), "name"),
        (json!({"name": "x", "resource_class": "cpu", "image": "has space"}), "image"),
        (json!({"name": "x", "resource_class": "cpu", "image": "i", "mem_gb": 0}), "mem_gb"),
        (json!({"name": "x", "resource_class": "cpu", "image": "i", "idle_timeout_sec": -5}), "idle_timeout_sec"),
        (json!({"name": "x", "resource_class": "cpu", "image": "i", "price": 3}), "price"),
        (json!({"name": "x", "resource_class": "cpu"}), "image"),
    ];
    for (body, field) in cases {
        let e = expect_error(post(&s, "/api/v1/offerings", body.clone()).await, 422, "validation_failed").await;
        assert!(e["error"]["details"].to_string().contains(field), "{body} -> {e}");
    }
    let res = s.client.post(s.url("/api/v1/offerings")).bearer_auth(admin(&s)).body("{not json").send().await.unwrap();
    assert!(res.status() == 400 || res.status() == 422, "{}", res.status());
    let off = offering(&s, "slice").await;
    expect_error(
        post(&s, "/api/v1/offerings", json!({"name": "SLICE", "resource_class": "cpu", "image": "i"})).await,
        409,
        "conflict",
    )
    .await;
    expect_error(call(&s, reqwest::Method::GET, "/api/v1/offerings/off_nope", None).await, 404, "not_found").await;
    expect_error(
        call(&s, reqwest::Method::GET, "/api/v1/offerings?status=maybe", None).await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        call(&s, reqwest::Method::PATCH, &format!("/api/v1/offerings/{off}"), Some(json!({"gpu_cores": -1}))).await,
        422,
        "validation_failed",
    )
    .await;
    let unchanged = send(&s, reqwest::Method::GET, &format!("/api/v1/offerings/{off}"), None, 200).await;
    assert_eq!(unchanged["gpu_cores"], 30, "a refused patch changes nothing");

    // Sessions: no cluster yet.
    expect_error(post(&s, "/api/v1/sessions", json!({"offering_id": off})).await, 409, "no_cluster").await;
    let c = cluster("gpu-c").await;
    let cid = register(&s, "gpu-c", &c).await;
    expect_error(post(&s, "/api/v1/sessions", json!({"offering_id": "off_nope"})).await, 404, "not_found").await;
    expect_error(
        post(&s, "/api/v1/sessions", json!({"offering_id": off, "cluster_id": "clu_01JZZZZZZZZZZZZZZZZZZZZZZZ"})).await,
        404,
        "not_found",
    )
    .await;
    let e = expect_error(
        post(&s, "/api/v1/sessions", json!({"offering_id": off, "owner": "al ice"})).await,
        422,
        "validation_failed",
    )
    .await;
    assert!(e["error"]["details"].to_string().contains("owner"));
    expect_error(post(&s, "/api/v1/sessions", json!({"offering_id": off, "gpus": 8})).await, 422, "validation_failed")
        .await;
    expect_error(
        post(&s, "/api/v1/sessions", json!({"offering_id": off, "image": "a b"})).await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(post(&s, "/api/v1/sessions", json!({})).await, 422, "validation_failed").await;
    for q in ["phase=sleeping", "live=maybe", "size=0", "size=101", "page=0"] {
        expect_error(
            call(&s, reqwest::Method::GET, &format!("/api/v1/sessions?{q}"), None).await,
            422,
            "validation_failed",
        )
        .await;
    }
    assert_eq!(
        send(&s, reqwest::Method::GET, "/api/v1/sessions", None, 200).await["pagination"]["total"],
        0,
        "nothing was recorded"
    );

    // Inactive offerings take no new sessions.
    let other = offering(&s, "retired").await;
    send(&s, reqwest::Method::PATCH, &format!("/api/v1/offerings/{other}"), Some(json!({"status": "inactive"})), 200)
        .await;
    expect_error(post(&s, "/api/v1/sessions", json!({"offering_id": other})).await, 409, "offering_inactive").await;
    let active = send(&s, reqwest::Method::GET, "/api/v1/offerings?status=active", None, 200).await;
    assert_eq!(active["data"].as_array().unwrap().len(), 1);
    assert_eq!(call(&s, reqwest::Method::DELETE, &format!("/api/v1/offerings/{other}"), None).await.status(), 204);

    // A cluster without the CRD refuses the CR: the session is recorded as an error, not lost.
    let bare = FakeCluster::start(ClusterSpec { name: "bare".into(), ..ClusterSpec::default() }).await.unwrap();
    let bare_id = register(&s, "bare", &bare).await;
    let e = expect_error(
        post(&s, "/api/v1/sessions", json!({"offering_id": off, "cluster_id": bare_id})).await,
        502,
        "cluster_apply_failed",
    )
    .await;
    let failed = e["error"]["details"]["session_id"].as_str().unwrap().to_string();
    assert!(e["error"]["details"]["cause"].as_str().unwrap().contains("404"), "{e}");
    let v = session(&s, &failed).await;
    assert_eq!((&v["phase"], &v["reason"], &v["live"]), (&json!("error"), &json!("apply_failed"), &json!(false)));

    // An unreachable cluster: pause and delete answer 502 and change nothing; force deletes.
    let v =
        send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid})), 201)
            .await;
    let sid = v["id"].as_str().unwrap().to_string();
    let name = v["cr_name"].as_str().unwrap().to_string();
    expect_error(post(&s, &format!("/api/v1/sessions/{sid}/resume"), json!({})).await, 409, "session_conflict").await;
    expect_error(
        post(&s, &format!("/api/v1/sessions/{sid}/connect"), json!({"kind": "ssh"})).await,
        422,
        "validation_failed",
    )
    .await;
    expect_error(
        post(&s, &format!("/api/v1/sessions/{sid}/connect"), json!({"kind": "lab"})).await,
        409,
        "session_not_running",
    )
    .await;
    c.knobs().set_unreachable(true);
    let e =
        expect_error(post(&s, &format!("/api/v1/sessions/{sid}/pause"), json!({})).await, 502, "cluster_unreachable")
            .await;
    assert!(e["error"]["details"]["hint"].as_str().unwrap().contains("force"));
    expect_error(
        call(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None).await,
        502,
        "cluster_unreachable",
    )
    .await;
    assert_eq!(session(&s, &sid).await["phase"], "pending");
    expect_error(
        call(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}?force=yes"), None).await,
        422,
        "validation_failed",
    )
    .await;
    let v = send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}?force=true"), None, 200).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("terminated"), &json!("deleted")));
    c.knobs().set_unreachable(false);
    assert!(cr(&c, &name).is_some(), "force leaves the cluster alone");
    expect_error(call(&s, reqwest::Method::GET, "/api/v1/sessions/ses_nope", None).await, 404, "not_found").await;
    expect_error(post(&s, "/api/v1/sessions/ses_nope/pause", json!({})).await, 404, "not_found").await;

    // An offering sessions were created from cannot be deleted (history names it).
    let e = expect_error(
        call(&s, reqwest::Method::DELETE, &format!("/api/v1/offerings/{off}"), None).await,
        409,
        "offering_in_use",
    )
    .await;
    assert_eq!(e["error"]["details"]["sessions"], 2);

    // No admin token: 401; the operator's token is not an admin's: 403.
    let res = s.client.get(s.url("/api/v1/sessions")).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    let res = s.client.get(s.url("/api/v1/offerings")).bearer_auth(operator(&s, &cid)).send().await.unwrap();
    expect_error(res, 403, "forbidden").await;

    // The store is consistent: every allocation belongs to a session; nothing is half-made.
    let (sessions, allocations) =
        s.app().store.read(|txn| Ok((SESSIONS.list(txn)?, ALLOCATIONS.list(txn)?))).await.unwrap();
    assert_eq!(sessions.len(), 2);
    assert!(allocations.iter().all(|(_, a)| sessions.iter().any(|(id, _)| id == &a.session_id)));
    s.stop().await;
}

#[tokio::test]
async fn verify_refuses_what_it_should() {
    let s = server().await;
    let c = cluster("gpu-d").await;
    let cid = register(&s, "gpu-d", &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let mut running = Vec::new();
    for _ in 0..2 {
        let v = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
        let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
        report(&s, &op, &name, json!({"phase": "Running", "ts": ts(&s)})).await;
        running.push((sid, name));
    }
    let connect = |sid: String| {
        let s = &s;
        async move {
            let v = send(
                s,
                reqwest::Method::POST,
                &format!("/api/v1/sessions/{sid}/connect"),
                Some(json!({"kind": "lab"})),
                200,
            )
            .await;
            v["token"].as_str().unwrap().to_string()
        }
    };
    let reason = |res: reqwest::Response| async move {
        expect_error(res, 401, "unauthenticated").await["error"]["details"]["reason"].as_str().unwrap().to_string()
    };

    assert_eq!(reason(verify(&s, &[]).await).await, "uri_missing");
    let lab0 = format!("/proxy/{}/lab", running[0].1);
    let lab1 = format!("/proxy/{}/lab", running[1].1);
    assert_eq!(reason(verify(&s, &[("X-Original-URI", &lab0)]).await).await, "no_credentials");
    // Unknown or malformed tokens cost no durable write (this endpoint has no other authentication).
    s.app().audit.flush().await;
    let before = s.app().store.generation();
    for junk in ["garbage", "cnx_01J00000000000000000000000.00", &format!("cnx_{}", "a".repeat(500))] {
        for _ in 0..20 {
            assert_eq!(
                reason(verify(&s, &[("X-Gshare-Cnx", junk), ("X-Original-URI", &lab0)]).await).await,
                "token_unknown_or_used"
            );
        }
    }
    assert_eq!(s.app().store.generation(), before, "unknown tokens committed writes");
    assert_eq!(
        reason(verify(&s, &[("X-Gshare-Cnx", "cnx_01J00000000000000000000000.00"), ("X-Original-URI", &lab0)]).await)
            .await,
        "token_unknown_or_used"
    );
    // A token for session A does not open session B's path, and trying spends nothing (issue
    // 30 item 12: it is checked against the routed session first) and writes nothing.
    let t = connect(running[0].0.clone()).await;
    let wrong = format!("/proxy/{}/lab?gshare_cnx={t}", running[1].1);
    s.app().audit.flush().await;
    let before = s.app().store.generation();
    assert_eq!(reason(verify(&s, &[("X-Original-URI", &wrong)]).await).await, "other_session");
    assert_eq!(s.app().store.generation(), before, "a misdirected token committed a write");
    assert_eq!(verify(&s, &[("X-Gshare-Cnx", &t), ("X-Original-URI", &lab0)]).await.status(), 200);
    // X-Original-URL (a full URL) is read like X-Original-URI.
    let t = connect(running[0].0.clone()).await;
    let url = format!("http://sessions.lab.test/proxy/{}/lab?gshare_cnx={t}", running[0].1);
    assert_eq!(verify(&s, &[("X-Original-URL", &url)]).await.status(), 200);
    // Tokens expire after 300 s.
    let t = connect(running[0].0.clone()).await;
    s.clock.advance(Duration::from_secs(301));
    assert_eq!(reason(verify(&s, &[("X-Gshare-Cnx", &t), ("X-Original-URI", &lab0)]).await).await, "token_expired");
    // A session that stopped running: its token is refused.
    let t = connect(running[1].0.clone()).await;
    send(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{}/pause", running[1].0), None, 200).await;
    assert_eq!(
        reason(verify(&s, &[("X-Gshare-Cnx", &t), ("X-Original-URI", &lab1)]).await).await,
        "session_not_running"
    );
    // Forged cookies: another key, alg=none, garbage.
    let forged_payload = STANDARD.encode(format!(r#"{{"sid":"{}","owner":"x","exp":9999999999}}"#, running[0].0));
    for cookie in [
        format!("gshare_session=eyJhbGciOiJub25lIn0.{}.", forged_payload.trim_end_matches('=')),
        "gshare_session=garbage".to_string(),
        format!("gshare_session={}", s.app().auth.api.mint("admin:admin", Duration::from_secs(60)).unwrap()),
    ] {
        assert_eq!(
            reason(verify(&s, &[("Cookie", &cookie), ("X-Original-URI", &lab0)]).await).await,
            "no_credentials",
            "{cookie}"
        );
    }
    // A session page without a session domain: 409 no_session_domain.
    let s2 = TestServer::start().await;
    let c2 = cluster("gpu-e").await;
    let cid2 = register(&s2, "gpu-e", &c2).await;
    let off2 = offering(&s2, "slice").await;
    let v = send(&s2, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off2})), 201).await;
    report(&s2, &operator(&s2, &cid2), v["cr_name"].as_str().unwrap(), json!({"phase": "Running", "ts": ts(&s2)}))
        .await;
    let sid = v["id"].as_str().unwrap();
    expect_error(
        call(&s2, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), None).await,
        409,
        "no_session_domain",
    )
    .await;
    // Setting the cluster's domain fixes it, with https by default.
    send(
        &s2,
        reqwest::Method::PATCH,
        &format!("/api/v1/clusters/{cid2}"),
        Some(json!({"session_domain": "gpu-e.lab.test"})),
        200,
    )
    .await;
    let conn = send(&s2, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/connect"), None, 200).await;
    assert!(conn["url"].as_str().unwrap().starts_with("https://gpu-e.lab.test/proxy/"), "{conn}");
    s2.stop().await;
    s.stop().await;
}

#[tokio::test]
async fn a_session_recorded_before_a_crash_is_applied_later() {
    let s = server().await;
    let c = cluster("gpu-f").await;
    let cid = register(&s, "gpu-f", &c).await;
    // As if the process died between writing the record and applying its CR.
    let sid = "ses_01JCRASHCRASHCRASHCRASHCR".to_string();
    let mut rec = gshare::sessions::SessionRecord::new(&sid, &cid, "gpu-f", "alice", s.clock.now_ms());
    rec.shape.image = "ghcr.io/lab/jupyter:4".into();
    let stored = rec.clone();
    s.app().store.write(move |txn| gshare::sessions::model::put_session(txn, &stored)).await.unwrap();
    // Too young: the request that made it may still be applying it.
    assert_eq!(s.app().sessions.apply_unapplied(30_000).await.unwrap(), 0);
    assert!(cr(&c, "ses-01jcrashcrashcrashcrashcr").is_none());
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.app().sessions.apply_unapplied(30_000).await.unwrap(), 1);
    let o = cr(&c, "ses-01jcrashcrashcrashcrashcr").expect("applied");
    assert_eq!(o["spec"]["owner"], "alice");
    // Applied once: the next pass has nothing to do.
    assert_eq!(s.app().sessions.apply_unapplied(30_000).await.unwrap(), 0);
    // An unreachable cluster leaves it for a later pass, and the record as it was.
    let sid2 = "ses_01JCRASHCRASHCRASHCRASHC2".to_string();
    let stored = gshare::sessions::SessionRecord::new(&sid2, &cid, "gpu-f", "bob", s.clock.now_ms() - 60_000);
    s.app().store.write(move |txn| gshare::sessions::model::put_session(txn, &stored)).await.unwrap();
    c.knobs().set_unreachable(true);
    assert_eq!(s.app().sessions.apply_unapplied(30_000).await.unwrap(), 0);
    assert_eq!(session(&s, &sid2).await["phase"], "pending");
    c.knobs().set_unreachable(false);
    assert_eq!(s.app().sessions.apply_unapplied(30_000).await.unwrap(), 1);
    s.stop().await;
}

/// A stand-in for a cluster's ingress controller: answers each request with what it received
/// (head and body length), and turns an upgrade into a byte echo (like a WebSocket terminal).
async fn fake_ingress() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut r = BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let lower = head.to_ascii_lowercase();
                if lower.contains("\nupgrade: websocket") {
                    let mut s = r.into_inner();
                    // The request line it was asked with goes back in the 101.
                    let line = head.lines().next().unwrap_or_default();
                    let switched = format!(
                        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Request-Line: {line}\r\n\r\n"
                    );
                    s.write_all(switched.as_bytes()).await.unwrap();
                    let (mut rd, mut wr) = s.split();
                    let _ = tokio::io::copy(&mut rd, &mut wr).await;
                    return;
                }
                let len = lower
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0; len];
                r.read_exact(&mut body).await.unwrap();
                let mut s = r.into_inner();
                // An app's own error page (HTML, its own headers), from an HTTP/1.0 server.
                if head.contains("/missing-page ") {
                    let page = "<h1>Jupyter: 404 Not Found</h1>";
                    let reply = format!(
                        "HTTP/1.0 404 Not Found\r\nContent-Type: text/html\r\nX-Ingress: yes\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    );
                    s.write_all(reply.as_bytes()).await.unwrap();
                    return;
                }
                let answer = json!({"head": head, "body_len": len}).to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ingress: yes\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                s.write_all(reply.as_bytes()).await.unwrap();
            });
        }
    });
    (addr, task)
}

/// A GET through the relay as a browser on the session domain sends it.
async fn relay_get(s: &TestServer, path: &str) -> reqwest::Response {
    s.client.get(s.url(path)).header("Host", "sessions.lab.test").send().await.unwrap()
}

#[tokio::test]
async fn the_proxy_relay_passes_requests_and_websockets_to_the_clusters_ingress() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = server().await;
    let c = cluster("gpu-g").await;
    let cid = register(&s, "gpu-g", &c).await;
    let off = offering(&s, "slice").await;
    let v = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
    let (sid, name) = (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string());
    report(&s, &operator(&s, &cid), &name, json!({"phase": "Running", "ts": ts(&s)})).await;

    // Not relayed until an ingress is known; unknown sessions are 404.
    let e = expect_error(relay_get(&s, &format!("/proxy/{name}/lab")).await, 404, "no_session_ingress").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("gpu-g"));
    expect_error(relay_get(&s, "/proxy/ses-01jzzzzzzzzzzzzzzzzzzzzzzz/lab").await, 404, "not_found").await;
    let cluster_path = format!("/api/v1/clusters/{cid}");
    let patch = |v: Value| call(&s, reqwest::Method::PATCH, &cluster_path, Some(json!({"session_ingress": v})));
    for bad in ["gpu-node-1", "gpu node:30080", "host:0", "host:99999"] {
        let e = expect_error(patch(json!(bad)).await, 422, "validation_failed").await;
        assert!(e["error"]["details"].to_string().contains("session_ingress"), "{bad}: {e}");
    }
    let (ingress, task) = fake_ingress().await;
    let body: Value = patch(json!(ingress.to_string())).await.json().await.unwrap();
    assert_eq!(body["effective_session_ingress"], ingress.to_string());

    // A request passes with its path, query and Host; the console's cookies never do.
    let res = s
        .client
        .post(s.url(&format!("/proxy/{name}/lab/api/contents?type=file")))
        .header("Host", "sessions.lab.test")
        .header("Cookie", "gshare_console=ADMIN-TOKEN; gshare_session=SESSION-COOKIE; gshare_csrf=CSRF; _xsrf=lab")
        .body(vec![b'x'; 3 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-ingress"], "yes");
    let seen: Value = res.json().await.unwrap();
    let head = seen["head"].as_str().unwrap();
    assert!(head.starts_with(&format!("POST /proxy/{name}/lab/api/contents?type=file HTTP/1.1\r\n")), "{head}");
    assert!(head.to_ascii_lowercase().contains("host: sessions.lab.test\r\n"), "{head}");
    // A gshare_session cookie that is not this session's (here: not valid at all) stays behind too.
    assert!(head.contains("cookie: _xsrf=lab\r\n"), "{head}");
    assert!(!head.contains("ADMIN-TOKEN") && !head.contains("CSRF"), "console cookies leaked: {head}");
    assert!(head.contains("x-forwarded-for: 127.0.0.1") && head.contains("x-forwarded-proto: http"), "{head}");
    assert_eq!(seen["body_len"], 3 * 1024 * 1024, "bodies stream past the API's JSON limit");
    // The app's answers are its own: no console CSP or frame options on them, and its error
    // pages pass as they came (not replaced by this server's JSON 404).
    let res = relay_get(&s, &format!("/proxy/{name}/lab/tree/missing-page")).await;
    assert_eq!(res.status(), 404);
    assert_eq!(res.version(), reqwest::Version::HTTP_11, "answered in the client's version, not the app's");
    let h = res.headers().clone();
    assert_eq!(h["content-type"], "text/html");
    assert_eq!(h["x-ingress"], "yes");
    assert!(h.contains_key("x-request-id"));
    for console_only in ["content-security-policy", "x-frame-options", "referrer-policy"] {
        assert!(!h.contains_key(console_only), "{console_only} added to an app's answer: {h:?}");
    }
    assert_eq!(res.text().await.unwrap(), "<h1>Jupyter: 404 Not Found</h1>");
    // HEAD: the app's head, no body (the listeners call the relay without a router).
    let res = s
        .client
        .head(s.url(&format!("/proxy/{name}/lab/tree/missing-page")))
        .header("Host", "sessions.lab.test")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.headers()["x-ingress"], "yes");
    assert!(res.headers().contains_key("x-request-id"));
    assert_eq!(res.bytes().await.unwrap().len(), 0);
    // Only on the session's own domain: an app served on the console's host (or any other) would
    // run its user's code with that origin's cookies. Nothing reaches the ingress then.
    let misdirected = |host: &'static str| {
        let url = s.url(&format!("/proxy/{name}/lab/evil.html"));
        let client = s.client.clone();
        async move { client.get(url).header("Host", host).send().await.unwrap() }
    };
    for host in [
        "127.0.0.1",
        "console.lab.test",
        "sessions.lab.test.evil.test",
        "evil.sessions.lab.test",
        "sessions",
        "user@sessions.lab.test",
    ] {
        let e = expect_error(misdirected(host).await, 421, "wrong_host").await;
        assert_eq!(e["error"]["details"]["session_domain"], "sessions.lab.test", "{host}: {e}");
    }
    // The console's own address, as a browser on it sends it (Host = 127.0.0.1:<port>).
    let e = expect_error(s.get(&format!("/proxy/{name}/lab/evil.html")).await, 421, "wrong_host").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("sessions.lab.test"), "{e}");
    // Host is compared without case, port or a final dot.
    for host in ["SESSIONS.lab.test", "sessions.lab.test:8080", "sessions.lab.test."] {
        assert_eq!(misdirected(host).await.status(), 200, "{host}");
    }
    // No Host at all (HTTP/1.0): refused.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
        raw.write_all(format!("GET /proxy/{name}/lab HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = String::new();
        raw.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.0 421") || answer.starts_with("HTTP/1.1 421"), "{answer}");
        assert!(answer.contains("wrong_host"), "{answer}");
    }
    // This server's own refusals on the same path keep the envelope and the headers.
    let e = relay_get(&s, "/proxy/ses-01jzzzzzzzzzzzzzzzzzzzzzzz/lab").await;
    assert!(e.headers().contains_key("content-security-policy"));

    // An upgrade (a terminal's WebSocket) is relayed both ways, to the path as sent or as verify
    // will route it (`//` merged, an escaped unreserved letter decoded), its query kept.
    for (sent, seen) in [
        (format!("/proxy/{name}/terminal/ws"), format!("/proxy/{name}/terminal/ws")),
        (format!("/proxy/{name}/terminal/ws?t=1&u=%2F"), format!("/proxy/{name}/terminal/ws?t=1&u=%2F")),
        (format!("/proxy/{name}//terminal/%77s?t=2"), format!("/proxy/{name}/terminal/ws?t=2")),
    ] {
        let mut ws = tokio::net::TcpStream::connect(s.app_addr()).await.unwrap();
        let hello = format!(
            "GET {sent} HTTP/1.1\r\nHost: sessions.lab.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        ws.write_all(hello.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            assert_eq!(ws.read(&mut b).await.unwrap(), 1, "connection closed during the handshake");
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.to_ascii_lowercase().contains("upgrade: websocket"), "{head}");
        assert!(head.contains(&format!("x-request-line: GET {seen} HTTP/1.1\r\n")), "{sent}: {head}");
        for msg in [&b"ls -la\n"[..], &[0x81, 0x02, 0x68, 0x69][..]] {
            ws.write_all(msg).await.unwrap();
            let mut back = vec![0u8; msg.len()];
            ws.read_exact(&mut back).await.unwrap();
            assert_eq!(back, msg);
        }
    }

    // The ingress gone: 502 with the target named; an ended session is not relayed.
    task.abort();
    let _ = task.await;
    let e = expect_error(relay_get(&s, &format!("/proxy/{name}/lab")).await, 502, "ingress_unreachable").await;
    assert_eq!(e["error"]["details"]["target"], ingress.to_string());
    send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    expect_error(relay_get(&s, &format!("/proxy/{name}/lab")).await, 404, "not_found").await;
    // Clearing the cluster's ingress falls back to the server-wide one (none here).
    let body: Value = patch(json!("")).await.json().await.unwrap();
    assert!(body["session_ingress"].is_null() && body["effective_session_ingress"].is_null(), "{body}");
    s.stop().await;
}

#[tokio::test]
async fn the_openapi_document_covers_offerings_sessions_and_verify() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    for (path, method, codes) in [
        ("/api/v1/offerings", "get", &["200", "401", "422"][..]),
        ("/api/v1/offerings", "post", &["201", "409", "422"]),
        ("/api/v1/offerings/{id}", "patch", &["200", "404", "422"]),
        ("/api/v1/offerings/{id}", "delete", &["204", "409"]),
        ("/api/v1/sessions", "get", &["200", "422"]),
        ("/api/v1/sessions", "post", &["201", "404", "409", "422", "502"]),
        ("/api/v1/sessions/{id}", "get", &["200", "404"]),
        ("/api/v1/sessions/{id}", "delete", &["200", "409", "502"]),
        ("/api/v1/sessions/{id}/pause", "post", &["200", "409", "502"]),
        ("/api/v1/sessions/{id}/resume", "post", &["200", "409", "502"]),
        ("/api/v1/sessions/{id}/connect", "post", &["200", "409"]),
        ("/internal/connect/verify", "get", &["200", "401"]),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} not documented");
        for code in codes {
            assert!(op["responses"][code].is_object(), "{method} {path} does not document {code}");
        }
    }
    for schema in ["SessionView", "OfferingView", "Connection", "CreateSession", "OfferingCreate"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} missing");
    }
    // The list documents its cursor and where the next one is.
    let params = doc["paths"]["/api/v1/sessions"]["get"]["parameters"].as_array().unwrap();
    let after = params.iter().find(|p| p["name"] == "after").expect("the after parameter");
    assert_eq!((&after["in"], &after["schema"]["maxLength"]), (&json!("query"), &json!(30)));
    assert!(doc["components"]["schemas"]["SessionPage"]["properties"]["next"].is_object());
    // The session view documents its phase values.
    let phase = doc["components"]["schemas"]["Phase"]["enum"].as_array().expect("Phase enum");
    assert_eq!(phase.len(), 7);
    s.stop().await;
}

#[tokio::test]
async fn cr_names_of_other_id_shapes_are_found_among_live_sessions() {
    let s = server().await;
    let c = cluster("gpu-h").await;
    let cid = register(&s, "gpu-h", &c).await;
    // An id that is not `ses_<ULID>`: its CR name is still lower(replace(id, '_', '-')).
    let rec = gshare::sessions::SessionRecord::new("ses_Lab_1", &cid, "gpu-h", "alice", s.clock.now_ms());
    s.app().store.write(move |txn| gshare::sessions::model::put_session(txn, &rec)).await.unwrap();
    report(&s, &operator(&s, &cid), "ses-lab-1", json!({"phase": "Running", "ts": ts(&s)})).await;
    assert_eq!(session(&s, "ses_Lab_1").await["phase"], "running");
    // The relay finds it too (and says it has no ingress), while a made-up name is unknown.
    expect_error(relay_get(&s, "/proxy/ses-lab-1/lab").await, 404, "no_session_ingress").await;
    expect_error(relay_get(&s, "/proxy/ses-lab-2/lab").await, 404, "not_found").await;
    // Ended, it is history: reports about it are accepted and change nothing.
    report(&s, &operator(&s, &cid), "ses-lab-1", json!({"phase": "Terminated", "ts": ts(&s)})).await;
    assert_eq!(session(&s, "ses_Lab_1").await["phase"], "terminated");
    report(&s, &operator(&s, &cid), "ses-lab-1", json!({"phase": "Running", "ts": ts(&s)})).await;
    assert_eq!(session(&s, "ses_Lab_1").await["phase"], "terminated");
    s.stop().await;
}

/// The list's filters page through the history newest first with exact totals, whichever way each
/// is answered (live index, keys only, or the filtered fields).
#[tokio::test]
async fn list_filters_page_the_history() {
    use gshare::sessions::model::{Phase, SessionRecord, put_session};
    let s = server().await;
    let now = s.clock.now_ms();
    // 60 sessions: every 3rd live (running or pending), owners u0..u3, clusters clu_a / clu_b.
    s.app()
        .store
        .write(move |txn| {
            for i in 0..60u32 {
                let created = now - i64::from(i) * 1000;
                let id = format!("ses_{}", ulid::Ulid::from_parts(created as u64, u128::from(i)));
                let cluster = if i % 2 == 0 { "clu_a" } else { "clu_b" };
                let mut r = SessionRecord::new(&id, cluster, "c", &format!("u{}", i % 4), created);
                r.phase = match i % 6 {
                    0 => Phase::Running,
                    3 => Phase::Pending,
                    1 | 4 => Phase::Error,
                    _ => Phase::Terminated,
                };
                put_session(txn, &r)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let all = send(&s, reqwest::Method::GET, "/api/v1/sessions?size=100", None, 200).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 60);
    assert_eq!(all["next"], Value::Null, "one page holds them all");
    let queries = [
        "live=true",
        "live=false",
        "phase=running",
        "phase=terminated",
        "owner=u1",
        "cluster_id=clu_b",
        "cluster_id=clu_b&live=false",
        "owner=u0&phase=running",
        "owner=u1&cluster_id=clu_b&phase=error",
        "owner=u3&live=true",
    ];
    assert_lists_agree(&s, &queries, 7).await;
    // Nothing matches: an unknown owner, a live phase asked among the ended, two owners' sessions
    // on the other cluster.
    for q in ["owner=nobody", "phase=running&live=false", "phase=error&live=true", "owner=u0&cluster_id=clu_b"] {
        let v = send(&s, reqwest::Method::GET, &format!("/api/v1/sessions?{q}"), None, 200).await;
        assert_eq!((&v["data"], &v["pagination"]["total"], &v["next"]), (&json!([]), &json!(0), &Value::Null), "{q}");
    }
    // Phases change (ends, an error, a resume): the indexes follow, the answers stay exact.
    s.app()
        .store
        .write(move |txn| {
            for (k, (_, mut r)) in SESSIONS.list_in_write(txn)?.into_iter().enumerate() {
                let to = match (r.phase, k % 3) {
                    (Phase::Running, 0) => Phase::Terminated,
                    (Phase::Running, _) => Phase::Paused,
                    (Phase::Pending, _) => Phase::Error,
                    (Phase::Terminated, 0) => Phase::Running,
                    (p, _) => p,
                };
                if to != r.phase {
                    r.set_phase(to, now);
                    put_session(txn, &r)?;
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    assert_list_indexes_exact(&s).await;
    assert_lists_agree(&s, &queries, 7).await;
    assert_lists_agree(&s, &["phase=paused", "owner=u2&phase=terminated"], 4).await;
    // No filter: every page by number (the older half is read from the oldest end), one past
    // the last, and `next` only while rows follow.
    let all: Vec<Value> = all_sessions(&s).await.iter().map(|v| v["id"].clone()).collect();
    for size in [7usize, 10] {
        let mut by_page = Vec::new();
        for page in 1..=all.len().div_ceil(size) + 1 {
            let v =
                send(&s, reqwest::Method::GET, &format!("/api/v1/sessions?size={size}&page={page}"), None, 200).await;
            assert_eq!(v["pagination"]["total"], all.len());
            let rows = v["data"].as_array().unwrap();
            let more = page * size < all.len();
            assert_eq!(v["next"].is_string(), more, "size {size} page {page}: {}", v["next"]);
            if more {
                assert_eq!(v["next"], rows.last().unwrap()["id"], "size {size} page {page}");
            }
            by_page.extend(rows.iter().map(|r| r["id"].clone()));
        }
        assert_eq!(by_page, all, "size {size}: every row once, newest first");
    }
    s.stop().await;
}

/// Every session, newest first, walked by cursor (100 at a time).
async fn all_sessions(s: &TestServer) -> Vec<Value> {
    let (mut out, mut after) = (Vec::new(), None::<String>);
    loop {
        let q = after.as_ref().map_or("size=100".to_string(), |a| format!("size=100&after={a}"));
        let v = send(s, reqwest::Method::GET, &format!("/api/v1/sessions?{q}"), None, 200).await;
        out.extend(v["data"].as_array().unwrap().iter().cloned());
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    let ids: Vec<&str> = out.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first, each once: {ids:?}");
    out
}

/// Does the row match the query's filters (`owner`, `cluster_id`, `phase`, `live`)?
fn picks(query: &str, v: &Value) -> bool {
    query.split('&').all(|pair| {
        let (k, val) = pair.split_once('=').unwrap();
        match k {
            "owner" | "cluster_id" | "phase" => v[k] == val,
            "live" => v["live"] == (val == "true"),
            _ => panic!("{k}"),
        }
    })
}

/// Each query pages to exactly the rows its filters pick from the whole list, `size` at a time,
/// by `page` and by `after` alike, with the exact total on every page and `next` only while more
/// rows follow.
async fn assert_lists_agree(s: &TestServer, queries: &[&str], size: usize) {
    let all = all_sessions(s).await;
    for query in queries {
        let want: Vec<Value> = all.iter().filter(|v| picks(query, v)).map(|v| v["id"].clone()).collect();
        let get = |q: String| {
            let path = format!("/api/v1/sessions?{query}&size={size}{q}");
            async move { send(s, reqwest::Method::GET, &path, None, 200).await }
        };
        let mut by_page = Vec::new();
        for page in 1..=want.len().div_ceil(size) + 1 {
            let v = get(format!("&page={page}")).await;
            assert_eq!(
                (&v["pagination"]["total"], &v["pagination"]["page"]),
                (&json!(want.len()), &json!(page)),
                "{query}"
            );
            let more = page * size < want.len();
            assert_eq!(v["next"].is_string(), more, "{query} page {page}: {}", v["next"]);
            by_page.extend(v["data"].as_array().unwrap().iter().map(|r| r["id"].clone()));
        }
        assert_eq!(by_page, want, "{query} by page");
        let (mut by_cursor, mut after) = (Vec::new(), None::<String>);
        loop {
            let v = get(after.as_ref().map_or(String::new(), |a| format!("&after={a}"))).await;
            assert_eq!(v["pagination"]["total"], want.len(), "{query}");
            let rows = v["data"].as_array().unwrap();
            assert!(rows.len() <= size);
            by_cursor.extend(rows.iter().map(|r| r["id"].clone()));
            match v["next"].as_str() {
                Some(n) => {
                    assert_eq!(rows.len(), size, "{query}: a short page has no next");
                    assert_eq!(rows.last().unwrap()["id"], n);
                    after = Some(n.to_string());
                }
                None => break,
            }
        }
        assert_eq!(by_cursor, want, "{query} by cursor");
    }
}

/// The list indexes and their counts are exactly what the stored sessions say.
async fn assert_list_indexes_exact(s: &TestServer) {
    use gshare::sessions::model::{ListIndex, SESSION_COUNTS};
    let (sessions, keys, counts) = s
        .app()
        .store
        .read(|txn| {
            let mut keys = Vec::new();
            for idx in ListIndex::ALL {
                keys.push(idx.set().keys(txn)?);
            }
            Ok((SESSIONS.list(txn)?, keys, SESSION_COUNTS.list(txn)?))
        })
        .await
        .unwrap();
    let mut want_counts = std::collections::BTreeMap::<String, u64>::new();
    for (i, idx) in ListIndex::ALL.into_iter().enumerate() {
        let mut want: Vec<String> =
            sessions.iter().map(|(id, r)| format!("{}{id}", ListIndex::prefix(idx.value_of(r)))).collect();
        want.sort();
        assert_eq!(keys[i], want, "{idx:?} index");
        for (_, r) in &sessions {
            *want_counts.entry(idx.count_key(idx.value_of(r))).or_default() += 1;
        }
    }
    assert_eq!(counts, want_counts.into_iter().collect::<Vec<_>>(), "counts");
    let ids = s.app().store.read(|txn| gshare::sessions::model::SESSION_IDS.keys(txn)).await.unwrap();
    assert_eq!(ids, sessions.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), "every id");
}

/// The cursor keeps its place while sessions are created: every row once, none skipped, in order;
/// a cursor that is no session id is refused by name, a well-formed unknown one answers from where
/// it sorts.
#[tokio::test]
async fn the_cursor_walks_every_row_once_while_sessions_are_created() {
    use gshare::sessions::model::{Phase, SessionRecord, put_session};
    let s = server().await;
    let now = s.clock.now_ms();
    let add = |n: u32, at: i64, tag: u32| {
        s.app().store.write(move |txn| {
            for i in 0..n {
                let created = at - i64::from(i) * 1000;
                let id = format!("ses_{}", ulid::Ulid::from_parts(created as u64, u128::from(tag * 1000 + i)));
                let mut r = SessionRecord::new(&id, "clu_a", "c", &format!("u{}", i % 2), created);
                if i % 3 == 0 {
                    r.set_phase(Phase::Terminated, created);
                }
                put_session(txn, &r)?;
            }
            Ok(())
        })
    };
    add(40, now - 100_000, 0).await.unwrap();
    let before = all_sessions(&s).await;
    assert_eq!(before.len(), 40);
    let mut tag = 0;
    for (query, size) in [("", 6usize), ("owner=u1", 4), ("phase=terminated", 5)] {
        // What is stored when the walk starts (the walks before added some).
        let want: Vec<Value> = all_sessions(&s)
            .await
            .iter()
            .filter(|v| query.is_empty() || picks(query, v))
            .map(|v| v["id"].clone())
            .collect();
        assert!(want.len() > 2 * size, "{query}: several pages");
        let (mut got, mut after) = (Vec::new(), None::<String>);
        loop {
            let a = after.as_ref().map_or(String::new(), |a| format!("&after={a}"));
            let v =
                send(&s, reqwest::Method::GET, &format!("/api/v1/sessions?{query}&size={size}{a}"), None, 200).await;
            got.extend(v["data"].as_array().unwrap().iter().map(|r| r["id"].clone()));
            // Newer sessions (this query's kind among them) arrive between pages.
            tag += 1;
            add(3, s.clock.now_ms() + i64::from(tag) * 10_000, tag).await.unwrap();
            match v["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => break,
            }
        }
        assert_eq!(got, want, "{query}: each row once, none missed");
    }

    // Bad cursors are refused by name; with page, too.
    let first = before[0]["id"].as_str().unwrap().to_string();
    for bad in [
        "ses_nope".to_string(),
        "abc".to_string(),
        format!("{first}0"),
        first.replace("ses_", "clu_"),
        "ses_8ZZZZZZZZZZZZZZZZZZZZZZZZZ".to_string(),
        "ses_01JABCDEFGHJKMNPQRSTVWXYZU".to_string(),
        format!("{first}&page=2"),
    ] {
        let e = expect_error(
            call(&s, reqwest::Method::GET, &format!("/api/v1/sessions?after={bad}"), None).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", "after"]), "{bad}: {e}");
    }
    // Well-formed but unknown: the highest id sorts above all (the first page), the lowest below
    // all (nothing); either case is read.
    let total = all_sessions(&s).await.len();
    let v =
        send(&s, reqwest::Method::GET, "/api/v1/sessions?after=ses_7zzzzzzzzzzzzzzzzzzzzzzzzz&size=3", None, 200).await;
    assert_eq!((v["data"].as_array().unwrap().len(), &v["pagination"]["total"]), (3, &json!(total)));
    assert_eq!(v["pagination"]["page"], 0, "a cursor's page is not counted");
    let v = send(&s, reqwest::Method::GET, "/api/v1/sessions?after=ses_00000000000000000000000000", None, 200).await;
    assert_eq!((&v["data"], &v["next"], &v["pagination"]["total"]), (&json!([]), &Value::Null, &json!(total)));
    // A session's own id, lower-cased, resumes right after it.
    let v =
        send(&s, reqwest::Method::GET, &format!("/api/v1/sessions?after={}&size=1", first.to_lowercase()), None, 200)
            .await;
    assert_eq!(v["data"][0]["id"], before[1]["id"]);
    s.stop().await;
}

/// A state file written before the list indexes (schema 2) gets them when it is opened: the
/// filtered lists answer what the sessions say.
#[tokio::test]
async fn a_state_file_without_the_list_indexes_gets_them_on_open() {
    use gshare::sessions::model::{Phase, SessionRecord, rebuild_live_index};
    use gshare::store::Store;
    crate::support::init();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = gshare::clock::Clock::system().now_ms();
    {
        let schema_2: Vec<_> = gshare::MIGRATIONS.iter().copied().filter(|m| m.to <= 2).collect();
        let store = Store::open(&data.join("gshare.redb"), &schema_2).unwrap();
        store
            .write(move |txn| {
                for i in 0..30u32 {
                    let created = now - i64::from(i) * 1000;
                    let id = format!("ses_{}", ulid::Ulid::from_parts(created as u64, u128::from(i)));
                    let mut r = SessionRecord::new(
                        &id,
                        ["clu_a", "clu_b"][i as usize % 2],
                        "c",
                        &format!("u{}", i % 3),
                        created,
                    );
                    r.phase = [Phase::Running, Phase::Terminated, Phase::Error, Phase::Paused][i as usize % 4];
                    SESSIONS.put(txn, &id, &r)?;
                }
                rebuild_live_index(txn).map(drop)
            })
            .await
            .unwrap();
        assert_eq!(store.schema_version().unwrap(), 2);
    }
    let config = gshare::config::Config::for_data_dir(&data, &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    let clock = gshare::clock::Clock::system();
    let server = gshare::RunningServer::start(config, clock.clone()).await.unwrap();
    let base = server.base_url();
    let s = TestServer { server: Some(server), dir, base, client: reqwest::Client::new(), clock };
    assert_eq!(s.app().store.schema_version().unwrap(), gshare::store::schema_of(gshare::MIGRATIONS));
    assert_list_indexes_exact(&s).await;
    assert_lists_agree(&s, &["owner=u1", "cluster_id=clu_b", "phase=terminated", "owner=u2&live=true"], 4).await;
    s.stop().await;
}

/// A running session on a new cluster `cluster` whose session ingress is a [`fake_ingress`]: the
/// cluster, the session's CR name and the ingress task (keep them alive).
async fn running_behind_an_ingress(
    s: &TestServer,
    cluster_name: &str,
) -> (FakeCluster, String, tokio::task::JoinHandle<()>) {
    let c = cluster(cluster_name).await;
    let cid = register(s, cluster_name, &c).await;
    let off = offering(s, "slice").await;
    let v = send(s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
    let name = v["cr_name"].as_str().unwrap().to_string();
    report(s, &operator(s, &cid), &name, json!({"phase": "Running", "ts": ts(s)})).await;
    let (ingress, task) = fake_ingress().await;
    let cluster_path = format!("/api/v1/clusters/{cid}");
    call(s, reqwest::Method::PATCH, &cluster_path, Some(json!({"session_ingress": ingress.to_string()}))).await;
    (c, name, task)
}

/// Opens a relayed WebSocket to `name` on a fresh connection from 127.0.0.`from`: the answer's
/// status line (empty when the server closed the connection unanswered), and the connection.
async fn relayed_upgrade(s: &TestServer, name: &str, from: u8) -> (String, tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(std::net::SocketAddr::from(([127, 0, 0, from], 0))).unwrap();
    let mut ws = sock.connect(s.app_addr()).await.unwrap();
    let hello = format!(
        "GET /proxy/{name}/terminal/ws HTTP/1.1\r\nHost: sessions.lab.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    if ws.write_all(hello.as_bytes()).await.is_err() {
        return (String::new(), ws);
    }
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        match ws.read(&mut b).await {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    (head.lines().next().unwrap_or("").to_string(), ws)
}

/// Relayed WebSockets stay counted under `max_connections` and the per-address cap
/// after the upgrade (with their upstream descriptor), and one session holds at most 64.
#[tokio::test]
async fn relayed_websockets_are_counted_against_the_connection_caps() {
    let s = TestServer::start_with(&[
        ("GSHARE_SESSION_DOMAIN", "sessions.lab.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
        ("GSHARE_MAX_CONNECTIONS", "16"),
    ])
    .await;
    let (_c, name, _ingress) = running_behind_an_ingress(&s, "gpu-w").await;

    // Each tunnel holds two of the 16 places (its connection and the upstream one): eight open.
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..12 {
        let (status, ws) = relayed_upgrade(&s, &name, 30).await;
        if status.starts_with("HTTP/1.1 101") {
            open.push(ws);
        } else {
            assert!(status.is_empty() || status.starts_with("HTTP/1.1 503"), "{status}");
            refused += 1;
        }
    }
    assert_eq!((open.len(), refused), (8, 4));
    // Another address is still answered on the health paths (the reserve), and the API refuses
    // politely rather than hanging.
    assert_eq!(s.get("/readyz").await.status(), 200);
    // A closed tunnel gives its places back (once the server has seen it close).
    drop(open.pop());
    let mut reopened = false;
    for _ in 0..200 {
        let (status, ws) = relayed_upgrade(&s, &name, 30).await;
        if status.starts_with("HTTP/1.1 101") {
            open.push(ws);
            reopened = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(reopened, "the places of a closed tunnel came back");
    drop(open);
    s.stop().await;
}

#[tokio::test]
async fn one_session_holds_at_most_64_relayed_websockets() {
    let s = server().await;
    let (_c, name, _ingress) = running_behind_an_ingress(&s, "gpu-x").await;
    let mut open = Vec::new();
    for i in 0..64u8 {
        let (status, ws) = relayed_upgrade(&s, &name, 40 + i % 8).await;
        assert!(status.starts_with("HTTP/1.1 101"), "tunnel {i}: {status}");
        open.push(ws);
    }
    let (status, mut ws) = relayed_upgrade(&s, &name, 50).await;
    assert!(status.starts_with("HTTP/1.1 429"), "{status}");
    let mut rest = String::new();
    let _ = tokio::io::AsyncReadExt::read_to_string(&mut ws, &mut rest).await;
    drop(open);
    s.stop().await;
}

/// One address holds at most its share of relayed WebSockets (each takes two of its places: its
/// connection and the upstream one): the next is refused with 429 `too_many_tunnels` naming the
/// cap, while another address still opens one to the same session, the tunnels carry bytes and the
/// health paths answer; a closed tunnel gives its places back.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_relayed_websockets() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestServer::start_with(&[
        ("GSHARE_SESSION_DOMAIN", "sessions.lab.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
        ("GSHARE_MAX_CONNECTIONS_PER_ADDRESS", "9"),
    ])
    .await;
    let (_c, name, _ingress) = running_behind_an_ingress(&s, "gpu-pa").await;
    let mut open = Vec::new();
    for i in 0..4 {
        let (status, ws) = relayed_upgrade(&s, &name, 60).await;
        assert!(status.starts_with("HTTP/1.1 101"), "tunnel {i}: {status}");
        open.push(ws);
    }
    // The fifth connection takes the address's ninth place; its upstream would be the tenth.
    let (status, mut ws) = relayed_upgrade(&s, &name, 60).await;
    assert!(status.starts_with("HTTP/1.1 429"), "{status}");
    let mut rest = String::new();
    let _ = ws.read_to_string(&mut rest).await;
    let body: Value = serde_json::from_str(rest.trim()).unwrap_or_else(|e| panic!("{e}: {rest}"));
    assert_eq!(body["error"]["code"], "too_many_tunnels", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_connections_per_address") && message.contains('9'), "{body}");
    drop(ws);
    // Another address opens one to the same session; tunnels of both carry bytes both ways.
    let (status, other) = relayed_upgrade(&s, &name, 61).await;
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    for ws in [open.first_mut().unwrap(), &mut { other }] {
        ws.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        ws.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
    }
    assert_eq!(s.get("/readyz").await.status(), 200);
    assert_eq!(s.get("/healthz").await.status(), 200);
    // A closed tunnel gives its two places back (once the server has seen it close).
    drop(open.pop());
    let mut reopened = false;
    for _ in 0..200 {
        let (status, ws) = relayed_upgrade(&s, &name, 60).await;
        if status.starts_with("HTTP/1.1 101") {
            open.push(ws);
            reopened = true;
            break;
        }
        assert!(status.is_empty() || status.starts_with("HTTP/1.1 429"), "{status}");
        tokio::task::yield_now().await;
    }
    assert!(reopened, "the places of a closed tunnel came back");
    drop(open);
    s.stop().await;
}

/// On a session domain (the origin of every session app) only the relay, verify
/// and the health paths answer; the console, the API and sign-in are 421 there and set no cookie.
#[tokio::test]
async fn the_console_does_not_answer_on_the_session_origin() {
    let s = server().await;
    let c = cluster("gpu-o").await;
    let cid = register(&s, "gpu-o", &c).await;
    call(
        &s,
        reqwest::Method::PATCH,
        &format!("/api/v1/clusters/{cid}"),
        Some(json!({"session_domain": "gpu-o.lab.test"})),
    )
    .await;
    let on = |host: &'static str, method: reqwest::Method, path: &'static str| {
        let req = s.client.request(method, s.url(path)).header("Host", host);
        async move { req.send().await.unwrap() }
    };
    let password = crate::signin::initial_password(&s);
    for host in ["sessions.lab.test", "SESSIONS.lab.test:8080", "sessions.lab.test.", "gpu-o.lab.test"] {
        for path in [
            "/",
            "/clusters",
            "/assets/index.js",
            "/api/v1/clusters",
            "/api/v1/auth/me",
            "/api/openapi.json",
            "/metrics",
        ] {
            let res = on(host, reqwest::Method::GET, path).await;
            expect_error(res, 421, "wrong_host").await;
        }
        let res = s
            .client
            .post(s.url("/api/v1/auth/login"))
            .header("Host", host)
            .json(&json!({"username": "admin", "password": password}))
            .send()
            .await
            .unwrap();
        assert!(res.headers().get("set-cookie").is_none(), "a console cookie set on {host}");
        expect_error(res, 421, "wrong_host").await;
        assert_eq!(on(host, reqwest::Method::GET, "/healthz").await.status(), 200);
        assert_eq!(on(host, reqwest::Method::GET, "/readyz").await.status(), 200);
        // The relay and verify answer for themselves (here: no such session, no token).
        let res = on(host, reqwest::Method::GET, "/proxy/ses-01jzzzzzzzzzzzzzzzzzzzzzzz/lab").await;
        assert_ne!(res.status(), 421);
        assert_ne!(on(host, reqwest::Method::GET, "/internal/connect/verify").await.status(), 421);
    }
    // The console's own host is served as before.
    assert_eq!(s.get("/").await.status(), 200);
    assert_eq!(s.get("/api/v1/auth/me").await.status(), 401);
    s.stop().await;
}
