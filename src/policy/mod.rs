//! Fair sharing: groups (a user is in one: the account's `group` names it), resource policies
//! at global, group and user scope merged per field (user → group → global, as upstream), each
//! owner's current use, and the admission check sessions run inside their create and resume
//! transactions. Owns `groups`, `resource_policies` and `policy_usage`.
//!
//! Sessions change an owner's use only through [`model::charge_moved`] (from `put_session`, when
//! a session's liveness or owner changes) and ask [`admit_in`] before they record a session.

pub mod budget;
pub mod model;
pub mod routes;
pub mod usage;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use self::model::*;
use crate::clock::Clock;
use crate::http::error::{ErrorCode, FieldError};
use crate::store::{DryRun, Store, StoreError, WriteTxn};

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("request is invalid")]
    Invalid(Vec<FieldError>),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String, details: Value },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(loc: &[&str], msg: impl Into<String>, kind: &str) -> PolicyError {
    PolicyError::Invalid(vec![FieldError::new(loc, msg, kind)])
}

// ---- the wire --------------------------------------------------------------------------------

/// A policy as the API shows it (upstream's `_policy_view` names).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyView {
    pub id: String,
    pub scope: Scope,
    /// The group's or user's name; `*` for the global policy.
    pub scope_id: String,
    /// Live sessions an owner may hold (`null`: inherited).
    pub max_concurrent: Option<i64>,
    /// GPU sessions an owner may have waiting in a queue: above 0, a GPU session that does not fit
    /// now (or whose cluster already has sessions waiting) is queued instead of refused, and
    /// started in order as capacity frees; 0 = none (refused, 409 `unserviceable`).
    pub max_queued: Option<i64>,
    /// Minutes one run may last; 0 = unlimited.
    pub max_runtime_min: Option<i64>,
    /// What reaching `max_runtime_min` does to a running session: `end` it (upstream's
    /// behaviour) or `pause` it (resumed by its owner, it runs for the full limit again). Both
    /// warn its owner 10 minutes before. `null`: inherited; unset at every scope: `end`.
    pub max_runtime_action: Option<RuntimeAction>,
    /// Seconds idle before the session is paused; 0 = never. The offering's is an upper bound.
    pub idle_timeout_sec: Option<i64>,
    pub limits: Limits,
    /// The subject's monthly GPU-hour budget (user scope: the user's own GPU time; group scope:
    /// the group's members together; not allowed globally). A GPU-hour is one GPU session (a
    /// slice or a whole card) running for an hour, the usage ledger's `slice_hours`. At 80 % its
    /// running sessions are warned; at 100 % new GPU sessions are refused (409 `quota_exceeded`,
    /// `resource: gpu_hours`) and running ones are paused after a 10-minute grace (reason
    /// `budget_exhausted`). Not inherited; null or 0: no budget. Resets each UTC month.
    pub gpu_hours_month: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&PolicyRecord> for PolicyView {
    fn from(p: &PolicyRecord) -> Self {
        Self {
            id: p.id.clone(),
            scope: p.scope,
            scope_id: p.scope_id.clone(),
            max_concurrent: p.max_concurrent,
            max_queued: p.max_queued,
            max_runtime_min: p.max_runtime_min,
            max_runtime_action: p.max_runtime_action,
            idle_timeout_sec: p.idle_timeout_sec,
            limits: p.limits.clone(),
            gpu_hours_month: p.gpu_hours_month,
            created_at: crate::clock::rfc3339_ms(p.created_at),
            updated_at: crate::clock::rfc3339_ms(p.updated_at),
        }
    }
}

/// `POST /api/v1/resource-policies`. A field left out (or `null`) inherits from the wider scope.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyCreate {
    pub scope: Scope,
    /// The group's name (`scope=group`, a group that exists) or the user's (`scope=user`);
    /// absent or `*` for `global`.
    #[serde(default)]
    pub scope_id: Option<String>,
    #[serde(default)]
    pub max_concurrent: Option<i64>,
    #[serde(default)]
    pub max_queued: Option<i64>,
    #[serde(default)]
    pub max_runtime_min: Option<i64>,
    /// `end` or `pause`: what reaching `max_runtime_min` does (read as text, so that another
    /// value is refused naming this field).
    #[serde(default)]
    #[schema(value_type = Option<RuntimeAction>)]
    pub max_runtime_action: Option<String>,
    #[serde(default)]
    pub idle_timeout_sec: Option<i64>,
    #[serde(default)]
    pub limits: Option<LimitsIn>,
    /// The subject's monthly GPU-hour budget (user or group scope only); 0: none.
    #[serde(default)]
    pub gpu_hours_month: Option<i64>,
}

