//! Monthly GPU-hour budgets: the lab's form of upstream's credits. A user- or group-scope policy
//! may set `gpu_hours_month`: the GPU-hours its subject (the user, or the group's members
//! together) may use in a UTC month. A GPU-hour is one GPU session (a slice or a whole card)
//! running for an hour: the usage ledger's slice time ([`super::usage`]), closed runs from the
//! month rollups plus the open runs up to now.
//!
//! At 80 % the subject is warned once a month; at 100 % new GPU sessions are refused ([`admit_in`],
//! inside the create's transaction) and, after a 10-minute grace, running ones are paused with
//! reason `budget_exhausted` (the sessions room's timer sweep, from [`statuses`], marking each
//! step here with [`mark`]). The state is keyed by month, so a new month starts clean.

use redb::ReadTransaction;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::model::{POLICIES, QuotaRefusal, Scope, subject_key};
use super::usage::{Amounts, OpenRun, USAGE_OPEN, USAGE_ROLLUP, day_of, month_key};
use crate::store::{JsonTable, StoreError, WriteTxn};

/// `<YYYY-MM>/<subject key>` (`user:<name>`, `group:<name>`) -> what the budget sweep did that
/// month.
pub const BUDGET_STATE: JsonTable<BudgetState> = JsonTable::new("policy_budget_state");

/// The share of a budget at which its subject is warned.
pub const WARN_PCT: f64 = 80.0;
/// How long running sessions keep running once a budget is used up.
pub const GRACE_MS: i64 = 10 * 60_000;
const HOUR_MS: f64 = 3_600_000.0;

/// What the sweep recorded for one subject in one month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetState {
    /// When the 80 % warning was given (once a month).
    #[serde(default)]
    pub warned_at: Option<i64>,
    /// When the sweep first found the budget used up (the grace runs from here); cleared when
    /// the budget is raised above the use again.
    #[serde(default)]
    pub exhausted_at: Option<i64>,
}

/// One budget that applies to a user's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub scope: Scope,
    /// The user's or group's name.
    pub subject: String,
    pub limit_hours: i64,
}

impl Budget {
    pub fn key(&self) -> String {
        subject_key(self.scope, &self.subject)
    }

    fn covers(&self, owner: &str, group: Option<&str>) -> bool {
        match self.scope {
            Scope::User => self.subject == owner,
            Scope::Group => group == Some(self.subject.as_str()),
            Scope::Global => false,
        }
    }
}

/// A budget as the account view shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetView {
    /// `user` (the account's own) or `group` (its group's, shared by the members).
    pub scope: Scope,
    pub subject: String,
    /// `YYYY-MM` (UTC).
    pub month: String,
    pub limit_gpu_hours: i64,
    /// GPU-hours used this month, running sessions counted up to now (to 0.01).
    pub used_gpu_hours: f64,
    /// `used` as a share of `limit` (to 0.1).
    pub percent: f64,
    /// When the 80 % warning was given this month.
    pub warned_at: Option<String>,
    /// When the budget was found used up: new GPU sessions are refused, and running ones are
    /// paused at `pauses_at`.
    pub exhausted_at: Option<String>,
    pub pauses_at: Option<String>,
}

/// A budget with its use this month and what the sweep recorded.
#[derive(Debug, Clone)]
pub struct Status {
    pub budget: Budget,
    pub month: String,
    pub used_ms: u64,
    pub state: BudgetState,
}

impl Status {
    pub fn used_hours(&self) -> f64 {
        (self.used_ms as f64 / HOUR_MS * 100.0).round() / 100.0
    }

    pub fn percent(&self) -> f64 {
        if self.budget.limit_hours <= 0 {
            return 0.0;
        }
        (self.used_ms as f64 / (self.budget.limit_hours as f64 * HOUR_MS) * 1000.0).round() / 10.0
    }

    pub fn exhausted(&self) -> bool {
        self.used_ms >= (self.budget.limit_hours.max(0) as u64).saturating_mul(3_600_000)
    }

    pub fn view(&self) -> BudgetView {
        BudgetView {
            scope: self.budget.scope,
            subject: self.budget.subject.clone(),
            month: self.month.clone(),
            limit_gpu_hours: self.budget.limit_hours,
            used_gpu_hours: self.used_hours(),
            percent: self.percent(),
            warned_at: self.state.warned_at.map(crate::clock::rfc3339_ms),
            exhausted_at: self.state.exhausted_at.map(crate::clock::rfc3339_ms),
            pauses_at: self.state.exhausted_at.map(|t| crate::clock::rfc3339_ms(t + GRACE_MS)),
        }
    }
}

