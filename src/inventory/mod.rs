//! Inventory: what the clusters' operators report (nodes, GPUs, drift, health events, volumes,
//! session status and samples) through upstream's `/internal` callbacks, liveness (heartbeats and
//! the sweep that marks silence), the admin's node cordon/decommission, and `/metrics`.
//!
//! Reports arrive every 15 s per node and mostly repeat what is stored. A repeat is answered from
//! memory when nothing was committed since it was last compared (the store's generation), so it
//! costs no transaction; everything else goes through the store's group commit.

pub mod apply;
pub mod gpu_booking;
pub mod metrics;
pub mod model;
pub mod routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use self::apply::{LIVENESS_EVERY_MS, NodeAction, Refusal, Seen, SweepReport};
use self::model::*;
use crate::App;
use crate::audit::AuditEntry;
use crate::clock::Clock;
use crate::clusters::ClusterId;
use crate::clusters::model::NodeRecord;
use crate::config::Config;
use crate::store::{Outcome, Store, StoreError};

/// Repeat-report entries kept at most (one per node and card); beyond, the memory starts over.
const MAX_REMEMBERED: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq)]
enum Remembered {
    Node(NodeReport),
    Gpu(GpuReport),
}

/// The inventory service: the domain side of the callbacks.
pub struct Inventory {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
    /// `n|<cluster>|<node>` / `g|<cluster>|<uuid>` -> the last report compared with the store.
    remembered: Mutex<HashMap<String, (Remembered, Seen)>>,
    pub metrics: metrics::Callbacks,
}

impl std::fmt::Debug for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory").finish_non_exhaustive()
    }
}

fn fresh(at: Option<i64>, now: i64) -> bool {
    at.is_some_and(|t| t <= now && now - t < LIVENESS_EVERY_MS)
}

impl Inventory {
    pub fn new(store: Store, clock: Clock, config: Arc<Config>) -> Self {
        Self { store, clock, config, remembered: Mutex::new(HashMap::new()), metrics: Default::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Remembered, Seen)>> {
        self.remembered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Is this report known to change nothing (no commit since it was compared, and no liveness
    /// timestamp due)?
    fn is_repeat(&self, key: &str, report: &Remembered, node_ready: Option<bool>, now: i64) -> bool {
        let map = self.lock();
        let Some((last, seen)) = map.get(key) else { return false };
        if seen.generation != self.store.generation() || last != report {
            return false;
        }
        if !seen.live {
            return true;
        }
        fresh(seen.heartbeat_at, now) && (seen.parked || node_ready == Some(false) || fresh(seen.last_seen, now))
    }

    fn remember(&self, key: String, report: Remembered, seen: Seen) {
        let mut map = self.lock();
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, (report, seen));
    }

    /// `POST /internal/inventory/nodes`.
    pub async fn report_node(&self, cluster: &ClusterId, r: NodeReport) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let key = format!("n|{cluster}|{}", r.node_id);
        let remembered = Remembered::Node(r.clone());
        if self.is_repeat(&key, &remembered, r.node_ready, now) {
            return Ok(());
        }
        let (store, id) = (self.store.clone(), cluster.to_string());
        let seen =
            self.store.write_batched(move |txn| apply::apply_node(txn, store.generation(), &id, &r, now)).await?;
        self.remember(key, remembered, seen);
        Ok(())
    }

    /// `POST /internal/inventory/gpu-devices`.
    pub async fn report_gpu(&self, cluster: &ClusterId, r: GpuReport) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let key = format!("g|{cluster}|{}", r.uuid);
        let ready = r.node_ready;
        let remembered = Remembered::Gpu(r.clone());
        if self.is_repeat(&key, &remembered, ready, now) {
            return Ok(());
        }
        let (store, id) = (self.store.clone(), cluster.to_string());
        let seen = self.store.write_batched(move |txn| apply::apply_gpu(txn, store.generation(), &id, &r, now)).await?;
        self.remember(key, remembered, seen);
        Ok(())
    }

