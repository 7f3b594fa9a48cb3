//! What a real cluster does with what attach applies: the operator compatibility
//! table (flags, RBAC profile, pull policy), the privileged-session ConfigMap, one attach per
//! cluster at a time with an overall deadline, and the operator's own pods on the cluster view.

use std::time::Duration;

use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::{Value, json};

use crate::operator::{PUBLIC, attach, fake, get, register, send};
use crate::support::{TestServer, expect_error};

const DIGEST_IMAGE: &str =
    "registry.lan/gshare-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn server_with(extra: &[(&str, &str)]) -> TestServer {
    let mut env = vec![
        ("GSHARE_PUBLIC_URL", PUBLIC),
        ("GSHARE_SESSION_DOMAIN", "lab.example.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
    ];
    env.extend_from_slice(extra);
    TestServer::start_with(&env).await
}

fn watch_secrets(c: &FakeCluster) -> bool {
    let role = get(c, "rbac.authorization.k8s.io", "v1", "clusterroles", None, "gshare-operator-watch").unwrap();
    role["rules"].as_array().unwrap().iter().any(|r| r["resources"].as_array().unwrap().iter().any(|x| x == "secrets"))
}

fn operator_container(c: &FakeCluster) -> Value {
    let dep = get(c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").unwrap();
    dep["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The published image may hold any boanlab build: by default attach grants the cluster-wide
/// Secrets read their cache needs, passes no flag boanlab 7aa83a47 lacks, pulls the moving tag
/// every time, creates the ConfigMap privileged sessions mount, and says which profile it used.
#[tokio::test]
async fn default_attach_runs_every_known_build() {
    let s = server_with(&[]).await;
    let c = fake("compat").await;
    let id = register(&s, "compat", &c).await;
    let res = attach(&s, &id, "").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    assert_eq!(report["profile"]["profile"], "compatible", "{report}");
    assert_eq!(report["profile"]["pull_policy"], "Always");
    assert!(watch_secrets(&c), "the default RBAC must let boanlab builds watch Secrets cluster-wide");
    let container = operator_container(&c);
    assert_eq!(container["imagePullPolicy"], "Always");
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    for gone in ["--volume-sync-interval", "--session-image-pull-policy"] {
        assert!(!args.iter().any(|a| a.starts_with(gone)), "{gone} makes boanlab 7aa83a47 exit 2: {args:?}");
    }
    let cm = get(&c, "", "v1", "configmaps", Some("gshare-sessions"), "gshare-session-privileged")
        .expect("ConfigMap gshare-session-privileged");
    assert_eq!(
        cm["data"]["jupyter_server_config.py"],
        "c = get_config()  # noqa: F821\nc.ServerApp.allow_root = True\n"
    );
}

/// Least privilege only for an image pinned by digest and declared as the build that confines
/// its Secret cache; a tag declared as that build stays compatible (and says why); an unknown
/// build is refused naming the known ones.
#[tokio::test]
async fn least_privilege_needs_a_digest_declared_as_a_restricted_build() {
    let s = server_with(&[("GSHARE_OPERATOR_IMAGE", DIGEST_IMAGE), ("GSHARE_OPERATOR_BUILD", "mkpong-018e2adb")]).await;
    let c = fake("least").await;
    let id = register(&s, "least", &c).await;
    let report: Value = attach(&s, &id, "").await.json().await.unwrap();
    assert_eq!(report["profile"]["profile"], "least_privilege", "{report}");
    assert!(!watch_secrets(&c));
    assert_eq!(operator_container(&c)["imagePullPolicy"], "IfNotPresent");

    let s = server_with(&[("GSHARE_OPERATOR_BUILD", "mkpong-018e2adb")]).await;
    let c = fake("tagged").await;
    let id = register(&s, "tagged", &c).await;
    let report: Value = attach(&s, &id, "").await.json().await.unwrap();
    assert_eq!(report["profile"]["profile"], "compatible");
    assert!(report["profile"]["reason"].as_str().unwrap().contains("moving tag"), "{report}");
    assert!(watch_secrets(&c));

    let s = server_with(&[("GSHARE_OPERATOR_BUILD", "boanlab-0000000")]).await;
    let c = fake("unknown").await;
    let id = register(&s, "unknown", &c).await;
    let body = expect_error(attach(&s, &id, "").await, 422, "setting_required").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("mkpong-018e2adb"), "{body}");
    assert_eq!(body["error"]["details"]["setting"], "operator_build");
}

/// Attach on one cluster does not wait for a slow attach on another (the lock is per cluster).
#[tokio::test]
async fn a_slow_cluster_does_not_hold_up_another_clusters_attach() {
    let s = server_with(&[]).await;
    let slow = fake("slow").await;
    let quick = fake("quick").await;
    let slow_id = register(&s, "slow", &slow).await;
    let quick_id = register(&s, "quick", &quick).await;
    slow.knobs().set_delay(Some(Duration::from_secs(2)));
    let mut seen = slow.knobs().requests();
    let before = *seen.borrow();
    let url = s.url(&format!("/api/v1/clusters/{slow_id}/attach"));
    let token = crate::operator::admin(&s);
    let client = s.client.clone();
    let slow_attach = tokio::spawn(async move { client.post(url).bearer_auth(token).send().await });
    // The slow attach holds its cluster's turn once it talks to its cluster.
    seen.wait_for(|n| *n > before).await.unwrap();
    let quick_attach = tokio::time::timeout(Duration::from_secs(20), attach(&s, &quick_id, "")).await;
    let res = quick_attach.expect("the quick cluster's attach waited for the slow one");
    assert_eq!(res.status(), 200);
    assert!(!slow_attach.is_finished());
    slow_attach.abort();
}

/// Attach has an overall deadline; when it runs out, the answer lists what was applied and what
/// was not, the record says incomplete, and a re-run converges.
#[tokio::test]
async fn attach_stops_at_its_deadline_and_reports_partial_progress() {
    let s = server_with(&[("GSHARE_OPERATOR_ATTACH_TIMEOUT", "2s")]).await;
    let c = fake("deadline").await;
    let id = register(&s, "deadline", &c).await;
    c.knobs().set_write_delay(Some(Duration::from_millis(400)));
    let body = expect_error(attach(&s, &id, "").await, 504, "attach_deadline").await;
    let objects = body["error"]["details"]["objects"].as_array().unwrap();
    let done = body["error"]["details"]["done"].as_array().unwrap();
    assert!(!done.is_empty(), "{body}");
    assert!(objects.iter().any(|o| o["result"] == "not_attempted"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("operator_attach_timeout"), "{body}");
    let view = send(&s, reqwest::Method::GET, &format!("/api/v1/clusters/{id}"), None, 200).await;
    assert_eq!(view["operator"]["state"], "attach_incomplete", "{view}");
    c.knobs().set_write_delay(None);
    assert_eq!(attach(&s, &id, "").await.status(), 200);
}

// ---- the operator's own pods ---------------------------------------------------------------

fn operator_pod(name: &str, created: &str, container_status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gshare-system",
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/name": "gshare-operator", "app.kubernetes.io/part-of": "gshare"},
        },
        "spec": {"containers": [{"name": "operator", "image": "docker.io/boanlab/gshare-operator:latest"}],
                 "nodeName": "gpu-node-0"},
        "status": {"phase": "Running", "containerStatuses": [container_status]},
    })
}