/// `limits` as a request gives it: unknown keys are refused.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsIn {
    #[serde(default)]
    pub cpu: Option<i64>,
    #[serde(default)]
    pub mem_gb: Option<i64>,
    #[serde(default)]
    pub gpu_mem_mb: Option<i64>,
    #[serde(default)]
    pub gpu_cores: Option<i64>,
    #[serde(default)]
    pub storage_gb: Option<i64>,
    #[serde(default)]
    pub volume_gb: Option<i64>,
    #[serde(default)]
    pub shared_pool: Option<bool>,
    #[serde(default)]
    pub allow_privileged: Option<bool>,
}

fn double_option<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `PATCH /api/v1/resource-policies/{id}`: a field given is set (`null`: inherit); `limits`, when
/// given, replaces the whole object.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyPatch {
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub max_concurrent: Option<Option<i64>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub max_queued: Option<Option<i64>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub max_runtime_min: Option<Option<i64>>,
    /// `end` or `pause` (`null`: inherit).
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<RuntimeAction>)]
    pub max_runtime_action: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub idle_timeout_sec: Option<Option<i64>>,
    #[serde(default)]
    pub limits: Option<LimitsIn>,
    /// The subject's monthly GPU-hour budget (user or group scope only); `null` or 0: none.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>)]
    pub gpu_hours_month: Option<Option<i64>>,
}

/// Upper bounds of each number (0 is allowed everywhere: no limit, or for the counts none at all).
const BOUNDS: &[(&str, i64, &str)] = &[
    ("max_concurrent", 10_000, "sessions"),
    ("max_queued", 10_000, "sessions"),
    ("max_runtime_min", 525_600, "minutes (a year)"),
    ("idle_timeout_sec", 2_592_000, "seconds (30 days)"),
    ("cpu", 1_000_000, "vCPUs"),
    ("mem_gb", 100_000_000, "GiB"),
    ("gpu_mem_mb", 1_000_000_000_000, "MiB"),
    ("gpu_cores", 100_000_000, "% of cores"),
    ("storage_gb", 1_000_000_000, "GiB"),
    ("volume_gb", 1_000_000_000, "GiB"),
    ("gpu_hours_month", 10_000_000, "GPU-hours"),
];

fn check_number(errors: &mut Vec<FieldError>, loc: &[&str], v: Option<i64>) {
    let Some(v) = v else { return };
    let field = loc.last().copied().unwrap_or_default();
    let (max, unit) = BOUNDS.iter().find(|(f, ..)| *f == field).map(|(_, m, u)| (*m, *u)).unwrap_or((i64::MAX, ""));
    if v < 0 {
        errors.push(FieldError::new(loc, format!("must be 0 or more (0: {}), not {v}", zero_means(field)), "range"));
    } else if v > max {
        errors.push(FieldError::new(loc, format!("must be at most {max} {unit}, not {v}"), "range"));
    }
}

/// `max_runtime_action` as a request gives it: `end`, `pause` or absent.
fn check_action(errors: &mut Vec<FieldError>, v: Option<&str>) -> Option<RuntimeAction> {
    let v = v?;
    let parsed = RuntimeAction::parse(v);
    if parsed.is_none() {
        let shown: String = v.chars().take(40).collect();
        errors.push(FieldError::new(
            &["body", "max_runtime_action"],
            format!("must be end or pause (or null to inherit), not {shown:?}"),
            "enum",
        ));
    }
    parsed
}

fn zero_means(field: &str) -> &'static str {
    match field {
        "max_concurrent" | "max_queued" => "none allowed",
        "idle_timeout_sec" => "never paused for idleness",
        "gpu_hours_month" => "no budget",
        _ => "no limit",
    }
}

