//! Clusters against the fake API server over HTTPS: registration (the seed's curl line), every
//! probe stage failing, identity conflicts, idempotency, listing, editing, hot-loading kubeconfig
//! files, unclaimed directories and unregistering.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gshare::clusters::ClusterEvent;
use gshare::clusters::model::ClusterStatus;
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::{Value, json};

use crate::support::{TestServer, expect_error};

/// Bounded wait for an event (not a sleep: returns as soon as it happens).
const WAIT: Duration = Duration::from_secs(10);

fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

async fn fake() -> FakeCluster {
    FakeCluster::start(ClusterSpec::default()).await.unwrap()
}

async fn fake_with(f: impl FnOnce(&mut ClusterSpec)) -> FakeCluster {
    let mut spec = ClusterSpec::default();
    f(&mut spec);
    FakeCluster::start(spec).await.unwrap()
}

fn b64(text: &str) -> String {
    STANDARD.encode(text)
}

async fn post(s: &TestServer, path: &str, body: Value) -> reqwest::Response {
    s.client.post(s.url(path)).bearer_auth(admin(s)).json(&body).send().await.unwrap()
}

async fn register(s: &TestServer, name: &str, kubeconfig: &str) -> reqwest::Response {
    post(s, "/api/v1/clusters", json!({"name": name, "role": "primary", "kubeconfig_b64": b64(kubeconfig)})).await
}

async fn register_ok(s: &TestServer, name: &str, c: &FakeCluster) -> Value {
    let res = register(s, name, &c.kubeconfig_yaml()).await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    res.json().await.unwrap()
}

