//! The usage ledger: GPU time per session (GPU-memory GiB-hours, slice-hours, CPU-hours), rolled
//! up per user (and the group they were in) by UTC day and month.
//!
//! Written only when a session starts or stops running, inside the phase change's own
//! transaction ([`running_changed`], from `put_session`): a start records one open run; a stop
//! closes it, splitting it at every UTC midnight (so a month boundary splits it too) into the
//! session's ledger and the day and month rollups. Reports that change no phase write nothing
//! here. A query adds the open runs up to now, so running sessions count as they run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::{Date, Month, OffsetDateTime};

use crate::store::{JsonTable, StoreError, WriteTxn};

/// `<session id>` -> the run in progress.
pub const USAGE_OPEN: JsonTable<OpenRun> = JsonTable::new("usage_open");
/// `<session id>/<YYYY-MM-DD>` -> what the session used that day (the per-session ledger).
pub const USAGE_LEDGER: JsonTable<LedgerEntry> = JsonTable::new("usage_ledger");
/// `d/<YYYY-MM-DD>/<user>/<group>` and `m/<YYYY-MM>/<user>/<group>` (group empty when none) ->
/// the sum of closed runs.
pub const USAGE_ROLLUP: JsonTable<Amounts> = JsonTable::new("usage_rollup");

const DAY_MS: i64 = 86_400_000;

/// A session's run since it last started running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenRun {
    pub owner: String,
    pub group: Option<String>,
    pub since: i64,
    pub gpu_mem_mb: u64,
    /// 1 for a GPU session (one slice or one whole card), 0 otherwise.
    pub slices: u64,
    pub cpu: u64,
}

/// Sums, in exact integer units: milliseconds, MiB·ms, slice·ms, CPU·ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    pub running_ms: u64,
    pub gpu_mem_mib_ms: u64,
    pub slice_ms: u64,
    pub cpu_ms: u64,
}

impl Amounts {
    fn of(run: &OpenRun, ms: u64) -> Self {
        Self {
            running_ms: ms,
            gpu_mem_mib_ms: run.gpu_mem_mb.saturating_mul(ms),
            slice_ms: run.slices.saturating_mul(ms),
            cpu_ms: run.cpu.saturating_mul(ms),
        }
    }

    pub fn add(&mut self, o: &Amounts) {
        self.running_ms = self.running_ms.saturating_add(o.running_ms);
        self.gpu_mem_mib_ms = self.gpu_mem_mib_ms.saturating_add(o.gpu_mem_mib_ms);
        self.slice_ms = self.slice_ms.saturating_add(o.slice_ms);
        self.cpu_ms = self.cpu_ms.saturating_add(o.cpu_ms);
    }
}

/// One session's use on one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub owner: String,
    pub group: Option<String>,
    #[serde(flatten)]
    pub amounts: Amounts,
}

/// What a session holds while it runs (from its shape).
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    pub gpu: bool,
    pub gpu_mem_mb: i64,
    pub cpu: i64,
}

/// The UTC day of `ms`.
pub fn day_of(ms: i64) -> Date {
    let days = ms.div_euclid(DAY_MS);
    // 1970-01-01 is Julian day 2,440,588; the clamp keeps absurd clocks in time's range.
    let jd = (2_440_588 + days).clamp(i64::from(Date::MIN.to_julian_day()), i64::from(Date::MAX.to_julian_day()));
    Date::from_julian_day(jd as i32).unwrap_or(Date::MIN)
}

/// Milliseconds of `d`'s midnight (UTC).
pub fn midnight_ms(d: Date) -> i64 {
    (i64::from(d.to_julian_day()) - 2_440_588) * DAY_MS
}

pub fn month_key(d: Date) -> String {
    format!("{:04}-{:02}", d.year(), u8::from(d.month()))
}

/// The first day of `d`'s month.
pub fn month_start(d: Date) -> Date {
    d.replace_day(1).unwrap_or(d)
}

/// The last day of `d`'s month.
pub fn month_end(d: Date) -> Date {
    let (y, m) = (d.year(), d.month());
    let next = if m == Month::December {
        Date::from_calendar_date(y + 1, Month::January, 1)
    } else {
        Date::from_calendar_date(y, m.next(), 1)
    };
    next.ok().and_then(|n| n.previous_day()).unwrap_or(d)
}