fn check_limits(errors: &mut Vec<FieldError>, l: &LimitsIn) -> Limits {
    for (k, v) in [
        ("cpu", l.cpu),
        ("mem_gb", l.mem_gb),
        ("gpu_mem_mb", l.gpu_mem_mb),
        ("gpu_cores", l.gpu_cores),
        ("storage_gb", l.storage_gb),
        ("volume_gb", l.volume_gb),
    ] {
        check_number(errors, &["body", "limits", k], v);
    }
    Limits {
        cpu: l.cpu,
        mem_gb: l.mem_gb,
        gpu_mem_mb: l.gpu_mem_mb,
        gpu_cores: l.gpu_cores,
        storage_gb: l.storage_gb,
        volume_gb: l.volume_gb,
        shared_pool: l.shared_pool,
        allow_privileged: l.allow_privileged,
    }
}

/// A user subject: the owner rule of sessions (1–64 of `A-Za-z0-9._@-`).
fn valid_owner(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
}

/// A group as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupView {
    pub name: String,
    pub description: Option<String>,
    /// Null for a group accounts name that was never created here (shown so nobody is hidden).
    pub created_at: Option<String>,
    /// The accounts in it, by name.
    pub members: Vec<String>,
    /// Its group-scope policy, if any.
    pub policy_id: Option<String>,
}

/// `POST /api/v1/groups`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupCreate {
    /// 1–64 of `A-Z a-z 0-9 - _ . @` (the accounts' group rule).
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

/// `PATCH /api/v1/groups/{name}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupPatch {
    #[serde(default)]
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

fn check_description(d: Option<String>) -> Result<Option<String>, PolicyError> {
    let Some(d) = d.map(|d| d.trim().to_string()).filter(|d| !d.is_empty()) else { return Ok(None) };
    if d.chars().count() > 200 || d.chars().any(char::is_control) {
        return Err(invalid(
            &["body", "description"],
            "must be at most 200 characters, without control characters",
            "value_error",
        ));
    }
    Ok(Some(d))
}

/// What `GET /api/v1/resource-policies/effective` and `GET /api/v1/account` show: the merged
/// policy, the owner's current use and what is left.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EffectiveView {
    pub user: String,
    pub group: Option<String>,
    /// False when no policy exists at any scope (then nothing is limited).
    pub has_policy: bool,
    pub max_concurrent: Option<i64>,
    pub max_queued: Option<i64>,
    pub max_runtime_min: Option<i64>,
    /// What reaching `max_runtime_min` does: `end` or `pause`; `null` (set at no scope): `end`.
    pub max_runtime_action: Option<RuntimeAction>,
    pub idle_timeout_sec: Option<i64>,
    pub limits: Limits,
    /// Field -> the scope that set it.
    pub sources: std::collections::BTreeMap<String, Scope>,
    pub used: Usage,
    pub remaining: Remaining,
    /// The monthly GPU-hour budgets that apply (the user's own, their group's), with this
    /// month's use.
    pub budgets: Vec<budget::BudgetView>,
}

/// What is left under each limit (`null`: unlimited).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct Remaining {
    pub sessions: Option<i64>,
    pub cpu: Option<i64>,
    pub mem_gb: Option<i64>,
    pub gpu_mem_mb: Option<i64>,
    pub gpu_cores: Option<i64>,
    pub storage_gb: Option<i64>,
}

fn left(limit: Option<i64>, used: i64) -> Option<i64> {
    limit.filter(|l| *l > 0).map(|l| (l - used).max(0))
}

