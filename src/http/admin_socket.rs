//! The local admin socket, `<data_dir>/gshare.sock`: the same router as the TCP listener, reached
//! by the `gshare` command line on this host while the server runs, whatever `listen` says. The
//! socket file is 0600 in the 0700 data directory, so its permission is the authentication (as
//! kanidm's admin socket); the peer's uid is checked as well (SO_PEERCRED): only the socket's owner
//! (the server's user) and root are served. Every request carries a [`LocalPeer`], which the admin
//! guard accepts as the caller `local:<uid>`; validation and auditing are the handlers' own.

use std::future::Future;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{UnixListener, UnixStream};
use tower::ServiceExt;

/// The socket's file name in the data directory.
pub const SOCKET_FILE: &str = "gshare.sock";

/// Where the server of `data_dir` listens for its local admins.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_FILE)
}

/// A request extension: the request came over the admin socket from local user `uid`. Only this
/// module inserts it, so a TCP client cannot claim it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPeer {
    pub uid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "another gshare server answers on {path}: only one server may use the data directory {data_dir}; stop it \
         (e.g. `systemctl stop gshare`) or give this one another data_dir (GSHARE_DATA_DIR)"
    )]
    InUse { path: PathBuf, data_dir: PathBuf },
    #[error("{path} is in the way of the admin socket and is not a socket; move it away")]
    NotASocket { path: PathBuf },
    #[error("cannot listen on the admin socket {path}: {source}{hint}")]
    Bind { path: PathBuf, source: std::io::Error, hint: &'static str },
}

/// Whether a peer may use the socket: the socket's owner (the server's own user) or root.
pub fn admits(owner: u32, peer: u32) -> bool {
    peer == owner || peer == 0
}

/// The bound socket; its file goes when this is dropped (the server stopped or failed to start).
#[derive(Debug)]
pub struct AdminSocket {
    listener: UnixListener,
    path: PathBuf,
    owner: u32,
}

/// `sun_path` holds 108 bytes with its terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

impl AdminSocket {
    /// Binds `<data_dir>/gshare.sock`. The caller already holds the state file's lock, so a socket
    /// file that nobody answers on was left by a killed server and is replaced; one that answers
    /// belongs to a server on this data directory with another state file, and is refused.
    pub async fn bind(data_dir: &Path) -> Result<Self, SocketError> {
        let path = socket_path(data_dir);
        let bind_err = |source, hint| SocketError::Bind { path: path.clone(), source, hint };
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(bind_err(
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "path too long for a Unix socket"),
                " (at most 107 bytes: choose a shorter data_dir)",
            ));
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => match UnixStream::connect(&path).await {
                Ok(_) => {
                    return Err(SocketError::InUse { path: path.clone(), data_dir: absolute(data_dir) });
                }
                Err(_) => {
                    tracing::info!(path = %path.display(), "replacing the admin socket a stopped server left behind");
                    std::fs::remove_file(&path).map_err(|e| bind_err(e, ""))?;
                }
            },
            Ok(_) => return Err(SocketError::NotASocket { path }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(bind_err(e, "")),
        }
        let listener = UnixListener::bind(&path).map_err(|e| bind_err(e, ""))?;
        // Owner only. Until this runs the file has the umask's mode; the data directory (0700)
        // and the peer check below cover that moment.
        // From here a failure drops `socket`, which removes the file.
        let mut socket = Self { listener, path: path.clone(), owner: 0 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(|e| bind_err(e, ""))?;
        // The file's owner is this process's user: the one the peer check admits.
        socket.owner = std::fs::metadata(&path).map_err(|e| bind_err(e, ""))?.uid();
        Ok(socket)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves `router` to admitted peers until `shutdown` resolves, then lets in-flight requests
    /// finish for up to `grace`. `head_timeout` bounds a request head, as on the TCP listener.
    pub async fn serve(
        self,
        router: Router,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
        head_timeout: Duration,
    ) {
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let uid = match stream.peer_cred() {
                Ok(cred) => cred.uid(),
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket: no peer credentials; connection closed");
                    continue;
                }
            };
            if !admits(self.owner, uid) {
                tracing::warn!(uid, owner = self.owner, "admin socket: refused a connection from another local user");
                continue;
            }
            let router = router.clone();
            let svc = tower::service_fn(move |req: axum::http::Request<Incoming>| {
                let (mut parts, incoming) = req.into_parts();
                parts.extensions.insert(LocalPeer { uid });
                let req = axum::http::Request::from_parts(parts, axum::body::Body::new(incoming));
                router.clone().oneshot(req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(head_timeout)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
            let watched = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = watched.await {
                    tracing::debug!(uid, error = %e, "admin socket connection ended with an error");
                }
            });
        }
        // No new connections from here: the listener and its file go first.
        drop(self);
        if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
            tracing::warn!("admin socket: requests still running after the shutdown grace period");
        }
    }
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the admin socket");
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_and_root_are_admitted() {
        assert!(admits(1000, 1000));
        assert!(admits(1000, 0));
        assert!(!admits(1000, 1001));
        assert!(!admits(1000, 65534));
        assert!(admits(0, 0));
        assert!(!admits(0, 1000), "a server run as root admits no other user");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A killed server's leftover: a socket file nobody listens on.
        drop(std::os::unix::net::UnixListener::bind(socket_path(dir.path())).unwrap());
        assert!(socket_path(dir.path()).exists());
        let first = AdminSocket::bind(dir.path()).await.unwrap();
        let mode = std::fs::metadata(first.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = AdminSocket::bind(dir.path()).await.unwrap_err();
        assert!(matches!(e, SocketError::InUse { .. }), "{e}");
        assert!(e.to_string().contains(&dir.path().display().to_string()), "{e}");
        drop(first);
        assert!(!socket_path(dir.path()).exists(), "the file goes with the listener");
        std::fs::write(socket_path(dir.path()), b"not a socket").unwrap();
        assert!(matches!(AdminSocket::bind(dir.path()).await.unwrap_err(), SocketError::NotASocket { .. }));
    }
}
