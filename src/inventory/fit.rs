//! The fit check before a session is applied: can a schedulable node of the cluster hold its GPU
//! slice now? Answered from a per-cluster summary kept in memory: for each GPU model, the free
//! (memory, cores) pairs no other card beats in both (a Pareto frontier: at most one point per
//! distinct free-cores value, so ~100 however large the fleet) and the largest wholly free card.
//! A summary is valid while the cluster's fit key ([`key`]) keeps its store generation: every
//! write that can change a card's or node's fitness notes the key (inventory's reports, node
//! actions, the sweep, GPU booking), so a create pays a scan of its cluster only after such a
//! write, and otherwise a map lookup and a walk of one frontier.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::model::{GPUS, NODES, NodeRecord};
use crate::callbacks::wire::GpuStatus;
use crate::locks::lock;
use crate::store::{Rows, Store, StoreError, WriteTxn};

/// The name commits that change what cluster `cluster_id` can hold are noted under.
pub fn key(cluster_id: &str) -> String {
    format!("fit@{cluster_id}")
}

/// Notes that this transaction changes what `cluster_id` can hold.
pub fn changed(txn: &impl Rows, cluster_id: &str) {
    txn.note_key(&key(cluster_id));
}

/// What a session asks of one card.
#[derive(Debug, Clone)]
pub struct Want<'a> {
    /// The offering's model; matched as HAMi matches `use-gputype`: without regard to case, as
    /// part of the card's model name (`A100` fits `NVIDIA A100-SXM4-80GB`).
    pub model: Option<&'a str>,
    /// The whole card (a card nothing is booked on).
    pub exclusive: bool,
    pub mem_mb: u64,
    pub cores: u64,
}

/// Why nothing fits: the largest free slice and the models the cluster reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    /// (MiB, % cores, model) of the largest free slice on a schedulable node among the cards of
    /// the asked model (any model when none matches).
    pub largest_free: Option<(u64, u64, String)>,
    /// Every model of a ready card in the cluster, sorted.
    pub reported_models: Vec<String>,
    /// Ready cards on schedulable nodes.
    pub schedulable_cards: u64,
}

#[derive(Debug, Default)]
struct ModelFree {
    /// Free (MiB, cores) pairs not beaten in both by another card, by memory descending.
    frontier: Vec<(u64, u64)>,
    /// The largest card with nothing booked on it (MiB, cores).
    whole: Option<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Summary {
    generation: u64,
    models: BTreeMap<String, ModelFree>,
    reported: BTreeSet<String>,
    cards: u64,
}

/// Per-cluster summaries, each valid at its cluster's fit-key generation.
#[derive(Debug, Default)]
pub struct FitIndex {
    clusters: Mutex<HashMap<String, Arc<Summary>>>,
}

fn schedulable(n: &NodeRecord) -> bool {
    n.ready && n.schedulable && !n.cordoned && !n.offline && !n.decommissioning
}

impl FitIndex {
    /// Whether `want` fits a card of `cluster_id` now. Runs inside the caller's transaction (a
    /// create's), reading the cluster's rows only when its summary is stale.
    pub fn check(
        &self,
        store: &Store,
        txn: &WriteTxn,
        cluster_id: &str,
        want: &Want<'_>,
    ) -> Result<Result<(), Unfit>, StoreError> {
        let generation = store.table_generation(&[&key(cluster_id)]);
        let cached = lock(&self.clusters).get(cluster_id).filter(|s| s.generation == generation).cloned();
        let summary = match cached {
            Some(s) => s,
            None => {
                let s = Arc::new(build(txn, cluster_id, generation)?);
                lock(&self.clusters).insert(cluster_id.to_string(), s.clone());
                s
            }
        };
        Ok(summary.fits(want))
    }

