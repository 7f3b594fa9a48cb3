//! Inventory: the clusters' nodes, GPUs, storage pools and counts, as their operators report
//! them (nodes, GPUs, drift, health events, volumes; the `/internal` handlers are
//! `crate::callbacks`'), liveness (heartbeats and the sweep that marks silence), the admin's node
//! cordon/decommission, and the clusters' part of `/metrics`.
//!
//! Reports arrive every 15 s per node and mostly repeat what is stored. A repeat costs no write:
//! the first time, a read transaction runs the report's code without writing ([`DryRun`]);
//! if nothing durable would change, the report's digest is remembered, tagged with its cluster's
//! inventory tag (moved by every inventory write of that cluster), and later repeats are answered
//! from memory. Either way their liveness times go to memory and are written every
//! `liveness_flush_every` (5 s) in one batched write: a crash loses at most that much liveness
//! (a node or cluster then looks up to 5 s less recently seen; the 90 s / 120 s thresholds are far).
//! Everything else goes through the store's group commit, in the reporting cluster's lane.

pub mod apply;
pub mod cluster_part;
pub mod fit;
pub mod gpu_booking;
pub mod metrics;
pub mod model;
pub mod pool_routes;
pub mod pools;
pub mod routes;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::watch;

use self::apply::{NodeAction, PendingLiveness, Seen, SweepReport};
use self::model::*;
use crate::audit::AuditEntry;
use crate::callbacks::wire::*;
use crate::clock::Clock;
use crate::clusters::ClusterId;
use crate::config::Config;
use crate::locks::lock;
use crate::store::{DryRun, Outcome, Store, StoreError};

/// Repeat-report entries kept at most (one per node and card: 4x the 45,000 of a 5,000-node
/// fleet); beyond, the memory starts over.
const MAX_REMEMBERED: usize = 1 << 18;

/// A report known to change nothing durable while its cluster's tag stays the same.
#[derive(Debug, Clone, Copy)]
struct Known {
    digest: u64,
    tag: u64,
    seen: Seen,
}

/// The answers of one cluster's two hostname GETs (`{"hostnames":[…]}`, rendered once), at one tag.
#[derive(Debug)]
struct HostLists {
    tag: u64,
    cordoned: Bytes,
    decommissioning: Bytes,
}

/// Inventory tags: a number per cluster that moves (after the commit) with every inventory write
/// that may change its clusters', nodes' or cards' rows, and one that moves for all (the sweep).
/// What was read at a tag holds while the tag stays. Rows other domains write are not compared
/// by reports (allocations own `used_*`, sessions `running_sessions`); the registry writes a
/// cluster's rows at registration (a new id) and unregistration (its reports are no-ops then).
#[derive(Debug, Default)]
struct Tags {
    counter: AtomicU64,
    all: AtomicU64,
    clusters: Mutex<HashMap<String, u64>>,
}

impl Tags {
    fn current(&self, cluster: &str) -> u64 {
        let all = self.all.load(Ordering::Acquire);
        let own = lock(&self.clusters).get(cluster).copied().unwrap_or(0);
        all.max(own)
    }

    fn bump(&self, cluster: &str) {
        let t = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        lock(&self.clusters).insert(cluster.to_string(), t);
    }

    fn bump_all(&self) {
        let t = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.all.store(t, Ordering::Release);
    }
}

/// The inventory service: the domain side of the callbacks.
pub struct Inventory {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
    /// `n|<cluster>|<node>` / `g|<cluster>|<uuid>` -> the last report found to change nothing.
    remembered: Mutex<HashMap<String, Known>>,
    tags: Tags,
    /// Liveness of repeat reports, not yet written.
    liveness: Mutex<PendingLiveness>,
    /// Held by a flush until its write is answered: a flush that returns has written all that
    /// was noted before it began (the stop relies on it while the background flush also runs).
    flushing: tokio::sync::Mutex<()>,
    hostnames: Mutex<HashMap<String, HostLists>>,
    /// `GET /api/v1/clusters/{id}/nodes`, kept rendered.
    pub node_pages: cluster_part::NodePages,
    pub metrics: metrics::Callbacks,
    /// Node pools reserved for groups (`/api/v1/node-pools`).
    pub pools: pools::NodePools,
}

impl std::fmt::Debug for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory").finish_non_exhaustive()
    }
}

impl Inventory {
    pub fn new(store: Store, clock: Clock, config: Arc<Config>) -> Self {
        Self {
            pools: pools::NodePools::new(store.clone(), clock.clone()),
            store,
            clock,
            config,
            remembered: Mutex::new(HashMap::new()),
            tags: Tags::default(),
            liveness: Mutex::new(PendingLiveness::default()),
            flushing: tokio::sync::Mutex::new(()),
            hostnames: Mutex::new(HashMap::new()),
            node_pages: Default::default(),
            metrics: Default::default(),
        }
    }

