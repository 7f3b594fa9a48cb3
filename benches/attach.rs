//! Attach wall time against the fake API server over HTTPS (in-process server on loopback):
//! `POST /api/v1/clusters/{id}/attach` on a fresh cluster (22 objects, access preflight, CRD
//! check, token mint) and the converging re-run, with `POST …/connection-test` (one probe of the
//! same cluster) measured in the same run as the baseline. Medians of 15 clusters.
//!
//! Then (issue 30): attach with the prerequisite checks and `?label_nodes=true` on clusters of
//! 20 and 1,000 nodes (5 clusters each), and `GET /api/v1/clusters` (size 50) with 50 attached,
//! silent clusters: 200 requests while nothing reads the clusters, then 200 while every
//! operator's pods, log and Events are read from all 50 clusters once a second (each cluster
//! answering 1 s late). The list must not slow down: it reads the cached state only.
//!
//! Run: `cargo bench --bench attach`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::config::Config;
use gshare_fake_kube::{ClusterSpec, FakeCluster};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let config = Config::for_data_dir(
        &dir.path().join("data"),
        &[
            ("GSHARE_LISTEN", "127.0.0.1:0"),
            ("GSHARE_PUBLIC_URL", "https://gshare.example.test"),
            ("GSHARE_SESSION_DOMAIN", "lab.example.test"),
        ],
    )
    .unwrap();
    let server = RunningServer::start(config, Clock::system()).await.unwrap();
    let base = server.base_url();
    let client = reqwest::Client::new();
    let token = server.app.auth.api.mint("admin:bench", Duration::from_secs(3600)).unwrap();
    let (mut first, mut again, mut probe) = (Vec::new(), Vec::new(), Vec::new());
    let mut objects = 0;
    // Every fake stays up to the end: a freed port taken by the next fake would be an API
    // address already registered.
    let mut keep = Vec::new();
    for i in 0..15 {
        let fake =
            FakeCluster::start(ClusterSpec { name: format!("bench-{i}"), ..ClusterSpec::default() }).await.unwrap();
        let body = serde_json::json!({"name": format!("bench-{i}"), "role": "primary",
            "kubeconfig_b64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, fake.kubeconfig_yaml())});
        let res = client.post(format!("{base}/api/v1/clusters")).bearer_auth(&token).json(&body).send().await.unwrap();
        assert_eq!(res.status(), 201);
        let id = res.json::<serde_json::Value>().await.unwrap()["id"].as_str().unwrap().to_string();
        let post = |path: String| {
            let (client, token) = (client.clone(), token.clone());
            async move {
                let t = Instant::now();
                let res = client.post(path).bearer_auth(&token).send().await.unwrap();
                let status = res.status();
                let v: serde_json::Value = res.json().await.unwrap();
                assert_eq!(status, 200, "{v}");
                (t.elapsed(), v)
            }
        };
        let (t, v) = post(format!("{base}/api/v1/clusters/{id}/connection-test")).await;
        probe.push(t);
        let _ = v;
        let (t, v) = post(format!("{base}/api/v1/clusters/{id}/attach")).await;
        objects = v["objects"].as_array().unwrap().len();
        assert_eq!(v["changed"].as_u64().unwrap() as usize, objects);
        first.push(t);
        let (t, v) = post(format!("{base}/api/v1/clusters/{id}/attach")).await;
        assert_eq!(v["changed"], 0);
        again.push(t);
        keep.push(fake);
    }
    println!("attach ({objects} objects, first):  median {}", ms(median(first)));
    println!("attach (re-run, all unchanged):   median {}", ms(median(again)));
    println!("baseline connection-test (probe): median {}", ms(median(probe)));

    let register = |name: String, fake_kubeconfig: String| {
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        async move {
            let body = serde_json::json!({"name": name, "role": "primary",
                "kubeconfig_b64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, fake_kubeconfig)});
            let res =
                client.post(format!("{base}/api/v1/clusters")).bearer_auth(&token).json(&body).send().await.unwrap();
            let status = res.status();
            let v = res.json::<serde_json::Value>().await.unwrap();
            assert_eq!(status, 201, "{v}");
            v["id"].as_str().unwrap().to_string()
        }
    };
    for nodes in [20usize, 1000] {
        let (mut labeled, mut plain) = (Vec::new(), Vec::new());
        for i in 0..5 {
            for label in [false, true] {
                let name = format!("n{nodes}-{i}-{label}");
                let fake = FakeCluster::start(ClusterSpec { name: name.clone(), nodes, ..ClusterSpec::default() })
                    .await
                    .unwrap();
                let id = register(name, fake.kubeconfig_yaml()).await;
                let q = if label { "?label_nodes=true" } else { "" };
                let t = Instant::now();
                let res = client
                    .post(format!("{base}/api/v1/clusters/{id}/attach{q}"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap();
                let elapsed = t.elapsed();
                let status = res.status();
                let v: serde_json::Value = res.json().await.unwrap();
                assert_eq!(status, 200, "{v}");
                if label {
                    assert_eq!(v["labeled_nodes"].as_array().map(Vec::len), Some(nodes));
                    labeled.push(elapsed);
                } else {
                    plain.push(elapsed);
                }
                keep.push(fake);
            }
        }
        println!(
            "attach, {nodes} nodes: with label checks {} (median of 5), with ?label_nodes=true {}",
            ms(median(plain)),
            ms(median(labeled))
        );
    }

    // 50 attached, silent clusters; the list with and without the operators' pods being read.
    let mut fakes = Vec::new();
    let mut ids = Vec::new();
    for i in 0..50 {
        let name = format!("silent-{i}");
        let fake = FakeCluster::start(ClusterSpec { name: name.clone(), ..ClusterSpec::default() }).await.unwrap();
        let id = register(name, fake.kubeconfig_yaml()).await;
        let res = client.post(format!("{base}/api/v1/clusters/{id}/attach")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let pod = format!("gshare-operator-{i}");
        fake.store()
            .put("", "v1", "pods", serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "gshare-system", "labels": {"app.kubernetes.io/name": "gshare-operator"}},
                "spec": {"containers": [{"name": "operator", "image": "x"}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "operator", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}))
            .unwrap();
        fake.knobs().set_pod_log("gshare-system", &pod, "operator", true, "x\n".repeat(5000));
        // A slow cluster: a list that waited on clusters would take seconds.
        fake.knobs().set_delay(Some(Duration::from_secs(1)));
        ids.push(gshare::clusters::ClusterId::parse(&id).unwrap());
        fakes.push(fake);
    }
    let list = |n: usize| {
        let (client, token, base) = (client.clone(), token.clone(), base.clone());
        async move {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                let url = format!("{base}/api/v1/clusters?size=50");
                // A pooled connection the server closed while idle is retried once (and timed as such).
                let res = match client.get(&url).bearer_auth(&token).send().await {
                    Ok(r) => r,
                    Err(_) => client.get(&url).bearer_auth(&token).send().await.unwrap(),
                };
                assert_eq!(res.status(), 200);
                let _ = res.bytes().await.unwrap();
                v.push(t.elapsed());
            }
            v
        }
    };
    let quiet = median(list(200).await);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (op, ids, stop) = (server.app.operator.clone(), ids.clone(), stop.clone());
        tokio::spawn(async move {
            // One read of every cluster each second: 30 times the server's own rate (each silent
            // cluster at most every 30 s), reads overlapping since each takes seconds.
            let mut rounds = 0u32;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut inflight = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                for id in &ids {
                    let (op, id) = (op.clone(), id.clone());
                    inflight.push(tokio::spawn(async move { op.refresh_pods(&id).await.is_some() }));
                }
                rounds += 1;
            }
            let read = futures::future::join_all(inflight).await.into_iter().filter(|r| matches!(r, Ok(true))).count();
            assert!(read > 0);
            rounds
        })
    };
    let busy = median(list(200).await);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = reader.await.unwrap();
    println!(
        "GET /api/v1/clusters (50 silent clusters): median {} while nothing reads them, {} while their pods are \
         read ({rounds} rounds of 50 reads, each cluster 1 s slow); ratio {:.2}",
        ms(quiet),
        ms(busy),
        busy.as_secs_f64() / quiet.as_secs_f64()
    );
    for f in fakes.into_iter().chain(keep) {
        f.shutdown().await;
    }
    server.stop().await;
}
