//! Login throttling that slows an attacker, not the account's owner: at most `max_failures`
//! failed logins per client address in a sliding window (then 429 `scope=client_addr` with
//! `Retry-After`), and a per-username budget of [`USER_BUDGET_FACTOR`] × `max_failures` failures per
//! window summed over every address (then 429 `scope=username`). One address spends its own
//! allowance long before it dents the username's, so the owner signing in from another address
//! gets through while an attacker is throttled; only an attack from
//! [`USER_BUDGET_FACTOR`] addresses (or IPv6 /64s) at once can hold a username. Both maps are
//! bounded caches, so a flood of addresses or made-up usernames costs a fixed amount of memory.

use crate::locks::lock;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Addresses (or /64s) remembered at most; the least recently used are forgotten first.
pub const MAX_TRACKED_ADDRS: u64 = 65_536;
/// Usernames remembered at most (typed usernames need not exist).
pub const MAX_TRACKED_USERS: u64 = 16_384;
/// A username's failure budget per window, in multiples of one address's (`max_failures`).
pub const USER_BUDGET_FACTOR: u32 = 20;

/// What refused an attempt and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after_s: u64,
    /// `client_addr` or `username`.
    pub scope: &'static str,
}

/// A granted attempt, counted as a failure until [`LoginThrottle::succeeded`] says otherwise, so
/// a burst of concurrent attempts cannot slip past the limit. While it is held (its password
/// still being checked) it is also counted as undecided for its address: a refusal then says to
/// retry in a second, not after the window, because the slot may come back at once (a class
/// signing in behind one NAT address).
#[derive(Debug)]
pub struct Attempt {
    addr: AddrKey,
    at_ms: i64,
    username: String,
    undecided: Arc<AddrState>,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.undecided.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One address's failures in the window and its attempts whose password is still being checked.
#[derive(Debug, Default)]
struct AddrState {
    times: Mutex<VecDeque<i64>>,
    in_flight: AtomicUsize,
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

/// A username's failures in fixed windows: the current one and the one before, weighted by how
/// much of it still overlaps the sliding window (two counters instead of a timestamp per failure).
#[derive(Debug, Default)]
struct UserState {
    window_start_ms: i64,
    current: u32,
    previous: u32,
}

impl UserState {
    fn roll(&mut self, now_ms: i64, window_ms: i64) {
        let elapsed = now_ms - self.window_start_ms;
        if elapsed >= 2 * window_ms {
            *self = Self { window_start_ms: now_ms - now_ms.rem_euclid(window_ms), current: 0, previous: 0 };
        } else if elapsed >= window_ms {
            self.previous = self.current;
            self.current = 0;
            self.window_start_ms += window_ms;
        }
    }

    /// Failures in the sliding window ending now (the previous window's share is pro rata).
    fn estimate(&self, now_ms: i64, window_ms: i64) -> u64 {
        let into = (now_ms - self.window_start_ms).clamp(0, window_ms);
        let prev_share = u64::from(self.previous) * (window_ms - into) as u64 / window_ms.max(1) as u64;
        u64::from(self.current) + prev_share
    }
}

pub struct LoginThrottle {
    max_failures: usize,
    user_budget: u64,
    window_ms: i64,
    addrs: moka::sync::Cache<AddrKey, Arc<AddrState>>,
    users: moka::sync::Cache<String, Arc<Mutex<UserState>>>,
}

impl std::fmt::Debug for LoginThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginThrottle")
            .field("max_failures", &self.max_failures)
            .field("user_budget", &self.user_budget)
            .finish_non_exhaustive()
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

impl LoginThrottle {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        let window_ms = (window.as_millis() as i64).max(1);
        let max_failures = max_failures.max(1);
        Self {
            max_failures: max_failures as usize,
            user_budget: u64::from(max_failures) * u64::from(USER_BUDGET_FACTOR),
            window_ms,
            // Idle entries die after the window (real time; the decisions below use the Clock).
            addrs: moka::sync::Cache::builder().max_capacity(MAX_TRACKED_ADDRS).time_to_idle(window).build(),
            users: moka::sync::Cache::builder().max_capacity(MAX_TRACKED_USERS).time_to_idle(window * 2).build(),
        }
    }