fn crash_looping(message: &str) -> Value {
    json!({
        "name": "operator",
        "image": "docker.io/boanlab/gshare-operator:latest",
        "imageID": "",
        "ready": false,
        "restartCount": 7,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
        "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": message,
                                       "finishedAt": "2026-12-01T20:00:00Z"}},
    })
}

fn event(name: &str, object: &str, reason: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "gshare-system"},
        "involvedObject": {"kind": "Pod", "name": object, "namespace": "gshare-system"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": 12,
        "lastTimestamp": "2026-12-01T20:01:00Z",
    })
}

async fn attached(name: &str) -> (TestServer, FakeCluster, String) {
    let s = server_with(&[]).await;
    let c = FakeCluster::start(ClusterSpec { name: name.into(), ..ClusterSpec::default() }).await.unwrap();
    let id = register(&s, name, &c).await;
    assert_eq!(attach(&s, &id, "").await.status(), 200);
    (s, c, id)
}

async fn connection_test(s: &TestServer, id: &str) -> Value {
    send(s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/connection-test"), None, 200).await
}

/// A silent operator that crash-loops on an undefined flag: the connection test reads its pod,
/// the crashed run's log and the Events, and the view (one cluster and the list) names the
/// flag, the builds lacking it and the fix.
#[tokio::test]
async fn a_crash_looping_operator_shows_why_on_the_cluster_view() {
    let (s, c, id) = attached("crashing").await;
    let pod = "gshare-operator-7d9f8-abcde";
    let flag = "flag provided but not defined: -volume-sync-interval";
    c.store().put("", "v1", "pods", operator_pod(pod, "2026-12-01T19:00:00Z", crash_looping(flag))).unwrap();
    let mut log = String::new();
    for i in 0..40 {
        log.push_str(&format!("usage line {i}\n"));
    }
    log.push_str(flag);
    log.push('\n');
    c.knobs().set_pod_log("gshare-system", pod, "operator", true, log);
    c.store().put("", "v1", "events", event("ev1", pod, "BackOff", "Back-off restarting failed container")).unwrap();
    c.store().put("", "v1", "events", event("ev2", "someone-else", "BackOff", "not ours")).unwrap();

    let test = connection_test(&s, &id).await;
    let p = &test["operator"]["pod"];
    assert_eq!(p["pods_matching"], 1, "{test}");
    let container = &p["pods"][0]["containers"][0];
    assert_eq!(container["reason"], "CrashLoopBackOff");
    assert_eq!(container["restarts"], 7);
    assert_eq!(container["last_termination"]["exit_code"], 2);
    let lines = p["log"]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 20);
    assert_eq!(lines.last().unwrap(), flag);
    assert_eq!(p["log"]["previous"], true);
    let events = p["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{p}");
    assert_eq!(events[0]["reason"], "BackOff");
    let cause = p["diagnosis"]["cause"].as_str().unwrap();
    assert!(cause.contains("--volume-sync-interval") && cause.contains("boanlab-7aa83a47"), "{cause}");

    // The same, without touching the cluster, on the cluster and in the list.
    c.knobs().set_unreachable(true);
    let view = send(&s, reqwest::Method::GET, &format!("/api/v1/clusters/{id}"), None, 200).await;
    assert_eq!(view["operator"]["pod"]["pods"][0]["name"], pod);
    assert!(view["operator"]["likely_causes"][0].as_str().unwrap().contains("--volume-sync-interval"), "{view}");
    let list = send(&s, reqwest::Method::GET, "/api/v1/clusters", None, 200).await;
    assert_eq!(list["data"][0]["operator"]["pod"]["pods"][0]["name"], pod);
}

/// Cluster-supplied text is bounded and escaped: a 1 MiB waiting message with terminal escapes
/// and NULs, a 10 MB binary log; 10,000 pods matching show three and count them all.
#[tokio::test]
async fn hostile_pod_statuses_logs_and_pod_counts_stay_bounded() {
    let (s, c, id) = attached("hostile-pods").await;
    let mut message = String::from("\u{1b}[2J\u{0}boom ");
    message.push_str(&"x".repeat(1 << 20));
    let pod = "gshare-operator-1-aaaaa";
    c.store().put("", "v1", "pods", operator_pod(pod, "2026-12-01T19:00:00Z", crash_looping(&message))).unwrap();
    let binary: Vec<u8> = (0..10_000_000u32).map(|i| (i % 256) as u8).collect();
    c.knobs().set_pod_log("gshare-system", pod, "operator", true, binary);
    let test = connection_test(&s, &id).await;
    let text = serde_json::to_string(&test).unwrap();
    assert!(text.len() < 64 * 1024, "{} bytes", text.len());
    let p = &test["operator"]["pod"];
    let m = p["pods"][0]["containers"][0]["message"].as_str().unwrap();
    assert!(m.starts_with("\\u{1b}[2J\\u{0}boom"), "{}", &m[..40]);
    assert!(m.chars().count() <= 1001);
    for l in p["log"]["lines"].as_array().unwrap() {
        let l = l.as_str().unwrap();
        assert!(l.chars().count() <= 401);
        assert!(!l.chars().any(|ch| ch.is_control() && ch != '\t'), "{l:?}");
    }

    // 10,000 more matching pods (the newest first): one page read, three shown, "more" said.
    for i in 0..10_000 {
        let created = format!("2026-12-01T19:{:02}:{:02}Z", (i / 60) % 60, i % 60);
        let mut p = operator_pod(&format!("gshare-operator-x-{i:05}"), &created, crash_looping("x"));
        p["status"]["containerStatuses"][0]["state"] = json!({"running": {"startedAt": created}});
        c.store().put("", "v1", "pods", p).unwrap();
    }
    let test = connection_test(&s, &id).await;
    let p = &test["operator"]["pod"];
    assert_eq!(p["pods"].as_array().unwrap().len(), 3);
    assert_eq!(p["pods_matching"], 50, "{}", p["pods_matching"]);
    assert_eq!(p["pods_more"], true);
}

