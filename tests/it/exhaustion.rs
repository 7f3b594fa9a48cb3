//! Resource exhaustion by unauthenticated clients: idle connections are closed and
//! capped so `/healthz` keeps answering.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;

/// Upper bound for something that must happen (not a speed assertion: it returns as soon as it does).
const WAIT: Duration = Duration::from_secs(20);

/// Resolves when the server closes the connection (EOF or reset); panics past the bound.
async fn closed_by_server(sock: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    let ended = tokio::time::timeout(WAIT, async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the server kept an idle connection open");
}

/// One keep-alive `GET /healthz` on a raw connection, read to the end of its body.
async fn healthz_keep_alive(sock: &mut TcpStream) {
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed mid-response");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            assert!(text.starts_with("http/1.1 200"), "{text}");
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("content-length");
            if got.len() >= end + 4 + len {
                return;
            }
        }
    }
}

#[tokio::test]
async fn a_connection_that_never_sends_a_byte_is_closed() {
    let s = TestServer::start().await;
    let mut silent = TcpStream::connect(s.app_addr()).await.unwrap();
    closed_by_server(&mut silent).await;
    assert_eq!(s.get("/healthz").await.status(), 200);
    s.stop().await;
}

/// hyper's request-head timeout runs on a timer each connection keeps and moves on per request
/// (`http::timer`): a head that stalls after keep-alive requests is still cut, and so is a
/// connection that goes quiet between requests.
#[tokio::test]
async fn a_head_that_stalls_after_keep_alive_requests_is_cut() {
    let s = TestServer::start_with(&[("GSHARE_REQUEST_HEAD_TIMEOUT", "1s")]).await;
    let mut stalled = TcpStream::connect(s.app_addr()).await.unwrap();
    let mut quiet = TcpStream::connect(s.app_addr()).await.unwrap();
    for _ in 0..3 {
        healthz_keep_alive(&mut stalled).await;
        healthz_keep_alive(&mut quiet).await;
    }
    stalled.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    closed_by_server(&mut stalled).await;
    closed_by_server(&mut quiet).await;
    assert_eq!(s.get("/healthz").await.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn idle_connections_over_the_cap_close_oldest_first_and_healthz_answers() {
    let cap = 16;
    // A head timeout far beyond the test: only the cap can close the idle connections.
    let s = TestServer::start_with(&[("GSHARE_MAX_CONNECTIONS", "16"), ("GSHARE_REQUEST_HEAD_TIMEOUT", "10m")]).await;
    // A flood of twice the cap: each connection makes one request, then sits idle (keep-alive).
    let mut flood = Vec::new();
    for _ in 0..2 * cap {
        let mut sock = TcpStream::connect(s.app_addr()).await.unwrap();
        healthz_keep_alive(&mut sock).await;
        flood.push(sock);
    }
    // The oldest half made room for the newest.
    for sock in flood.iter_mut().take(cap) {
        closed_by_server(sock).await;
    }
    // And a new client is answered (closing the oldest idle one in turn).
    assert_eq!(reqwest::Client::new().get(s.url("/healthz")).send().await.unwrap().status(), 200);
    closed_by_server(&mut flood[cap]).await;
    s.stop().await;
}

// --- Slow and stalled request bodies ---

/// A raw connection from a loopback address of our choosing (127.0.0.0/8 is all loopback).
async fn connect_from(s: &TestServer, last: u8) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(std::net::SocketAddr::from(([127, 0, 0, last], 0))).unwrap();
    sock.connect(s.app_addr()).await.unwrap()
}

/// Sends a login head announcing `length` bytes with `Expect: 100-continue`. When the server
/// starts reading the body (it answers `100 Continue`: the request is in flight and its body
/// watched), sends only `sent` of them and returns `None`; an answer instead is returned.
async fn stalled_login(sock: &mut TcpStream, length: usize, sent: usize) -> Option<String> {
    let head = format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let answer = response_head_until(sock, "\r\n\r\n").await;
    if !answer.starts_with("http/1.1 100") {
        return Some(answer);
    }
    sock.write_all(&vec![b' '; sent]).await.unwrap();
    None
}

/// Reads until `end` has been seen (or the connection ends), as lower-case text.
async fn response_head_until(sock: &mut TcpStream, end: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1];
    tokio::time::timeout(WAIT, async {
        // A byte at a time: what follows the interim 100 must stay unread.
        while sock.read(&mut buf).await.unwrap_or(0) == 1 {
            got.push(buf[0]);
            if got.ends_with(end.as_bytes()) {
                break;
            }
        }
    })
    .await
    .expect("an answer within the bound");
    String::from_utf8_lossy(&got).to_ascii_lowercase()
}

