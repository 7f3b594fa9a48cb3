//! The accept loop: HTTP/1.1 and HTTP/2 over plain TCP or TLS (rustls, see [`super::tls`]) via
//! hyper, each connection watched so a shutdown lets in-flight requests finish (up to
//! `shutdown_grace`) before the process exits.
//!
//! Connections cost a file descriptor and memory each, so they are bounded:
//! - a connection that sends no complete request head within `request_head_timeout` is closed
//!   (also one that never sends a byte); bodies have their own deadline and minimum rate
//!   ([`super::body`]);
//! - at most `max_connections` are open at once, and at most `max_connections_per_address` from
//!   one client address (an IPv6 /64 counts as one; `trusted_proxies` are exempt): a new one over
//!   either cap closes the oldest connection with no request in flight (of that address, for the
//!   per-address cap) and is refused only if every one is busy;
//! - beyond `max_connections`, [`HEALTH_RESERVE`] more connections are let in that answer only
//!   `/healthz` and `/readyz` (503 `server_busy` otherwise), so monitoring still gets an answer
//!   while every slot is taken. A plain-HTTP connection accepted then is admitted by what its first
//!   bytes ask for: when they have not arrived yet it waits for them outside the table (at most
//!   [`EVICT_GRACE`], [`PENDING_MAX`] at once, [`PENDING_PER_ADDRESS`] per address), so a probe that
//!   has connected but not yet written is neither refused nor closed by a storm's connections;
//!   answered idle connections are closed before ones that have not had their first request;
//! - an HTTP/2 connection carries at most [`H2_MAX_STREAMS`] streams at once, and its bodies share
//!   one budget of buffered bytes.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

use super::body::{self, Budgets, ConnectionBudget, Mode};
use super::client_addr::{self, ProxyTrust};
use super::timer::{ConnectionTimer, Deadline, Deadlines};
use crate::locks::lock;

/// Read buffer per connection: larger than [`super::middleware::MAX_HEADER_BYTES`] so oversized
/// headers reach the middleware and get a JSON 431 instead of a dropped connection.
const MAX_BUF: usize = 2 * 1024 * 1024;

/// A TLS handshake that has not finished by then is dropped (slowloris on the handshake).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2: a ping every interval; no answer within the timeout closes the connection.
const H2_KEEPALIVE: Duration = Duration::from_secs(30);

/// HTTP/2: streams open at once on one connection (hyper's default is 200; each may hold a body).
pub const H2_MAX_STREAMS: u32 = 64;
/// HTTP/2: streams a client may open and reset before we accept them, and resets our errors
/// may cause, before the connection is closed (rapid-reset floods).
const H2_MAX_PENDING_RESETS: usize = 32;
const H2_MAX_LOCAL_ERROR_RESETS: usize = 256;
/// HTTP/2: flow-control windows, which bound what a client may send before we read it.
const H2_STREAM_WINDOW: u32 = 256 * 1024;
const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// HTTP/2: the largest header block (HPACK-decoded) a request may send; CONTINUATION floods end
/// at this size.
const H2_MAX_HEADER_LIST: u32 = 128 * 1024;

/// Connections let in beyond `max_connections` for `/healthz` and `/readyz` only.
pub const HEALTH_RESERVE: usize = 16;

/// How many of the [`HEALTH_RESERVE`] one client address may hold: a storm from one address
/// cannot take the whole reserve from a monitor elsewhere.
const RESERVE_PER_ADDRESS: usize = 4;

/// A connection that has not yet had a request is not closed to make room until it is this old:
/// a new client (a health probe above all) gets the time to send its first request head instead
/// of being evicted by the next connection of a storm. A slow head is evictable after it.
const EVICT_GRACE: Duration = Duration::from_millis(250);

/// A reserve connection whose first bytes ask for `/healthz` or `/readyz` keeps its place this
/// long until it is answered (a probe on a loaded machine may wait for its task to run); one that
/// asks for anything else is evictable at once (it gets a 503 anyway).
const HEALTH_GRACE: Duration = Duration::from_secs(1);

/// Connections accepted while every regular slot is taken whose first bytes have not arrived yet
/// wait (for at most [`EVICT_GRACE`]) outside the table until they say what they ask for: a probe
/// then takes a place in the health reserve, anything else only a place that is free or idle. At
/// most this many wait at once (the oldest gives way to a newer one)…
const PENDING_MAX: usize = 1024;

/// …and at most this many from one client address (more are refused).
const PENDING_PER_ADDRESS: usize = 8;

/// What a reserve connection's first bytes were ([`Slot::head`]).
const HEAD_UNKNOWN: u8 = 0;
const HEAD_HEALTH: u8 = 1;
const HEAD_OTHER: u8 = 2;
/// What [`peek_head_kind`] answers when the connection ended before saying.
const HEAD_CLOSED: u8 = 3;

/// The request lines of the health paths, as a plain HTTP/1 probe sends them.
const HEALTH_HEADS: &[&[u8]] = &[b"GET /healthz", b"GET /readyz", b"HEAD /healthz", b"HEAD /readyz"];

/// [`HEAD_HEALTH`] or [`HEAD_OTHER`] for a head starting with `peeked`; `None` while it could
/// still be either.
fn classify_head(peeked: &[u8]) -> Option<u8> {
    let next_is_end = |h: &[u8]| matches!(peeked.get(h.len()), Some(b' ' | b'?'));
    if HEALTH_HEADS.iter().any(|h| peeked.starts_with(h) && next_is_end(h)) {
        return Some(HEAD_HEALTH);
    }
    let may_become = HEALTH_HEADS.iter().any(|h| {
        let n = peeked.len().min(h.len());
        peeked[..n] == h[..n] && (peeked.len() <= h.len())
    });
    if may_become { None } else { Some(HEAD_OTHER) }
}

/// A request extension: this connection is one of the [`HEALTH_RESERVE`]; it is answered only on
/// the health paths.
#[derive(Debug, Clone, Copy)]
pub struct ReserveConnection;

