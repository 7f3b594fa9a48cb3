//! The operator on a cluster: `gshare operator manifests` through real kubectl, attach / re-attach
//! / detach against the fake API server, refusals (no public_url, no rights, foreign CRD, cluster
//! lost mid-attach, live sessions), connection state, token minting and clock-driven renewal.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::fake_kube::Harness;
use crate::support::{TestServer, expect_error, gshare, stderr, stdout};

pub(crate) const PUBLIC: &str = "https://gshare.example.test";

pub(crate) fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

/// `/metrics` as an admin sees it (per-cluster series with their cluster id).
async fn admin_metrics(s: &TestServer) -> String {
    s.client.get(s.url("/metrics")).bearer_auth(admin(s)).send().await.unwrap().text().await.unwrap()
}

pub(crate) async fn server() -> TestServer {
    TestServer::start_with(&[
        ("GSHARE_PUBLIC_URL", PUBLIC),
        ("GSHARE_SESSION_DOMAIN", "lab.example.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
    ])
    .await
}

pub(crate) async fn fake(name: &str) -> FakeCluster {
    FakeCluster::start(ClusterSpec { name: name.into(), ..ClusterSpec::default() }).await.unwrap()
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

pub(crate) async fn register(s: &TestServer, name: &str, c: &FakeCluster) -> String {
    let body = json!({"name": name, "role": "primary", "kubeconfig_b64": STANDARD.encode(c.kubeconfig_yaml())});
    send(s, reqwest::Method::POST, "/api/v1/clusters", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

pub(crate) async fn attach(s: &TestServer, id: &str, query: &str) -> reqwest::Response {
    call(s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/attach{query}"), None).await
}

pub(crate) fn results(report: &Value) -> Vec<(String, String)> {
    report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["object"].as_str().unwrap().to_string(), o["result"].as_str().unwrap().to_string()))
        .collect()
}

pub(crate) fn count(c: &FakeCluster, group: &str, version: &str, plural: &str) -> usize {
    c.store().list(group, version, plural, None).len()
}

pub(crate) fn get(
    c: &FakeCluster,
    group: &str,
    version: &str,
    plural: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    c.store().list(group, version, plural, ns).into_iter().find(|o| o["metadata"]["name"] == name)
}

pub(crate) fn secret_token(c: &FakeCluster) -> String {
    let s = get(c, "", "v1", "secrets", Some("gshare-system"), "gshare-operator-internal-jwt").expect("token Secret");
    let raw = STANDARD.decode(s["data"]["internal-jwt"].as_str().unwrap()).unwrap();
    String::from_utf8(raw).unwrap()
}

pub(crate) async fn operator_view(s: &TestServer, id: &str) -> Value {
    send(s, reqwest::Method::GET, &format!("/api/v1/clusters/{id}"), None, 200).await["operator"].clone()
}

/// The CLI prints the chart's objects; real kubectl accepts them (client dry run) and applies them
/// to the fake; without a reachable control-plane URL it refuses, saying what to set.
#[tokio::test]
async fn manifests_pass_kubectl_and_apply_to_the_fake() {
    let h = Harness::default().await;
    let dir = tempfile::tempdir().unwrap();
    let id = "clu_01J0000000000000000000000A";
    let out = gshare(
        dir.path(),
        &["operator", "manifests", "--cluster-id", id, "--session-domain", "lab.example.test"],
        &[("GSHARE_PUBLIC_URL", PUBLIC), ("OPERATOR_TOKEN", "header.payload.sig")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert!(!dir.path().join("keys").exists(), "manifests must not create keys");

    for args in [&["apply", "--dry-run=client", "-f", "-"][..], &["apply", "-f", "-"][..]] {
        let mut child = h
            .kubectl_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains("deployment.apps/gshare-operator"), "{text}");
        assert!(text.contains("customresourcedefinition.apiextensions.k8s.io/gshareimagebuilds.gshare.io"), "{text}");
    }
    let c = &h.cluster;
    assert_eq!(count(c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 3);
    let dep = get(c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").unwrap();
    let args = &dep["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(args.as_array().unwrap().iter().any(|a| a == &json!(format!("--cluster-id={id}"))), "{args}");
    assert!(args.as_array().unwrap().iter().any(|a| a == &json!(format!("--sot-endpoint={PUBLIC}"))), "{args}");
    assert_eq!(secret_token(c), "header.payload.sig");
    let ns = get(c, "", "v1", "namespaces", None, "gshare-sessions").unwrap();
    assert_eq!(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "baseline");

    // The default public_url is loopback: refused, naming the setting.
    let out = gshare(dir.path(), &["operator", "manifests", "--cluster-id", id, "--session-domain", "x.test"], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("set public_url (GSHARE_PUBLIC_URL)"), "{}", stderr(&out));
}

/// Attach applies every object by server-side apply, re-attach changes nothing, the state moves
/// from silent to connected on a callback, detach waits for live sessions and removes what it made.
#[tokio::test]
async fn attach_reattach_connect_and_detach() {
    let s = server().await;
    let c = fake("gpu-a").await;
    let id = register(&s, "gpu-a", &c).await;
    assert_eq!(operator_view(&s, &id).await["state"], "not_attached");

    let res = attach(&s, &id, "").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    let first = results(&report);
    assert!(first.iter().all(|(_, r)| r == "created"), "{first:?}");
    assert_eq!(report["changed"].as_u64().unwrap() as usize, first.len());
    assert_eq!(count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 3);
    let dep = get(&c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").unwrap();
    let managers: Vec<&str> =
        dep["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|m| m["manager"].as_str()).collect();
    assert_eq!(managers, ["gshare"]);
    let token = secret_token(&c);
    let claims = s.app().auth.internal.verify(&token).unwrap();
    assert_eq!(claims.sub, format!("operator:{id}"));

    // Attached, no callback yet: silent, with causes.
    let view = operator_view(&s, &id).await;
    assert_eq!(view["state"], "silent", "{view}");
    assert!(view["likely_causes"].as_array().unwrap().iter().any(|c| c.as_str().unwrap().contains(PUBLIC)), "{view}");

    // Converges: a second attach changes nothing, the token included.
    let again: Value = attach(&s, &id, "").await.json().await.unwrap();
    assert!(results(&again).iter().all(|(_, r)| r == "unchanged"), "{again}");
    assert_eq!(again["changed"], 0);
    assert_eq!(secret_token(&c), token);

    // The operator calls back with its token: connected.
    let res = s
        .client
        .post(s.url("/internal/inventory/nodes"))
        .bearer_auth(&token)
        .json(&json!({"node_id": "gpu-node-0", "node_cpu": 8, "node_ready": true, "cluster_id": id}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let view = operator_view(&s, &id).await;
    assert_eq!(view["state"], "connected", "{view}");
    let list = send(&s, reqwest::Method::GET, "/api/v1/clusters", None, 200).await;
    assert_eq!(list["data"][0]["operator"]["state"], "connected");

    // Audited.
    let audit = send(&s, reqwest::Method::GET, "/api/v1/audit", None, 200).await;
    let actions: Vec<&str> = audit["data"].as_array().unwrap().iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions.iter().filter(|a| **a == "cluster.attach").count(), 2, "{actions:?}");

    // A live session blocks detach, named in the answer.
    let off = send(
        &s,
        reqwest::Method::POST,
        "/api/v1/offerings",
        Some(json!({"name": "cpu", "resource_class": "cpu", "image": "ghcr.io/lab/jupyter:4", "cpu": 1, "mem_gb": 2})),
        201,
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sid = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = expect_error(
        call(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach"), None).await,
        409,
        "cluster_in_use",
    )
    .await;
    assert!(body["error"]["message"].as_str().unwrap().contains(&sid), "{body}");
    assert_eq!(count(&c, "apps", "v1", "deployments"), 1, "nothing removed");
    send(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;

    let gone = send(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach"), None, 200).await;
    assert!(results(&gone).iter().all(|(_, r)| r == "deleted"), "{gone}");
    assert_eq!(count(&c, "apps", "v1", "deployments"), 0);
    assert_eq!(count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    assert!(get(&c, "", "v1", "namespaces", None, "gshare-system").is_none());
    assert!(get(&c, "", "v1", "namespaces", None, "kube-system").is_some());
    assert_eq!(operator_view(&s, &id).await["state"], "connected", "a recent callback still counts");
    expect_error(
        call(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach"), None).await,
        409,
        "not_attached",
    )
    .await;
}

/// Each refusal names what is wrong and leaves the cluster as it was; a cluster lost mid-attach
/// reports what was applied and a re-run converges.
#[tokio::test]
async fn attach_refusals_and_recovery() {
    // No reachable public_url: names the setting.
    let plain = TestServer::start_with(&[("GSHARE_SESSION_DOMAIN", "lab.example.test")]).await;
    let c0 = fake("gpu-z").await;
    let id0 = register(&plain, "gpu-z", &c0).await;
    let body = expect_error(attach(&plain, &id0, "").await, 422, "setting_required").await;
    assert_eq!(body["error"]["details"]["setting"], "public_url");
    assert!(body["error"]["message"].as_str().unwrap().contains("GSHARE_PUBLIC_URL"), "{body}");
    assert_eq!(count(&c0, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    plain.stop().await;

    let s = server().await;
    let c = fake("gpu-b").await;
    let id = register(&s, "gpu-b", &c).await;
    expect_error(attach(&s, "clu_01J0000000000000000000000Z", "").await, 404, "not_found").await;

    // Credentials that may not create ClusterRoles: the object and verb are named; nothing applied.
    c.knobs().forbid("clusterroles", true);
    let body = expect_error(attach(&s, &id, "").await, 422, "cluster_forbidden").await;
    let msg = body["error"]["message"].as_str().unwrap();
    // Every verb apply uses is checked (get, create, patch), each named.
    assert!(msg.contains("may not get clusterroles.rbac.authorization.k8s.io"), "{msg}");
    assert!(msg.contains("; create clusterroles.rbac.authorization.k8s.io"), "{msg}");
    assert!(msg.contains("ClusterRole/gshare-controller-inventory"), "{msg}");
    let verbs: Vec<&str> =
        body["error"]["details"]["denied"].as_array().unwrap().iter().map(|d| d["verb"].as_str().unwrap()).collect();
    assert_eq!(verbs, ["get", "create", "patch"]);
    assert_eq!(count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    assert!(get(&c, "", "v1", "namespaces", None, "gshare-system").is_none());
    c.knobs().forbid("clusterroles", false);

    // A GShareSession CRD at another version: reported, kept, replaced only with force.
    let old: Value = serde_yaml::from_str(gshare::operator::crds::GSHARESESSIONS.text).unwrap();
    let mut old = old;
    old["spec"]["versions"][0]["name"] = json!("v1alpha1");
    let client = crate::fake_kube::kube_client_for(&{
        let p = std::env::temp_dir().join(format!("kc-{}", ulid::Ulid::new()));
        std::fs::write(&p, c.kubeconfig_yaml()).unwrap();
        p
    })
    .await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let obj: DynamicObject = serde_json::from_value(old).unwrap();
    Api::<DynamicObject>::all_with(client, &ar).create(&PostParams::default(), &obj).await.unwrap();
    let body = expect_error(attach(&s, &id, "").await, 409, "crd_conflict").await;
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("gsharesessions.gshare.io") && msg.contains("v1alpha1") && msg.contains("force=true"),
        "{msg}"
    );
    let crd =
        get(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions", None, "gsharesessions.gshare.io").unwrap();
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1", "left alone");
    assert_eq!(count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 1);

    // Forced, and the cluster goes away after 5 writes: the answer lists what was applied.
    c.knobs().unreachable_after_writes(Some(5));
    let body = expect_error(attach(&s, &id, "?force=true").await, 502, "cluster_unreachable").await;
    let done = body["error"]["details"]["done"].as_array().unwrap();
    assert_eq!(done.len(), 5, "{body}");
    assert_eq!(done[0], "CustomResourceDefinition/gsharesessions.gshare.io");
    assert!(body["error"]["message"].as_str().unwrap().contains("after 5 objects"), "{body}");
    let objects = body["error"]["details"]["objects"].as_array().unwrap();
    assert_eq!(objects[5]["result"], "failed");
    assert_eq!(objects[6]["result"], "not_attempted");
    assert_eq!(operator_view(&s, &id).await["state"], "attach_incomplete");

    // Back: the re-run converges (what was applied is unchanged, the rest is created).
    c.knobs().set_unreachable(false);
    let report: Value = attach(&s, &id, "?force=true").await.json().await.unwrap();
    let r = results(&report);
    assert!(r[..5].iter().all(|(_, x)| x == "unchanged"), "{r:?}");
    assert!(r[5..].iter().all(|(_, x)| x == "created"), "{r:?}");
    let crd =
        get(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions", None, "gsharesessions.gshare.io").unwrap();
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1");
    // The CRD was there before attach: detach keeps it.
    let gone = send(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach"), None, 200).await;
    assert!(results(&gone).contains(&("CustomResourceDefinition/gsharesessions.gshare.io".into(), "kept".into())));
    assert_eq!(count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 1);
}

/// Renewal runs on the project's clock: at half the token's life a new token lands in the Secret;
/// an unreachable cluster backs off and shows the error, the expiry and a /metrics failure count.
#[tokio::test]
async fn tokens_renew_on_the_clock_with_backoff() {
    let s = server().await;
    let c = fake("gpu-c").await;
    let id = register(&s, "gpu-c", &c).await;
    assert_eq!(attach(&s, &id, "").await.status(), 200);
    let first = secret_token(&c);
    let op = s.app().operator.clone();
    assert!(op.renew_due().await.unwrap().is_empty(), "fresh token: nothing due");

    s.clock.advance(Duration::from_secs(3 * 86400 + 12 * 3600 + 1)); // half of 7 days
    assert_eq!(op.renew_due().await.unwrap(), vec![id.clone()]);
    let second = secret_token(&c);
    assert_ne!(first, second);
    let exp2 = s.app().auth.internal.verify(&second).unwrap().exp;
    let view = operator_view(&s, &id).await;
    assert_eq!(view["token"]["expires_at"], gshare::clock::rfc3339_ms(exp2 * 1000));

    // Due again, but the cluster is unreachable: the error and the unchanged expiry are shown.
    s.clock.advance(Duration::from_secs(3 * 86400 + 12 * 3600 + 1));
    c.knobs().set_unreachable(true);
    assert!(op.renew_due().await.unwrap().is_empty());
    let view = operator_view(&s, &id).await;
    assert!(view["renewal_error"].as_str().unwrap().contains("unreachable"), "{view}");
    assert_eq!(view["token"]["expires_at"], gshare::clock::rfc3339_ms(exp2 * 1000));
    let metrics = admin_metrics(&s).await;
    assert!(metrics.contains(&format!("gshare_operator_token_renewal_failures{{cluster_id=\"{id}\"}} 1")), "{metrics}");
    assert!(metrics.contains("gshare_operator_token_renewals_total{result=\"failed\"} 1"), "{metrics}");

    // Backoff: no attempt before it runs out, then one (still failing: 2), then success.
    assert!(op.renew_due().await.unwrap().is_empty());
    assert!(s.get("/metrics").await.text().await.unwrap().contains("renewals_total{result=\"failed\"} 1"));
    s.clock.advance(Duration::from_secs(31));
    op.renew_due().await.unwrap();
    assert!(admin_metrics(&s).await.contains(&format!("failures{{cluster_id=\"{id}\"}} 2")));
    c.knobs().set_unreachable(false);
    s.clock.advance(Duration::from_secs(61));
    assert_eq!(op.renew_due().await.unwrap(), vec![id.clone()]);
    assert_ne!(secret_token(&c), second);
    let view = operator_view(&s, &id).await;
    assert!(view["renewal_error"].is_null(), "{view}");

    // After `keys rotate`, the next pass moves the cluster to the new key at once.
    let kid_before = s.app().auth.internal.signing_kid().unwrap();
    gshare::auth::internal_ring(&s.app().config).rotate(s.clock.now()).unwrap();
    s.app().auth.internal.reload_if_changed().unwrap();
    assert_ne!(s.app().auth.internal.signing_kid().unwrap(), kid_before);
    assert_eq!(op.renew_due().await.unwrap(), vec![id.clone()]);
    let kid = jsonwebtoken::decode_header(secret_token(&c)).unwrap().kid.unwrap();
    assert_eq!(Some(kid), s.app().auth.internal.signing_kid());
}

/// Tokens through the server (audited, TTL at most 30 days), the CLI using it, the CLI refusing
/// to make a key ring, and refused callbacks shown on the cluster they claimed.
#[tokio::test]
async fn operator_tokens_and_rejections() {
    let s = server().await;
    let c = fake("gpu-d").await;
    let id = register(&s, "gpu-d", &c).await;
    let path = format!("/api/v1/clusters/{id}/operator-token");
    let body = expect_error(
        call(&s, reqwest::Method::POST, &path, Some(json!({"ttl": "31d"}))).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["error"]["details"]["errors"][0]["loc"], json!(["body", "ttl"]));
    let v = send(&s, reqwest::Method::POST, &path, Some(json!({"ttl": "24h"})), 201).await;
    let claims = s.app().auth.internal.verify(v["token"].as_str().unwrap()).unwrap();
    assert_eq!(claims.sub, format!("operator:{id}"));
    assert!((claims.exp - s.clock.now() - 86400).abs() <= 2);
    expect_error(
        call(&s, reqwest::Method::POST, "/api/v1/clusters/clu_01J0000000000000000000000Z/operator-token", None).await,
        404,
        "not_found",
    )
    .await;

    // The CLI goes through the running server.
    let addr = s.app_addr().to_string();
    let (dir, id2) = (s.data_dir(), id.clone());
    let out = tokio::task::spawn_blocking(move || {
        gshare(&dir, &["token", "operator", "--cluster-id", &id2, "--ttl", "2h"], &[("GSHARE_LISTEN", &addr)])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("from the server"), "{}", stderr(&out));
    let tok = stdout(&out).lines().last().unwrap().to_string();
    assert_eq!(s.app().auth.internal.verify(&tok).unwrap().sub, format!("operator:{id}"));
    let audit = send(&s, reqwest::Method::GET, "/api/v1/audit", None, 200).await;
    let minted = audit["data"].as_array().unwrap().iter().filter(|e| e["action"] == "cluster.operator_token").count();
    assert_eq!(minted, 2);

    // Offline against the wrong directory: refused, naming it, and nothing created.
    let empty = tempfile::tempdir().unwrap();
    let wrong = empty.path().join("not-the-data-dir");
    let out = gshare(&wrong, &["token", "operator", "--cluster-id", &id], &[("GSHARE_LISTEN", "127.0.0.1:1")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&wrong.join("keys").join("internal").display().to_string()), "{}", stderr(&out));
    assert!(!wrong.exists(), "no key ring may be created");

    // A token from another control plane claiming this cluster: 401, and shown on the cluster.
    let (foreign, _) = gshare::auth::tokens::TokenAuthority::open(
        gshare::auth::tokens::AUD_INTERNAL,
        gshare::auth::keys::KeyRingDir::new(empty.path().join("ring")),
        None,
        s.clock.clone(),
    )
    .unwrap();
    let bad = foreign.mint(&format!("operator:{id}"), Duration::from_secs(600)).unwrap();
    let res = s
        .client
        .post(s.url("/internal/inventory/nodes"))
        .bearer_auth(&bad)
        .json(&json!({"node_id": "n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(
        send(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/attach"), None, 200).await["changed"]
            .as_u64()
            .map(|n| n > 0),
        Some(true)
    );
    let view = operator_view(&s, &id).await;
    assert_eq!(view["state"], "silent");
    assert_eq!(view["last_token_rejection"]["reason"], "unknown_kid", "{view}");
    assert_eq!(view["last_token_rejection"]["counts"]["unknown_kid"], 1, "{view}");
    // A forged token claiming this cluster writes no text of its own (its kid),
    // only a count; the real cause stays visible beside it.
    let header = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        br#"{"alg":"RS256","kid":"<script>alert(1)</script> your operator is fine, ignore this"}"#,
    );
    let claims = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        format!(r#"{{"sub":"operator:{id}","aud":"gshare-internal","exp":9999999999}}"#),
    );
    for _ in 0..50 {
        let forged = format!("{header}.{claims}.c2ln");
        let res = s
            .client
            .post(s.url("/internal/inventory/nodes"))
            .bearer_auth(&forged)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
    }
    let view = operator_view(&s, &id).await;
    let text = view.to_string();
    assert!(!text.contains("script") && !text.contains("ignore this"), "{view}");
    assert_eq!(view["last_token_rejection"]["counts"]["unknown_kid"], 51, "{view}");
    assert!(view["likely_causes"][0].as_str().unwrap().contains("rejected"), "{view}");
}

/// `gshare keys prune` after `keys rotate`: refused, naming the cluster, while an attached cluster's
/// live token still needs the old key (through the running server and from the state file), allowed
/// for the clusters that renewal moved to the new key, and forced with `--force`.
#[tokio::test]
async fn keys_prune_refuses_while_a_live_operator_token_needs_the_old_key() {
    let s = server().await;
    let (ca, cb) = (fake("gpu-pa").await, fake("gpu-pb").await);
    let a = register(&s, "gpu-pa", &ca).await;
    let b = register(&s, "gpu-pb", &cb).await;
    assert_eq!(attach(&s, &a, "").await.status(), 200);
    assert_eq!(attach(&s, &b, "").await.status(), 200);
    let old = s.app().auth.internal.signing_kid().unwrap();

    // Rotated 10 s ago; cluster A moves to the new key, B is unreachable and keeps the old one.
    let ring = gshare::auth::internal_ring(&s.app().config);
    ring.rotate(s.clock.now() - 10).unwrap();
    s.app().auth.internal.reload_if_changed().unwrap();
    cb.knobs().set_unreachable(true);
    assert_eq!(s.app().operator.renew_due().await.unwrap(), vec![a.clone()]);

    let prune = |extra: &[&str], listen: String| {
        let dir = s.data_dir();
        let mut args = vec!["keys", "prune", "--older-than", "5s"];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            gshare(&dir, &args, &[("GSHARE_LISTEN", &listen)])
        })
    };
    let listen = s.app_addr().to_string();
    let out = prune(&[], listen.clone()).await.unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("cluster gpu-pb ({b})")) && err.contains(&old), "{err}");
    assert!(!err.contains(&a), "cluster A holds a token under the new key: {err}");
    assert!(err.contains("--force"), "{err}");
    assert!(ring.load().unwrap().entries.iter().any(|(e, _)| e.kid == old), "nothing pruned");

    // The same from the state file with the server stopped, then forced.
    let crate::support::TestServer { server, dir, .. } = s;
    server.unwrap().stop().await;
    let data = dir.path().join("data");
    // The server's background tasks let go of the state file once they see the stop.
    let state = data.join("gshare.redb");
    let mut released = false;
    for _ in 0..100_000 {
        match gshare::store::Store::open(&state, gshare::MIGRATIONS) {
            Ok(store) => {
                drop(store);
                released = true;
                break;
            }
            Err(gshare::store::StoreError::AlreadyOpen { .. }) => tokio::task::yield_now().await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(released, "the stopped server still holds {}", state.display());
    let out = gshare(&data, &["keys", "prune", "--older-than", "5s"], &[("GSHARE_LISTEN", "127.0.0.1:1")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("cluster gpu-pb ({b})")), "{}", stderr(&out));
    let out = gshare(&data, &["keys", "prune", "--older-than", "5s", "--force"], &[("GSHARE_LISTEN", "127.0.0.1:1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(&b), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("pruned {old}"));
    assert!(ring.load().unwrap().entries.iter().all(|(e, _)| e.kid != old));
    // Nothing left to prune; a bad duration is named.
    let out = gshare(&data, &["keys", "prune"], &[("GSHARE_LISTEN", "127.0.0.1:1")]);
    assert_eq!(stdout(&out).trim(), "nothing to prune");
    let out = gshare(&data, &["keys", "prune", "--older-than", "soon"], &[("GSHARE_LISTEN", "127.0.0.1:1")]);
    assert!(!out.status.success() && stderr(&out).contains("--older-than"), "{}", stderr(&out));
}

fn script(name: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hack").join(name))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

async fn run(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// The scripts with upstream's interfaces: --help, a missing variable named, and each one working
/// against the fake (deploy by manifests + kubectl, register + attach through the server, a key).
#[tokio::test]
async fn hack_scripts_with_upstreams_interfaces() {
    for (name, first_missing) in
        [("deploy-operator.sh", "CLUSTER_ID"), ("attach-cluster.sh", "GSHARE_URL"), ("gen-secrets.sh", "OUT")]
    {
        let out = run(script(name, &[], &["--help"])).await;
        assert!(out.status.success() && stdout(&out).starts_with("usage:"), "{name}: {}", stdout(&out));
        let out = run(script(name, &[], &[])).await;
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(stderr(&out).contains(&format!("{first_missing} is not set")), "{name}: {}", stderr(&out));
    }
    let bin = env!("CARGO_BIN_EXE_gshare");

    // deploy-operator.sh: gshare operator manifests | kubectl apply, against the fake.
    let h = Harness::default().await;
    let kc = h.kubeconfig.display().to_string();
    let base = [
        ("GSHARE", bin),
        ("GSHARE_CONFIG", "/dev/null"),
        ("HOME", h.dir.path().to_str().unwrap()),
        ("CLUSTER_ID", "clu_01J0000000000000000000000B"),
        ("SOT_ENDPOINT", PUBLIC),
        ("OPERATOR_TOKEN", "a.b.c"),
        ("KUBECONFIG", kc.as_str()),
    ];
    let out = run(script("deploy-operator.sh", &base, &[])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("SESSION_DOMAIN is not set"), "{}", stderr(&out));
    let mut env = base.to_vec();
    env.push(("SESSION_DOMAIN", "lab.example.test"));
    env.push(("IMAGE", "registry.lan/gshare-operator:1"));
    let out = run(script("deploy-operator.sh", &env, &[])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let dep = get(&h.cluster, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").unwrap();
    assert_eq!(dep["spec"]["template"]["spec"]["containers"][0]["image"], "registry.lan/gshare-operator:1");
    assert_eq!(secret_token(&h.cluster), "a.b.c");

    // attach-cluster.sh: register and attach through a running server.
    let s = server().await;
    let c = fake("gpu-e").await;
    let kc_path = h.file("gpu-e.kubeconfig", &c.kubeconfig_yaml());
    let token = admin(&s);
    let env = [
        ("GSHARE_URL", s.base.as_str()),
        ("ADMIN_TOKEN", token.as_str()),
        ("NAME", "gpu-e"),
        ("KUBECONFIG", kc_path.to_str().unwrap()),
    ];
    let out = run(script("attach-cluster.sh", &env, &[])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).lines().last().unwrap().to_string();
    assert!(id.starts_with("clu_"), "{id}");
    assert!(get(&c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").is_some());
    assert_eq!(operator_view(&s, &id).await["state"], "silent");
    // A second registration of the same cluster fails with the server's reason.
    let out = run(script("attach-cluster.sh", &env, &[])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("registration failed (409)"), "{}", stderr(&out));

    // gen-secrets.sh: a PEM and a config snippet the server accepts, both private.
    let out_pem = h.dir.path().join("internal.pem");
    let out = run(script("gen-secrets.sh", &[("OUT", out_pem.to_str().unwrap()), ("KID", "site-1")], &[])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "site-1");
    use std::os::unix::fs::PermissionsExt;
    for f in [out_pem.clone(), h.dir.path().join("internal.pem.toml")] {
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
    let snippet = std::fs::read_to_string(h.dir.path().join("internal.pem.toml")).unwrap();
    let config =
        gshare::config::Config::from_toml(std::path::Path::new("x.toml"), &snippet, &Default::default()).unwrap();
    assert_eq!(config.internal_jwt_kid.as_deref(), Some("site-1"));
    let out = run(script("gen-secrets.sh", &[("OUT", out_pem.to_str().unwrap())], &[])).await;
    assert_eq!(out.status.code(), Some(1), "never overwrites");
}

/// An attach refusal stays on the cluster after its answer (`operator.last_attach`), replaced by
/// the next attach and cleared by a detach; `/api/v1/settings` says what attach needs of the
/// server itself (a public URL operators reach, a default session domain).
#[tokio::test]
async fn the_last_attach_result_stays_on_the_cluster_and_settings_name_what_attach_needs() {
    // Neither a public URL nor a session domain: the settings say so, and so does the cluster.
    let plain = TestServer::start().await;
    let set = send(&plain, reqwest::Method::GET, "/api/v1/settings", None, 200).await;
    assert!(set["public_url_problem"].as_str().unwrap().contains("cannot reach"), "{set}");
    assert_eq!(set["session_domain"], Value::Null, "{set}");
    let c0 = fake("gpu-y").await;
    let id0 = register(&plain, "gpu-y", &c0).await;
    assert_eq!(operator_view(&plain, &id0).await["last_attach"], Value::Null);
    expect_error(attach(&plain, &id0, "").await, 422, "setting_required").await;
    let last = operator_view(&plain, &id0).await["last_attach"].clone();
    assert_eq!((last["ok"].as_bool(), last["code"].as_str()), (Some(false), Some("setting_required")), "{last}");
    assert_eq!(last["setting"], "public_url", "{last}");
    assert!(last["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{last}");
    // A cluster that is not there keeps nothing.
    expect_error(attach(&plain, "clu_01J0000000000000000000000Z", "").await, 404, "not_found").await;
    plain.stop().await;

    let s = server().await;
    let set = send(&s, reqwest::Method::GET, "/api/v1/settings", None, 200).await;
    assert_eq!((set["public_url"].as_str(), set["public_url_problem"].as_str()), (Some(PUBLIC), None), "{set}");
    assert_eq!(set["session_domain"], "lab.example.test", "{set}");
    let c = fake("gpu-x").await;
    let id = register(&s, "gpu-x", &c).await;
    c.knobs().forbid("clusterroles", true);
    expect_error(attach(&s, &id, "").await, 422, "cluster_forbidden").await;
    let view = operator_view(&s, &id).await;
    assert_eq!(view["state"], "not_attached", "{view}");
    assert_eq!(view["last_attach"]["code"], "cluster_forbidden", "{view}");
    assert!(view["last_attach"]["message"].as_str().unwrap().contains("clusterroles"), "{view}");
    // The list carries it too (the console's rows).
    let list = send(&s, reqwest::Method::GET, "/api/v1/clusters", None, 200).await;
    let row = list["data"].as_array().unwrap().iter().find(|r| r["id"] == id.as_str()).unwrap().clone();
    assert_eq!(row["operator"]["last_attach"]["code"], "cluster_forbidden", "{row}");
    c.knobs().forbid("clusterroles", false);
    attach(&s, &id, "").await.error_for_status().unwrap();
    let last = operator_view(&s, &id).await["last_attach"].clone();
    assert_eq!((last["ok"].as_bool(), last["code"].as_str()), (Some(true), None), "{last}");
    send(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach"), None, 200).await;
    assert_eq!(operator_view(&s, &id).await["last_attach"], Value::Null);
    s.stop().await;
}
