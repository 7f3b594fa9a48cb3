//! Request bodies under watch. Every body the server reads goes through [`WatchedBody`]:
//!
//! - **a minimum rate**: after a short grace, a body must average `request_body_min_rate`
//!   bytes a second (a stalled body ends within seconds, not never);
//! - **a deadline**: a body that is buffered (every route but the `/proxy/` relay) must be
//!   complete within `request_body_timeout`; a relayed one (streamed, possibly large) may not
//!   pause longer than that between two frames;
//! - **budgets of buffered bytes**: one for the whole process (`max_buffered_body_mb`) and one
//!   per connection ([`PER_CONNECTION_BODY_BYTES`]: an HTTP/2 connection carries many streams);
//!   bytes count until their request has been answered;
//! - **bodies read before any credential check**, per client address: at most
//!   [`UNAUTHENTICATED_BODIES_PER_ADDRESS`] at once. A guard that admits a caller marks the
//!   request ([`mark_authenticated`]); only bodies first read without that mark are counted
//!   (`/api/v1/auth/login` is the one route that reads a body before it knows the caller).
//!
//! A body that breaks a rule yields an error to whoever reads it, and records why on the
//! request's [`BodyWatch`]; `middleware::request_context` then answers with the matching
//! error (408, 429 or 503) and closes an HTTP/1 connection.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Extensions, HeaderValue, StatusCode, header};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::error::{ApiError, ErrorCode};
use crate::locks::lock;

/// Time a body gets before the minimum rate applies (a client's first segment may lag its head).
pub const RATE_GRACE: Duration = Duration::from_secs(2);
/// Buffered body bytes one connection may hold at once (over all its HTTP/2 streams).
pub const PER_CONNECTION_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Bodies read before a credential check, at once, per client address.
pub const UNAUTHENTICATED_BODIES_PER_ADDRESS: usize = 32;

/// Why a body was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFailure {
    /// Below the minimum rate, past the grace.
    TooSlow,
    /// A buffered body not complete by its deadline, or a streamed one silent for that long.
    Deadline,
    /// The process-wide budget of buffered bytes is spent.
    ProcessBudget,
    /// This connection's budget of buffered bytes is spent.
    ConnectionBudget,
    /// Too many bodies read before a credential check from this address.
    Unauthenticated,
}

impl BodyFailure {
    /// The answer for a request whose body failed so.
    pub fn to_api_error(self, limits: &BodyLimits) -> ApiError {
        let retry = |e: ApiError| e.with_header(header::RETRY_AFTER, HeaderValue::from_static("1"));
        match self {
            Self::TooSlow => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::BodyTimeout,
                format!("the request body arrived slower than {} bytes a second", limits.min_rate),
            ),
            Self::Deadline => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorCode::BodyTimeout,
                format!("the request body did not arrive within {} s", limits.timeout.as_secs_f64()),
            ),
            Self::ProcessBudget => retry(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServerBusy,
                "the server holds as many request bodies as it buffers at once; retry shortly",
            )),
            Self::ConnectionBudget => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServerBusy,
                format!(
                    "this connection's request bodies exceed {} MiB at once; send fewer in parallel",
                    PER_CONNECTION_BODY_BYTES >> 20
                ),
            ),
            Self::Unauthenticated => retry(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyRequests,
                format!(
                    "more than {UNAUTHENTICATED_BODIES_PER_ADDRESS} unauthenticated requests from this address are sending bodies"
                ),
            )),
        }
    }
}

/// The error a failed body yields to its reader.
#[derive(Debug)]
pub enum BodyError {
    Cut(BodyFailure),
    Transport(hyper::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cut(why) => write!(f, "request body cut short: {why:?}"),
            Self::Transport(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Cut(_) => None,
            Self::Transport(e) => Some(e),
        }
    }
}

/// The settings of this module (from `Config`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    pub timeout: Duration,
    /// Bytes a second, averaged from the head on, once `grace` has passed.
    pub min_rate: u32,
    /// [`RATE_GRACE`] (shorter in tests).
    pub grace: Duration,
    /// Buffered body bytes the process holds at once.
    pub process_budget: usize,
}