/// A cluster that refuses `pods/log` (403): the view says so and keeps the rest.
#[tokio::test]
async fn pods_log_forbidden_is_said_not_failed() {
    let (s, c, id) = attached("no-logs").await;
    let pod = "gshare-operator-2-bbbbb";
    c.store().put("", "v1", "pods", operator_pod(pod, "2026-12-01T19:00:00Z", crash_looping("bye"))).unwrap();
    c.knobs().forbid("pods/log", true);
    let test = connection_test(&s, &id).await;
    let p = &test["operator"]["pod"];
    assert_eq!(p["pods"][0]["name"], pod, "{test}");
    let e = p["log_error"].as_str().unwrap();
    assert!(e.contains("forbidden (403)") && e.contains("pods/log"), "{e}");
    assert!(p["log"].is_null());
}

/// The background pass reads a silent operator's pods at most every 30 s per cluster, and not
/// a connected one's.
#[tokio::test]
async fn background_reads_are_rate_limited_and_only_for_silent_operators() {
    let (s, c, id) = attached("background").await;
    c.store()
        .put("", "v1", "pods", operator_pod("gshare-operator-3-ccccc", "2026-12-01T19:00:00Z", crash_looping("x")))
        .unwrap();
    let op = &s.app().operator;
    assert_eq!(op.refresh_silent().await, vec![id.clone()]);
    assert!(op.refresh_silent().await.is_empty(), "read twice within 30 s");
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(op.refresh_silent().await, vec![id.clone()]);

    // Connected: a callback within two heartbeats; the pass leaves it alone.
    let token = crate::operator::secret_token(&c);
    let res = s
        .client
        .post(s.url("/internal/inventory/nodes"))
        .bearer_auth(&token)
        .json(&json!({"node_id": "gpu-node-0", "node_cpu": 8, "node_ready": true, "cluster_id": id}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    s.clock.advance(Duration::from_secs(31));
    assert!(op.refresh_silent().await.is_empty());
}

/// Real kubectl reads the fake's pods/log the way it reads a real server's (tail, previous,
/// refusals), and its Events.
#[tokio::test]
async fn kubectl_logs_and_events_against_the_fake() {
    let h = crate::fake_kube::Harness::default().await;
    h.kubectl_ok(&["create", "namespace", "gshare-system"]).await;
    let pod = "gshare-operator-4-ddddd";
    h.cluster.store().put("", "v1", "pods", operator_pod(pod, "2026-12-01T19:00:00Z", crash_looping("x"))).unwrap();
    h.cluster.knobs().set_pod_log("gshare-system", pod, "operator", false, "one\ntwo\nthree\n");
    h.cluster.knobs().set_pod_log("gshare-system", pod, "operator", true, "crashed: flag provided but not defined\n");
    assert_eq!(h.kubectl_ok(&["logs", "-n", "gshare-system", pod, "--tail=2"]).await, "two\nthree\n");
    assert_eq!(h.kubectl_ok(&["logs", "-n", "gshare-system", pod, "--limit-bytes=5"]).await, "one\nt");
    assert_eq!(
        h.kubectl_ok(&["logs", "-n", "gshare-system", pod, "-p"]).await,
        "crashed: flag provided but not defined\n"
    );
    let out = h.kubectl(&["logs", "-n", "gshare-system", pod, "-c", "nope"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("container nope is not valid for pod gshare-operator-4-ddddd"), "{err}");
    h.cluster.knobs().forbid("pods/log", true);
    let out = h.kubectl(&["logs", "-n", "gshare-system", pod]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Error from server (Forbidden): pods \"gshare-operator-4-ddddd\" is forbidden: User \
             \"system:serviceaccount:kube-system:gshare\" cannot get resource \"pods/log\" in API group \"\" \
             in the namespace \"gshare-system\""
        ),
        "{err}"
    );
    h.cluster
        .store()
        .put("", "v1", "events", event("ev1", pod, "BackOff", "Back-off restarting failed container"))
        .unwrap();
    let events = h.kubectl_json(&["get", "events", "-n", "gshare-system", "-o", "json"]).await;
    assert_eq!(events["items"][0]["reason"], "BackOff");
}

// ---- preflight, existing installs, detach order ---------------------------------------------

fn right(v: Value) -> gshare_fake_kube::Right {
    gshare_fake_kube::Right::from_json(&v)
}

/// Credentials that may write every kind but not list or watch: creating the operator's Roles
/// would grant rights they do not hold, which the API server refuses part-way. The preflight
/// finds every such Role and binding before anything is written.
#[tokio::test]
async fn preflight_names_each_missing_grant_before_writing() {
    let s = server_with(&[]).await;
    let c = fake("no-escalate").await;
    let id = register(&s, "no-escalate", &c).await;
    c.knobs().set_rights(Some(vec![right(
        json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "create", "patch", "update", "delete"]}),
    )]));
    let body = expect_error(attach(&s, &id, "").await, 422, "cluster_forbidden").await;
    let denied = body["error"]["details"]["denied"].as_array().unwrap();
    let watch = denied
        .iter()
        .find(|d| d["verb"] == "escalate" && d["objects"][0] == "ClusterRole/gshare-operator-watch")
        .unwrap_or_else(|| panic!("{body}"));
    let missing: Vec<&str> = watch["missing"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(missing.contains(&"list secrets") && missing.contains(&"watch pods"), "{missing:?}");
    assert!(
        denied.iter().any(|d| d["verb"] == "bind" && d["objects"][0] == "ClusterRoleBinding/gshare-operator-watch")
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("escalate clusterroles.rbac.authorization.k8s.io"), "{message}");
    assert_eq!(crate::operator::count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    assert!(get(&c, "", "v1", "namespaces", None, "gshare-system").is_none(), "nothing may be written");

    // With the rights (escalate included) the same attach goes through.
    c.knobs().set_rights(Some(vec![right(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}))]));
    assert_eq!(attach(&s, &id, "").await.status(), 200);
}

