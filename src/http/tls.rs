//! HTTPS in the binary: the certificate and key files from `tls_cert` / `tls_key`, served through
//! a rustls resolver whose certificate is swapped in place when the files change (watched with
//! notify, plus a periodic check), so renewals need no restart and drop no connection. A broken
//! renewal is logged and the previous certificate kept. Only the ring provider is used (the one cryptography library in the binary).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::locks;
use axum::response::IntoResponse;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// How often the files are re-read even without a file event (network file systems, missed events).
const RECHECK_EVERY: Duration = Duration::from_secs(60);
/// Quiet time after a file event before reloading, so a cert and key written one after the
/// other are read together.
const DEBOUNCE: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("{path} is not a PEM certificate chain: {message}")]
    BadCertificate { path: PathBuf, message: String },
    #[error("{path} holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {message}")]
    BadKey { path: PathBuf, message: String },
    #[error("the private key in {key} does not belong to the certificate in {cert} ({message})")]
    Mismatch { cert: PathBuf, key: PathBuf, message: String },
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// What the reloader has done so far; tests wait on changes instead of sleeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// Successful reloads since start (the initial load is not counted).
    pub reloaded: u64,
    /// Reloads refused (the old certificate stayed).
    pub failed: u64,
    pub last_error: Option<String>,
}

/// The live certificate, and how to refresh it from its files.
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// Digest of the file contents last tried (loaded or refused), so unchanged files do nothing.
    last_seen: RwLock<[u8; 32]>,
    status: watch::Sender<ReloadStatus>,
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader").field("cert", &self.cert_path).field("key", &self.key_path).finish()
    }
}

/// The one crypto provider this project uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Unreadable { path: path.to_path_buf(), source })
}

/// Parses and checks a certificate chain and its key; errors name the offending file.
pub fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::BadCertificate { path: cert_path.to_path_buf(), message: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path.to_path_buf() });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::BadKey { path: key_path.to_path_buf(), message: e.to_string() })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::BadKey { path: key_path.to_path_buf(), message: e.to_string() })?;
    let ck = CertifiedKey::new(chain, signing);
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::Mismatch {
            cert: cert_path.to_path_buf(),
            key: key_path.to_path_buf(),
            message: "public keys differ".into(),
        }),
        Err(e) => Err(TlsError::BadCertificate { path: cert_path.to_path_buf(), message: e.to_string() }),
    }
}

fn digest(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((cert.len() as u64).to_be_bytes());
    h.update(cert);
    h.update(key);
    h.finalize().into()
}

impl CertReloader {
    /// Loads the pair once; any problem is an error naming the file (start-up refuses to run).
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, TlsError> {
        let provider = provider();
        let cert = read(cert_path)?;
        let key = read(key_path)?;
        let ck = load_pair(cert_path, key_path, &cert, &key, &provider)?;
        Ok(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(ck)),
            last_seen: RwLock::new(digest(&cert, &key)),
            status: watch::channel(ReloadStatus::default()).0,
        })
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        locks::read(&self.current).clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<ReloadStatus> {
        self.status.subscribe()
    }

    /// Re-reads the files; swaps the certificate when they changed and are good, keeps the old one
    /// (logging why) when they are not. Returns whether a new certificate is now served. Blocking.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let attempt = read(&self.cert_path).and_then(|cert| Ok((read(&self.key_path)?, cert)));
        let (key, cert) = match attempt {
            Ok(pair) => pair,
            Err(e) => return Err(self.refuse(None, e)),
        };
        let seen = digest(&cert, &key);
        if *locks::read(&self.last_seen) == seen {
            return Ok(false);
        }
        match load_pair(&self.cert_path, &self.key_path, &cert, &key, &self.provider) {
            Ok(ck) => {
                *locks::write(&self.current) = Arc::new(ck);
                *locks::write(&self.last_seen) = seen;
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded; new connections get it");
                self.status.send_modify(|s| {
                    s.reloaded += 1;
                    s.last_error = None;
                });
                Ok(true)
            }
            Err(e) => Err(self.refuse(Some(seen), e)),
        }
    }

    fn refuse(&self, seen: Option<[u8; 32]>, e: TlsError) -> TlsError {
        if let Some(seen) = seen {
            *locks::write(&self.last_seen) = seen;
        }
        let changed = self.status.borrow().last_error.as_deref() != Some(&e.to_string());
        if changed {
            tracing::error!(error = %e, "cannot reload the TLS certificate; still serving the previous one");
        }
        self.status.send_modify(|s| {
            s.failed += 1;
            s.last_error = Some(e.to_string());
        });
        e
    }

    /// A rustls server configuration that asks this reloader for the certificate on every
    /// handshake (HTTP/2 and HTTP/1.1 by ALPN).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Watches the directories holding the files (so `..data` symlink swaps and write-then-rename
    /// are seen) and re-checks every minute; stops when `stop` turns true.
    pub fn spawn_watcher(self: &Arc<Self>, mut stop: watch::Receiver<bool>) -> Result<(), TlsError> {
        use notify::Watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if res.is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|e| TlsError::Setup(format!("cannot watch the certificate files: {e}")))?;
        let mut dirs: Vec<PathBuf> = [&self.cert_path, &self.key_path]
            .iter()
            .map(|p| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf())
            .collect();
        dirs.dedup();
        for dir in &dirs {
            watcher
                .watch(dir, notify::RecursiveMode::NonRecursive)
                .map_err(|e| TlsError::Setup(format!("cannot watch {}: {e}", dir.display())))?;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let _watcher = watcher;
            let mut tick = tokio::time::interval(RECHECK_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    ev = rx.recv() => {
                        if ev.is_none() { return; }
                        // Let a burst of events (cert, then key) settle, then read once.
                        tokio::time::sleep(DEBOUNCE).await;
                        while rx.try_recv().is_ok() {}
                    }
                    _ = tick.tick() => {}
                    () = async { let _ = stop.wait_for(|v| *v).await; } => return,
                }
                let me = me.clone();
                let _ = tokio::task::spawn_blocking(move || me.reload()).await;
            }
        });
        Ok(())
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The router of the plain-HTTP listener that only redirects to HTTPS (308, method kept).
pub fn redirect_router(public_url: &str, https_port: u16) -> axum::Router {
    // A configured https:// public URL wins; the default one may name port 0 or 0.0.0.0.
    let base = public_url
        .strip_prefix("https://")
        .filter(|rest| !rest.ends_with(":0") && !rest.starts_with("0.0.0.0") && !rest.starts_with("[::]"))
        .map(|rest| format!("https://{rest}"));
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let base = base.clone();
        async move {
            let path = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
            let origin = match base {
                Some(b) => b,
                None => {
                    let host = req
                        .headers()
                        .get(axum::http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(strip_port)
                        .filter(|h| !h.is_empty())
                        .unwrap_or("localhost")
                        .to_string();
                    if https_port == 443 { format!("https://{host}") } else { format!("https://{host}:{https_port}") }
                }
            };
            let location = format!("{origin}{path}");
            match axum::http::HeaderValue::from_str(&location) {
                Ok(v) => {
                    (axum::http::StatusCode::PERMANENT_REDIRECT, [(axum::http::header::LOCATION, v)]).into_response()
                }
                Err(_) => axum::http::StatusCode::BAD_REQUEST.into_response(),
            }
        }
    })
}

/// `host:port` -> `host`; `[v6]:port` -> `[v6]`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map(|(h, _)| &host[..h.len() + 1]).unwrap_or(host);
    }
    host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn strips_ports() {
        assert_eq!(strip_port("example.com:80"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
    }
}