/// One open connection: requests in flight, and how to ask it to close. A connection handed over
/// by an upgrade (a relayed WebSocket) is `held` by its tunnel: it stays counted, and busy, until
/// the tunnel ends, though hyper is done with it.
struct Slot {
    in_flight: AtomicUsize,
    held: AtomicUsize,
    ended: std::sync::atomic::AtomicBool,
    /// A request has entered (see [`EVICT_GRACE`]).
    served: std::sync::atomic::AtomicBool,
    /// A reserve connection's first bytes: [`HEAD_UNKNOWN`], [`HEAD_HEALTH`] or [`HEAD_OTHER`].
    head: std::sync::atomic::AtomicU8,
    opened: Instant,
    close: Notify,
}

impl Slot {
    fn new(opened: Instant) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            ended: std::sync::atomic::AtomicBool::new(false),
            served: std::sync::atomic::AtomicBool::new(false),
            head: std::sync::atomic::AtomicU8::new(HEAD_UNKNOWN),
            opened,
            close: Notify::new(),
        }
    }
}

/// One open connection in the table: its slot, the address it counts against (none when exempt)
/// and whether it is one of the health reserve.
struct Open {
    slot: Arc<Slot>,
    address: Option<IpAddr>,
    reserve: bool,
}

/// Connections waiting for their first bytes before admission (see [`PENDING_MAX`]), oldest
/// first, each with how to tell it to give up its place.
#[derive(Default)]
struct Pending {
    next: u64,
    waiting: BTreeMap<u64, (Option<IpAddr>, Arc<Notify>)>,
    per_address: HashMap<IpAddr, usize>,
}

impl Pending {
    /// A place to wait for a connection from `address` (`None`: exempt from the per-address
    /// cap); `None` when its address has [`PENDING_PER_ADDRESS`] waiting already. When
    /// [`PENDING_MAX`] wait, the oldest is told to give up its place.
    fn enter(&mut self, address: Option<IpAddr>) -> Option<(u64, Arc<Notify>)> {
        if let Some(a) = address
            && self.per_address.get(&a).copied().unwrap_or(0) >= PENDING_PER_ADDRESS
        {
            return None;
        }
        while self.waiting.len() >= PENDING_MAX {
            let Some((&oldest, _)) = self.waiting.iter().next() else { break };
            self.leave(oldest);
        }
        let id = self.next;
        self.next += 1;
        let give_up = Arc::new(Notify::new());
        self.waiting.insert(id, (address, give_up.clone()));
        if let Some(a) = address {
            count_up(&mut self.per_address, a);
        }
        Some((id, give_up))
    }

    /// Ends `id`'s wait (told to give up if it is still waiting).
    fn leave(&mut self, id: u64) {
        let Some((address, give_up)) = self.waiting.remove(&id) else { return };
        give_up.notify_one();
        if let Some(a) = address {
            count_down(&mut self.per_address, a);
        }
    }
}

/// Open connections by age (a counter, oldest first), and how many each address holds.
#[derive(Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, Open>,
    regular: usize,
    reserve: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Reserve connections per address (at most [`RESERVE_PER_ADDRESS`] each).
    reserve_per_address: HashMap<IpAddr, usize>,
    /// Connections not admitted yet, waiting for their first bytes.
    pending: Pending,
}

/// The key a client address counts under: IPv4 as is, IPv6 by its /64 (one host's share of a
/// network; a client picks any address in it).
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// Caps of [`Connections::admit`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    total: usize,
    per_address: usize,
    reserve: usize,
}

/// Adds one to `key`'s count.
fn count_up(counts: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    *counts.entry(key).or_insert(0) += 1;
}

/// Takes one from `key`'s count, forgetting it at zero.
fn count_down(counts: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = counts.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&key);
        }
    }
}

impl Connections {
    /// Idle (no request in flight, no tunnel) and either served once or past its grace: a
    /// health probe's [`HEALTH_GRACE`], nothing for a reserve connection asking for anything
    /// else, [`EVICT_GRACE`] for a head not seen yet.
    fn evictable(open: &Open, now: Instant) -> bool {
        let slot = &open.slot;
        let age = now.saturating_duration_since(slot.opened);
        let grace = match slot.head.load(Ordering::Acquire) {
            HEAD_HEALTH => HEALTH_GRACE,
            HEAD_OTHER => Duration::ZERO,
            _ => EVICT_GRACE,
        };
        slot.in_flight.load(Ordering::Acquire) == 0
            && slot.held.load(Ordering::Acquire) == 0
            && (slot.served.load(Ordering::Acquire) || age >= grace)
    }

    /// Closes the oldest evictable connection that `pick` accepts, an idle one that has been
    /// answered before one that has not had a request yet (a client that just connected, a
    /// probe above all, may still be waiting for its task to read its head); false when there is
    /// none.
    fn close_oldest_idle(&mut self, now: Instant, pick: impl Fn(&Open) -> bool) -> bool {
        self.close_oldest(|o| pick(o) && o.slot.served.load(Ordering::Acquire) && Self::evictable(o, now))
            || self.close_oldest(|o| pick(o) && Self::evictable(o, now))
    }

    /// Closes the oldest connection that `pick` accepts; false when there is none.
    fn close_oldest(&mut self, pick: impl Fn(&Open) -> bool) -> bool {
        let Some(id) = self.open.iter().find(|(_, o)| pick(o)).map(|(id, _)| *id) else {
            return false;
        };
        self.remove(id);
        true
    }

    fn remove(&mut self, id: u64) {
        let Some(o) = self.open.remove(&id) else { return };
        o.slot.close.notify_one();
        if o.reserve {
            self.reserve -= 1;
        } else {
            self.regular -= 1;
        }
        if let Some(a) = o.address {
            count_down(&mut self.per_address, a);
            if o.reserve {
                count_down(&mut self.reserve_per_address, a);
            }
        }
    }