/// The effective policy and use of `user`, from a read transaction (`now`: the budgets' month).
pub fn effective_view(txn: &redb::ReadTransaction, user: &str, now: i64) -> Result<EffectiveView, StoreError> {
    let rows = DryRun::new(txn);
    let group = crate::auth::accounts::group_of(&rows, user)?;
    let budgets = budget::views_of(txn, user, group.as_deref(), now)?;
    let p = merge(&chain(&rows, user, group.as_deref())?);
    let used = usage_of(&rows, user)?;
    let has_policy = p.is_some();
    let p = p.unwrap_or_default();
    Ok(EffectiveView {
        remaining: Remaining {
            sessions: p.max_concurrent.map(|l| (l - used.active).max(0)),
            cpu: left(p.limits.cpu, used.cpu),
            mem_gb: left(p.limits.mem_gb, used.mem_gb),
            gpu_mem_mb: left(p.limits.gpu_mem_mb, used.gpu_mem_mb),
            gpu_cores: left(p.limits.gpu_cores, used.gpu_cores),
            storage_gb: left(p.limits.storage_gb, used.storage_gb),
        },
        user: user.to_string(),
        group,
        has_policy,
        max_concurrent: p.max_concurrent,
        max_queued: p.max_queued,
        max_runtime_min: p.max_runtime_min,
        max_runtime_action: p.max_runtime_action,
        idle_timeout_sec: p.idle_timeout_sec,
        limits: p.limits,
        sources: p.sources,
        used,
        budgets,
    })
}

/// The admission check a session's create (or resume) runs inside its transaction: `owner`'s
/// effective policy against their use (without `resuming`, the charge of a session that already
/// counts) plus `charge`. Answers the effective policy (`None`: no policy at all) or upstream's
/// refusal.
pub fn admit_in(
    txn: &WriteTxn,
    owner: &str,
    charge: &Charge,
    resuming: Option<&Charge>,
) -> Result<Result<Option<Effective>, QuotaRefusal>, StoreError> {
    let group = crate::auth::accounts::group_of(txn, owner)?;
    let Some(p) = merge(&chain(txn, owner, group.as_deref())?) else { return Ok(Ok(None)) };
    let mut used = usage_of(txn, owner)?;
    if let Some(c) = resuming {
        used = used.without(c);
    }
    Ok(admit(&p, &used, charge).map(|()| Some(p)))
}

/// What else holds a group against deletion, asked inside the delete's transaction (the node
/// pools reserved for it, by name; `lib.rs` fills it).
pub type GroupHolds = std::sync::Arc<dyn Fn(&WriteTxn, &str) -> Result<Vec<String>, StoreError> + Send + Sync>;

/// The policy room's service: groups and policies (each change one transaction).
#[derive(Clone)]
pub struct Policies {
    store: Store,
    clock: Clock,
    holds: std::sync::Arc<std::sync::OnceLock<GroupHolds>>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies").finish_non_exhaustive()
    }
}

impl Policies {
    pub fn new(store: Store, clock: Clock) -> Self {
        Self { store, clock, holds: Default::default() }
    }

    /// Groups that `holds` names something for are not deleted (set once, by `lib.rs`).
    pub fn hold_groups_with(&self, holds: GroupHolds) {
        self.holds.set(holds).ok();
    }

    pub async fn list(&self, scope: Option<Scope>) -> Result<Vec<PolicyView>, PolicyError> {
        let mut all: Vec<PolicyRecord> =
            self.store.read(|txn| POLICIES.list(txn)).await?.into_iter().map(|(_, p)| p).collect();
        all.retain(|p| scope.is_none_or(|s| p.scope == s));
        all.sort_by(|a, b| (a.scope, &a.scope_id).cmp(&(b.scope, &b.scope_id)));
        Ok(all.iter().map(PolicyView::from).collect())
    }

