//! The domain functions behind the callbacks: each runs inside a (batched) write transaction,
//! compares the report with what is stored, writes only what changed, and keeps the cluster's
//! counters (nodes, GPUs, VRAM, running sessions) exact in the same transaction.
//!
//! The two hot reports (`nodes`, `gpu-devices`) are written against [`Rows`], so the same code
//! also runs on a read transaction ([`DryRun`]) to learn, without the writer, whether a report
//! would change anything durable; liveness times are then kept in memory (see `Inventory`) and
//! written by [`flush_liveness`].

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::store::WriteTxn;
use redb::ReadTransaction;

use super::gpu_booking::ALLOCATIONS;
use super::model::*;
use crate::audit::{AuditEntry, AuditResult};
use crate::callbacks::wire::*;
use crate::clock::Clock;
use crate::clusters::model::{CLUSTERS, ClusterCounts, ClusterRecord, fell_silent, heard_from};
use crate::http::error::ErrorCode;
use crate::store::{Outcome, Rows, StoreError};

/// A write that changes something anyway renews liveness timestamps (`heartbeat_at`,
/// `last_seen`) older than this. Reports that change nothing else only note them in memory,
/// written together every `liveness_flush_every` (see `Inventory::flush_liveness`).
pub const LIVENESS_EVERY_MS: i64 = 5_000;
pub use crate::clusters::model::{SILENT_STAGE, silent_error};

/// The two hot reports, applied to either kind of [`Rows`].
pub trait Report: Clone + Send + Sync + 'static {
    fn apply<R: Rows>(&self, rows: &R, cluster_id: &str, now: i64) -> Result<Outcome<Seen>, StoreError>;
}

impl Report for NodeReport {
    fn apply<R: Rows>(&self, rows: &R, cluster_id: &str, now: i64) -> Result<Outcome<Seen>, StoreError> {
        apply_node(rows, cluster_id, self, now)
    }
}

impl Report for GpuReport {
    fn apply<R: Rows>(&self, rows: &R, cluster_id: &str, now: i64) -> Result<Outcome<Seen>, StoreError> {
        apply_gpu(rows, cluster_id, self, now)
    }
}

/// A digest of what a node report can change (all it carries but the cluster, checked before).
pub fn node_digest(r: &NodeReport) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (&r.node_id, r.node_cpu, r.node_ready, r.node_mem_gb, r.node_disk_gb, r.lossless_capable, &r.role).hash(&mut h);
    h.finish()
}

/// A digest of what a card report can change on a stored card: `used_*` are advisory (our
/// allocations own occupancy) and only read when the card is new, which is never a repeat.
pub fn gpu_digest(r: &GpuReport) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (&r.node_id, &r.uuid, &r.mode, r.total_mem_mb, r.total_cores, r.status.as_str(), &r.model).hash(&mut h);
    (r.node_cpu, r.node_ready, r.node_mem_gb, r.node_disk_gb).hash(&mut h);
    h.finish()
}

pub(crate) fn outcome<T>(wrote: bool, v: T) -> Outcome<T> {
    if wrote { Outcome::Wrote(v) } else { Outcome::Unchanged(v) }
}

/// The cluster if it is registered and not unregistered; reports for others change nothing.
pub fn live_cluster(txn: &impl Rows, id: &str) -> Result<Option<ClusterRecord>, StoreError> {
    Ok(txn.get(CLUSTERS, id)?.filter(ClusterRecord::is_live))
}

/// An inventory report is the operator's heartbeat. Returns whether the counts changed. Without
/// `stamp` only a first heartbeat is set (the rest is kept in memory).
pub fn beat(c: &mut ClusterCounts, now: i64, stamp: bool) -> bool {
    if c.heartbeat_at.is_none_or(|h| stamp && (now - h >= LIVENESS_EVERY_MS || now < h)) {
        c.heartbeat_at = Some(now);
        return true;
    }
    false
}

