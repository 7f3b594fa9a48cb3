//! What the store keeps about groups, resource policies and each owner's current use, and the
//! per-field merge (user → group → global, the most specific policy that sets a field wins, and
//! `limits` merges key by key, as upstream's `domain/policy.py`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{JsonTable, Migration, Rows, StoreError, WriteTxn};

/// Group name -> group. A user is in one group: the account's `group` names it.
pub const GROUPS: JsonTable<GroupRecord> = JsonTable::new("groups");
/// Subject key ([`subject_key`]: `global`, `group:<name>`, `user:<name>`) -> its policy: the
/// effective policy is three point reads, however many policies there are.
pub const POLICIES: JsonTable<PolicyRecord> = JsonTable::new("resource_policies");
/// Owner -> what their live sessions hold, kept by [`charge_moved`] in the transaction that
/// changes a session's liveness or owner (sessions call it from `put_session`).
pub const USAGE: JsonTable<Usage> = JsonTable::new("policy_usage");

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupRecord {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub created_at: i64,
}

/// Where a policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Global,
    Group,
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Group => "group",
            Self::User => "user",
        }
    }
}

/// The subject key of a policy: `global`, `group:<name>` or `user:<name>`.
pub fn subject_key(scope: Scope, scope_id: &str) -> String {
    match scope {
        Scope::Global => "global".into(),
        s => format!("{}:{scope_id}", s.as_str()),
    }
}

/// Upstream's `limits` keys. Sums over an owner's live sessions; `null` inherits, `0` means no
/// limit (upstream checks a limit only when it is above 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Limits {
    /// vCPUs.
    #[serde(default)]
    pub cpu: Option<i64>,
    /// GiB of memory.
    #[serde(default)]
    pub mem_gb: Option<i64>,
    /// MiB of GPU memory.
    #[serde(default)]
    pub gpu_mem_mb: Option<i64>,
    /// % of a card's cores, summed (two 50 % slices are 100).
    #[serde(default)]
    pub gpu_cores: Option<i64>,
    /// GiB of session disks.
    #[serde(default)]
    pub storage_gb: Option<i64>,
    /// GiB of volumes (recorded and shown; volumes are not counted against it yet).
    #[serde(default)]
    pub volume_gb: Option<i64>,
    /// May sessions spill onto shared nodes when the owner's group holds a node pool in the
    /// cluster (unset: no; without a pool a group places on shared nodes anyway).
    #[serde(default)]
    pub shared_pool: Option<bool>,
    /// May the owner start privileged sessions (recorded; offerings have no privileged mode).
    #[serde(default)]
    pub allow_privileged: Option<bool>,
}

/// What the runtime limit does to a running session that reaches it (`max_runtime_action`; not
/// in upstream, which always ends it). Unset at every scope: `end`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeAction {
    /// Ended (its CR deleted, reason `max_runtime`), as upstream.
    #[default]
    End,
    /// Paused (reason `max_runtime`); resumed by its owner, it gets a new run of the full limit.
    Pause,
}

