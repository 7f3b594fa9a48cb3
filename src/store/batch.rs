//! Group commit. redb has none of its own: every `commit()` is one fsync, so one write per request
//! caps a server at the disk's fsync rate. Here one writer thread takes the queued writes (up to
//! [`MAX_BATCH`]), runs them all in one transaction and commits once, then answers each caller.
//! While it waits for the disk the next batch queues.
//!
//! Fairness: writes queue in lanes (the caller names one, e.g. the reporting cluster; unnamed
//! writes share the default lane) and a batch takes one write from each lane in turn, so a lane
//! that floods (a broken operator resending in a tight loop) cannot push another lane's write
//! further back than the next batch. Each lane holds at most [`LANE_QUEUE`] writes; beyond, its
//! callers wait for room (back-pressure, never dropping) while other lanes keep their room.
//!
//! Isolation: redb's ephemeral savepoints can only be taken on a clean transaction, so a failing
//! write cannot be rolled back alone. Instead the whole transaction is aborted and the batch runs
//! again without the writes that failed (each round drops at least one, so it ends); the closures
//! are `FnMut` and decide from what they read, so running one twice is harmless. A batch in which
//! every write reported [`Outcome::Unchanged`] is rolled back: nothing to make durable, no fsync.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

use super::WriteTxn;
use super::health::Core;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::{CommitStats, StoreError};

/// Writes committed together at most.
pub const MAX_BATCH: usize = 256;
/// Writes queued in one lane before its callers wait for room.
pub const LANE_QUEUE: usize = 1024;

/// What a batched write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Something was written: the batch must be committed.
    Wrote(T),
    /// Only read: if nothing else in the batch wrote either, it is rolled back.
    Unchanged(T),
}

impl<T> Outcome<T> {
    pub fn wrote(&self) -> bool {
        matches!(self, Self::Wrote(_))
    }

    pub fn into_inner(self) -> T {
        match self {
            Self::Wrote(v) | Self::Unchanged(v) => v,
        }
    }
}

/// One queued write, type-erased.
trait Op: Send {
    /// Runs the write; `Some(wrote)` when it succeeded.
    fn run(&mut self, txn: &WriteTxn) -> Option<bool>;
    /// Answers the caller once the batch's fate is known.
    fn finish(self: Box<Self>, committed: Result<(), StoreError>);
}

struct Pending<T, E, F> {
    f: F,
    result: Option<Result<T, E>>,
    reply: oneshot::Sender<Result<T, E>>,
}

impl<T, E, F> Op for Pending<T, E, F>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
    F: FnMut(&WriteTxn) -> Result<Outcome<T>, E> + Send + 'static,
{
    fn run(&mut self, txn: &WriteTxn) -> Option<bool> {
        match (self.f)(txn) {
            Ok(outcome) => {
                let wrote = outcome.wrote();
                self.result = Some(Ok(outcome.into_inner()));
                Some(wrote)
            }
            Err(e) => {
                self.result = Some(Err(e));
                None
            }
        }
    }

    fn finish(self: Box<Self>, committed: Result<(), StoreError>) {
        let answer = match (self.result, committed) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (Some(Ok(_)), Err(e)) | (None, Err(e)) => Err(E::from(e)),
            (None, Ok(())) => Err(E::from(StoreError::Backend("batched write was not run".into()))),
        };
        // The caller may have gone away (request cancelled); the write stands regardless.
        let _ = self.reply.send(answer);
    }
}

