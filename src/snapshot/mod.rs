//! State safety: snapshots of the state file (see `format` for the file layout), taken on a
//! schedule by the server, on demand through `POST /api/v1/snapshots` (the CLI's path, over the
//! admin socket, while a server holds the file) or directly from the file when no server runs; listed, pruned, and
//! restored by `gshare snapshot ...`. After a restore the next server start re-probes every
//! cluster and lists the GShareSessions the clusters run that the restored state does not know
//! (they are never deleted). `export` writes the state as documented JSON lines.

pub mod export;
pub mod format;
pub mod routes;
pub mod secrets;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::ReadableDatabase;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::config::Config;
use crate::locks::lock;
use crate::store::Store;
use format::{FormatError, Header, SecretsInfo};

/// File name suffix of snapshots in `snapshot_dir`.
pub const SUFFIX: &str = ".gshare-snapshot";
/// Written next to the state file by `restore`; the next server start reconciles and removes it.
pub const RESTORE_MARKER: &str = "restore-pending.json";
/// The version of the gshare that last started on this data dir (for pre-upgrade snapshots).
pub const VERSION_MARKER: &str = "last-started-version";

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretsError),
    #[error("cannot write the snapshot {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Refused(String),
    #[error("the state file is held by a running server")]
    Locked,
    #[error("state file: {0}")]
    Store(String),
    /// The switch failed and every step was undone: the data dir is as it was.
    #[error("the switch to the snapshot failed at {cause}; every step was undone")]
    SwitchFailed { cause: String },
    /// The switch failed and undoing it failed too: the data dir is mixed.
    #[error(
        "the switch to the snapshot failed at {cause} and could not be fully undone: {}; put these back by hand before starting the server",
        left.join("; ")
    )]
    RollbackFailed { cause: String, left: Vec<String> },
}

/// Information about one snapshot file (`ls`, API answers).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    pub name: String,
    pub path: String,
    pub size_bytes: u64,
    pub created_at: String,
    pub reason: String,
    pub schema_version: u64,
    pub binary_version: String,
    pub sha256: String,
    pub secrets_included: bool,
}

impl SnapshotInfo {
    fn new(path: &Path, size: u64, h: &Header) -> Self {
        Self {
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            path: path.display().to_string(),
            size_bytes: size,
            created_at: h.created_at.clone(),
            reason: h.reason.clone(),
            schema_version: h.schema_version,
            binary_version: h.binary_version.clone(),
            sha256: h.sha256.clone(),
            secrets_included: h.secrets.included,
        }
    }
}

/// A reason is a short word: it ends up in file names.
pub fn check_reason(reason: &str) -> Result<(), SnapshotError> {
    let ok = !reason.is_empty()
        && reason.len() <= 32
        && reason.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if ok { Ok(()) } else { Err(SnapshotError::Refused(format!("reason `{reason}` must be 1-32 of a-z 0-9 -"))) }
}

/// Builds the whole snapshot file from one read transaction of the state.
pub fn build(
    txn: &redb::ReadTransaction,
    config: &Config,
    now_ms: i64,
    reason: &str,
    secrets: Option<&secrets::Passphrase>,
) -> Result<Vec<u8>, SnapshotError> {
    let dump = format::dump(txn)?;
    let (sealed, info) = match secrets {
        Some(pass) => {
            let (sealed, files) = secrets::seal(config, pass)?;
            (sealed, SecretsInfo { included: true, encryption: Some("age-scrypt".into()), files, omitted: vec![] })
        }
        None => (
            Vec::new(),
            SecretsInfo { included: false, encryption: None, files: vec![], omitted: secrets::omitted(config) },
        ),
    };
    let header = Header {
        format: String::new(),
        format_version: 0,
        schema_version: dump.schema_version,
        binary_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at: crate::clock::rfc3339_ms(now_ms),
        created_at_ms: now_ms,
        reason: reason.to_string(),
        sha256: String::new(),
        state_len: 0,
        secrets_len: 0,
        secrets: info,
        tables: dump.tables,
        signing_kids: secrets::signing_kids(config),
    };
    Ok(format::encode(header, &dump.bytes, &sealed)?)
}