/// A live cluster's counts row (zero until its first report or registration seeds it).
fn counts_of(txn: &impl Rows, cluster_id: &str) -> Result<ClusterCounts, StoreError> {
    Ok(txn.get(CLUSTER_COUNTS, cluster_id)?.unwrap_or_default())
}

/// The node's Ready condition drives liveness: `last_seen` moves only while it is ready (absent =
/// ready, as from older operators); NotReady is offline at once. Without `stamp` only a first
/// `last_seen` is set (the rest is kept in memory).
pub fn touch(n: &mut NodeRecord, ready: Option<bool>, now: i64, stamp: bool) {
    if ready == Some(false) {
        if n.ready || n.not_ready_since.is_none() {
            n.not_ready_since = Some(now);
        }
        n.ready = false;
        n.offline = true;
    } else {
        n.ready = true;
        n.offline = false;
        n.not_ready_since = None;
        if n.last_seen.is_none_or(|t| stamp && (now - t >= LIVENESS_EVERY_MS || now < t)) {
            n.last_seen = Some(now);
        }
    }
}

fn capacity(n: &mut NodeRecord, cpu: Option<i64>, mem: Option<i64>, disk: Option<i64>) {
    if let Some(v) = cpu {
        n.cpu = Some(v as f64);
    }
    if let Some(v) = mem {
        n.mem_gb = Some(v as f64);
    }
    if let Some(v) = disk {
        n.disk_gb = Some(v as f64);
    }
}

fn new_node(cluster_id: &str, name: &str, ready: Option<bool>, now: i64) -> NodeRecord {
    let mut n = NodeRecord {
        cluster_id: cluster_id.to_string(),
        name: name.to_string(),
        ready: true,
        schedulable: true,
        cordoned: false,
        decommissioning: false,
        offline: false,
        role: None,
        cpu: None,
        mem_gb: None,
        disk_gb: None,
        lossless_capable: false,
        last_seen: None,
        not_ready_since: None,
        gpu_count: 0,
    };
    touch(&mut n, ready, now, true);
    n
}

/// What a report that changes nothing durable still means: whose liveness it renews.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// The cluster is registered: the report is its operator's heartbeat.
    pub live: bool,
    /// The node's `last_seen` moves (it is ready and not being decommissioned).
    pub node_alive: bool,
}

/// `POST /internal/inventory/nodes`.
pub fn apply_node(txn: &impl Rows, cluster_id: &str, r: &NodeReport, now: i64) -> Result<Outcome<Seen>, StoreError> {
    let Some(record) = live_cluster(txn, cluster_id)? else {
        return Ok(Outcome::Unchanged(Seen::default()));
    };
    let stamp = txn.durable();
    let mut cluster = counts_of(txn, cluster_id)?;
    let mut cluster_changed = beat(&mut cluster, now, stamp);
    let reconnected = heard_from(txn, record)?;
    let key = format!("{cluster_id}/{}", r.node_id);
    let mut wrote = false;
    let node = match txn.get(NODES, &key)? {
        None => {
            let mut n = new_node(cluster_id, &r.node_id, r.node_ready, now);
            capacity(&mut n, r.node_cpu, r.node_mem_gb, r.node_disk_gb);
            n.lossless_capable = r.lossless_capable;
            n.role = r.role.clone().filter(|s| !s.is_empty());
            cluster.node_count += 1;
            cluster_changed = true;
            txn.put(NODES, &key, &n)?;
            super::fit::changed_node(txn, cluster_id, &r.node_id);
            wrote = true;
            n
        }
        // Being removed: reporting it back would resurrect what the admin asked to remove.
        Some(n) if n.decommissioning => n,
        Some(before) => {
            let mut n = before.clone();
            touch(&mut n, r.node_ready, now, stamp);
            capacity(&mut n, r.node_cpu, r.node_mem_gb, r.node_disk_gb);
            n.lossless_capable = r.lossless_capable;
            if let Some(role) = r.role.as_deref().filter(|s| !s.is_empty()) {
                n.role = Some(role.to_string());
            }
            if n != before {
                txn.put(NODES, &key, &n)?;
                super::fit::changed_node(txn, cluster_id, &r.node_id);
                wrote = true;
            }
            n
        }
    };
    if cluster_changed {
        txn.put(CLUSTER_COUNTS, cluster_id, &cluster)?;
        wrote = true;
    }
    Ok(outcome(
        wrote || reconnected,
        Seen { live: true, node_alive: !node.decommissioning && r.node_ready != Some(false) },
    ))
}

