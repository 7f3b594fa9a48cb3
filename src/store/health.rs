//! The open database and whether it can write (a full disk, an I/O error).
//!
//! redb latches the first failed write of a file (`ENOSPC` in a commit, say): from then on every
//! read and write of that handle answers "Previous I/O error" until the database is closed and
//! opened again. So a failed write here (1) marks the store *not writable*, naming the cause and
//! the free space of the data directory, (2) reopens the file at once, which needs no new space,
//! so that reads go on answering, and (3) refuses every later write up front
//! ([`StoreError::NotWritable`], 507 `storage_full` at the edge) without touching the file, so
//! nothing is latched again. Each refused write, `/readyz` and `/metrics` look at the free space
//! (one `statvfs`); once it has grown since the failure (or a minute has passed), one probe write
//! is tried, and when it commits the store is writable again — in this process, no restart.
//!
//! Why in-process rather than exiting for systemd to restart: a restart on a still-full disk
//! would stop the reads and `/healthz` too, and start-up itself may need to write; staying up
//! keeps the console readable and the state explorable while the admin frees space.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, TableDefinition};

use super::StoreError;

/// Free space that must appear since the failure before a probe write is tried early.
const GROWN_ENOUGH: u64 = 64 * 1024;
/// A probe is tried at least this often while refusing (the space may come from a resize).
const PROBE_EVERY: Duration = Duration::from_secs(60);
/// How long a reopen waits for the calls still holding the old handle.
const REOPEN_WAIT: Duration = Duration::from_secs(10);
const PROBE: TableDefinition<&str, u64> = TableDefinition::new("meta");
const PROBE_KEY: &str = "write_probe";

/// Why writes are refused.
#[derive(Debug, Clone)]
struct Refusing {
    /// The filesystem is full (`ENOSPC`/`EDQUOT`), not some other I/O error.
    full: bool,
    cause: String,
    /// Free bytes when the failure (or the last failed probe) happened.
    avail_at: Option<u64>,
    last_probe: Instant,
}

/// Counters for `/metrics` and the state for `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct WriteHealth {
    pub writable: bool,
    pub full: bool,
    pub avail_bytes: Option<u64>,
    /// Writes refused up front since start.
    pub refused: u64,
    /// Writes that failed with an I/O error since start.
    pub failures: u64,
    /// Times the state file was reopened after one.
    pub reopens: u64,
}

/// The open file, reopened in place after an I/O failure.
pub(super) struct Core {
    slot: RwLock<Option<Arc<Database>>>,
    /// Bumped by every reopen: a failure seen on an older handle does not reopen again.
    epoch: AtomicU64,
    reopening: Mutex<()>,
    pub(super) path: PathBuf,
    cache_bytes: Option<usize>,
    writable: AtomicBool,
    refusing: Mutex<Option<Refusing>>,
    refused: AtomicU64,
    failures: AtomicU64,
    reopens: AtomicU64,
    /// Sends `true` each time writes become possible again (the audit writer waits on it).
    back: tokio::sync::watch::Sender<u64>,
}

pub(super) fn builder(cache_bytes: Option<usize>) -> redb::Builder {
    let mut b = redb::Builder::new();
    if let Some(bytes) = cache_bytes {
        b.set_cache_size(bytes);
    }
    b
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Is this I/O error a full filesystem?
fn is_full(e: &std::io::Error) -> bool {
    // ENOSPC 28, EDQUOT 122, EFBIG 27 (a file-size limit is a full disk for us too).
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(28 | 122 | 27))
}

/// A redb storage error as a `StoreError`: I/O failures keep their kind.
pub(super) fn from_storage(s: redb::StorageError) -> StoreError {
    match s {
        redb::StorageError::Io(e) => StoreError::Io { full: is_full(&e), message: e.to_string() },
        redb::StorageError::PreviousIo => StoreError::Io { full: false, message: "a previous write failed".into() },
        other => StoreError::Backend(other.to_string()),
    }
}

impl Core {
    pub(super) fn new(db: Database, path: &Path, cache_bytes: Option<usize>) -> Self {
        Self {
            slot: RwLock::new(Some(Arc::new(db))),
            epoch: AtomicU64::new(0),
            reopening: Mutex::new(()),
            path: path.to_path_buf(),
            cache_bytes,
            writable: AtomicBool::new(true),
            refusing: Mutex::new(None),
            refused: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            reopens: AtomicU64::new(0),
            back: tokio::sync::watch::channel(0).0,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
    }

    fn avail(&self) -> Option<u64> {
        fs4::statvfs(self.dir()).ok().map(|s| s.available_space())
    }

    /// The current handle and its epoch; reopens first when the last reopen failed.
    pub(super) fn current(&self) -> Result<(u64, Arc<Database>), StoreError> {
        loop {
            let epoch = self.epoch.load(Ordering::Acquire);
            if let Some(db) = self.slot.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
                return Ok((epoch, db.clone()));
            }
            self.reopen(epoch)?;
        }
    }