/// `gshare-20261201T040835.123Z-scheduled.gshare-snapshot`: sorts by time.
pub fn file_name(now_ms: i64, reason: &str) -> String {
    let t = crate::clock::rfc3339_ms(now_ms).replace([':', '-'], "");
    format!("gshare-{t}-{reason}{SUFFIX}")
}

/// Writes `bytes` to `path` atomically: a 0600 temp file beside it, fsync, rename, fsync of the
/// directory. A crash leaves at most a `.<name>.tmp-*` file, never a partial file under `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    crate::auth::keys::write_private_file(path, bytes)
        .map_err(|source| SnapshotError::Write { path: path.to_path_buf(), source })
}

/// Writes a snapshot into `dir` (created 0700) under a time-ordered name.
pub fn write_into(dir: &Path, bytes: &[u8], now_ms: i64, reason: &str) -> Result<SnapshotInfo, SnapshotError> {
    crate::auth::keys::create_private_dir(dir)
        .map_err(|e| SnapshotError::Write { path: dir.to_path_buf(), source: std::io::Error::other(e.to_string()) })?;
    let path = dir.join(file_name(now_ms, reason));
    write_atomic(&path, bytes)?;
    let (h, _) = format::read_header(bytes)?;
    Ok(SnapshotInfo::new(&path, bytes.len() as u64, &h))
}

/// Snapshots in `dir`, oldest first; files that are not snapshots are skipped.
pub fn list(dir: &Path) -> Result<Vec<SnapshotInfo>, SnapshotError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(SnapshotError::Read { path: dir.to_path_buf(), source }),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(SUFFIX) {
            continue;
        }
        let path = e.path();
        let Ok(prefix) = read_prefix(&path) else { continue };
        if let Ok((h, _)) = format::read_header(&prefix) {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            out.push(SnapshotInfo::new(&path, size, &h));
        }
    }
    out.sort_by(|a, b| (&a.created_at, &a.name).cmp(&(&b.created_at, &b.name)));
    Ok(out)
}

