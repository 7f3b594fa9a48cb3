//! Resource exhaustion by unauthenticated clients (issue 12): idle connections are closed and
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