/// `POST /internal/inventory/gpu-devices`: upsert by (cluster, uuid); `used_*` stay ours.
pub fn apply_gpu(txn: &impl Rows, cluster_id: &str, r: &GpuReport, now: i64) -> Result<Outcome<Seen>, StoreError> {
    let Some(record) = live_cluster(txn, cluster_id)? else {
        return Ok(Outcome::Unchanged(Seen::default()));
    };
    let stamp = txn.durable();
    let mut cluster = counts_of(txn, cluster_id)?;
    let mut cluster_changed = beat(&mut cluster, now, stamp);
    let reconnected = heard_from(txn, record)?;
    let mut wrote = false;
    let node_key = format!("{cluster_id}/{}", r.node_id);
    let stored_node = txn.get(NODES, &node_key)?;
    let mut node = match stored_node.clone() {
        None => {
            let mut n = new_node(cluster_id, &r.node_id, r.node_ready, now);
            capacity(&mut n, r.node_cpu, r.node_mem_gb, r.node_disk_gb);
            cluster.node_count += 1;
            cluster_changed = true;
            n
        }
        Some(n) if n.decommissioning => {
            // Do not re-create the cards an administrator just cleared.
            if cluster_changed {
                txn.put(CLUSTER_COUNTS, cluster_id, &cluster)?;
            }
            return Ok(outcome(cluster_changed || reconnected, Seen { live: true, node_alive: false }));
        }
        Some(mut n) => {
            touch(&mut n, r.node_ready, now, stamp);
            capacity(&mut n, r.node_cpu, r.node_mem_gb, r.node_disk_gb);
            n
        }
    };

    let gpu_key = format!("{cluster_id}/{}", r.uuid);
    let total_mem = r.total_mem_mb.max(0) as u64;
    match txn.get(GPUS, &gpu_key)? {
        None => {
            let g = GpuRecord {
                cluster_id: cluster_id.to_string(),
                node: r.node_id.clone(),
                uuid: r.uuid.clone(),
                model: r.model.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| "unknown".into()),
                mode: r.mode.clone().unwrap_or_default(),
                total_mem_mb: total_mem,
                // A new card: trust the report (the operator sends 0).
                used_mem_mb: r.used_mem_mb.max(0) as u64,
                total_cores: if r.total_cores > 0 { r.total_cores as u64 } else { 100 },
                used_cores: r.used_cores.max(0) as u64,
                status: r.status.clone(),
            };
            txn.put(GPUS, &gpu_key, &g)?;
            super::fit::changed_gpu(txn, cluster_id, &r.uuid);
            wrote = true;
            node.gpu_count += 1;
            cluster.gpu_count += 1;
            cluster.vram_total_mb += total_mem;
            cluster_changed = true;
        }
        Some(before) => {
            let mut g = before.clone();
            g.total_mem_mb = total_mem;
            if r.total_cores > 0 {
                g.total_cores = r.total_cores as u64;
            }
            g.status = r.status.clone();
            // Only MIG is a hardware fact; within HAMi the pool (fractional/exclusive) is policy.
            match r.mode.as_deref() {
                Some("mig") => g.mode = "mig".into(),
                Some(m @ ("fractional" | "exclusive")) if g.mode.is_empty() || g.mode == "mig" => g.mode = m.into(),
                _ => {}
            }
            if let Some(m) = r.model.as_deref().filter(|m| !m.is_empty()) {
                g.model = m.to_string();
            }
            if g.node != r.node_id {
                // The card moved: the old node loses it.
                let old_key = format!("{cluster_id}/{}", g.node);
                if let Some(mut old) = txn.get(NODES, &old_key)? {
                    old.gpu_count = old.gpu_count.saturating_sub(1);
                    txn.put(NODES, &old_key, &old)?;
                }
                node.gpu_count += 1;
                g.node = r.node_id.clone();
            }
            if g.total_mem_mb != before.total_mem_mb {
                cluster.vram_total_mb = (cluster.vram_total_mb + g.total_mem_mb).saturating_sub(before.total_mem_mb);
                cluster_changed = true;
            }
            if g != before {
                txn.put(GPUS, &gpu_key, &g)?;
                super::fit::changed_gpu(txn, cluster_id, &r.uuid);
                wrote = true;
            }
        }
    }
    if stored_node.as_ref() != Some(&node) {
        txn.put(NODES, &node_key, &node)?;
        super::fit::changed_node(txn, cluster_id, &node.name);
        wrote = true;
    }
    if cluster_changed {
        txn.put(CLUSTER_COUNTS, cluster_id, &cluster)?;
        wrote = true;
    }
    Ok(outcome(wrote || reconnected, Seen { live: true, node_alive: r.node_ready != Some(false) }))
}