/// `[since, until)` split at every UTC midnight: (day, milliseconds that day).
pub fn split_by_day(since: i64, until: i64) -> Vec<(Date, u64)> {
    let mut out = Vec::new();
    let mut t = since;
    while t < until {
        let day = day_of(t);
        let next = midnight_ms(day) + DAY_MS;
        let end = next.min(until);
        out.push((day, (end - t) as u64));
        t = end;
    }
    out
}

fn rollup_key(kind: char, period: &str, owner: &str, group: Option<&str>) -> String {
    format!("{kind}/{period}/{owner}/{}", group.unwrap_or(""))
}

/// Called by `put_session` when a session starts (`Some(holding)`, at `at`) or stops (`None`)
/// running. Writes nothing else: reports that change no phase never reach here.
pub fn running_changed(
    txn: &WriteTxn,
    session_id: &str,
    owner: &str,
    start: Option<Holding>,
    at: i64,
) -> Result<(), StoreError> {
    match start {
        Some(h) => {
            // A run left open (never expected) is closed first: nothing is counted twice.
            if let Some(run) = USAGE_OPEN.get_in_write(txn, session_id)? {
                close(txn, session_id, &run, at)?;
            }
            let group = crate::auth::accounts::group_of(txn, owner)?;
            let run = OpenRun {
                owner: owner.to_string(),
                group,
                since: at,
                gpu_mem_mb: if h.gpu { h.gpu_mem_mb.max(0) as u64 } else { 0 },
                slices: u64::from(h.gpu),
                cpu: h.cpu.max(0) as u64,
            };
            USAGE_OPEN.put(txn, session_id, &run)
        }
        None => {
            let Some(run) = USAGE_OPEN.get_in_write(txn, session_id)? else { return Ok(()) };
            close(txn, session_id, &run, at)?;
            USAGE_OPEN.delete(txn, session_id).map(drop)
        }
    }
}

fn close(txn: &WriteTxn, session_id: &str, run: &OpenRun, until: i64) -> Result<(), StoreError> {
    let mut months: BTreeMap<String, Amounts> = BTreeMap::new();
    for (day, ms) in split_by_day(run.since, until) {
        let a = Amounts::of(run, ms);
        let d = day.to_string();
        let key = format!("{session_id}/{d}");
        let mut entry = USAGE_LEDGER.get_in_write(txn, &key)?.unwrap_or_else(|| LedgerEntry {
            owner: run.owner.clone(),
            group: run.group.clone(),
            amounts: Amounts::default(),
        });
        entry.amounts.add(&a);
        USAGE_LEDGER.put(txn, &key, &entry)?;
        let key = rollup_key('d', &d, &run.owner, run.group.as_deref());
        let mut sum = USAGE_ROLLUP.get_in_write(txn, &key)?.unwrap_or_default();
        sum.add(&a);
        USAGE_ROLLUP.put(txn, &key, &sum)?;
        months.entry(month_key(day)).or_default().add(&a);
    }
    for (m, a) in months {
        let key = rollup_key('m', &m, &run.owner, run.group.as_deref());
        let mut sum = USAGE_ROLLUP.get_in_write(txn, &key)?.unwrap_or_default();
        sum.add(&a);
        USAGE_ROLLUP.put(txn, &key, &sum)?;
    }
    Ok(())
}

/// Day or month rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Day,
    Month,
}

/// Rows by user (with their group) or by group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    User,
    Group,
}

/// What a usage query asks (validated by the route).
#[derive(Debug, Clone)]
pub struct Query {
    pub user: Option<String>,
    pub group: Option<String>,
    /// Inclusive; widened to whole months for [`Granularity::Month`].
    pub from: Date,
    pub to: Date,
    pub granularity: Granularity,
    pub by: By,
}

/// (period, user (by user), group) -> amounts.
pub type Rollup = BTreeMap<(String, Option<String>, Option<String>), Amounts>;