/// What a request's body did, in the request's extensions (one per request).
#[derive(Debug)]
pub struct BodyWatch {
    limits: BodyLimits,
    failure: OnceLock<BodyFailure>,
    authenticated: AtomicBool,
    /// Bytes buffered on the budgets for this request (released when it has been answered).
    charged: AtomicUsize,
}

impl BodyWatch {
    pub fn failure(&self) -> Option<BodyFailure> {
        self.failure.get().copied()
    }

    /// The answer for this request when its body broke a rule.
    pub fn refusal(&self) -> Option<ApiError> {
        self.failure().map(|f| f.to_api_error(&self.limits))
    }
}

/// Called by a guard that has admitted the caller: this request's body no longer counts as read
/// before a credential check.
pub fn mark_authenticated(extensions: &Extensions) {
    if let Some(w) = extensions.get::<Arc<BodyWatch>>() {
        w.authenticated.store(true, Ordering::Release);
    }
}

/// The process-wide part: the byte budget and the unauthenticated bodies per address.
#[derive(Debug)]
pub struct Budgets {
    limits: BodyLimits,
    used: AtomicUsize,
    unauthenticated: Mutex<HashMap<IpAddr, usize>>,
}

/// Takes `n` from `counter` unless that would pass `cap`.
fn charge(counter: &AtomicUsize, n: usize, cap: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(n).filter(|total| *total <= cap))
        .is_ok()
}

impl Budgets {
    pub fn new(limits: BodyLimits) -> Arc<Self> {
        Arc::new(Self { limits, used: AtomicUsize::new(0), unauthenticated: Mutex::default() })
    }

    pub fn limits(&self) -> &BodyLimits {
        &self.limits
    }

    /// Buffered body bytes held now, over every connection.
    pub fn buffered_bytes(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn enter_unauthenticated(self: &Arc<Self>, addr: IpAddr) -> Option<UnauthenticatedPermit> {
        let mut map = lock(&self.unauthenticated);
        let n = map.entry(addr).or_insert(0);
        if *n >= UNAUTHENTICATED_BODIES_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(UnauthenticatedPermit { budgets: self.clone(), addr })
    }
}

/// One body read before a credential check, counted against its address while it is read.
#[derive(Debug)]
struct UnauthenticatedPermit {
    budgets: Arc<Budgets>,
    addr: IpAddr,
}

impl Drop for UnauthenticatedPermit {
    fn drop(&mut self) {
        let mut map = lock(&self.budgets.unauthenticated);
        if let Some(n) = map.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.addr);
            }
        }
    }
}

/// One connection's budget of buffered body bytes, and its reference to the process's (made once
/// per connection: each request clones this, and no count every core writes).
#[derive(Debug)]
pub struct ConnectionBudget {
    budgets: Arc<Budgets>,
    used: AtomicUsize,
}

impl ConnectionBudget {
    pub fn new(budgets: Arc<Budgets>) -> Arc<Self> {
        Arc::new(Self { budgets, used: AtomicUsize::new(0) })
    }
}

/// How a body is read: buffered by its handler (every API route), or streamed on (the relay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Buffered,
    Streamed,
}

/// Everything one request needs to watch its body; [`Self::release`] (through [`Charge`]) gives
/// its bytes back once the request has been answered.
pub struct Watched {
    pub watch: Arc<BodyWatch>,
    pub charge: Charge,
}

