//! Attach wall time against the fake API server over HTTPS (in-process server on loopback):
//! `POST /api/v1/clusters/{id}/attach` on a fresh cluster (22 objects, access preflight, CRD
//! check, token mint) and the converging re-run, with `POST …/connection-test` (one probe of the
//! same cluster) measured in the same run as the baseline. Medians of 15 clusters.
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
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
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
        fake.shutdown().await;
    }
    println!("attach ({objects} objects, first):  median {}", ms(median(first)));
    println!("attach (re-run, all unchanged):   median {}", ms(median(again)));
    println!("baseline connection-test (probe): median {}", ms(median(probe)));
    server.stop().await;
}