    pub async fn create(&self, req: PolicyCreate) -> Result<PolicyView, PolicyError> {
        let mut errors = Vec::new();
        let scope_id = match (req.scope, req.scope_id.as_deref().map(str::trim)) {
            (Scope::Global, None | Some("*" | "")) => "*".to_string(),
            (Scope::Global, Some(_)) => {
                return Err(invalid(
                    &["body", "scope_id"],
                    "the global policy has no subject: leave it out or send *",
                    "value_error",
                ));
            }
            (_, None | Some("")) => {
                return Err(invalid(&["body", "scope_id"], "names the group or user the policy is for", "missing"));
            }
            (_, Some(s)) if !valid_owner(s) => {
                return Err(invalid(
                    &["body", "scope_id"],
                    "must be 1–64 characters of A-Z a-z 0-9 . _ @ -",
                    "value_error",
                ));
            }
            (_, Some(s)) => s.to_string(),
        };
        for (f, v) in [
            ("max_concurrent", req.max_concurrent),
            ("max_queued", req.max_queued),
            ("max_runtime_min", req.max_runtime_min),
            ("idle_timeout_sec", req.idle_timeout_sec),
            ("gpu_hours_month", req.gpu_hours_month),
        ] {
            check_number(&mut errors, &["body", f], v);
        }
        let max_runtime_action = check_action(&mut errors, req.max_runtime_action.as_deref());
        if req.scope == Scope::Global && req.gpu_hours_month.is_some_and(|b| b > 0) {
            errors.push(global_budget());
        }
        let limits = check_limits(&mut errors, &req.limits.clone().unwrap_or_default());
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        let now = self.clock.now_ms();
        let p = PolicyRecord {
            id: format!("pol_{}", ulid::Ulid::new()),
            scope: req.scope,
            scope_id,
            max_concurrent: req.max_concurrent,
            max_queued: req.max_queued,
            max_runtime_min: req.max_runtime_min,
            max_runtime_action,
            idle_timeout_sec: req.idle_timeout_sec,
            limits,
            gpu_hours_month: req.gpu_hours_month,
            created_at: now,
            updated_at: now,
        };
        let r = p.clone();
        self.store
            .write_with(move |txn| {
                if r.scope == Scope::Group && GROUPS.get_in_write(txn, &r.scope_id)?.is_none() {
                    return Err(invalid(
                        &["body", "scope_id"],
                        format!("no group named {}; create it first (POST /api/v1/groups)", r.scope_id),
                        "value_error",
                    ));
                }
                let key = subject_key(r.scope, &r.scope_id);
                if let Some(old) = POLICIES.get_in_write(txn, &key)? {
                    return Err(PolicyError::Conflict {
                        code: ErrorCode::Conflict,
                        message: format!("{} already has a policy; change it with PATCH", describe(&old)),
                        details: json!({ "policy_id": old.id, "scope": old.scope, "scope_id": old.scope_id }),
                    });
                }
                POLICIES.put(txn, &key, &r)?;
                Ok(())
            })
            .await?;
        Ok(PolicyView::from(&p))
    }

    pub async fn patch(&self, id: &str, req: PolicyPatch) -> Result<PolicyView, PolicyError> {
        let mut errors = Vec::new();
        for (f, v) in [
            ("max_concurrent", req.max_concurrent),
            ("max_queued", req.max_queued),
            ("max_runtime_min", req.max_runtime_min),
            ("idle_timeout_sec", req.idle_timeout_sec),
            ("gpu_hours_month", req.gpu_hours_month),
        ] {
            check_number(&mut errors, &["body", f], v.flatten());
        }
        let action = req.max_runtime_action.as_ref().map(|v| check_action(&mut errors, v.as_deref()));
        let limits = req.limits.as_ref().map(|l| check_limits(&mut errors, l));
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        let (id, now) = (id.to_string(), self.clock.now_ms());
        self.store
            .write_with(move |txn| {
                let (key, mut p) = find(txn, &id)?;
                if let Some(v) = req.max_concurrent {
                    p.max_concurrent = v;
                }
                if let Some(v) = req.max_queued {
                    p.max_queued = v;
                }
                if let Some(v) = req.max_runtime_min {
                    p.max_runtime_min = v;
                }
                if let Some(v) = action {
                    p.max_runtime_action = v;
                }
                if let Some(v) = req.idle_timeout_sec {
                    p.idle_timeout_sec = v;
                }
                if let Some(l) = limits {
                    p.limits = l;
                }
                if let Some(v) = req.gpu_hours_month {
                    if p.scope == Scope::Global && v.is_some_and(|b| b > 0) {
                        return Err(PolicyError::Invalid(vec![global_budget()]));
                    }
                    p.gpu_hours_month = v;
                }
                p.updated_at = now;
                POLICIES.put(txn, &key, &p)?;
                Ok(PolicyView::from(&p))
            })
            .await
    }

