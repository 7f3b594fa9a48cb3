//! Cluster benchmarks (release build, in-process server on loopback):
//! 1. hot-load latency: kubeconfig file written -> the rebuilt client in use (median of 20);
//! 2. `GET /api/v1/clusters` with 200 clusters, 10,000 nodes and 80,000 GPUs stored, 16
//!    concurrent connections: p50/p99, with `GET /healthz` measured in the same run as baseline.
//!
//! Run: `cargo bench --bench clusters`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::clusters::ClusterEvent;
use gshare::clusters::model::*;
use gshare::config::Config;
use gshare_fake_kube::{ClusterSpec, FakeCluster};

mod common;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

async fn start(dir: &std::path::Path) -> RunningServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::for_data_dir(&dir.join("data"), &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    RunningServer::start(config, Clock::system()).await.unwrap()
}

async fn hot_load() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let app = server.app.clone();
    let client = reqwest::Client::new();
    let token = app.auth.api.mint("admin:bench", Duration::from_secs(3600)).unwrap();
    let fake = FakeCluster::start(ClusterSpec::default()).await.unwrap();
    let body = serde_json::json!({"name": "bench", "role": "primary",
        "kubeconfig_b64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, fake.kubeconfig_yaml())});
    let res = client
        .post(format!("{}/api/v1/clusters", server.base_url()))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let v: serde_json::Value = res.json().await.unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    let file = dir.path().join("data/clusters").join(&id).join("kubeconfig");
    let mut samples = Vec::new();
    let mut events = app.clusters.subscribe();
    for i in 0..20 {
        let token = format!("{i:040x}");
        fake.knobs().allow_token(&token);
        let text = fake.kubeconfig_yaml().replace(fake.token(), &token);
        let hash = gshare::clusters::kubeconfig::content_hash(text.as_bytes());
        let t = Instant::now();
        std::fs::write(&file, &text).unwrap();
        // "In use": rebuilt and a probe through the new client finished.
        let mut rebuilt = false;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), events.recv()).await.unwrap().unwrap() {
                ClusterEvent::ClientRebuilt { hash: h, .. } if h == hash => rebuilt = true,
                ClusterEvent::Probed { id: p, .. } if rebuilt && p == id => break,
                _ => {}
            }
        }
        samples.push(t.elapsed());
    }
    samples.sort();
    println!(
        "hot-load (file write -> new client probed), n=20: median {}  p90 {}  max {}  (target <= 1 s)",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(*samples.last().unwrap())
    );
    server.stop().await;
}

async fn seed_large(app: &gshare::App) {
    // 200 clusters x 50 nodes x 8 GPUs = 10,000 nodes, 80,000 GPUs.
    for c in 0..200u32 {
        let id = gshare::clusters::ClusterId::mint().to_string();
        let id2 = id.clone();
        app.store
            .write(move |txn| {
                for n in 0..50u32 {
                    let uuids: Vec<String> = (0..8u32).map(|g| format!("GPU-{c:04}-{n:03}-{g}")).collect();
                    common::seed::node(txn, &id2, &format!("node-{n:03}"), &uuids, 0)?;
                }
                CLUSTERS.put(
                    txn,
                    &id2,
                    &ClusterRecord {
                        id: id2.clone(),
                        name: format!("cluster-{c:03}"),
                        role: Role::Primary,
                        api_server: format!("https://10.0.{}.{}:6443", c / 250, c % 250),
                        api_server_override: false,
                        api_server_kubeconfig_hash: None,
                        session_domain: None,
                        session_ingress: None,
                        status: ClusterStatus::Connected,
                        checks: Vec::new(),
                        last_error: None,
                        kube_system_uid: format!("uid-{c}"),
                        kubeconfig_ref: format!("file:{id2}/kubeconfig").into(),
                        kubernetes_version: Some("v1.31.0".into()),
                        registered_at: i64::from(c),
                        last_checked_at: Some(0),
                        deleted_at: None,
                        prerequisites: None,
                    },
                )?;
                gshare::inventory::model::CLUSTER_COUNTS.put(
                    txn,
                    &id2,
                    &gshare::clusters::model::ClusterCounts {
                        node_count: 50,
                        gpu_count: 400,
                        vram_total_mb: 400 * 81920,
                        running_sessions: 3,
                        heartbeat_at: Some(0),
                    },
                )
            })
            .await
            .unwrap();
        let _ = id;
    }
}