/// Liveness noted in memory since the last flush: the latest report time per cluster and per
/// node (`<cluster>/<node>`).
#[derive(Debug, Clone, Default)]
pub struct PendingLiveness {
    pub clusters: HashMap<String, i64>,
    pub nodes: HashMap<String, i64>,
}

impl PendingLiveness {
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty() && self.nodes.is_empty()
    }

    /// Takes in what `other` noted (a failed flush goes back).
    pub fn merge(&mut self, other: PendingLiveness) {
        for (k, t) in other.clusters {
            let e = self.clusters.entry(k).or_insert(t);
            *e = (*e).max(t);
        }
        for (k, t) in other.nodes {
            let e = self.nodes.entry(k).or_insert(t);
            *e = (*e).max(t);
        }
    }
}

/// Writes the liveness noted in memory: `heartbeat_at` of live clusters (and, like any report,
/// a cluster degraded for silence is connected again), `last_seen` of nodes that are ready and
/// online (a node that went offline comes back only through a report the writer applies).
/// Times only move forward. Returns how many rows it wrote.
pub fn flush_liveness(txn: &WriteTxn, p: &PendingLiveness) -> Result<Outcome<usize>, StoreError> {
    let mut n = 0;
    for (id, t) in &p.clusters {
        let Some(record) = live_cluster(txn, id)? else { continue };
        let mut c = counts_of(txn, id)?;
        if c.heartbeat_at.is_none_or(|h| h < *t) {
            c.heartbeat_at = Some(*t);
            CLUSTER_COUNTS.put(txn, id, &c)?;
            n += 1;
        }
        if heard_from(txn, record)? {
            n += 1;
        }
    }
    for (key, t) in &p.nodes {
        let Some(mut node) = NODES.get_in_write(txn, key)? else { continue };
        if node.ready && !node.offline && !node.decommissioning && node.last_seen.is_none_or(|s| s < *t) {
            node.last_seen = Some(*t);
            NODES.put(txn, key, &node)?;
            n += 1;
        }
    }
    Ok(outcome(n > 0, n))
}

/// `POST /internal/inventory/drift`: kept per card (the latest), and logged by the caller.
pub fn record_drift(txn: &WriteTxn, cluster_id: &str, r: &DriftReport, now: i64) -> Result<Outcome<()>, StoreError> {
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(()));
    }
    let uuid = r.uuid.clone().unwrap_or_default();
    let key = format!("{cluster_id}/{uuid}");
    let rec = DriftRecord {
        cluster_id: cluster_id.to_string(),
        uuid,
        used_mem_mb: r.used_mem_mb,
        total_mem_mb: r.total_mem_mb,
        reported_at: now,
    };
    DRIFT.put(txn, &key, &rec)?;
    Ok(Outcome::Wrote(()))
}