/// A queued write and its place in its lane (given back when the writer takes it).
struct Queued {
    op: Box<dyn Op>,
    _room: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Lanes {
    /// Lanes with queued writes, in serving order: a lane served goes to the back.
    ring: VecDeque<Arc<str>>,
    queued: HashMap<Arc<str>, VecDeque<Queued>>,
    /// Every `Store` is gone: the writer ends once the queue is empty.
    closed: bool,
}

impl Lanes {
    /// Up to `max` writes, one from each lane in turn.
    fn take_round_robin(&mut self, max: usize) -> Vec<Box<dyn Op>> {
        let mut ops = Vec::new();
        while ops.len() < max {
            let Some(lane) = self.ring.pop_front() else { break };
            let Some(q) = self.queued.get_mut(&lane) else { continue };
            if let Some(w) = q.pop_front() {
                ops.push(w.op);
            }
            if q.is_empty() {
                self.queued.remove(&lane);
            } else {
                self.ring.push_back(lane);
            }
        }
        ops
    }
}

/// What the callers and the writer thread share.
#[derive(Default)]
struct Queue {
    lanes: Mutex<Lanes>,
    ready: Condvar,
    depth: AtomicUsize,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending side of the writer thread.
pub(super) struct Batcher {
    queue: Arc<Queue>,
    /// Each lane's room (permits = free places).
    room: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.queue.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl Batcher {
    /// Starts the writer thread. It holds the database weakly and ends when every `Store` clone
    /// (and so this batcher) is gone, so dropping the store still closes the file promptly.
    pub(super) fn start(core: &Arc<Core>, stats: Arc<CommitStats>) -> Self {
        let queue = Arc::new(Queue::default());
        let weak = Arc::downgrade(core);
        let q = queue.clone();
        let spawned =
            std::thread::Builder::new().name("gshare-store-writer".into()).spawn(move || writer(weak, stats, q));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the state store writer thread");
            // Without the thread every batched write fails with a clear error (below).
            queue.lock().closed = true;
        }
        Self { queue, room: Mutex::new(HashMap::new()) }
    }

    /// Writes queued and not yet taken by the writer.
    pub(super) fn depth(&self) -> usize {
        self.queue.depth.load(Ordering::Relaxed)
    }