fn budget_of(scope: Scope, subject: &str, limit: Option<i64>) -> Option<Budget> {
    let limit_hours = limit.filter(|l| *l > 0)?;
    Some(Budget { scope, subject: subject.to_string(), limit_hours })
}

/// The month key of `now`.
pub fn month_of(now: i64) -> String {
    month_key(day_of(now))
}

/// Slice time used in `month` by whoever `budget` covers: the month rollups (`m/<month>/<user>/
/// <group>`) plus the open runs' part of the month up to `now`.
fn used_ms(budget: &Budget, month: &str, rollups: &[(String, Amounts)], open: &[(String, OpenRun)], now: i64) -> u64 {
    let prefix = format!("m/{month}/");
    let mut ms = 0u64;
    for (key, a) in rollups {
        let Some((owner, group)) = key.strip_prefix(&prefix).and_then(|r| r.split_once('/')) else { continue };
        if budget.covers(owner, Some(group).filter(|g| !g.is_empty())) {
            ms = ms.saturating_add(a.slice_ms);
        }
    }
    for (_, run) in open {
        if run.slices == 0 || !budget.covers(&run.owner, run.group.as_deref()) {
            continue;
        }
        for (day, part) in super::usage::split_by_day(run.since, now) {
            if month_key(day) == month {
                ms = ms.saturating_add(run.slices.saturating_mul(part));
            }
        }
    }
    ms
}

/// The rollup rows a budget's use is read from: the user's own, or the whole month's (a group).
fn rollup_prefix(budget: &Budget, month: &str) -> String {
    match budget.scope {
        Scope::User => format!("m/{month}/{}/", budget.subject),
        _ => format!("m/{month}/"),
    }
}

/// The budgets that apply to `owner` (in `group`): their own policy's and their group's.
fn budgets_in_write(txn: &WriteTxn, owner: &str, group: Option<&str>) -> Result<Vec<Budget>, StoreError> {
    let mut out = Vec::new();
    if let Some(p) = POLICIES.get_in_write(txn, &subject_key(Scope::User, owner))? {
        out.extend(budget_of(Scope::User, owner, p.gpu_hours_month));
    }
    if let Some(g) = group
        && let Some(p) = POLICIES.get_in_write(txn, &subject_key(Scope::Group, g))?
    {
        out.extend(budget_of(Scope::Group, g, p.gpu_hours_month));
    }
    Ok(out)
}

/// Inside a GPU session's create (or resume) transaction: refused when a budget that applies to
/// `owner` is used up this month, in upstream's `{resource, limit, used, request}` shape (the
/// request: the GPU-hour a session's first hour adds).
pub fn admit_in(txn: &WriteTxn, owner: &str, now: i64) -> Result<Result<(), QuotaRefusal>, StoreError> {
    let group = crate::auth::accounts::group_of(txn, owner)?;
    let budgets = budgets_in_write(txn, owner, group.as_deref())?;
    if budgets.is_empty() {
        return Ok(Ok(()));
    }
    let month = month_of(now);
    let open = USAGE_OPEN.list_in_write(txn)?;
    for b in budgets {
        let rollups = USAGE_ROLLUP.list_prefix_in_write(txn, &rollup_prefix(&b, &month))?;
        let status = Status {
            used_ms: used_ms(&b, &month, &rollups, &open, now),
            budget: b,
            month: month.clone(),
            state: BudgetState::default(),
        };
        if status.exhausted() {
            let whose = match status.budget.scope {
                Scope::Group => format!("group {}'s", status.budget.subject),
                _ => format!("{}'s", status.budget.subject),
            };
            return Ok(Err(QuotaRefusal {
                message: format!(
                    "gpu_hours budget exhausted: {whose} monthly budget of {} GPU-hours is used ({} used in {month}); \
                     new GPU sessions are refused until an admin raises it or the month ends",
                    status.budget.limit_hours,
                    status.used_hours()
                ),
                details: serde_json::json!({
                    "resource": "gpu_hours",
                    "limit": status.budget.limit_hours,
                    "used": status.used_hours(),
                    "request": 1,
                }),
            }));
        }
    }
    Ok(Ok(()))
}

