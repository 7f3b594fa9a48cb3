//! Login throttling: at most `max_failures` failed logins per client address in a sliding window
//! (then 429 with `Retry-After`), plus an exponential backoff per username that holds whatever
//! address the attempts come from. Both maps are bounded caches, so a flood of addresses or
//! made-up usernames costs a fixed amount of memory; IPv6 clients count per /64.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Addresses (or /64s) remembered at most; the least recently used are forgotten first.
pub const MAX_TRACKED_ADDRS: u64 = 65_536;
/// Usernames remembered at most (typed usernames need not exist).
pub const MAX_TRACKED_USERS: u64 = 16_384;
/// Consecutive failures for one username before it backs off (1 s, 2 s, 4 s … up to the cap).
pub const USER_FREE_FAILURES: u32 = 5;
pub const USER_MAX_BACKOFF_S: i64 = 300;

/// What refused an attempt and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after_s: u64,
    /// `client_addr` or `username`.
    pub scope: &'static str,
}

/// A granted attempt, counted as a failure until [`LoginThrottle::succeeded`] says otherwise, so
/// a burst of concurrent attempts cannot slip past the limit.
#[derive(Debug)]
pub struct Attempt {
    addr: AddrKey,
    at_ms: i64,
    username: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum AddrKey {
    V4(u32),
    V6Prefix(u64),
}

impl From<IpAddr> for AddrKey {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => AddrKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddrKey::V4(u32::from(v4)),
                None => AddrKey::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Debug, Default)]
struct UserState {
    consecutive: u32,
    blocked_until_ms: i64,
}

pub struct LoginThrottle {
    max_failures: usize,
    window_ms: i64,
    addrs: moka::sync::Cache<AddrKey, Arc<Mutex<VecDeque<i64>>>>,
    users: moka::sync::Cache<String, Arc<Mutex<UserState>>>,
}

impl std::fmt::Debug for LoginThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginThrottle").field("max_failures", &self.max_failures).finish_non_exhaustive()
    }
}

/// What a refused sign-in says: how long to wait, and that the password was not checked.
pub fn wait_message(retry_after_s: u64) -> String {
    let wait = match retry_after_s {
        0..=1 => "1 second".to_string(),
        2..=90 => format!("{retry_after_s} seconds"),
        s => format!("{} minutes", s.div_ceil(60)),
    };
    format!("too many failed sign-ins: wait {wait} before trying again (until then no password is checked)")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LoginThrottle {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        let window_ms = window.as_millis() as i64;
        Self {
            max_failures: max_failures.max(1) as usize,
            window_ms,
            // Idle entries die after the window (real time; the decisions below use the Clock).
            addrs: moka::sync::Cache::builder().max_capacity(MAX_TRACKED_ADDRS).time_to_idle(window).build(),
            users: moka::sync::Cache::builder()
                .max_capacity(MAX_TRACKED_USERS)
                .time_to_idle(Duration::from_secs(USER_MAX_BACKOFF_S as u64) + window)
                .build(),
        }
    }

    /// Grants an attempt (counting it as a failure for now) or says how long to wait.
    pub fn begin(&self, addr: IpAddr, username: &str, now_ms: i64) -> Result<Attempt, Limited> {
        let key = AddrKey::from(addr);
        let times = self.addrs.get_with(key, Default::default);
        let user = self.users.get_with(username.to_string(), Default::default);
        let mut times = lock(&times);
        while times.front().is_some_and(|t| *t <= now_ms - self.window_ms) {
            times.pop_front();
        }
        if times.len() >= self.max_failures {
            let oldest = times.front().copied().unwrap_or(now_ms);
            return Err(Limited { retry_after_s: ceil_s(oldest + self.window_ms - now_ms), scope: "client_addr" });
        }
        let mut user = lock(&user);
        if user.blocked_until_ms > now_ms {
            return Err(Limited { retry_after_s: ceil_s(user.blocked_until_ms - now_ms), scope: "username" });
        }
        times.push_back(now_ms);
        user.consecutive = user.consecutive.saturating_add(1);
        if user.consecutive >= USER_FREE_FAILURES {
            let exp = (user.consecutive - USER_FREE_FAILURES).min(20);
            let backoff_s = (1i64 << exp).min(USER_MAX_BACKOFF_S);
            user.blocked_until_ms = now_ms + backoff_s * 1000;
        }
        Ok(Attempt { addr: key, at_ms: now_ms, username: username.to_string() })
    }

    /// The attempt had the right password: it was no failure after all.
    pub fn succeeded(&self, attempt: Attempt) {
        if let Some(times) = self.addrs.get(&attempt.addr) {
            let mut times = lock(&times);
            if let Some(pos) = times.iter().rposition(|t| *t == attempt.at_ms) {
                times.remove(pos);
            }
        }
        self.users.invalidate(&attempt.username);
    }

    /// Entries held now (for tests of the memory bound).
    pub fn tracked(&self) -> (u64, u64) {
        self.addrs.run_pending_tasks();
        self.users.run_pending_tasks();
        (self.addrs.entry_count(), self.users.entry_count())
    }
}

fn ceil_s(ms: i64) -> u64 {
    (ms.max(1) as u64).div_ceil(1000)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_address_window() {
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        for i in 0..10 {
            // Different usernames, so only the address limit applies.
            t.begin(ip("192.0.2.1"), &format!("u{i}"), 1_000).unwrap();
        }
        let e = t.begin(ip("192.0.2.1"), "other", 2_000).unwrap_err();
        assert_eq!(e, Limited { retry_after_s: 299, scope: "client_addr" });
        // Another address is unaffected; the window slides.
        t.begin(ip("192.0.2.2"), "x", 2_000).unwrap();
        t.begin(ip("192.0.2.1"), "later", 301_001).unwrap();
    }

    #[test]
    fn success_does_not_count() {
        let t = LoginThrottle::new(2, Duration::from_secs(60));
        for _ in 0..5 {
            let a = t.begin(ip("192.0.2.1"), "admin", 0).unwrap();
            t.succeeded(a);
        }
    }

    #[test]
    fn username_backoff_whatever_the_address() {
        let t = LoginThrottle::new(100, Duration::from_secs(60));
        for i in 0..USER_FREE_FAILURES {
            t.begin(ip(&format!("198.51.100.{i}")), "admin", 0).unwrap();
        }
        let e = t.begin(ip("203.0.113.9"), "admin", 10).unwrap_err();
        assert_eq!(e.scope, "username");
        assert_eq!(e.retry_after_s, 1);
        t.begin(ip("203.0.113.9"), "admin", 1_000).unwrap();
        let e = t.begin(ip("203.0.113.9"), "admin", 1_001).unwrap_err();
        assert_eq!(e.retry_after_s, 2);
    }

    #[test]
    fn ipv6_counts_per_64() {
        let t = LoginThrottle::new(2, Duration::from_secs(60));
        t.begin(ip("2001:db8::1"), "a", 0).unwrap();
        t.begin(ip("2001:db8::2"), "b", 0).unwrap();
        assert!(t.begin(ip("2001:db8::ffff"), "c", 0).is_err());
        t.begin(ip("2001:db8:0:1::1"), "d", 0).unwrap();
    }

    #[test]
    fn memory_is_bounded_under_a_flood() {
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        for i in 0..(MAX_TRACKED_ADDRS as u32 + 20_000) {
            let _ = t.begin(IpAddr::V4(i.into()), "admin-typo", 0);
        }
        let (addrs, users) = t.tracked();
        assert!(addrs <= MAX_TRACKED_ADDRS, "{addrs}");
        assert!(users <= MAX_TRACKED_USERS);
    }
}