    /// Failures one username may take per window from all addresses together.
    pub fn user_budget(&self) -> u64 {
        self.user_budget
    }

    /// Grants an attempt (counting it as a failure for now) or says how long to wait.
    pub fn begin(&self, addr: IpAddr, username: &str, now_ms: i64) -> Result<Attempt, Limited> {
        let key = AddrKey::from(addr);
        let state = self.addrs.get_with(key, Default::default);
        let mut times = lock(&state.times);
        self.address_allows(&mut times, &state, now_ms)?;
        let user = self.users.get_with(username.to_string(), Default::default);
        let mut user = lock(&user);
        user.roll(now_ms, self.window_ms);
        if user.estimate(now_ms, self.window_ms) >= self.user_budget {
            // Until enough of the previous window has slid out (or the current one ends).
            let wait_ms = if user.current as u64 >= self.user_budget {
                user.window_start_ms + self.window_ms - now_ms + 1
            } else {
                let excess = user.estimate(now_ms, self.window_ms) + 1 - self.user_budget;
                excess as i64 * self.window_ms / i64::from(user.previous.max(1)) + 1
            };
            return Err(Limited { retry_after_s: ceil_s(wait_ms), scope: "username" });
        }
        times.push_back(now_ms);
        user.current = user.current.saturating_add(1);
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(Attempt { addr: key, at_ms: now_ms, username: username.to_string(), undecided: Arc::clone(&state) })
    }

    /// A failure that names no usable username (an empty or over-long one, an empty password):
    /// counted against the address only, or refused like any attempt over its limit.
    pub fn fail_address(&self, addr: IpAddr, now_ms: i64) -> Result<(), Limited> {
        let state = self.addrs.get_with(AddrKey::from(addr), Default::default);
        let mut times = lock(&state.times);
        self.address_allows(&mut times, &state, now_ms)?;
        times.push_back(now_ms);
        Ok(())
    }

    /// Drops an address's failures that left the window; refuses when it still holds
    /// `max_failures` of them (attempts still being checked included). When some of those are
    /// still being checked, the wait is a second: they free their places as they succeed.
    fn address_allows(&self, times: &mut VecDeque<i64>, state: &AddrState, now_ms: i64) -> Result<(), Limited> {
        while times.front().is_some_and(|t| *t <= now_ms - self.window_ms) {
            times.pop_front();
        }
        if times.len() >= self.max_failures {
            let retry_after_s = if state.in_flight.load(Ordering::Acquire) > 0 {
                1
            } else {
                let oldest = times.front().copied().unwrap_or(now_ms);
                ceil_s(oldest + self.window_ms - now_ms)
            };
            return Err(Limited { retry_after_s, scope: "client_addr" });
        }
        Ok(())
    }

