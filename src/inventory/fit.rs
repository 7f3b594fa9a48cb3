//! The fit check before a session is applied: can a schedulable node of the cluster hold its GPU
//! slice now? Answered from a per-cluster summary kept in memory: every card's free (memory,
//! cores) counted per GPU model in ordered maps, from which the Pareto frontier (the free pairs
//! no other card beats in both: at most one point per distinct free-cores value, so ~100 however
//! large the fleet) is derived once per change, and the wholly free cards.
//!
//! The summary is valid while the cluster's fit key ([`key`]) keeps its store generation. Every
//! write that can change a card's or a node's fitness notes the key and logs which card
//! ([`changed_gpu`]) or node ([`changed_node`]) it touched in the store's change log, or logs the
//! whole cluster ([`changed`]: seed, forget). A create that finds the key moved re-reads only the
//! logged rows (a node: its row and its cards) from the committed state and patches the summary;
//! the whole cluster is read again only on first use, after a whole-cluster change, or when the
//! change log no longer reaches back to the summary's generation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::ReadTransaction;

use super::gpu_booking::{Held, held_on, held_on_cluster};
use super::model::{GPUS, GpuRecord, NODES, NodeRecord};
use super::pools::{POOL_MEMBERS, Placement};
use crate::callbacks::wire::GpuStatus;
use crate::locks::lock;
use crate::store::{Rows, Store, StoreError};

/// The name commits that change what cluster `cluster_id` can hold are noted under.
pub fn key(cluster_id: &str) -> String {
    format!("fit@{cluster_id}")
}

/// The change-log names of `cluster_id` start with this.
fn log_prefix(cluster_id: &str) -> String {
    format!("fit@{cluster_id}/")
}

/// Notes that this transaction changes what `cluster_id` can hold, as a whole (the next check
/// reads the cluster again).
pub fn changed(txn: &impl Rows, cluster_id: &str) {
    txn.note_key(&key(cluster_id));
    txn.log_key(&format!("{}*", log_prefix(cluster_id)));
}

/// Notes that this transaction changes card `uuid` of `cluster_id` (added, changed, removed).
pub fn changed_gpu(txn: &impl Rows, cluster_id: &str, uuid: &str) {
    txn.note_key(&key(cluster_id));
    txn.log_key(&format!("{}g/{uuid}", log_prefix(cluster_id)));
}

/// Notes that this transaction changes node `node` of `cluster_id` (its schedulability, or its
/// cards as a whole: the next check reads the node's row and every card it knows on it).
pub fn changed_node(txn: &impl Rows, cluster_id: &str, node: &str) {
    txn.note_key(&key(cluster_id));
    txn.log_key(&format!("{}n/{node}", log_prefix(cluster_id)));
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

/// Why nothing fits: the largest free slice the caller could get and the models the cluster
/// reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    /// (MiB, % cores, model) of the largest free slice on a schedulable node the caller's
    /// placement allows, among the cards of the asked model (any model when none matches).
    pub largest_free: Option<(u64, u64, String)>,
    /// Every model of a ready card in the cluster, sorted.
    pub reported_models: Vec<String>,
    /// Ready cards on schedulable nodes.
    pub schedulable_cards: u64,
    /// Whether a counted card of the asked model on a node the placement allows could hold it
    /// once its bookings end (the ask is not larger than every such card): a queue can wait for
    /// it; otherwise it never fits.
    pub could_fit: bool,
}

/// One model's counted cards.
#[derive(Debug, Default)]
struct ModelFree {
    /// Free (MiB, cores) -> the counted cards that have exactly that much free.
    points: BTreeMap<(u64, u64), BTreeSet<String>>,
    /// (MiB, cores) of counted cards with nothing booked or held -> those cards.
    wholes: BTreeMap<(u64, u64), BTreeSet<String>>,
    /// The free pairs not beaten in both by another card, by memory descending (derived from
    /// `points`; `None` after a change until the next check).
    frontier: Option<Vec<(u64, u64)>>,
    /// (MiB, cores) of counted cards when nothing is booked on them, and whether they can be
    /// taken whole (not MIG) -> how many.
    sizes: BTreeMap<(u64, u64, bool), u32>,
}