const DEPLOY_OPERATOR_SH: &str = "apiVersion: apps/v1
kind: Deployment
metadata: { name: gshare-operator, namespace: gshare-system, labels: { app.kubernetes.io/name: gshare-operator } }
spec:
  replicas: 1
  selector: { matchLabels: { app.kubernetes.io/name: gshare-operator } }
  template:
    metadata: { labels: { app.kubernetes.io/name: gshare-operator } }
    spec:
      serviceAccountName: gshare-operator
      containers:
        - name: operator
          image: docker.io/boanlab/gshare-operator:latest
          imagePullPolicy: Always
          command: [\"/manager\"]
          args:
            - \"--leader-elect\"
            - \"--internal-jwks-url=https://cp.example/.well-known/gshare-internal-jwks.json\"
";

/// An operator that upstream's deploy-operator.sh installed (kubectl apply, another selector):
/// attach refuses with 409 naming the manager and what differs, writes nothing; with
/// ?replace=true it deletes that Deployment and creates gShare's.
#[tokio::test]
async fn an_operator_installed_by_another_tool_is_not_taken_over_silently() {
    let h = crate::fake_kube::Harness::default().await;
    h.kubectl_ok(&["create", "namespace", "gshare-system"]).await;
    let file = h.file("deploy.yaml", DEPLOY_OPERATOR_SH);
    h.kubectl_ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let s = server_with(&[]).await;
    let id = register(&s, "by-script", &h.cluster).await;
    let body = expect_error(attach(&s, &id, "").await, 409, "operator_exists").await;
    let e = &body["error"]["details"]["existing"];
    assert_eq!(e["manager"], "hack/deploy-operator.sh or kubectl apply", "{body}");
    assert!(e["field_managers"].as_array().unwrap().iter().any(|m| m == "kubectl-client-side-apply"), "{e}");
    let diffs = e["differences"].to_string();
    assert!(diffs.contains("spec.selector") && diffs.contains("--internal-jwks-url"), "{diffs}");
    assert!(body["error"]["message"].as_str().unwrap().contains("?replace=true"));
    assert_eq!(crate::operator::count(&h.cluster, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);

    let res = attach(&s, &id, "?replace=true").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    let dep =
        crate::operator::results(&report).into_iter().find(|(o, _)| o == "Deployment/gshare-system/gshare-operator");
    assert_eq!(dep.unwrap().1, "replaced");
    let dep = get(&h.cluster, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").unwrap();
    assert_eq!(dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/part-of"], "gshare");

    // A Helm release is named as such.
    let s2 = server_with(&[]).await;
    let c = fake("by-helm").await;
    let id2 = register(&s2, "by-helm", &c).await;
    c.store()
        .put(
            "",
            "v1",
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gshare-system"}}),
        )
        .unwrap();
    let mut helm: Value = serde_yaml::from_str(DEPLOY_OPERATOR_SH).unwrap();
    helm["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
    helm["metadata"]["annotations"] =
        json!({"meta.helm.sh/release-name": "gshare", "meta.helm.sh/release-namespace": "gshare-system"});
    c.store().put("apps", "v1", "deployments", helm).unwrap();
    let body = expect_error(attach(&s2, &id2, "").await, 409, "operator_exists").await;
    assert_eq!(body["error"]["details"]["existing"]["manager"], "Helm (release gshare in gshare-system)");
}

fn session_cr(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": "gshare.io/v1",
        "kind": "GShareSession",
        "metadata": {"name": name, "namespace": ns, "finalizers": ["gshare.io/session-finalizer"]},
        // What the CRD requires of every session (the fake API server checks it as a real one does).
        "spec": {"clusterId": "clu_x", "offeringId": "off_x", "owner": "u", "clusterMode": "single",
                 "resourceClass": "cpu", "image": "ghcr.io/lab/jupyter:4"},
    })
}

/// Detach deletes the custom resources first and waits (bounded) for the operator to clear its
/// finalizers: while one holds, nothing else is deleted and the answer names it; once cleared,
/// the rest goes, CRDs kept while a custom resource outside the sessions namespace remains.
#[tokio::test]
async fn detach_deletes_custom_resources_first_and_names_held_finalizers() {
    let s = server_with(&[("GSHARE_OPERATOR_ATTACH_TIMEOUT", "3s")]).await;
    let c = fake("detach-order").await;
    let id = register(&s, "detach-order", &c).await;
    assert_eq!(attach(&s, &id, "").await.status(), 200);
    c.store().put("gshare.io", "v1", "gsharesessions", session_cr("ses-left", "gshare-sessions")).unwrap();
    c.store().put("gshare.io", "v1", "gsharesessions", session_cr("ses-foreign", "default")).unwrap();
    let detach = |q: &'static str| {
        let s = &s;
        let id = id.clone();
        async move {
            crate::operator::call(s, reqwest::Method::POST, &format!("/api/v1/clusters/{id}/detach{q}"), None).await
        }
    };
    let body = expect_error(detach("").await, 409, "finalizers_pending").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("GShareSession/gshare-sessions/ses-left"), "{body}");
    assert!(get(&c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").is_some());
    let cr = get(&c, "gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "ses-left").unwrap();
    assert!(cr["metadata"]["deletionTimestamp"].is_string());
    // Its namespace was not deleted (it would stay Terminating behind the finalizer).
    let ns = get(&c, "", "v1", "namespaces", None, "gshare-sessions").unwrap();
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");

    // The operator clears its finalizer (through the API, which then finishes the deletion).
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, c.kubeconfig_yaml()).unwrap();
    let client = crate::fake_kube::kube_client_for(&kubeconfig).await;
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("gshare.io", "v1", "GShareSession"),
        "gsharesessions",
    );
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(client, "gshare-sessions", &ar);
    api.patch(
        "ses-left",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let res = detach("").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    let results = crate::operator::results(&report);
    assert_eq!(results[0].0, "Deployment/gshare-system/gshare-operator", "{results:?}");
    let crd = results.iter().find(|(o, _)| o == "CustomResourceDefinition/gsharesessions.gshare.io").unwrap();
    assert_eq!(crd.1, "kept", "{results:?}");
    // The namespaces are gone, not left Terminating.
    for ns in ["gshare-system", "gshare-sessions", "gshare-infra"] {
        assert!(get(&c, "", "v1", "namespaces", None, ns).is_none(), "{ns} left behind");
    }
    assert_eq!(crate::operator::count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 3);
    // The kept CRDs are still gShare's: detach again (not attached now) keeps them while the
    // foreign resource remains, and says why.
    let res = detach("").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    let kept: Vec<&Value> = report["objects"].as_array().unwrap().iter().filter(|o| o["result"] == "kept").collect();
    assert_eq!(kept.len(), 3, "{report}");
    assert!(kept[0]["message"].as_str().unwrap().contains("GShareSession/default/ses-foreign"), "{report}");

    // An operator that will never clear it: ?force=true removes the finalizers. The attach in
    // between finds the CRDs detach kept and counts them as its own, so once the foreign
    // resource is gone they are removed too.
    let report: Value = attach(&s, &id, "").await.json().await.unwrap();
    assert_eq!(crate::operator::results(&report)[0].1, "unchanged", "{report}");
    c.store().delete("gshare.io", "v1", "gsharesessions", Some("default"), "ses-foreign");
    c.store().put("gshare.io", "v1", "gsharesessions", session_cr("ses-stuck", "gshare-sessions")).unwrap();
    let res = detach("?force=true").await;
    assert_eq!(res.status(), 200);
    assert!(get(&c, "gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "ses-stuck").is_none());
    assert!(get(&c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").is_none());
    assert_eq!(crate::operator::count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    expect_error(detach("").await, 409, "not_attached").await;
}

/// Real kubectl gets the fake's refusals in the real server's words: a changed selector, an
/// RBAC grant beyond the user's rights, and access reviews.
#[tokio::test]
async fn kubectl_sees_immutable_selectors_rbac_escalation_and_access_reviews() {
    let h = crate::fake_kube::Harness::default().await;
    let dep = |app: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\nspec:\n  selector: \
             {{matchLabels: {{app: {app}}}}}\n  template:\n    metadata: {{labels: {{app: {app}}}}}\n    spec:\n      \
             containers: [{{name: c, image: nginx}}]\n"
        )
    };
    let a = h.file("a.yaml", &dep("a"));
    h.kubectl_ok(&["apply", "-f", a.to_str().unwrap()]).await;
    let b = h.file("b.yaml", &dep("b"));
    let out = h.kubectl(&["apply", "-f", b.to_str().unwrap()]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "The Deployment \"web\" is invalid: spec.selector: Invalid value: \
             v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"b\"}, \
             MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
        ),
        "{err}"
    );

    h.cluster.knobs().set_rights(Some(vec![right(json!({"apiGroups": ["*"], "resources": ["*"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}))]));
    let role = h.file(
        "role.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: wider}\nrules:\n- apiGroups: \
         [\"\"]\n  resources: [pods]\n  verbs: [get, deletecollection]\n",
    );
    let out = h.kubectl(&["apply", "-f", role.to_str().unwrap()]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "clusterroles.rbac.authorization.k8s.io \"wider\" is forbidden: user \
             \"system:serviceaccount:kube-system:gshare\" (groups=[\"system:serviceaccounts\" \
             \"system:serviceaccounts:kube-system\" \"system:authenticated\"]) is attempting to grant RBAC \
             permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"deletecollection\"]}"
        ),
        "{err}"
    );
    let out = h.kubectl(&["auth", "can-i", "deletecollection", "pods"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no", "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(h.kubectl_ok(&["auth", "can-i", "list", "pods"]).await.trim(), "yes");
    let list = h.kubectl_ok(&["auth", "can-i", "--list", "-n", "default"]).await;
    assert!(
        list.lines().any(|l| l.starts_with("*.*") && l.contains("[get list watch create patch update delete]")),
        "{list}"
    );
    assert!(list.contains("selfsubjectrulesreviews.authorization.k8s.io"), "{list}");
}

// ---- prerequisites and node labels -----------------------------------------------------------

fn put(c: &FakeCluster, group: &str, resource: &str, obj: Value) {
    c.store().put(group, "v1", resource, obj).unwrap();
}

/// ingress-nginx, the HAMi scheduler and its monitor Service as their Helm charts name them,
/// in namespaces other than the chart defaults' guesses.
fn install_lab_services(c: &FakeCluster) {
    for ns in ["ingress-nginx", "hami-system"] {
        put(c, "", "namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    put(
        c,
        "networking.k8s.io",
        "ingressclasses",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
    );
    let ctrl = json!({"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"});
    put(
        c,
        "",
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx", "labels": ctrl},
        "spec": {"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080},
                                               {"name": "https", "port": 443, "nodePort": 30443}]}}),
    );
    put(
        c,
        "",
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ingress-nginx-controller-abc", "namespace": "ingress-nginx", "labels": ctrl},
        "spec": {"containers": [{"name": "controller", "image": "registry.k8s.io/ingress-nginx/controller"}]},
        "status": {"phase": "Running"}}),
    );
    put(
        c,
        "apps",
        "deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vgpu-hami-scheduler", "namespace": "hami-system",
                     "labels": {"app.kubernetes.io/component": "hami-scheduler"}},
        "spec": {"selector": {"matchLabels": {"app": "s"}}, "template": {"metadata": {"labels": {"app": "s"}},
                 "spec": {"containers": [{"name": "s", "image": "hami"}]}}},
        "status": {"readyReplicas": 1, "replicas": 1}}),
    );
    put(
        c,
        "",
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "vgpu-hami-device-plugin-monitor", "namespace": "hami-system",
                     "labels": {"app.kubernetes.io/component": "hami-device-plugin"}},
        "spec": {"type": "NodePort", "ports": [{"name": "monitorport", "port": 31992, "nodePort": 31992}]}}),
    );
}

