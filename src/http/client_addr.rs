//! The client address of a request: the TCP peer, unless `trusted_proxy_hops` = N > 0, then the
//! Nth `X-Forwarded-For` entry from the right, counted across all XFF header lines in order —
//! and, when `trusted_proxies` is set, only if the peer is one of those proxies. With N = 0 a
//! client can never choose its own address. Used by login throttling and the audit log.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use ipnet::IpNet;

use crate::config::Config;

/// The rule, from configuration.
#[derive(Debug, Clone, Copy)]
pub struct ProxyTrust<'a> {
    pub hops: u32,
    /// Empty = any peer may be the nearest proxy.
    pub trusted: &'a [IpNet],
}

impl<'a> ProxyTrust<'a> {
    pub fn from_config(config: &'a Config) -> Self {
        Self { hops: config.trusted_proxy_hops, trusted: &config.trusted_proxies }
    }
}

/// The client address for a peer and its headers, by `trust`.
pub fn resolve(trust: ProxyTrust<'_>, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
    let peer = canonical(peer);
    if trust.hops == 0 {
        return peer;
    }
    if !trust.trusted.is_empty() && !trust.trusted.iter().any(|net| net.contains(&peer)) {
        return peer;
    }
    // All entries, in order, across every X-Forwarded-For line (proxies may append a new line).
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() {
        return peer;
    }
    // Fewer entries than hops: no client-written entry is present; the leftmost one was added by
    // a trusted proxy and is as close to the client as we can get.
    let index = entries.len().saturating_sub(trust.hops as usize);
    parse_entry(entries[index]).map(canonical).unwrap_or(peer)
}

/// `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:443`.
fn parse_entry(e: &str) -> Option<IpAddr> {
    if let Ok(ip) = e.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = e.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    e.strip_prefix('[').and_then(|r| r.strip_suffix(']')).and_then(|r| r.parse().ok())
}

/// IPv4-mapped IPv6 (`::ffff:1.2.3.4`) as plain IPv4, so one client has one address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The client address of a request being extracted (`0.0.0.0` when no peer is known, e.g. in
/// router unit tests without a socket).
pub fn from_parts(config: &Config, parts: &Parts) -> IpAddr {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    resolve(ProxyTrust::from_config(config), peer, &parts.headers)
}

/// Extractor form: `ClientAddr(ip)` in a handler's arguments.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// The settings [`ClientAddr`] (and the audit log's request facts) read: the proxy rule.
#[derive(Debug, Clone)]
pub struct AddrConfig {
    pub config: std::sync::Arc<Config>,
}

impl<S> axum::extract::FromRequestParts<S> for ClientAddr
where
    S: Send + Sync,
    AddrConfig: axum::extract::FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let addrs: AddrConfig = axum::extract::FromRef::from_ref(state);
        Ok(Self(from_parts(&addrs.config, parts)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("x-forwarded-for", l.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn hops_zero_is_the_peer_whatever_the_headers() {
        let t = ProxyTrust { hops: 0, trusted: &[] };
        assert_eq!(resolve(t, ip("10.0.0.9"), &headers(&["6.6.6.6"])), ip("10.0.0.9"));
    }

    #[test]
    fn nth_from_the_right_across_lines() {
        let h = headers(&["6.6.6.6, 1.1.1.1", "2.2.2.2"]);
        let one = ProxyTrust { hops: 1, trusted: &[] };
        let two = ProxyTrust { hops: 2, trusted: &[] };
        let three = ProxyTrust { hops: 3, trusted: &[] };
        assert_eq!(resolve(one, ip("10.0.0.1"), &h), ip("2.2.2.2"));
        assert_eq!(resolve(two, ip("10.0.0.1"), &h), ip("1.1.1.1"));
        assert_eq!(resolve(three, ip("10.0.0.1"), &h), ip("6.6.6.6"));
        // More hops than entries: the leftmost (proxy-written) entry.
        let nine = ProxyTrust { hops: 9, trusted: &[] };
        assert_eq!(resolve(nine, ip("10.0.0.1"), &h), ip("6.6.6.6"));
        // No header at all: the peer.
        assert_eq!(resolve(one, ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
    }

    #[test]
    fn garbage_and_ports() {
        let one = ProxyTrust { hops: 1, trusted: &[] };
        assert_eq!(resolve(one, ip("10.0.0.1"), &headers(&["not-an-ip"])), ip("10.0.0.1"));
        assert_eq!(resolve(one, ip("10.0.0.1"), &headers(&["1.2.3.4:555"])), ip("1.2.3.4"));
        assert_eq!(resolve(one, ip("10.0.0.1"), &headers(&["[2001:db8::1]:443"])), ip("2001:db8::1"));
        assert_eq!(resolve(one, ip("10.0.0.1"), &headers(&["::ffff:1.2.3.4"])), ip("1.2.3.4"));
    }

    #[test]
    fn untrusted_peer_is_the_client() {
        let nets: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let t = ProxyTrust { hops: 1, trusted: &nets };
        assert_eq!(resolve(t, ip("10.1.2.3"), &headers(&["5.5.5.5"])), ip("5.5.5.5"));
        assert_eq!(resolve(t, ip("192.168.1.1"), &headers(&["5.5.5.5"])), ip("192.168.1.1"));
    }
}