    pub async fn report_drift(&self, cluster: &ClusterId, r: DriftReport) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        tracing::warn!(cluster_id = %cluster, uuid = ?r.uuid, used_mem_mb = ?r.used_mem_mb, total_mem_mb = ?r.total_mem_mb, "inventory drift reported: used memory above total");
        let id = cluster.to_string();
        self.store.write_batched(move |txn| apply::record_drift(txn, &id, &r, now)).await
    }

    /// Node names of the token's cluster that are cordoned (or being decommissioned).
    pub async fn hostnames(&self, cluster: &ClusterId, decommissioning: bool) -> Result<Vec<String>, StoreError> {
        let id = cluster.to_string();
        self.store
            .read(move |txn| {
                apply::hostnames(txn, &id, |n| {
                    if decommissioning { n.decommissioning } else { n.cordoned && !n.decommissioning }
                })
            })
            .await
    }

    pub async fn decommissioned(&self, cluster: &ClusterId, hostname: String) -> Result<(), StoreError> {
        let (id, clock) = (cluster.to_string(), self.clock.clone());
        let removed = self
            .store
            .write_batched(move |txn| {
                let o = apply::node_decommissioned(txn, &clock, &id, &hostname)?;
                Ok::<_, StoreError>(match o {
                    Outcome::Wrote(()) => Outcome::Wrote(Some(hostname.clone())),
                    Outcome::Unchanged(()) => Outcome::Unchanged(None),
                })
            })
            .await?;
        if let Some(h) = removed {
            tracing::info!(cluster_id = %cluster, node = %h, "node removed from the cluster and the inventory");
        }
        Ok(())
    }

    pub async fn health_event(&self, cluster: &ClusterId, ev: HealthEvent) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        let log = ev.clone();
        let known = self.store.write_batched(move |txn| apply::record_health_event(txn, &id, &ev, now)).await?;
        tracing::warn!(cluster_id = %cluster, node = %log.node_id, kind = %log.kind, severity = %log.severity, action = ?log.action, known_node = known, "node health event");
        Ok(())
    }

    pub async fn volume_sync(&self, cluster: &ClusterId, r: VolumeSync) -> Result<VolumeSyncAnswer, StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        let answer = self.store.write_batched(move |txn| apply::volume_sync(txn, &id, &r, now)).await?;
        if answer.orphans > 0 {
            tracing::warn!(cluster_id = %cluster, orphans = answer.orphans, "volume sync: PVCs without a volume id; left untouched");
        }
        Ok(answer)
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
        self.store.write_batched(move |txn| apply::node_action(txn, &id, &node, action, audit.clone(), &clock)).await
    }

    /// Marks silence: see [`apply::sweep`]. Tests call it after moving the clock.
    pub async fn sweep(&self) -> Result<SweepReport, StoreError> {
        let now = self.clock.now_ms();
        let node_ms = self.config.node_stale_after.as_millis() as i64;
        let hb_ms = self.config.heartbeat_stale_after.as_millis() as i64;
        let report = self.store.write_batched(move |txn| apply::sweep(txn, now, node_ms, hb_ms)).await?;
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
pub async fn sweep(app: &App) -> Result<SweepReport, StoreError> {
    app.inventory.sweep().await
}

/// How often the background sweep runs: a sixth of the shorter threshold (15 s by default).
pub fn sweep_every(config: &Config) -> Duration {
    (config.heartbeat_stale_after.min(config.node_stale_after) / 6).max(Duration::from_secs(1))
}

/// Starts the background sweep; it ends with the server.
pub fn spawn_sweeper(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(sweep_every(&app.config));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|v| *v) => return,
            }
            if let Err(e) = app.inventory.sweep().await {
                tracing::error!(error = %e, "inventory sweep failed");
            }
        }
    });
}