/// Node names of a cluster whose node rows match `pred`, sorted (keys are in order).
pub fn hostnames(
    txn: &ReadTransaction,
    cluster_id: &str,
    pred: impl Fn(&NodeRecord) -> bool,
) -> Result<Vec<String>, StoreError> {
    let prefix = format!("{cluster_id}/");
    let mut names: Vec<String> =
        NODES.list_prefix(txn, &prefix)?.into_iter().filter(|(_, n)| pred(n)).map(|(_, n)| n.name).collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// What the operator's two GETs answer, from one scan: a cluster's node names: (cordoned and not being decommissioned, being decommissioned), each
/// sorted (keys are in order).
pub fn operator_hostnames(txn: &ReadTransaction, cluster_id: &str) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let prefix = format!("{cluster_id}/");
    let (mut cordoned, mut parked) = (Vec::new(), Vec::new());
    for (_, n) in NODES.list_prefix(txn, &prefix)? {
        if n.decommissioning {
            parked.push(n.name);
        } else if n.cordoned {
            cordoned.push(n.name);
        }
    }
    for names in [&mut cordoned, &mut parked] {
        names.sort();
        names.dedup();
    }
    Ok((cordoned, parked))
}

/// `POST /internal/nodes/decommissioned`: the operator deleted the Node; the row goes with it.
pub fn node_decommissioned(
    txn: &WriteTxn,
    clock: &Clock,
    cluster_id: &str,
    hostname: &str,
) -> Result<Outcome<()>, StoreError> {
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(()));
    };
    let mut cluster = counts_of(txn, cluster_id)?;
    let key = format!("{cluster_id}/{hostname}");
    match NODES.get_in_write(txn, &key)? {
        Some(n) if n.decommissioning => {
            let (gone, vram) = remove_node_gpus(txn, cluster_id, hostname)?;
            NODES.delete(txn, &key)?;
            super::fit::changed_node(txn, cluster_id, hostname);
            cluster.node_count = cluster.node_count.saturating_sub(1);
            cluster.gpu_count = cluster.gpu_count.saturating_sub(gone);
            cluster.vram_total_mb = cluster.vram_total_mb.saturating_sub(vram);
            CLUSTER_COUNTS.put(txn, cluster_id, &cluster)?;
            crate::audit::record_in(
                txn,
                clock,
                AuditEntry::system(format!("operator:{cluster_id}"), "node.delete", AuditResult::Success)
                    .target(hostname.to_string())
                    .details(serde_json::json!({ "cluster_id": cluster_id, "removed_from_cluster": true })),
            )?;
            Ok(Outcome::Wrote(()))
        }
        // Already finalised, or never asked for.
        _ => Ok(Outcome::Unchanged(())),
    }
}

/// Deletes a node's GPU rows; returns (how many, their VRAM).
fn remove_node_gpus(txn: &WriteTxn, cluster_id: &str, node: &str) -> Result<(u64, u64), StoreError> {
    let mut count = 0;
    let mut vram = 0;
    for (key, g) in GPUS.list_prefix_in_write(txn, &format!("{cluster_id}/"))? {
        if g.node == node {
            GPUS.delete(txn, &key)?;
            count += 1;
            vram += g.total_mem_mb;
        }
    }
    Ok((count, vram))
}

/// The admin's node actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAction {
    Cordon,
    Uncordon,
    Decommission,
}

impl NodeAction {
    pub fn audit_action(self) -> &'static str {
        match self {
            Self::Cordon => "node.cordon",
            Self::Uncordon => "node.uncordon",
            Self::Decommission => "node.decommission",
        }
    }
}