    /// Closes the handle of `epoch` and opens the file again (nothing when another call has
    /// already reopened it). Waits up to [`REOPEN_WAIT`] for the calls still using the old one.
    fn reopen(&self, epoch: u64) -> Result<(), StoreError> {
        let _one = lock(&self.reopening);
        if self.epoch.load(Ordering::Acquire) != epoch {
            return Ok(());
        }
        let old = self.slot.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut old) = old {
            let until = Instant::now() + REOPEN_WAIT;
            let db = loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => break db,
                    Err(still) if Instant::now() < until => {
                        old = still;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(still) => {
                        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = Some(still);
                        return Err(StoreError::Io {
                            full: false,
                            message: "cannot reopen the state file: a long call still holds it".into(),
                        });
                    }
                }
            };
            // A latched handle cannot write its clean-close mark; the next open repairs.
            let _ = db.close();
        }
        let db = builder(self.cache_bytes).open(&self.path).map_err(|e| {
            tracing::error!(error = %e, file = %self.path.display(), "cannot reopen the state file");
            StoreError::Io { full: false, message: format!("cannot reopen the state file: {e}") }
        })?;
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(db));
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.reopens.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(file = %self.path.display(), "state file reopened after a failed write");
        Ok(())
    }

    /// After a failed call on the handle of `epoch`: an I/O failure makes the store refuse writes
    /// and reopens the file (reads go on); the caller gets [`StoreError::NotWritable`]. Any other
    /// error is returned as it is.
    pub(super) fn failed(&self, epoch: u64, e: StoreError) -> StoreError {
        let StoreError::Io { full, message } = &e else { return e };
        self.failures.fetch_add(1, Ordering::Relaxed);
        {
            let mut r = lock(&self.refusing);
            let was = r.as_ref().map(|r| r.full).unwrap_or(false);
            *r = Some(Refusing {
                full: *full || was,
                cause: message.clone(),
                avail_at: None,
                last_probe: Instant::now(),
            });
            self.writable.store(false, Ordering::Release);
        }
        tracing::error!(error = %message, dir = %self.dir().display(), "a write to the state file failed; writes are refused until it can write again");
        if let Err(re) = self.reopen(epoch) {
            tracing::error!(error = %re, "the state file stays closed; reads fail until it reopens");
        }
        let avail = self.avail();
        if let Some(r) = lock(&self.refusing).as_mut() {
            r.avail_at = avail;
        }
        self.refusal(avail)
    }

    fn refusal(&self, avail: Option<u64>) -> StoreError {
        let r = lock(&self.refusing).clone();
        StoreError::NotWritable {
            dir: self.dir().to_path_buf(),
            avail_bytes: avail,
            full: r.as_ref().is_some_and(|r| r.full),
            cause: r.map(|r| r.cause).unwrap_or_default(),
        }
    }

    /// Before a write: `Ok` when the store writes (after a successful probe if it was refusing).
    /// Blocking (a probe commits).
    pub(super) fn admit_write(&self) -> Result<(), StoreError> {
        if self.writable.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.try_recover() {
            return Ok(());
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(self.refusal(self.avail()))
    }

    /// While refusing: tries one probe write when the free space grew since the failure (or
    /// [`PROBE_EVERY`] passed); true when the store writes again.
    pub(super) fn try_recover(&self) -> bool {
        if self.writable.load(Ordering::Acquire) {
            return true;
        }
        let avail = self.avail();
        {
            let mut r = lock(&self.refusing);
            let Some(ref mut st) = *r else { return true };
            let grown = match (avail, st.avail_at) {
                (Some(now), Some(then)) => now >= then.saturating_add(GROWN_ENOUGH),
                _ => false,
            };
            if !grown && st.last_probe.elapsed() < PROBE_EVERY {
                return false;
            }
            st.last_probe = Instant::now();
            // The next failure measures from here.
            st.avail_at = avail;
        }
        match self.probe() {
            Ok(()) => {
                let was = lock(&self.refusing).take();
                self.writable.store(true, Ordering::Release);
                self.back.send_modify(|n| *n += 1);
                tracing::info!(
                    dir = %self.dir().display(),
                    avail_bytes = avail.unwrap_or(0),
                    cause = %was.map(|r| r.cause).unwrap_or_default(),
                    "the state file writes again"
                );
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, avail_bytes = avail.unwrap_or(0), "the state file still cannot write");
                false
            }
        }
    }

    /// One small durable write (outside the commit counters: it changes no domain table).
    fn probe(&self) -> Result<(), StoreError> {
        let (epoch, db) = self.current()?;
        let result = (|| {
            let txn = db.begin_write().map_err(StoreError::from)?;
            {
                let mut t = txn.open_table(PROBE)?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                t.insert(PROBE_KEY, now)?;
            }
            txn.commit().map_err(StoreError::from)
        })();
        drop(db);
        if let Err(e) = result {
            if matches!(e, StoreError::Io { .. }) {
                if let Err(re) = self.reopen(epoch) {
                    tracing::error!(error = %re, "the state file stays closed");
                }
                let avail = self.avail();
                if let Some(r) = lock(&self.refusing).as_mut() {
                    r.avail_at = avail;
                }
            }
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn health(&self) -> WriteHealth {
        let r = lock(&self.refusing).clone();
        WriteHealth {
            writable: self.writable.load(Ordering::Acquire),
            full: r.as_ref().is_some_and(|r| r.full),
            avail_bytes: self.avail(),
            refused: self.refused.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            reopens: self.reopens.load(Ordering::Relaxed),
        }
    }

    pub(super) fn writable_again(&self) -> tokio::sync::watch::Receiver<u64> {
        self.back.subscribe()
    }
}