    pub async fn delete(&self, id: &str) -> Result<PolicyView, PolicyError> {
        let id = id.to_string();
        self.store
            .write_with(move |txn| {
                let (key, p) = find(txn, &id)?;
                POLICIES.delete(txn, &key)?;
                Ok(PolicyView::from(&p))
            })
            .await
    }

    pub async fn effective(&self, user: &str) -> Result<EffectiveView, PolicyError> {
        let (user, now) = (user.to_string(), self.clock.now_ms());
        Ok(self.store.read(move |txn| effective_view(txn, &user, now)).await?)
    }

    /// [`Policies::effective`] of an account that exists (404 otherwise: a name no account has
    /// has no policy to show, not the global one).
    pub async fn effective_of_account(&self, user: &str) -> Result<EffectiveView, PolicyError> {
        let (name, now) = (user.to_string(), self.clock.now_ms());
        let view = self
            .store
            .read(move |txn| match crate::auth::accounts::get(txn, &name)? {
                Some(_) => effective_view(txn, &name, now).map(Some),
                None => Ok(None),
            })
            .await?;
        view.ok_or_else(|| PolicyError::NotFound(format!("no account {}", crate::http::text::echo(user))))
    }

    // ---- usage -------------------------------------------------------------------------------

    /// Today (UTC), for the usage query's default range.
    pub fn today(&self) -> time::Date {
        usage::today(self.clock.now_ms())
    }

    /// The usage rollups `q` asks for, open runs counted up to now.
    pub async fn usage(&self, q: usage::Query) -> Result<usage::Rollup, PolicyError> {
        let now = self.clock.now_ms();
        Ok(self.store.read(move |txn| usage::query(txn, &q, now)).await?)
    }

    /// Whether an account named `user` exists, and whether group `group` does (created here or
    /// named by an account).
    pub async fn known(&self, user: Option<String>, group: Option<String>) -> Result<(bool, bool), PolicyError> {
        Ok(self
            .store
            .read(move |txn| {
                let user_ok = match &user {
                    Some(u) => crate::auth::accounts::get(txn, u)?.is_some(),
                    None => true,
                };
                let group_ok = match &group {
                    Some(g) => {
                        GROUPS.get(txn, g)?.is_some()
                            || crate::auth::accounts::list(txn)?.iter().any(|a| a.group.as_deref() == Some(g.as_str()))
                    }
                    None => true,
                };
                Ok((user_ok, group_ok))
            })
            .await?)
    }

    // ---- groups ------------------------------------------------------------------------------

    pub async fn groups(&self) -> Result<Vec<GroupView>, PolicyError> {
        Ok(self
            .store
            .read(|txn| {
                let mut out: std::collections::BTreeMap<String, GroupView> = GROUPS
                    .list(txn)?
                    .into_iter()
                    .map(|(n, g)| {
                        let v = GroupView {
                            name: g.name,
                            description: g.description,
                            created_at: Some(crate::clock::rfc3339_ms(g.created_at)),
                            members: Vec::new(),
                            policy_id: None,
                        };
                        (n, v)
                    })
                    .collect();
                for a in crate::auth::accounts::list(txn)? {
                    let Some(g) = a.group else { continue };
                    let entry = out.entry(g.clone()).or_insert_with(|| GroupView {
                        name: g,
                        description: None,
                        created_at: None,
                        members: Vec::new(),
                        policy_id: None,
                    });
                    entry.members.push(a.username.as_str().to_string());
                }
                for v in out.values_mut() {
                    v.members.sort();
                    v.policy_id = POLICIES.get(txn, &subject_key(Scope::Group, &v.name))?.map(|p| p.id);
                }
                Ok(out.into_values().collect())
            })
            .await?)
    }

