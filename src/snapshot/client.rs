//! The CLI's way to a running server: `POST /api/v1/snapshots` on the configured listen address
//! (loopback when it listens on all addresses), with an admin token minted from the key ring in
//! the data directory, like `gshare admin token`.

use axum::body::Body;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::{SnapshotError, SnapshotInfo};
use crate::config::Config;

fn url(config: &Config) -> String {
    let mut addr = config.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{addr}/api/v1/snapshots")
}

/// What the server answered.
pub enum Answer {
    Saved(SnapshotInfo),
    Downloaded(Vec<u8>),
}

/// Asks the running server for a snapshot.
pub async fn request(config: &Config, token: &str, reason: &str, download: bool) -> Result<Answer, SnapshotError> {
    let fail =
        |m: String| SnapshotError::Refused(format!("the server holds the state file, and asking it failed: {m}"));
    if config.tls_enabled() {
        return Err(fail(format!(
            "it serves HTTPS, which this command does not speak yet; run `curl -X POST -H \"Authorization: Bearer $(gshare admin token | tail -1)\" {}/api/v1/snapshots` instead",
            config.public_url
        )));
    }
    let body = serde_json::json!({ "reason": reason, "download": download }).to_string();
    let req = axum::http::Request::post(url(config))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .map_err(|e| fail(e.to_string()))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let res = client.request(req).await.map_err(|e| fail(format!("{} ({e:?})", url(config))))?;
    let status = res.status();
    let bytes = axum::body::to_bytes(Body::new(res.into_body()), 1 << 34).await.map_err(|e| fail(e.to_string()))?;
    if !status.is_success() {
        let msg = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        return Err(fail(format!("{status}: {msg}")));
    }
    if download {
        Ok(Answer::Downloaded(bytes.to_vec()))
    } else {
        serde_json::from_slice(&bytes).map(Answer::Saved).map_err(|e| fail(e.to_string()))
    }
}