impl RuntimeAction {
    pub const ALL: [Self; 2] = [Self::End, Self::Pause];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::End => "end",
            Self::Pause => "pause",
        }
    }

    pub fn is_end(&self) -> bool {
        *self == Self::End
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One stored policy. `None` in a field inherits it from the wider scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub id: String,
    pub scope: Scope,
    /// The group's or user's name; `*` for the global policy.
    pub scope_id: String,
    #[serde(default)]
    pub max_concurrent: Option<i64>,
    #[serde(default)]
    pub max_queued: Option<i64>,
    /// Minutes; 0 = unlimited.
    #[serde(default)]
    pub max_runtime_min: Option<i64>,
    /// What reaching `max_runtime_min` does (`None`: inherited; unset everywhere: end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime_action: Option<RuntimeAction>,
    /// Seconds; 0 = never.
    #[serde(default)]
    pub idle_timeout_sec: Option<i64>,
    #[serde(default)]
    pub limits: Limits,
    /// The subject's monthly GPU-hour budget (a user's own GPU time, or a group's members'
    /// together; `None` or 0: none). Not inherited: each budget is its subject's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours_month: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Upstream's seeded global policy: 1 concurrent, 2 queued, 720 min, 3600 s, 24 vCPU, 256 GiB,
/// 98,304 MiB of VRAM, 100 % of cores, 500 GB of storage; and (ours) `max_runtime_action` `end`,
/// upstream's behaviour, written out so everyone reads what the limit does.
pub fn seeded_global(now: i64) -> PolicyRecord {
    PolicyRecord {
        id: format!("pol_{}", ulid::Ulid::new()),
        scope: Scope::Global,
        scope_id: "*".into(),
        max_concurrent: Some(1),
        max_queued: Some(2),
        max_runtime_min: Some(720),
        max_runtime_action: Some(RuntimeAction::End),
        idle_timeout_sec: Some(3600),
        limits: Limits {
            cpu: Some(24),
            mem_gb: Some(256),
            gpu_mem_mb: Some(98_304),
            gpu_cores: Some(100),
            storage_gb: Some(500),
            volume_gb: None,
            shared_pool: None,
            allow_privileged: None,
        },
        gpu_hours_month: None,
        created_at: now,
        updated_at: now,
    }
}

/// Writes upstream's global policy unless a global policy exists.
pub fn seed_global(txn: &WriteTxn, now: i64) -> Result<bool, StoreError> {
    if POLICIES.get_in_write(txn, "global")?.is_some() {
        return Ok(false);
    }
    POLICIES.put(txn, "global", &seeded_global(now))?;
    Ok(true)
}

/// Schema 7: upstream's global policy, so a new lab starts with limits everyone can read. A lab
/// upgraded from an earlier schema gets none: its owners already run sessions with no limit, and an
/// upgrade must not start refusing them (one live session each) before the admin chose limits.
pub const SEED_GLOBAL_POLICY: Migration =
    Migration { to: 7, what: "upstream's global resource policy", run: seed_if_new };

fn seed_if_new(txn: &WriteTxn) -> Result<(), StoreError> {
    if crate::store::schema_before_migration(txn)? == 0 {
        seed_global(txn, crate::clock::Clock::system().now_ms())?;
    } else {
        tracing::warn!(
            "no global resource policy on this upgraded state: sessions stay unlimited until an admin adds one \
             (POST /api/v1/resource-policies with scope global; upstream's defaults are 1 concurrent, 720 min)"
        );
    }
    Ok(())
}

/// The merged policy that applies to one owner, and which scope gave each field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Effective {
    pub max_concurrent: Option<i64>,
    pub max_queued: Option<i64>,
    pub max_runtime_min: Option<i64>,
    pub max_runtime_action: Option<RuntimeAction>,
    pub idle_timeout_sec: Option<i64>,
    pub limits: Limits,
    /// Field (`max_concurrent`, `limits.cpu`, …) -> the scope that set it.
    pub sources: BTreeMap<String, Scope>,
}

fn take<T: Clone>(
    slot: &mut Option<T>,
    from: &Option<T>,
    sources: &mut BTreeMap<String, Scope>,
    field: &str,
    s: Scope,
) {
    if slot.is_none()
        && let Some(v) = from
    {
        *slot = Some(v.clone());
        sources.insert(field.to_string(), s);
    }
}

/// Merges policies given most specific first. `None` when there is none at any scope.
pub fn merge(chain: &[PolicyRecord]) -> Option<Effective> {
    if chain.is_empty() {
        return None;
    }
    let mut e = Effective::default();
    let src = &mut e.sources;
    for p in chain {
        let s = p.scope;
        take(&mut e.max_concurrent, &p.max_concurrent, src, "max_concurrent", s);
        take(&mut e.max_queued, &p.max_queued, src, "max_queued", s);
        take(&mut e.max_runtime_min, &p.max_runtime_min, src, "max_runtime_min", s);
        take(&mut e.max_runtime_action, &p.max_runtime_action, src, "max_runtime_action", s);
        take(&mut e.idle_timeout_sec, &p.idle_timeout_sec, src, "idle_timeout_sec", s);
        let (l, from) = (&mut e.limits, &p.limits);
        take(&mut l.cpu, &from.cpu, src, "limits.cpu", s);
        take(&mut l.mem_gb, &from.mem_gb, src, "limits.mem_gb", s);
        take(&mut l.gpu_mem_mb, &from.gpu_mem_mb, src, "limits.gpu_mem_mb", s);
        take(&mut l.gpu_cores, &from.gpu_cores, src, "limits.gpu_cores", s);
        take(&mut l.storage_gb, &from.storage_gb, src, "limits.storage_gb", s);
        take(&mut l.volume_gb, &from.volume_gb, src, "limits.volume_gb", s);
        take(&mut l.shared_pool, &from.shared_pool, src, "limits.shared_pool", s);
        take(&mut l.allow_privileged, &from.allow_privileged, src, "limits.allow_privileged", s);
    }
    Some(e)
}

