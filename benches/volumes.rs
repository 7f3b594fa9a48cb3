//! Volume sync benchmark (release build, in-process server on loopback): the operator's leader
//! posting `POST /internal/volumes/sync` with 2,000 volumes (every one a member's home on the
//! cluster) and 2,000 sessions' scratch-disk readings, against the node report
//! (`POST /internal/inventory/nodes`) carrying the same 2,000 nodes, in the same run:
//! 1. a sync in which every figure changed (2,000 volume records and 2,000 scratch disks
//!    rewritten): latency and store commits (each commit is one fsync);
//! 2. the same sync again (nothing changed: nothing written, no fsync);
//! 3. baseline: 2,000 node reports, one request each as the operator sends them, over 16
//!    connections, first with every node new and then with every node changed: total time,
//!    per-request median and commits.
//!
//! Run: `cargo bench --bench volumes` (`BENCH_VOLUMES` changes the 2,000, `BENCH_ROUNDS` the 15 syncs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use base64::Engine;
use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::config::Config;
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::{Value, json};

mod common;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn commits(app: &gshare::App) -> u64 {
    app.store.commit_stats().count
}

fn sync_body(cid: &str, homes: &[String], round: i64) -> Value {
    let volumes: Vec<Value> = homes
        .iter()
        .enumerate()
        .map(|(i, id)| {
            json!({"name": id.to_lowercase().replace('_', "-"), "volume_id": id, "capacity_gb": 10,
                   "used_bytes": (i as i64 + 1) * 1_048_576 + round, "mounted": true, "storage_class": "zfs-nvme"})
        })
        .collect();
    let sessions: Vec<Value> = (0..homes.len())
        .map(|i| json!({"name": format!("ses-{i:026}"), "ephemeral_used_bytes": 4096 + round, "ephemeral_limit_bytes": 10_737_418_240i64}))
        .collect();
    json!({"volumes": volumes, "sessions": sessions,
           "pools": [{"storage_class": "zfs-nvme", "capacity_bytes": 4_000_000_000_000i64 + round}], "cluster_id": cid})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_usize("BENCH_VOLUMES", 2000);
    let rounds = env_usize("BENCH_ROUNDS", 15);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_data_dir(&dir.path().join("data"), &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    let server = RunningServer::start(config, Clock::system()).await.unwrap();
    let app = server.app.clone();
    let base = server.base_url();
    let client = reqwest::Client::new();
    let admin = app.auth.api.mint("admin:bench", Duration::from_secs(3600)).unwrap();

    let fake = FakeCluster::start(ClusterSpec::default()).await.unwrap();
    let kubeconfig = base64::engine::general_purpose::STANDARD.encode(fake.kubeconfig_yaml());
    let res = client
        .post(format!("{base}/api/v1/clusters"))
        .bearer_auth(&admin)
        .json(&json!({"name": "bench", "role": "primary", "kubeconfig_b64": kubeconfig}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let cid = res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let op = app.auth.internal.mint(&format!("operator:{cid}"), Duration::from_secs(3600)).unwrap();

    // n members' homes on the cluster, made as their first sessions make them.
    let (c2, conf) = (cid.clone(), app.config.clone());
    let homes: Vec<String> = app
        .store
        .write(move |txn| {
            let cluster = gshare::clusters::model::CLUSTERS.get_in_write(txn, &c2)?.unwrap();
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let m = gshare::volumes::txn::mounts_for_session(txn, &format!("member{i:05}"), &cluster, 0, &conf)?;
                out.push(m[0].volume_id.clone());
            }
            Ok(out)
        })
        .await
        .unwrap();

    let post = {
        let (client, op, base) = (client.clone(), op.clone(), base.clone());
        move |path: &'static str, body: Vec<u8>| {
            let (client, op, base) = (client.clone(), op.clone(), base.clone());
            async move {
                let t = Instant::now();
                let res = client
                    .post(format!("{base}{path}"))
                    .bearer_auth(op)
                    .header("Content-Type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = res.status();
                let bytes = res.bytes().await.unwrap();
                assert!(status.is_success(), "{path}: {status} {}", String::from_utf8_lossy(&bytes));
                (t.elapsed(), bytes.len())
            }
        }
    };

    println!("volume sync: {n} volumes + {n} scratch-disk readings in one POST; {rounds} rounds each");
    let first = serde_json::to_vec(&sync_body(&cid, &homes, 0)).unwrap();
    let body_kib = first.len() as f64 / 1024.0;
    post("/internal/volumes/sync", first).await; // the first figures (every record written once)
    let (mut changed, mut changed_commits, mut answer_len) = (Vec::new(), 0, 0);
    for round in 1..=rounds as i64 {
        let body = serde_json::to_vec(&sync_body(&cid, &homes, round)).unwrap();
        let before = commits(&app);
        let (d, len) = post("/internal/volumes/sync", body).await;
        changed_commits += commits(&app) - before;
        changed.push(d);
        answer_len = len;
    }
    let same = serde_json::to_vec(&sync_body(&cid, &homes, rounds as i64)).unwrap();
    let (mut unchanged, mut unchanged_commits) = (Vec::new(), 0);
    for _ in 0..rounds {
        let before = commits(&app);
        unchanged.push(post("/internal/volumes/sync", same.clone()).await.0);
        unchanged_commits += commits(&app) - before;
    }
    println!(
        "  every figure changed   median {:>8.1} ms  commits (fsyncs) per sync {:.1}  body {body_kib:.0} KiB, answer {:.0} KiB",
        ms(median(changed.clone())),
        changed_commits as f64 / rounds as f64,
        answer_len as f64 / 1024.0
    );
    println!(
        "  nothing changed        median {:>8.1} ms  commits (fsyncs) per sync {:.1}",
        ms(median(unchanged.clone())),
        unchanged_commits as f64 / rounds as f64
    );

    // Baseline: the node report of the same size, one request per node as the operator sends it.
    let mut node_total = Duration::ZERO;
    for (label, cpu) in [("every node new", 64), ("every node changed", 96)] {
        let before = commits(&app);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..16usize {
            let post = post.clone();
            let cid = cid.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for i in (w..n).step_by(16) {
                    let body = json!({"node_id": format!("node-{i:05}"), "node_cpu": cpu, "node_mem_gb": 512,
                                      "node_disk_gb": 2000, "role": "gpu", "node_ready": true, "cluster_id": cid});
                    out.push(post("/internal/inventory/nodes", serde_json::to_vec(&body).unwrap()).await.0);
                }
                out
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let total = started.elapsed();
        node_total = total;
        let c = commits(&app) - before;
        println!(
            "  node reports, {label:<18} {n} POSTs over 16 connections: total {:>8.1} ms  per-request median {:.2} ms  commits (fsyncs) {c}",
            ms(total),
            ms(median(all)),
        );
    }
    println!(
        "  ratio: one {n}-volume sync, every figure changed (median) / {n} node reports, every node changed (total) = {:.2}",
        median(changed).as_secs_f64() / node_total.as_secs_f64()
    );
    server.stop().await;
}