/// Gives a request's buffered bytes back to the budgets when dropped (the request's future ends,
/// answered or cancelled).
pub struct Charge {
    watch: Arc<BodyWatch>,
    connection: Arc<ConnectionBudget>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let n = self.watch.charged.swap(0, Ordering::AcqRel);
        if n > 0 {
            self.connection.budgets.used.fetch_sub(n, Ordering::AcqRel);
            self.connection.used.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// A request body under the rules of this module.
pub struct WatchedBody<B> {
    inner: B,
    watch: Arc<BodyWatch>,
    connection: Arc<ConnectionBudget>,
    mode: Mode,
    client: IpAddr,
    started: Instant,
    last_frame: Instant,
    received: u64,
    /// Armed only while the client keeps the body waiting.
    timer: Option<Pin<Box<Sleep>>>,
    permit: Option<UnauthenticatedPermit>,
    first_poll: bool,
    done: bool,
}

/// Wraps `inner` for one request from `client` on a connection with `connection`'s budget.
pub fn watch<B>(inner: B, mode: Mode, client: IpAddr, connection: &Arc<ConnectionBudget>) -> (WatchedBody<B>, Watched) {
    let watch = Arc::new(BodyWatch {
        limits: connection.budgets.limits,
        failure: OnceLock::new(),
        authenticated: AtomicBool::new(false),
        charged: AtomicUsize::new(0),
    });
    let now = Instant::now();
    let body = WatchedBody {
        inner,
        watch: watch.clone(),
        connection: connection.clone(),
        mode,
        client,
        started: now,
        last_frame: now,
        received: 0,
        timer: None,
        permit: None,
        first_poll: true,
        done: false,
    };
    let charge = Charge { watch: watch.clone(), connection: connection.clone() };
    (body, Watched { watch, charge })
}

impl<B> WatchedBody<B> {
    /// When the body fails if nothing more arrives.
    fn fails_at(&self) -> (Instant, BodyFailure) {
        let limits = &self.connection.budgets.limits;
        let rate = u64::from(limits.min_rate.max(1));
        // Average rate: `received` bytes buy `received / rate` seconds past the grace.
        let credit = Duration::from_millis(self.received.saturating_mul(1000) / rate);
        let slow = self.started + limits.grace + credit;
        let deadline = match self.mode {
            Mode::Buffered => self.started + limits.timeout,
            Mode::Streamed => self.last_frame + limits.timeout,
        };
        if deadline <= slow { (deadline, BodyFailure::Deadline) } else { (slow, BodyFailure::TooSlow) }
    }

    fn fail(&mut self, why: BodyFailure) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let _ = self.watch.failure.set(why);
        self.done = true;
        self.permit = None;
        self.timer = None;
        Poll::Ready(Some(Err(BodyError::Cut(why))))
    }

    fn take_bytes(&mut self, n: usize) -> Result<(), BodyFailure> {
        self.received = self.received.saturating_add(n as u64);
        self.last_frame = Instant::now();
        if self.mode == Mode::Streamed || n == 0 {
            return Ok(());
        }
        let budgets = &self.connection.budgets;
        if !charge(&budgets.used, n, budgets.limits.process_budget) {
            return Err(BodyFailure::ProcessBudget);
        }
        if !charge(&self.connection.used, n, PER_CONNECTION_BODY_BYTES) {
            budgets.used.fetch_sub(n, Ordering::AcqRel);
            return Err(BodyFailure::ConnectionBudget);
        }
        self.watch.charged.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }
}

impl<B> HttpBody for WatchedBody<B>
where
    B: HttpBody<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.done {
            return match this.watch.failure() {
                Some(why) => Poll::Ready(Some(Err(BodyError::Cut(why)))),
                None => Poll::Ready(None),
            };
        }
        if this.first_poll {
            this.first_poll = false;
            if !this.inner.is_end_stream() && !this.watch.authenticated.load(Ordering::Acquire) {
                match this.connection.budgets.enter_unauthenticated(this.client) {
                    Some(p) => this.permit = Some(p),
                    None => return this.fail(BodyFailure::Unauthenticated),
                }
            }
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let n = frame.data_ref().map_or(0, Bytes::len);
                    if let Err(why) = this.take_bytes(n) {
                        return this.fail(why);
                    }
                    this.timer = None;
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    this.permit = None;
                    return Poll::Ready(Some(Err(BodyError::Transport(e))));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.permit = None;
                    this.timer = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => {}
            }
            // The client keeps us waiting: until when may it?
            let (at, why) = this.fails_at();
            if Instant::now() >= at {
                return this.fail(why);
            }
            match &mut this.timer {
                Some(t) if t.deadline() == at => {}
                Some(t) => t.as_mut().reset(at),
                None => this.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            if let Some(t) = &mut this.timer {
                ready!(t.as_mut().poll(cx));
            }
            // The timer fired: look at the body once more before failing it.
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body fed by the test: frames sent on the channel, the end when the sender is dropped.
    struct Fed(tokio::sync::mpsc::Receiver<Bytes>);

    impl HttpBody for Fed {
        type Data = Bytes;
        type Error = hyper::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn fed(frames: &[usize]) -> (tokio::sync::mpsc::Sender<Bytes>, Fed) {
        let (tx, rx) = tokio::sync::mpsc::channel(frames.len().max(1));
        for n in frames {
            tx.try_send(Bytes::from(vec![0u8; *n])).unwrap();
        }
        (tx, Fed(rx))
    }

    async fn read_all<B: HttpBody<Data = Bytes, Error = BodyError> + Unpin>(mut body: B) -> Result<usize, BodyError> {
        let mut n = 0;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            n += frame?.data_ref().map_or(0, Bytes::len);
        }
        Ok(n)
    }

    fn poll_once<B: HttpBody + Unpin>(body: &mut B) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(body).poll_frame(&mut cx).is_pending()
    }

