//! Bad input and bad credentials: the Status answers a real server gives.

use serde_json::{Value, json};

use super::Harness;

const SESSIONS: &str = "/apis/gshare.io/v1/namespaces/gshare-sessions/gsharesessions";

struct Answer {
    code: u16,
    body: Value,
}

impl Answer {
    fn assert_status(&self, code: u16, reason: &str) {
        assert_eq!(self.code, code, "{}", self.body);
        assert_eq!(self.body["kind"], "Status", "{}", self.body);
        assert_eq!(self.body["apiVersion"], "v1");
        assert_eq!(self.body["status"], "Failure");
        assert_eq!(self.body["reason"], reason, "{}", self.body);
        assert_eq!(self.body["code"], code);
    }
}

async fn send(
    h: &Harness,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
    token: Option<&str>,
) -> Answer {
    let url = format!("{}{path}", h.cluster.server_url());
    let mut req = h.http().request(method, url).header("Content-Type", content_type).body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("the fake answers");
    let code = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    Answer { code, body: serde_json::from_str(&text).unwrap_or(Value::String(text)) }
}

async fn with_crd() -> Harness {
    let h = Harness::default().await;
    h.kubectl_ok(&["apply", "-f", h.file("crd.yaml", super::CRD_YAML).to_str().expect("path")]).await;
    h.kubectl_ok(&["apply", "-f", h.file("ns.yaml", super::SESSION_NS_YAML).to_str().expect("path")]).await;
    h
}

fn session(name: Option<&str>) -> Vec<u8> {
    let mut s = json!({"apiVersion": "gshare.io/v1", "kind": "GShareSession",
                       "metadata": {}, "spec": {"user": "alice"}});
    if let Some(n) = name {
        s["metadata"]["name"] = json!(n);
    }
    s.to_string().into_bytes()
}

#[tokio::test]
async fn malformed_bodies_are_400() {
    let h = with_crd().await;
    let t = Some(h.cluster.token().to_string());
    let t = t.as_deref();
    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", b"{\"kind\": ".to_vec(), t).await;
    a.assert_status(400, "BadRequest");
    let a = send(
        &h,
        reqwest::Method::PATCH,
        &format!("{SESSIONS}/s1?fieldManager=test"),
        "application/apply-patch+yaml",
        b"spec: [unclosed\n  user: :".to_vec(),
        t,
    )
    .await;
    a.assert_status(400, "BadRequest");
    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", session(Some("ok")), t).await;
    assert_eq!(a.code, 201, "{}", a.body);
    let a = send(
        &h,
        reqwest::Method::PATCH,
        &format!("{SESSIONS}/ok"),
        "application/merge-patch+json",
        b"{not json".to_vec(),
        t,
    )
    .await;
    a.assert_status(400, "BadRequest");
}