    /// Counts a tunnel's upstream connection as one more regular connection of `address` (a
    /// tunnel is busy for as long as it lives: never closed as idle, so it needs no entry of its
    /// own in `open`), making room as [`Self::admit`] does; never in the health reserve.
    fn admit_upstream(&mut self, address: Option<IpAddr>, caps: Caps, now: Instant) -> Result<(), NoRoom> {
        if !self.room_for_address(address, caps, now) {
            return Err(NoRoom::Address(caps.per_address));
        }
        while self.regular >= caps.total {
            if !self.close_oldest_idle(now, |o| !o.reserve) {
                return Err(NoRoom::Server);
            }
        }
        self.regular += 1;
        if let Some(a) = address {
            count_up(&mut self.per_address, a);
        }
        Ok(())
    }

    /// Closes `address`'s oldest idle connections until it holds fewer than its cap (`None`:
    /// exempt); false when it is full of busy ones.
    fn room_for_address(&mut self, address: Option<IpAddr>, caps: Caps, now: Instant) -> bool {
        let Some(a) = address else { return true };
        while self.per_address.get(&a).copied().unwrap_or(0) >= caps.per_address {
            if !self.close_oldest_idle(now, |o| o.address == Some(a)) {
                return false;
            }
        }
        true
    }

    /// Gives back what [`Self::admit_upstream`] counted.
    fn leave_upstream(&mut self, address: Option<IpAddr>) {
        self.regular -= 1;
        if let Some(a) = address {
            count_down(&mut self.per_address, a);
        }
    }

    /// Makes room for one more connection from `address` (`None`: exempt from the per-address
    /// cap) whose first bytes were `head` (see [`classify_head`]) by closing the oldest evictable
    /// one; `None` when it must be refused. The answer says whether the connection is one of the
    /// health reserve. When the reserve is full of connections still within their grace, a
    /// newcomer that may be a probe closes the oldest whose head is not known yet (never one
    /// known to be a probe); one known to be no probe is refused instead.
    fn admit(&mut self, address: Option<IpAddr>, caps: Caps, now: Instant, head: u8) -> Option<(u64, Arc<Slot>, bool)> {
        if !self.room_for_address(address, caps, now) {
            return None;
        }
        let mut reserve = false;
        while self.regular >= caps.total {
            if !self.close_oldest_idle(now, |o| !o.reserve) {
                // Every regular connection is busy: the health reserve. An address at its share
                // of it makes room from its own; otherwise the oldest evictable one goes.
                if let Some(a) = address {
                    while self.reserve_per_address.get(&a).copied().unwrap_or(0)
                        >= RESERVE_PER_ADDRESS.min(caps.reserve)
                    {
                        if !self.close_oldest_idle(now, |o| o.reserve && o.address == Some(a)) {
                            return None;
                        }
                    }
                }
                while self.reserve >= caps.reserve {
                    if self.close_oldest_idle(now, |o| o.reserve) {
                        continue;
                    }
                    let unknown_head = |o: &Open| {
                        o.reserve
                            && o.slot.head.load(Ordering::Acquire) == HEAD_UNKNOWN
                            && o.slot.in_flight.load(Ordering::Acquire) == 0
                            && o.slot.held.load(Ordering::Acquire) == 0
                    };
                    if head == HEAD_OTHER || !self.close_oldest(unknown_head) {
                        return None;
                    }
                }
                reserve = true;
                break;
            }
        }
        let id = self.next;
        self.next += 1;
        let slot = Arc::new(Slot::new(now));
        slot.head.store(head, Ordering::Release);
        self.open.insert(id, Open { slot: slot.clone(), address, reserve });
        if reserve {
            self.reserve += 1;
        } else {
            self.regular += 1;
        }
        if let Some(a) = address {
            count_up(&mut self.per_address, a);
            if reserve {
                count_up(&mut self.reserve_per_address, a);
            }
        }
        Some((id, slot, reserve))
    }
}

/// The connection a request came on: who sent it, whether it is a reserve connection, and what
/// a handler that takes the connection over needs (the relay's WebSocket tunnels, see
/// [`ConnectionTicket::tunnel`]). One per connection, which each of its requests clones: the
/// table's reference count is not written per request. A request extension on routed requests;
/// the relay's handle holds its connection's (see [`HandleMaker`]).
#[derive(Clone)]
pub struct ConnectionTicket(Arc<Ticket>);

struct Ticket {
    table: Arc<Mutex<Connections>>,
    id: u64,
    slot: Arc<Slot>,
    peer: SocketAddr,
    address: Option<IpAddr>,
    reserve: bool,
    caps: Caps,
    /// The timer of handlers' answer deadlines (the relay's) on this connection.
    answers: Arc<Deadlines>,
}

impl ConnectionTicket {
    fn new(ticket: Ticket) -> Self {
        Self(Arc::new(ticket))
    }

    /// The address the connection comes from (the peer of the socket).
    pub fn peer(&self) -> SocketAddr {
        self.0.peer
    }

    /// One of the connections let in beyond `max_connections` for health probes only.
    pub fn reserve(&self) -> bool {
        self.0.reserve
    }

    /// Ready at `at`: a handler's deadline for an answer it waits for, on the timer this
    /// connection keeps for them (see `super::timer`).
    pub fn deadline(&self, at: Instant) -> Deadline {
        self.0.answers.until(at)
    }
}

/// Why a tunnel was refused: which cap is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// Every connection slot of the server is busy (`max_connections`).
    Server,
    /// The client's address has as many busy connections as it may (`max_connections_per_address`,
    /// the number carried); each tunnel holds two.
    Address(usize),
}

impl ConnectionTicket {
    /// Keeps this connection counted against `max_connections` and its address's cap while a
    /// tunnel uses it after the upgrade, and counts the tunnel's second descriptor (the upstream
    /// connection) as one more connection of the same address. `Err` when there is no room for it.
    pub fn tunnel(&self) -> Result<Tunnel, NoRoom> {
        let this = &self.0;
        lock(&this.table).admit_upstream(this.address, this.caps, Instant::now())?;
        this.slot.held.fetch_add(1, Ordering::AcqRel);
        Ok(Tunnel { ticket: self.clone() })
    }
}

