//! Watches the kubeconfig directory: non-recursive watches on the directory and on each `<id>/`,
//! any event triggers a debounced rescan, and a periodic full rescan backs it up. Contents are
//! hashed, so events that change nothing do nothing. A changed kubeconfig of a registered cluster
//! rebuilds its client and re-probes it; a missing one marks the cluster unreachable; a directory
//! for an unknown id is logged once and listed as unclaimed, never registered automatically.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use super::registry::Clusters;
use super::{ClusterId, kubeconfig};

/// Quiet time after the last event before rescanning (a write-then-rename is several events).
const DEBOUNCE: Duration = Duration::from_millis(75);
/// Safety net for missed events (e.g. on filesystems without inotify).
const FULL_RESCAN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
enum FileState {
    Hash(String),
    Missing,
    Unreadable(String),
}

/// Starts the watcher task; it ends when `stop` turns true.
pub fn spawn(clusters: Arc<Clusters>, mut stop: watch::Receiver<bool>) -> Result<(), String> {
    let root = clusters.kubeconfig_dir();
    crate::auth::keys::create_private_dir(&root).map_err(|e| e.to_string())?;
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| format!("cannot watch {}: {e}", root.display()))?;
    watcher.watch(&root, RecursiveMode::NonRecursive).map_err(|e| format!("cannot watch {}: {e}", root.display()))?;
    tokio::spawn(async move {
        let mut watched: HashSet<PathBuf> = HashSet::new();
        let mut seen: HashMap<String, FileState> = HashMap::new();
        let mut tick = tokio::time::interval(FULL_RESCAN);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                got = rx.recv() => {
                    if got.is_none() { return; }
                    // Debounce: wait until events stop for a moment.
                    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
                }
                _ = tick.tick() => {}
                () = stopped(&mut stop) => return,
            }
            rescan(&clusters, &root, &mut watcher, &mut watched, &mut seen).await;
        }
    });
    Ok(())
}

/// Resolves once the server is stopping (the guard is dropped before returning, keeping the task `Send`).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await.map(|_| ());
}

fn file_state(root: &Path, id: &ClusterId) -> FileState {
    match kubeconfig::read_file(root, id) {
        Ok(Some((text, _))) => FileState::Hash(kubeconfig::content_hash(text.as_bytes())),
        Ok(None) => FileState::Missing,
        Err(p) => FileState::Unreadable(p.cause),
    }
}

async fn rescan(
    clusters: &Arc<Clusters>,
    root: &Path,
    watcher: &mut notify::RecommendedWatcher,
    watched: &mut HashSet<PathBuf>,
    seen: &mut HashMap<String, FileState>,
) {
    let ids = match clusters.live_ids().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::error!(error = %e, "kubeconfig rescan: cannot list clusters");
            return;
        }
    };
    let root_owned = root.to_path_buf();
    let ids_for_fs = ids.clone();
    let scanned = tokio::task::spawn_blocking(move || {
        let dirs: Vec<(String, PathBuf)> = std::fs::read_dir(&root_owned)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect()
            })
            .unwrap_or_default();
        let states: Vec<(ClusterId, FileState)> = ids_for_fs
            .into_iter()
            .filter(|id| !id.is_local())
            .map(|id| (id.clone(), file_state(&root_owned, &id)))
            .collect();
        (dirs, states)
    })
    .await;
    let Ok((dirs, states)) = scanned else { return };

    let live: HashSet<String> = ids.iter().map(ToString::to_string).collect();
    let mut present = HashSet::new();
    for (name, path) in &dirs {
        if name.starts_with('.') {
            continue;
        }
        if !watched.contains(path) {
            match watcher.watch(path, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    watched.insert(path.clone());
                }
                Err(e) => tracing::warn!(dir = %path.display(), error = %e, "cannot watch kubeconfig directory"),
            }
        }
        if !live.contains(name) && !clusters.is_registering(name) {
            present.insert(name.clone());
            let reason = match ClusterId::parse(name) {
                Ok(_) => "no registered cluster has this id",
                Err(_) => "not a cluster id",
            };
            clusters.note_unclaimed(name, reason);
        }
    }
    clusters.forget_unclaimed_except(&present);
    watched.retain(|p| {
        let keep = p.exists();
        if !keep {
            let _ = watcher.unwatch(p);
        }
        keep
    });

    for (id, state) in states {
        if clusters.is_registering(id.as_str()) {
            continue;
        }
        // Re-probe when the file changed since the last scan; on first sight, only when the cached
        // client was not built from exactly this content (e.g. after a restart).
        let unchanged = match seen.get(id.as_str()) {
            Some(previous) => previous == &state,
            None => {
                matches!(&state, FileState::Hash(h) if clusters.cached_hash(id.as_str()).as_deref() == Some(h.as_str()))
            }
        };
        seen.insert(id.to_string(), state);
        if unchanged {
            continue;
        }
        if let Err(e) = clusters.reprobe(&id).await {
            tracing::warn!(cluster_id = %id, error = %e, "re-probe after kubeconfig change failed");
        }
    }
}