async fn get_json(s: &TestServer, path: &str) -> (u16, Value) {
    let res = s.client.get(s.url(path)).bearer_auth(admin(s)).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn kubeconfig_dirs(s: &TestServer) -> Vec<String> {
    match std::fs::read_dir(s.data_dir().join("clusters")) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

async fn wait_for(
    rx: &mut tokio::sync::broadcast::Receiver<ClusterEvent>,
    pred: impl Fn(&ClusterEvent) -> bool,
) -> ClusterEvent {
    tokio::time::timeout(WAIT, async {
        loop {
            match rx.recv().await {
                Ok(e) if pred(&e) => return e,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await
    .expect("event within the bound")
}

/// Waits (on probe events, no sleeping) until the cluster's detail satisfies `pred`; returns it.
/// Several probes may run for one file change (a rescan sees each step of a swap), so the first
/// event is not necessarily the last word.
async fn wait_detail(
    s: &TestServer,
    rx: &mut tokio::sync::broadcast::Receiver<ClusterEvent>,
    id: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, detail) = get_json(s, &format!("/api/v1/clusters/{id}")).await;
        if pred(&detail) {
            return detail;
        }
        let next = tokio::time::timeout_at(deadline, async {
            loop {
                match rx.recv().await {
                    Ok(ClusterEvent::Probed { id: i, .. }) if i == id => return,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(e) => panic!("event channel closed: {e}"),
                }
            }
        })
        .await;
        assert!(next.is_ok(), "cluster {id} never reached the expected state; last: {detail}");
    }
}

#[tokio::test]
async fn seed_curl_line_registers_and_keeps_kubeconfig_only_as_a_file() {
    let s = TestServer::start().await;
    let c = fake().await;
    let kc_path = s.dir.path().join("gpu-a.kubeconfig");
    std::fs::write(&kc_path, c.kubeconfig_yaml()).unwrap();
    // The seed's command, as written (curl sends application/x-www-form-urlencoded).
    let script = r#"curl -sX POST "$URL/api/v1/clusters" \
  -H "Authorization: Bearer $ADMIN_JWT" -H "Idempotency-Key: $(uuidgen)" \
  -d "{\"name\":\"gpu-a\",\"role\":\"primary\",\"kubeconfig_b64\":\"$(base64 -w0 <"$KC")\"}""#;
    // tokio's Command: a blocking wait would stall the in-process server on this runtime.
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("URL", &s.base)
        .env("ADMIN_JWT", admin(&s))
        .env("KC", &kc_path)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let body: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));
    let id = body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("clu_") && id.len() == 30, "{body}");
    assert_eq!(body["name"], "gpu-a");
    assert_eq!(body["role"], "primary");
    assert_eq!(body["status"], "connected");
    assert_eq!(body["node_count"], 2);
    assert_eq!(body["gpu_count"], 8);
    assert_eq!(body["api_server"], c.server_url());
    assert!(body["registered_at"].as_str().is_some());
    assert!(body["checks"].as_array().unwrap().iter().all(|c| c["ok"] == true), "{body}");
    // Never any kubeconfig content in the answer or the state file.
    let text = body.to_string();
    assert!(!text.contains(c.token()) && !text.contains("certificate-authority-data"));
    let state = std::fs::read(s.data_dir().join("gshare.redb")).unwrap();
    assert!(!state.windows(c.token().len()).any(|w| w == c.token().as_bytes()), "token stored in the database");
    // The file: 0600 in a 0700 directory.
    let file = s.data_dir().join("clusters").join(&id).join("kubeconfig");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), c.kubeconfig_yaml());
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);

    // Nodes were seeded from the probe, GPUs from the HAMi annotation.
    let (status, nodes) = get_json(&s, &format!("/api/v1/clusters/{id}/nodes")).await;
    assert_eq!(status, 200);
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let gpus = nodes[0]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    assert!(gpus[0]["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert_eq!(gpus[0]["memory_mb"], 81920);
    assert!(gpus[0]["model"].as_str().unwrap().contains("A100"));
    assert_eq!(nodes[0]["ready"], true);

    let (_, detail) = get_json(&s, &format!("/api/v1/clusters/{id}")).await;
    assert_eq!(detail["nodes"], json!({"total": 2, "ready": 2, "cordoned": 0, "offline": 0}));
    assert_eq!(detail["gpu"], json!({"device_total": 8, "vram_total_mb": 8 * 81920}));
    assert!(detail["last_checked_at"].as_str().is_some());
    s.stop().await;
}

async fn expect_probe_failure(s: &TestServer, kubeconfig: &str, stage: &str) -> Value {
    let before = kubeconfig_dirs(s);
    let res = register(s, "probe-target", kubeconfig).await;
    let body = expect_error(res, 422, "probe_failed").await;
    assert_eq!(body["error"]["details"]["stage"], stage, "{body}");
    assert!(body["error"]["details"]["cause"].as_str().is_some_and(|c| !c.is_empty()), "{body}");
    assert!(body["error"]["details"]["checks"].as_array().is_some_and(|c| !c.is_empty()), "{body}");
    assert_eq!(kubeconfig_dirs(s), before, "a kubeconfig was left behind");
    body
}

#[tokio::test]
async fn each_probe_stage_fails_in_turn() {
    let s = TestServer::start_with(&[("GSHARE_PROBE_TIMEOUT", "2s")]).await;
    let c = fake().await;
    let good = c.kubeconfig_yaml();

    // kubeconfig: not YAML, no contexts, an exec credential plugin.
    expect_probe_failure(&s, ": : [not yaml", "kubeconfig").await;
    expect_probe_failure(&s, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n", "kubeconfig")
        .await;
    let exec = good.replace(
        &format!("token: {}", c.token()),
        "exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]",
    );
    assert_ne!(exec, good, "kubeconfig layout changed");
    let body = expect_probe_failure(&s, &exec, "kubeconfig").await;
    assert!(body["error"]["details"]["cause"].as_str().unwrap().contains("exec"), "{body}");

    // connect: TLS against a CA that did not sign the server.
    let other = fake().await;
    let wrong_ca = other.kubeconfig_yaml().replace(&other.server_url(), &c.server_url());
    let body = expect_probe_failure(&s, &wrong_ca, "connect").await;
    assert!(body["error"]["details"]["cause"].as_str().unwrap().contains("TLS"), "{body}");
    // connect: nothing listens on the loopback port: the hint says the port is closed here (not
    // that loopback is unreachable) and names the API address field.
    let gone = fake().await;
    let gone_kc = gone.kubeconfig_yaml();
    gone.shutdown().await;
    let body = expect_probe_failure(&s, &gone_kc, "connect").await;
    let hint = body["error"]["details"]["hint"].as_str().unwrap();
    assert!(hint.contains("nothing accepts connections on 127.0.0.1:"), "{body}");
    assert!(hint.contains("connection refused") && hint.contains("API address"), "{body}");
    assert!(!hint.contains("a loopback address"), "{body}");
    // Stages after the failing one are reported as not run, not as failures of their own.
    let checks = body["error"]["details"]["checks"].as_array().unwrap();
    let not_run: Vec<&str> =
        checks.iter().filter(|c| c["detail"] == "not run").map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(not_run, ["auth", "version", "runtime_class", "hami"], "{body}");

    // auth: a wrong token.
    let bad_token = good.replace(c.token(), "0000000000000000000000000000000000000000");
    let body = expect_probe_failure(&s, &bad_token, "auth").await;
    assert!(body["error"]["details"]["cause"].as_str().unwrap().contains("401"), "{body}");

    // A cluster that answers too slowly: bounded by probe_timeout.
    c.knobs().set_delay(Some(Duration::from_secs(5)));
    // The cause proves the deadline fired (the answer would only have come after 5 s).
    let body = expect_probe_failure(&s, &good, "auth").await;
    assert!(body["error"]["details"]["cause"].as_str().unwrap().contains("2 s probe limit"), "{body}");
    c.knobs().set_delay(None);

    // runtime_class and hami, separately and together, with upstream's `missing` names.
    assert!(c.knobs().remove_runtime_class("nvidia"));
    let body = expect_probe_failure(&s, &good, "runtime_class").await;
    assert_eq!(body["error"]["details"]["missing"], json!(["runtime_class_nvidia"]));
    // In words: no internal code, no backticks, no unshipped document, and no HAMi (it passed).
    let (cause, hint) =
        (body["error"]["details"]["cause"].as_str().unwrap(), body["error"]["details"]["hint"].as_str().unwrap());
    assert_eq!(cause, "the cluster has no RuntimeClass named nvidia", "{body}");
    for text in [cause, hint, body["error"]["message"].as_str().unwrap()] {
        for bad in ["runtime_class_nvidia", "`", "cluster-setup", "HAMi"] {
            assert!(!text.contains(bad), "{bad:?} in {text:?}");
        }
    }
    c.knobs().strip_hami();
    let body = expect_probe_failure(&s, &good, "runtime_class").await;
    assert_eq!(body["error"]["details"]["missing"], json!(["runtime_class_nvidia", "hami_device_plugin"]));
    let no_hami = fake_with(|s| s.hami = false).await;
    let body = expect_probe_failure(&s, &no_hami.kubeconfig_yaml(), "hami").await;
    assert_eq!(body["error"]["details"]["missing"], json!(["hami_device_plugin"]));

    // 403 on a resource the probe reads.
    let forbidding = fake().await;
    forbidding.knobs().forbid("runtimeclasses", true);
    let body = expect_probe_failure(&s, &forbidding.kubeconfig_yaml(), "runtime_class").await;
    assert!(body["error"]["details"]["cause"].as_str().unwrap().contains("403"), "{body}");
    s.stop().await;
}

#[tokio::test]
async fn bad_registration_bodies_are_refused_without_leftovers() {
    let s = TestServer::start().await;
    let c = fake().await;
    let kc = b64(&c.kubeconfig_yaml());
    let cases = [
        (json!({"name": "a", "role": "leader", "kubeconfig_b64": kc}), 422, "validation_failed", Some("role")),
        (json!({"name": "", "role": "primary", "kubeconfig_b64": kc}), 422, "validation_failed", Some("name")),
        (
            json!({"name": "x".repeat(81), "role": "primary", "kubeconfig_b64": kc}),
            422,
            "validation_failed",
            Some("name"),
        ),
        (
            json!({"name": "bad\u{7}name", "role": "primary", "kubeconfig_b64": kc}),
            422,
            "validation_failed",
            Some("name"),
        ),
        (json!({"role": "primary", "kubeconfig_b64": kc}), 422, "validation_failed", Some("name")),
        (json!({"name": "a", "role": "primary", "kubeconfig_b64": "%%% not base64 %%%"}), 422, "probe_failed", None),
        (json!({"name": "a", "role": "primary", "kubeconfig_b64": ""}), 422, "probe_failed", None),
        (json!({"name": "a", "role": "primary", "kubeconfig_b64": b64("just: text\n")}), 422, "probe_failed", None),
    ];
    for (body, status, code, field) in cases {
        let res = post(&s, "/api/v1/clusters", body.clone()).await;
        let err = expect_error(res, status, code).await;
        if let Some(f) = field {
            assert_eq!(err["error"]["details"]["errors"][0]["loc"][1], f, "{body}: {err}");
        }
    }
    // Not JSON at all, and too large.
    let res = s.client.post(s.url("/api/v1/clusters")).bearer_auth(admin(&s)).body("{nope").send().await.unwrap();
    expect_error(res, 400, "invalid_json").await;
    let huge = json!({"name": "a", "role": "primary", "kubeconfig_b64": "A".repeat(1_100_000)});
    let res = post(&s, "/api/v1/clusters", huge).await;
    expect_error(res, 413, "payload_too_large").await;
    // Auth: none, and an operator token.
    let res = s.client.get(s.url("/api/v1/clusters")).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    let internal = s.app().auth.internal.mint("operator:clu_local", Duration::from_secs(60)).unwrap();
    let res = s.client.get(s.url("/api/v1/clusters")).bearer_auth(internal).send().await.unwrap();
    expect_error(res, 403, "forbidden").await;
    assert!(kubeconfig_dirs(&s).is_empty());
    let (_, list) = get_json(&s, "/api/v1/clusters").await;
    assert_eq!(list["pagination"]["total"], 0);
    s.stop().await;
}

#[tokio::test]
async fn identity_name_and_address_conflicts() {
    let s = TestServer::start().await;
    let c = fake().await;
    let first = register_ok(&s, "gpu-a", &c).await;
    // The same cluster under another name: same kube-system UID (and address).
    let res = register(&s, "gpu-b", &c.kubeconfig_yaml()).await;
    let body = expect_error(res, 409, "conflict").await;
    assert_eq!(body["error"]["details"]["kube_system_uid"], c.kube_system_uid());
    assert_eq!(body["error"]["details"]["cluster_id"], first["id"]);
    // Named, and said to be the same cluster (not an unknown id with a uid).
    assert_eq!(body["error"]["details"]["cluster_name"], "gpu-a");
    assert_eq!(
        body["error"]["message"],
        "this is the same cluster as \"gpu-a\", which is already registered (same kube-system namespace UID)"
    );
    // The refused attempt is audited against the cluster it collided with.
    let (_, log) = get_json(&s, "/api/v1/audit?action=cluster.register&size=10").await;
    let failed = log["data"].as_array().unwrap().iter().find(|e| e["result"] == "failure").cloned().unwrap();
    assert_eq!(failed["target"], first["id"], "{failed}");
    // Another cluster under a taken name (checked before probing).
    let d = fake().await;
    let res = register(&s, "GPU-A", &d.kubeconfig_yaml()).await;
    let body = expect_error(res, 409, "conflict").await;
    assert_eq!(body["error"]["details"]["name"], "GPU-A");
    assert_eq!(body["error"]["message"], "a cluster named \"gpu-a\" is already registered");
    // A registration refused before it has an id is audited under the name it was tried with.
    let bad = fake_with(|s| s.hami = false).await;
    expect_error(register(&s, "no-hami", &bad.kubeconfig_yaml()).await, 422, "probe_failed").await;
    let (_, log) = get_json(&s, "/api/v1/audit?action=cluster.register&size=10").await;
    assert!(
        log["data"].as_array().unwrap().iter().any(|e| e["result"] == "failure" && e["target"] == "no-hami"),
        "{log}"
    );
    s.stop().await;
}

#[tokio::test]
async fn idempotency_key_semantics() {
    let s = TestServer::start().await;
    let c = fake().await;
    let body = json!({"name": "gpu-a", "role": "primary", "kubeconfig_b64": b64(&c.kubeconfig_yaml())});
    let send = |key: &'static str, body: Value| {
        s.client
            .post(s.url("/api/v1/clusters"))
            .bearer_auth(admin(&s))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let first = send("key-1", body.clone()).await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = send("key-1", body.clone()).await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);
    let mut other = body.clone();
    other["name"] = "gpu-z".into();
    expect_error(send("key-1", other).await.unwrap(), 422, "idempotency_key_reused").await;

    // 20 concurrent posts with one key: exactly one cluster.
    let d = fake().await;
    let body = json!({"name": "gpu-d", "role": "standby", "kubeconfig_b64": b64(&d.kubeconfig_yaml())});
    let token = admin(&s);
    let reqs = (0..20).map(|_| {
        s.client
            .post(s.url("/api/v1/clusters"))
            .bearer_auth(&token)
            .header("Idempotency-Key", "burst")
            .json(&body)
            .send()
    });
    let results = futures::future::join_all(reqs).await;
    let mut ids = std::collections::HashSet::new();
    for r in results {
        let r = r.unwrap();
        match r.status().as_u16() {
            201 => {
                let v: Value = r.json().await.unwrap();
                ids.insert(v["id"].as_str().unwrap().to_string());
            }
            409 => {
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["code"], "conflict", "{v}");
            }
            other => panic!("unexpected {other}: {}", r.text().await.unwrap()),
        }
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let (_, list) = get_json(&s, "/api/v1/clusters?role=standby").await;
    assert_eq!(list["pagination"]["total"], 1);
    s.stop().await;
}

#[tokio::test]
async fn list_pagination_filters_and_bad_queries() {
    let s = TestServer::start_with(&[("GSHARE_SESSION_DOMAIN", "sessions.example.com")]).await;
    let a = fake().await;
    let b = fake().await;
    let c = fake().await;
    register_ok(&s, "a", &a).await;
    register_ok(&s, "b", &b).await;
    let res = post(&s, "/api/v1/clusters", json!({"name": "c", "role": "standby", "kubeconfig_b64": b64(&c.kubeconfig_yaml()), "session_domain": "gpu-c.example.com"})).await;
    assert_eq!(res.status(), 201);
    let (_, page) = get_json(&s, "/api/v1/clusters?page=2&size=2").await;
    assert_eq!(page["pagination"], json!({"page": 2, "size": 2, "total": 3, "total_pages": 2}));
    assert_eq!(page["data"][0]["name"], "c");
    assert_eq!(page["data"][0]["effective_session_domain"], "gpu-c.example.com");
    let (_, page) = get_json(&s, "/api/v1/clusters?role=primary&status=connected").await;
    assert_eq!(page["pagination"]["total"], 2);
    assert_eq!(page["data"][0]["session_domain"], Value::Null);
    assert_eq!(page["data"][0]["effective_session_domain"], "sessions.example.com");
    for q in ["page=0", "size=101", "size=abc", "role=leader", "status=deleted"] {
        let res = s.client.get(s.url(&format!("/api/v1/clusters?{q}"))).bearer_auth(admin(&s)).send().await.unwrap();
        expect_error(res, 422, "validation_failed").await;
    }
    // Path ids that are not cluster ids, and clu_local when not bootstrapped.
    for bad in ["..%2F..%2Fetc", "clu_", "clu_%21%21", "clu_local"] {
        let res = s.client.get(s.url(&format!("/api/v1/clusters/{bad}"))).bearer_auth(admin(&s)).send().await.unwrap();
        expect_error(res, 404, "not_found").await;
    }
    s.stop().await;
}

#[tokio::test]
async fn patch_edits_and_credential_rotation() {
    let s = TestServer::start().await;
    let c = fake().await;
    let d = fake().await;
    let a = register_ok(&s, "a", &c).await;
    register_ok(&s, "b", &d).await;
    let id = a["id"].as_str().unwrap().to_string();
    let patch = |body: Value| {
        s.client.patch(s.url(&format!("/api/v1/clusters/{id}"))).bearer_auth(admin(&s)).json(&body).send()
    };

    let res = patch(json!({"name": "renamed", "role": "standby", "session_domain": "s.example.com"})).await.unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    assert_eq!(
        (v["name"].as_str(), v["role"].as_str(), v["session_domain"].as_str()),
        (Some("renamed"), Some("standby"), Some("s.example.com"))
    );
    let v: Value = patch(json!({"session_domain": ""})).await.unwrap().json().await.unwrap();
    assert_eq!(v["session_domain"], Value::Null);
    expect_error(patch(json!({"name": "b"})).await.unwrap(), 409, "conflict").await;
    expect_error(patch(json!({"colour": "blue"})).await.unwrap(), 422, "validation_failed").await;
    expect_error(patch(json!({"session_domain": "not a domain!"})).await.unwrap(), 422, "validation_failed").await;

    // New credentials for the same cluster: accepted, file replaced, id kept.
    let new_token = "feedfacefeedfacefeedfacefeedfacefeedface";
    c.knobs().allow_token(new_token);
    let rotated = c.kubeconfig_yaml().replace(c.token(), new_token);
    let res = patch(json!({"kubeconfig_b64": b64(&rotated)})).await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let file = s.data_dir().join("clusters").join(&id).join("kubeconfig");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), rotated);
    // Credentials of another cluster: refused, file untouched.
    let res = patch(json!({"kubeconfig_b64": b64(&d.kubeconfig_yaml())})).await.unwrap();
    let body = expect_error(res, 422, "kubeconfig_other_cluster").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("unregister"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), rotated);

    let res = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{id}/connection-test")))
        .bearer_auth(admin(&s))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let t: Value = res.json().await.unwrap();
    assert_eq!(t["cluster_id"], id.as_str());
    assert_eq!(t["status"], "connected");
    assert!(t["latency_ms"].as_u64().is_some() && t["checked_at"].as_str().is_some());
    s.stop().await;
}

