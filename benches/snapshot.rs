//! Snapshot of a large state while operator callbacks flow: 40,000 GPUs (1,000 nodes x 40) and
//! 20,000 sessions (2,000 live). Prints the snapshot's time (median of 3) and size, and the p50/p99
//! of `POST /internal/inventory/gpu-devices` callbacks with no snapshot running (the baseline,
//! same run) and while snapshots run back to back.
//!
//! Run: `cargo bench --bench snapshot` (or `hack/bench.sh snapshot`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::clusters::model::{CLUSTERS, ClusterRecord, Role};
use gshare::config::Config;
use gshare::sessions::model::{Phase, SessionRecord};
use serde_json::json;

mod common;

const CID: &str = "clu_01KBBENCH0000000000000000A";

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn populate(s: &RunningServer) {
    let now = Clock::system().now_ms();
    s.app
        .store
        .write(move |txn| {
            let c = ClusterRecord::new(
                CID,
                "bench".into(),
                Role::Primary,
                "https://10.0.0.1:6443".into(),
                format!("{CID}/kubeconfig"),
                now,
            );
            CLUSTERS.put(txn, CID, &c)?;
            let counts = gshare::clusters::model::ClusterCounts { node_count: 1000, ..Default::default() };
            gshare::inventory::model::CLUSTER_COUNTS.put(txn, CID, &counts)
        })
        .await
        .unwrap();
    for chunk in 0..10 {
        s.app
            .store
            .write(move |txn| {
                for n in chunk * 100..(chunk + 1) * 100 {
                    let uuids: Vec<String> =
                        (0..40).map(|g| format!("GPU-{n:08}-{g:04}-0000-0000-000000000000")).collect();
                    common::seed::node(txn, CID, &format!("node-{n:04}"), &uuids, now)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    for chunk in 0..10 {
        s.app
            .store
            .write(move |txn| {
                for i in chunk * 2000..(chunk + 1) * 2000 {
                    let mut r = SessionRecord::new(&format!("ses_01KB{i:022}"), CID, "bench", "alice", now);
                    r.set_phase(if i % 10 == 0 { Phase::Running } else { Phase::Terminated }, now);
                    gshare::sessions::model::put_session(txn, &r)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
}

/// Callbacks from 8 clients until `stop`; returns each one's latency in ms.
async fn callbacks(base: String, token: String, stop: Arc<AtomicBool>) -> Vec<f64> {
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (http, base, token, stop) = (http.clone(), base.clone(), token.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let node = format!("node-{:04}", (w * 100 + i % 100) as usize);
                let uuid = format!("GPU-{:08}-{:04}-0000-0000-000000000000", w * 100 + i % 100, i % 40);
                let body = json!({"node_id": node, "uuid": uuid, "model": "NVIDIA A100-SXM4-80GB", "mode": "fractional",
                    "total_mem_mb": 81920, "used_mem_mb": (i % 4) * 1024, "total_cores": 100, "used_cores": 0,
                    "status": "ready", "node_ready": true, "cluster_id": CID});
                let t = Instant::now();
                let res = http
                    .post(format!("{base}/internal/inventory/gpu-devices"))
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert!(res.status().is_success(), "{}", res.status());
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

async fn run() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_data_dir(
        &dir.path().join("data"),
        &[("GSHARE_LISTEN", "127.0.0.1:0"), ("GSHARE_SNAPSHOT_INTERVAL", "0s")],
    )
    .unwrap();
    let s = RunningServer::start(config, Clock::system()).await.unwrap();
    populate(&s).await;
    let token = s.app.auth.internal.mint(&format!("operator:{CID}"), Duration::from_secs(3600)).unwrap();
    let base = s.base_url();

    // Baseline: callbacks for as long as three snapshots take, without them.
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let info = s.app.snapshots.take("bench").await.unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        size = info.size_bytes;
    }
    let window: f64 = times.iter().sum();
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(callbacks(base.clone(), token.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(window as u64)).await;
    stop.store(true, Ordering::Relaxed);
    let mut base_lat = load.await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(callbacks(base.clone(), token.clone(), stop.clone()));
    let mut during_times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        s.app.snapshots.take("bench").await.unwrap();
        during_times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    stop.store(true, Ordering::Relaxed);
    let mut during_lat = load.await.unwrap();
    println!(
        "snapshot of 40,000 GPUs + 20,000 sessions: {:.0} ms median of 3 idle, {:.0} ms median of 3 under callbacks; {:.1} MiB",
        pct(&mut times, 0.5),
        pct(&mut during_times, 0.5),
        size as f64 / 1048576.0
    );
    println!(
        "gpu-devices callbacks (8 clients): baseline p50 {:.2} ms p99 {:.2} ms ({} calls); during snapshots p50 {:.2} ms p99 {:.2} ms ({} calls)",
        pct(&mut base_lat, 0.5),
        pct(&mut base_lat, 0.99),
        base_lat.len(),
        pct(&mut during_lat, 0.5),
        pct(&mut during_lat, 0.99),
        during_lat.len()
    );
    s.stop().await;
}

fn main() {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(run());
}