/// Resolves with the index of the first of `socks` the server answers or closes.
async fn first_to_hear(socks: &mut [TcpStream]) -> (usize, String) {
    let reads = socks.iter_mut().map(|s| {
        Box::pin(async move {
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase()
        })
    });
    let (text, i, _) = tokio::time::timeout(WAIT, futures::future::select_all(reads)).await.expect("within the bound");
    (i, text)
}

/// Reads one response head (and what follows in the same reads) as lower-case text.
async fn response_head(sock: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        loop {
            let n = sock.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&got).contains("}") {
                break;
            }
        }
    })
    .await
    .expect("an answer within the bound");
    String::from_utf8_lossy(&got).to_ascii_lowercase()
}

/// One `GET <path>` on a fresh connection from 127.0.0.`last`: the status.
async fn get_from(s: &TestServer, last: u8, path: &str) -> u16 {
    let mut sock = connect_from(s, last).await;
    sock.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let head = response_head(&mut sock).await;
    head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {head:?}"))
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_its_connection_closed() {
    let s = TestServer::start().await;
    let mut sock = TcpStream::connect(s.app_addr()).await.unwrap();
    // 10 of 100 bytes, then nothing: past the 2 s grace the body is below any rate.
    assert_eq!(stalled_login(&mut sock, 100, 10).await, None);
    let answer = response_head(&mut sock).await;
    assert!(answer.starts_with("http/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(answer.contains("\"request_id\""), "{answer}");
    closed_by_server(&mut sock).await;
    // Nothing was signed in, audited as a login, or broken.
    assert_eq!(s.get("/readyz").await.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn a_body_that_trickles_past_its_deadline_is_cut() {
    // A generous rate but a short deadline: 1 byte a second never finishes 100 bytes in 3 s.
    let s =
        TestServer::start_with(&[("GSHARE_REQUEST_BODY_TIMEOUT", "3s"), ("GSHARE_REQUEST_BODY_MIN_RATE", "16")]).await;
    let mut sock = TcpStream::connect(s.app_addr()).await.unwrap();
    assert_eq!(stalled_login(&mut sock, 100, 60).await, None);
    let answer = response_head(&mut sock).await;
    assert!(answer.starts_with("http/1.1 408") && answer.contains("within 3 s"), "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn stalled_bodies_from_one_address_leave_the_others_served() {
    let s = TestServer::start_with(&[
        ("GSHARE_MAX_CONNECTIONS", "64"),
        ("GSHARE_MAX_CONNECTIONS_PER_ADDRESS", "16"),
        // Long enough that only the caps, not the timeouts, close anything within the test.
        ("GSHARE_REQUEST_HEAD_TIMEOUT", "10m"),
        ("GSHARE_REQUEST_BODY_TIMEOUT", "10m"),
        ("GSHARE_REQUEST_BODY_MIN_RATE", "16"),
    ])
    .await;
    // Each sends 64 KiB of a 512 KiB body: credit for over an hour at 16 B/s.
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let mut sock = connect_from(&s, 7).await;
        assert_eq!(stalled_login(&mut sock, 512 * 1024, 64 * 1024).await, None);
        stalled.push(sock);
    }
    // All 16 of the address's connections are busy: its 17th is closed unanswered.
    stalled.push(connect_from(&s, 7).await);
    let (closed, text) = first_to_hear(&mut stalled).await;
    assert_eq!((closed, text.as_str()), (16, ""), "the new connection is the one closed, without an answer");
    // Another address is served at once.
    assert_eq!(get_from(&s, 8, "/readyz").await, 200);
    assert_eq!(get_from(&s, 8, "/api/v1/auth/me").await, 401);
    drop(stalled);
    s.stop().await;
}

#[tokio::test]
async fn unauthenticated_bodies_per_address_are_bounded() {
    let s =
        TestServer::start_with(&[("GSHARE_REQUEST_BODY_TIMEOUT", "10m"), ("GSHARE_REQUEST_BODY_MIN_RATE", "16")]).await;
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let mut sock = connect_from(&s, 9).await;
        assert_eq!(stalled_login(&mut sock, 4096, 1024).await, None);
        stalled.push(sock);
    }
    // The 33rd body read before any credential check from this address: 429 at once.
    let mut sock = connect_from(&s, 9).await;
    let refused = stalled_login(&mut sock, 4096, 1024).await.expect("answered at once");
    assert!(refused.starts_with("http/1.1 429"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    let rest = response_head_until(&mut sock, "}").await;
    assert!(rest.contains("too_many_requests"), "{rest}");
    // Another address signs in (wrong password: 401, not 429).
    let res = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 10]))
        .build()
        .unwrap()
        .post(s.url("/api/v1/auth/login"))
        .json(&serde_json::json!({"username": "admin", "password": "not-the-password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // One ends: the address may send another.
    drop(stalled.pop());
    let mut sock = connect_from(&s, 9).await;
    let mut again = None;
    // The server notices the closed connection on its own schedule: the place comes back then.
    for _ in 0..100 {
        match stalled_login(&mut sock, 4096, 1024).await {
            None => {
                again = Some(());
                break;
            }
            Some(_) => sock = connect_from(&s, 9).await,
        }
        tokio::task::yield_now().await;
    }
    assert!(again.is_some(), "a body that ended gave its place back");
    drop(stalled);
    s.stop().await;
}

#[tokio::test]
async fn the_health_reserve_answers_when_every_slot_is_busy() {
    let s = TestServer::start_with(&[
        ("GSHARE_MAX_CONNECTIONS", "16"),
        ("GSHARE_REQUEST_BODY_TIMEOUT", "10m"),
        ("GSHARE_REQUEST_BODY_MIN_RATE", "16"),
    ])
    .await;
    // 16 busy connections from 16 addresses (none idle to close).
    let mut stalled = Vec::new();
    for i in 0..16 {
        let mut sock = connect_from(&s, 20 + i).await;
        assert_eq!(stalled_login(&mut sock, 8192, 4096).await, None);
        stalled.push(sock);
    }
    // Every slot taken: a new connection answers the health paths and nothing else.
    assert_eq!(get_from(&s, 50, "/readyz").await, 200);
    assert_eq!(get_from(&s, 51, "/healthz").await, 200);
    let mut other = connect_from(&s, 52).await;
    other.write_all(b"GET /api/v1/auth/me HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let answer = response_head(&mut other).await;
    assert!(answer.starts_with("http/1.1 503") && answer.contains("server_busy"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    closed_by_server(&mut other).await;
    drop(stalled);
    s.stop().await;
}

#[tokio::test]
async fn buffered_bodies_have_a_process_budget() {
    let s = TestServer::start_with(&[
        ("GSHARE_MAX_BUFFERED_BODY_MB", "4"),
        ("GSHARE_REQUEST_BODY_TIMEOUT", "10m"),
        ("GSHARE_REQUEST_BODY_MIN_RATE", "16"),
    ])
    .await;
    // 600 KiB of 1,000,000 bytes each, from different addresses: 4 MiB holds six.
    let mut stalled = Vec::new();
    for i in 0..8 {
        let mut sock = connect_from(&s, 60 + i).await;
        assert_eq!(stalled_login(&mut sock, 1_000_000, 600 * 1024).await, None);
        stalled.push(sock);
    }
    let (_, refused) = first_to_hear(&mut stalled).await;
    assert!(refused.starts_with("http/1.1 503") && refused.contains("server_busy"), "{refused}");
    // Given back when their requests end: a new body is taken again.
    drop(stalled);
    let mut taken = false;
    for _ in 0..100 {
        let res = s
            .client
            .post(s.url("/api/v1/auth/login"))
            .json(&serde_json::json!({"username": "admin", "password": "not-the-password"}))
            .send()
            .await
            .unwrap();
        if res.status() == 401 {
            taken = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(taken, "the budget came back once the stalled requests ended");
    s.stop().await;
}

/// A request body that sends `first` bytes and then never ends.
struct Stalled(Option<axum::body::Bytes>);

impl hyper::body::Body for Stalled {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        match self.0.take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(b)))),
            None => std::task::Poll::Pending,
        }
    }
}

#[tokio::test]
async fn one_h2c_connection_cannot_buffer_more_than_its_budget() {
    let s =
        TestServer::start_with(&[("GSHARE_REQUEST_BODY_TIMEOUT", "10m"), ("GSHARE_REQUEST_BODY_MIN_RATE", "16")]).await;
    let tcp = TcpStream::connect(s.app_addr()).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    // 20 streams of 900 KiB each on one connection, all stalled: 8 MiB holds nine.
    let mut answers = Vec::new();
    for _ in 0..20 {
        let mut sender = sender.clone();
        let req = hyper::Request::post(format!("http://{}/api/v1/auth/login", s.app_addr()))
            .header("content-type", "application/json")
            .header("content-length", "1000000")
            .body(Stalled(Some(vec![b' '; 900 * 1024].into())))
            .unwrap();
        answers.push(tokio::spawn(async move { sender.send_request(req).await.map(|r| r.status().as_u16()) }));
    }
    // At most nine fit the connection's 8 MiB; the others are refused (503) while they stall.
    let mut pending: futures::stream::FuturesUnordered<_> = answers.into_iter().collect();
    let mut refused = 0;
    while refused < 11 {
        let next = tokio::time::timeout(WAIT, futures::StreamExt::next(&mut pending)).await;
        let status = next.expect("refused within the bound").expect("an answer").unwrap().unwrap();
        assert_eq!(status, 503);
        refused += 1;
    }
    assert_eq!(s.get("/readyz").await.status(), 200);
    s.stop().await;
}

fn h2_frame(kind: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&sid.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads HTTP/2 frames until a GOAWAY (true) or the end of the connection (false); panics past
/// the bound.
async fn goaway_or_close(mut r: tokio::net::tcp::OwnedReadHalf) -> bool {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16384];
    tokio::time::timeout(WAIT, async {
        loop {
            while buf.len() >= 9 {
                let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                if buf.len() < 9 + len {
                    break;
                }
                if buf[3] == 0x7 {
                    return true;
                }
                buf.drain(..9 + len);
            }
            match r.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("the server neither sent GOAWAY nor closed the flooding connection")
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// HPACK, static table only: GET, http, :path /healthz, :authority t.
const HEALTHZ_BLOCK: &[u8] = b"\x82\x86\x04\x08/healthz\x01\x01t";

/// HTTP/2 abuse. A rapid-reset flood (HEADERS then RST_STREAM,
/// stream after stream) gets a GOAWAY; a CONTINUATION flood (a header block that never ends) is
/// cut off long before 64 MiB; `/readyz` answers after both. (Nothing needed fixing: hyper's
/// limits set for item 1 hold; this keeps them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_rapid_reset_and_continuation_floods_end_the_connection() {
    let s = TestServer::start().await;

    let (r, mut w) = TcpStream::connect(s.app_addr()).await.unwrap().into_split();
    let reader = tokio::spawn(goaway_or_close(r));
    let mut flood = H2_PREFACE.to_vec();
    flood.extend(h2_frame(0x4, 0, 0, &[]));
    for i in 0..2000u32 {
        let sid = 1 + 2 * i;
        flood.extend(h2_frame(0x1, 0x5, sid, HEALTHZ_BLOCK));
        flood.extend(h2_frame(0x3, 0, sid, &8u32.to_be_bytes()));
    }
    let _ = w.write_all(&flood).await;
    assert!(reader.await.unwrap(), "no GOAWAY after 2,000 reset streams");

    let (r, mut w) = TcpStream::connect(s.app_addr()).await.unwrap().into_split();
    let reader = tokio::spawn(goaway_or_close(r));
    let mut start = H2_PREFACE.to_vec();
    start.extend(h2_frame(0x4, 0, 0, &[]));
    start.extend(h2_frame(0x1, 0x0, 1, b"\x82\x86\x04\x08/healthz"));
    w.write_all(&start).await.unwrap();
    let cont = h2_frame(0x9, 0x0, 1, &b"\x10\x01x\x01y".repeat(16384 / 5));
    let mut sent = 0usize;
    let cut = tokio::time::timeout(WAIT, async {
        while sent < 64 << 20 {
            if w.write_all(&cont).await.is_err() {
                return true;
            }
            sent += cont.len();
        }
        false
    })
    .await;
    // Either the writes failed (closed) or they stalled: then the reader must see the end.
    assert!(!matches!(cut, Ok(false)), "64 MiB of CONTINUATION frames were all taken");
    drop(w);
    let _ = reader.await.unwrap();
    assert!(sent < 64 << 20);

    assert_eq!(s.get("/readyz").await.status(), 200);
    s.stop().await;
}