/// A relayed tunnel's places in the connection table (its upstream connection's, and its client
/// connection kept); given back when dropped.
pub struct Tunnel {
    ticket: ConnectionTicket,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let ticket = &self.ticket.0;
        let mut table = lock(&ticket.table);
        table.leave_upstream(ticket.address);
        let slot = &ticket.slot;
        if slot.held.fetch_sub(1, Ordering::AcqRel) == 1 && slot.ended.load(Ordering::Acquire) {
            table.remove(ticket.id);
        }
    }
}

/// Limits of the accept loop.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once (`max_connections`, further capped below the fd limit).
    pub max_connections: usize,
    /// `max_connections_per_address`.
    pub max_connections_per_address: usize,
    /// `request_head_timeout`.
    pub head_timeout: Duration,
    pub grace: Duration,
    /// How the client address of a request is found (`trusted_proxy_hops`, `trusted_proxies`);
    /// the trusted proxies' own connections are exempt from the per-address cap.
    pub proxy_hops: u32,
    pub trusted_proxies: Arc<[IpNet]>,
    /// The process's body budgets, shared by every listener.
    pub bodies: Arc<Budgets>,
}

impl Limits {
    pub fn from_config(config: &crate::config::Config, fd_limit: Option<u64>, bodies: Arc<Budgets>) -> Self {
        let max_connections = connection_cap(config.max_connections, fd_limit);
        Self {
            max_connections,
            max_connections_per_address: (config.max_connections_per_address as usize).clamp(1, max_connections),
            head_timeout: config.request_head_timeout,
            grace: config.shutdown_grace,
            proxy_hops: config.trusted_proxy_hops,
            trusted_proxies: config.trusted_proxies.clone().into(),
            bodies,
        }
    }
}