    /// Answers a repeat from memory: true when `key` was found to change nothing at the
    /// cluster's current tag with the same digest (its liveness is then noted).
    fn known(&self, key: &str, digest: u64, cluster: &str, node: &str, now: i64) -> bool {
        let tag = self.tags.current(cluster);
        let seen = match lock(&self.remembered).get(key) {
            Some(k) if k.digest == digest && k.tag == tag => k.seen,
            _ => return false,
        };
        self.note(cluster, node, seen, now);
        true
    }

    fn remember(&self, key: String, known: Known) {
        let mut map = lock(&self.remembered);
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, known);
    }

    /// Notes a no-op report's liveness for the next flush.
    fn note(&self, cluster: &str, node: &str, seen: Seen, now: i64) {
        if !seen.live {
            return;
        }
        let mut p = lock(&self.liveness);
        match p.clusters.get_mut(cluster) {
            Some(t) => *t = (*t).max(now),
            None => {
                p.clusters.insert(cluster.to_string(), now);
            }
        }
        if seen.node_alive {
            let key = format!("{cluster}/{node}");
            let t = p.nodes.entry(key).or_insert(now);
            *t = (*t).max(now);
        }
    }

    /// Writes the liveness noted in memory (one batched write); returns how many rows moved.
    /// The background task calls it every `liveness_flush_every`, the sweep before it judges
    /// silence, and the server once more when it stops.
    pub async fn flush_liveness(&self) -> Result<usize, StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let pending = std::mem::take(&mut *lock(&self.liveness));
        if pending.is_empty() {
            return Ok(0);
        }
        let p = Arc::new(pending);
        let batch = p.clone();
        match self.store.write_batched(move |txn| apply::flush_liveness(txn, &batch)).await {
            Ok(n) => Ok(n),
            Err(e) => {
                // Kept for the next flush.
                lock(&self.liveness).merge(Arc::unwrap_or_clone(p));
                Err(e)
            }
        }
    }

    /// Runs one report: from memory when known; else a dry run on a read transaction (a repeat
    /// that changes nothing durable costs no write); else the write, in the cluster's lane.
    async fn report<R: apply::Report>(
        &self,
        cluster: &ClusterId,
        key: String,
        digest: u64,
        node: String,
        r: R,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.as_str();
        if self.known(&key, digest, id, &node, now) {
            return Ok(());
        }
        let tag = self.tags.current(id);
        let checked = {
            let (cid, r) = (id.to_string(), r.clone());
            self.store
                .read(move |txn| {
                    let dry = DryRun::new(txn);
                    let o = r.apply(&dry, &cid, now)?;
                    Ok(dry.verdict(o))
                })
                .await?
        };
        if let Some(seen) = checked {
            self.remember(key, Known { digest, tag, seen });
            self.note(id, &node, seen, now);
            return Ok(());
        }
        let cid = id.to_string();
        self.store.write_batched_in(id, move |txn| r.apply(txn, &cid, now)).await?;
        self.tags.bump(id);
        Ok(())
    }

    /// `POST /internal/inventory/nodes`.
    pub async fn report_node(&self, cluster: &ClusterId, r: NodeReport) -> Result<(), StoreError> {
        let key = format!("n|{cluster}|{}", r.node_id);
        let (digest, node) = (apply::node_digest(&r), r.node_id.clone());
        self.report(cluster, key, digest, node, r).await
    }

    /// `POST /internal/inventory/gpu-devices`.
    pub async fn report_gpu(&self, cluster: &ClusterId, r: GpuReport) -> Result<(), StoreError> {
        let key = format!("g|{cluster}|{}", r.uuid);
        let (digest, node) = (apply::gpu_digest(&r), r.node_id.clone());
        self.report(cluster, key, digest, node, r).await
    }

    pub async fn report_drift(&self, cluster: &ClusterId, r: DriftReport) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        tracing::warn!(cluster_id = %cluster, uuid = ?r.uuid, used_mem_mb = ?r.used_mem_mb, total_mem_mb = ?r.total_mem_mb, "inventory drift reported: used memory above total");
        let id = cluster.to_string();
        self.store.write_batched_in(cluster.as_str(), move |txn| apply::record_drift(txn, &id, &r, now)).await
    }

    /// `{"hostnames":[…]}`: node names of the token's cluster that are cordoned (or being
    /// decommissioned), sorted. Every node's reconcile asks; both answers are read from one scan
    /// once per cluster tag and served from memory until an inventory write of that cluster
    /// moves the tag.
    pub async fn hostnames_json(&self, cluster: &ClusterId, decommissioning: bool) -> Result<Bytes, StoreError> {
        let id = cluster.as_str();
        let pick = |h: &HostLists| if decommissioning { h.decommissioning.clone() } else { h.cordoned.clone() };
        let tag = self.tags.current(id);
        if let Some(h) = lock(&self.hostnames).get(id).filter(|h| h.tag == tag) {
            return Ok(pick(h));
        }
        let cid = id.to_string();
        let (cordoned, decommissioning_list) = self.store.read(move |txn| apply::operator_hostnames(txn, &cid)).await?;
        let render = |hostnames: Vec<String>| {
            serde_json::to_vec(&Hostnames { hostnames })
                .map(Bytes::from)
                .map_err(|e| StoreError::Backend(e.to_string()))
        };
        let h = HostLists { tag, cordoned: render(cordoned)?, decommissioning: render(decommissioning_list)? };
        let answer = pick(&h);
        lock(&self.hostnames).insert(id.to_string(), h);
        Ok(answer)
    }

    pub async fn decommissioned(&self, cluster: &ClusterId, hostname: String) -> Result<(), StoreError> {
        let (id, clock) = (cluster.to_string(), self.clock.clone());
        let removed = self
            .store
            .write_batched_in(cluster.as_str(), move |txn| {
                let o = apply::node_decommissioned(txn, &clock, &id, &hostname)?;
                Ok::<_, StoreError>(match o {
                    Outcome::Wrote(()) => Outcome::Wrote(Some(hostname.clone())),
                    Outcome::Unchanged(()) => Outcome::Unchanged(None),
                })
            })
            .await?;
        self.tags.bump(cluster.as_str());
        if let Some(h) = removed {
            tracing::info!(cluster_id = %cluster, node = %h, "node removed from the cluster and the inventory");
        }
        Ok(())
    }

    pub async fn health_event(&self, cluster: &ClusterId, ev: HealthEvent) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        let log = ev.clone();
        let known = self
            .store
            .write_batched_in(cluster.as_str(), move |txn| apply::record_health_event(txn, &id, &ev, now))
            .await?;
        self.tags.bump(cluster.as_str());
        tracing::warn!(cluster_id = %cluster, node = %log.node_id, kind = %log.kind, severity = %log.severity, action = ?log.action, known_node = known, "node health event");
        Ok(())
    }

    /// Cordon, uncordon or decommission a node (admin), audited in the same transaction.
    pub async fn node_action(
        &self,
        cluster: &ClusterId,
        node: String,
        action: NodeAction,
        audit: AuditEntry,
    ) -> Result<Result<NodeRecord, Refusal>, StoreError> {
        let (id, clock) = (cluster.to_string(), self.clock.clone());
        let done = self
            .store
            .write_batched(move |txn| apply::node_action(txn, &id, &node, action, audit.clone(), &clock))
            .await;
        self.tags.bump(cluster.as_str());
        done
    }

    /// Marks silence: see [`apply::sweep`]. Liveness held in memory is written first. Tests
    /// call it after moving the clock.
    pub async fn sweep(&self) -> Result<SweepReport, StoreError> {
        self.flush_liveness().await?;
        let now = self.clock.now_ms();
        let node_ms = self.config.node_stale_after.as_millis() as i64;
        let hb_ms = self.config.heartbeat_stale_after.as_millis() as i64;
        let report = self.store.write_batched(move |txn| apply::sweep(txn, now, node_ms, hb_ms)).await?;
        if report != SweepReport::default() {
            self.tags.bump_all();
        }
        for c in &report.clusters_degraded {
            tracing::warn!(cluster_id = %c, "operator silent; cluster marked degraded");
        }
        for n in &report.nodes_offline {
            tracing::warn!(node = %n, "node not seen; marked offline");
        }
        Ok(report)
    }
}

/// Runs one sweep now (what the background task does every few seconds).
pub async fn sweep(holder: &impl AsRef<Inventory>) -> Result<SweepReport, StoreError> {
    holder.as_ref().sweep().await
}

/// How often the background sweep runs: a sixth of the shorter threshold (15 s by default).
pub fn sweep_every(config: &Config) -> Duration {
    (config.heartbeat_stale_after.min(config.node_stale_after) / 6).max(Duration::from_secs(1))
}

/// Starts the background sweep; it ends with the server.
pub fn spawn_sweeper(inventory: Arc<Inventory>, config: &Config, stop: watch::Receiver<bool>) {
    let period = sweep_every(config);
    tokio::spawn(crate::background::every(period, stop, move || {
        let inventory = inventory.clone();
        async move {
            if let Err(e) = inventory.sweep().await {
                tracing::error!(error = %e, "inventory sweep failed");
            }
        }
    }));
}
