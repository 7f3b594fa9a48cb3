//! Create-session latency with fair sharing's admission (the owner's resource policy and the fit
//! check) at 40,000 GPUs, against creates that skip both, in the same run (release build,
//! in-process server, a fake cluster as Kubernetes, sequential requests timed by the client):
//! 1. GPU slice: policy (the seeded global one) + fit check on a summary already built;
//! 2. baseline: a CPU offering with no policy stored (no fit check; 4 point reads remain);
//! 3. GPU slice right after a write that changes one card (the cluster's summary is rebuilt from
//!    its 40,000 cards in the create's transaction).
//!
//! Run: `cargo bench --bench admission` (or `hack/bench.sh admission`). `BENCH_GPUS` changes the
//! fleet (40,000), `BENCH_CREATES` the creates per kind (400; the cold kind a tenth of it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use base64::Engine;
use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::config::Config;
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

mod common;

const CRD: &str = include_str!("../packaging/crds/gshare.io_gsharesessions.yaml");

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn line(label: &str, mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let (p50, p99) = (pct(&v, 0.5), pct(&v, 0.99));
    println!("{label:<58} n={:<4} p50 {p50:>7.2} ms  p99 {p99:>7.2} ms", v.len());
    p50
}

async fn run() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let env_n = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (gpus, creates) = (env_n("BENCH_GPUS", 40_000), env_n("BENCH_CREATES", 400));
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_data_dir(
        &dir.path().join("data"),
        &[("GSHARE_LISTEN", "127.0.0.1:0"), ("GSHARE_LOG_LEVEL", "warn"), ("GSHARE_PROBE_INTERVAL", "86400s")],
    )
    .unwrap();
    let server = RunningServer::start(config, Clock::system()).await.unwrap();
    let app = server.app.clone();
    let base = server.base_url();
    let http = reqwest::Client::new();
    let admin = app.auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap();

    let c = FakeCluster::start(ClusterSpec { name: "bench".into(), ..ClusterSpec::default() }).await.unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&c.kubeconfig_yaml()).unwrap();
    let client =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
    let ns = serde_json::from_value(json!({"metadata": {"name": "gshare-sessions"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client).create(&PostParams::default(), &ns).await.unwrap();
    let post = |path: &str, body: Value| http.post(format!("{base}{path}")).bearer_auth(&admin).json(&body).send();
    let kc_b64 = base64::engine::general_purpose::STANDARD.encode(c.kubeconfig_yaml());
    let v: Value = post("/api/v1/clusters", json!({"name": "bench", "role": "primary", "kubeconfig_b64": kc_b64}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cid = v["id"].as_str().unwrap().to_string();
    let offering = |body: Value| async move {
        let v: Value = post("/api/v1/offerings", body).await.unwrap().json().await.unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let gpu_off = offering(json!({"name": "slice", "resource_class": "gpu", "image": "x/y:1", "gpu_model": "A100",
        "gpu_mem_mb": 10240, "gpu_cores": 10}))
    .await;
    let cpu_off = offering(json!({"name": "cpu", "resource_class": "cpu", "image": "x/y:1"})).await;
    let op = app.auth.internal.mint(&format!("operator:{cid}"), Duration::from_secs(3600)).unwrap();
    let node = json!({"node_id": "gpu-node-0", "node_ready": true, "cluster_id": cid});
    let res = http.post(format!("{base}/internal/inventory/nodes")).bearer_auth(&op).json(&node).send().await.unwrap();
    assert_eq!(res.status(), 202);

    // The fleet: 8 cards a node, every card on its node.
    let (cid2, now) = (cid.clone(), app.clock.now_ms());
    app.store
        .write(move |txn| {
            for n in 0..gpus.div_ceil(8) {
                let uuids: Vec<String> = (0..8).map(|g| format!("GPU-bench-{n}-{g}")).collect();
                common::seed::node(txn, &cid2, &format!("bench-{n}"), &uuids, now)?;
            }
            gshare::inventory::fit::changed(txn, &cid2);
            Ok(())
        })
        .await
        .unwrap();
    println!(
        "{gpus} GPUs on {} nodes in one cluster; the seeded global policy; {creates} creates a kind",
        gpus.div_ceil(8)
    );

    let global = app.store.read(|txn| gshare::policy::model::POLICIES.get(txn, "global")).await.unwrap().unwrap();
    let mut owner = 0u64;
    let mut create = async |off: &str| -> f64 {
        owner += 1;
        let t = Instant::now();
        let res = post("/api/v1/sessions", json!({"offering_id": off, "owner": format!("u{owner}")})).await.unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
        ms
    };
    // Warm up: the summary is built once, connections are open.
    for _ in 0..20 {
        create(&gpu_off).await;
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let set_global = |p: Option<gshare::policy::model::PolicyRecord>| {
        app.store.write(move |txn| match &p {
            Some(p) => gshare::policy::model::POLICIES.put(txn, "global", p),
            None => gshare::policy::model::POLICIES.delete(txn, "global").map(drop),
        })
    };
    // The operator calls back now and then (a silent one takes no sessions after 120 s).
    let beat = || async {
        let res =
            http.post(format!("{base}/internal/inventory/nodes")).bearer_auth(&op).json(&node).send().await.unwrap();
        assert_eq!(res.status(), 202);
    };
    // Interleaved in rounds of 20, so both kinds see the same machine.
    for _ in 0..creates / 20 {
        beat().await;
        set_global(Some(global.clone())).await.unwrap();
        for _ in 0..20 {
            with.push(create(&gpu_off).await);
        }
        set_global(None).await.unwrap();
        for _ in 0..20 {
            without.push(create(&cpu_off).await);
        }
    }
    set_global(Some(global.clone())).await.unwrap();
    // Cold: one card changes before each create (the summary is rebuilt inside the create).
    let mut cold = Vec::new();
    for i in 0..(creates / 10).max(5) {
        beat().await;
        let cid2 = cid.clone();
        app.store
            .write(move |txn| {
                let key = format!("{cid2}/GPU-bench-{i}-0");
                let mut g = gshare::inventory::model::GPUS.get_in_write(txn, &key)?.unwrap();
                g.used_mem_mb = (g.used_mem_mb + 1) % 1024;
                gshare::inventory::model::GPUS.put(txn, &key, &g)?;
                gshare::inventory::fit::changed(txn, &cid2);
                Ok(())
            })
            .await
            .unwrap();
        cold.push(create(&gpu_off).await);
    }
    let w = line("POST /api/v1/sessions, GPU slice, policy + fit (summary built)", with);
    let b = line("POST /api/v1/sessions, CPU, no policy stored (baseline)", without);
    let c50 = line("POST /api/v1/sessions, GPU slice, a card changed just before", cold);
    println!("ratio p50 with/baseline: {:.2}; after a change/baseline: {:.2}", w / b, c50 / b);
    server.stop().await;
}

fn main() {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(run());
}