    /// Real time, kept short: a 50 ms grace, then 1 MB a second.
    fn budgets(process: usize) -> Arc<Budgets> {
        Budgets::new(BodyLimits {
            timeout: Duration::from_secs(30),
            min_rate: 1_000_000,
            grace: Duration::from_millis(50),
            process_budget: process,
        })
    }

    #[test]
    fn the_budget_is_never_overdrawn() {
        let c = AtomicUsize::new(0);
        assert!(charge(&c, 6, 10));
        assert!(!charge(&c, 5, 10));
        assert!(charge(&c, 4, 10));
        assert_eq!(c.load(Ordering::Acquire), 10);
        assert!(!charge(&c, usize::MAX, 10));
    }

    #[test]
    fn a_body_may_wait_for_its_grace_plus_what_its_bytes_bought() {
        let b = Budgets::new(BodyLimits {
            timeout: Duration::from_secs(30),
            min_rate: 1024,
            grace: RATE_GRACE,
            process_budget: 1 << 20,
        });
        let conn = ConnectionBudget::new(b.clone());
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let _in_runtime = rt.enter();
        let (_tx, inner) = fed(&[]);
        let (mut body, _w) = watch(inner, Mode::Buffered, IpAddr::from([10, 0, 0, 1]), &conn);
        let (at, why) = body.fails_at();
        assert_eq!((at - body.started, why), (RATE_GRACE, BodyFailure::TooSlow));
        // 2 KiB at 1 KiB/s buys two seconds past the grace.
        body.received = 2048;
        assert_eq!(body.fails_at().0 - body.started, RATE_GRACE + Duration::from_secs(2));
        // A megabyte would buy more than the deadline allows.
        body.received = 1 << 20;
        assert_eq!(body.fails_at(), (body.started + Duration::from_secs(30), BodyFailure::Deadline));
        // Streamed: the deadline counts from the last frame.
        body.mode = Mode::Streamed;
        body.last_frame = body.started + Duration::from_secs(100);
        assert_eq!(body.fails_at(), (body.started + Duration::from_secs(130), BodyFailure::Deadline));
    }

    #[tokio::test]
    async fn a_stalled_body_fails_after_the_grace_and_its_credit() {
        let b = budgets(1 << 20);
        let conn = ConnectionBudget::new(b.clone());
        let (tx, inner) = fed(&[2048]);
        let (body, watched) = watch(inner, Mode::Buffered, IpAddr::from([10, 0, 0, 1]), &conn);
        let err = read_all(body).await.expect_err("the body fails");
        assert!(matches!(err, BodyError::Cut(BodyFailure::TooSlow)), "{err}");
        assert_eq!(watched.watch.failure(), Some(BodyFailure::TooSlow));
        assert_eq!(b.buffered_bytes(), 2048, "held until the request has been answered");
        drop(watched);
        assert_eq!(b.buffered_bytes(), 0);
        drop(tx);
    }