impl ModelFree {
    fn frontier(&mut self) -> &[(u64, u64)] {
        let points = &self.points;
        self.frontier.get_or_insert_with(|| {
            let mut frontier: Vec<(u64, u64)> = Vec::new();
            for p in points.keys().rev() {
                if frontier.last().is_none_or(|last| p.1 > last.1) {
                    frontier.push(*p);
                }
            }
            frontier
        })
    }

    fn whole(&self) -> Option<(u64, u64)> {
        self.wholes.keys().next_back().copied()
    }

    /// Up to `n` cards that hold `want`, the tightest first (the least free that is enough).
    fn cards_for(&self, want: &Want<'_>, n: usize) -> Vec<((u64, u64), String)> {
        let map = if want.exclusive { &self.wholes } else { &self.points };
        map.range((want.mem_mb, 0)..)
            .filter(|((_, cores), _)| want.exclusive || *cores >= want.cores)
            .flat_map(|(p, uuids)| uuids.iter().map(move |u| (*p, u.clone())))
            .take(n)
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// What one card adds to the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    node: String,
    /// The dedicated pool its node is in (`None`: a shared node).
    pool: Option<String>,
    model: String,
    ready: bool,
    /// What is neither booked nor held on it.
    free: (u64, u64),
    /// Its size when nothing is booked or held on it (and it is not MIG).
    whole: Option<(u64, u64)>,
    /// Its size, and whether it can be taken whole (not MIG).
    size: (u64, u64, bool),
}

impl Card {
    fn of(g: &GpuRecord, pool: Option<String>, held: Held) -> Self {
        let free = (
            g.total_mem_mb.saturating_sub(g.used_mem_mb).saturating_sub(held.gpu_mem_mb),
            g.total_cores.saturating_sub(g.used_cores).saturating_sub(held.gpu_cores),
        );
        let whole = (g.used_mem_mb == 0 && g.used_cores == 0 && held.sessions == 0 && g.mode != "mig")
            .then_some((g.total_mem_mb, g.total_cores));
        let size = (g.total_mem_mb, g.total_cores, g.mode != "mig");
        let ready = g.status == GpuStatus::Ready;
        Self { node: g.node.clone(), pool, model: g.model.clone(), ready, free, whole, size }
    }
}

fn bump_set<K: Ord>(map: &mut BTreeMap<K, BTreeSet<String>>, k: K, uuid: &str, add: bool) {
    if add {
        map.entry(k).or_default().insert(uuid.to_string());
    } else if let std::collections::btree_map::Entry::Occupied(mut e) = map.entry(k) {
        e.get_mut().remove(uuid);
        if e.get().is_empty() {
            e.remove();
        }
    }
}

fn bump<K: Ord>(map: &mut BTreeMap<K, u32>, k: K, add: bool) {
    if add {
        *map.entry(k).or_default() += 1;
    } else if let std::collections::btree_map::Entry::Occupied(mut e) = map.entry(k) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// One cluster's summary and the per-card state it is patched from.
#[derive(Debug, Default)]
struct Summary {
    generation: u64,
    /// `<uuid>` -> card.
    cards: HashMap<String, Card>,
    /// Node name -> schedulable (a card whose node row is missing counts).
    nodes: HashMap<String, bool>,
    /// Node name -> the uuids of the cards on it.
    node_cards: HashMap<String, BTreeSet<String>>,
    /// Node name -> the dedicated pool it is in (absent: shared).
    reserved: HashMap<String, String>,
    /// (dedicated pool or shared, model) -> its counted cards.
    models: BTreeMap<(Option<String>, String), ModelFree>,
    /// Model -> ready cards of it (schedulable or not).
    reported: BTreeMap<String, u32>,
    /// Ready cards on schedulable nodes.
    counted: u64,
}

/// Per-cluster summaries, each valid at its cluster's fit-key generation.
#[derive(Debug, Default)]
pub struct FitIndex {
    clusters: Mutex<HashMap<String, Summary>>,
    /// Whole-cluster reads so far (the patch path reads only changed rows).
    builds: AtomicU64,
}

/// How many cards a fitting check names (the caller holds the slice on the first its own
/// transaction confirms).
const CANDIDATES: usize = 8;

fn schedulable(n: &NodeRecord) -> bool {
    n.ready && n.schedulable && !n.cordoned && !n.offline && !n.decommissioning
}

impl FitIndex {
    /// Whether `want` fits a card of `cluster_id` now, on any node (node pools ignored: use
    /// [`FitIndex::check_placed`] for a session's owner).
    pub fn check(
        &self,
        store: &Store,
        cluster_id: &str,
        want: &Want<'_>,
    ) -> Result<Result<Vec<String>, Unfit>, StoreError> {
        self.check_placed(store, cluster_id, want, &Placement::anywhere())
    }

    /// Whether `want` fits a card of `cluster_id` now on a node `placement` allows (what is booked
    /// or held on a card counts as used); when it does, the cards that can hold it, the tightest
    /// first (a few: the caller sets the slice aside on one, see `gpu_booking::hold`). Reads the
    /// committed state (never the caller's uncommitted rows: a batch that rolls back must leave
    /// no trace here), and only the rows changed since the summary's generation.
    pub fn check_placed(
        &self,
        store: &Store,
        cluster_id: &str,
        want: &Want<'_>,
        placement: &Placement,
    ) -> Result<Result<Vec<String>, Unfit>, StoreError> {
        let generation = store.table_generation(&[&key(cluster_id)]);
        let mut clusters = lock(&self.clusters);
        let stale = clusters.get(cluster_id).map(|s| s.generation).filter(|g| *g != generation);
        let fresh = clusters.get(cluster_id).is_some_and(|s| s.generation == generation);
        if !fresh {
            let patched = match stale {
                Some(since) => match store.logged_since(since, &log_prefix(cluster_id)) {
                    Some(names) if !names.iter().any(|n| n.ends_with("/*")) => {
                        let txn = store.read_now()?;
                        let s = clusters.entry(cluster_id.to_string()).or_default();
                        s.patch(&txn, cluster_id, &names)?;
                        s.generation = generation;
                        true
                    }
                    _ => false,
                },
                None => false,
            };
            if !patched {
                let txn = store.read_now()?;
                self.builds.fetch_add(1, Ordering::Relaxed);
                let s = build(&txn, cluster_id, generation)?;
                clusters.insert(cluster_id.to_string(), s);
            }
        }
        let s = clusters.entry(cluster_id.to_string()).or_default();
        Ok(s.fits(want, placement))
    }

    /// Forgets every summary (tests; a restore).
    pub fn clear(&self) {
        lock(&self.clusters).clear();
    }
}

fn build(txn: &ReadTransaction, cluster_id: &str, generation: u64) -> Result<Summary, StoreError> {
    let prefix = format!("{cluster_id}/");
    let mut s = Summary { generation, ..Summary::default() };
    for (_, n) in NODES.list_prefix(txn, &prefix)? {
        s.nodes.insert(n.name.clone(), schedulable(&n));
    }
    s.reserved = super::pools::reserved_nodes(txn, cluster_id)?;
    let held = held_on_cluster(txn, cluster_id)?;
    for (_, g) in GPUS.list_prefix(txn, &prefix)? {
        let card = s.card_of(&g, held.get(&g.uuid).copied().unwrap_or_default());
        s.put_card(g.uuid.clone(), Some(card));
    }
    Ok(s)
}

impl Summary {
    fn card_of(&self, g: &GpuRecord, held: Held) -> Card {
        Card::of(g, self.reserved.get(&g.node).cloned(), held)
    }

    fn counts(&self, c: &Card) -> bool {
        c.ready && self.nodes.get(&c.node).copied().unwrap_or(true)
    }

    /// Adds (`add`) or takes away what card `uuid` (`c`) contributes.
    fn account(&mut self, uuid: &str, c: &Card, add: bool) {
        if !c.ready {
            return;
        }
        bump(&mut self.reported, c.model.clone(), add);
        if !self.counts(c) {
            return;
        }
        if add {
            self.counted += 1;
        } else {
            self.counted = self.counted.saturating_sub(1);
        }
        let bucket = (c.pool.clone(), c.model.clone());
        let m = self.models.entry(bucket.clone()).or_default();
        bump_set(&mut m.points, c.free, uuid, add);
        if let Some(w) = c.whole {
            bump_set(&mut m.wholes, w, uuid, add);
        }
        bump(&mut m.sizes, c.size, add);
        m.frontier = None;
        if m.is_empty() {
            self.models.remove(&bucket);
        }
    }

    /// Replaces card `uuid` (`None`: it is gone).
    fn put_card(&mut self, uuid: String, card: Option<Card>) {
        if let Some(old) = self.cards.remove(&uuid) {
            self.account(&uuid, &old, false);
            if let Some(set) = self.node_cards.get_mut(&old.node) {
                set.remove(&uuid);
                if set.is_empty() {
                    self.node_cards.remove(&old.node);
                }
            }
        }
        if let Some(c) = card {
            self.account(&uuid, &c, true);
            self.node_cards.entry(c.node.clone()).or_default().insert(uuid.clone());
            self.cards.insert(uuid, c);
        }
    }

    /// Replaces node `name`'s schedulability (`None`: its row is gone) and the dedicated pool
    /// it is in, moving its cards.
    fn put_node(&mut self, name: &str, schedulable: Option<bool>, pool: Option<String>) {
        let uuids: Vec<String> = self.node_cards.get(name).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        for u in &uuids {
            if let Some(c) = self.cards.get(u).cloned() {
                self.account(u, &c, false);
            }
        }
        match schedulable {
            Some(ok) => self.nodes.insert(name.to_string(), ok),
            None => self.nodes.remove(name),
        };
        match &pool {
            Some(p) => self.reserved.insert(name.to_string(), p.clone()),
            None => self.reserved.remove(name),
        };
        for u in &uuids {
            if let Some(c) = self.cards.get_mut(u) {
                c.pool = pool.clone();
                let c = c.clone();
                self.account(u, &c, true);
            }
        }
    }

    /// Re-reads the logged rows (`g/<uuid>`, `n/<node>` after the cluster's log prefix).
    fn patch(&mut self, txn: &ReadTransaction, cluster_id: &str, names: &[String]) -> Result<(), StoreError> {
        let prefix = log_prefix(cluster_id);
        for name in names {
            let Some(rest) = name.strip_prefix(&prefix) else { continue };
            if let Some(uuid) = rest.strip_prefix("g/") {
                self.reread_card(txn, cluster_id, uuid)?;
            } else if let Some(node) = rest.strip_prefix("n/") {
                let row = NODES.get(txn, &format!("{cluster_id}/{node}"))?;
                let pool = POOL_MEMBERS
                    .get(txn, &format!("{cluster_id}/{node}"))?
                    .and_then(|m| m.dedicated.then_some(m.pool_id));
                self.put_node(node, row.as_ref().map(schedulable), pool);
                // Its cards as a whole (removed with the node, say).
                let uuids: Vec<String> =
                    self.node_cards.get(node).map(|s| s.iter().cloned().collect()).unwrap_or_default();
                for uuid in uuids {
                    self.reread_card(txn, cluster_id, &uuid)?;
                }
            }
        }
        Ok(())
    }

    fn reread_card(&mut self, txn: &ReadTransaction, cluster_id: &str, uuid: &str) -> Result<(), StoreError> {
        let card = match GPUS.get(txn, &format!("{cluster_id}/{uuid}"))? {
            Some(g) => Some(self.card_of(&g, held_on(txn, cluster_id, uuid)?)),
            None => None,
        };
        if self.cards.get(uuid) != card.as_ref() {
            self.put_card(uuid.to_string(), card);
        }
        Ok(())
    }

    fn fits(&mut self, want: &Want<'_>, placement: &Placement) -> Result<Vec<String>, Unfit> {
        let wanted = want.model.map(str::to_ascii_uppercase);
        let matches = |m: &str| wanted.as_deref().is_none_or(|w| m.to_ascii_uppercase().contains(w));
        let allowed = |(pool, _): &(Option<String>, String)| placement.allows(pool.as_deref());
        let any_match = self.models.keys().any(|k| allowed(k) && matches(&k.1));
        let mut cards: Vec<((u64, u64), String)> = Vec::new();
        for (_, free) in self.models.iter_mut().filter(|(k, _)| allowed(k) && matches(&k.1)) {
            let ok = if want.exclusive {
                free.whole().is_some_and(|(mem, _)| mem >= want.mem_mb)
            } else {
                free.frontier().iter().take_while(|(mem, _)| *mem >= want.mem_mb).any(|(_, cores)| *cores >= want.cores)
            };
            if ok {
                cards.extend(free.cards_for(want, CANDIDATES));
            }
        }
        if !cards.is_empty() {
            cards.sort();
            return Ok(cards.into_iter().take(CANDIDATES).map(|(_, uuid)| uuid).collect());
        }
        // The largest slice the placement allows among the asked model's cards (all its cards
        // when no model matches).
        let largest = self
            .models
            .iter_mut()
            .filter(|(k, _)| allowed(k) && (!any_match || matches(&k.1)))
            .filter_map(|((_, m), f)| {
                let best = if want.exclusive { f.whole() } else { f.frontier().first().copied() };
                best.map(|(mem, cores)| (mem, cores, m.clone()))
            })
            .max_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        // Whether an emptied card the placement allows would hold it (the queue waits for one).
        let could_fit = self.models.iter().filter(|(k, _)| allowed(k) && matches(&k.1)).any(|(_, f)| {
            f.sizes.keys().any(|&(mem, cores, whole)| {
                if want.exclusive { whole && mem >= want.mem_mb } else { mem >= want.mem_mb && cores >= want.cores }
            })
        });
        Err(Unfit {
            could_fit,
            largest_free: largest,
            reported_models: self.reported.keys().cloned().collect(),
            schedulable_cards: self.counted,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::store::WriteTxn;

    impl Summary {
        fn fits_any(&mut self, want: &Want<'_>) -> Result<Vec<String>, Unfit> {
            self.fits(want, &Placement::anywhere())
        }
    }

    fn summary(cards: &[(&str, u64, u64, bool)]) -> Summary {
        // (model, free mem, free cores, whole)
        let mut s = Summary::default();
        for (i, (m, mem, cores, whole)) in cards.iter().enumerate() {
            let card = Card {
                node: format!("n{i}"),
                pool: None,
                model: m.to_string(),
                ready: true,
                free: (*mem, *cores),
                whole: whole.then_some((*mem, *cores)),
                size: (*mem, *cores, true),
            };
            s.put_card(format!("u{i}"), Some(card));
        }
        s
    }

    #[test]
    fn a_slice_fits_only_where_one_card_has_both_memory_and_cores() {
        // Memory on one card, cores on another: neither holds 20 GiB with 50 % cores.
        let mut s =
            summary(&[("NVIDIA A100-SXM4-80GB", 40_000, 20, false), ("NVIDIA A100-SXM4-80GB", 10_000, 90, false)]);
        let want = |mem, cores| Want { model: Some("a100"), exclusive: false, mem_mb: mem, cores };
        assert!(s.fits_any(&want(20_000, 10)).is_ok());
        assert!(s.fits_any(&want(5_000, 80)).is_ok());
        let no = s.fits_any(&want(20_000, 50)).unwrap_err();
        assert_eq!(no.largest_free, Some((40_000, 20, "NVIDIA A100-SXM4-80GB".into())));
        assert_eq!(no.reported_models, ["NVIDIA A100-SXM4-80GB"]);
        // Another model: the largest slice of any model is named.
        let h = Want { model: Some("H100"), exclusive: false, mem_mb: 1, cores: 1 };
        assert!(s.fits_any(&h).is_err());
        // The whole card needs one with nothing booked.
        let whole = Want { model: None, exclusive: true, mem_mb: 0, cores: 0 };
        assert!(s.fits_any(&whole).is_err());
        let mut s = summary(&[("L4", 24_000, 100, true)]);
        assert!(s.fits_any(&whole).is_ok());
    }

    fn node(cluster: &str, name: &str) -> NodeRecord {
        NodeRecord {
            cluster_id: cluster.into(),
            name: name.into(),
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
            gpu_count: 2,
        }
    }

    fn gpu(cluster: &str, node: &str, uuid: &str, model: &str) -> GpuRecord {
        GpuRecord {
            cluster_id: cluster.into(),
            node: node.into(),
            uuid: uuid.into(),
            model: model.into(),
            mode: String::new(),
            total_mem_mb: 81_920,
            used_mem_mb: 0,
            total_cores: 100,
            used_cores: 0,
            status: GpuStatus::Ready,
        }
    }

    /// Everything a check can answer from: counted cards, per model its points and wholes, and
    /// the reported models.
    type Digest = (u64, Vec<(String, Vec<((u64, u64), u32)>, Vec<((u64, u64), u32)>)>, Vec<(String, u32)>);

    fn digest(s: &Summary) -> Digest {
        let models = s
            .models
            .iter()
            .map(|(m, f)| {
                (
                    format!("{:?}/{}", m.0, m.1),
                    f.points.iter().map(|(k, v)| (*k, v.len() as u32)).collect(),
                    f.wholes.iter().map(|(k, v)| (*k, v.len() as u32)).collect(),
                )
            })
            .collect();
        (s.counted, models, s.reported.iter().map(|(k, v)| (k.clone(), *v)).collect())
    }

    #[tokio::test]
    async fn a_summary_patched_from_logged_changes_equals_a_rebuild_and_reads_only_those_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("s.redb"), &[crate::store::FIRST_SCHEMA]).unwrap();
        let c = "c1";
        store
            .write(move |txn| {
                for n in 0..4 {
                    let name = format!("n{n}");
                    NODES.put(txn, &format!("{c}/{name}"), &node(c, &name))?;
                    for g in 0..2 {
                        let uuid = format!("GPU-{n}-{g}");
                        let model = if n == 3 { "NVIDIA L4" } else { "NVIDIA A100-SXM4-80GB" };
                        GPUS.put(txn, &format!("{c}/{uuid}"), &gpu(c, &name, &uuid, model))?;
                    }
                }
                changed(txn, c);
                Ok(())
            })
            .await
            .unwrap();
        let index = FitIndex::default();
        let any = Want { model: None, exclusive: false, mem_mb: 1, cores: 1 };
        assert!(index.check(&store, c, &any).unwrap().is_ok());
        assert_eq!(index.builds.load(std::sync::atomic::Ordering::Relaxed), 1);

        // Each step changes rows and logs what it touched, as inventory's writers do.
        type Step = Box<dyn Fn(&WriteTxn) -> Result<(), StoreError> + Send + Sync>;
        let card = |uuid: &'static str, f: fn(&mut GpuRecord)| -> Step {
            Box::new(move |txn| {
                let k = format!("{c}/{uuid}");
                let mut g = GPUS.get_in_write(txn, &k)?.unwrap();
                f(&mut g);
                GPUS.put(txn, &k, &g)?;
                changed_gpu(txn, c, uuid);
                Ok(())
            })
        };
        let nd = |name: &'static str, f: fn(&mut NodeRecord)| -> Step {
            Box::new(move |txn| {
                let k = format!("{c}/{name}");
                let mut n = NODES.get_in_write(txn, &k)?.unwrap();
                f(&mut n);
                NODES.put(txn, &k, &n)?;
                changed_node(txn, c, name);
                Ok(())
            })
        };
        let steps: Vec<(&str, Step)> = vec![
            ("a slice booked", card("GPU-0-0", |g| (g.used_mem_mb, g.used_cores) = (10_240, 10))),
            ("a second slice on the same card", card("GPU-0-0", |g| (g.used_mem_mb, g.used_cores) = (20_480, 30))),
            ("a card not ready", card("GPU-1-0", |g| g.status = GpuStatus::NotReady)),
            ("a node cordoned", nd("n2", |n| n.cordoned = true)),
            ("a card moved to the cordoned node", card("GPU-1-1", |g| g.node = "n2".into())),
            ("the node uncordoned", nd("n2", |n| n.cordoned = false)),
            ("a node offline", nd("n3", |n| n.offline = true)),
            ("a card given back", card("GPU-0-0", |g| (g.used_mem_mb, g.used_cores) = (0, 0))),
            (
                "a slice held for a session not yet bound",
                Box::new(move |txn| {
                    let share = crate::inventory::gpu_booking::Share::Slice { mem_mb: 20_480, cores: 25 };
                    assert!(crate::inventory::gpu_booking::hold(txn, "ses_h", c, "GPU-0-0", share, 0)?);
                    Ok(())
                }),
            ),
            (
                "a second hold on the same card",
                Box::new(move |txn| {
                    let share = crate::inventory::gpu_booking::Share::Slice { mem_mb: 10_240, cores: 5 };
                    assert!(crate::inventory::gpu_booking::hold(txn, "ses_i", c, "GPU-0-0", share, 0)?);
                    Ok(())
                }),
            ),
            ("a hold given back", Box::new(move |txn| crate::inventory::gpu_booking::drop_hold(txn, "ses_h"))),
            (
                "a node put in a dedicated pool",
                Box::new(move |txn| {
                    let m = crate::inventory::pools::PoolMember { pool_id: "npl_a".into(), dedicated: true };
                    POOL_MEMBERS.put(txn, &format!("{c}/n1"), &m)?;
                    changed_node(txn, c, "n1");
                    Ok(())
                }),
            ),
            ("a card on the pooled node ready again", card("GPU-1-0", |g| g.status = GpuStatus::Ready)),
            ("a shared card booked", card("GPU-0-0", |g| (g.used_mem_mb, g.used_cores) = (10_240, 10))),
            ("a MIG card", card("GPU-0-1", |g| g.mode = "mig".into())),
            (
                "a new card",
                Box::new(move |txn| {
                    GPUS.put(txn, &format!("{c}/GPU-new"), &gpu(c, "n0", "GPU-new", "NVIDIA H100"))?;
                    changed_gpu(txn, c, "GPU-new");
                    Ok(())
                }),
            ),
            (
                "a node removed with its cards",
                Box::new(move |txn| {
                    for uuid in ["GPU-2-0", "GPU-2-1", "GPU-1-1"] {
                        GPUS.delete(txn, &format!("{c}/{uuid}"))?;
                    }
                    NODES.delete(txn, &format!("{c}/n2"))?;
                    changed_node(txn, c, "n2");
                    Ok(())
                }),
            ),
        ];
        let steps: Vec<(&str, std::sync::Arc<Step>)> =
            steps.into_iter().map(|(what, f)| (what, std::sync::Arc::new(f))).collect();
        for (what, step) in steps {
            let step = step.clone();
            store.write(move |txn| step(txn)).await.unwrap();
            index.check(&store, c, &any).unwrap().ok();
            let patched = digest(lock(&index.clusters).get(c).unwrap());
            let rebuilt = {
                let txn = store.read_now().unwrap();
                digest(&build(&txn, c, 0).unwrap())
            };
            assert_eq!(patched, rebuilt, "after {what}");
        }
        assert_eq!(index.builds.load(std::sync::atomic::Ordering::Relaxed), 1, "patched, never rebuilt");
        // The pooled node's card is only for its pool: a whole A100 is free only there now.
        let whole_a100 = Want { model: Some("a100"), exclusive: true, mem_mb: 81_920, cores: 0 };
        let shared = Placement { pools: Default::default(), shared: true, anywhere: false };
        let pooled = Placement { pools: ["npl_a".to_string()].into(), shared: false, anywhere: false };
        assert!(index.check_placed(&store, c, &whole_a100, &pooled).unwrap().is_ok());
        let no = index.check_placed(&store, c, &whole_a100, &shared).unwrap().unwrap_err();
        assert_eq!(no.largest_free, None, "no whole A100 on a shared node");
        // The answers follow: the L4 node is offline, the H100 is whole.
        let l4 = Want { model: Some("L4"), exclusive: false, mem_mb: 1, cores: 1 };
        assert_eq!(index.check(&store, c, &l4).unwrap().unwrap_err().reported_models.len(), 3);
        let h100 = Want { model: Some("h100"), exclusive: true, mem_mb: 81_920, cores: 0 };
        assert!(index.check(&store, c, &h100).unwrap().is_ok());
        // A whole-cluster change reads the cluster again.
        store
            .write(move |txn| {
                changed(txn, c);
                Ok(())
            })
            .await
            .unwrap();
        assert!(index.check(&store, c, &any).unwrap().is_ok());
        assert_eq!(index.builds.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
