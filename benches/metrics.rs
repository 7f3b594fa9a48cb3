//! `GET /metrics` against `GET /healthz`: CPU per request of the server (in-process, so this
//! process's user + system time while wrk, a separate process, sends the requests) with a
//! registered cluster, 10 nodes of 8 GPUs, 20,000 ended sessions and 2,000 live ones (half
//! running, each holding a GPU slice) stored before anything is measured. The cost of a scrape
//! should not grow with the sessions (issue 32, item 11).
//!
//! Run: `cargo bench --bench metrics` (needs `wrk`: apt-get install wrk), or `hack/bench.sh metrics`.
//! `BENCH_HISTORY` and `BENCH_LIVE` change the stored sessions, `BENCH_SECONDS` each wrk run's
//! length (10), `BENCH_RUNS` how many runs of each the medians are taken over (3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine;
use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::config::Config;
use gshare::inventory::gpu_booking::{self, Booking, Share};
use gshare::sessions::model::{Phase, SessionRecord};
use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::{Value, json};

mod common;
use common::seed;

/// This process's CPU time (user + system), seconds, from /proc/self/stat (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command name (which may hold spaces, so split after its ')').
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// One wrk run: requests answered and this process's CPU seconds spent meanwhile.
async fn measure(url: &str, headers: &[String]) -> (u64, f64) {
    let secs = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse::<u32>().ok()).unwrap_or(10);
    let mut cmd = tokio::process::Command::new("wrk");
    cmd.args(["-t1", "-c4", &format!("-d{secs}s")]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let cpu0 = cpu_seconds();
    let out = cmd.arg(url).output().await.expect("wrk (apt-get install wrk)");
    let cpu = cpu_seconds() - cpu0;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Non-2xx"), "{url}: {text}");
    // "  123456 requests in 10.00s, 12.34MB read"
    let n = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("wrk: {text}"));
    (n, cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

async fn run() {
    let _ = rustls::crypto::ring::default_provider().install_default();
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
    let admin = app.auth.api.mint("admin:bench", Duration::from_secs(3600)).unwrap();

    let c = FakeCluster::start(ClusterSpec { name: "bench".into(), ..ClusterSpec::default() }).await.unwrap();
    let kc_b64 = base64::engine::general_purpose::STANDARD.encode(c.kubeconfig_yaml());
    let v: Value = http
        .post(format!("{base}/api/v1/clusters"))
        .bearer_auth(&admin)
        .json(&json!({"name": "bench", "role": "primary", "kubeconfig_b64": kc_b64}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cid = v["id"].as_str().unwrap().to_string();
    // Some operator traffic, so the per-cluster callback series exist.
    let op = app.auth.internal.mint(&format!("operator:{cid}"), Duration::from_secs(3600)).unwrap();
    let res = http
        .post(format!("{base}/internal/sessions/ses-none/status"))
        .bearer_auth(&op)
        .json(&json!({"phase": "Heartbeat", "ts": gshare::clock::rfc3339_ms(app.clock.now_ms())}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_client_error() || res.status().is_success(), "{}", res.status());

    let env_n = |k: &str, d: u32| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (history, live) = (env_n("BENCH_HISTORY", 20_000), env_n("BENCH_LIVE", 2_000));
    let (cid2, now) = (cid.clone(), app.clock.now_ms());
    app.store
        .write(move |txn| {
            let uuids: Vec<Vec<String>> =
                (0..10).map(|n| (0..8).map(|g| format!("GPU-{n:02}-{g}")).collect()).collect();
            for (n, u) in uuids.iter().enumerate() {
                seed::node(txn, &cid2, &format!("gpu-node-{n}"), u, now)?;
            }
            let every = (history + live) / live.max(1);
            let mut made_live = 0;
            for i in 0..history + live {
                let created = now - 60_000 - i64::from(i) * 1000;
                let id = format!("ses_{}", ulid::Ulid::from_parts(created as u64, u128::from(i)));
                let mut s = SessionRecord::new(&id, &cid2, "bench", &format!("user{}", i % 100), created);
                s.phase = if made_live < live && i % every == 0 {
                    made_live += 1;
                    if made_live % 2 == 0 { Phase::Running } else { Phase::Preparing }
                } else {
                    Phase::Terminated
                };
                if s.phase == Phase::Running {
                    let uuid = &uuids[(made_live as usize / 8) % 10][made_live as usize % 8];
                    let b = Booking {
                        cluster_id: &cid2,
                        session_id: &id,
                        gpu_uuid: Some(uuid),
                        share: Share::Slice { mem_mb: 1024, cores: 1 },
                    };
                    gpu_booking::book(txn, &b, created)?;
                }
                gshare::sessions::model::put_session(txn, &s)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    println!("{history} ended sessions and {live} live ones stored (half running, each with a GPU slice)");

    let anon = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    let full = http.get(format!("{base}/metrics")).bearer_auth(&admin).send().await.unwrap().text().await.unwrap();
    println!(
        "/metrics: {} bytes, {} samples anonymous; {} bytes, {} samples with an admin token",
        anon.len(),
        anon.lines().filter(|l| !l.starts_with('#')).count(),
        full.len(),
        full.lines().filter(|l| !l.starts_with('#')).count()
    );
    let running = format!("gshare_sessions{{phase=\"running\"}} {}\n", live / 2);
    assert!(anon.contains(&running), "{running} missing:\n{anon}");

    let runs = env_n("BENCH_RUNS", 3);
    let auth = format!("Authorization: Bearer {admin}");
    let cases: [(&str, String, Vec<String>); 3] = [
        ("GET /healthz (baseline)", format!("{base}/healthz"), vec![]),
        ("GET /metrics (anonymous)", format!("{base}/metrics"), vec![]),
        ("GET /metrics (admin token)", format!("{base}/metrics"), vec![auth]),
    ];
    let mut per_req: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let secs = f64::from(env_n("BENCH_SECONDS", 10));
    // Interleaved, so a neighbour's load on the shared cores falls on every case alike.
    for _ in 0..runs {
        for (i, (_, url, headers)) in cases.iter().enumerate() {
            let (n, cpu) = measure(url, headers).await;
            per_req[i].push(cpu / n as f64 * 1e6);
            rps[i].push(n as f64 / secs);
        }
    }
    println!("wrk -t1 -c4, {runs} runs of {secs} s each, interleaved; medians:");
    let base_us = median(per_req[0].clone());
    for (i, (label, _, _)) in cases.iter().enumerate() {
        let us = median(per_req[i].clone());
        println!(
            "  {label:<30} {us:>8.1} us CPU/request  {:>8.0} req/s  {:>6.1}x /healthz",
            median(rps[i].clone()),
            us / base_us
        );
    }
    server.stop().await;
}

fn main() {
    // `cargo test --benches` runs benches with --bench absent: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if !common::have_wrk() {
        eprintln!("metrics bench: wrk is not installed (apt-get install wrk); skipped");
        return;
    }
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(run());
}