/// `total` requests over `conns` concurrent keep-alive connections; sorted latencies and req/s.
async fn load(url: &str, token: Option<&str>, conns: usize, total: usize) -> (Vec<Duration>, f64) {
    let per = total / conns;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let url = url.to_string();
        let token = token.map(str::to_string);
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
            let mut out = Vec::with_capacity(per);
            for _ in 0..per {
                let mut req = client.get(&url);
                if let Some(t) = &token {
                    req = req.bearer_auth(t);
                }
                let t = Instant::now();
                let res = req.send().await.unwrap();
                assert!(res.status().is_success());
                let _ = res.bytes().await.unwrap();
                out.push(t.elapsed());
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort();
    (all, rate)
}

async fn list_at_scale() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let app: Arc<gshare::App> = server.app.clone();
    let t = Instant::now();
    seed_large(&app).await;
    println!("seeded 200 clusters / 10,000 nodes / 80,000 GPUs in {:.1} s", t.elapsed().as_secs_f64());
    let token = app.auth.api.mint("admin:bench", Duration::from_secs(3600)).unwrap();
    let base = server.base_url();
    // Warm up, then measure.
    load(&format!("{base}/healthz"), None, 16, 1600).await;
    load(&format!("{base}/api/v1/clusters?size=100"), Some(&token), 16, 1600).await;
    let (h, hr) = load(&format!("{base}/healthz"), None, 16, 16_000).await;
    let (l, lr) = load(&format!("{base}/api/v1/clusters?size=20"), Some(&token), 16, 16_000).await;
    let (l100, l100r) = load(&format!("{base}/api/v1/clusters?size=100"), Some(&token), 16, 8_000).await;
    println!("16 connections, in-process client (shares the 2 cores with the server):");
    println!(
        "  GET /healthz (baseline)          p50 {}  p99 {}  {:.0} req/s",
        ms(percentile(&h, 0.5)),
        ms(percentile(&h, 0.99)),
        hr
    );
    println!(
        "  GET /api/v1/clusters?size=20     p50 {}  p99 {}  {:.0} req/s  (p99 target <= 5 ms; {:.2}x baseline p99)",
        ms(percentile(&l, 0.5)),
        ms(percentile(&l, 0.99)),
        lr,
        percentile(&l, 0.99).as_secs_f64() / percentile(&h, 0.99).as_secs_f64()
    );
    println!(
        "  GET /api/v1/clusters?size=100    p50 {}  p99 {}  {:.0} req/s",
        ms(percentile(&l100, 0.5)),
        ms(percentile(&l100, 0.99)),
        l100r
    );
    // The same with wrk, a separate and much lighter client process (when installed).
    if common::have_wrk() {
        println!("16 connections, wrk -t2 -c16 -d10s (separate process, same 2 cores):");
        let auth = [format!("Authorization: Bearer {token}")];
        for (label, path, headers) in [
            ("GET /healthz (baseline)", "/healthz", &[][..]),
            ("GET /api/v1/clusters?size=20", "/api/v1/clusters?size=20", &auth[..]),
            ("GET /api/v1/clusters?size=100", "/api/v1/clusters?size=100", &auth[..]),
        ] {
            common::wrk(label, &format!("{base}{path}"), headers).await;
        }
    }
    server.stop().await;
}

fn main() {
    // `cargo test --benches` runs benches with --bench absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        hot_load().await;
        list_at_scale().await;
    });
}