/// Cordon / uncordon / decommission a node, with its audit entry in the same transaction.
pub fn node_action(
    txn: &WriteTxn,
    cluster_id: &str,
    node: &str,
    action: NodeAction,
    audit: AuditEntry,
    clock: &Clock,
) -> Result<Outcome<Result<NodeRecord, Refusal>>, StoreError> {
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(Err(Refusal::NotFound(format!("no cluster {cluster_id}")))));
    };
    let mut cluster = counts_of(txn, cluster_id)?;
    let key = format!("{cluster_id}/{node}");
    let Some(before) = NODES.get_in_write(txn, &key)? else {
        return Ok(Outcome::Unchanged(Err(Refusal::NotFound(format!("cluster {cluster_id} has no node {node}")))));
    };
    let mut n = before.clone();
    match action {
        NodeAction::Cordon => n.cordoned = true,
        NodeAction::Uncordon => {
            if n.decommissioning {
                return Ok(Outcome::Unchanged(Err(Refusal::Conflict {
                    code: ErrorCode::NodeDecommissioning,
                    message: format!("node {node} is being decommissioned; it cannot be uncordoned"),
                    details: serde_json::json!({ "node": node }),
                })));
            }
            n.cordoned = false;
        }
        NodeAction::Decommission => {
            if !n.decommissioning {
                let gpus: std::collections::HashSet<String> = GPUS
                    .list_prefix_in_write(txn, &format!("{cluster_id}/"))?
                    .into_iter()
                    .filter(|(_, g)| g.node == node)
                    .map(|(_, g)| g.uuid)
                    .collect();
                let open: Vec<String> = ALLOCATIONS
                    .list_in_write(txn)?
                    .into_iter()
                    .filter(|(_, a)| {
                        a.cluster_id == cluster_id
                            && a.is_open()
                            && a.gpu_uuid.as_ref().is_some_and(|u| gpus.contains(u))
                    })
                    .map(|(_, a)| a.id)
                    .collect();
                if !open.is_empty() {
                    return Ok(Outcome::Unchanged(Err(Refusal::Conflict {
                        code: ErrorCode::NodeInUse,
                        message: format!(
                            "node {node} has {} open GPU allocations; end those sessions before decommissioning it",
                            open.len()
                        ),
                        details: serde_json::json!({ "node": node, "allocations": open }),
                    })));
                }
                let (gone, vram) = remove_node_gpus(txn, cluster_id, node)?;
                cluster.gpu_count = cluster.gpu_count.saturating_sub(gone);
                cluster.vram_total_mb = cluster.vram_total_mb.saturating_sub(vram);
                CLUSTER_COUNTS.put(txn, cluster_id, &cluster)?;
                n.gpu_count = 0;
                n.decommissioning = true;
            }
        }
    }
    if n == before {
        return Ok(Outcome::Unchanged(Ok(n)));
    }
    NODES.put(txn, &key, &n)?;
    super::fit::changed_node(txn, &n.cluster_id, &n.name);
    crate::audit::record_in(txn, clock, audit)?;
    Ok(Outcome::Wrote(Ok(n)))
}

/// `POST /internal/nodes/health-events`: recorded per node; `action=cordon` marks it cordoned
/// (the operator already cordoned the Kubernetes node). Unknown nodes are only logged.
pub fn record_health_event(
    txn: &WriteTxn,
    cluster_id: &str,
    ev: &HealthEvent,
    now: i64,
) -> Result<Outcome<bool>, StoreError> {
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(false));
    }
    let key = format!("{cluster_id}/{}", ev.node_id);
    let Some(mut node) = NODES.get_in_write(txn, &key)? else {
        return Ok(Outcome::Unchanged(false));
    };
    let id = ev.id.clone().unwrap_or_else(|| ulid::Ulid::new().to_string());
    let rec = HealthEventRecord {
        id: id.clone(),
        cluster_id: cluster_id.to_string(),
        node: ev.node_id.clone(),
        kind: ev.kind.clone(),
        severity: ev.severity.clone(),
        action: ev.action.clone(),
        gpu_uuid: ev.gpu_uuid.clone(),
        message: ev.message.clone(),
        at: now,
    };
    HEALTH_EVENTS.put(txn, &format!("{key}/{id}"), &rec)?;
    if ev.action.as_deref().is_some_and(|a| a.eq_ignore_ascii_case("cordon")) && !node.cordoned {
        node.cordoned = true;
        NODES.put(txn, &key, &node)?;
        super::fit::changed_node(txn, &node.cluster_id, &node.name);
    }
    Ok(Outcome::Wrote(true))
}