    pub async fn create_group(&self, req: GroupCreate) -> Result<GroupView, PolicyError> {
        let name = req.name.trim().to_string();
        if crate::auth::accounts::check_group(&name).is_err() {
            return Err(invalid(&["body", "name"], "must be 1–64 characters of A-Z a-z 0-9 - _ . @", "value_error"));
        }
        let description = check_description(req.description)?;
        let g = GroupRecord { name: name.clone(), description, created_at: self.clock.now_ms() };
        self.store
            .write_with(move |txn| {
                if let Some((taken, _)) =
                    GROUPS.list_in_write(txn)?.into_iter().find(|(n, _)| n.eq_ignore_ascii_case(&g.name))
                {
                    return Err(PolicyError::Conflict {
                        code: ErrorCode::Conflict,
                        message: format!("a group named {taken} exists"),
                        details: json!({ "name": taken }),
                    });
                }
                GROUPS.put(txn, &g.name, &g)?;
                let members = crate::auth::accounts::members_in_write(txn, &g.name)?;
                Ok(GroupView {
                    name: g.name.clone(),
                    description: g.description.clone(),
                    created_at: Some(crate::clock::rfc3339_ms(g.created_at)),
                    members,
                    policy_id: None,
                })
            })
            .await
    }

    pub async fn patch_group(&self, name: &str, req: GroupPatch) -> Result<GroupView, PolicyError> {
        let description = check_description(req.description)?;
        let name = name.to_string();
        self.store
            .write_with(move |txn| {
                let mut g = GROUPS
                    .get_in_write(txn, &name)?
                    .ok_or_else(|| PolicyError::NotFound(format!("no group {name}")))?;
                g.description = description;
                GROUPS.put(txn, &name, &g)?;
                Ok(GroupView {
                    members: crate::auth::accounts::members_in_write(txn, &name)?,
                    policy_id: POLICIES.get_in_write(txn, &subject_key(Scope::Group, &name))?.map(|p| p.id),
                    name: g.name,
                    description: g.description,
                    created_at: Some(crate::clock::rfc3339_ms(g.created_at)),
                })
            })
            .await
    }

    /// Refused while accounts are in it, it has a policy or node pools are reserved for it
    /// (`group_in_use`).
    pub async fn delete_group(&self, name: &str) -> Result<(), PolicyError> {
        let name = name.to_string();
        let holds = self.holds.get().cloned();
        self.store
            .write_with(move |txn| {
                GROUPS.get_in_write(txn, &name)?.ok_or_else(|| PolicyError::NotFound(format!("no group {name}")))?;
                let members = crate::auth::accounts::members_in_write(txn, &name)?;
                let policy = POLICIES.get_in_write(txn, &subject_key(Scope::Group, &name))?.map(|p| p.id);
                let pools = match &holds {
                    Some(h) => h(txn, &name)?,
                    None => Vec::new(),
                };
                if !members.is_empty() || policy.is_some() || !pools.is_empty() {
                    let pooled = if pools.is_empty() {
                        String::new()
                    } else {
                        format!(" and is named by node pool(s) {}", pools.join(", "))
                    };
                    return Err(PolicyError::Conflict {
                        code: ErrorCode::GroupInUse,
                        message: format!(
                            "group {name} has {} and {}{pooled}; move its members, delete its policy and take it out of its pools first",
                            crate::http::error::plural(members.len(), "member", "members"),
                            if policy.is_some() { "a policy" } else { "no policy" }
                        ),
                        details: json!({ "members": members, "policy_id": policy, "node_pools": pools }),
                    });
                }
                GROUPS.delete(txn, &name)?;
                Ok(())
            })
            .await
    }

    /// A group by name (for directory sign-in mapping its groups to these).
    pub async fn group(&self, name: &str) -> Result<Option<GroupRecord>, StoreError> {
        let name = name.to_string();
        self.store.read(move |txn| GROUPS.get(txn, &name)).await
    }
}

fn global_budget() -> FieldError {
    FieldError::new(
        &["body", "gpu_hours_month"],
        "a GPU-hour budget belongs to a user or a group; set it on a user- or group-scope policy",
        "value_error",
    )
}

fn describe(p: &PolicyRecord) -> String {
    match p.scope {
        Scope::Global => "the global scope".into(),
        s => format!("{} {}", s.as_str(), p.scope_id),
    }
}

/// The policy with this id and its subject key (policies are few: one per subject).
fn find(txn: &WriteTxn, id: &str) -> Result<(String, PolicyRecord), PolicyError> {
    POLICIES
        .list_in_write(txn)?
        .into_iter()
        .find(|(_, p)| p.id == id)
        .ok_or_else(|| PolicyError::NotFound(format!("no resource policy {id}")))
}