#[tokio::test]
async fn apply_without_field_manager_and_objects_without_name_are_422() {
    let h = with_crd().await;
    let t = h.cluster.token().to_string();
    let a = send(
        &h,
        reqwest::Method::PATCH,
        &format!("{SESSIONS}/s1"),
        "application/apply-patch+yaml",
        session(Some("s1")),
        Some(&t),
    )
    .await;
    a.assert_status(422, "Invalid");
    assert_eq!(a.body["details"]["causes"][0]["field"], "fieldManager");

    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", session(None), Some(&t)).await;
    a.assert_status(422, "Invalid");
    assert_eq!(a.body["details"]["causes"][0]["field"], "metadata.name");
    assert_eq!(
        a.body["message"],
        "GShareSession.gshare.io \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );

    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", session(Some("Bad_Name")), Some(&t)).await;
    a.assert_status(422, "Invalid");
}

#[tokio::test]
async fn bodies_over_3_mib_are_413() {
    let h = with_crd().await;
    let t = h.cluster.token().to_string();
    let big = json!({"apiVersion": "gshare.io/v1", "kind": "GShareSession",
                     "metadata": {"name": "big"}, "spec": {"blob": "x".repeat(3 * 1024 * 1024 + 1)}});
    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", big.to_string().into_bytes(), Some(&t)).await;
    a.assert_status(413, "RequestEntityTooLarge");
    assert!(h.cluster.store().get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "big").is_none());
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_401() {
    let h = Harness::default().await;
    let a = send(&h, reqwest::Method::GET, "/api/v1/nodes", "application/json", Vec::new(), Some("nope")).await;
    a.assert_status(401, "Unauthorized");
    let a = send(&h, reqwest::Method::GET, "/api/v1/nodes", "application/json", Vec::new(), None).await;
    a.assert_status(401, "Unauthorized");

    // kubectl with a wrong token says what a real server makes it say.
    let bad = h.cluster.kubeconfig_yaml().replace(h.cluster.token(), "wrong-token");
    let path = h.file("bad-kubeconfig", &bad);
    let out = tokio::task::spawn_blocking({
        let mut cmd = super::kubectl_command(&path, h.dir.path(), &["get", "nodes"]);
        move || cmd.output().expect("kubectl runs")
    })
    .await
    .expect("task");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("You must be logged in to the server") || err.contains("Unauthorized"), "{err}");

    // Tokens can be added and revoked at run time.
    h.cluster.knobs().allow_token("extra");
    let a = send(&h, reqwest::Method::GET, "/api/v1/nodes", "application/json", Vec::new(), Some("extra")).await;
    assert_eq!(a.code, 200);
    h.cluster.knobs().revoke_token("extra");
    let a = send(&h, reqwest::Method::GET, "/api/v1/nodes", "application/json", Vec::new(), Some("extra")).await;
    a.assert_status(401, "Unauthorized");
}

#[tokio::test]
async fn unknown_resources_and_missing_objects_are_404() {
    let h = Harness::default().await;
    let t = h.cluster.token().to_string();
    let a = send(
        &h,
        reqwest::Method::GET,
        "/apis/gshare.io/v1/namespaces/default/gsharesessions",
        "",
        Vec::new(),
        Some(&t),
    )
    .await;
    a.assert_status(404, "NotFound");
    let a = send(&h, reqwest::Method::GET, "/api/v1/widgets", "", Vec::new(), Some(&t)).await;
    a.assert_status(404, "NotFound");
    let a = send(&h, reqwest::Method::GET, "/api/v1/nodes/nope", "", Vec::new(), Some(&t)).await;
    a.assert_status(404, "NotFound");
    assert_eq!(a.body["message"], "nodes \"nope\" not found");
    assert_eq!(a.body["details"]["name"], "nope");
    assert_eq!(a.body["details"]["kind"], "nodes");
}

#[tokio::test]
async fn stale_resource_versions_are_409() {
    let h = with_crd().await;
    let t = h.cluster.token().to_string();
    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", session(Some("s")), Some(&t)).await;
    assert_eq!(a.code, 201);
    let mut stale = a.body.clone();
    let a = send(&h, reqwest::Method::POST, SESSIONS, "application/json", session(Some("s")), Some(&t)).await;
    a.assert_status(409, "AlreadyExists");
    let a = send(
        &h,
        reqwest::Method::PATCH,
        &format!("{SESSIONS}/s"),
        "application/merge-patch+json",
        br#"{"spec":{"user":"bob"}}"#.to_vec(),
        Some(&t),
    )
    .await;
    assert_eq!(a.code, 200);
    stale["spec"]["user"] = json!("carol");
    let a = send(
        &h,
        reqwest::Method::PUT,
        &format!("{SESSIONS}/s"),
        "application/json",
        stale.to_string().into_bytes(),
        Some(&t),
    )
    .await;
    a.assert_status(409, "Conflict");
    assert!(a.body["message"].as_str().unwrap_or("").contains("the object has been modified"));
}
