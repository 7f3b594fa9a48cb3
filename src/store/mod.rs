//! The state file: one redb database at `<data_dir>/gshare.redb`, with a schema-version record,
//! ordered migrations, and typed JSON tables. redb's API is synchronous; async callers go through
//! [`Store::read`] and [`Store::write`], which run on the blocking pool, never on the executor.
//! Hot write paths use [`Store::write_batched`] instead: one writer thread gathers concurrent
//! writes into shared transactions, so one fsync serves many requests (see `batch`).

mod batch;
mod rows;
mod txn;

pub use batch::{LANE_QUEUE, MAX_BATCH, Outcome};
pub use rows::{DryRun, Rows};
pub use txn::WriteTxn;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SCHEMA_KEY: &str = "schema_version";

/// One step of a domain's schema. The store knows no domain: each domain declares its tables and
/// the steps that convert them, and the composition root (`lib.rs`) hands [`Store::open`] the
/// whole list, ordered by `to`. A file at schema `n` runs every step with `to > n`, all in one
/// transaction; the schema a build writes is the largest `to`.
#[derive(Clone, Copy)]
pub struct Migration {
    /// The schema version this step brings the file to.
    pub to: u64,
    /// What it does, for the log.
    pub what: &'static str,
    pub run: fn(&WriteTxn) -> Result<(), StoreError>,
}

impl std::fmt::Debug for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migration").field("to", &self.to).field("what", &self.what).finish()
    }
}

/// Schema 1 is the first: tables are created on first use, nothing to convert.
pub const FIRST_SCHEMA: Migration = Migration { to: 1, what: "the first schema", run: |_| Ok(()) };

/// The schema the `migrations` given to [`Store::open`] write.
pub fn schema_of(migrations: &[Migration]) -> u64 {
    migrations.iter().map(|m| m.to).max().unwrap_or(0)
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path} is in use by another gshare process (only one server may use a data directory)")]
    AlreadyOpen { path: PathBuf },
    #[error(
        "{path} is damaged or not a gshare state file ({message}); restore it from a backup or move it away to start empty"
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("{path} was written by a newer gshare (schema {found}, this build knows {known}); upgrade gshare")]
    TooNew { path: PathBuf, found: u64, known: u64 },
    #[error("cannot open the state file {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("state store: {0}")]
    Backend(String),
    #[error("stored record {table}/{key} is unreadable: {message}")]
    Decode { table: &'static str, key: String, message: String },
    #[error("state store task failed: {0}")]
    Join(String),
}

macro_rules! backend_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Backend(e.to_string()) }
        }
    )*};
}
backend_from!(redb::TransactionError, redb::TableError, redb::StorageError, redb::CommitError);

/// A shared handle to the open state file.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    path: Arc<PathBuf>,
    stats: Arc<CommitStats>,
    /// The group-commit writer, started by the first [`Store::write_batched`].
    batcher: Arc<OnceLock<batch::Batcher>>,
}