    pub(super) async fn submit<T, E, F>(&self, lane: &str, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&WriteTxn) -> Result<Outcome<T>, E> + Send + 'static,
    {
        let stopped = || E::from(StoreError::Join("the state store writer has stopped".into()));
        let (lane, room): (Arc<str>, Arc<Semaphore>) = {
            let mut rooms = self.room.lock().unwrap_or_else(|p| p.into_inner());
            match rooms.get_key_value(lane) {
                Some((k, r)) => (k.clone(), r.clone()),
                None => {
                    let (k, r): (Arc<str>, _) = (Arc::from(lane), Arc::new(Semaphore::new(LANE_QUEUE)));
                    rooms.insert(k.clone(), r.clone());
                    (k, r)
                }
            }
        };
        let permit = room.acquire_owned().await.map_err(|_| stopped())?;
        let (reply, answer) = oneshot::channel();
        let op: Box<dyn Op> = Box::new(Pending { f, result: None, reply });
        {
            let mut lanes = self.queue.lock();
            if lanes.closed {
                return Err(stopped());
            }
            let q = lanes.queued.entry(lane.clone()).or_default();
            let first = q.is_empty();
            q.push_back(Queued { op, _room: permit });
            if first {
                lanes.ring.push_back(lane);
            }
            self.queue.depth.fetch_add(1, Ordering::Relaxed);
        }
        self.queue.ready.notify_one();
        answer.await.map_err(|_| E::from(StoreError::Join("the state store writer dropped a write".into())))?
    }
}

fn writer(core: Weak<Core>, stats: Arc<CommitStats>, queue: Arc<Queue>) {
    loop {
        let ops = {
            let mut lanes = queue.lock();
            while lanes.ring.is_empty() {
                if lanes.closed {
                    return;
                }
                lanes = queue.ready.wait(lanes).unwrap_or_else(|p| p.into_inner());
            }
            let ops = lanes.take_round_robin(MAX_BATCH);
            queue.depth.fetch_sub(ops.len(), Ordering::Relaxed);
            ops
        };
        stats.batch_size(ops.len());
        match core.upgrade() {
            Some(core) => run_batch(core, &stats, ops),
            None => {
                for op in ops {
                    op.finish(Err(StoreError::Backend("the state store is closed".into())));
                }
            }
        }
    }
}

/// Runs and commits one batch, then answers its callers, after letting go of the database: a
/// caller that drops the last `Store` once answered must be able to open the file again at once.
/// A write refused up front or an I/O failure answers every write of the batch with it.
fn run_batch(core: Arc<Core>, stats: &CommitStats, ops: Vec<Box<dyn Op>>) {
    let answers = match core.admit_write().and_then(|()| core.current()) {
        Err(e) => ops.into_iter().map(|op| (op, Err(e.clone()))).collect(),
        Ok((epoch, db)) => {
            let mut answers = commit_batch(&db, stats, ops);
            drop(db);
            let failure =
                answers.iter().find_map(|(_, r)| r.as_ref().err().filter(|e| matches!(e, StoreError::Io { .. })));
            if let Some(e) = failure.cloned() {
                let refusal = core.failed(epoch, e);
                for (_, r) in answers.iter_mut().filter(|(_, r)| r.is_err()) {
                    *r = Err(refusal.clone());
                }
            }
            answers
        }
    };
    drop(core);
    for (op, committed) in answers {
        op.finish(committed);
    }
}

type Answers = Vec<(Box<dyn Op>, Result<(), StoreError>)>;

fn commit_batch(db: &redb::Database, stats: &CommitStats, mut ops: Vec<Box<dyn Op>>) -> Answers {
    let mut failed: Vec<Box<dyn Op>> = Vec::new();
    loop {
        let txn = match db.begin_write() {
            Ok(t) => WriteTxn::new(t),
            Err(e) => {
                let e = StoreError::from(e);
                return ops.into_iter().chain(failed).map(|op| (op, Err(e.clone()))).collect();
            }
        };
        let mut ok = Vec::with_capacity(ops.len());
        let mut any_wrote = false;
        let mut any_failed = false;
        for mut op in ops.drain(..) {
            match op.run(&txn) {
                Some(wrote) => {
                    any_wrote |= wrote;
                    ok.push(op);
                }
                None => {
                    any_failed = true;
                    failed.push(op);
                }
            }
        }
        if any_failed && !ok.is_empty() {
            // The failed writes may have left partial changes: start over without them.
            txn.abort();
            ops = ok;
            continue;
        }
        let committed = if any_wrote {
            let started = Instant::now();
            match txn.commit() {
                Ok(written) => {
                    stats.committed(started, written);
                    Ok(())
                }
                Err(e) => Err(StoreError::from(e)),
            }
        } else {
            txn.abort();
            stats.skipped_batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        };
        if any_wrote && committed.is_ok() {
            stats.batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            stats.batched_ops.fetch_add(ok.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        if let Err(e) = &committed {
            tracing::error!(error = %e, writes = ok.len(), "state store commit failed");
        }
        let mut answers: Answers = ok.into_iter().map(|op| (op, committed.clone())).collect();
        answers.extend(failed.into_iter().map(|op| (op, Ok(()))));
        return answers;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::store::{JsonTable, Store};

    const T: JsonTable<serde_json::Value> = JsonTable::new("batch_test");

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_writes_share_commits_and_a_failure_stays_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), &[crate::store::FIRST_SCHEMA]).unwrap();
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .write_batched(move |txn| {
                        T.put(txn, &format!("k/{i:03}"), &serde_json::json!({ "i": i }))?;
                        if i % 50 == 7 {
                            // Writes, then fails: its write must not survive.
                            return Err(StoreError::Backend(format!("op {i} refused")));
                        }
                        Ok(Outcome::Wrote(i))
                    })
                    .await
            }));
        }
        let mut ok = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v as usize, i);
                    ok += 1;
                }
                Err(e) => assert!(i % 50 == 7, "{i}: {e}"),
            }
        }
        assert_eq!(ok, 196);
        let rows = store.read(|txn| T.list(txn)).await.unwrap();
        assert_eq!(rows.len(), 196);
        assert!(rows.iter().all(|(k, _)| !k.ends_with("007") && !k.ends_with("057")));
        let s = store.commit_stats();
        assert_eq!(s.batched_ops, 196);
        assert!(s.batches <= 196);
        assert_eq!(store.generation(), s.count);
    }

    /// One lane floods (600 writes queued behind a write that holds the writer); a write queued
    /// after all of them in another lane runs in the very next batch, second after one of the
    /// flood's. With one FIFO queue it would run 601st, three batches later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooding_lane_does_not_starve_another() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), &[crate::store::FIRST_SCHEMA]).unwrap();
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let gate = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .write_batched_in("gate", move |txn| {
                        let _ = held.lock().unwrap().recv();
                        T.put(txn, "gate", &serde_json::json!(0)).map(Outcome::Wrote)
                    })
                    .await
            })
        };
        // The gate is taken by the writer before anything else queues.
        while store.commit_stats().batch_count == 0 && store.writer_queue_depth() == 0 {
            tokio::task::yield_now().await;
        }
        while store.writer_queue_depth() != 0 {
            tokio::task::yield_now().await;
        }
        let write = |lane: &'static str, i: u32| {
            let (store, order) = (store.clone(), order.clone());
            tokio::spawn(async move {
                store
                    .write_batched_in(lane, move |txn| {
                        order.lock().unwrap().push(format!("{lane}{i}"));
                        T.put(txn, &format!("{lane}/{i:04}"), &serde_json::json!(i)).map(Outcome::Wrote)
                    })
                    .await
            })
        };
        let mut tasks: Vec<_> = (0..600).map(|i| write("flood", i)).collect();
        while store.writer_queue_depth() < 600 {
            tokio::task::yield_now().await;
        }
        tasks.push(write("calm", 0));
        while store.writer_queue_depth() < 601 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        gate.await.unwrap().unwrap();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 601);
        let calm = order.iter().position(|o| o == "calm0").unwrap();
        assert_eq!(calm, 1, "{:?}", &order[..4]);
        assert!(order[0].starts_with("flood") && order[2].starts_with("flood"), "{:?}", &order[..4]);
        // Every write landed.
        assert_eq!(store.read(|txn| T.list(txn)).await.unwrap().len(), 602);
        // 1 (gate) + 601 writes in batches of at most MAX_BATCH.
        assert_eq!(store.commit_stats().batch_count, 1 + 601u64.div_ceil(MAX_BATCH as u64));
        assert_eq!(store.writer_queue_depth(), 0);
    }

    #[tokio::test]
    async fn unchanged_batches_are_not_committed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), &[crate::store::FIRST_SCHEMA]).unwrap();
        let g0 = store.generation();
        let v = store
            .write_batched(|txn| Ok::<_, StoreError>(Outcome::Unchanged(T.get_in_write(txn, "x")?.is_none())))
            .await
            .unwrap();
        assert!(v);
        assert_eq!(store.generation(), g0);
        assert_eq!(store.commit_stats().skipped_batches, 1);
        store.write_batched(|txn| T.put(txn, "x", &serde_json::json!(1)).map(Outcome::Wrote)).await.unwrap();
        assert_eq!(store.generation(), g0 + 1);
        // A plain write counts too.
        store.write(|txn| T.put(txn, "y", &serde_json::json!(2))).await.unwrap();
        assert_eq!(store.generation(), g0 + 2);
    }

    #[tokio::test]
    async fn dropping_the_store_closes_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        let store = Store::open(&path, &[crate::store::FIRST_SCHEMA]).unwrap();
        store.write_batched(|txn| T.put(txn, "x", &serde_json::json!(1)).map(Outcome::Wrote)).await.unwrap();
        drop(store);
        let again = Store::open(&path, &[crate::store::FIRST_SCHEMA]).unwrap();
        assert!(again.read(|txn| T.get(txn, "x")).await.unwrap().is_some());
    }
}
