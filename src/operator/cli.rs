//! What the `gshare` command line needs to reach a running server on this host: where it
//! listens, a short-lived admin token from the data directory's key ring, and one JSON call.
//! Nothing here creates keys: a command run against the wrong data directory is refused.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::auth::keys::KeyRingDir;
use crate::auth::tokens::{AUD_API, AUD_INTERNAL, TokenAuthority};
use crate::clock::Clock;
use crate::config::Config;

/// Why no key ring could be used: names the directory looked at.
pub fn missing_ring(config: &Config, ring: &str) -> String {
    let dir = config.keys_dir().join(ring);
    let shown = std::path::absolute(&dir).unwrap_or(dir);
    let data = std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
    format!(
        "no signing key ring at {} (data_dir {}); point this command at the server's data directory \
         (--config /etc/gshare/config.toml, or GSHARE_DATA_DIR) — a new key ring here would sign tokens \
         the server rejects",
        shown.display(),
        data.display()
    )
}

fn existing_ring(config: &Config, ring: &str) -> Result<KeyRingDir, String> {
    let dir = KeyRingDir::new(config.keys_dir().join(ring));
    let loaded = dir.load().map_err(|e| e.to_string())?;
    if loaded.active().is_none() {
        return Err(missing_ring(config, ring));
    }
    Ok(dir)
}

/// The internal (operator) authority of an existing data directory; never generates a key.
pub fn existing_internal(config: &Config, clock: Clock) -> Result<TokenAuthority, String> {
    let configured = match &config.internal_jwt_private_key {
        Some(pem) => Some(
            crate::auth::keys::SigningKey::from_pem(pem.expose(), config.internal_jwt_kid.as_deref())
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let ring = match &configured {
        Some(_) => KeyRingDir::new(config.keys_dir().join("internal")),
        None => existing_ring(config, "internal")?,
    };
    TokenAuthority::open(AUD_INTERNAL, ring, configured, clock).map(|(a, _)| a).map_err(|e| e.to_string())
}

/// A five-minute admin token for the CLI's own calls (`admin:cli`).
pub fn cli_admin_token(config: &Config) -> Result<String, String> {
    let ring = existing_ring(config, "api")?;
    let (api, _) = TokenAuthority::open(AUD_API, ring, None, Clock::system()).map_err(|e| e.to_string())?;
    api.mint(&format!("{}cli", crate::auth::guard::ADMIN_PREFIX), Duration::from_secs(300)).map_err(|e| e.to_string())
}

/// Where this host's server answers: `listen` (a wildcard address means loopback).
fn local_addr(config: &Config) -> SocketAddr {
    let mut addr = config.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        });
    }
    addr
}

/// Is this data directory's server running? Its state file is locked (a server holds it open)
/// and something answers on the configured address; otherwise the CLI works offline.
pub async fn server_running(config: &Config) -> bool {
    let held = match std::fs::OpenOptions::new().read(true).open(config.state_file()) {
        Ok(f) => match fs4::fs_std::FileExt::try_lock_shared(&f) {
            Ok(true) => {
                let _ = fs4::fs_std::FileExt::unlock(&f);
                false
            }
            Ok(false) | Err(_) => true,
        },
        Err(_) => false,
    };
    held && tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(local_addr(config)))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// One call to the local server; `Ok((status, body))`. With TLS on, the server's own certificate
/// is the only trusted root and the name checked is `public_url`'s host.
pub async fn call(config: &Config, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
    let addr = local_addr(config);
    let token = cli_admin_token(config)?;
    let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(120));
    let base = if config.tls_enabled() {
        let host = config
            .public_url
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .map(|a| a.rsplit_once(':').map(|(h, _)| h).unwrap_or(a).trim_matches(['[', ']']).to_string())
            .unwrap_or_else(|| "localhost".into());
        let cert_path: PathBuf = config.tls_cert.clone().unwrap_or_default();
        let pem = std::fs::read(&cert_path).map_err(|e| format!("cannot read {}: {e}", cert_path.display()))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| e.to_string())? {
            builder = builder.add_root_certificate(cert);
        }
        builder = builder.tls_built_in_root_certs(false).resolve(&host, addr);
        format!("https://{host}:{}", addr.port())
    } else {
        format!("http://{addr}")
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = builder.build().map_err(|e| e.to_string())?;
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut req = client.request(method, format!("{base}{path}")).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.map_err(|e| format!("cannot reach the server at {base}: {e}"))?;
    let status = res.status().as_u16();
    let text = res.text().await.map_err(|e| e.to_string())?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// The API's error message from an error body.
pub fn error_message(body: &Value) -> String {
    body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| body.to_string())
}