/// Upper bounds (seconds) of the commit-latency histogram buckets; the last bucket is +Inf.
pub const COMMIT_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
/// Upper bounds of the batch-size histogram buckets (writes per batch); the last is +Inf.
pub const BATCH_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Counters of every durable commit, whichever path made it (for `/metrics`), and the commit
/// generation that lets readers know nothing changed since they last looked.
#[derive(Debug, Default)]
pub struct CommitStats {
    generation: AtomicU64,
    /// Table name -> the generation of the last commit that wrote it (the console's event topics).
    tables: Mutex<HashMap<String, u64>>,
    /// Woken after every commit (the console's live updates wait on it).
    changed: tokio::sync::Notify,
    buckets: [AtomicU64; COMMIT_BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
    batches: AtomicU64,
    batched_ops: AtomicU64,
    skipped_batches: AtomicU64,
    /// Writes per batch the writer thread ran (committed or rolled back), by [`BATCH_BUCKETS`].
    batch_buckets: [AtomicU64; BATCH_BUCKETS.len()],
    batch_count: AtomicU64,
    batch_sum: AtomicU64,
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
    fn committed(&self, started: Instant, written: Vec<String>) {
        // Bump the generation first: a reader that sees the old value afterwards only loses
        // its shortcut, never gets a stale answer (see `Store::generation`).
        // Tables first, then the generation: a reader woken by the new generation finds them.
        {
            let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            let next = self.generation.load(Ordering::Acquire) + 1;
            for name in written {
                tables.insert(name, next);
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

    fn batch_size(&self, n: usize) {
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

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if absent) the state file and brings its schema up to date with
    /// `migrations` (ordered by `to`; see [`Migration`]). Blocking.
    pub fn open(path: &Path, migrations: &[Migration]) -> Result<Self, StoreError> {
        Self::open_with_cache(path, migrations, None)
    }

    /// [`Store::open`] with redb's page cache capped at `cache_bytes` (`None`: redb's default,
    /// 1 GiB). Reads past the cache go to the file (the OS page cache).
    pub fn open_with_cache(
        path: &Path,
        migrations: &[Migration],
        cache_bytes: Option<usize>,
    ) -> Result<Self, StoreError> {
        let err_open = |message: String| StoreError::Open { path: path.to_path_buf(), message };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::config::secret::create_private_dir(dir).map_err(|e| err_open(format!("{}: {e}", dir.display())))?;
        }
        let mut builder = redb::Builder::new();
        if let Some(bytes) = cache_bytes {
            builder.set_cache_size(bytes);
        }
        let db = builder.create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen { path: path.to_path_buf() },
            redb::DatabaseError::Storage(redb::StorageError::Io(io)) => err_open(io.to_string()),
            redb::DatabaseError::Storage(s) => StoreError::Corrupt { path: path.to_path_buf(), message: s.to_string() },
            other => err_open(other.to_string()),
        })?;
        // Password hashes and session state live here: owner-only, whatever the umask was.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| err_open(format!("cannot make it owner-only (0600): {e}")))?;
        }
        let store = Self {
            db: Arc::new(db),
            path: Arc::new(path.to_path_buf()),
            stats: Arc::default(),
            batcher: Arc::default(),
        };
        store.migrate(migrations)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate(&self, migrations: &[Migration]) -> Result<(), StoreError> {
        debug_assert!(migrations.windows(2).all(|w| w[0].to <= w[1].to), "migrations out of order");
        let schema = schema_of(migrations);
        let corrupt =
            |e: &dyn std::fmt::Display| StoreError::Corrupt { path: self.path.to_path_buf(), message: e.to_string() };
        let txn = WriteTxn::new(self.db.begin_write().map_err(|e| corrupt(&e))?);
        let found = {
            let meta = txn.open_table(META).map_err(|e| corrupt(&e))?;
            let v = meta.get(SCHEMA_KEY).map_err(|e| corrupt(&e))?.map(|g| g.value());
            v.unwrap_or(0)
        };
        if found > schema {
            return Err(StoreError::TooNew { path: self.path.to_path_buf(), found, known: schema });
        }
        for step in migrations.iter().filter(|m| m.to > found) {
            (step.run)(&txn)?;
            tracing::info!(from = step.to - 1, to = step.to, what = step.what, "state schema migrated");
        }
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(SCHEMA_KEY, schema)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// The schema version recorded in the file.
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(SCHEMA_KEY)?.map(|g| g.value()).unwrap_or(0))
    }

