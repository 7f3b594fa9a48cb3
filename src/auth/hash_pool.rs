//! Where argon2 runs: at most one hash per core at once, on the blocking pool, with a short queue
//! in front. Sign-ins beyond the queue are refused at once ([`Busy`]: 429 with `Retry-After`)
//! instead of waiting behind a class of 200 signing in at 9:00 — the hashing never takes every
//! thread from the operators' callbacks, and a refused student retries in a second. Admin work
//! that hashes (creating accounts, bulk imports) waits its turn instead ([`HashPool::run_queued`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

/// Requests that may wait for a hashing slot, per core.
pub const QUEUE_PER_CORE: usize = 8;
/// What `Retry-After` says to a refused sign-in, in seconds.
pub const RETRY_AFTER_S: u64 = 1;

/// The pool is full: running and queued slots are all taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// Bounded argon2 work.
#[derive(Debug)]
pub struct HashPool {
    running: Arc<Semaphore>,
    /// Requests holding or waiting for a slot (the ones [`HashPool::run`] admitted).
    admitted: AtomicUsize,
    slots: usize,
    limit: usize,
    /// Refused for a full queue since start (for `/metrics` and the bench).
    pub refused: AtomicUsize,
}

/// Releases an admitted place when the request is done (or dropped while waiting).
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HashPool {
    /// `slots` at once (the cores), `queue` more waiting.
    pub fn new(slots: usize, queue: usize) -> Self {
        let slots = slots.max(1);
        Self {
            running: Arc::new(Semaphore::new(slots)),
            admitted: AtomicUsize::new(0),
            slots,
            limit: slots + queue,
            refused: AtomicUsize::new(0),
        }
    }

    /// Sized to this machine: one slot per core, [`QUEUE_PER_CORE`] waiting per core.
    pub fn for_cores() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::new(cores, cores * QUEUE_PER_CORE)
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Runs `f` when a slot is free, or refuses at once when every slot and queue place is taken.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1))
            .map_err(|_| {
                self.refused.fetch_add(1, Ordering::Relaxed);
                PoolError::Busy(Busy)
            })?;
        let _place = Admitted(&self.admitted);
        self.on_slot(f).await
    }

    /// Runs `f` when a slot is free, however long the queue (admin work, few callers).
    pub async fn run_queued<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
        self.on_slot(f).await
    }

    async fn on_slot<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
        let permit = self.running.clone().acquire_owned().await.map_err(|e| PoolError::Failed(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let out = f();
            drop(permit);
            out
        })
        .await
        .map_err(|e| PoolError::Failed(e.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("too many sign-ins at once")]
    Busy(Busy),
    #[error("the hashing task failed: {0}")]
    Failed(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn beyond_the_slots_and_the_queue_a_request_is_refused_at_once_not_queued() {
        let pool = Arc::new(HashPool::new(2, 3));
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
        let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        // Five admitted: two run (blocked until released), three wait.
        let mut held = Vec::new();
        for _ in 0..5 {
            let (pool, rx, started) = (pool.clone(), release_rx.clone(), started_tx.clone());
            held.push(tokio::spawn(async move {
                pool.run(move || {
                    let _ = started.send(());
                    let _ = rx.lock().unwrap().recv();
                })
                .await
            }));
        }
        // Both slots busy; the other three are admitted and waiting.
        started_rx.recv().await.unwrap();
        started_rx.recv().await.unwrap();
        while pool.admitted.load(Ordering::Acquire) < 5 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(pool.run(|| ()).await, Err(PoolError::Busy(_))), "the sixth is refused");
        assert_eq!(pool.refused.load(Ordering::Relaxed), 1);
        // Admin work is not refused: it waits (checked after the release below).
        let queued = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run_queued(|| 7).await })
        };
        for _ in 0..5 {
            release_tx.send(()).unwrap();
        }
        for h in held {
            h.await.unwrap().unwrap();
        }
        assert_eq!(queued.await.unwrap().unwrap(), 7);
        assert_eq!(pool.admitted.load(Ordering::Acquire), 0, "every place given back");
        assert!(pool.run(|| 1).await.is_ok(), "free again");
    }
}