#[tokio::test]
async fn delete_refused_while_sessions_live_then_accepted() {
    use gshare::sessions::model::Phase;
    use gshare::sessions::{SESSIONS, SessionRecord};
    let s = TestServer::start().await;
    let c = fake().await;
    let a = register_ok(&s, "a", &c).await;
    let id = a["id"].as_str().unwrap().to_string();
    let session = SessionRecord {
        phase: Phase::Running,
        ..SessionRecord::new("ses_01J0000000000000000000000A", &id, "a", "alice", 0)
    };
    let stored = session.clone();
    s.app().store.write(move |txn| SESSIONS.put(txn, &stored.id, &stored)).await.unwrap();
    let del = || s.client.delete(s.url(&format!("/api/v1/clusters/{id}"))).bearer_auth(admin(&s)).send();
    let body = expect_error(del().await.unwrap(), 409, "cluster_in_use").await;
    assert_eq!(body["error"]["details"]["sessions"], json!([session.id]));
    // Names for people: the message and session_list name the cluster and the session.
    assert_eq!(body["error"]["details"]["session_list"], json!([{"id": session.id, "name": null, "phase": "running"}]));
    assert!(body["error"]["message"].as_str().unwrap().starts_with("cluster \"a\" still has 1 live session"), "{body}");
    assert!(s.data_dir().join("clusters").join(&id).exists());

    let mut done = session.clone();
    done.phase = Phase::Terminated;
    s.app().store.write(move |txn| SESSIONS.put(txn, &done.id, &done)).await.unwrap();
    assert_eq!(del().await.unwrap().status(), 204);
    assert!(!s.data_dir().join("clusters").join(&id).exists());
    expect_error(del().await.unwrap(), 404, "not_found").await;
    let (status, _) = get_json(&s, &format!("/api/v1/clusters/{id}")).await;
    assert_eq!(status, 404);
    // History keeps the session and the cluster's name.
    let kept =
        s.app().store.read(move |txn| SESSIONS.get(txn, "ses_01J0000000000000000000000A")).await.unwrap().unwrap();
    assert_eq!(kept.cluster_name, "a");
    // The same cluster can be registered again (a new id).
    let again = register_ok(&s, "a", &c).await;
    assert_ne!(again["id"], a["id"]);
    // Every change is in the audit log with its actor and outcome.
    let (status, log) = get_json(&s, "/api/v1/audit?action=cluster.*&size=50").await;
    assert_eq!(status, 200, "{log}");
    let entries: Vec<(String, String, String)> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().into(),
                e["result"].as_str().unwrap().into(),
                e["target"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    for want in [("cluster.register", "success"), ("cluster.delete", "failure"), ("cluster.delete", "success")] {
        assert!(
            entries.iter().any(|(a, r, t)| (a.as_str(), r.as_str()) == want && t == &id),
            "{want:?} missing: {entries:?}"
        );
    }
    assert!(log["data"].as_array().unwrap().iter().all(|e| e["actor"] == "admin:admin"), "{log}");
    assert!(!log.to_string().contains(c.token()));
    s.stop().await;
}

#[tokio::test]
async fn kubeconfig_files_hot_load() {
    let s = TestServer::start().await;
    let c = fake().await;
    let a = register_ok(&s, "a", &c).await;
    let id = a["id"].as_str().unwrap().to_string();
    let dir = s.data_dir().join("clusters").join(&id);
    let file = dir.join("kubeconfig");
    let mut events = s.app().clusters.subscribe();

    // 1. Written in place.
    let t1 = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
    c.knobs().allow_token(t1);
    let v1 = c.kubeconfig_yaml().replace(c.token(), t1);
    std::fs::write(&file, &v1).unwrap();
    let want = gshare::clusters::kubeconfig::content_hash(v1.as_bytes());
    wait_for(&mut events, |e| matches!(e, ClusterEvent::ClientRebuilt { id: i, hash } if *i == id && *hash == want))
        .await;
    wait_for(
        &mut events,
        |e| matches!(e, ClusterEvent::Probed { id: i, status: ClusterStatus::Connected } if *i == id),
    )
    .await;

    // 2. Write-then-rename.
    let t2 = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
    c.knobs().allow_token(t2);
    let v2 = c.kubeconfig_yaml().replace(c.token(), t2);
    std::fs::write(dir.join(".kubeconfig.new"), &v2).unwrap();
    std::fs::rename(dir.join(".kubeconfig.new"), &file).unwrap();
    let want = gshare::clusters::kubeconfig::content_hash(v2.as_bytes());
    wait_for(&mut events, |e| matches!(e, ClusterEvent::ClientRebuilt { id: i, hash } if *i == id && *hash == want))
        .await;

    // 3. A Kubernetes-style `..data` symlink swap.
    let t3 = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3";
    c.knobs().allow_token(t3);
    let v3 = c.kubeconfig_yaml().replace(c.token(), t3);
    std::fs::create_dir(dir.join("..2026_a")).unwrap();
    std::fs::write(dir.join("..2026_a/kubeconfig"), &v3).unwrap();
    std::os::unix::fs::symlink("..2026_a", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("..data/kubeconfig", &file).unwrap();
    let want = gshare::clusters::kubeconfig::content_hash(v3.as_bytes());
    wait_for(&mut events, |e| matches!(e, ClusterEvent::ClientRebuilt { id: i, hash } if *i == id && *hash == want))
        .await;
    let v4 = c.kubeconfig_yaml();
    std::fs::create_dir(dir.join("..2026_b")).unwrap();
    std::fs::write(dir.join("..2026_b/kubeconfig"), &v4).unwrap();
    std::os::unix::fs::symlink("..2026_b", dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    let want = gshare::clusters::kubeconfig::content_hash(v4.as_bytes());
    wait_for(&mut events, |e| matches!(e, ClusterEvent::ClientRebuilt { id: i, hash } if *i == id && *hash == want))
        .await;

    // Not YAML: the cluster goes unreachable with the kubeconfig stage named.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, "{{{{ not yaml").unwrap();
    wait_detail(&s, &mut events, &id, |d| {
        d["status"] == "unreachable"
            && d["last_error"]["stage"] == "kubeconfig"
            && d["last_error"]["cause"].as_str().is_some_and(|c| c.contains("YAML"))
    })
    .await;

    // A symlink pointing outside the directory is refused.
    let outside = s.dir.path().join("outside.kubeconfig");
    std::fs::write(&outside, c.kubeconfig_yaml()).unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&outside, &file).unwrap();
    wait_detail(&s, &mut events, &id, |d| {
        d["status"] == "unreachable" && d["last_error"]["cause"].as_str().is_some_and(|c| c.contains("outside"))
    })
    .await;

    // Deleted: unreachable, "kubeconfig missing" (and the event says so).
    std::fs::remove_file(&file).unwrap();
    wait_for(&mut events, |e| matches!(e, ClusterEvent::KubeconfigMissing { id: i } if *i == id)).await;
    let detail = wait_detail(&s, &mut events, &id, |d| d["last_error"]["cause"] == "kubeconfig missing").await;
    assert_eq!(detail["status"], "unreachable");

    // Restored: connected again.
    std::fs::write(&file, c.kubeconfig_yaml()).unwrap();
    wait_detail(&s, &mut events, &id, |d| d["status"] == "connected").await;
    s.stop().await;
}

#[tokio::test]
async fn unknown_directories_are_listed_never_registered() {
    let s = TestServer::start().await;
    let c = fake().await;
    let mut events = s.app().clusters.subscribe();
    let stray = gshare::clusters::ClusterId::mint().to_string();
    let dir = s.data_dir().join("clusters").join(&stray);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), c.kubeconfig_yaml()).unwrap();
    wait_for(&mut events, |e| matches!(e, ClusterEvent::Unclaimed { name } if *name == stray)).await;
    let (_, unclaimed) = get_json(&s, "/api/v1/clusters/unclaimed").await;
    assert_eq!(unclaimed[0]["name"], stray.as_str());
    let (_, list) = get_json(&s, "/api/v1/clusters").await;
    assert_eq!(list["pagination"]["total"], 0);
    s.stop().await;
}

