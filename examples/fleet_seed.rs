//! The fleet bench's helper (`hack/bench.sh fleet`, issue 15): builds the state of a large lab
//! and plays the part of its operators once.
//!
//! ```text
//! cargo run --release --example fleet_seed -- seed --data-dir D --clusters 10 --sessions 2000 --out fleet.lua
//! cargo run --release --example fleet_seed -- populate --url http://127.0.0.1:8080 --plan fleet.lua --nodes 500 --gpus 8
//! ```
//!
//! `seed` writes, into a stopped server's state file, N registered clusters (connected, as after
//! a probe; their kubeconfigs are not needed because nothing here talks to Kubernetes) and the
//! running sessions whose Heartbeats the mix sends. `populate` then reports every node and every
//! card once through `/internal` with each cluster's operator token, as the operators would on
//! their first reconcile. The plan file (Lua, read by the wrk script) names clusters, tokens and
//! sessions; `populate` reads the tokens back from it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::{Parser, Subcommand};
use gshare::clusters::model::{CLUSTERS, ClusterRecord, ClusterStatus, Role};
use gshare::sessions::model::{OFFERINGS, OfferingRecord, OfferingStatus, Phase, ResourceClass, SessionRecord, Shape};
use gshare::store::Store;

#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Writes clusters and running sessions into the (stopped) server's state file.
    Seed {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 10)]
        clusters: usize,
        #[arg(long, default_value_t = 2000)]
        sessions: usize,
        /// Owners the sessions are spread over: `alice` when 1, else `user0` … `user<N-1>`
        /// (hack/bench.sh signin makes those accounts).
        #[arg(long, default_value_t = 1)]
        owners: usize,
        /// Cluster ids, one a line, are printed; the plan (Lua) is written here without tokens.
        #[arg(long)]
        out: PathBuf,
    },
    /// Reports every node and card once, `--concurrency` requests at a time.
    Populate {
        #[arg(long)]
        url: String,
        /// The plan file, with `tokens` filled in by hack/bench.sh.
        #[arg(long)]
        plan: PathBuf,
        #[arg(long, default_value_t = 500)]
        nodes: usize,
        #[arg(long, default_value_t = 8)]
        gpus: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
}

/// The request bodies upstream's operator sends (`operator/internal/inventory`), as
/// `tests/it/replay.rs` pins them; the wrk script builds the same strings.
pub fn node_body(cid: &str, node: usize) -> String {
    format!(
        r#"{{"node_id":"gpu-node-{node}","node_cpu":64,"node_mem_gb":503,"node_disk_gb":878,"role":"gpu","lossless_capable":true,"node_ready":true,"cluster_id":"{cid}"}}"#
    )
}

pub fn gpu_body(cid: &str, c: usize, node: usize, g: usize) -> String {
    format!(
        r#"{{"node_id":"gpu-node-{node}","uuid":"GPU-{c:08x}-{node:04x}-4{g:03x}-8000-000000000000","model":"NVIDIA A100-SXM4-80GB","mode":"fractional","total_mem_mb":81920,"used_mem_mb":0,"total_cores":100,"used_cores":0,"status":"ready","node_cpu":64,"node_ready":true,"node_mem_gb":503,"node_disk_gb":878,"cluster_id":"{cid}"}}"#
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // reqwest is built without a default TLS provider (the server picks ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Args::parse().what {
        What::Seed { data_dir, clusters, sessions, owners, out } => {
            seed(data_dir, clusters, sessions, owners, out).await
        }
        What::Populate { url, plan, nodes, gpus, concurrency } => populate(url, plan, nodes, gpus, concurrency).await,
    }
}