fn read_prefix(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(64 * 1024 + 64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The reason only the unit's pre-start step gives (`gshare snapshot save --pre-upgrade`).
pub const PRE_UPGRADE: &str = "pre-upgrade";
/// `pre-upgrade` snapshots kept (the way back from the last upgrades), apart from `keep`.
pub const PRE_UPGRADE_KEEP: usize = 3;

/// Deletes all but the newest `keep` snapshots in `dir`, and all but the newest
/// [`PRE_UPGRADE_KEEP`] `pre-upgrade` ones (counted apart: they are the way back from an
/// upgrade). Returns the deleted ones.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<SnapshotInfo>, SnapshotError> {
    let (upgrades, others): (Vec<SnapshotInfo>, Vec<SnapshotInfo>) =
        list(dir)?.into_iter().partition(|s| s.reason == PRE_UPGRADE);
    let mut gone = Vec::new();
    for (all, keep) in [(others, keep), (upgrades, PRE_UPGRADE_KEEP)] {
        let n = all.len().saturating_sub(keep);
        for s in all.into_iter().take(n) {
            std::fs::remove_file(&s.path)
                .map_err(|source| SnapshotError::Write { path: PathBuf::from(&s.path), source })?;
            gone.push(s);
        }
    }
    Ok(gone)
}

/// Opens the state file directly, read-only, when no server holds it. `Locked` when one does.
pub fn open_offline(state: &Path) -> Result<redb::ReadOnlyDatabase, SnapshotError> {
    if !state.exists() {
        return Err(SnapshotError::Refused(format!("there is no state file at {}", state.display())));
    }
    match redb::ReadOnlyDatabase::open(state) {
        Ok(db) => Ok(db),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(SnapshotError::Locked),
        Err(e) => Err(SnapshotError::Store(format!("{}: {e}", state.display()))),
    }
}

/// Takes a snapshot from the file directly (no server running).
pub fn save_offline(
    config: &Config,
    now_ms: i64,
    reason: &str,
    secrets: Option<&secrets::Passphrase>,
) -> Result<Vec<u8>, SnapshotError> {
    let db = open_offline(&config.state_file())?;
    let txn = db.begin_read().map_err(|e| SnapshotError::Store(e.to_string()))?;
    build(&txn, config, now_ms, reason, secrets)
}

/// Adds an encrypted secrets section to a snapshot that has none (the CLI, after downloading
/// the state from a running server: the passphrase never leaves the head node's CLI).
pub fn add_secrets(file: &[u8], config: &Config, pass: &secrets::Passphrase) -> Result<Vec<u8>, SnapshotError> {
    let snap = format::decode(file)?;
    let (sealed, files) = secrets::seal(config, pass)?;
    let mut header = snap.header.clone();
    header.secrets = SecretsInfo { included: true, encryption: Some("age-scrypt".into()), files, omitted: vec![] };
    Ok(format::encode(header, snap.state, &sealed)?)
}

/// What `restore` did.
#[derive(Debug)]
pub struct Restored {
    pub header: Header,
    pub set_aside: Vec<PathBuf>,
    pub secrets_restored: Vec<String>,
    pub warnings: Vec<String>,
}

/// Restores `file` into the data dir, all or nothing:
/// 1. checks: format, hash, versions, the schema the state's own tables record (not only the
///    header's), the passphrase when secrets are restored, and that no server holds the file;
/// 2. stages beside their targets: the new state file (`.gshare.redb.restore-<id>`) and, with
///    secrets, the key and kubeconfig directories (`.<dir>.restore-<id>`), fsynced; a failure
///    here removes what was staged and nothing else was touched;
/// 3. switches by renames: each current file or directory to `<name>.before-restore-<stamp>`,
///    each staged one into its place, then the restore marker; a failure at any step undoes the
///    steps done, in reverse ([`SnapshotError::SwitchFailed`]); only when an undo step fails too
///    is the data dir left mixed, and [`SnapshotError::RollbackFailed`] says what is where.
pub fn restore(
    config: &Config,
    file: &[u8],
    pass: Option<&secrets::Passphrase>,
    now_ms: i64,
) -> Result<Restored, SnapshotError> {
    let snap = format::decode(file)?;
    let h = &snap.header;
    let ours = env!("CARGO_PKG_VERSION");
    let known = crate::store::schema_of(crate::MIGRATIONS);
    let in_data = format::schema_in(snap.state)?;
    for schema in [h.schema_version, in_data] {
        if schema > known {
            return Err(SnapshotError::Refused(format!(
                "this snapshot has state schema {schema}, newer than this gshare ({ours}) knows ({known}); restore it with gshare {} or newer",
                h.binary_version
            )));
        }
    }
    if in_data != h.schema_version {
        return Err(SnapshotError::Refused(format!(
            "the snapshot's header says state schema {} but its tables record schema {in_data}: the file was altered after it was written",
            h.schema_version
        )));
    }
    if format::version_tuple(&h.binary_version) > format::version_tuple(ours) {
        return Err(SnapshotError::Refused(format!(
            "this snapshot was written by gshare {}, newer than this one ({ours}); upgrade gshare first",
            h.binary_version
        )));
    }
    let opened = match (h.secrets.included, pass) {
        (true, Some(p)) => Some(secrets::open(snap.secrets, p)?),
        _ => None,
    };
    let state = config.state_file();
    let dir = state.parent().unwrap_or(Path::new(".")).to_path_buf();
    crate::auth::keys::create_private_dir(&dir).map_err(|e| SnapshotError::Store(e.to_string()))?;
    // Held by a server? (The read-only open takes the same lock a server holds.)
    if state.exists() {
        match redb::ReadOnlyDatabase::open(&state) {
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(SnapshotError::Locked),
            Ok(db) => drop(db),
            // A damaged current file is what restore is for.
            Err(_) => {}
        }
    }

    // 2. Stage.
    let tag = ulid::Ulid::new().to_string();
    let tmp = dir.join(format!(".gshare.redb.restore-{tag}"));
    let built = (|| -> Result<(), SnapshotError> {
        let db = redb::Database::create(&tmp).map_err(|e| SnapshotError::Store(e.to_string()))?;
        let txn = db.begin_write().map_err(|e| SnapshotError::Store(e.to_string()))?;
        format::load(&txn, snap.state)?;
        txn.commit().map_err(|e| SnapshotError::Store(e.to_string()))?;
        drop(db);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|source| SnapshotError::Write { path: tmp.clone(), source })?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|source| SnapshotError::Write { path: tmp.clone(), source })
    })();
    if let Err(e) = built {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let staged = match opened.as_ref().map(|o| o.stage(config, &tag)).transpose() {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
    };

    // 3. Switch.
    let stamp = crate::clock::rfc3339_ms(now_ms).replace([':', '-'], "");
    let current_kids = secrets::signing_kids(config);
    let mut moves: Vec<(PathBuf, PathBuf)> = vec![(tmp.clone(), state.clone())];
    if let Some(st) = &staged {
        moves.extend(st.dirs.iter().map(|(root, staging)| (staging.clone(), root.clone())));
    }
    let marker = serde_json::json!({ "created_at": h.created_at, "reason": h.reason, "restored_at_ms": now_ms });
    let mut switch = Switch::default();
    let switched = (|| -> Result<(), (PathBuf, std::io::Error)> {
        for (staged_path, target) in &moves {
            if std::fs::symlink_metadata(target).is_ok() {
                let aside = free_name(&PathBuf::from(format!("{}.before-restore-{stamp}", target.display())));
                switch.rename(target, &aside)?;
                switch.set_aside.push(aside);
            }
            switch.rename(staged_path, target)?;
        }
        for d in switch.parents() {
            std::fs::File::open(&d).and_then(|f| f.sync_all()).map_err(|e| (d, e))?;
        }
        // Last: written whole or not at all (a temp file renamed over it, its directory fsynced).
        let marker_path = dir.join(RESTORE_MARKER);
        crate::auth::keys::write_private_file(&marker_path, marker.to_string().as_bytes()).map_err(|e| (marker_path, e))
    })();
    if let Err((path, source)) = switched {
        let cause = format!("{}: {source}", path.display());
        let left = switch.undo();
        if !left.is_empty() {
            return Err(SnapshotError::RollbackFailed { cause, left });
        }
        let _ = std::fs::remove_file(&tmp);
        if let Some(st) = &staged {
            st.discard();
        }
        for d in switch.parents() {
            if let Ok(f) = std::fs::File::open(&d) {
                let _ = f.sync_all();
            }
        }
        return Err(SnapshotError::SwitchFailed { cause });
    }

    let mut warnings = Vec::new();
    if h.secrets.included && opened.is_none() {
        warnings.push(
            "the snapshot's secrets were not restored (no passphrase given); the current keys and kubeconfigs stay"
                .into(),
        );
    }
    if opened.is_none() && !h.signing_kids.is_empty() && h.signing_kids != current_kids {
        warnings.push(format!(
            "this data directory's signing keys ({}) differ from the snapshot's ({}): operator tokens minted for the snapshot's install do not verify here; re-issue them with `gshare token operator --cluster-id ...`",
            if current_kids.is_empty() { "none".to_string() } else { current_kids.join(", ") },
            h.signing_kids.join(", ")
        ));
    }
    let secrets_restored = opened.as_ref().map(secrets::Opened::names).unwrap_or_default();
    Ok(Restored { header: snap.header, set_aside: switch.set_aside, secrets_restored, warnings })
}