/// Registration reports what upstream's attach-cluster.sh would have set up, by stage with
/// cause and hint, and still registers; the GPU nodes lacking labels are named.
#[tokio::test]
async fn registration_reports_missing_prerequisites_by_stage() {
    let s = server_with(&[]).await;
    let c = fake("bare").await;
    let id = register(&s, "bare", &c).await;
    let detail = send(&s, reqwest::Method::GET, &format!("/api/v1/clusters/{id}"), None, 200).await;
    let checks = detail["prerequisites"]["checks"].as_array().unwrap_or_else(|| panic!("{detail}"));
    let stages: Vec<&str> = checks.iter().map(|c| c["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["node_labels", "ingress", "hami_scheduler", "hami_monitor", "dcgm"]);
    assert!(checks.iter().all(|c| c["ok"] == false), "{checks:?}");
    let labels = &checks[0];
    assert!(labels["cause"].as_str().unwrap().contains("2 of 2 GPU nodes lack"), "{labels}");
    assert!(labels["hint"].as_str().unwrap().contains("label_nodes=true"));
    assert_eq!(detail["prerequisites"]["unlabeled_gpu_nodes"], json!(["gpu-node-0", "gpu-node-1"]));
    assert_eq!(checks[4]["severity"], "warning");
    assert!(checks[4]["cause"].as_str().unwrap().contains("idle reclaim is off"));
}

/// Before attach the checks run again: the HAMi monitor found (another release name and
/// namespace) becomes --hami-monitor-url, ingress-nginx's NodePort the suggested
/// session_ingress. Labels are applied only with ?label_nodes=true, and a label already set to
/// another value (gshare.io/gpu-mode=mig) is kept and reported, not overwritten.
#[tokio::test]
async fn attach_passes_the_real_hami_monitor_and_labels_nodes_only_when_asked() {
    let s = server_with(&[]).await;
    let c = fake("lab").await;
    install_lab_services(&c);
    c.store().update("", "v1", "nodes", None, "gpu-node-0", |n| {
        n["metadata"]["labels"]["gshare.io/gpu-mode"] = json!("mig");
    });
    let id = register(&s, "lab", &c).await;
    let report: Value = attach(&s, &id, "").await.json().await.unwrap();
    let p = &report["prerequisites"];
    assert_eq!(p["hami_monitor_url"], "http://vgpu-hami-device-plugin-monitor.hami-system.svc:31992", "{p}");
    assert_eq!(p["suggested_session_ingress"], "10.1.0.10:30080", "{p}");
    let args = operator_container(&c)["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--hami-monitor-url=http://vgpu-hami-device-plugin-monitor.hami-system.svc:31992"),
        "{args}"
    );
    // The ingress works, but its ConfigMap lacks the setting a lab needs: said, with the command.
    let ingress = &p["checks"][1];
    assert_eq!(ingress["ok"], true, "{p}");
    let cause = ingress["cause"].as_str().unwrap();
    assert!(cause.contains("proxy-body-size not set in ConfigMap ingress-nginx/ingress-nginx-controller"), "{cause}");
    assert!(ingress["hint"].as_str().unwrap().contains("patch configmap ingress-nginx-controller"), "{ingress}");
    let node = get(&c, "", "v1", "nodes", None, "gpu-node-1").unwrap();
    assert!(node["metadata"]["labels"]["gpu"].is_null(), "labels applied without being asked");
    assert!(p["checks"][0]["cause"].as_str().unwrap().contains("gpu-node-0: gshare.io/gpu-mode=mig"), "{p}");

    put(
        &c,
        "",
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx"},
               "data": {"proxy-body-size": "0"}}),
    );
    let report: Value = attach(&s, &id, "?label_nodes=true").await.json().await.unwrap();
    let ingress = &report["prerequisites"]["checks"][1];
    assert!(ingress["cause"].as_str().unwrap().contains("proxy-body-size 0 (ConfigMap"), "{ingress}");
    assert_eq!(ingress["hint"], "", "{ingress}");
    let labeled = report["labeled_nodes"].as_array().unwrap_or_else(|| panic!("{report}"));
    let n0 = labeled.iter().find(|n| n["node"] == "gpu-node-0").unwrap();
    assert_eq!(n0["applied"], json!(["gpu=on"]));
    assert_eq!(n0["kept"], json!(["gshare.io/gpu-mode=mig (upstream sets fractional)"]));
    let node0 = get(&c, "", "v1", "nodes", None, "gpu-node-0").unwrap();
    assert_eq!(node0["metadata"]["labels"]["gshare.io/gpu-mode"], "mig");
    assert_eq!(node0["metadata"]["labels"]["gpu"], "on");
    let node1 = get(&c, "", "v1", "nodes", None, "gpu-node-1").unwrap();
    assert_eq!(node1["metadata"]["labels"]["gpu"], "on");
}