async fn seed(data_dir: PathBuf, clusters: usize, sessions: usize, owners: usize, out: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&data_dir)?;
    let store = Store::open(&data_dir.join("gshare.redb"), gshare::MIGRATIONS)?;
    let now = gshare::clock::Clock::system().now_ms();
    let ids: Vec<String> = (0..clusters).map(|_| format!("clu_{}", ulid::Ulid::new())).collect();
    let per_cluster: Vec<Vec<String>> = (0..clusters)
        .map(|c| (0..sessions).filter(|s| s % clusters == c).map(|_| format!("ses_{}", ulid::Ulid::new())).collect())
        .collect();
    {
        let (ids, per_cluster) = (ids.clone(), per_cluster.clone());
        store
            .write(move |txn| {
                let shape = Shape {
                    resource_class: ResourceClass::Gpu,
                    image: "ghcr.io/lab/jupyter:4".into(),
                    gpu_model: Some("A100".into()),
                    gpu_mem_mb: Some(20480),
                    gpu_cores: Some(30),
                    ..Shape::default()
                };
                let off = OfferingRecord {
                    id: format!("off_{}", ulid::Ulid::new()),
                    name: "a100-slice".into(),
                    shape: shape.clone(),
                    status: OfferingStatus::Active,
                    created_at: now,
                    visible_to: None,
                };
                OFFERINGS.put(txn, &off.id, &off)?;
                for (c, id) in ids.iter().enumerate() {
                    let name = format!("lab-{c}");
                    let mut r = ClusterRecord::new(
                        id,
                        name.clone(),
                        Role::Primary,
                        format!("https://10.0.{c}.1:6443"),
                        format!("{id}/kubeconfig"),
                        now,
                    );
                    r.status = ClusterStatus::Connected;
                    r.last_checked_at = Some(now);
                    CLUSTERS.put(txn, id, &r)?;
                    for (i, sid) in per_cluster[c].iter().enumerate() {
                        let owner = if owners <= 1 {
                            "alice".to_string()
                        } else {
                            format!("user{}", (i * clusters + c) % owners)
                        };
                        let mut s = SessionRecord::new(sid, id, &name, &owner, now);
                        s.offering_id = off.id.clone();
                        s.offering_name = off.name.clone();
                        s.shape = shape.clone();
                        s.set_phase(Phase::Running, now);
                        gshare::sessions::model::put_session(txn, &s)?;
                    }
                }
                Ok(())
            })
            .await?;
    }
    drop(store);
    let mut lua = String::from("-- written by examples/fleet_seed.rs; tokens are filled in by hack/bench.sh\n");
    lua.push_str("cids = {");
    for id in &ids {
        lua.push_str(&format!("\"{id}\","));
    }
    lua.push_str("}\nsessions = {");
    for list in &per_cluster {
        lua.push('{');
        for s in list {
            lua.push_str(&format!("\"{s}\","));
        }
        lua.push_str("},");
    }
    lua.push_str("}\n");
    std::fs::write(&out, lua)?;
    for id in &ids {
        println!("{id}");
    }
    Ok(())
}

/// `cids = {...}` and `tokens = {...}` from the plan file (the Lua written above).
fn lua_list(text: &str, name: &str) -> Vec<String> {
    let Some(line) = text.lines().find(|l| l.starts_with(&format!("{name} = {{"))) else { return Vec::new() };
    line.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

async fn populate(url: String, plan: PathBuf, nodes: usize, gpus: usize, concurrency: usize) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&plan)?;
    let (cids, tokens) = (lua_list(&text, "cids"), lua_list(&text, "tokens"));
    anyhow::ensure!(!cids.is_empty() && cids.len() == tokens.len(), "the plan needs cids and tokens of equal length");
    // Every node first, then every card (the operator's order within one reconcile).
    let mut jobs: Vec<(usize, &'static str, String)> = Vec::with_capacity(cids.len() * nodes * (gpus + 1));
    for n in 0..nodes {
        for (c, cid) in cids.iter().enumerate() {
            jobs.push((c, "/internal/inventory/nodes", node_body(cid, n)));
        }
    }
    for n in 0..nodes {
        for g in 0..gpus {
            for (c, cid) in cids.iter().enumerate() {
                jobs.push((c, "/internal/inventory/gpu-devices", gpu_body(cid, c, n, g)));
            }
        }
    }
    let total = jobs.len();
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (jobs, next, failed, http, url, tokens) =
            (jobs.clone(), next.clone(), failed.clone(), http.clone(), url.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((c, path, body)) = jobs.get(i) else { return };
                let res = http
                    .post(format!("{url}{path}"))
                    .bearer_auth(&tokens[*c])
                    .header("Content-Type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                if !res.is_ok_and(|r| r.status().as_u16() == 202) {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    println!("populate: {total} reports in {secs:.1} s ({:.0}/s), failed {failed}", total as f64 / secs);
    anyhow::ensure!(failed == 0, "{failed} reports were not accepted");
    Ok(())
}