    /// Runs a read-only closure on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read()?;
            f(&txn)
        })
        .await
        .map_err(|e| StoreError::Join(e.to_string()))?
    }

    /// Runs a closure in one write transaction on the blocking pool; commits (durably, one fsync)
    /// when it returns `Ok`, rolls back otherwise. A returned `Ok` means the data is on disk.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTxn) -> Result<T, StoreError> + Send + 'static,
    {
        let (db, stats) = (self.db.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            let txn = WriteTxn::new(db.begin_write()?);
            match f(&txn) {
                Ok(v) => {
                    let started = Instant::now();
                    let written = txn.commit()?;
                    stats.committed(started, written);
                    Ok(v)
                }
                Err(e) => {
                    txn.abort();
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| StoreError::Join(e.to_string()))?
    }

    /// Like [`Store::write`], for closures with their own error type (a domain error that wraps
    /// `StoreError`): commits on `Ok`, rolls back on `Err`.
    pub async fn write_with<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&WriteTxn) -> Result<T, E> + Send + 'static,
    {
        let (db, stats) = (self.db.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            let txn = WriteTxn::new(db.begin_write().map_err(StoreError::from)?);
            match f(&txn) {
                Ok(v) => {
                    let started = Instant::now();
                    let written = txn.commit().map_err(StoreError::from)?;
                    stats.committed(started, written);
                    Ok(v)
                }
                Err(e) => {
                    txn.abort();
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| E::from(StoreError::Join(e.to_string())))?
    }

    /// Runs a write in a transaction shared with other concurrent `write_batched` calls (group
    /// commit: one fsync for the lot). The closure returns [`Outcome::Wrote`] when it changed
    /// something and [`Outcome::Unchanged`] when it only looked; a batch in which nothing wrote
    /// is rolled back instead of committed. An `Err` from the closure undoes its own writes only:
    /// the batch is run again without it (so closures must be repeatable: `FnMut`, deciding
    /// from what they read). A returned `Ok` means the batch is on disk.
    pub async fn write_batched<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&WriteTxn) -> Result<Outcome<T>, E> + Send + 'static,
    {
        self.write_batched_in("", f).await
    }

    /// [`Store::write_batched`] in a named lane: the writer serves lanes in turn, one write each
    /// per turn, so one lane's flood cannot starve another's writes (callers use the reporting
    /// cluster's id). Unnamed writes share the default lane `""`.
    pub async fn write_batched_in<T, E, F>(&self, lane: &str, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnMut(&WriteTxn) -> Result<Outcome<T>, E> + Send + 'static,
    {
        let batcher = self.batcher.get_or_init(|| batch::Batcher::start(&self.db, self.stats.clone()));
        batcher.submit(lane, f).await
    }

    /// Batched writes queued and not yet taken by the writer thread.
    pub fn writer_queue_depth(&self) -> usize {
        self.batcher.get().map_or(0, batch::Batcher::depth)
    }

    /// Changes with every durable commit. Equal values before and after a read mean no commit
    /// landed in between, so a cached comparison with stored data still holds.
    /// Returns once the store's generation differs from `seen` (at once if it already does).
    pub async fn changed_since(&self, seen: u64) -> u64 {
        loop {
            let notified = self.stats.changed.notified();
            tokio::pin!(notified);
            // Registered before the check: a commit between the check and the wait still wakes us.
            notified.as_mut().enable();
            let now = self.generation();
            if now != seen {
                return now;
            }
            notified.await;
        }
    }

    pub fn generation(&self) -> u64 {
        self.stats.generation.load(Ordering::Acquire)
    }

    /// The generation of the last commit that wrote any of `tables` (0: none since start).
    pub fn table_generation(&self, tables: &[&str]) -> u64 {
        let t = self.stats.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.iter().filter_map(|name| t.get(*name).copied()).max().unwrap_or(0)
    }

    /// Commit latency and batching counters since start.
    pub fn commit_stats(&self) -> CommitSnapshot {
        self.stats.snapshot()
    }

    /// Is the store usable right now? (readiness probe)
    pub fn is_healthy(&self) -> bool {
        self.db.begin_read().is_ok()
    }
}

/// The smallest string above every string that starts with `prefix` (`None`: no bound, `prefix` is
/// empty or all `char::MAX`). UTF-8 sorts bytewise as code points do, so this bounds a key range.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value (surrogates are not chars).
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Which end a key walk starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// Highest key first (ids are ULIDs: newest first).
    Descending,
    /// Lowest key first.
    Ascending,
}

/// Walks the keys that start with `prefix` in `order`, handing `f` what follows the prefix,
/// until `f` says stop. With `below`, only keys under `prefix + below` (a descending walk resumes
/// after it). Keys only: nothing is decoded.
fn walk_keys<V: redb::Value + 'static>(
    table: &impl ReadableTable<&'static str, V>,
    prefix: &str,
    below: Option<&str>,
    order: KeyOrder,
    mut f: impl FnMut(&str) -> bool,
) -> Result<(), StoreError> {
    use std::ops::Bound;
    let end = match below {
        Some(b) => Some(format!("{prefix}{b}")),
        None => prefix_end(prefix),
    };
    let upper = match &end {
        Some(e) => Bound::Excluded(e.as_str()),
        None => Bound::Unbounded,
    };
    let range = table.range::<&str>((Bound::Included(prefix), upper))?;
    let mut go_on = |key: &str| match key.strip_prefix(prefix) {
        Some(rest) => f(rest),
        None => false,
    };
    match order {
        KeyOrder::Descending => {
            for item in range.rev() {
                if !go_on(item?.0.value()) {
                    break;
                }
            }
        }
        KeyOrder::Ascending => {
            for item in range {
                if !go_on(item?.0.value()) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// A table of keys without values: an index (`<value>\0<id>`) walked in key order or asked about
/// one key, nothing decoded. Like [`JsonTable`], it is only a name to the store.
#[derive(Clone, Copy)]
pub struct KeySet {
    name: &'static str,
}

impl KeySet {
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Values are empty byte strings, not `()`: a table of the bytes kind, which snapshots carry.
    fn def(&self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name)
    }

    /// Adds a key; returns whether it is new.
    pub fn insert(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        let empty: &[u8] = &[];
        Ok(txn.open_table(self.def())?.insert(key, empty)?.is_none())
    }

    /// Removes a key; returns whether it was there.
    pub fn remove(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        Ok(txn.open_table(self.def())?.remove(key)?.is_some())
    }

    /// Removes every key (to rebuild the index).
    pub fn clear(&self, txn: &WriteTxn) -> Result<(), StoreError> {
        txn.open_table(self.def())?.retain(|_, _| false)?;
        Ok(())
    }

    pub fn contains(&self, txn: &ReadTransaction, key: &str) -> Result<bool, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.get(key)?.is_some()),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Every key, in key order (tests and repairs compare an index with its source).
    pub fn keys(&self, txn: &ReadTransaction) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        self.walk(txn, "", None, KeyOrder::Ascending, |k| {
            out.push(k.to_string());
            true
        })?;
        Ok(out)
    }

    /// Walks the keys under `prefix` in `order`, below `below` when given (see `walk_keys`).
    pub fn walk(
        &self,
        txn: &ReadTransaction,
        prefix: &str,
        below: Option<&str>,
        order: KeyOrder,
        f: impl FnMut(&str) -> bool,
    ) -> Result<(), StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => walk_keys(&t, prefix, below, order, f),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A table of JSON-encoded records under string keys, typed by `T`.
pub struct JsonTable<T> {
    name: &'static str,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for JsonTable<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for JsonTable<T> {}

impl<T: Serialize + DeserializeOwned> JsonTable<T> {
    pub const fn new(name: &'static str) -> Self {
        Self { name, _t: PhantomData }
    }

    /// The table's name (what [`Store::table_generation`] is asked about).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    fn def(&self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name)
    }

    fn decode(&self, key: &str, bytes: &[u8]) -> Result<T, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
            table: self.name,
            key: key.to_string(),
            message: e.to_string(),
        })
    }

    pub fn get(&self, txn: &ReadTransaction, key: &str) -> Result<Option<T>, StoreError> {
        let table = match txn.open_table(self.def()) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let value = table.get(key)?;
        value.map(|v| self.decode(key, v.value())).transpose()
    }

    /// Records whose key starts with `prefix` (`""`: all), in key order, from either kind of table.
    fn collect(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        prefix: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut out = Vec::new();
        for item in table.range(prefix..)? {
            let (k, v) = item?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            let value = self.decode(key, v.value())?;
            out.push((key.to_string(), value));
        }
        Ok(out)
    }

    fn read_table(&self, txn: &ReadTransaction, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => self.collect(&t, prefix),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// How many records (nothing is decoded).
    pub fn len(&self, txn: &ReadTransaction) -> Result<u64, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.len()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Is there a record under `key`? (Nothing decoded.)
    pub fn contains(&self, txn: &ReadTransaction, key: &str) -> Result<bool, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.get(key)?.is_some()),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Walks the keys in `order`, below `below` when given, until `f` says stop; nothing is
    /// decoded.
    pub fn walk_keys(
        &self,
        txn: &ReadTransaction,
        below: Option<&str>,
        order: KeyOrder,
        f: impl FnMut(&str) -> bool,
    ) -> Result<(), StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => walk_keys(&t, "", below, order, f),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// All records in key order.
    pub fn list(&self, txn: &ReadTransaction) -> Result<Vec<(String, T)>, StoreError> {
        self.read_table(txn, "")
    }

    /// Records whose key starts with `prefix`, in key order.
    pub fn list_prefix(&self, txn: &ReadTransaction, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        self.read_table(txn, prefix)
    }

    /// All records, inside a write transaction (to decide under the writer lock).
    pub fn list_in_write(&self, txn: &WriteTxn) -> Result<Vec<(String, T)>, StoreError> {
        self.collect(&txn.raw().open_table(self.def())?, "")
    }

    /// Records whose key starts with `prefix`, in key order, inside a write transaction.
    pub fn list_prefix_in_write(&self, txn: &WriteTxn, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        self.collect(&txn.raw().open_table(self.def())?, prefix)
    }

    pub fn get_in_write(&self, txn: &WriteTxn, key: &str) -> Result<Option<T>, StoreError> {
        let table = txn.raw().open_table(self.def())?;
        let value = table.get(key)?;
        value.map(|v| self.decode(key, v.value())).transpose()
    }

    pub fn put(&self, txn: &WriteTxn, key: &str, value: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut table = txn.open_table(self.def())?;
        table.insert(key, bytes.as_slice())?;
        Ok(())
    }

    /// Removes a record; returns whether it existed.
    pub fn delete(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        let mut table = txn.open_table(self.def())?;
        let existed = table.remove(key)?.is_some();
        Ok(existed)
    }

    /// Removes every record whose key starts with `prefix`; returns how many.
    pub fn delete_prefix(&self, txn: &WriteTxn, prefix: &str) -> Result<usize, StoreError> {
        let mut table = txn.open_table(self.def())?;
        let keys: Vec<String> = {
            let mut keys = Vec::new();
            for item in table.range(prefix..)? {
                let (k, _) = item?;
                if !k.value().starts_with(prefix) {
                    break;
                }
                keys.push(k.value().to_string());
            }
            keys
        };
        for k in &keys {
            table.remove(k.as_str())?;
        }
        Ok(keys.len())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const THINGS: JsonTable<serde_json::Value> = JsonTable::new("things");
    /// The store's own tests run with its first schema only (domains test their steps).
    const MIGRATIONS: &[Migration] = &[FIRST_SCHEMA];
    const SCHEMA_VERSION: u64 = 1;

    #[tokio::test]
    async fn typed_round_trip_and_prefix_ops() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), MIGRATIONS).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store
            .write(|txn| {
                THINGS.put(txn, "a/1", &serde_json::json!({"n":1}))?;
                THINGS.put(txn, "a/2", &serde_json::json!({"n":2}))?;
                THINGS.put(txn, "b/1", &serde_json::json!({"n":3}))
            })
            .await
            .unwrap();
        let got = store.read(|txn| THINGS.list_prefix(txn, "a/")).await.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(store.read(|txn| THINGS.get(txn, "b/1")).await.unwrap().unwrap()["n"], 3);
        // A failing closure writes nothing.
        let err = store
            .write(|txn| {
                THINGS.put(txn, "c/1", &serde_json::json!({}))?;
                Err::<(), _>(StoreError::Backend("boom".into()))
            })
            .await;
        assert!(err.is_err());
        assert!(store.read(|txn| THINGS.get(txn, "c/1")).await.unwrap().is_none());
        assert_eq!(store.write(|txn| THINGS.delete_prefix(txn, "a/")).await.unwrap(), 2);
        assert_eq!(store.read(|txn| THINGS.list(txn)).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn commits_record_which_tables_they_wrote() {
        const OTHER: JsonTable<serde_json::Value> = JsonTable::new("other");
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), MIGRATIONS).unwrap();
        assert_eq!(store.table_generation(&["things", "other"]), 0);
        store.write(|txn| THINGS.put(txn, "a", &serde_json::json!(1))).await.unwrap();
        let g = store.generation();
        assert_eq!(store.table_generation(&["things"]), g);
        assert_eq!(store.table_generation(&["other"]), 0);
        // A rolled-back write names nothing, and does not leak into the next commit.
        let _ = store
            .write(|txn| {
                OTHER.put(txn, "x", &serde_json::json!(1))?;
                Err::<(), _>(StoreError::Backend("boom".into()))
            })
            .await;
        store.write(|txn| THINGS.delete(txn, "a").map(drop)).await.unwrap();
        assert_eq!(store.table_generation(&["other"]), 0);
        assert_eq!(store.table_generation(&["things"]), store.generation());
        // Group commits too.
        store
            .write_batched(|txn| OTHER.put(txn, "y", &serde_json::json!(2)).map(|()| Outcome::Wrote(())))
            .await
            .unwrap();
        assert_eq!(store.table_generation(&["other"]), store.generation());
        assert_eq!(store.table_generation(&["things", "other"]), store.generation());
        assert!(store.table_generation(&["things"]) < store.generation());
    }

    #[test]
    fn second_open_is_refused_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        let _first = Store::open(&path, MIGRATIONS).unwrap();
        let e = Store::open(&path, MIGRATIONS).unwrap_err();
        assert!(matches!(e, StoreError::AlreadyOpen { .. }), "{e}");
        assert!(e.to_string().contains("gshare.redb"));
    }

    #[tokio::test]
    async fn len_counts_the_records() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), MIGRATIONS).unwrap();
        assert_eq!(store.read(|txn| THINGS.len(txn)).await.unwrap(), 0);
        store
            .write(|txn| {
                for i in 0..7 {
                    THINGS.put(txn, &format!("k{i}"), &serde_json::json!(i))?;
                }
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(store.read(|txn| THINGS.len(txn)).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn key_sets_walk_a_prefix_newest_first_and_resume_below_a_key() {
        const IDX: KeySet = KeySet::new("idx");
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("gshare.redb"), MIGRATIONS).unwrap();
        let walk = |prefix: &'static str, below: Option<&'static str>, take: usize| {
            let store = store.clone();
            async move {
                store
                    .read(move |txn| {
                        let mut out = Vec::new();
                        IDX.walk(txn, prefix, below, KeyOrder::Descending, |k| {
                            out.push(k.to_string());
                            out.len() < take
                        })?;
                        Ok(out)
                    })
                    .await
                    .unwrap()
            }
        };
        assert!(walk("a\0", None, 9).await.is_empty(), "no table yet");
        store
            .write(|txn| {
                for k in ["a\0k1", "a\0k2", "a\0k3", "ab\0k9", "a\u{1}x", "b\0k5", "\u{10FFFF}\0z"] {
                    assert!(IDX.insert(txn, k)?);
                }
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(walk("a\0", None, 9).await, ["k3", "k2", "k1"], "only the prefix, highest first");
        assert_eq!(walk("a\0", Some("k3"), 9).await, ["k2", "k1"], "strictly below");
        assert_eq!(walk("a\0", Some("k25"), 1).await, ["k2"], "an absent key resumes at its place");
        assert_eq!(walk("a\0", Some("k0"), 9).await, Vec::<String>::new());
        assert_eq!(walk("\u{10FFFF}\0", None, 9).await, ["z"]);
        assert_eq!(walk("", None, 2).await.len(), 2);
        assert!(store.read(|txn| IDX.contains(txn, "b\0k5")).await.unwrap());
        assert!(!store.write(|txn| IDX.insert(txn, "b\0k5")).await.unwrap(), "already there");
        assert!(store.write(|txn| IDX.remove(txn, "b\0k5")).await.unwrap());
        assert!(!store.read(|txn| IDX.contains(txn, "b\0k5")).await.unwrap());
        assert_eq!(store.read(|txn| IDX.keys(txn)).await.unwrap().len(), 6);
        store.write(|txn| IDX.clear(txn)).await.unwrap();
        assert!(store.read(|txn| IDX.keys(txn)).await.unwrap().is_empty());
        assert_eq!(prefix_end("a\0").as_deref(), Some("a\u{1}"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_end(""), None);
    }

    #[test]
    fn the_state_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gshare.redb");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        drop(Store::open(&path, MIGRATIONS).unwrap());
        assert_eq!(mode(&path), 0o600);
        // A file left world-readable (an old copy, a restore by hand) is tightened on open.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Store::open(&path, MIGRATIONS).unwrap());
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn truncated_file_is_named_not_panicked() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        drop(Store::open(&path, MIGRATIONS).unwrap());
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len / 3).unwrap();
        drop(f);
        let e = Store::open(&path, MIGRATIONS).unwrap_err().to_string();
        assert!(e.contains("gshare.redb"), "{e}");
        // Garbage instead of a database.
        std::fs::write(&path, b"this is not a database at all, just some text that is long enough").unwrap();
        let e = Store::open(&path, MIGRATIONS).unwrap_err().to_string();
        assert!(e.contains("gshare.redb"), "{e}");
    }

    #[test]
    fn newer_schema_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        {
            let s = Store::open(&path, MIGRATIONS).unwrap();
            let txn = s.db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert(SCHEMA_KEY, SCHEMA_VERSION + 1).unwrap();
            txn.commit().unwrap();
        }
        assert!(matches!(Store::open(&path, MIGRATIONS), Err(StoreError::TooNew { .. })));
    }
}
