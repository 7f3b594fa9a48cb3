//! The inventory's side of a cluster that the registry asks for (`clusters::inventory_part`):
//! the rows a registration seeds from its probe, the rows an unregistration forgets, the node
//! summary of a cluster's detail view; and the node page, `GET /api/v1/clusters/{id}/nodes`,
//! kept rendered by table generation.

use std::collections::HashMap;

use crate::store::WriteTxn;
use axum::body::Bytes;
use redb::ReadTransaction;

use super::model::{
    CLUSTER_COUNTS, GPUS, GpuRecord, GpuView, HEALTH_EVENTS, NODES, NodeRecord, NodeView, POOLS, latest_gpu_events,
};
use crate::callbacks::wire::GpuStatus;
use crate::clusters::inventory_part::{InventoryPart, Seeded};
use crate::clusters::model::{CLUSTERS, ClusterCounts, NodeSummary};
use crate::clusters::probe::ProbedNode;
use crate::locks::lock;
use crate::store::{Store, StoreError};

/// What `lib.rs` hands `Clusters` as its [`crate::clusters::inventory_part::InventoryHook`].
#[derive(Debug, Default, Clone, Copy)]
pub struct ClusterPart;

impl InventoryPart for ClusterPart {
    fn seed(&self, txn: &WriteTxn, cluster_id: &str, nodes: &[ProbedNode], now: i64) -> Result<Seeded, StoreError> {
        let mut seeded = Seeded { nodes: nodes.len() as u64, ..Seeded::default() };
        super::fit::changed(txn, cluster_id);
        for n in nodes {
            let key = format!("{cluster_id}/{}", n.name);
            NODES.put(
                txn,
                &key,
                &NodeRecord {
                    cluster_id: cluster_id.to_string(),
                    name: n.name.clone(),
                    ready: n.ready,
                    schedulable: n.schedulable,
                    cordoned: false,
                    decommissioning: false,
                    offline: !n.ready,
                    role: Some(n.role.clone()),
                    cpu: n.cpu,
                    mem_gb: n.mem_gb,
                    disk_gb: None,
                    lossless_capable: false,
                    last_seen: n.ready.then_some(now),
                    not_ready_since: (!n.ready).then_some(now),
                    gpu_count: n.gpus.len() as u64,
                },
            )?;
            for g in &n.gpus {
                GPUS.put(
                    txn,
                    &format!("{cluster_id}/{}", g.uuid),
                    &GpuRecord {
                        cluster_id: cluster_id.to_string(),
                        node: n.name.clone(),
                        uuid: g.uuid.clone(),
                        model: g.model.clone(),
                        mode: g.mode.clone(),
                        total_mem_mb: g.memory_mb,
                        used_mem_mb: 0,
                        total_cores: g.cores,
                        used_cores: 0,
                        status: if g.healthy { GpuStatus::Ready } else { GpuStatus::NotReady },
                    },
                )?;
                seeded.gpus += 1;
                seeded.vram_total_mb += g.memory_mb;
            }
        }
        let mut counts = CLUSTER_COUNTS.get_in_write(txn, cluster_id)?.unwrap_or_default();
        counts.node_count = seeded.nodes;
        counts.gpu_count = seeded.gpus;
        counts.vram_total_mb = seeded.vram_total_mb;
        CLUSTER_COUNTS.put(txn, cluster_id, &counts)?;
        Ok(seeded)
    }

    fn forget(&self, txn: &WriteTxn, cluster_id: &str) -> Result<(), StoreError> {
        let prefix = format!("{cluster_id}/");
        super::fit::changed(txn, cluster_id);
        NODES.delete_prefix(txn, &prefix)?;
        GPUS.delete_prefix(txn, &prefix)?;
        super::gpu_booking::forget_holds(txn, cluster_id)?;
        POOLS.delete_prefix(txn, &prefix)?;
        super::pools::forget_cluster(txn, cluster_id)?;
        // The row stays (history: running sessions, the last report) without nodes or GPUs.
        if let Some(mut counts) = CLUSTER_COUNTS.get_in_write(txn, cluster_id)? {
            counts.node_count = 0;
            counts.gpu_count = 0;
            counts.vram_total_mb = 0;
            CLUSTER_COUNTS.put(txn, cluster_id, &counts)?;
        }
        Ok(())
    }

    fn counts(&self, txn: &ReadTransaction, cluster_id: &str) -> Result<ClusterCounts, StoreError> {
        Ok(CLUSTER_COUNTS.get(txn, cluster_id)?.unwrap_or_default())
    }

    fn counts_in_write(&self, txn: &WriteTxn, cluster_id: &str) -> Result<ClusterCounts, StoreError> {
        Ok(CLUSTER_COUNTS.get_in_write(txn, cluster_id)?.unwrap_or_default())
    }