    /// The attempt had the right password: it was no failure after all.
    pub fn succeeded(&self, attempt: Attempt) {
        if let Some(state) = self.addrs.get(&attempt.addr) {
            let mut times = lock(&state.times);
            if let Some(pos) = times.iter().rposition(|t| *t == attempt.at_ms) {
                times.remove(pos);
            }
        }
        if let Some(user) = self.users.get(&attempt.username) {
            let mut user = lock(&user);
            if attempt.at_ms >= user.window_start_ms {
                user.current = user.current.saturating_sub(1);
            } else {
                user.previous = user.previous.saturating_sub(1);
            }
        }
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
    fn a_class_behind_one_address_is_told_to_retry_at_once_not_after_the_window() {
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        // Ten students' passwords are being checked: the eleventh waits a second, not 300.
        let held: Vec<_> = (0..10).map(|i| t.begin(ip("192.0.2.9"), &format!("s{i}"), 1_000).unwrap()).collect();
        let e = t.begin(ip("192.0.2.9"), "s10", 1_000).unwrap_err();
        assert_eq!(e, Limited { retry_after_s: 1, scope: "client_addr" });
        // They succeed: their places come back at once.
        for a in held {
            t.succeeded(a);
        }
        let a = t.begin(ip("192.0.2.9"), "s10", 1_100).unwrap();
        t.succeeded(a);
        // Ten decided failures still hold the address for the window, however they were made.
        for i in 0..10 {
            drop(t.begin(ip("192.0.2.9"), &format!("x{i}"), 2_000).unwrap());
        }
        assert_eq!(
            t.begin(ip("192.0.2.9"), "y", 2_000).unwrap_err(),
            Limited { retry_after_s: 300, scope: "client_addr" }
        );
        // One undecided among nine failures: the wait is a second again.
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        for i in 0..9 {
            drop(t.begin(ip("192.0.2.9"), &format!("x{i}"), 0).unwrap());
        }
        let pending = t.begin(ip("192.0.2.9"), "p", 0).unwrap();
        assert_eq!(t.begin(ip("192.0.2.9"), "q", 0).unwrap_err().retry_after_s, 1);
        drop(pending);
        assert_eq!(t.begin(ip("192.0.2.9"), "q", 0).unwrap_err().retry_after_s, 300);
    }

    #[test]
    fn success_does_not_count() {
        let t = LoginThrottle::new(2, Duration::from_secs(60));
        for _ in 0..5 {
            let a = t.begin(ip("192.0.2.1"), "admin", 0).unwrap();
            t.succeeded(a);
        }
    }

    /// One attacker address hammering `admin` for an hour, one attempt a second: it spends its own
    /// allowance (`max_failures` per window) and nothing more, and the owner signs in from another
    /// address at every point of the attack. Prints the figure quoted in the docs.
    #[test]
    fn an_attacker_address_slows_itself_not_the_owner() {
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        let (attacker, owner) = (ip("192.0.2.66"), ip("198.51.100.7"));
        let (mut granted, mut owner_ok) = (0u32, 0u32);
        for second in 0..3600i64 {
            let now = second * 1000;
            match t.begin(attacker, "admin", now) {
                Ok(_) => granted += 1,
                Err(l) => assert_eq!(l.scope, "client_addr", "at {second}s"),
            }
            if second % 60 == 30 {
                let a = t.begin(owner, "admin", now).unwrap_or_else(|l| panic!("owner refused at {second}s: {l:?}"));
                t.succeeded(a);
                owner_ok += 1;
            }
        }
        // 10 per 5 minutes, i.e. 2 per minute.
        assert_eq!(granted, 120);
        assert_eq!(owner_ok, 60);
        eprintln!("one address: {} guesses/min against `admin`; owner: {owner_ok}/60 sign-ins accepted", granted / 60);
    }

    #[test]
    fn the_username_budget_holds_a_distributed_attack() {
        let t = LoginThrottle::new(10, Duration::from_secs(300));
        assert_eq!(t.user_budget(), 200);
        // 20 addresses spend their 10 each: the username's budget is gone.
        for a in 0..20u8 {
            for _ in 0..10 {
                t.begin(ip(&format!("198.51.100.{a}")), "admin", 1_000).unwrap();
            }
        }
        let e = t.begin(ip("203.0.113.9"), "admin", 2_000).unwrap_err();
        assert_eq!(e.scope, "username");
        assert!((1..=300).contains(&e.retry_after_s), "{e:?}");
        // Other usernames are untouched; the budget comes back as the window slides.
        t.begin(ip("203.0.113.9"), "alice", 2_000).unwrap();
        t.begin(ip("203.0.113.9"), "admin", 1_000 + 2 * 300_000).unwrap();
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
