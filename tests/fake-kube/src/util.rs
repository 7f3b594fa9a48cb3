//! Small helpers without dependencies: RFC 3339 timestamps, ids (random and derived), JSON paths.

use std::hash::BuildHasher;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `2025-01-02T03:04:05Z`, the form Kubernetes uses for `metav1.Time`.
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub(crate) fn now_rfc3339() -> String {
    rfc3339(unix_now())
}

pub(crate) fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let days = days_from_civil(y, mo as u32, d as u32);
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + se).ok()
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// kubectl's AGE column (`duration.HumanDuration`).
pub(crate) fn human_age(created: &str) -> String {
    let Some(t) = parse_rfc3339(created) else {
        return "<unknown>".into();
    };
    let s = unix_now().saturating_sub(t);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

/// splitmix64: enough randomness for uids, tokens and names in a test server.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn from_entropy() -> Self {
        let seed = std::collections::hash_map::RandomState::new().hash_one((SystemTime::now(), std::process::id()));
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn uuid(&mut self) -> String {
        format_uuid(self.next_u64(), self.next_u64())
    }

    pub(crate) fn hex(&mut self, bytes: usize) -> String {
        let mut s = String::with_capacity(bytes * 2);
        while s.len() < bytes * 2 {
            s.push_str(&format!("{:016x}", self.next_u64()));
        }
        s.truncate(bytes * 2);
        s
    }

    /// Suffix for `generateName`, from the same alphabet as the real server.
    pub(crate) fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5).map(|_| ALPHABET[(self.next_u64() % ALPHABET.len() as u64) as usize] as char).collect()
    }
}

fn format_uuid(hi: u64, lo: u64) -> String {
    // Version 4, variant 10xx, like the uids a real API server hands out.
    let hi = (hi & !0xF000) | 0x4000;
    let lo = (lo & !(0b11 << 62)) | (0b10 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xFFFF,
        hi & 0xFFFF,
        lo >> 48,
        lo & 0xFFFF_FFFF_FFFF
    )
}

fn fnv1a(salt: u64, data: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for b in data.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// A uuid derived from a string: the same input always gives the same uuid.
pub(crate) fn derived_uuid(input: &str) -> String {
    let mut a = Rng(fnv1a(1, input));
    let mut b = Rng(fnv1a(0x5bd1_e995, input));
    format_uuid(a.next_u64(), b.next_u64())
}

pub(crate) fn fnv_hex(data: &str) -> String {
    format!("{:016X}", fnv1a(0, data))
}

/// Shorthands for reading `metadata.*` fields.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(serde_json::Map::new());
    }
    let Value::Object(root) = obj else { unreachable!("made an object above") };
    let meta = root.entry("metadata").or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(serde_json::Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// Follows a simple JSONPath such as `.spec.nodeName` or `.status.conditions[0].type`.
pub(crate) fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path.trim_start_matches('.').split('.') {
        if part.is_empty() {
            continue;
        }
        let (field, index) = match part.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trip() {
        let t = 1_735_787_045; // 2025-01-02T03:04:05Z
        assert_eq!(rfc3339(t), "2025-01-02T03:04:05Z");
        assert_eq!(parse_rfc3339("2025-01-02T03:04:05Z"), Some(t));
    }

    #[test]
    fn derived_uuids_are_stable() {
        assert_eq!(derived_uuid("a"), derived_uuid("a"));
        assert_ne!(derived_uuid("a"), derived_uuid("b"));
        assert_eq!(derived_uuid("a").len(), 36);
    }
}