/// The rollups in the query's range, plus the open runs up to `now`.
pub fn query(txn: &redb::ReadTransaction, q: &Query, now: i64) -> Result<Rollup, StoreError> {
    let mut out: Rollup = BTreeMap::new();
    let wanted = |owner: &str, group: Option<&str>| {
        q.user.as_deref().is_none_or(|u| u == owner) && q.group.as_deref().is_none_or(|g| Some(g) == group)
    };
    let mut add = |period: String, owner: &str, group: Option<&str>, a: &Amounts| {
        let user = (q.by == By::User).then(|| owner.to_string());
        out.entry((period, user, group.map(str::to_string))).or_default().add(a);
    };
    let (kind, periods): (char, Vec<String>) = match q.granularity {
        Granularity::Day => {
            let mut v = Vec::new();
            let mut d = q.from;
            while d <= q.to {
                v.push(d.to_string());
                let Some(n) = d.next_day() else { break };
                d = n;
            }
            ('d', v)
        }
        Granularity::Month => {
            let mut v = Vec::new();
            let mut d = month_start(q.from);
            while d <= q.to {
                v.push(month_key(d));
                let Some(n) = month_end(d).next_day() else { break };
                d = n;
            }
            ('m', v)
        }
    };
    for period in &periods {
        let prefix = format!("{kind}/{period}/");
        // With a user filter, only that user's rows are read.
        let prefix = match &q.user {
            Some(u) => format!("{prefix}{u}/"),
            None => prefix,
        };
        for (key, a) in USAGE_ROLLUP.list_prefix(txn, &prefix)? {
            let Some(rest) = key.strip_prefix(&format!("{kind}/{period}/")) else { continue };
            let Some((owner, group)) = rest.split_once('/') else { continue };
            let group = Some(group).filter(|g| !g.is_empty());
            if wanted(owner, group) {
                add(period.clone(), owner, group, &a);
            }
        }
    }
    let (first, last) = match q.granularity {
        Granularity::Day => (q.from, q.to),
        Granularity::Month => (month_start(q.from), month_end(q.to)),
    };
    for (_, run) in USAGE_OPEN.list(txn)? {
        if !wanted(&run.owner, run.group.as_deref()) {
            continue;
        }
        for (day, ms) in split_by_day(run.since, now) {
            if day < first || day > last {
                continue;
            }
            let period = match q.granularity {
                Granularity::Day => day.to_string(),
                Granularity::Month => month_key(day),
            };
            add(period, &run.owner, run.group.as_deref(), &Amounts::of(&run, ms));
        }
    }
    Ok(out)
}

/// `d` at noon, as milliseconds (tests).
pub fn ms_of(y: i32, m: u8, d: u8, h: u8) -> i64 {
    let date = Month::try_from(m).ok().and_then(|m| Date::from_calendar_date(y, m, d).ok()).unwrap_or(Date::MIN);
    midnight_ms(date) + i64::from(h) * 3_600_000
}

/// Now as a date (the default range ends today).
pub fn today(now_ms: i64) -> Date {
    OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000)).map(|t| t.date()).unwrap_or_else(|_| day_of(now_ms))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_run_splits_at_midnight_and_the_month_boundary() {
        let since = ms_of(2026, 1, 31, 22);
        let until = ms_of(2026, 2, 1, 1) + 30 * 60_000;
        let parts = split_by_day(since, until);
        assert_eq!(
            parts.iter().map(|(d, ms)| (d.to_string(), *ms)).collect::<Vec<_>>(),
            [("2026-01-31".to_string(), 2 * 3_600_000), ("2026-02-01".to_string(), 90 * 60_000)]
        );
        assert_eq!(month_key(parts[1].0), "2026-02");
        assert_eq!(month_end(day_of(ms_of(2028, 2, 10, 0))).to_string(), "2028-02-29");
        assert_eq!(month_end(day_of(ms_of(2026, 12, 10, 0))).to_string(), "2026-12-31");
        assert!(split_by_day(until, since).is_empty(), "a run that ends before it starts is nothing");
        assert_eq!(today(ms_of(2026, 3, 4, 23)).to_string(), "2026-03-04");
    }
}