#[tokio::test]
async fn local_cluster_is_bootstrapped_from_local_kubeconfig() {
    let c = fake().await;
    let tmp = tempfile::tempdir().unwrap();
    let kc = tmp.path().join("k3s.yaml");
    std::fs::write(&kc, c.kubeconfig_yaml()).unwrap();
    let kc_str = kc.to_str().unwrap().to_string();
    let s = TestServer::start_with(&[("GSHARE_BOOTSTRAP_LOCAL_CLUSTER", "true"), ("GSHARE_LOCAL_KUBECONFIG", &kc_str)])
        .await;
    let (status, detail) = get_json(&s, "/api/v1/clusters/clu_local").await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["name"], "local");
    assert_eq!(detail["api_server"], c.server_url());
    let res =
        s.client.post(s.url("/api/v1/clusters/clu_local/connection-test")).bearer_auth(admin(&s)).send().await.unwrap();
    let t: Value = res.json().await.unwrap();
    assert_eq!(t["status"], "connected", "{t}");
    // The kubeconfig stays where it is: nothing is copied into the kubeconfig directory.
    assert!(kubeconfig_dirs(&s).is_empty());
    s.stop().await;

    // Asked for, but with nothing to reach the cluster through: a clear start-up error.
    let dir = tempfile::tempdir().unwrap();
    let config = gshare::config::Config::for_data_dir(
        dir.path(),
        &[("GSHARE_LISTEN", "127.0.0.1:0"), ("GSHARE_BOOTSTRAP_LOCAL_CLUSTER", "true")],
    )
    .unwrap();
    let err = gshare::RunningServer::start(config, gshare::clock::Clock::system()).await.err().expect("refused");
    assert!(err.to_string().contains("local_kubeconfig"), "{err}");
}

