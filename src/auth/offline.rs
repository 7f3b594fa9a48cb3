//! What the command line does with the server stopped: account and audit commands
//! (`gshare admin add|list|remove|set-password`, `gshare audit tail`) on the state file directly
//! (redb allows one process per file; while the server runs, the CLI goes through its admin
//! socket instead), each change audited with actor `cli` in the same transaction; and the key
//! rings of an existing data directory, opened without ever creating one.

use std::time::Duration;

use crate::audit::{self, AuditEntry, AuditRecord, AuditResult};
use crate::auth::accounts::{self, AccountError, AccountSummary, Username};
use crate::auth::keys::{KeyError, KeyRingDir};
use crate::auth::tokens::{AUD_API, AUD_INTERNAL, TokenAuthority};
use crate::clock::Clock;
use crate::config::Config;
use crate::store::{Migration, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error(
        "a server is running and holds {path}, but its admin socket {socket} did not answer this command; run it \
as the user the server runs as (or root), or stop the server (e.g. `systemctl stop gshare`), run it, and start \
the server again"
    )]
    ServerRunning { path: String, socket: String },
    #[error(
        "no signing key ring at {ring} (data_dir {data_dir}); point this command at the server's data directory \
(--config /etc/gshare/config.toml, or GSHARE_DATA_DIR) — a new key ring here would sign tokens the server rejects"
    )]
    NoKeyRing { ring: String, data_dir: String },
    #[error(transparent)]
    Keys(#[from] KeyError),
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn existing_ring(config: &Config, ring: KeyRingDir, name: &str) -> Result<KeyRingDir, OfflineError> {
    if ring.load()?.active().is_none() {
        let dir = config.keys_dir().join(name);
        return Err(OfflineError::NoKeyRing {
            ring: std::path::absolute(&dir).unwrap_or(dir).display().to_string(),
            data_dir: std::path::absolute(&config.data_dir)
                .unwrap_or_else(|_| config.data_dir.clone())
                .display()
                .to_string(),
        });
    }
    Ok(ring)
}

/// The internal (operator) authority of an existing data directory: the configured key, else the
/// ring's active key. Never generates one.
pub fn existing_internal(config: &Config, clock: Clock) -> Result<TokenAuthority, OfflineError> {
    let configured = crate::auth::configured_internal_key(config)?;
    let ring = match &configured {
        Some(_) => crate::auth::internal_ring(config),
        None => existing_ring(config, crate::auth::internal_ring(config), "internal")?,
    };
    Ok(TokenAuthority::open(AUD_INTERNAL, ring, configured, clock)?.0)
}

/// The internal ring of an existing data directory, for `keys rotate|prune` (refused when there is
/// none: the server makes it on its first start).
pub fn existing_internal_ring(config: &Config) -> Result<KeyRingDir, OfflineError> {
    existing_ring(config, crate::auth::internal_ring(config), "internal")
}

/// The admin-API authority of an existing data directory; never generates a key.
pub fn existing_api(config: &Config, clock: Clock) -> Result<TokenAuthority, OfflineError> {
    let ring = existing_ring(config, crate::auth::api_ring(config), "api")?;
    Ok(TokenAuthority::open(AUD_API, ring, None, clock)?.0)
}

/// An admin token from the existing admin-API ring, for `gshare admin token`.
pub fn mint_admin_token(config: &Config, clock: Clock, name: &str, ttl: Duration) -> Result<String, OfflineError> {
    let api = existing_api(config, clock)?;
    Ok(api.mint(&format!("{}{name}", crate::auth::guard::ADMIN_PREFIX), ttl)?)
}

/// Opens the state file for a CLI command, explaining what to do when a server holds it.
/// `migrations` is the composition root's list (`gshare::MIGRATIONS`).
pub fn open_store(config: &Config, migrations: &[Migration]) -> Result<Store, OfflineError> {
    match Store::open(&config.state_file(), migrations) {
        Ok(s) => Ok(s),
        Err(StoreError::AlreadyOpen { path }) => {
            let socket = crate::http::admin_socket::socket_path(&config.data_dir);
            Err(OfflineError::ServerRunning { path: path.display().to_string(), socket: socket.display().to_string() })
        }
        Err(e) => Err(e.into()),
    }
}

fn cli_entry(action: &str, target: &Username) -> AuditEntry {
    AuditEntry::system("cli", action, AuditResult::Success).target(target.to_string())
}

/// Makes sure there is at least the initial account (a CLI run before the first `serve`).
pub async fn ensure_initial(store: &Store, config: &Config, clock: &Clock) -> Result<(), OfflineError> {
    if let Some(path) = accounts::ensure_initial_admin(store, &config.data_dir, clock.now_ms()).await? {
        eprintln!("created the admin account `admin`; its password is in {}", path.display());
    }
    Ok(())
}

/// Checks a new password's strength and hashes it off the executor (argon2id is slow on purpose).
async fn hash_new_password(password: String) -> Result<String, OfflineError> {
    accounts::check_new_password(&password)?;
    Ok(tokio::task::spawn_blocking(move || accounts::hash_password(&password))
        .await
        .map_err(|e| StoreError::Join(e.to_string()))??)
}

pub async fn add(store: &Store, clock: &Clock, name: &str, password: String) -> Result<Username, OfflineError> {
    let name = Username::parse(name)?;
    let hash = hash_new_password(password).await?;
    let now = clock.now_ms();
    let clock = clock.clone();
    let n = name.clone();
    store
        .write_with(move |txn| {
            accounts::add(txn, &n, hash, now)?;
            audit::record_in(txn, &clock, cli_entry("admin.add", &n))?;
            Ok::<_, OfflineError>(())
        })
        .await?;
    Ok(name)
}

pub async fn set_password(
    store: &Store,
    clock: &Clock,
    config: &Config,
    name: &str,
    password: String,
) -> Result<Username, OfflineError> {
    let name = Username::parse(name)?;
    let hash = hash_new_password(password).await?;
    let now = clock.now_ms();
    let clock = clock.clone();
    let n = name.clone();
    store
        .write_with(move |txn| {
            accounts::set_password(txn, &n, hash, now)?;
            // Sessions signed in with the old password end.
            crate::auth::login::set_not_before(txn, n.as_str(), now.div_euclid(1000))?;
            audit::record_in(txn, &clock, cli_entry("admin.set_password", &n))?;
            Ok::<_, OfflineError>(())
        })
        .await?;
    if name.as_str() == accounts::INITIAL_ADMIN {
        accounts::forget_initial_password(&config.data_dir);
    }
    Ok(name)
}

pub async fn remove(store: &Store, clock: &Clock, name: &str) -> Result<Username, OfflineError> {
    let name = Username::parse(name)?;
    let (now, now_ms) = (clock.now(), clock.now_ms());
    let clock = clock.clone();
    let n = name.clone();
    store
        .write_with(move |txn| {
            // The same deletion as the running server's: the name is kept, never given again.
            accounts::delete_account(txn, &n, "cli", now_ms)?;
            crate::auth::login::set_not_before(txn, n.as_str(), now)?;
            audit::record_in(txn, &clock, cli_entry("admin.remove", &n))?;
            Ok::<_, OfflineError>(())
        })
        .await?;
    Ok(name)
}

pub async fn list(store: &Store) -> Result<Vec<AccountSummary>, OfflineError> {
    let all = store.read(accounts::list).await?;
    Ok(all.iter().map(AccountSummary::from).collect())
}

/// The newest `n` audit entries, oldest first.
pub async fn audit_tail(store: &Store, n: usize) -> Result<Vec<AuditRecord>, OfflineError> {
    Ok(store.read(move |txn| audit::last(txn, n)).await?)
}