    fn node_summary(&self, txn: &ReadTransaction, cluster_id: &str) -> Result<NodeSummary, StoreError> {
        let nodes = NODES.list_prefix(txn, &format!("{cluster_id}/"))?;
        Ok(NodeSummary {
            total: nodes.len() as u64,
            ready: nodes.iter().filter(|(_, n)| n.ready && !n.offline).count() as u64,
            cordoned: nodes.iter().filter(|(_, n)| n.cordoned || !n.schedulable).count() as u64,
            offline: nodes.iter().filter(|(_, n)| n.offline).count() as u64,
        })
    }
}

/// A session of `cluster_id` started or stopped running: its cluster's `running_sessions` follows,
/// in the session's transaction (sessions call this; the count is the inventory's row).
pub fn running_changed(txn: &WriteTxn, cluster_id: &str, running: bool) -> Result<(), StoreError> {
    let mut c = CLUSTER_COUNTS.get_in_write(txn, cluster_id)?.unwrap_or_default();
    c.running_sessions = if running { c.running_sessions + 1 } else { c.running_sessions.saturating_sub(1) };
    CLUSTER_COUNTS.put(txn, cluster_id, &c)
}

/// Node pages kept rendered (most recent first).
const NODE_PAGES_KEPT: usize = 2;

#[derive(Debug)]
struct NodePage {
    cluster_id: String,
    generation: u64,
    json: Bytes,
}

/// The node page of the last clusters asked for, rendered, with the generation of the nodes and
/// GPU tables it was read at: a console polling a 2,000-node cluster during the operators' flood
/// costs one render per liveness flush (5 s), not one per request. A few entries only: each
/// holds a whole cluster's answer.
#[derive(Debug, Default)]
pub struct NodePages(std::sync::Mutex<Vec<NodePage>>);

impl NodePages {
    /// A live cluster's nodes with their cards, as JSON (`None`: no such live cluster).
    pub async fn json(&self, store: &Store, cluster_id: &str) -> Result<Option<Bytes>, StoreError> {
        // The generation before the data (a commit in between only costs a render later).
        let generation = store.table_generation(&[
            NODES.name(),
            GPUS.name(),
            HEALTH_EVENTS.name(),
            super::pools::NODE_POOLS.name(),
            super::pools::POOL_MEMBERS.name(),
        ]);
        let kept = lock(&self.0)
            .iter()
            .find(|p| p.cluster_id == cluster_id && p.generation == generation)
            .map(|p| p.json.clone());
        let (id, render) = (cluster_id.to_string(), kept.is_none());
        // Still registered? (The cluster row is not in the generation above.)
        let read = store
            .read(move |txn| {
                if !CLUSTERS.get(txn, &id)?.is_some_and(|c| c.is_live()) {
                    return Ok(None);
                }
                if render { Ok(Some(Some(nodes(txn, &id)?))) } else { Ok(Some(None)) }
            })
            .await?;
        let json = match (read, kept) {
            (None, _) => return Ok(None),
            (Some(None), Some(json)) => return Ok(Some(json)),
            (Some(Some(views)), _) => {
                Bytes::from(serde_json::to_vec(&views).map_err(|e| StoreError::Backend(e.to_string()))?)
            }
            (Some(None), None) => return Ok(None),
        };
        let mut pages = lock(&self.0);
        pages.retain(|p| p.cluster_id != cluster_id && p.generation >= generation);
        pages.insert(0, NodePage { cluster_id: cluster_id.to_string(), generation, json: json.clone() });
        pages.truncate(NODE_PAGES_KEPT);
        Ok(Some(json))
    }
}

fn nodes(txn: &ReadTransaction, cluster_id: &str) -> Result<Vec<NodeView>, StoreError> {
    let prefix = format!("{cluster_id}/");
    let (nodes, gpus) = (NODES.list_prefix(txn, &prefix)?, GPUS.list_prefix(txn, &prefix)?);
    let events = HEALTH_EVENTS.list_prefix(txn, &prefix)?;
    let mut latest = latest_gpu_events(events.iter().map(|(_, e)| e));
    let mut by_node: HashMap<String, Vec<GpuView>> = HashMap::new();
    for (_, g) in gpus {
        let event = latest.remove(&g.uuid);
        by_node.entry(g.node.clone()).or_default().push(GpuView { last_event: event, ..GpuView::from(g) });
    }
    let pools = super::pools::pools_of_nodes(txn, cluster_id)?;
    Ok(nodes
        .into_iter()
        .map(|(_, n)| {
            let gpus = by_node.remove(&n.name).unwrap_or_default();
            let pool = pools.get(&n.name).cloned();
            let (pool_id, pool_name) = pool.unzip();
            NodeView { pool_id, pool_name, ..NodeView::of(n, gpus) }
        })
        .collect())
}