/// Stops the server and starts a new one on the same data directory (what a restart after a
/// crash sees on disk).
async fn restart(s: &mut TestServer) {
    if let Some(running) = s.server.take() {
        running.stop().await;
    }
    let config = gshare::config::Config::for_data_dir(&s.data_dir(), &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    // The old server's tasks release the state file as they wind down; retry the open until then.
    let running = tokio::time::timeout(WAIT, async {
        loop {
            match gshare::RunningServer::start(config.clone(), s.clock.clone()).await {
                Ok(r) => return r,
                Err(gshare::StartError::Store(gshare::store::StoreError::AlreadyOpen { .. })) => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the old server released the state file");
    s.base = running.base_url();
    s.server = Some(running);
}

#[tokio::test]
async fn registrations_killed_mid_way_leave_no_unclaimed_directory() {
    let mut s = TestServer::start().await;
    let c = fake().await;
    let d = fake().await;
    let kept = register_ok(&s, "kept", &c).await["id"].as_str().unwrap().to_string();
    let late = register_ok(&s, "late", &d).await["id"].as_str().unwrap().to_string();
    let root = s.data_dir().join("clusters");
    // kill -9 before the row committed: the registration's file write, and nothing after it.
    let lost = gshare::clusters::ClusterId::mint();
    let _ = gshare::clusters::kubeconfig::stage_file(&root, &lost, &c.kubeconfig_yaml()).unwrap();
    // kill -9 after the row committed but before the file was published.
    let staged_late = format!("{}{late}", gshare::clusters::kubeconfig::STAGING_PREFIX);
    std::fs::rename(root.join(&late), root.join(&staged_late)).unwrap();
    assert!(!kubeconfig_dirs(&s).contains(&lost.to_string()), "a crash before the commit left a cluster directory");
    restart(&mut s).await;
    let mut dirs = kubeconfig_dirs(&s);
    dirs.sort();
    let mut want = vec![kept.clone(), late.clone()];
    want.sort();
    assert_eq!(dirs, want);
    let (_, unclaimed) = get_json(&s, "/api/v1/clusters/unclaimed").await;
    assert_eq!(unclaimed, json!([]));
    let res =
        s.client.post(s.url(&format!("/api/v1/clusters/{late}/connection-test"))).bearer_auth(admin(&s)).send().await;
    let t: Value = res.unwrap().json().await.unwrap();
    assert_eq!(t["status"], "connected", "{t}");
    s.stop().await;
}

/// A plain-TCP listener that reads each connection's request head (or whatever arrives before
/// EOF), records whether an `Authorization` header was in it, and closes the connection.
async fn credential_trap() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = sock.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    // A TLS ClientHello (0x16) gets no answer: closing fails the handshake at once.
                    if buf[0] == 0x16 || buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() > 64 * 1024 {
                        break;
                    }
                }
                record.lock().unwrap().push(String::from_utf8_lossy(&buf).to_ascii_lowercase());
            });
        }
    });
    (addr.to_string(), seen)
}

