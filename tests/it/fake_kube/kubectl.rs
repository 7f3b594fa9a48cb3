//! Real kubectl against the fake: what it prints must be what a real cluster makes it print.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use gshare_fake_kube::{Auth, ClusterSpec, gpu_uuid};
use serde_json::Value;

use super::{CRD_YAML, Harness, SESSION_NS_YAML, session_yaml};

#[tokio::test]
async fn get_nodes_json_carries_gpus_labels_and_hami_devices() {
    let h = Harness::default().await;
    let nodes = h.kubectl_json(&["get", "nodes", "-o", "json"]).await;
    let items = nodes["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    let node = &items[0];
    let name = node["metadata"]["name"].as_str().expect("name");
    assert_eq!(name, "gpu-node-0");
    assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "4");
    assert_eq!(node["status"]["allocatable"]["nvidia.com/gpu"], "4");
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], name);
    assert_eq!(labels["gshare.io/gpu"], "true");
    assert_eq!(labels["gshare.io/gpu-mode"], "fractional");
    assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB");
    let ready = node["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("Ready condition");
    assert_eq!(ready["status"], "True");
    let register =
        node["metadata"]["annotations"]["hami.io/node-nvidia-register"].as_str().expect("HAMi register annotation");
    let devices: Value = serde_json::from_str(register).expect("annotation is JSON");
    let devices = devices.as_array().expect("a JSON array");
    assert_eq!(devices.len(), 4);
    let uid = h.cluster.kube_system_uid();
    assert_eq!(devices[1]["id"], gpu_uuid(&uid, name, 1));
    assert_eq!(devices[0]["devmem"], 81920);
    assert_eq!(devices[0]["count"], 10);
    assert_eq!(devices[0]["type"], "NVIDIA-NVIDIA A100-SXM4-80GB");
    assert_eq!(devices[0]["health"], true);
    assert_eq!(devices[0]["mode"], "hami-core");
    assert!(node["metadata"]["annotations"]["hami.io/node-handshake"].is_string());

    let table = h.kubectl_ok(&["get", "nodes"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
    assert_eq!(row[0], "gpu-node-0");
    assert_eq!(row[1], "Ready");
    assert_eq!(row[4], "v1.32.4");

    let ns = h.kubectl_json(&["get", "namespace", "kube-system", "-o", "json"]).await;
    assert_eq!(ns["metadata"]["uid"], uid.as_str());
}

#[tokio::test]
async fn get_runtimeclass_nvidia_and_its_removal() {
    let h = Harness::default().await;
    let out = h.kubectl_ok(&["get", "runtimeclass", "nvidia"]).await;
    let row: Vec<&str> = out.lines().nth(1).expect("row").split_whitespace().collect();
    assert_eq!(&row[..2], ["nvidia", "nvidia"]);
    assert!(h.cluster.knobs().remove_runtime_class("nvidia"));
    let out = h.kubectl(&["get", "runtimeclass", "nvidia"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runtimeclasses.node.k8s.io \"nvidia\" not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The GShareSession flow: CRD, server-side apply (idempotent, conflicting, forced),
/// get -o json, JSON patch, delete.
#[tokio::test]
async fn crd_server_side_apply_conflicts_patch_and_delete() {
    let h = Harness::default().await;
    let crd = h.file("crd.yaml", CRD_YAML);
    let crd = crd.to_str().expect("utf-8 path");
    let out = h.kubectl_ok(&["apply", "-f", crd]).await;
    assert_eq!(out.trim(), "customresourcedefinition.apiextensions.k8s.io/gsharesessions.gshare.io created");
    let ns = h.file("ns.yaml", SESSION_NS_YAML);
    h.kubectl_ok(&["apply", "-f", ns.to_str().expect("path")]).await;

    let session = h.file("session.yaml", &session_yaml("alice", 20480));
    let session = session.to_str().expect("path");
    let out = h.kubectl_ok(&["apply", "--server-side", "-f", session]).await;
    assert_eq!(out.trim(), "gsharesession.gshare.io/s1 serverside-applied");
    let first = session_rv(&h).await;
    let out = h.kubectl_ok(&["apply", "--server-side", "-f", session]).await;
    assert_eq!(out.trim(), "gsharesession.gshare.io/s1 serverside-applied");
    assert_eq!(session_rv(&h).await, first, "a second identical apply is a no-op");

    let other = h.file("other.yaml", &session_yaml("alice", 40960));
    let other = other.to_str().expect("path");
    let out = h.kubectl(&["apply", "--server-side", "--field-manager=other", "-f", other]).await;
    assert!(!out.status.success(), "a conflicting apply must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .spec.gpuMemMb"), "{err}");
    assert!(err.contains("--force-conflicts"), "kubectl recognised the conflict: {err}");
    h.kubectl_ok(&["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other]).await;

    let list = h.kubectl_json(&["get", "gsharesessions", "-n", "gshare-sessions", "-o", "json"]).await;
    let item = &list["items"][0];
    assert_eq!(item["kind"], "GShareSession");
    assert_eq!(item["spec"]["gpuMemMb"], 40960);
    assert_eq!(item["spec"]["user"], "alice");
    assert_eq!(item["metadata"]["generation"], 2);
    let managers: Vec<String> = h
        .cluster
        .store()
        .get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "s1")
        .expect("stored")["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| format!("{}/{}", m["manager"].as_str().unwrap_or(""), m["operation"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(managers, ["kubectl/Apply", "other/Apply"]);

    let out = h
        .kubectl_ok(&[
            "patch",
            "gss",
            "s1",
            "-n",
            "gshare-sessions",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/user","value":"bob"}]"#,
        ])
        .await;
    assert_eq!(out.trim(), "gsharesession.gshare.io/s1 patched");
    let stored =
        h.cluster.store().get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "s1").expect("stored");
    assert_eq!(stored["spec"]["user"], "bob");

    let table = h.kubectl_ok(&["get", "gss", "-n", "gshare-sessions"]).await;
    let header: Vec<&str> = table.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "USER", "PHASE", "AGE"]);

    let out = h.kubectl_ok(&["delete", "gss", "s1", "-n", "gshare-sessions"]).await;
    assert_eq!(out.trim(), "gsharesession.gshare.io \"s1\" deleted");
    assert!(h.cluster.store().get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "s1").is_none());
}

async fn session_rv(h: &Harness) -> String {
    h.kubectl_ok(&["get", "gss", "s1", "-n", "gshare-sessions", "-o", "jsonpath={.metadata.resourceVersion}"]).await
}

#[tokio::test]
async fn get_watch_prints_changes() {
    let h = Harness::default().await;
    h.kubectl_ok(&["apply", "-f", h.file("crd.yaml", CRD_YAML).to_str().expect("path")]).await;
    h.kubectl_ok(&["apply", "-f", h.file("ns.yaml", SESSION_NS_YAML).to_str().expect("path")]).await;
    let session = h.file("s.yaml", &session_yaml("alice", 1024));
    h.kubectl_ok(&["apply", "--server-side", "-f", session.to_str().expect("path")]).await;

    // The watch is bounded twice: kubectl's own request timeout and the kill below.
    let mut child = h
        .kubectl_command(&["get", "gss", "-n", "gshare-sessions", "--watch", "--request-timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("kubectl printed a line in time")
            .expect("kubectl still running")
    };
    assert!(next_line().await.starts_with("NAME"));
    assert!(next_line().await.contains("alice"));
    h.cluster
        .store()
        .update("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), "s1", |s| {
            s["spec"]["user"] = "bob".into();
        })
        .expect("updated");
    let line = next_line().await;
    assert!(line.starts_with("s1") && line.contains("bob"), "{line}");
    child.kill().expect("kill kubectl");
    let _ = child.wait();
    reader.await.expect("reader ends");
}

#[tokio::test]
async fn client_certificate_and_plain_http_kubeconfigs_work() {
    let h = Harness::start(ClusterSpec { auth: Auth::ClientCert, ..ClusterSpec::default() }).await;
    let kc: Value = serde_yaml::from_str(&h.cluster.kubeconfig_yaml()).expect("yaml");
    assert!(kc["users"][0]["user"]["client-certificate-data"].is_string());
    assert!(kc["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
    assert!(h.kubectl_ok(&["get", "nodes"]).await.contains("gpu-node-1"));

    let h = Harness::start(ClusterSpec { tls: false, nodes: 3, ..ClusterSpec::default() }).await;
    assert!(h.cluster.server_url().starts_with("http://127.0.0.1:"));
    assert!(h.kubectl_ok(&["get", "nodes"]).await.contains("gpu-node-2"));
}

/// kubectl's typed clients send protobuf for these.
#[tokio::test]
async fn create_namespace_secret_and_configmap() {
    let h = Harness::default().await;
    let out = h.kubectl_ok(&["create", "namespace", "team-a"]).await;
    assert_eq!(out.trim(), "namespace/team-a created");
    h.kubectl_ok(&["create", "secret", "generic", "s", "-n", "team-a", "--from-literal=k=v"]).await;
    h.kubectl_ok(&["create", "configmap", "c", "-n", "team-a", "--from-literal=a=b"]).await;
    let secret = h.cluster.store().get("", "v1", "secrets", Some("team-a"), "s").expect("secret");
    assert_eq!(secret["data"]["k"], "dg==");
    assert_eq!(secret["type"], "Opaque");
    let cm = h.cluster.store().get("", "v1", "configmaps", Some("team-a"), "c").expect("cm");
    assert_eq!(cm["data"]["a"], "b");
    let out = h.kubectl(&["create", "namespace", "team-a"]).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("AlreadyExists"));
}

#[tokio::test]
async fn knobs_show_in_kubectl() {
    let h = Harness::default().await;
    assert!(h.cluster.knobs().set_node_ready("gpu-node-1", false));
    let out = h.kubectl_ok(&["get", "nodes"]).await;
    assert!(out.lines().any(|l| l.starts_with("gpu-node-1") && l.contains("NotReady")), "{out}");

    h.cluster.knobs().forbid("nodes", true);
    let out = h.kubectl(&["get", "nodes"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Error from server (Forbidden)"), "{err}");
    h.cluster.knobs().forbid("nodes", false);

    h.cluster.knobs().set_delay(Some(Duration::from_secs(5)));
    let out = h.kubectl(&["get", "nodes", "--request-timeout=1s"]).await;
    assert!(!out.status.success());
    h.cluster.knobs().set_delay(None);

    h.cluster.knobs().set_unreachable(true);
    let out = h.kubectl(&["get", "nodes", "--request-timeout=5s"]).await;
    assert!(!out.status.success());
    h.cluster.knobs().set_unreachable(false);
    h.kubectl_ok(&["get", "nodes"]).await;
}

/// The product's CRD (packaging/crds) and a GShareSession exactly as gshare builds it: kubectl
/// applies the CRD, creates the object, prints the CRD's columns and reads it back unchanged.
#[tokio::test]
async fn product_crd_and_the_cr_gshare_builds() {
    let h = Harness::default().await;
    let crd = h.file("crd.yaml", include_str!("../../../packaging/crds/gshare.io_gsharesessions.yaml"));
    let out = h.kubectl_ok(&["apply", "-f", crd.to_str().expect("path")]).await;
    assert_eq!(out.trim(), "customresourcedefinition.apiextensions.k8s.io/gsharesessions.gshare.io created");
    h.kubectl_ok(&["create", "namespace", "gshare-sessions"]).await;

    let mut s = gshare::sessions::SessionRecord::new(
        "ses_01JABCDEFGHJKMNPQRSTVWXYZ0",
        "clu_01J0000000000000000000000A",
        "gpu-a",
        "alice",
        0,
    );
    s.shape.image = "ghcr.io/lab/jupyter:4".into();
    let obj = gshare::sessions::cr::build(&s, "gshare-sessions", &[]);
    let file = h.file("session.json", &obj.to_string());
    let out = h.kubectl_ok(&["create", "-f", file.to_str().expect("path")]).await;
    assert_eq!(out.trim(), "gsharesession.gshare.io/ses-01jabcdefghjkmnpqrstvwxyz0 created");

    // Upstream's printer columns (all priority 0, so -o wide shows the same ones).
    for wide in [false, true] {
        let mut args = vec!["get", "gss", "-n", "gshare-sessions"];
        if wide {
            args.extend(["-o", "wide"]);
        }
        let table = h.kubectl_ok(&args).await;
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
        assert_eq!(header, ["NAME", "PHASE", "MODE", "GPU", "AGE"]);
        let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
        assert_eq!(row[0], "ses-01jabcdefghjkmnpqrstvwxyz0");
    }

    let back =
        h.kubectl_json(&["get", "gss", "-n", "gshare-sessions", "ses-01jabcdefghjkmnpqrstvwxyz0", "-o", "json"]).await;
    assert_eq!(back["spec"], obj["spec"]);
    assert_eq!(back["metadata"]["labels"], obj["metadata"]["labels"]);
    assert_eq!(back["metadata"]["annotations"], obj["metadata"]["annotations"]);
    assert_eq!(back["metadata"]["generation"], 1);
}