/// The inventory's part of `POST /internal/volumes/sync` (the volumes room applies the PVCs and
/// calls this in the same transaction): the storage pools' capacity and each session pod's
/// scratch-disk use. Names that cannot be Kubernetes object names were dropped by
/// `VolumeSync::bound`. Returns whether anything changed.
pub fn storage_report(
    txn: &WriteTxn,
    cluster_id: &str,
    pools: &[PoolCapacity],
    sessions: &[SessionDisk],
    now: i64,
) -> Result<bool, StoreError> {
    let mut wrote = false;
    for p in pools.iter().filter(|p| p.capacity_bytes > 0) {
        let key = format!("{cluster_id}/{}", p.storage_class);
        let stored = POOLS.get_in_write(txn, &key)?;
        let mut value = stored
            .clone()
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({ "cluster_id": cluster_id, "storage_class": p.storage_class }));
        value["capacity_bytes"] = p.capacity_bytes.into();
        value["capacity_source"] = "csi".into();
        if stored.as_ref().map(|s| (&s["capacity_bytes"], &s["capacity_source"]))
            != Some((&value["capacity_bytes"], &value["capacity_source"]))
        {
            value["capacity_reported_at"] = now.into();
            POOLS.put(txn, &key, &value)?;
            wrote = true;
        }
    }
    for s in sessions {
        let key = format!("{cluster_id}/{}", s.name);
        let rec = SessionDiskRecord {
            cluster_id: cluster_id.to_string(),
            name: s.name.clone(),
            ephemeral_used_bytes: s.ephemeral_used_bytes,
            ephemeral_limit_bytes: s.ephemeral_limit_bytes,
        };
        if SESSION_DISKS.get_in_write(txn, &key)?.as_ref() != Some(&rec) {
            SESSION_DISKS.put(txn, &key, &rec)?;
            wrote = true;
        }
    }
    Ok(wrote)
}

/// The sweep: nodes not seen for `node_stale_after` go offline; a cluster whose operator has
/// been silent for `heartbeat_stale_after` is degraded. Only clusters whose operator has ever
/// reported are judged (without an operator there is nothing to hear from).
pub fn sweep(
    txn: &WriteTxn,
    now: i64,
    node_stale_ms: i64,
    heartbeat_stale_ms: i64,
) -> Result<Outcome<SweepReport>, StoreError> {
    let mut report = SweepReport::default();
    for (id, c) in CLUSTERS.list_in_write(txn)? {
        if !c.is_live() {
            continue;
        }
        let Some(hb) = CLUSTER_COUNTS.get_in_write(txn, &id)?.and_then(|k| k.heartbeat_at) else { continue };
        if now - hb > heartbeat_stale_ms && fell_silent(txn, c, hb, now)? {
            report.clusters_degraded.push(id.clone());
        }
        for (key, mut n) in NODES.list_prefix_in_write(txn, &format!("{id}/"))? {
            if !n.offline && !n.decommissioning && n.last_seen.is_none_or(|t| now - t > node_stale_ms) {
                n.offline = true;
                NODES.put(txn, &key, &n)?;
                super::fit::changed_node(txn, &id, &n.name);
                report.nodes_offline.push(key);
            }
        }
    }
    let wrote = !report.clusters_degraded.is_empty() || !report.nodes_offline.is_empty();
    Ok(outcome(wrote, report))
}

/// What one sweep changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub nodes_offline: Vec<String>,
    pub clusters_degraded: Vec<String>,
}