/// A listener on `addr` (`SO_REUSEADDR`, as `TcpListener::bind` sets it) whose connections
/// are `TCP_NODELAY`: on Linux an accepted connection takes it from the listener, so no
/// `setsockopt` is made per connection.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains connections. With `tls`,
/// every connection is a TLS one; the certificate comes from the config's resolver per handshake.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) {
    let grace = limits.grace;
    let caps = Caps {
        total: limits.max_connections.max(1),
        per_address: limits.max_connections_per_address.max(1),
        reserve: HEALTH_RESERVE,
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .max_buf_size(MAX_BUF)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.head_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(H2_KEEPALIVE)
        .keep_alive_timeout(limits.head_timeout)
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESETS)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_header_list_size(H2_MAX_HEADER_LIST);
    let shared = Arc::new(Shared {
        routes,
        builder,
        acceptor: tls.map(tokio_rustls::TlsAcceptor::from),
        connections: Arc::new(Mutex::new(Connections::default())),
        caps,
        head_timeout: limits.head_timeout,
        bodies: limits.bodies.clone(),
        trusted: limits.trusted_proxies.clone(),
        hops: limits.proxy_hops,
    });
    let graceful = GracefulShutdown::new();
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
        let exempt = shared.trusted.iter().any(|net| net.contains(&peer.ip()));
        let address = (!exempt).then_some(address_key(peer.ip()));
        // Every regular slot taken: whether this one may take a place in the health reserve
        // depends on what it asks for (plain HTTP only; TLS hides it until the handshake).
        // Usually there is room, and it is taken under the same lock.
        let admitted = {
            let mut table = lock(&shared.connections);
            let waits_for_head = table.regular >= caps.total && shared.acceptor.is_none();
            (!waits_for_head).then(|| table.admit(address, caps, Instant::now(), HEAD_UNKNOWN))
        };
        // Its first bytes, if they are here already…
        let (stream, head) = if admitted.is_none() {
            match peek_now(stream) {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "connection lost before it was admitted");
                    continue;
                }
            }
        } else {
            (stream, HEAD_UNKNOWN)
        };
        if admitted.is_some() || head != HEAD_UNKNOWN {
            let admitted = match admitted {
                Some(admitted) => admitted,
                None => lock(&shared.connections).admit(address, caps, Instant::now(), head),
            };
            let Some((id, slot, reserve)) = admitted else {
                tracing::debug!(%peer, ?caps, "connection refused: every open connection is busy");
                continue;
            };
            tokio::spawn(serve_connection(
                shared.clone(),
                graceful.watcher(),
                stream,
                peer,
                address,
                id,
                slot,
                reserve,
            ));
            continue;
        }
        // …or wait for them outside the table: a probe that connected but has not written yet
        // must not lose a place to (or be closed for) a storm's connections.
        let Some((wait_id, give_up)) = lock(&shared.connections).pending.enter(address) else {
            tracing::debug!(%peer, "connection refused: its address has too many waiting for their first bytes");
            continue;
        };
        let watcher = graceful.watcher();
        let shared = shared.clone();
        tokio::spawn(async move {
            let head = tokio::select! {
                head = tokio::time::timeout(EVICT_GRACE, peek_head_kind(&stream)) => head.unwrap_or(HEAD_UNKNOWN),
                () = give_up.notified() => {
                    tracing::debug!(%peer, "connection waiting for its first bytes closed to make room");
                    return;
                }
            };
            let admitted = {
                let mut table = lock(&shared.connections);
                table.pending.leave(wait_id);
                if head == HEAD_CLOSED { None } else { table.admit(address, caps, Instant::now(), head) }
            };
            let Some((id, slot, reserve)) = admitted else {
                tracing::debug!(%peer, ?caps, "connection refused: every open connection is busy");
                return;
            };
            serve_connection(shared, watcher, stream, peer, address, id, slot, reserve).await;
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

/// A handler the listeners call directly, without a router (the relay's: `crate::http::relay_handle`).
pub type Handle =
    Arc<dyn Fn(axum::extract::Request) -> futures::future::BoxFuture<'static, axum::response::Response> + Send + Sync>;

/// Makes a connection's own [`Handle`] when it opens, for that connection: the state its requests
/// take a reference to is then counted per connection, not in one count every core writes per
/// request, and its requests need no extensions to say where they came from.
pub type HandleMaker = Arc<dyn Fn(&ConnectionTicket) -> Handle + Send + Sync>;

/// Where a listener's requests go: `/proxy/…` (the sessions' data plane) to `relay`, everything
/// else to `all` (`crate::http::router` and `crate::http::relay_handle`).
#[derive(Clone)]
pub struct Routes {
    pub all: Router,
    pub relay: HandleMaker,
}

impl From<Router> for Routes {
    /// One router for every request.
    fn from(router: Router) -> Self {
        let relay = router.clone();
        let maker: HandleMaker = Arc::new(move |ticket: &ConnectionTicket| {
            let (relay, ticket) = (relay.clone(), ticket.clone());
            Arc::new(move |mut req: axum::extract::Request| {
                with_connection(req.extensions_mut(), &ticket);
                let call = relay.clone().oneshot(req);
                Box::pin(async move {
                    match call.await {
                        Ok(res) => res,
                        Err(never) => match never {},
                    }
                })
            })
        });
        Self { relay: maker, all: router }
    }
}

/// The extensions a routed request carries: where it came from ([`ConnectInfo`]), its
/// connection ([`ConnectionTicket`]) and, on a reserve connection, [`ReserveConnection`].
fn with_connection(extensions: &mut axum::http::Extensions, ticket: &ConnectionTicket) {
    extensions.insert(ConnectInfo::<SocketAddr>(ticket.peer()));
    if ticket.reserve() {
        extensions.insert(ReserveConnection);
    }
    extensions.insert(ticket.clone());
}

/// What the connections of one listener share.
struct Shared {
    routes: Routes,
    builder: auto::Builder<TokioExecutor>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    connections: Arc<Mutex<Connections>>,
    caps: Caps,
    head_timeout: Duration,
    bodies: Arc<Budgets>,
    trusted: Arc<[IpNet]>,
    hops: u32,
}

/// Serves one admitted connection (`id` in the table, counted under `address`) until it ends or
/// is closed to make room, then gives its place back.
#[allow(clippy::too_many_arguments)]
async fn serve_connection(
    shared: Arc<Shared>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    address: Option<IpAddr>,
    id: u64,
    slot: Arc<Slot>,
    reserve: bool,
) {
    // Linux gives an accepted connection the listener's TCP_NODELAY (see [`bind`]).
    #[cfg(not(target_os = "linux"))]
    let _ = stream.set_nodelay(true);
    let counted = slot.clone();
    // What each request of the connection gets a reference to is made once here: per-connection
    // reference counts are written by one core at a time, the listener's by every core at once.
    let connection_budget = ConnectionBudget::new(shared.bodies.clone());
    let ticket = ConnectionTicket::new(Ticket {
        table: shared.connections.clone(),
        id,
        slot: slot.clone(),
        peer,
        address,
        reserve,
        caps: shared.caps,
        answers: Deadlines::new(),
    });
    let relay = (shared.routes.relay)(&ticket);
    let on_request = shared.clone();
    let svc = tower::service_fn(move |req: axum::http::Request<Incoming>| {
        let shared = &on_request;
        let (mut parts, incoming) = req.into_parts();
        let relayed = parts.uri.path().starts_with("/proxy/");
        // A request without a body (most) has nothing to watch: no bytes to count or wait for.
        let (body, charge) = if incoming.is_end_stream() {
            (axum::body::Body::new(incoming), None)
        } else {
            let mode = if relayed { Mode::Streamed } else { Mode::Buffered };
            let trust = ProxyTrust { hops: shared.hops, trusted: &shared.trusted };
            let client = client_addr::resolve(trust, peer.ip(), &parts.headers);
            let (watched_body, watched) = body::watch(incoming, mode, address_key(client), &connection_budget);
            parts.extensions.insert(watched.watch);
            (axum::body::Body::new(watched_body), Some(watched.charge))
        };
        // The relay's handle knows its connection; routed requests carry it.
        if !relayed {
            with_connection(&mut parts.extensions, &ticket);
        }
        let req = axum::http::Request::from_parts(parts, body);
        let in_flight = InFlight::enter(&counted);
        let call = if relayed {
            futures::future::Either::Left(relay(req))
        } else {
            futures::future::Either::Right(shared.routes.all.clone().oneshot(req))
        };
        async move {
            let res = match call {
                futures::future::Either::Left(relayed) => Ok(relayed.await),
                futures::future::Either::Right(routed) => routed.await,
            };
            // The request has been answered: its buffered bytes go back to the budgets.
            drop(charge);
            drop(in_flight);
            res
        }
    });
    let served = async {
        // The protocol sniff (HTTP/1 or h2 preface) and the TLS handshake are not covered by
        // hyper's header timeout: a connection that never sends a byte ends here. Plain HTTP: what
        // the first bytes ask for, seen in passing — a probe keeps its place until answered.
        let mut first = [0u8; 16];
        match tokio::time::timeout(shared.head_timeout, stream.peek(&mut first)).await {
            Ok(Ok(n)) if n > 0 => {
                if shared.acceptor.is_none()
                    && slot.head.load(Ordering::Acquire) == HEAD_UNKNOWN
                    && let Some(kind) = classify_head(&first[..n])
                {
                    slot.head.store(kind, Ordering::Release);
                }
            }
            Ok(_) => return,
            Err(_) => {
                tracing::debug!(%peer, "connection sent nothing; closed");
                return;
            }
        }
        if reserve && shared.acceptor.is_none() && slot.head.load(Ordering::Acquire) == HEAD_UNKNOWN {
            // A health probe keeps its place until answered; anything else may be closed at once
            // to make room for one (TLS: not known before the handshake).
            let kind = match tokio::time::timeout(EVICT_GRACE, peek_head_kind(&stream)).await {
                Ok(HEAD_CLOSED) => return,
                Ok(kind) => kind,
                Err(_) => HEAD_UNKNOWN,
            };
            slot.head.store(kind, Ordering::Release);
        }
        // The request-head timeouts on a timer the connection keeps (see `super::timer`).
        let mut builder = shared.builder.clone();
        builder.http1().timer(ConnectionTimer::default());
        let Some(acceptor) = shared.acceptor.clone() else {
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(svc));
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
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), TowerToHyperService::new(svc));
        if let Err(e) = watcher.watch(conn.into_owned()).await {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    };
    tokio::select! {
        () = served => {}
        // Closed to make room under a cap: it was idle, so dropping it loses nothing.
        () = slot.close.notified() => tracing::debug!(%peer, "idle connection closed to make room"),
    }
    let mut table = lock(&shared.connections);
    // A tunnel still using the connection removes it when it ends.
    slot.ended.store(true, Ordering::Release);
    if slot.held.load(Ordering::Acquire) == 0 {
        table.remove(id);
    }
}

/// Looks at what a just-accepted connection has sent so far, without waiting and without taking
/// it (MSG_PEEK through the std socket: tokio's own peek waits for the reactor's readiness).
fn peek_now(stream: tokio::net::TcpStream) -> std::io::Result<(tokio::net::TcpStream, u8)> {
    let std_stream = stream.into_std()?;
    let mut buf = [0u8; 16];
    let head = match std_stream.peek(&mut buf) {
        Ok(n) if n > 0 => classify_head(&buf[..n]).unwrap_or(HEAD_UNKNOWN),
        _ => HEAD_UNKNOWN,
    };
    Ok((tokio::net::TcpStream::from_std(std_stream)?, head))
}

/// Peeks at a connection's first bytes (without taking them) until they say whether it is a
/// health probe: [`HEAD_HEALTH`], [`HEAD_OTHER`], or [`HEAD_CLOSED`] when it ends first. Callers
/// bound the wait.
async fn peek_head_kind(stream: &tokio::net::TcpStream) -> u8 {
    let mut buf = [0u8; 16];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(n) if n > 0 => n,
            _ => return HEAD_CLOSED,
        };
        if let Some(kind) = classify_head(&buf[..n]) {
            return kind;
        }
        // Part of a head that may still be a probe's: look again shortly (peek returns at once
        // while the same bytes wait).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Counts a request in flight on its connection for as long as it lives.
struct InFlight(Arc<Slot>);

impl InFlight {
    fn enter(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        slot.served.store(true, Ordering::Release);
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

    const CAPS: Caps = Caps { total: 2, per_address: 100, reserve: 1 };

    thread_local! {
        static CLOCK: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    }

    /// A clock a second further on at each call: every connection admitted before is past
    /// [`EVICT_GRACE`].
    fn tick() -> Instant {
        CLOCK.with(|c| {
            let next = c.get().map_or_else(Instant::now, |t| t + Duration::from_secs(1));
            c.set(Some(next));
            next
        })
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn the_oldest_idle_connection_makes_room() {
        let mut c = Connections::default();
        let (_, a, _) = c.admit(ip(1), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        let (_, b, _) = c.admit(ip(1), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        let _busy = InFlight::enter(&a);
        // a is busy, b is idle: b goes.
        let (_, c3, reserve) = c.admit(ip(2), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        assert!(!reserve);
        assert_eq!(c.open.len(), 2);
        assert!(Arc::strong_count(&b) == 1, "b was dropped from the table");
        // Everyone busy: one more is let in as the health reserve, then refused.
        let _busy2 = InFlight::enter(&c3);
        let (_, r, reserve) = c.admit(ip(3), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        assert!(reserve, "beyond the cap: the health reserve");
        let _busy3 = InFlight::enter(&r);
        assert!(c.admit(ip(4), CAPS, tick(), HEAD_UNKNOWN).is_none());
        assert_eq!((c.regular, c.reserve), (2, 1));
    }

    #[test]
    fn an_idle_reserve_connection_makes_room_for_the_next_health_check() {
        let mut c = Connections::default();
        let held: Vec<_> = (0..2).map(|i| c.admit(ip(i), CAPS, tick(), HEAD_UNKNOWN).unwrap()).collect();
        let _busy: Vec<_> = held.iter().map(|(_, s, _)| InFlight::enter(s)).collect();
        let (_, first, reserve) = c.admit(ip(9), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        assert!(reserve);
        let (_, _, reserve) = c.admit(ip(9), CAPS, tick(), HEAD_UNKNOWN).unwrap();
        assert!(reserve);
        assert_eq!(Arc::strong_count(&first), 1, "the idle reserve connection was closed");
    }

    #[test]
    fn a_new_connection_gets_the_time_to_send_its_first_request() {
        let caps = Caps { total: 1, per_address: 100, reserve: 2 };
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = Connections::default();
        let (_, busy, _) = c.admit(ip(1), caps, t0, HEAD_UNKNOWN).unwrap();
        let _busy = InFlight::enter(&busy);
        // Two probes reach the reserve; neither has sent its head yet.
        let (_, probe, reserve) = c.admit(ip(2), caps, ms(10), HEAD_UNKNOWN).unwrap();
        assert!(reserve);
        let (_, second, _) = c.admit(ip(3), caps, ms(20), HEAD_UNKNOWN).unwrap();
        // A storm connection known to ask for something else may not close either: refused.
        assert!(c.admit(ip(4), caps, ms(100), HEAD_OTHER).is_none());
        assert_eq!(Arc::strong_count(&probe), 2, "the fresh probe is still open");
        // A connection that has had its request is idle at once.
        drop(InFlight::enter(&second));
        let (_, _, reserve) = c.admit(ip(4), caps, ms(110), HEAD_OTHER).unwrap();
        assert!(reserve);
        assert_eq!(Arc::strong_count(&second), 1, "the served one made room");
        assert_eq!(Arc::strong_count(&probe), 2);
        // A head that never comes: evictable once the grace is over.
        let later = ms(10) + EVICT_GRACE;
        assert!(c.admit(ip(5), caps, later, HEAD_OTHER).is_some());
        assert_eq!(Arc::strong_count(&probe), 1, "a silent connection goes after the grace");
    }

    #[test]
    fn an_answered_idle_connection_goes_before_one_still_waiting_for_its_head() {
        let caps = Caps { total: 2, per_address: 100, reserve: 1 };
        let t0 = Instant::now();
        let mut c = Connections::default();
        // The older one has not had a request yet (a probe whose task has not run), past its
        // grace; the younger one was answered and is idle.
        let (_, waiting, _) = c.admit(ip(1), caps, t0, HEAD_UNKNOWN).unwrap();
        let (_, answered, _) = c.admit(ip(2), caps, t0 + Duration::from_millis(1), HEAD_UNKNOWN).unwrap();
        drop(InFlight::enter(&answered));
        let later = t0 + EVICT_GRACE * 2;
        let (_, _, reserve) = c.admit(ip(3), caps, later, HEAD_OTHER).unwrap();
        assert!(!reserve);
        assert_eq!(Arc::strong_count(&answered), 1, "the answered one made room");
        assert_eq!(Arc::strong_count(&waiting), 2, "the one waiting for its head is still open");
        // No answered one left: the silent one goes after all.
        assert!(c.admit(ip(4), caps, later, HEAD_OTHER).is_some());
        assert_eq!(Arc::strong_count(&waiting), 1);
    }

    #[test]
    fn connections_waiting_for_their_first_bytes_are_bounded() {
        let mut p = Pending::default();
        // Per address: PENDING_PER_ADDRESS, then refused; another address still gets a place.
        let mine: Vec<_> = (0..PENDING_PER_ADDRESS).map(|_| p.enter(ip(1)).unwrap()).collect();
        assert!(p.enter(ip(1)).is_none());
        let (other, _) = p.enter(ip(2)).unwrap();
        // One leaving makes room for its address again.
        p.leave(mine[0].0);
        assert!(p.enter(ip(1)).is_some());
        assert_eq!(p.per_address.get(&ip(1).unwrap()), Some(&PENDING_PER_ADDRESS));
        // In all: the oldest gives way to a newer one, and is told so.
        while p.waiting.len() < PENDING_MAX {
            p.enter(None).unwrap();
        }
        let oldest = mine[1].0;
        let told = mine[1].1.clone();
        let (newest, _) = p.enter(None).unwrap();
        assert_eq!(p.waiting.len(), PENDING_MAX);
        assert!(!p.waiting.contains_key(&oldest) && p.waiting.contains_key(&newest) && p.waiting.contains_key(&other));
        assert_eq!(p.per_address.get(&ip(1).unwrap()), Some(&(PENDING_PER_ADDRESS - 1)));
        let notified = told.notified();
        tokio::pin!(notified);
        // The permit stored by notify_one completes the wait at once.
        assert!(futures::FutureExt::now_or_never(notified).is_some(), "the oldest was told to give up");
    }

    #[test]
    fn a_reserve_connection_asking_for_health_keeps_its_place_and_others_make_room() {
        assert_eq!(classify_head(b"GET /healthz HTTP/1.1\r\n"), Some(HEAD_HEALTH));
        assert_eq!(classify_head(b"HEAD /readyz?x HTTP/1.1"), Some(HEAD_HEALTH));
        assert_eq!(classify_head(b"GET /heal"), None, "may still be a probe");
        assert_eq!(classify_head(b"GET /healthzz HTTP/1.1"), Some(HEAD_OTHER));
        assert_eq!(classify_head(b"GET /proxy/ses-1/ws"), Some(HEAD_OTHER));
        assert_eq!(classify_head(b"PRI * HTTP/2.0"), Some(HEAD_OTHER));
        let caps = Caps { total: 1, per_address: 100, reserve: 2 };
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = Connections::default();
        let (_, busy, _) = c.admit(ip(1), caps, t0, HEAD_UNKNOWN).unwrap();
        let _busy = InFlight::enter(&busy);
        let (_, probe, _) = c.admit(ip(2), caps, ms(1), HEAD_UNKNOWN).unwrap();
        let (_, storm, _) = c.admit(ip(3), caps, ms(2), HEAD_UNKNOWN).unwrap();
        probe.head.store(HEAD_HEALTH, Ordering::Release);
        storm.head.store(HEAD_OTHER, Ordering::Release);
        // Within the grace: the storm's connection goes, the probe stays.
        let (_, next, _) = c.admit(ip(4), caps, ms(10), HEAD_UNKNOWN).unwrap();
        assert_eq!(Arc::strong_count(&storm), 1);
        assert_eq!(Arc::strong_count(&probe), 2);
        next.head.store(HEAD_OTHER, Ordering::Release);
        // Past EVICT_GRACE the probe still stays (its own grace is longer)...
        let (_, _, _) = c.admit(ip(5), caps, ms(1) + EVICT_GRACE, HEAD_UNKNOWN).unwrap();
        assert_eq!(Arc::strong_count(&probe), 2);
        // The reserve full of a known probe and a head not seen yet, both within their grace: a
        // newcomer that may be a probe closes the unknown one, never the probe; one that is no
        // probe is refused.
        let (_, unknown, _) =
            c.admit(ip(7), caps, ms(1) + EVICT_GRACE + Duration::from_millis(1), HEAD_UNKNOWN).unwrap();
        let soon = ms(1) + EVICT_GRACE + Duration::from_millis(2);
        assert!(c.admit(ip(8), caps, soon, HEAD_OTHER).is_none());
        let (_, _, reserve) = c.admit(ip(8), caps, soon, HEAD_UNKNOWN).unwrap();
        assert!(reserve);
        assert_eq!(Arc::strong_count(&unknown), 1);
        assert_eq!(Arc::strong_count(&probe), 2, "a known probe is never closed within its grace");
        // ...but not forever: a probe that never finishes its head goes after HEALTH_GRACE.
        assert!(c.admit(ip(6), caps, ms(1) + HEALTH_GRACE, HEAD_UNKNOWN).is_some());
        assert_eq!(Arc::strong_count(&probe), 1);
    }

    #[test]
    fn one_address_holds_at_most_its_share_of_the_reserve() {
        let caps = Caps { total: 1, per_address: 100, reserve: HEALTH_RESERVE };
        let t0 = Instant::now();
        let mut c = Connections::default();
        let (_, busy, _) = c.admit(ip(1), caps, t0, HEAD_UNKNOWN).unwrap();
        let _busy = InFlight::enter(&busy);
        let storm: Vec<_> = (0..RESERVE_PER_ADDRESS).map(|_| c.admit(ip(7), caps, t0, HEAD_UNKNOWN).unwrap()).collect();
        assert!(storm.iter().all(|(_, _, reserve)| *reserve));
        // Its next is refused while its own are fresh, though the reserve has room for others.
        assert!(c.admit(ip(7), caps, t0, HEAD_UNKNOWN).is_none());
        let (_, monitor, reserve) = c.admit(ip(8), caps, t0, HEAD_UNKNOWN).unwrap();
        assert!(reserve);
        // Past the grace it makes room from its own share, never another address's.
        assert!(c.admit(ip(7), caps, t0 + EVICT_GRACE, HEAD_UNKNOWN).is_some());
        assert_eq!(Arc::strong_count(&storm[0].1), 1);
        assert_eq!(Arc::strong_count(&monitor), 2);
        assert_eq!(c.reserve_per_address[&ip(7).unwrap()], RESERVE_PER_ADDRESS);
        assert_eq!(c.reserve, RESERVE_PER_ADDRESS + 1);
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let caps = Caps { total: 10, per_address: 3, reserve: 2 };
        let mut c = Connections::default();
        let mine: Vec<_> = (0..3).map(|_| c.admit(ip(1), caps, tick(), HEAD_UNKNOWN).unwrap()).collect();
        // Its fourth closes its own oldest idle connection, not another address's.
        let (_, other, _) = c.admit(ip(2), caps, tick(), HEAD_UNKNOWN).unwrap();
        let (_, _fourth, _) = c.admit(ip(1), caps, tick(), HEAD_UNKNOWN).unwrap();
        assert_eq!(Arc::strong_count(&mine[0].1), 1);
        assert_eq!(Arc::strong_count(&other), 2, "another address's connection stays");
        assert_eq!(c.per_address[&ip(1).unwrap()], 3);
        // All of its connections busy: refused, though the server has room.
        let slots: Vec<_> = c.open.values().filter(|o| o.address == ip(1)).map(|o| o.slot.clone()).collect();
        let _busy: Vec<_> = slots.iter().map(InFlight::enter).collect();
        assert!(c.admit(ip(1), caps, tick(), HEAD_UNKNOWN).is_none());
        assert!(c.admit(ip(3), caps, tick(), HEAD_UNKNOWN).is_some());
        // Exempt (a trusted proxy): not counted per address.
        for _ in 0..5 {
            c.admit(None, caps, tick(), HEAD_UNKNOWN).unwrap();
        }
        // IPv6: a /64 is one address.
        assert_eq!(
            address_key("2001:db8:1:2::5".parse().unwrap()),
            address_key("2001:db8:1:2:ffff::1".parse().unwrap())
        );
        assert_ne!(address_key("2001:db8:1:2::5".parse().unwrap()), address_key("2001:db8:1:3::5".parse().unwrap()));
        assert_eq!(address_key("::ffff:10.0.0.1".parse().unwrap()), ip(1).unwrap());
    }

    #[test]
    fn a_tunnel_keeps_its_connection_counted_and_counts_its_upstream() {
        let caps = Caps { total: 4, per_address: 3, reserve: 1 };
        let table = Arc::new(Mutex::new(Connections::default()));
        let (id, slot, _) = lock(&table).admit(ip(1), caps, tick(), HEAD_UNKNOWN).unwrap();
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let ticket = ConnectionTicket::new(Ticket {
            table: table.clone(),
            id,
            slot: slot.clone(),
            peer,
            address: ip(1),
            reserve: false,
            caps,
            answers: Deadlines::new(),
        });
        let t1 = ticket.tunnel().unwrap();
        let t2 = ticket.tunnel().unwrap();
        assert_eq!(lock(&table).per_address[&ip(1).unwrap()], 3);
        // The address is full of busy connections (tunnels are never idle): no third tunnel.
        assert_eq!(ticket.tunnel().err(), Some(NoRoom::Address(3)));
        assert!(lock(&table).admit(ip(1), caps, tick(), HEAD_UNKNOWN).is_none());
        // hyper is done with the connection after the upgrade: it stays counted while tunnels use it.
        slot.ended.store(true, Ordering::Release);
        drop(t1);
        let counts = |t: &Connections| (t.open.len(), t.regular);
        assert_eq!(counts(&lock(&table)), (1, 2), "the connection and the second tunnel's upstream");
        drop(t2);
        assert_eq!(lock(&table).open.len(), 0, "the last tunnel gave the connection back");
        let t = lock(&table);
        assert_eq!((t.regular, t.per_address.len()), (0, 0));
        drop(t);

        // Every regular slot busy (this connection's upgrade in flight, another's request): no
        // tunnel, and the idle health probe in the reserve keeps its place.
        let caps = Caps { total: 2, per_address: 8, reserve: 1 };
        let table = Arc::new(Mutex::new(Connections::default()));
        let busy = |slot: &Arc<Slot>| slot.in_flight.fetch_add(1, Ordering::AcqRel);
        let (id, slot, _) = lock(&table).admit(ip(1), caps, tick(), HEAD_UNKNOWN).unwrap();
        busy(&slot);
        busy(&lock(&table).admit(ip(2), caps, tick(), HEAD_UNKNOWN).unwrap().1);
        let (_, probe, reserve) = lock(&table).admit(ip(3), caps, tick(), HEAD_HEALTH).unwrap();
        assert!(reserve);
        probe.served.store(true, Ordering::Release);
        let ticket = ConnectionTicket::new(Ticket {
            table: table.clone(),
            id,
            slot,
            peer,
            address: ip(1),
            reserve: false,
            caps,
            answers: Deadlines::new(),
        });
        assert_eq!(ticket.tunnel().err(), Some(NoRoom::Server));
        assert_eq!(lock(&table).reserve, 1, "the idle health probe's place was not taken");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn accepted_connections_are_nodelay() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.nodelay().unwrap(), "no setsockopt per connection is made on Linux");
        drop(client);
    }

    #[test]
    fn the_cap_stays_below_the_fd_limit() {
        assert_eq!(connection_cap(4096, Some(1024)), 1024 - FD_RESERVE as usize);
        assert_eq!(connection_cap(100, Some(65536)), 100);
        assert_eq!(connection_cap(100, None), 100);
    }
}
