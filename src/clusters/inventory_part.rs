//! What the inventory keeps of a cluster, asked through a hook. Nodes, GPUs and storage pools
//! are the inventory's tables (`inventory::model`), and the inventory sits above clusters; the
//! composition root hands `Clusters` the inventory's side (`inventory::ClusterPart`), as it
//! hands `in_use::InUseCheck`.

use std::sync::Arc;

use crate::store::WriteTxn;
use redb::ReadTransaction;

use super::model::{ClusterCounts, NodeSummary};
use super::probe::ProbedNode;
use crate::store::StoreError;

/// What a registration's seeding counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seeded {
    pub nodes: u64,
    pub gpus: u64,
    pub vram_total_mb: u64,
}

pub trait InventoryPart: Send + Sync {
    /// Seeds node and GPU rows from the probe's node list, inside the registration's transaction.
    fn seed(&self, txn: &WriteTxn, cluster_id: &str, nodes: &[ProbedNode], now: i64) -> Result<Seeded, StoreError>;
    /// Forgets an unregistered cluster's nodes, GPUs and pools, inside the unregister transaction.
    fn forget(&self, txn: &WriteTxn, cluster_id: &str) -> Result<(), StoreError>;
    /// The cluster's counts (nodes, GPUs, VRAM, running sessions, the operator's last report).
    fn counts(&self, txn: &ReadTransaction, cluster_id: &str) -> Result<ClusterCounts, StoreError>;
    /// The same, inside a write transaction (the probe keeps a silent operator's cluster degraded).
    fn counts_in_write(&self, txn: &WriteTxn, cluster_id: &str) -> Result<ClusterCounts, StoreError>;
    /// The node counts of a cluster's detail view.
    fn node_summary(&self, txn: &ReadTransaction, cluster_id: &str) -> Result<NodeSummary, StoreError>;
}

pub type InventoryHook = Arc<dyn InventoryPart>;
