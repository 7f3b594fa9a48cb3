//! The session origin. Every session app is served on its session domain (upstream's
//! `/proxy/<cr>/` layout puts them all on one origin), and an app runs its user's code: whatever
//! this server answered on that host would be readable and scriptable by every app there. So on
//! a session domain only the relay (`/proxy/…`), the forward-auth check the ingress calls
//! (`/internal/connect/verify`) and the health paths answer; the console, `/api/v1/*` and sign-in
//! are 421 `wrong_host` there, and no console cookie is ever set for that host. A session domain
//! that is also the console's own host (`public_url`) cannot be told apart and is left alone.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::Sessions;
use super::relay::request_host;
use crate::clusters::model::CLUSTERS;
use crate::http::error::{ApiError, ErrorCode};
use crate::locks::lock;

/// The session domains in force (the server's and every cluster's), lower case, read at one
/// generation of the clusters table.
#[derive(Debug, Default)]
pub struct SessionHosts(Mutex<Option<(u64, Arc<HashSet<String>>)>>);

/// Paths a session domain still answers.
fn served_on_session_hosts(path: &str) -> bool {
    path.starts_with("/proxy/") || matches!(path, "/internal/connect/verify" | "/healthz" | "/readyz")
}

/// The host part of a URL, lower case, without port or a final dot.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

impl Sessions {
    /// Whether `host` (lower case, no port) is a session domain and not the console's host.
    pub async fn is_session_host(&self, host: &str) -> bool {
        let generation = self.store.table_generation(&[CLUSTERS.name()]);
        let cached = lock(&self.session_hosts.0).clone();
        let hosts = match cached {
            Some((g, hosts)) if g == generation => hosts,
            _ => {
                let read = self.store.read(|txn| CLUSTERS.list(txn)).await;
                let clusters = match read {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the clusters' session domains");
                        return false;
                    }
                };
                let console = url_host(&self.config.public_url);
                let hosts: HashSet<String> = clusters
                    .iter()
                    .filter_map(|(_, c)| c.session_domain.clone())
                    .chain(self.config.session_domain.clone())
                    .map(|d| d.trim_end_matches('.').to_ascii_lowercase())
                    .filter(|d| Some(d) != console.as_ref())
                    .collect();
                let hosts = Arc::new(hosts);
                *lock(&self.session_hosts.0) = Some((generation, hosts.clone()));
                hosts
            }
        };
        hosts.contains(host)
    }
}

/// The host a request's answer depends on: lower case, `None` for the paths a session domain
/// serves (and requests naming no host). See [`refusal`].
pub fn host_to_check(req: &Request) -> Option<String> {
    if served_on_session_hosts(req.uri().path()) {
        return None;
    }
    request_host(req).map(|h| h.to_ascii_lowercase())
}

/// When `host` (from [`host_to_check`]) is a session domain, the refusal (`None`: the request
/// goes on). Run by the router's per-route rules (`crate::http`).
pub async fn refusal(sessions: &Sessions, host: String) -> Option<Response> {
    if !sessions.is_session_host(&host).await {
        return None;
    }
    Some(
        ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::WrongHost,
            format!(
                "{host} is a session domain: it serves session apps under /proxy/ only; the console is at its own address"
            ),
        )
        .with_details(serde_json::json!({ "host": host }))
        .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_hosts() {
        assert_eq!(url_host("https://GShare.Lab.example:8443/x").as_deref(), Some("gshare.lab.example"));
        assert_eq!(url_host("http://[::1]:8080").as_deref(), Some("::1"));
        assert_eq!(url_host("http://user@host.example./").as_deref(), Some("host.example"));
    }

    #[test]
    fn what_a_session_domain_serves() {
        for p in ["/proxy/ses-1/lab", "/internal/connect/verify", "/healthz", "/readyz"] {
            assert!(served_on_session_hosts(p), "{p}");
        }
        for p in
            ["/", "/api/v1/auth/login", "/api/v1/clusters", "/internal/inventory/nodes", "/assets/app.js", "/proxy"]
        {
            assert!(!served_on_session_hosts(p), "{p}");
        }
    }
}