/// Every budget with its use this month and its state (the sweep; the list is as long as the
/// policies that set a budget).
pub fn statuses(txn: &ReadTransaction, now: i64) -> Result<Vec<Status>, StoreError> {
    let budgets: Vec<Budget> = POLICIES
        .list(txn)?
        .into_iter()
        .filter_map(|(_, p)| budget_of(p.scope, &p.scope_id, p.gpu_hours_month).filter(|_| p.scope != Scope::Global))
        .collect();
    if budgets.is_empty() {
        return Ok(Vec::new());
    }
    let month = month_of(now);
    let rollups = USAGE_ROLLUP.list_prefix(txn, &format!("m/{month}/"))?;
    let open = USAGE_OPEN.list(txn)?;
    let mut out = Vec::with_capacity(budgets.len());
    for b in budgets {
        let state = BUDGET_STATE.get(txn, &format!("{month}/{}", b.key()))?.unwrap_or_default();
        out.push(Status { used_ms: used_ms(&b, &month, &rollups, &open, now), budget: b, month: month.clone(), state });
    }
    Ok(out)
}

/// The budgets that apply to `user` (in `group`), for the account view.
pub fn views_of(
    txn: &ReadTransaction,
    user: &str,
    group: Option<&str>,
    now: i64,
) -> Result<Vec<BudgetView>, StoreError> {
    let mut budgets = Vec::new();
    if let Some(p) = POLICIES.get(txn, &subject_key(Scope::User, user))? {
        budgets.extend(budget_of(Scope::User, user, p.gpu_hours_month));
    }
    if let Some(g) = group
        && let Some(p) = POLICIES.get(txn, &subject_key(Scope::Group, g))?
    {
        budgets.extend(budget_of(Scope::Group, g, p.gpu_hours_month));
    }
    if budgets.is_empty() {
        return Ok(Vec::new());
    }
    let month = month_of(now);
    let open = USAGE_OPEN.list(txn)?;
    let mut out = Vec::new();
    for b in budgets {
        let rollups = USAGE_ROLLUP.list_prefix(txn, &rollup_prefix(&b, &month))?;
        let state = BUDGET_STATE.get(txn, &format!("{month}/{}", b.key()))?.unwrap_or_default();
        out.push(
            Status { used_ms: used_ms(&b, &month, &rollups, &open, now), budget: b, month: month.clone(), state }
                .view(),
        );
    }
    Ok(out)
}

/// Records a sweep step for `status`'s subject and month (in the sweep's write transaction).
pub fn mark(txn: &WriteTxn, status: &Status, f: impl FnOnce(&mut BudgetState)) -> Result<(), StoreError> {
    let key = format!("{}/{}", status.month, status.budget.key());
    let mut state = BUDGET_STATE.get_in_write(txn, &key)?.unwrap_or_default();
    f(&mut state);
    BUDGET_STATE.put(txn, &key, &state)
}

/// Which owners' sessions a budget covers, given each owner's group (the sweep).
pub fn covers(budget: &Budget, owner: &str, group: Option<&str>) -> bool {
    budget.covers(owner, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(owner: &str, group: Option<&str>, since: i64, slices: u64) -> (String, OpenRun) {
        let r = OpenRun { owner: owner.into(), group: group.map(str::to_string), since, gpu_mem_mb: 1, slices, cpu: 1 };
        (format!("ses_{owner}"), r)
    }

    #[test]
    fn use_counts_closed_and_open_slice_time_of_the_month_only() {
        use super::super::usage::ms_of;
        let now = ms_of(2026, 3, 1, 2); // 02:00 on the 1st
        let month = month_of(now);
        assert_eq!(month, "2026-03");
        let a = |h: u64| Amounts { running_ms: h * 3_600_000, gpu_mem_mib_ms: 0, slice_ms: h * 3_600_000, cpu_ms: 0 };
        let rollups = vec![
            ("m/2026-03/ann/vision".to_string(), a(5)),
            ("m/2026-03/bob/vision".to_string(), a(3)),
            ("m/2026-03/cat/".to_string(), a(7)),
        ];
        // Ann's run began at 22:00 the day before: only its two hours of March count.
        let open =
            vec![run("ann", Some("vision"), ms_of(2026, 2, 28, 22), 1), run("dan", None, ms_of(2026, 3, 1, 1), 0)];
        let ann = Budget { scope: Scope::User, subject: "ann".into(), limit_hours: 10 };
        let vision = Budget { scope: Scope::Group, subject: "vision".into(), limit_hours: 10 };
        assert_eq!(used_ms(&ann, &month, &rollups, &open, now), 7 * 3_600_000);
        assert_eq!(used_ms(&vision, &month, &rollups, &open, now), 10 * 3_600_000);
        let s = Status { budget: vision, month, used_ms: 10 * 3_600_000, state: BudgetState::default() };
        assert!(s.exhausted());
        assert_eq!((s.used_hours(), s.percent()), (10.0, 100.0));
        let s = Status { used_ms: 8 * 3_600_000, ..s };
        assert!(!s.exhausted());
        assert_eq!(s.percent(), 80.0);
    }
}
