//! `gshare snapshot save|ls|prune|restore` and `gshare export`. The live state comes from the
//! running server's `POST /api/v1/snapshots` over the admin socket when one runs, else straight
//! from the state file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use axum::http::Method;
use serde::Serialize;

use crate::clock::Clock;
use crate::config::Config;
use crate::snapshot::secrets::Passphrase;
use crate::snapshot::{self, SnapshotError, SnapshotInfo};

/// `snapshot save`'s arguments.
#[derive(Debug, Clone)]
pub struct Save {
    pub file: Option<PathBuf>,
    pub reason: String,
    pub include_secrets: bool,
    pub passphrase_file: Option<PathBuf>,
    pub pre_upgrade: bool,
}

#[derive(Serialize)]
struct SnapshotRequest<'a> {
    reason: &'a str,
    download: bool,
}

/// The snapshot bytes of the live state (`Ok`), or where the server saved it in its own
/// snapshot_dir (`Err`) when `download` is false and no secrets are added.
fn live_snapshot(
    config: &Config,
    reason: &str,
    download: bool,
    pass: Option<&Passphrase>,
) -> Result<Result<Vec<u8>, SnapshotInfo>> {
    let rt = super::runtime()?;
    let download = download || pass.is_some();
    if let Some(server) = super::local_server(&rt, config)? {
        let req = SnapshotRequest { reason, download };
        let what = "the running server did not take the snapshot";
        if !download {
            let info: SnapshotInfo =
                rt.block_on(server.call(Method::POST, "/api/v1/snapshots", Some(&req))).context(what)?;
            return Ok(Err(info));
        }
        let bytes = rt.block_on(server.call_bytes(Method::POST, "/api/v1/snapshots", Some(&req))).context(what)?;
        return Ok(Ok(match pass {
            Some(p) => snapshot::add_secrets(&bytes, config, p)?,
            None => bytes,
        }));
    }
    match snapshot::save_offline(config, Clock::system().now_ms(), reason, pass) {
        Ok(bytes) => Ok(Ok(bytes)),
        Err(SnapshotError::Locked) => bail!(
            "a server holds {} but its admin socket {} did not answer; run this command as the user the server runs \
             as (or root)",
            config.state_file().display(),
            crate::http::admin_socket::socket_path(&config.data_dir).display()
        ),
        Err(e) => Err(e.into()),
    }
}

fn print_saved(info: &SnapshotInfo, bytes: Option<&[u8]>) {
    println!("saved {} ({} bytes, schema {}, sha256 {})", info.path, info.size_bytes, info.schema_version, info.sha256);
    if let Some(h) = bytes.and_then(|b| snapshot::format::read_header(b).ok()).map(|(h, _)| h) {
        for left in &h.secrets.omitted {
            println!("left out (use --include-secrets to add them, encrypted): {left}");
        }
    }
}

pub fn save(config: &Config, args: Save) -> Result<()> {
    let Save { file, reason, include_secrets, passphrase_file, pre_upgrade } = args;
    let now = Clock::system().now_ms();
    let reason = if pre_upgrade {
        match snapshot::upgrade_pending(config) {
            None => {
                eprintln!("no upgrade pending (no state file, or gshare {} ran last)", env!("CARGO_PKG_VERSION"));
                return Ok(());
            }
            Some(from) => {
                eprintln!(
                    "gshare {from} ran last on this data directory; snapshot before {} opens it",
                    env!("CARGO_PKG_VERSION")
                );
                "pre-upgrade".to_string()
            }
        }
    } else {
        reason
    };
    snapshot::check_reason(&reason)?;
    let pass = if include_secrets { Some(super::prompt::passphrase(passphrase_file.as_deref(), true)?) } else { None };
    match live_snapshot(config, &reason, file.is_some(), pass.as_ref())? {
        Err(info) => print_saved(&info, None),
        Ok(bytes) => {
            let info = match file {
                Some(path) => {
                    // A bare name (`F`) has an empty parent, which the atomic write cannot sync.
                    let path = std::path::absolute(&path).unwrap_or(path);
                    snapshot::write_atomic(&path, &bytes)?;
                    let (h, _) = snapshot::format::read_header(&bytes)?;
                    SnapshotInfo {
                        name: String::new(),
                        path: path.display().to_string(),
                        size_bytes: bytes.len() as u64,
                        created_at: h.created_at,
                        reason: h.reason,
                        schema_version: h.schema_version,
                        binary_version: h.binary_version,
                        sha256: h.sha256,
                        secrets_included: h.secrets.included,
                    }
                }
                None => snapshot::write_into(&config.snapshot_dir, &bytes, now, &reason)?,
            };
            print_saved(&info, Some(&bytes));
        }
    }
    Ok(())
}