/// `gshare operator manifests` prints the token Secret by default, minted by the running server
/// (audited, verifying for that cluster); `--no-token` leaves it out; with no server and no
/// OPERATOR_TOKEN it refuses, saying what to do.
#[tokio::test]
async fn manifests_print_a_server_minted_token_by_default() {
    use crate::support::{gshare, stderr, stdout};
    let s = server_with(&[]).await;
    let c = fake("manifests").await;
    let id = register(&s, "manifests", &c).await;
    let addr = s.app_addr().to_string();
    let run = |args: Vec<String>, dir: std::path::PathBuf, addr: String| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            gshare(&dir, &args, &[("GSHARE_LISTEN", &addr), ("GSHARE_PUBLIC_URL", PUBLIC)])
        })
    };
    let base = vec![
        "operator".to_string(),
        "manifests".into(),
        "--cluster-id".into(),
        id.clone(),
        "--session-domain".into(),
        "lab.example.test".into(),
    ];
    let out = run(base.clone(), s.data_dir(), addr.clone()).await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("from the server (audited)"), "{}", stderr(&out));
    let yaml = stdout(&out);
    let secret = yaml
        .split("\n---\n")
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap_or(Value::Null))
        .find(|d| d["kind"] == "Secret")
        .expect("a token Secret");
    let token = secret["stringData"]["internal-jwt"].as_str().unwrap();
    assert_eq!(s.app().auth.internal.verify(token).unwrap().sub, format!("operator:{id}"));
    let audit = send(&s, reqwest::Method::GET, "/api/v1/audit", None, 200).await;
    assert!(audit["data"].as_array().unwrap().iter().any(|e| e["action"] == "cluster.operator_token"));

    let mut no_token = base.clone();
    no_token.push("--no-token".into());
    let out = run(no_token, s.data_dir(), addr).await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("kind: Secret"));

    let empty = tempfile::tempdir().unwrap();
    let out = run(base, empty.path().to_path_buf(), "127.0.0.1:9".into()).await.unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--no-token") && stderr(&out).contains("OPERATOR_TOKEN"), "{}", stderr(&out));
}

/// Real kubectl against the fake: a finalizer holds a deletion (the object stays, marked) until
/// it is removed, as on a real server.
#[tokio::test]
async fn kubectl_sees_a_finalizer_hold_a_deletion() {
    let h = crate::fake_kube::Harness::default().await;
    let crd = h.file("crd.yaml", crate::fake_kube::CRD_YAML);
    h.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]).await;
    let ns = h.file("ns.yaml", crate::fake_kube::SESSION_NS_YAML);
    h.kubectl_ok(&["apply", "-f", ns.to_str().unwrap()]).await;
    let cr = h.file(
        "cr.yaml",
        "apiVersion: gshare.io/v1\nkind: GShareSession\nmetadata:\n  name: held\n  namespace: gshare-sessions\n  \
         finalizers: [gshare.io/session-finalizer]\nspec:\n  user: u\n",
    );
    h.kubectl_ok(&["apply", "-f", cr.to_str().unwrap()]).await;
    let out = h.kubectl_ok(&["delete", "-n", "gshare-sessions", "gsharesessions", "held", "--wait=false"]).await;
    assert!(out.contains("deleted"), "{out}");
    let obj = h.kubectl_json(&["get", "-n", "gshare-sessions", "gsharesessions", "held", "-o", "json"]).await;
    assert!(obj["metadata"]["deletionTimestamp"].is_string(), "{obj}");
    h.kubectl_ok(&[
        "patch",
        "-n",
        "gshare-sessions",
        "gsharesessions",
        "held",
        "--type=merge",
        "-p",
        "{\"metadata\":{\"finalizers\":null}}",
    ])
    .await;
    let out = h.kubectl(&["get", "-n", "gshare-sessions", "gsharesessions", "held"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gsharesessions.gshare.io \"held\" not found"), "{err}");
}