/// The policy chain of `owner` in `group` (user, group, global; the ones that exist).
pub fn chain(txn: &impl Rows, owner: &str, group: Option<&str>) -> Result<Vec<PolicyRecord>, StoreError> {
    let mut out = Vec::with_capacity(3);
    out.extend(txn.get(POLICIES, &subject_key(Scope::User, owner))?);
    if let Some(g) = group {
        out.extend(txn.get(POLICIES, &subject_key(Scope::Group, g))?);
    }
    out.extend(txn.get(POLICIES, "global")?);
    Ok(out)
}

/// What one live session holds against its owner's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub cpu: i64,
    pub mem_gb: i64,
    pub gpu_mem_mb: i64,
    pub gpu_cores: i64,
    pub storage_gb: i64,
}

/// An owner's live sessions and what they hold together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    /// Live sessions (pending, preparing, running, paused, terminating: upstream's active set).
    pub active: i64,
    pub cpu: i64,
    pub mem_gb: i64,
    pub gpu_mem_mb: i64,
    pub gpu_cores: i64,
    pub storage_gb: i64,
}

impl Usage {
    fn add(&mut self, c: &Charge, sign: i64) {
        self.active += sign;
        self.cpu += sign * c.cpu;
        self.mem_gb += sign * c.mem_gb;
        self.gpu_mem_mb += sign * c.gpu_mem_mb;
        self.gpu_cores += sign * c.gpu_cores;
        self.storage_gb += sign * c.storage_gb;
    }

    /// This use without one session's charge (a resume checks the others against the limits).
    pub fn without(mut self, c: &Charge) -> Self {
        self.add(c, -1);
        self
    }
}

/// Moves a session's charge from `was` (owner and charge while it was live) to `now`; sessions
/// call it only when the pair changes (a create, an end, an owner change), never per report.
pub fn charge_moved(
    txn: &WriteTxn,
    was: Option<(&str, Charge)>,
    now: Option<(&str, Charge)>,
) -> Result<(), StoreError> {
    for (entry, sign) in [(was, -1), (now, 1)] {
        let Some((owner, c)) = entry else { continue };
        let mut u = USAGE.get_in_write(txn, owner)?.unwrap_or_default();
        u.add(&c, sign);
        if u.active <= 0 {
            USAGE.delete(txn, owner)?;
        } else {
            USAGE.put(txn, owner, &u)?;
        }
    }
    Ok(())
}

/// Counts every owner's use again from their live sessions (schema migration, and a repair).
pub fn recount_usage<'a>(
    txn: &WriteTxn,
    live: impl IntoIterator<Item = (&'a str, Charge)>,
) -> Result<usize, StoreError> {
    USAGE.delete_prefix(txn, "")?;
    let mut by_owner: BTreeMap<&str, Usage> = BTreeMap::new();
    for (owner, c) in live {
        by_owner.entry(owner).or_default().add(&c, 1);
    }
    for (owner, u) in &by_owner {
        USAGE.put(txn, owner, u)?;
    }
    Ok(by_owner.len())
}

/// An owner's current use.
pub fn usage_of(txn: &impl Rows, owner: &str) -> Result<Usage, StoreError> {
    Ok(txn.get(USAGE, owner)?.unwrap_or_default())
}

/// A refusal in upstream's shape: `details` `{limit, active}` or `{resource, limit, used, request}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    pub message: String,
    pub details: serde_json::Value,
}