pub fn ls(config: &Config) -> Result<()> {
    println!(
        "{:<26} {:<12} {:>12} {:>6} {:<8} {:<7} file",
        "created", "reason", "bytes", "schema", "version", "secrets"
    );
    for s in snapshot::list(&config.snapshot_dir)? {
        println!(
            "{:<26} {:<12} {:>12} {:>6} {:<8} {:<7} {}",
            s.created_at,
            s.reason,
            s.size_bytes,
            s.schema_version,
            s.binary_version,
            if s.secrets_included { "yes" } else { "no" },
            s.path
        );
    }
    Ok(())
}

pub fn prune(config: &Config, keep: usize) -> Result<()> {
    let gone = snapshot::prune(&config.snapshot_dir, keep)?;
    if gone.is_empty() {
        println!("nothing to prune");
    }
    for s in gone {
        println!("deleted {}", s.path);
    }
    Ok(())
}

pub fn restore(config: &Config, file: &Path, passphrase_file: Option<&Path>, skip_secrets: bool) -> Result<()> {
    let now = Clock::system().now_ms();
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let checked = snapshot::format::decode(&bytes).with_context(|| format!("{} was not restored", file.display()))?;
    let pass = if checked.header.secrets.included && !skip_secrets {
        Some(super::prompt::passphrase(passphrase_file, false).context(
            "the snapshot holds encrypted secrets: give the passphrase, or --skip-secrets to restore the state only",
        )?)
    } else {
        None
    };
    let restored = match snapshot::restore(config, &bytes, pass.as_ref(), now) {
        Ok(r) => r,
        Err(SnapshotError::Locked) => bail!(
            "a running server holds {}; stop it (e.g. `systemctl stop gshare`), restore, then start it again. Nothing was changed",
            config.state_file().display()
        ),
        Err(e @ SnapshotError::RollbackFailed { .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "{} was not restored, and the data directory {} is NOT as it was",
                file.display(),
                config.data_dir.display()
            )));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context(format!("{} was not restored; the current state is untouched", file.display())));
        }
    };
    println!(
        "restored the state of {} (reason {}, schema {}, gshare {}) into {}",
        restored.header.created_at,
        restored.header.reason,
        restored.header.schema_version,
        restored.header.binary_version,
        config.state_file().display()
    );
    for p in &restored.set_aside {
        println!("kept the previous {} ", p.display());
    }
    if !restored.secrets_restored.is_empty() {
        println!("restored {} secret files (key rings, kubeconfigs)", restored.secrets_restored.len());
    }
    for w in &restored.warnings {
        eprintln!("warning: {w}");
    }
    println!(
        "on its next start the server re-probes every cluster and lists GShareSessions the restored state does not know (in its log and /readyz)"
    );
    Ok(())
}

/// `export`: the live state (or a snapshot file) as JSON lines, to `output` or stdout.
pub fn export(config: &Config, from: Option<&Path>, output: Option<&Path>) -> Result<()> {
    let bytes = match from {
        Some(f) => std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?,
        None => match live_snapshot(config, "export", true, None)? {
            Ok(b) => b,
            Err(_) => bail!("the server saved a snapshot instead of returning it"),
        },
    };
    let snap = snapshot::format::decode(&bytes)?;
    let counts = match output {
        Some(path) => {
            let mut buf = Vec::new();
            let counts = snapshot::export::write_json_lines(snap.state, &mut buf)?;
            snapshot::write_atomic(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()), &buf)?;
            counts
        }
        None => snapshot::export::write_json_lines(snap.state, &mut std::io::stdout().lock())?,
    };
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!("exported {} (state of {})", summary.join(", "), snap.header.created_at);
    Ok(())
}