    /// Forgets every summary (tests; a restore).
    pub fn clear(&self) {
        lock(&self.clusters).clear();
    }
}

fn build(txn: &WriteTxn, cluster_id: &str, generation: u64) -> Result<Summary, StoreError> {
    let prefix = format!("{cluster_id}/");
    let nodes: HashMap<String, bool> =
        NODES.list_prefix_in_write(txn, &prefix)?.into_iter().map(|(_, n)| (n.name.clone(), schedulable(&n))).collect();
    let mut s = Summary { generation, ..Summary::default() };
    let mut points: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (_, g) in GPUS.list_prefix_in_write(txn, &prefix)? {
        if g.status != GpuStatus::Ready {
            continue;
        }
        s.reported.insert(g.model.clone());
        // A card whose node row is missing counts (upstream's outer join); a known node must be
        // schedulable.
        if !nodes.get(&g.node).copied().unwrap_or(true) {
            continue;
        }
        s.cards += 1;
        let free = (g.total_mem_mb.saturating_sub(g.used_mem_mb), g.total_cores.saturating_sub(g.used_cores));
        points.entry(g.model.clone()).or_default().push(free);
        if g.used_mem_mb == 0 && g.used_cores == 0 && g.mode != "mig" {
            let m = s.models.entry(g.model.clone()).or_default();
            if m.whole.is_none_or(|w| (g.total_mem_mb, g.total_cores) > w) {
                m.whole = Some((g.total_mem_mb, g.total_cores));
            }
        }
    }
    for (model, mut pts) in points {
        pts.sort_unstable_by(|a, b| b.cmp(a));
        let mut frontier: Vec<(u64, u64)> = Vec::new();
        for p in pts {
            if frontier.last().is_none_or(|last| p.1 > last.1) {
                frontier.push(p);
            }
        }
        s.models.entry(model).or_default().frontier = frontier;
    }
    Ok(s)
}

impl Summary {
    fn fits(&self, want: &Want<'_>) -> Result<(), Unfit> {
        let wanted = want.model.map(str::to_ascii_uppercase);
        let matches = |m: &str| wanted.as_deref().is_none_or(|w| m.to_ascii_uppercase().contains(w));
        let mut candidates = self.models.iter().filter(|(m, _)| matches(m)).peekable();
        let any_match = candidates.peek().is_some();
        for (_, free) in candidates {
            let ok = if want.exclusive {
                free.whole.is_some_and(|(mem, _)| mem >= want.mem_mb)
            } else {
                free.frontier.iter().take_while(|(mem, _)| *mem >= want.mem_mb).any(|(_, cores)| *cores >= want.cores)
            };
            if ok {
                return Ok(());
            }
        }
        // The largest slice among the asked model's cards (all cards when no model matches).
        let pool = self.models.iter().filter(|(m, _)| !any_match || matches(m));
        let largest = pool
            .filter_map(|(m, f)| {
                let best = if want.exclusive { f.whole } else { f.frontier.first().copied() };
                best.map(|(mem, cores)| (mem, cores, m.clone()))
            })
            .max_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        Err(Unfit {
            largest_free: largest,
            reported_models: self.reported.iter().cloned().collect(),
            schedulable_cards: self.cards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(cards: &[(&str, u64, u64, bool)]) -> Summary {
        // (model, free mem, free cores, whole)
        let mut s = Summary::default();
        let mut points: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        for (m, mem, cores, whole) in cards {
            s.reported.insert(m.to_string());
            points.entry(m.to_string()).or_default().push((*mem, *cores));
            if *whole {
                s.models.entry(m.to_string()).or_default().whole = Some((*mem, *cores));
            }
        }
        for (model, mut pts) in points {
            pts.sort_unstable_by(|a, b| b.cmp(a));
            let mut frontier: Vec<(u64, u64)> = Vec::new();
            for p in pts {
                if frontier.last().is_none_or(|last| p.1 > last.1) {
                    frontier.push(p);
                }
            }
            s.models.entry(model).or_default().frontier = frontier;
        }
        s
    }

    #[test]
    fn a_slice_fits_only_where_one_card_has_both_memory_and_cores() {
        // Memory on one card, cores on another: neither holds 20 GiB with 50 % cores.
        let s = summary(&[("NVIDIA A100-SXM4-80GB", 40_000, 20, false), ("NVIDIA A100-SXM4-80GB", 10_000, 90, false)]);
        let want = |mem, cores| Want { model: Some("a100"), exclusive: false, mem_mb: mem, cores };
        assert!(s.fits(&want(20_000, 10)).is_ok());
        assert!(s.fits(&want(5_000, 80)).is_ok());
        let no = s.fits(&want(20_000, 50)).unwrap_err();
        assert_eq!(no.largest_free, Some((40_000, 20, "NVIDIA A100-SXM4-80GB".into())));
        assert_eq!(no.reported_models, ["NVIDIA A100-SXM4-80GB"]);
        // Another model: the largest slice of any model is named.
        let h = Want { model: Some("H100"), exclusive: false, mem_mb: 1, cores: 1 };
        assert!(s.fits(&h).is_err());
        // The whole card needs one with nothing booked.
        let whole = Want { model: None, exclusive: true, mem_mb: 0, cores: 0 };
        assert!(s.fits(&whole).is_err());
        let s = summary(&[("L4", 24_000, 100, true)]);
        assert!(s.fits(&whole).is_ok());
    }
}