/// Real kubectl against the fake: deleting a namespace marks it Terminating while an object
/// in it holds a finalizer (the namespace controller's conditions say which), no new content
/// is let in, a second delete is refused, and the namespace goes once the finalizer is removed.
#[tokio::test]
async fn kubectl_sees_a_finalizer_keep_its_namespace_terminating() {
    let h = crate::fake_kube::Harness::default().await;
    let crd = h.file("crd.yaml", crate::fake_kube::CRD_YAML);
    h.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]).await;
    let ns = h.file("ns.yaml", crate::fake_kube::SESSION_NS_YAML);
    h.kubectl_ok(&["apply", "-f", ns.to_str().unwrap()]).await;
    let cr = h.file(
        "cr.yaml",
        "apiVersion: gshare.io/v1\nkind: GShareSession\nmetadata:\n  name: held\n  namespace: gshare-sessions\n  \
         finalizers: [gshare.io/session-finalizer]\nspec:\n  user: u\n",
    );
    h.kubectl_ok(&["apply", "-f", cr.to_str().unwrap()]).await;
    h.kubectl_ok(&["create", "configmap", "plain", "-n", "gshare-sessions"]).await;
    let out = h.kubectl_ok(&["delete", "namespace", "gshare-sessions", "--wait=false"]).await;
    assert!(out.contains("namespace \"gshare-sessions\" deleted"), "{out}");
    let ns = h.kubectl_json(&["get", "namespace", "gshare-sessions", "-o", "json"]).await;
    assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");
    assert!(ns["metadata"]["deletionTimestamp"].is_string(), "{ns}");
    let conditions = ns["status"]["conditions"].to_string();
    assert!(
        conditions.contains("Some content in the namespace has finalizers remaining: gshare.io/session-finalizer in 1 resource instances"),
        "{conditions}"
    );
    assert!(conditions.contains("gsharesessions.gshare.io has 1 resource instances"), "{conditions}");
    // The content without finalizers went; the held one stays, marked.
    let out = h.kubectl(&["get", "configmap", "plain", "-n", "gshare-sessions"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("configmaps \"plain\" not found"));
    let obj = h.kubectl_json(&["get", "-n", "gshare-sessions", "gsharesessions", "held", "-o", "json"]).await;
    assert!(obj["metadata"]["deletionTimestamp"].is_string(), "{obj}");
    // No new content while it terminates; a second delete is refused.
    let out = h.kubectl(&["create", "configmap", "late", "-n", "gshare-sessions"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "configmaps \"late\" is forbidden: unable to create new content in namespace gshare-sessions because it is \
             being terminated"
        ),
        "{err}"
    );
    let out = h.kubectl(&["delete", "namespace", "gshare-sessions", "--wait=false"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Operation cannot be fulfilled on namespaces \"gshare-sessions\": The system is ensuring all content"
        ),
        "{err}"
    );
    h.kubectl_ok(&[
        "patch",
        "-n",
        "gshare-sessions",
        "gsharesessions",
        "held",
        "--type=merge",
        "-p",
        "{\"metadata\":{\"finalizers\":null}}",
    ])
    .await;
    let out = h.kubectl(&["get", "namespace", "gshare-sessions"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("namespaces \"gshare-sessions\" not found"), "{err}");
}

/// RBAC a Helm release left without its Deployment is not taken over silently either: 409
/// `operator_exists` names the object, the release and how its rules differ; `?replace=true`
/// deletes it and creates gShare's.
#[tokio::test]
async fn helm_owned_rbac_without_a_deployment_is_not_taken_over_silently() {
    let s = server_with(&[]).await;
    let c = fake("helm-rbac").await;
    let id = register(&s, "helm-rbac", &c).await;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "gshare-operator-watch",
                     "labels": {"app.kubernetes.io/managed-by": "Helm"},
                     "annotations": {"meta.helm.sh/release-name": "gshare", "meta.helm.sh/release-namespace": "gshare-system"},
                     "managedFields": [{"manager": "helm", "operation": "Update", "apiVersion": "rbac.authorization.k8s.io/v1"}]},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    });
    c.store().put("rbac.authorization.k8s.io", "v1", "clusterroles", role).unwrap();
    let body = expect_error(attach(&s, &id, "").await, 409, "operator_exists").await;
    let installs = body["error"]["details"]["installs"].as_array().unwrap_or_else(|| panic!("{body}"));
    assert_eq!(installs.len(), 1, "{body}");
    let e = &installs[0];
    assert_eq!(e["object"], "ClusterRole/gshare-operator-watch");
    assert_eq!(e["manager"], "Helm (release gshare in gshare-system)");
    assert_eq!(e["field_managers"], json!(["helm"]));
    let diffs = e["differences"].to_string();
    assert!(diffs.contains("rules attach would drop: get,list,watch pods"), "{diffs}");
    assert!(diffs.contains("rules attach would add") && diffs.contains("secrets"), "{diffs}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ClusterRole/gshare-operator-watch was installed by Helm"), "{message}");
    assert!(message.contains("?replace=true"), "{message}");
    assert_eq!(crate::operator::count(&c, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), 0);
    let kept = get(&c, "rbac.authorization.k8s.io", "v1", "clusterroles", None, "gshare-operator-watch").unwrap();
    assert_eq!(kept["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm", "changed before the 409");

    let res = attach(&s, &id, "?replace=true").await;
    assert_eq!(res.status(), 200);
    let report: Value = res.json().await.unwrap();
    let results = crate::operator::results(&report);
    let role = results.iter().find(|(o, _)| o == "ClusterRole/gshare-operator-watch").unwrap();
    assert_eq!(role.1, "replaced", "{results:?}");
    let now = get(&c, "rbac.authorization.k8s.io", "v1", "clusterroles", None, "gshare-operator-watch").unwrap();
    assert!(now["metadata"]["annotations"]["meta.helm.sh/release-name"].is_null(), "{now}");
    assert!(watch_secrets(&c));
    // gShare's own now: a re-run is not refused.
    assert_eq!(attach(&s, &id, "").await.status(), 200);
}