/// `base`, or `base-2`, `base-3`, … when taken (two restores in one millisecond).
fn free_name(base: &Path) -> PathBuf {
    let mut candidate = base.to_path_buf();
    let mut n = 2;
    while std::fs::symlink_metadata(&candidate).is_ok() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

/// The renames a restore's switch has done, to undo them in reverse.
#[derive(Default)]
struct Switch {
    done: Vec<(PathBuf, PathBuf)>,
    set_aside: Vec<PathBuf>,
}

impl Switch {
    fn rename(&mut self, from: &Path, to: &Path) -> Result<(), (PathBuf, std::io::Error)> {
        std::fs::rename(from, to).map_err(|e| (from.to_path_buf(), e))?;
        self.done.push((from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    /// The directories whose entries changed (to fsync).
    fn parents(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self
            .done
            .iter()
            .flat_map(|(a, b)| [a, b])
            .map(|p| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Undoes every rename done, newest first; returns what could not be put back.
    fn undo(&mut self) -> Vec<String> {
        let mut left = Vec::new();
        while let Some((from, to)) = self.done.pop() {
            if let Err(e) = std::fs::rename(&to, &from) {
                left.push(format!("{} is still at {} ({e})", from.display(), to.display()));
            }
        }
        self.set_aside.clear();
        left
    }
}

/// The newest snapshot in the configured directory, for the "state file does not open" hint.
pub fn restore_hint(config: &Config) -> Option<String> {
    let newest = list(&config.snapshot_dir).ok()?.pop()?;
    Some(format!(
        "the newest snapshot is {} ({}); restore it with: gshare snapshot restore {}{}",
        newest.path,
        newest.created_at,
        newest.path,
        config.source.as_ref().map(|p| format!(" --config {}", p.display())).unwrap_or_default()
    ))
}

/// Last results, for `/readyz`, `/metrics` and the console.
#[derive(Debug, Default, Clone, Serialize, utoipa::ToSchema)]
pub struct SnapshotStatus {
    /// RFC 3339 time of the last successful snapshot (this run or found on disk at start).
    pub last_success_at: Option<String>,
    #[serde(skip)]
    pub last_success_ms: Option<i64>,
    pub last_file: Option<String>,
    pub last_size_bytes: Option<u64>,
    /// The last attempt's error, cleared by the next success.
    pub last_error: Option<String>,
    pub failures: u64,
    /// After a restore: what the first start found (see [`RestoreReport`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreReport>,
}

/// What the first start after a restore found in the clusters.
#[derive(Debug, Default, Clone, Serialize, utoipa::ToSchema)]
pub struct RestoreReport {
    pub snapshot_created_at: String,
    pub clusters_probed: usize,
    /// `<cluster_id>/<cr name>`: GShareSessions running in a cluster that the restored state
    /// does not know. Listed, never deleted.
    pub unknown_crs: Vec<String>,
    /// Clusters whose CRs could not be listed.
    pub unreachable: Vec<String>,
    pub finished: bool,
}

/// The server's snapshot service.
#[derive(Debug)]
pub struct Snapshots {
    store: Store,
    config: std::sync::Arc<Config>,
    clock: Clock,
    status: Mutex<SnapshotStatus>,
    failures: AtomicU64,
    /// One snapshot at a time.
    busy: tokio::sync::Mutex<()>,
    /// Becomes true when the reconcile after a restore has run (tests wait on it).
    reconciled: tokio::sync::watch::Sender<bool>,
}

impl Snapshots {
    pub fn new(store: Store, config: std::sync::Arc<Config>, clock: Clock) -> Self {
        let mut status = SnapshotStatus::default();
        if let Some(newest) = list(&config.snapshot_dir).ok().and_then(|mut l| l.pop()) {
            status.last_success_ms =
                time::OffsetDateTime::parse(&newest.created_at, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
            status.last_success_at = Some(newest.created_at);
            status.last_file = Some(newest.path);
            status.last_size_bytes = Some(newest.size_bytes);
        }
        Self {
            store,
            config,
            clock,
            status: Mutex::new(status),
            failures: AtomicU64::new(0),
            busy: Default::default(),
            reconciled: tokio::sync::watch::channel(false).0,
        }
    }

    pub fn status(&self) -> SnapshotStatus {
        let mut s = lock(&self.status).clone();
        s.failures = self.failures.load(Ordering::Relaxed);
        s
    }

    fn set_restore(&self, r: RestoreReport) {
        let finished = r.finished;
        lock(&self.status).restore = Some(r);
        if finished {
            self.reconciled.send_replace(true);
        }
    }

    /// Waits until the first start after a restore has re-probed and compared every cluster.
    pub async fn reconciled(&self) {
        let _ = self.reconciled.subscribe().wait_for(|v| *v).await;
    }

    /// Builds a snapshot from one read transaction (off the executor). Not written anywhere.
    pub async fn build(&self, reason: &str) -> Result<Vec<u8>, SnapshotError> {
        let (config, now, reason) = (self.config.clone(), self.clock.now_ms(), reason.to_string());
        self.store
            .read(move |txn| Ok(build(txn, &config, now, &reason, None)))
            .await
            .map_err(|e| SnapshotError::Store(e.to_string()))?
    }

    /// Takes a snapshot into `snapshot_dir`, records the result, prunes down to `snapshot_keep`.
    /// A failure (full disk, unwritable directory) is recorded; older snapshots stay.
    pub async fn take(&self, reason: &str) -> Result<SnapshotInfo, SnapshotError> {
        let _one = self.busy.lock().await;
        let now = self.clock.now_ms();
        let result: Result<SnapshotInfo, SnapshotError> = async {
            let bytes = self.build(reason).await?;
            let (dir, keep, reason) = (self.config.snapshot_dir.clone(), self.config.snapshot_keep, reason.to_string());
            tokio::task::spawn_blocking(move || {
                let info = write_into(&dir, &bytes, now, &reason)?;
                if let Err(e) = prune(&dir, keep) {
                    tracing::warn!(error = %e, "cannot prune old snapshots");
                }
                Ok(info)
            })
            .await
            .map_err(|e| SnapshotError::Store(e.to_string()))?
        }
        .await;
        let mut st = lock(&self.status);
        match &result {
            Ok(info) => {
                st.last_success_ms = Some(now);
                st.last_success_at = Some(info.created_at.clone());
                st.last_file = Some(info.path.clone());
                st.last_size_bytes = Some(info.size_bytes);
                st.last_error = None;
                tracing::info!(file = %info.path, size = info.size_bytes, reason = %info.reason, "snapshot saved");
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                st.last_error = Some(e.to_string());
                tracing::error!(error = %e, dir = %self.config.snapshot_dir.display(), "snapshot failed; older snapshots are kept");
            }
        }
        result
    }

    /// Prometheus lines.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let s = self.status();
        let _ = writeln!(
            out,
            "# HELP gshare_snapshot_last_success_timestamp_seconds Time of the newest good snapshot (0: none)."
        );
        let _ = writeln!(out, "# TYPE gshare_snapshot_last_success_timestamp_seconds gauge");
        let _ = writeln!(
            out,
            "gshare_snapshot_last_success_timestamp_seconds {}",
            s.last_success_ms.map(|m| m as f64 / 1000.0).unwrap_or(0.0)
        );
        let _ = writeln!(out, "# HELP gshare_snapshot_failures_total Snapshots that could not be written since start.");
        let _ = writeln!(out, "# TYPE gshare_snapshot_failures_total counter");
        let _ = writeln!(out, "gshare_snapshot_failures_total {}", s.failures);
        let _ = writeln!(out, "# HELP gshare_snapshot_last_size_bytes Size of the newest good snapshot.");
        let _ = writeln!(out, "# TYPE gshare_snapshot_last_size_bytes gauge");
        let _ = writeln!(out, "gshare_snapshot_last_size_bytes {}", s.last_size_bytes.unwrap_or(0));
    }
}

/// What the schedule and the reconcile after a restore use.
pub struct Upkeep {
    pub config: std::sync::Arc<Config>,
    pub clock: Clock,
    pub snapshots: std::sync::Arc<Snapshots>,
    pub clusters: std::sync::Arc<crate::clusters::Clusters>,
    pub sessions: std::sync::Arc<crate::sessions::Sessions>,
}

/// The schedule: a snapshot every `snapshot_interval` after the newest one (the first one
/// `min(interval, 5 min)` after start when there is none); `0s` turns it off. Also records the
/// running version (for pre-upgrade snapshots) and, after a restore, reconciles.
pub fn spawn(app: Upkeep, mut stop: tokio::sync::watch::Receiver<bool>) {
    let app = std::sync::Arc::new(app);
    let marker = app.config.data_dir.join(VERSION_MARKER);
    if let Err(e) = crate::auth::keys::write_private_file(&marker, env!("CARGO_PKG_VERSION").as_bytes()) {
        tracing::warn!(error = %e, file = %marker.display(), "cannot record the running version");
    }
    let restored = app.config.data_dir.join(RESTORE_MARKER);
    if restored.exists() {
        let app = app.clone();
        tokio::spawn(async move { reconcile_after_restore(&app, &restored).await });
    }
    let interval = app.config.snapshot_interval;
    if interval.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let started = app.clock.now_ms();
        loop {
            let last = app.snapshots.status().last_success_ms;
            let due = match last {
                Some(ms) => ms + interval.as_millis() as i64,
                None => started + interval.min(std::time::Duration::from_secs(300)).as_millis() as i64,
            };
            let wait = (due - app.clock.now_ms()).max(0) as u64;
            // After a failure, retry in a tenth of the interval (at least a minute) instead of spinning.
            let wait = if app.snapshots.status().last_error.is_some() && wait == 0 {
                (interval.as_millis() as u64 / 10).max(60_000)
            } else {
                wait
            };
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
                _ = stop.wait_for(|v| *v) => return,
            }
            let _ = app.snapshots.take("scheduled").await;
        }
    });
}

/// First start after `gshare snapshot restore`: re-probe every cluster, then list the
/// GShareSessions each one runs and report those the restored state does not know.
async fn reconcile_after_restore(app: &Upkeep, marker: &Path) {
    let created = std::fs::read(marker)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["created_at"].as_str().map(str::to_string))
        .unwrap_or_default();
    let mut report = RestoreReport { snapshot_created_at: created, ..Default::default() };
    app.snapshots.set_restore(report.clone());
    let ids = match app.clusters.live_ids().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::error!(error = %e, "after restore: cannot list clusters");
            report.finished = true;
            app.snapshots.set_restore(report);
            return;
        }
    };
    for id in &ids {
        if let Err(e) = app.clusters.reprobe(id).await {
            tracing::warn!(cluster_id = %id, error = %e, "after restore: probe failed");
        }
        report.clusters_probed += 1;
        match app.sessions.unknown_crs(id).await {
            Ok(names) => {
                for n in names {
                    tracing::warn!(cluster_id = %id, cr = %n, "after restore: this GShareSession runs in the cluster but is not in the restored state; it is left alone (delete it with kubectl if it is not wanted)");
                    report.unknown_crs.push(format!("{id}/{n}"));
                }
            }
            Err(e) => {
                tracing::warn!(cluster_id = %id, error = %e, "after restore: cannot list GShareSessions");
                report.unreachable.push(id.to_string());
            }
        }
    }
    report.finished = true;
    tracing::info!(
        clusters = report.clusters_probed,
        unknown = report.unknown_crs.len(),
        "after restore: reconcile done"
    );
    // The marker goes before the finished report is shown: whoever sees `finished` finds no marker.
    let _ = std::fs::remove_file(marker);
    app.snapshots.set_restore(report);
}

/// Should `snapshot save --pre-upgrade` take one? Yes when a state file exists and the version
/// that last started on it is not this one.
pub fn upgrade_pending(config: &Config) -> Option<String> {
    if !config.state_file().exists() {
        return None;
    }
    let last = std::fs::read_to_string(config.data_dir.join(VERSION_MARKER)).unwrap_or_default();
    let last = last.trim();
    (last != env!("CARGO_PKG_VERSION")).then(|| if last.is_empty() { "unknown".into() } else { last.to_string() })
}
