//! The state file: one redb database at `<data_dir>/gshare.redb`, with a schema-version record,
//! ordered migrations, and typed JSON tables. redb's API is synchronous; async callers go through
//! [`Store::read`] and [`Store::write`], which run on the blocking pool, never on the executor.
//! Hot write paths use [`Store::write_batched`] instead: one writer thread gathers concurrent
//! writes into shared transactions, so one fsync serves many requests (see `batch`).

mod batch;
pub mod cache;
mod health;
mod rows;
mod stats;
mod tables;
mod txn;

pub use batch::{LANE_QUEUE, MAX_BATCH, Outcome};
pub use health::WriteHealth;
pub use rows::{DryRun, Rows};
pub use stats::{BATCH_BUCKETS, COMMIT_BUCKETS, CommitSnapshot, CommitStats};
pub use tables::{JsonTable, KeyOrder, KeySet};
pub use txn::WriteTxn;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use redb::{ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};

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

/// Inside a migration step: the schema version the file had before this open began migrating it
/// (0 for a new file). The version is written only after every step has run.
pub fn schema_before_migration(txn: &WriteTxn) -> Result<u64, StoreError> {
    let meta = txn.open_table(META)?;
    Ok(meta.get(SCHEMA_KEY)?.map(|g| g.value()).unwrap_or(0))
}

/// The schema the `migrations` given to [`Store::open`] write.
pub fn schema_of(migrations: &[Migration]) -> u64 {
    migrations.iter().map(|m| m.to).max().unwrap_or(0)
}

#[derive(Debug, Clone, thiserror::Error)]
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
    /// A read or write of the file failed at the OS (`full`: no space left).
    #[error("state file I/O failed: {message}")]
    Io { full: bool, message: String },
    /// Writes are refused until the file can write again (see `health`).
    #[error(
        "{}; writes are refused until it can write again (reads go on)",
        if *full { format!("no space left on the filesystem of the data directory {} ({} bytes free)", dir.display(), avail_bytes.map_or_else(|| "unknown".to_string(), |b| b.to_string())) }
        else { format!("the state file in {} cannot write ({cause})", dir.display()) }
    )]
    NotWritable { dir: PathBuf, avail_bytes: Option<u64>, full: bool, cause: String },
}

impl From<redb::StorageError> for StoreError {
    fn from(e: redb::StorageError) -> Self {
        health::from_storage(e)
    }
}
impl From<redb::TransactionError> for StoreError {
    fn from(e: redb::TransactionError) -> Self {
        match e {
            redb::TransactionError::Storage(s) => health::from_storage(s),
            other => StoreError::Backend(other.to_string()),
        }
    }
}
impl From<redb::TableError> for StoreError {
    fn from(e: redb::TableError) -> Self {
        match e {
            redb::TableError::Storage(s) => health::from_storage(s),
            other => StoreError::Backend(other.to_string()),
        }
    }
}
impl From<redb::CommitError> for StoreError {
    fn from(e: redb::CommitError) -> Self {
        match e {
            redb::CommitError::Storage(s) => health::from_storage(s),
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// A shared handle to the open state file.
#[derive(Clone)]
pub struct Store {
    core: Arc<health::Core>,
    stats: Arc<CommitStats>,
    /// The group-commit writer, started by the first [`Store::write_batched`].
    batcher: Arc<OnceLock<batch::Batcher>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.core.path).finish()
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
        let db = health::builder(cache_bytes).create(path).map_err(|e| match e {
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
            core: Arc::new(health::Core::new(db, path, cache_bytes)),
            stats: Arc::default(),
            batcher: Arc::default(),
        };
        store.migrate(migrations)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.core.path
    }

    /// Can the store write, and the counters of refused and failed writes (`/readyz`,
    /// `/metrics`). While refusing, tries a probe write when space has appeared. Blocking.
    pub fn write_health(&self) -> WriteHealth {
        self.core.try_recover();
        self.core.health()
    }

    /// Changes each time the store can write again after refusing (the audit writer's cue).
    pub fn writable_again(&self) -> tokio::sync::watch::Receiver<u64> {
        self.core.writable_again()
    }

    fn migrate(&self, migrations: &[Migration]) -> Result<(), StoreError> {
        debug_assert!(migrations.windows(2).all(|w| w[0].to <= w[1].to), "migrations out of order");
        let schema = schema_of(migrations);
        let corrupt =
            |e: &dyn std::fmt::Display| StoreError::Corrupt { path: self.core.path.clone(), message: e.to_string() };
        let (_, db) = self.core.current()?;
        let txn = WriteTxn::new(db.begin_write().map_err(|e| corrupt(&e))?);
        let found = {
            let meta = txn.open_table(META).map_err(|e| corrupt(&e))?;
            let v = meta.get(SCHEMA_KEY).map_err(|e| corrupt(&e))?.map(|g| g.value());
            v.unwrap_or(0)
        };
        if found > schema {
            return Err(StoreError::TooNew { path: self.core.path.clone(), found, known: schema });
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
        let (_, db) = self.core.current()?;
        let txn = db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(SCHEMA_KEY)?.map(|g| g.value()).unwrap_or(0))
    }

    /// Runs a read-only closure on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let core = self.core.clone();
        tokio::task::spawn_blocking(move || {
            let (epoch, db) = core.current()?;
            let result = db.begin_read().map_err(StoreError::from).and_then(|txn| f(&txn));
            drop(db);
            match result {
                // A latched handle fails reads too: reopen it (the read itself is not retried).
                Err(e @ StoreError::Io { .. }) => Err(core.failed(epoch, e)),
                other => other,
            }
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
        let (core, stats) = (self.core.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            core.admit_write()?;
            let (epoch, db) = core.current()?;
            let result = (|| {
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
            })();
            drop(db);
            result.map_err(|e| core.failed(epoch, e))
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
        let (core, stats) = (self.core.clone(), self.stats.clone());
        tokio::task::spawn_blocking(move || {
            core.admit_write()?;
            let (epoch, db) = core.current()?;
            // The store's own failures apart from the closure's: only those can mean a bad file.
            let result = (|| {
                let txn = WriteTxn::new(db.begin_write().map_err(|e| Err(StoreError::from(e)))?);
                match f(&txn) {
                    Ok(v) => {
                        let started = Instant::now();
                        let written = txn.commit().map_err(|e| Err(StoreError::from(e)))?;
                        stats.committed(started, written);
                        Ok(v)
                    }
                    Err(e) => {
                        txn.abort();
                        Err(Ok(e))
                    }
                }
            })();
            drop(db);
            result.map_err(|failure| match failure {
                Ok(own) => own,
                Err(store) => E::from(core.failed(epoch, store)),
            })
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
        let batcher = self.batcher.get_or_init(|| batch::Batcher::start(&self.core, self.stats.clone()));
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
        self.core.current().is_ok_and(|(_, db)| db.begin_read().is_ok())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::tables::prefix_end;
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
            let txn = s.core.current().unwrap().1.begin_write().unwrap();
            txn.open_table(META).unwrap().insert(SCHEMA_KEY, SCHEMA_VERSION + 1).unwrap();
            txn.commit().unwrap();
        }
        assert!(matches!(Store::open(&path, MIGRATIONS), Err(StoreError::TooNew { .. })));
    }
}
