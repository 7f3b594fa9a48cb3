//! Counters of every durable commit (for `/metrics`) and the commit generations readers compare
//! (the store's and each table's).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Upper bounds (seconds) of the commit-latency histogram buckets; the last bucket is +Inf.
pub const COMMIT_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
/// Upper bounds of the batch-size histogram buckets (writes per batch); the last is +Inf.
pub const BATCH_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Counters of every durable commit, whichever path made it (for `/metrics`), and the commit
/// generation that lets readers know nothing changed since they last looked.
#[derive(Debug, Default)]
pub struct CommitStats {
    pub(super) generation: AtomicU64,
    /// Table name -> the generation of the last commit that wrote it (the console's event topics).
    pub(super) tables: Mutex<HashMap<String, u64>>,
    /// The last [`LOG_CAPACITY`] logged keys with their commits' generations.
    pub(super) log: Mutex<KeyLog>,
    /// Woken after every commit (the console's live updates wait on it).
    pub(super) changed: tokio::sync::Notify,
    pub(super) buckets: [AtomicU64; COMMIT_BUCKETS.len()],
    pub(super) count: AtomicU64,
    pub(super) sum_us: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) batched_ops: AtomicU64,
    pub(super) skipped_batches: AtomicU64,
    /// Writes per batch the writer thread ran (committed or rolled back), by [`BATCH_BUCKETS`].
    pub(super) batch_buckets: [AtomicU64; BATCH_BUCKETS.len()],
    pub(super) batch_count: AtomicU64,
    pub(super) batch_sum: AtomicU64,
}

/// How many logged keys the change log keeps; a reader further behind reads everything again.
pub const LOG_CAPACITY: usize = 65_536;

/// The change log: keys logged by commits, oldest first.
#[derive(Debug, Default)]
pub struct KeyLog {
    entries: VecDeque<(u64, String)>,
    /// The newest generation whose entries were dropped (a reader at or before it has lost some).
    lost_through: u64,
}

impl KeyLog {
    fn push(&mut self, generation: u64, name: String) {
        if self.entries.len() == LOG_CAPACITY
            && let Some((g, _)) = self.entries.pop_front()
        {
            self.lost_through = self.lost_through.max(g);
        }
        self.entries.push_back((generation, name));
    }

    /// The keys starting with `prefix` logged by commits after generation `since`, or `None`
    /// when some of those commits' keys are no longer kept.
    pub(super) fn since(&self, since: u64, prefix: &str) -> Option<Vec<String>> {
        if since < self.lost_through {
            return None;
        }
        let mut out: Vec<String> = self
            .entries
            .iter()
            .rev()
            .take_while(|(g, _)| *g > since)
            .filter(|(_, n)| n.starts_with(prefix))
            .map(|(_, n)| n.clone())
            .collect();
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// A copy of [`CommitStats`] at one moment.
#[derive(Debug, Clone, Default)]
pub struct CommitSnapshot {
    /// Cumulative counts per bucket of [`COMMIT_BUCKETS`] (Prometheus `le` semantics).
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
    /// Group commits, and the writes they carried.
    pub batches: u64,
    pub batched_ops: u64,
    /// Batches in which no write changed anything: rolled back, no fsync.
    pub skipped_batches: u64,
    /// Cumulative counts per bucket of [`BATCH_BUCKETS`]: writes per batch run.
    pub batch_cumulative: Vec<u64>,
    pub batch_count: u64,
    pub batch_sum: u64,
}

impl CommitStats {
    pub(super) fn committed(&self, started: Instant, committed: super::txn::Committed) {
        let super::txn::Committed { written, logged } = committed;
        // Bump the generation first: a reader that sees the old value afterwards only loses
        // its shortcut, never gets a stale answer (see `Store::generation`).
        // Tables first, then the generation: a reader woken by the new generation finds them.
        {
            let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            let next = self.generation.load(Ordering::Acquire) + 1;
            for name in written {
                tables.insert(name, next);
            }
            if !logged.is_empty() {
                let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
                for name in logged {
                    log.push(next, name);
                }
            }
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.changed.notify_waiters();
        let secs = started.elapsed().as_secs_f64();
        if let Some(i) = COMMIT_BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    pub(super) fn batch_size(&self, n: usize) {
        if let Some(i) = BATCH_BUCKETS.iter().position(|b| n as u64 <= *b) {
            self.batch_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.batch_count.fetch_add(1, Ordering::Relaxed);
        self.batch_sum.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> CommitSnapshot {
        let mut acc = 0;
        let mut batch_acc = 0;
        let batch_cumulative = self
            .batch_buckets
            .iter()
            .map(|b| {
                batch_acc += b.load(Ordering::Relaxed);
                batch_acc
            })
            .collect();
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                acc += b.load(Ordering::Relaxed);
                acc
            })
            .collect();
        CommitSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            batches: self.batches.load(Ordering::Relaxed),
            batched_ops: self.batched_ops.load(Ordering::Relaxed),
            skipped_batches: self.skipped_batches.load(Ordering::Relaxed),
            batch_cumulative,
            batch_count: self.batch_count.load(Ordering::Relaxed),
            batch_sum: self.batch_sum.load(Ordering::Relaxed),
        }
    }
}
