//! Account and audit commands of the CLI (`gshare admin add|list|remove|set-password`,
//! `gshare audit tail`). They work on the state file directly, so the server must be stopped:
//! redb allows one process per file, and a running server holds it. Each change is audited with
//! actor `cli` in the same transaction.

use crate::audit::{self, AuditEntry, AuditRecord, AuditResult};
use crate::auth::accounts::{self, AccountError, AccountSummary, Username};
use crate::clock::Clock;
use crate::config::Config;
use crate::store::{Migration, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error(
        "the server is running and holds {path}; this command edits that file directly, so stop the server \
(e.g. `systemctl stop gshare`), run it, and start the server again. While the server runs, sign in to the \
console, or read the audit log with `curl -H \"Authorization: Bearer $(gshare admin token | tail -1)\" {url}/api/v1/audit`"
    )]
    ServerRunning { path: String, url: String },
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Opens the state file for a CLI command, explaining what to do when a server holds it.
/// `migrations` is the composition root's list (`gshare::MIGRATIONS`).
pub fn open_store(config: &Config, migrations: &[Migration]) -> Result<Store, OfflineError> {
    match Store::open(&config.state_file(), migrations) {
        Ok(s) => Ok(s),
        Err(StoreError::AlreadyOpen { path }) => {
            Err(OfflineError::ServerRunning { path: path.display().to_string(), url: config.public_url.clone() })
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
    let now = clock.now();
    let clock = clock.clone();
    let n = name.clone();
    store
        .write_with(move |txn| {
            accounts::remove(txn, &n)?;
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