    #[tokio::test]
    async fn a_buffered_body_has_a_deadline_and_a_streamed_one_a_longest_pause() {
        let b = Budgets::new(BodyLimits {
            timeout: Duration::from_millis(200),
            min_rate: 64,
            grace: Duration::from_millis(50),
            process_budget: 1 << 30,
        });
        let conn = ConnectionBudget::new(b.clone());
        // 1 MiB at 64 B/s would buy hours; the deadline comes first.
        let (tx, inner) = fed(&[1 << 20]);
        let (body, w) = watch(inner, Mode::Buffered, IpAddr::from([10, 0, 0, 4]), &conn);
        assert!(matches!(read_all(body).await, Err(BodyError::Cut(BodyFailure::Deadline))));
        drop((tx, w));
        // Streamed: frames 100 ms apart (a pause shorter than the deadline) pass, until they stop.
        let (tx, inner) = fed(&[1 << 20]);
        let (body, _w) = watch(inner, Mode::Streamed, IpAddr::from([10, 0, 0, 4]), &conn);
        let feeder = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tx.send(Bytes::from(vec![0u8; 1 << 20])).await.unwrap();
            }
            tx
        });
        let started = Instant::now();
        assert!(matches!(read_all(body).await, Err(BodyError::Cut(BodyFailure::Deadline))));
        assert!(started.elapsed() >= Duration::from_millis(300 + 200), "all three frames were taken first");
        drop(feeder.await.unwrap());
    }

    #[tokio::test]
    async fn a_complete_body_passes_and_gives_its_place_back() {
        let b = budgets(1 << 20);
        let conn = ConnectionBudget::new(b.clone());
        let (tx, inner) = fed(&[10, 20]);
        drop(tx);
        let (body, w) = watch(inner, Mode::Buffered, IpAddr::from([10, 0, 0, 5]), &conn);
        assert_eq!(read_all(body).await.unwrap(), 30);
        assert_eq!(w.watch.failure(), None);
        assert!(lock(&b.unauthenticated).is_empty());
    }

    #[tokio::test]
    async fn unauthenticated_bodies_per_address_are_bounded_and_given_back() {
        let b = budgets(1 << 20);
        let conn = ConnectionBudget::new(b.clone());
        let addr = IpAddr::from([10, 0, 0, 2]);
        let mut held = Vec::new();
        for _ in 0..UNAUTHENTICATED_BODIES_PER_ADDRESS {
            let (tx, inner) = fed(&[]);
            let (mut body, w) = watch(inner, Mode::Buffered, addr, &conn);
            assert!(poll_once(&mut body));
            held.push((tx, body, w));
        }
        let one_more = |authenticated: bool, addr: IpAddr| {
            let (_tx, inner) = fed(&[]);
            let (mut body, w) = watch(inner, Mode::Buffered, addr, &conn);
            w.watch.authenticated.store(authenticated, Ordering::Release);
            poll_once(&mut body);
            w.watch.failure()
        };
        assert_eq!(one_more(false, addr), Some(BodyFailure::Unauthenticated));
        // A caller a guard admitted is not counted; another address has its own count.
        assert_eq!(one_more(true, addr), None);
        assert_eq!(one_more(false, IpAddr::from([10, 0, 0, 3])), None);
        held.pop();
        assert_eq!(one_more(false, addr), None, "a body that ended gives its place back");
    }

    #[tokio::test]
    async fn the_connection_budget_refuses_what_would_pass_it() {
        let b = budgets(1 << 30);
        let conn = ConnectionBudget::new(b.clone());
        let addr = IpAddr::from([10, 0, 0, 3]);
        let half = PER_CONNECTION_BODY_BYTES / 2 + 1;
        let mk = || {
            let (tx, inner) = fed(&[half]);
            drop(tx);
            inner
        };
        let (first, w1) = watch(mk(), Mode::Buffered, addr, &conn);
        assert!(read_all(first).await.is_ok());
        let (second, w2) = watch(mk(), Mode::Buffered, addr, &conn);
        assert!(matches!(read_all(second).await, Err(BodyError::Cut(BodyFailure::ConnectionBudget))));
        assert_eq!(w2.watch.failure(), Some(BodyFailure::ConnectionBudget));
        assert_eq!(b.buffered_bytes(), half, "a refused frame is not charged");
        drop(w1);
        let (third, _w3) = watch(mk(), Mode::Buffered, addr, &conn);
        assert!(read_all(third).await.is_ok(), "the first request's bytes came back when it was answered");
        // The relay streams its bodies on: nothing is charged.
        let (streamed, _w4) = watch(mk(), Mode::Streamed, addr, &conn);
        assert!(read_all(streamed).await.is_ok());
        // And the process budget: a second connection cannot pass it either.
        let small = budgets(half + 10);
        let other = ConnectionBudget::new(small.clone());
        let (a, _wa) = watch(mk(), Mode::Buffered, addr, &ConnectionBudget::new(small.clone()));
        assert!(read_all(a).await.is_ok());
        let (c, _wc) = watch(mk(), Mode::Buffered, addr, &other);
        assert!(matches!(read_all(c).await, Err(BodyError::Cut(BodyFailure::ProcessBudget))));
    }
}
