//! Time, passed in: production reads the system clock; tests shift it instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock seconds and milliseconds since the Unix epoch, plus a test-only offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    pub fn system() -> Self {
        Self::default()
    }

    /// Unix time in milliseconds.
    pub fn now_ms(&self) -> i64 {
        let sys = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        sys + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Unix time in seconds.
    pub fn now(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// Moves this clock (and every clone of it) forward; tests only.
    pub fn advance(&self, by: std::time::Duration) {
        self.offset_ms.fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

/// RFC 3339 UTC with milliseconds, for API answers.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn advance_is_shared_by_clones() {
        let a = Clock::system();
        let b = a.clone();
        let before = b.now();
        a.advance(std::time::Duration::from_secs(3600));
        assert!(b.now() >= before + 3600);
    }
}