/// Would `owner`, using `used` now, stay within `p` with one more session charging `c`?
/// As upstream: the count is refused when it has reached the cap; each sum when it would pass
/// a limit above 0.
pub fn admit(p: &Effective, used: &Usage, c: &Charge) -> Result<(), QuotaRefusal> {
    if let Some(limit) = p.max_concurrent
        && used.active >= limit
    {
        return Err(QuotaRefusal {
            message: format!(
                "max_concurrent exceeded: {} live session{} of at most {limit}; end or delete one first",
                used.active,
                if used.active == 1 { "" } else { "s" }
            ),
            details: serde_json::json!({ "limit": limit, "active": used.active }),
        });
    }
    let checks = [
        ("gpu_mem_mb", p.limits.gpu_mem_mb, used.gpu_mem_mb, c.gpu_mem_mb),
        ("gpu_cores", p.limits.gpu_cores, used.gpu_cores, c.gpu_cores),
        ("cpu", p.limits.cpu, used.cpu, c.cpu),
        ("mem_gb", p.limits.mem_gb, used.mem_gb, c.mem_gb),
        ("storage_gb", p.limits.storage_gb, used.storage_gb, c.storage_gb),
    ];
    for (resource, limit, used, request) in checks {
        if let Some(limit) = limit.filter(|l| *l > 0)
            && used + request > limit
        {
            return Err(QuotaRefusal {
                message: format!("{resource} sum exceeds the policy limit: {used} in use + {request} asked > {limit}"),
                details: serde_json::json!({ "resource": resource, "limit": limit, "used": used, "request": request }),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn global_after_open(path: &std::path::Path, migrations: &[Migration]) -> Option<PolicyRecord> {
        let store = crate::store::Store::open(path, migrations).unwrap();
        store.read(|txn| POLICIES.get(txn, "global")).await.unwrap()
    }

    #[tokio::test]
    async fn a_new_state_gets_upstreams_global_policy_and_an_upgraded_one_none() {
        let tmp = tempfile::tempdir().unwrap();
        let seed_at = crate::MIGRATIONS.iter().position(|m| m.to == SEED_GLOBAL_POLICY.to).unwrap();
        let fresh = global_after_open(&tmp.path().join("new.redb"), crate::MIGRATIONS).await.unwrap();
        assert_eq!(fresh.max_concurrent, Some(1));
        // A lab that ran the schema before the policy step, then upgrades: no limits appear.
        let old = tmp.path().join("old.redb");
        assert!(global_after_open(&old, &crate::MIGRATIONS[..seed_at]).await.is_none());
        assert!(global_after_open(&old, crate::MIGRATIONS).await.is_none());
    }

    fn pol(scope: Scope, f: impl FnOnce(&mut PolicyRecord)) -> PolicyRecord {
        let mut p = PolicyRecord {
            id: "pol_x".into(),
            scope,
            scope_id: "*".into(),
            max_concurrent: None,
            max_queued: None,
            max_runtime_min: None,
            max_runtime_action: None,
            idle_timeout_sec: None,
            limits: Limits::default(),
            gpu_hours_month: None,
            created_at: 0,
            updated_at: 0,
        };
        f(&mut p);
        p
    }

    #[test]
    fn merge_takes_each_field_from_the_most_specific_policy_that_sets_it() {
        let user = pol(Scope::User, |p| p.max_concurrent = Some(3));
        let group = pol(Scope::Group, |p| {
            p.max_concurrent = Some(2);
            p.idle_timeout_sec = Some(600);
            p.limits.cpu = Some(8);
        });
        let global = seeded_global(0);
        let e = merge(&[user, group, global]).unwrap();
        assert_eq!(e.max_concurrent, Some(3));
        assert_eq!(e.idle_timeout_sec, Some(600));
        assert_eq!(e.max_runtime_min, Some(720));
        assert_eq!(e.limits.cpu, Some(8));
        assert_eq!(e.limits.gpu_mem_mb, Some(98_304));
        assert_eq!(e.sources["max_concurrent"], Scope::User);
        assert_eq!(e.sources["idle_timeout_sec"], Scope::Group);
        assert_eq!(e.sources["limits.cpu"], Scope::Group);
        assert_eq!(e.sources["limits.storage_gb"], Scope::Global);
        assert_eq!((e.max_runtime_action, e.sources["max_runtime_action"]), (Some(RuntimeAction::End), Scope::Global));
        assert!(merge(&[]).is_none());
    }

    #[test]
    fn admit_refuses_in_upstreams_shapes() {
        let p = merge(&[seeded_global(0)]).unwrap();
        let c = Charge { cpu: 4, mem_gb: 16, gpu_mem_mb: 20_480, gpu_cores: 30, storage_gb: 10 };
        assert!(admit(&p, &Usage::default(), &c).is_ok());
        let one = Usage { active: 1, ..Usage::default() };
        let r = admit(&p, &one, &c).unwrap_err();
        assert_eq!(r.details, serde_json::json!({"limit": 1, "active": 1}));
        let mut lifted = p.clone();
        lifted.max_concurrent = None;
        let used = Usage { active: 1, gpu_mem_mb: 90_000, ..Usage::default() };
        let r = admit(&lifted, &used, &c).unwrap_err();
        assert_eq!(
            r.details,
            serde_json::json!({"resource": "gpu_mem_mb", "limit": 98_304, "used": 90_000, "request": 20_480})
        );
        // 0 is no limit.
        lifted.limits.gpu_mem_mb = Some(0);
        assert!(admit(&lifted, &used, &c).is_ok());
    }

    #[test]
    fn max_runtime_action_is_inherited_from_the_nearest_scope_that_sets_it() {
        let user = pol(Scope::User, |p| p.max_runtime_min = Some(30));
        let group = pol(Scope::Group, |p| p.max_runtime_action = Some(RuntimeAction::Pause));
        let e = merge(&[user.clone(), group.clone(), seeded_global(0)]).unwrap();
        assert_eq!(e.max_runtime_action, Some(RuntimeAction::Pause));
        assert_eq!(e.sources["max_runtime_action"], Scope::Group);
        // The user's own choice wins over the group's.
        let mine = pol(Scope::User, |p| p.max_runtime_action = Some(RuntimeAction::End));
        let e = merge(&[mine, group, seeded_global(0)]).unwrap();
        assert_eq!((e.max_runtime_action, e.sources["max_runtime_action"]), (Some(RuntimeAction::End), Scope::User));
        // Set nowhere (a global policy from before the field): unset, which means end.
        let mut old_global = seeded_global(0);
        old_global.max_runtime_action = None;
        let e = merge(&[user, old_global]).unwrap();
        assert_eq!(e.max_runtime_action, None);
        assert!(!e.sources.contains_key("max_runtime_action"));
        // A record stored before the field reads as unset.
        let mut v = serde_json::to_value(seeded_global(0)).unwrap();
        v.as_object_mut().unwrap().remove("max_runtime_action");
        assert_eq!(serde_json::from_value::<PolicyRecord>(v).unwrap().max_runtime_action, None);
    }

    #[tokio::test]
    async fn a_new_state_file_holds_upstreams_global_policy_once() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("gshare.redb");
        let store = crate::store::Store::open(&path, crate::MIGRATIONS).unwrap();
        let g = store.read(|txn| POLICIES.get(txn, "global")).await.unwrap().unwrap();
        let want = seeded_global(0);
        assert_eq!((g.scope, g.scope_id.as_str()), (Scope::Global, "*"));
        assert_eq!(
            (g.max_concurrent, g.max_queued, g.max_runtime_min, g.idle_timeout_sec, &g.limits),
            (Some(1), Some(2), Some(720), Some(3600), &want.limits)
        );
        assert_eq!(want.limits.gpu_mem_mb, Some(98_304));
        // Deleted by an admin, it stays deleted across restarts (the step ran once).
        store.write(|txn| POLICIES.delete(txn, "global").map(drop)).await.unwrap();
        drop(store);
        let store = crate::store::Store::open(&path, crate::MIGRATIONS).unwrap();
        assert!(store.read(|txn| POLICIES.get(txn, "global")).await.unwrap().is_none());
    }
}