#[tokio::test]
async fn patching_api_server_never_sends_the_stored_credential_to_an_unproven_address() {
    let s = TestServer::start().await;
    let c = fake().await;
    let id = register_ok(&s, "a", &c).await["id"].as_str().unwrap().to_string();
    let (trap, seen) = credential_trap().await;
    let patch = |body: Value| {
        s.client.patch(s.url(&format!("/api/v1/clusters/{id}"))).bearer_auth(admin(&s)).json(&body).send()
    };
    let no_credential_seen = || {
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.iter().all(|head| !head.contains("authorization:") && !head.contains(c.token())),
            "the stored credential reached an unproven address: {seen:?}"
        );
    };
    // Plain HTTP: refused before any connection.
    let res = patch(json!({"api_server": format!("http://{trap}")})).await.unwrap();
    no_credential_seen();
    let body = expect_error(res, 422, "validation_failed").await;
    assert!(body.to_string().contains("plain HTTP"), "{body}");
    // HTTPS: the handshake must be verified by the kubeconfig's CA first, which the trap cannot do.
    let res = patch(json!({"api_server": format!("https://{trap}")})).await.unwrap();
    assert_eq!(res.status(), 422, "{}", res.text().await.unwrap());
    // A kubeconfig that skips TLS verification keeps its token at its own address.
    let insecure =
        c.kubeconfig_yaml().replace("certificate-authority-data:", "insecure-skip-tls-verify: true\n    x-ca:");
    let res = patch(json!({"kubeconfig_b64": b64(&insecure)})).await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let res = patch(json!({"api_server": format!("https://{trap}")})).await.unwrap();
    let body = expect_error(res, 422, "validation_failed").await;
    assert!(body.to_string().contains("own CA"), "{body}");
    // The connection test still goes to the registered address only.
    let res = s.client.post(s.url(&format!("/api/v1/clusters/{id}/connection-test"))).bearer_auth(admin(&s)).send();
    assert_eq!(res.await.unwrap().status(), 200);
    no_credential_seen();
    s.stop().await;
}
