//! The accept loop: HTTP/1.1 and HTTP/2 over plain TCP or TLS (rustls, see [`super::tls`]) via
//! hyper, each connection watched so a shutdown lets in-flight requests finish (up to
//! `shutdown_grace`) before the process exits.
//!
//! Idle connections cost a file descriptor each, so they are bounded: a connection that sends no
//! complete request head within `request_head_timeout` is closed (also one that never sends a byte),
//! and at most `max_connections` are open at once — a new one over the cap closes the oldest
//! connection with no request in flight (and is refused only if every one is busy).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

/// Read buffer per connection: larger than [`super::middleware::MAX_HEADER_BYTES`] so oversized
/// headers reach the middleware and get a JSON 431 instead of a dropped connection.
const MAX_BUF: usize = 2 * 1024 * 1024;

/// A TLS handshake that has not finished by then is dropped (slowloris on the handshake).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2: a ping every interval; no answer within the timeout closes the connection.
const H2_KEEPALIVE: Duration = Duration::from_secs(30);

/// One open connection: requests in flight, and how to ask it to close.
#[derive(Default)]
struct Slot {
    in_flight: AtomicUsize,
    close: Notify,
}

/// Open connections by age (a counter, oldest first).
#[derive(Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, Arc<Slot>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connections {
    /// Makes room for one more under `cap` by closing the oldest idle connection; `None` when
    /// every open connection is busy (the new one is refused).
    fn admit(&mut self, cap: usize) -> Option<(u64, Arc<Slot>)> {
        while self.open.len() >= cap {
            let oldest_idle =
                self.open.iter().find(|(_, s)| s.in_flight.load(Ordering::Acquire) == 0).map(|(id, _)| *id)?;
            if let Some(slot) = self.open.remove(&oldest_idle) {
                slot.close.notify_one();
            }
        }
        let id = self.next;
        self.next += 1;
        let slot = Arc::new(Slot::default());
        self.open.insert(id, slot.clone());
        Some((id, slot))
    }
}

/// Limits of the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once (`max_connections`, further capped below the fd limit).
    pub max_connections: usize,
    /// `request_head_timeout`.
    pub head_timeout: Duration,
    pub grace: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains connections. With `tls`,
/// every connection is a TLS one; the certificate comes from the config's resolver per handshake.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    let (grace, head_timeout) = (limits.grace, limits.head_timeout);
    let cap = limits.max_connections.max(1);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().max_buf_size(MAX_BUF).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(head_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE)
        .keep_alive_timeout(head_timeout);
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Mutex::new(Connections::default()));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some((conn_id, slot)) = lock(&connections).admit(cap) else {
            tracing::debug!(%peer, cap, "connection refused: every open connection is busy");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counted = slot.clone();
        let router = router.clone();
        let svc = tower::service_fn(move |mut req: axum::http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            let in_flight = InFlight::enter(&counted);
            let call = router.clone().oneshot(req);
            async move {
                let res = call.await;
                drop(in_flight);
                res
            }
        });
        let builder = builder.clone();
        let acceptor = acceptor.clone();
        let watcher = graceful.watcher();
        let connections = connections.clone();
        tokio::spawn(async move {
            let served = async {
                // The protocol sniff (HTTP/1 or h2 preface) and the TLS handshake are not covered
                // by hyper's header timeout: a connection that never sends a byte ends here.
                match tokio::time::timeout(head_timeout, stream.peek(&mut [0u8; 1])).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        tracing::debug!(%peer, "connection sent nothing; closed");
                        return;
                    }
                }
                let Some(acceptor) = acceptor else {
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc));
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                };
                let tls_stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let conn =
                    builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), TowerToHyperService::new(svc));
                if let Err(e) = watcher.watch(conn.into_owned()).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            };
            tokio::select! {
                () = served => {}
                // Closed to make room under the cap: it was idle, so dropping it loses nothing.
                () = slot.close.notified() => tracing::debug!(%peer, "idle connection closed to make room"),
            }
            lock(&connections).open.remove(&conn_id);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            grace_s = grace.as_secs(),
            "connections still open after the shutdown grace period; closing them"
        );
    }
}

/// Counts a request in flight on its connection for as long as it lives.
struct InFlight(Arc<Slot>);

impl InFlight {
    fn enter(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(slot.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Raises the soft open-files limit to the hard one (each connection is a descriptor) and returns
/// the soft limit now in force; `None` where it cannot be read.
pub fn raise_fd_limit() -> Option<u64> {
    let (soft, hard) = rlimit::Resource::NOFILE.get().ok()?;
    if soft >= hard {
        return Some(soft);
    }
    // Only when there is something to raise: under the packaged unit soft = hard already (and
    // its system-call filter refuses setrlimit).
    match rlimit::increase_nofile_limit(hard) {
        Ok(now) => Some(now),
        Err(e) => {
            tracing::warn!(soft, hard, error = %e, "cannot raise the open-files limit");
            Some(soft)
        }
    }
}

/// Descriptors kept for everything but client connections (state file, kubeconfig watches,
/// outbound cluster connections, logs).
pub const FD_RESERVE: u64 = 128;

/// `max_connections`, lowered so that connections alone never exhaust the fd limit.
pub fn connection_cap(max_connections: u32, fd_limit: Option<u64>) -> usize {
    let by_fds = fd_limit.map_or(u64::MAX, |l| l.saturating_sub(FD_RESERVE).max(16));
    u64::from(max_connections).min(by_fds) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_makes_room() {
        let mut c = Connections::default();
        let (_, a) = c.admit(2).unwrap();
        let (_, b) = c.admit(2).unwrap();
        let _busy = InFlight::enter(&a);
        // a is busy, b is idle: b goes.
        let (_, _c3) = c.admit(2).unwrap();
        assert_eq!(c.open.len(), 2);
        assert!(Arc::strong_count(&b) == 1, "b was dropped from the table");
        // Everyone busy: refused.
        let _busy2 = InFlight::enter(&_c3);
        assert!(c.admit(2).is_none());
    }

    #[test]
    fn the_cap_stays_below_the_fd_limit() {
        assert_eq!(connection_cap(4096, Some(1024)), 1024 - FD_RESERVE as usize);
        assert_eq!(connection_cap(100, Some(65536)), 100);
        assert_eq!(connection_cap(100, None), 100);
    }
}