/// Detach asks for every delete right before deleting anything; a refusal names each missing
/// right and the objects that need it, and the cluster is left as it was.
#[tokio::test]
async fn detach_preflights_its_delete_rights() {
    let s = server_with(&[]).await;
    let c = fake("no-delete").await;
    let id = register(&s, "no-delete", &c).await;
    assert_eq!(attach(&s, &id, "").await.status(), 200);
    c.store().put("gshare.io", "v1", "gsharesessions", session_cr("ses-1", "gshare-sessions")).unwrap();
    // Everything but deleting RBAC objects and custom resources.
    c.knobs().set_rights(Some(vec![
        right(json!({"apiGroups": ["", "apps", "apiextensions.k8s.io", "authorization.k8s.io"], "resources": ["*"], "verbs": ["*"]})),
        right(json!({"apiGroups": ["rbac.authorization.k8s.io", "gshare.io"], "resources": ["*"],
                     "verbs": ["get", "list", "watch", "create", "patch", "update"]})),
    ]));
    let path = format!("/api/v1/clusters/{id}/detach?force=true");
    let res = crate::operator::call(&s, reqwest::Method::POST, &path, None).await;
    let body = expect_error(res, 422, "cluster_forbidden").await;
    let denied = body["error"]["details"]["denied"].as_array().unwrap();
    let find = |verb: &str, resource: &str| {
        denied.iter().find(|d| d["verb"] == verb && d["resource"] == resource).unwrap_or_else(|| panic!("{body}"))
    };
    let roles = find("delete", "clusterroles.rbac.authorization.k8s.io");
    assert!(roles["objects"].to_string().contains("ClusterRole/gshare-operator-watch"), "{roles}");
    let crs = find("delete", "gsharesessions.gshare.io");
    assert_eq!(crs["objects"], json!(["GShareSession/gshare-sessions/ses-1"]));
    assert_eq!(crs["namespace"], "gshare-sessions");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("delete clusterroles.rbac.authorization.k8s.io") && message.contains("nothing was deleted")
    );
    assert!(!denied.iter().any(|d| d["resource"] == "deployments.apps"), "{body}");
    // Nothing deleted, the CR not even marked, still attached.
    assert!(get(&c, "apps", "v1", "deployments", Some("gshare-system"), "gshare-operator").is_some());
    let cr = get(&c, "gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "ses-1").unwrap();
    assert!(cr["metadata"]["deletionTimestamp"].is_null() && !cr["metadata"]["finalizers"].is_null(), "{cr}");
    let view = send(&s, reqwest::Method::GET, &format!("/api/v1/clusters/{id}"), None, 200).await;
    assert_ne!(view["operator"]["state"], "not_attached");

    c.knobs().set_rights(None);
    let res = crate::operator::call(&s, reqwest::Method::POST, &path, None).await;
    assert_eq!(res.status(), 200);
    assert!(get(&c, "gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "ses-1").is_none());
}

/// An attached operator that never called back
/// (`silent`) and an attach that stopped part-way (`attach_incomplete`) refuse a new session
/// with 409 `operator_not_connected` naming the state and what to do.
#[tokio::test]
async fn a_session_on_a_silent_or_half_attached_operator_is_refused_naming_the_state() {
    let s = server_with(&[("GSHARE_OPERATOR_ATTACH_TIMEOUT", "2s")]).await;
    let off = crate::sessions::offering(&s, "slice").await;
    let sessions_now = |s: &TestServer| {
        let app = s.app_arc();
        async move { app.store.read(|txn| gshare::sessions::model::SESSIONS.list(txn)).await.unwrap().len() }
    };

    let quiet = fake("quiet").await;
    let quiet_id = register(&s, "quiet", &quiet).await;
    assert_eq!(attach(&s, &quiet_id, "").await.status(), 200);
    let body = json!({"offering_id": off, "cluster_id": quiet_id});
    let res = crate::operator::call(&s, reqwest::Method::POST, "/api/v1/sessions", Some(body)).await;
    let e = expect_error(res, 409, "operator_not_connected").await;
    assert_eq!(e["error"]["details"], json!({"cluster_id": quiet_id, "operator_state": "silent"}), "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.contains("quiet is silent") && m.contains("never called back"), "{m}");

    let half = fake("half").await;
    let half_id = register(&s, "half", &half).await;
    half.knobs().set_write_delay(Some(Duration::from_millis(400)));
    expect_error(attach(&s, &half_id, "").await, 504, "attach_deadline").await;
    half.knobs().set_write_delay(None);
    let body = json!({"offering_id": off, "cluster_id": half_id});
    let res = crate::operator::call(&s, reqwest::Method::POST, "/api/v1/sessions", Some(body)).await;
    let e = expect_error(res, 409, "operator_not_connected").await;
    assert_eq!(e["error"]["details"], json!({"cluster_id": half_id, "operator_state": "attach_incomplete"}), "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(m.contains("half is attach incomplete") && m.contains("attach again"), "{m}");
    assert!(quiet.store().list("gshare.io", "v1", "gsharesessions", None).is_empty(), "a CR was applied");
    assert_eq!(sessions_now(&s).await, 0, "a refused session was stored");
}

/// A token whose kid names no key here is tried against the ring, and the log
/// says which key matched (and the kid claimed), so an admin can set `internal_jwt_kid`.
#[tokio::test]
async fn an_unknown_kid_is_matched_by_key_and_logged() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || buf.clone())
        .with_ansi(false)
        .fmt_fields(gshare::logging::EscapedFields)
        .finish();
    let _guard = tracing::subscriber::set_default(sub);

    let key = gshare::auth::keys::SigningKey::generate_for_tests();
    let pem = key.private_pem().expose().to_string();
    let s = TestServer::start_with(&[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", pem.as_str())]).await;
    let jwks: Value = s.get("/.well-known/gshare-internal-jwks.json").await.json().await.unwrap();
    let ours = jwks["keys"][0]["kid"].as_str().unwrap().to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let cluster = "clu_01JABCDEFGHJKMNPQRSTVWXYZ0";
    let claims = json!({"sub": format!("operator:{cluster}"), "aud": "gshare-internal", "iss": "gshare-internal",
                        "iat": now, "nbf": now, "exp": now + 3600});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("upstream-kid".into());
    let token =
        jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap())
            .unwrap();
    let res = s.client.get(s.url("/internal/nodes/cordoned")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // A foreign key under the same unknown kid: refused, and no "matched" line for it.
    let other = gshare::auth::keys::SigningKey::generate_for_tests();
    header.kid = Some("forged-kid".into());
    let forged = jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(other.private_pem().expose().as_bytes()).unwrap(),
    )
    .unwrap();
    let res = s.client.get(s.url("/internal/nodes/cordoned")).bearer_auth(forged).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    s.stop().await;

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let matched: Vec<&str> = text.lines().filter(|l| l.contains("matched another key of the ring")).collect();
    assert_eq!(matched.len(), 1, "{text}");
    assert!(matched[0].contains("claimed_kid=upstream-kid"), "{}", matched[0]);
    assert!(matched[0].contains(&format!("matched_kid={ours}")), "{}", matched[0]);
}
