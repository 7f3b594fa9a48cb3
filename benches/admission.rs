//! Create-session latency with fair sharing's admission (the owner's resource policy and the fit
//! check) at 40,000 GPUs, against creates that skip both, in the same run (release build,
//! in-process server, a fake cluster as Kubernetes, sequential requests timed by the client):
//! 1. GPU slice: policy (the seeded global one) + fit check on a summary already built;
//! 2. baseline: a CPU offering with no policy stored (no fit check; 4 point reads remain);
//! 3. GPU slice right after an inventory report changes one card (the summary is patched from
//!    the rows the report logged: that card and its node);
//! 4. GPU slice right after a whole-cluster change (the summary is read again from its 40,000
//!    cards: what every change cost before the change log, measured in the same run).
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
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env_n = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (gpus, creates) = (env_n("BENCH_GPUS", 40_000), env_n("BENCH_CREATES", 400));
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_data_dir(
        &dir.path().join("data"),
        // The seeded nodes never report: without a long node_stale_after the sweep marks them
        // offline two minutes in, and the pool rounds take longer than that.
        &[
            ("GSHARE_LISTEN", "127.0.0.1:0"),
            ("GSHARE_LOG_LEVEL", "warn"),
            ("GSHARE_PROBE_INTERVAL", "86400s"),
            ("GSHARE_NODE_STALE_AFTER", "86400s"),
        ],
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
    // After a change, interleaved: (a) an inventory report changes one card (the summary is
    // patched from the logged rows: the card, its node); (b) a whole-cluster change before the
    // create (the summary is read again from every card: what every change cost before the
    // change log).
    let (mut patched, mut rebuilt) = (Vec::new(), Vec::new());
    let (card_mem, model) = (common::seed::CARD_MEM_MB, common::seed::MODEL);
    for i in 0..(creates / 10).max(5) {
        beat().await;
        let gpu = json!({"node_id": format!("bench-{i}"), "uuid": format!("GPU-bench-{i}-0"), "cluster_id": cid,
            "total_mem_mb": card_mem - 1 - (i as u64 % 2), "total_cores": 100, "status": "ready", "model": model,
            "mode": "fractional"});
        let res = http
            .post(format!("{base}/internal/inventory/gpu-devices"))
            .bearer_auth(&op)
            .json(&gpu)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202);
        patched.push(create(&gpu_off).await);
        let cid2 = cid.clone();
        app.store
            .write(move |txn| {
                gshare::inventory::fit::changed(txn, &cid2);
                Ok(())
            })
            .await
            .unwrap();
        rebuilt.push(create(&gpu_off).await);
    }
    // Node pools: 10 dedicated pools of 50 nodes (4,000 cards), one per group g0..g9. Creates by
    // an owner in no group (placed on the 4,500 shared nodes: the 500 reserved are excluded) and
    // by a member of g0 (placed in its pool only: the other 4,950 nodes are excluded), each
    // against the same owner's creates with no pool, interleaved in rounds of 20: the pools are
    // made before and deleted after each round's pooled creates (one untimed create after each
    // change lets the summary take it in).
    let nodes_n = gpus.div_ceil(8);
    let (pools_n, per_pool) = (10usize, 50usize.min(nodes_n / 11));
    for g in 0..pools_n {
        let v = post("/api/v1/groups", json!({"name": format!("g{g}")})).await.unwrap();
        assert_eq!(v.status(), 201);
    }
    let res =
        post("/api/v1/users", json!({"username": "pooled", "group": "g0", "password": "correct horse battery staple"}))
            .await
            .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let lifted = json!({"scope": "user", "scope_id": "pooled", "max_concurrent": 10_000, "limits": {"cpu": 0, "mem_gb": 0,
        "gpu_mem_mb": 0, "gpu_cores": 0, "storage_gb": 0}});
    let res = post("/api/v1/resource-policies", lifted).await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let create_pooled = async || -> f64 {
        let t = Instant::now();
        let res = post("/api/v1/sessions", json!({"offering_id": gpu_off, "owner": "pooled"})).await.unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
        ms
    };
    let make_pools = async || -> Vec<String> {
        let mut ids = Vec::new();
        for g in 0..pools_n {
            let nodes: Vec<String> = (g * per_pool..(g + 1) * per_pool).map(|n| format!("bench-{n}")).collect();
            let body =
                json!({"cluster_id": cid, "name": format!("pool-{g}"), "nodes": nodes, "groups": [format!("g{g}")]});
            let v: Value = post("/api/v1/node-pools", body).await.unwrap().json().await.unwrap();
            ids.push(v["id"].as_str().unwrap().to_string());
        }
        ids
    };
    let (mut shared, mut pooled, mut shared_none, mut pooled_none) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..creates / 20 {
        beat().await;
        let ids = make_pools().await;
        create(&gpu_off).await;
        for _ in 0..20 {
            shared.push(create(&gpu_off).await);
        }
        for _ in 0..20 {
            pooled.push(create_pooled().await);
        }
        for id in ids {
            let res = http.delete(format!("{base}/api/v1/node-pools/{id}")).bearer_auth(&admin).send().await.unwrap();
            assert_eq!(res.status(), 204);
        }
        create(&gpu_off).await;
        for _ in 0..20 {
            shared_none.push(create(&gpu_off).await);
        }
        for _ in 0..20 {
            pooled_none.push(create_pooled().await);
        }
    }
    // Creates that are queued: two sessions wait on the cluster (the queue task starts the first,
    // which then holds the queue as an unbound start; the second keeps it non-empty), so each new
    // GPU create under the seeded policy (max_queued 2) is recorded as waiting behind them, nothing
    // applied. Interleaved with the baseline again, in rounds of 20.
    let (gpu_off2, cid2, now) = (gpu_off.clone(), cid.clone(), app.clock.now_ms());
    app.store
        .write(move |txn| {
            let o = gshare::sessions::model::OFFERINGS.get_in_write(txn, &gpu_off2)?.unwrap();
            for i in 0..2 {
                let mut s =
                    gshare::sessions::SessionRecord::new(&format!("ses_seedqueue{i}"), &cid2, "bench", "seed", now);
                s.offering_id = o.id.clone();
                s.offering_name = o.name.clone();
                s.shape = o.shape.clone();
                s.queue = Some(gshare::sessions::model::QueueState {
                    queued_at: now + i,
                    reason: "no_gpu_capacity".into(),
                    started_at: None,
                    unserviceable_since: None,
                });
                gshare::sessions::model::put_session(txn, &s)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let (mut queued, mut baseline2) = (Vec::new(), Vec::new());
    let mut create_queued = async |off: &str| -> f64 {
        owner += 1;
        let t = Instant::now();
        let res = post("/api/v1/sessions", json!({"offering_id": off, "owner": format!("u{owner}")})).await.unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let v: Value = res.json().await.unwrap();
        assert!(v["queue_position"].is_u64(), "{v}");
        ms
    };
    for _ in 0..creates / 20 {
        beat().await;
        set_global(Some(global.clone())).await.unwrap();
        for _ in 0..20 {
            queued.push(create_queued(&gpu_off).await);
        }
        set_global(None).await.unwrap();
        for _ in 0..20 {
            let t = Instant::now();
            let res = post("/api/v1/sessions", json!({"offering_id": cpu_off, "owner": "base"})).await.unwrap();
            baseline2.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(res.status(), 201);
        }
    }
    set_global(Some(global.clone())).await.unwrap();

    let w = line("POST /api/v1/sessions, GPU slice, policy + fit (summary built)", with);
    let b = line("POST /api/v1/sessions, CPU, no policy stored (baseline)", without);
    let p50 = line("GPU slice after a card's inventory report (patched)", patched);
    let r50 = line("GPU slice after a whole-cluster change (rebuilt)", rebuilt);
    println!(
        "ratio p50 with/baseline: {:.2}; after a report (patched)/baseline: {:.2}; rebuilt/baseline: {:.2}",
        w / b,
        p50 / b,
        r50 / b
    );
    let sh = line(&format!("GPU slice, {pools_n} pools x {per_pool} nodes, owner in no group"), shared);
    let sn = line("GPU slice, no pool, the same kind of owner (no group)", shared_none);
    let po = line(&format!("GPU slice, {pools_n} pools x {per_pool} nodes, owner in a pool's group"), pooled);
    let pn = line("GPU slice, no pool, the same owner (in g0)", pooled_none);
    println!("ratio p50 pools/no pool: owner in no group {:.2}; owner in a pool's group {:.2}", sh / sn, po / pn);
    let q50 = line("GPU slice queued behind 2 waiting (max_queued 2)", queued);
    let b2 = line("CPU, no policy stored (baseline, same rounds)", baseline2);
    println!("ratio p50 queued/baseline: {:.2}", q50 / b2);

    // A month's usage query over 20,000 sessions: 500 owners (in 20 groups, recorded with each
    // run), runs of 1-30 hours spread over last month, closed through the ledger's own writer.
    let sessions = env_n("BENCH_USAGE_SESSIONS", 20_000);
    let today = gshare::policy::usage::day_of(app.clock.now_ms());
    let month = gshare::policy::usage::month_start(today).previous_day().unwrap();
    let first = gshare::policy::usage::midnight_ms(gshare::policy::usage::month_start(month));
    let days = i64::from(month.day());
    for chunk in 0..sessions.div_ceil(1000) {
        app.store
            .write(move |txn| {
                for k in chunk * 1000..((chunk + 1) * 1000).min(sessions) {
                    let i = k as i64;
                    let start = first + (i * 7_919 % (days * 24)) * 3_600_000;
                    let end = start + (1 + i % 30) * 3_600_000;
                    let id = format!("ses_bench{k}");
                    let owner = format!("u{}", k % 500);
                    let h = gshare::policy::usage::Holding { gpu: true, gpu_mem_mb: 10_240, cpu: 4 };
                    gshare::policy::usage::running_changed(txn, &id, &owner, Some(h), start)?;
                    gshare::policy::usage::running_changed(txn, &id, &owner, None, end)?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    let m = gshare::policy::usage::month_key(month);
    let timed = async |path: String| -> Vec<f64> {
        let mut v = Vec::new();
        for _ in 0..21 {
            let t = Instant::now();
            let res = http.get(format!("{base}{path}")).bearer_auth(&admin).send().await.unwrap();
            assert_eq!(res.status(), 200);
            let body = res.bytes().await.unwrap();
            v.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(body.len() > 2);
        }
        v
    };
    println!("usage: {sessions} sessions of 500 users in {m}");
    let monthly = timed(format!("/api/v1/usage?granularity=month&from={m}&to={m}")).await;
    let daily = timed(format!("/api/v1/usage?from={m}-01&to={month}")).await;
    let csv = timed(format!("/api/v1/usage?from={m}-01&to={month}&format=csv")).await;
    let health = timed("/healthz".to_string()).await;
    line("GET /api/v1/usage, month, all users (500 rows)", monthly);
    line("GET /api/v1/usage, by day over the month (all users)", daily);
    line("GET /api/v1/usage, by day over the month, CSV", csv);
    line("GET /healthz (the request's own cost)", health);
    server.stop().await;
}

fn main() {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(run());
}
