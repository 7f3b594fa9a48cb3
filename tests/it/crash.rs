//! kill -9 in the middle of a storm of writes: every write that was answered survives, and what
//! was stored is consistent (counters equal a recount of the rows), after a restart of the real
//! binary on the same data directory.

use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The real binary serving on an ephemeral port; its address comes from its "serving" log line.
async fn start(dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gshare"))
        .arg("serve")
        .env_clear()
        .env("GSHARE_DATA_DIR", dir)
        .env("GSHARE_CONFIG", "/dev/null")
        .env("GSHARE_LISTEN", "127.0.0.1:0")
        .env("GSHARE_LOG_FORMAT", "json")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next_line().await.unwrap().expect("the server exited before serving");
        if line.contains("gshare serving") {
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            break v["fields"]["addr"].as_str().or(v["addr"].as_str()).expect("addr field").to_string();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, format!("http://{addr}"))
}

async fn cli(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gshare"))
        .args(args)
        .env_clear()
        .env("GSHARE_DATA_DIR", dir)
        .env("GSHARE_CONFIG", "/dev/null")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answered_writes_survive_kill_9_and_counters_stay_exact() {
    crate::support::init();
    let dir = tempfile::tempdir().unwrap();
    let (mut first, base) = start(dir.path()).await;
    let http = reqwest::Client::new();
    let admin = cli(dir.path(), &["admin", "token"]).await;
    let c = crate::sessions::cluster("crash").await;
    let body = json!({"name": "crash", "role": "primary", "kubeconfig_b64": STANDARD.encode(c.kubeconfig_yaml())});
    let res = http.post(format!("{base}/api/v1/clusters")).bearer_auth(&admin).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let cid = res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let op = cli(dir.path(), &["token", "operator", "--cluster-id", &cid]).await;
    let offering = json!({"name": "slice", "resource_class": "gpu", "image": "ghcr.io/lab/x:1", "gpu_mem_mb": 1024, "gpu_cores": 10});
    let res = http.post(format!("{base}/api/v1/offerings")).bearer_auth(&admin).json(&offering).send().await.unwrap();
    let off = res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    // The seeded global policy allows one live session per owner; this test creates many.
    let res = http.get(format!("{base}/api/v1/resource-policies")).bearer_auth(&admin).send().await.unwrap();
    for p in res.json::<Value>().await.unwrap()["data"].as_array().unwrap() {
        let url = format!("{base}/api/v1/resource-policies/{}", p["id"].as_str().unwrap());
        assert_eq!(http.delete(url).bearer_auth(&admin).send().await.unwrap().status(), 204);
    }
    // The operator's first callback: sessions are placed only where one is connected.
    let node = json!({"node_id": "crash-node-0", "node_ready": true, "cluster_id": cid});
    let res = http.post(format!("{base}/internal/inventory/nodes")).bearer_auth(&op).json(&node).send().await.unwrap();
    assert_eq!(res.status(), 202);

    // Writers: GPU reports on new nodes (group-committed) and session creations (record + CR).
    let acked_gpus = Arc::new(Mutex::new(Vec::<String>::new()));
    let acked_sessions = Arc::new(Mutex::new(Vec::<String>::new()));
    let (enough_tx, mut enough_rx) = tokio::sync::watch::channel(false);
    let mut writers = Vec::new();
    for w in 0..6 {
        let (http, base, op, cid, acked, enough) =
            (http.clone(), base.clone(), op.clone(), cid.clone(), acked_gpus.clone(), enough_tx.clone());
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let uuid = format!("GPU-{w:04}{i:04}-0000-0000-0000-000000000000");
                let r = json!({"node_id": format!("crash-node-{w}"), "uuid": uuid, "model": "A100", "mode": "fractional",
                    "total_mem_mb": 40960, "used_mem_mb": 0, "total_cores": 100, "used_cores": 0, "status": "ready",
                    "node_ready": true, "cluster_id": cid});
                match http.post(format!("{base}/internal/inventory/gpu-devices")).bearer_auth(&op).json(&r).send().await {
                    Ok(res) if res.status() == 202 => {
                        let n = {
                            let mut a = acked.lock().unwrap();
                            a.push(uuid);
                            a.len()
                        };
                        if n >= 400 {
                            let _ = enough.send(true);
                        }
                    }
                    _ => return,
                }
            }
        }));
    }
    {
        let (http, base, admin, off, acked) =
            (http.clone(), base.clone(), admin.clone(), off.clone(), acked_sessions.clone());
        writers.push(tokio::spawn(async move {
            loop {
                match http
                    .post(format!("{base}/api/v1/sessions"))
                    .bearer_auth(&admin)
                    .json(&json!({"offering_id": off}))
                    .send()
                    .await
                {
                    Ok(res) if res.status() == 201 => {
                        let v: Value = res.json().await.unwrap_or_default();
                        acked.lock().unwrap().push(v["id"].as_str().unwrap_or_default().to_string());
                    }
                    _ => return,
                }
            }
        }));
    }
    enough_rx.wait_for(|e| *e).await.unwrap();
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let gpus = acked_gpus.lock().unwrap().clone();
    let sessions = acked_sessions.lock().unwrap().clone();
    assert!(gpus.len() >= 400 && !sessions.is_empty(), "{} GPUs, {} sessions", gpus.len(), sessions.len());
    eprintln!("kill -9 after {} answered GPU reports and {} answered session creations", gpus.len(), sessions.len());

    // Restart on the same state: everything answered is there, and the counters add up.
    let (mut second, base) = start(dir.path()).await;
    let admin = cli(dir.path(), &["admin", "token"]).await;
    let get = |path: String| {
        let (http, admin, base) = (http.clone(), admin.clone(), base.clone());
        async move {
            let res = http.get(format!("{base}{path}")).bearer_auth(&admin).send().await.unwrap();
            assert_eq!(res.status(), 200, "{path}");
            res.json::<Value>().await.unwrap()
        }
    };
    let cluster = get(format!("/api/v1/clusters/{cid}")).await;
    let nodes = get(format!("/api/v1/clusters/{cid}/nodes")).await;
    let stored: Vec<String> = nodes
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["gpus"].as_array().unwrap().iter().map(|g| g["uuid"].as_str().unwrap().to_string()))
        .collect();
    for uuid in &gpus {
        assert!(stored.contains(uuid), "answered 202 but lost after kill -9: {uuid}");
    }
    assert_eq!(cluster["gpu_count"].as_u64().unwrap() as usize, stored.len(), "gpu_count vs rows");
    assert_eq!(cluster["node_count"].as_u64().unwrap() as usize, nodes.as_array().unwrap().len(), "node_count vs rows");
    for sid in &sessions {
        get(format!("/api/v1/sessions/{sid}")).await;
    }
    let list = get("/api/v1/sessions?size=100".into()).await;
    assert!(list["pagination"]["total"].as_u64().unwrap() as usize >= sessions.len());
    // The server keeps serving writes after the restart.
    let res = http
        .post(format!("{base}/api/v1/sessions"))
        .bearer_auth(&admin)
        .json(&json!({"offering_id": off}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    second.start_kill().unwrap();
    second.wait().await.unwrap();
}
