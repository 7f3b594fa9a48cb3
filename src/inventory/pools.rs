//! Node pools: named sets of one cluster's nodes reserved for groups (upstream's `node_pool`,
//! its grants and `gpu_node.pool_id`). A `dedicated` pool's nodes take only the sessions of the
//! groups it is reserved for; a `shared` pool is a label (its nodes stay usable by everyone), as
//! are nodes in no pool. A group that holds a dedicated pool in a cluster places there, and on the
//! shared nodes too only when its effective policy's `limits.shared_pool` is true; a group
//! without one (or a user without a group) places on the shared nodes only.
//!
//! Owns `node_pools` (`npl_<ULID>` -> pool), `node_pool_members` (`<cluster>/<node>` -> its pool:
//! a node is in at most one) and `node_pools_by_group` (`<cluster>/<group>` -> the dedicated pools
//! reserved for it there, so a create's placement is one point read). Every change that moves a
//! node's placement logs the node for the fit summary ([`super::fit::changed_node`]). Sessions
//! already running on a node that changes pool keep running; only new placements follow.

use std::collections::{BTreeSet, HashMap};

use redb::ReadTransaction;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::fit;
use super::model::{GPUS, NODES, NodeRecord};
use crate::clock::{Clock, rfc3339_ms};
use crate::clusters::model::CLUSTERS;
use crate::http::error::{ErrorCode, FieldError};
use crate::store::{JsonTable, Rows, Store, StoreError, WriteTxn};

/// `npl_<ULID>` -> pool.
pub const NODE_POOLS: JsonTable<NodePoolRecord> = JsonTable::new("node_pools");
/// `<cluster>/<node>` -> the pool the node is in.
pub const POOL_MEMBERS: JsonTable<PoolMember> = JsonTable::new("node_pool_members");
/// `<cluster>/<group>` -> ids of the dedicated pools reserved for the group in that cluster.
pub const POOLS_BY_GROUP: JsonTable<Vec<String>> = JsonTable::new("node_pools_by_group");

/// Most nodes and groups one pool lists.
pub const MAX_POOL_NODES: usize = 10_000;
pub const MAX_POOL_GROUPS: usize = 1_000;
const MAX_NAME: usize = 64;
const MAX_DESCRIPTION: usize = 200;

/// Upstream's pool kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    /// Only the groups it is reserved for place on its nodes.
    #[default]
    Dedicated,
    /// Everyone places on its nodes (a label; its groups mean nothing).
    Shared,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePoolRecord {
    pub id: String,
    pub cluster_id: String,
    pub name: String,
    pub description: Option<String>,
    pub kind: PoolKind,
    /// Node names, sorted.
    pub nodes: Vec<String>,
    /// Group names, sorted.
    pub groups: Vec<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMember {
    pub pool_id: String,
    /// The pool is `dedicated` (its nodes are reserved).
    pub dedicated: bool,
}

impl PoolMember {
    /// The pool that reserves the node, if any.
    pub fn reserving(&self) -> Option<&str> {
        self.dedicated.then_some(self.pool_id.as_str())
    }
}

/// Where one owner's session may place in one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Dedicated pools it may use.
    pub pools: BTreeSet<String>,
    /// Whether it may use nodes no dedicated pool reserves.
    pub shared: bool,
    /// Pools ignored (every node).
    pub anywhere: bool,
}

impl Placement {
    /// Every node, pools ignored.
    pub fn anywhere() -> Self {
        Self { pools: BTreeSet::new(), shared: true, anywhere: true }
    }

    /// Whether a node reserved by `pool` (`None`: reserved by none) is allowed.
    pub fn allows(&self, pool: Option<&str>) -> bool {
        self.anywhere
            || match pool {
                None => self.shared,
                Some(p) => self.pools.contains(p),
            }
    }
}

fn group_key(cluster_id: &str, group: &str) -> String {
    format!("{cluster_id}/{group}")
}

fn member_key(cluster_id: &str, node: &str) -> String {
    format!("{cluster_id}/{node}")
}

/// Where a session of a member of `group` may place in `cluster_id`; `shared_pool` is the owner's
/// effective `limits.shared_pool` (spill onto shared nodes when the group holds a pool).
pub fn placement(
    rows: &impl Rows,
    cluster_id: &str,
    group: Option<&str>,
    shared_pool: bool,
) -> Result<Placement, StoreError> {
    let pools: BTreeSet<String> = match group {
        Some(g) => rows.get(POOLS_BY_GROUP, &group_key(cluster_id, g))?.unwrap_or_default().into_iter().collect(),
        None => BTreeSet::new(),
    };
    let shared = pools.is_empty() || shared_pool;
    Ok(Placement { pools, shared, anywhere: false })
}

/// [`placement`] of `owner`'s sessions: their account's group and effective `limits.shared_pool`
/// (unset: false).
pub fn placement_of(rows: &impl Rows, cluster_id: &str, owner: &str) -> Result<Placement, StoreError> {
    let group = crate::auth::accounts::group_of(rows, owner)?;
    let policy = crate::policy::model::merge(&crate::policy::model::chain(rows, owner, group.as_deref())?);
    let shared_pool = policy.and_then(|p| p.limits.shared_pool).unwrap_or(false);
    placement(rows, cluster_id, group.as_deref(), shared_pool)
}

/// The node → reserving pool map of a cluster (nodes of shared pools and of none are absent).
pub fn reserved_nodes(txn: &ReadTransaction, cluster_id: &str) -> Result<HashMap<String, String>, StoreError> {
    let prefix = format!("{cluster_id}/");
    Ok(POOL_MEMBERS
        .list_prefix(txn, &prefix)?
        .into_iter()
        .filter_map(|(k, m)| {
            let node = k.strip_prefix(&prefix)?.to_string();
            m.dedicated.then_some((node, m.pool_id))
        })
        .collect())
}

/// Node name -> (pool id, pool name) of every node of a cluster that is in a pool.
pub fn pools_of_nodes(
    txn: &ReadTransaction,
    cluster_id: &str,
) -> Result<HashMap<String, (String, String)>, StoreError> {
    let prefix = format!("{cluster_id}/");
    let members = POOL_MEMBERS.list_prefix(txn, &prefix)?;
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = HashMap::with_capacity(members.len());
    for (k, m) in members {
        let Some(node) = k.strip_prefix(&prefix) else { continue };
        if !names.contains_key(&m.pool_id) {
            let name = NODE_POOLS.get(txn, &m.pool_id)?.map(|p| p.name).unwrap_or_default();
            names.insert(m.pool_id.clone(), name);
        }
        let name = names.get(&m.pool_id).cloned().unwrap_or_default();
        out.insert(node.to_string(), (m.pool_id, name));
    }
    Ok(out)
}

/// The nodes a session placed by `placement` must not use, sorted: the cluster's cordoned and
/// offline nodes (upstream's `handoff.excluded_nodes`) and the nodes its placement does not allow.
pub fn excluded_nodes(
    txn: &ReadTransaction,
    cluster_id: &str,
    placement: &Placement,
) -> Result<Vec<String>, StoreError> {
    let reserved = reserved_nodes(txn, cluster_id)?;
    let out = |n: &NodeRecord| n.cordoned || n.offline || !placement.allows(reserved.get(&n.name).map(String::as_str));
    super::apply::hostnames(txn, cluster_id, out)
}

/// A cluster's node pools go with the cluster (its unregistering forgets its inventory).
pub fn forget_cluster(txn: &WriteTxn, cluster_id: &str) -> Result<(), StoreError> {
    let prefix = format!("{cluster_id}/");
    for (id, p) in NODE_POOLS.list_in_write(txn)? {
        if p.cluster_id == cluster_id {
            NODE_POOLS.delete(txn, &id)?;
        }
    }
    POOL_MEMBERS.delete_prefix(txn, &prefix)?;
    POOLS_BY_GROUP.delete_prefix(txn, &prefix)?;
    Ok(())
}

/// Names of the pools reserved for `group` (any cluster): a group they name is not deleted.
pub fn pools_of_group(txn: &WriteTxn, group: &str) -> Result<Vec<String>, StoreError> {
    Ok(NODE_POOLS
        .list_in_write(txn)?
        .into_iter()
        .filter(|(_, p)| p.groups.iter().any(|g| g == group))
        .map(|(_, p)| p.name)
        .collect())
}

// ---- the wire -------------------------------------------------------------------------------

/// `POST /api/v1/node-pools`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolCreate {
    pub cluster_id: String,
    /// 1–64 characters, no control characters; unique in its cluster without regard to case.
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub description: Option<String>,
    /// `dedicated` (default) or `shared`.
    #[serde(default)]
    pub kind: Option<PoolKind>,
    /// Names of the cluster's nodes (a node is in one pool at most).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Groups the pool is reserved for (groups that exist).
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `PATCH /api/v1/node-pools/{id}`: a field given replaces what the pool has (`nodes` and
/// `groups` as whole lists; `description: null` clears it).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolUpdate {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "some_description")]
    #[schema(value_type = Option<String>, max_length = 200)]
    pub description: Option<Option<String>>,
    #[serde(default)]
    pub kind: Option<PoolKind>,
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    #[serde(default)]
    pub groups: Option<Vec<String>>,
}

fn some_description<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A node of a pool as the list shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PoolNode {
    pub hostname: String,
    /// `ready`, `cordoned`, `offline`, `not_ready` or `missing` (not in the inventory now).
    pub status: String,
    pub device_count: u64,
}

/// A pool as the API shows it (upstream's `_pool_reads` names; `groups` for its grants).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodePoolView {
    pub id: String,
    pub cluster_id: String,
    pub cluster_name: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub kind: PoolKind,
    pub node_count: u64,
    pub nodes: Vec<PoolNode>,
    /// Groups it is reserved for, by name.
    pub groups: Vec<String>,
    /// Cards on its nodes, and those with a slice booked on them.
    pub gpus_total: u64,
    pub gpus_used: u64,
    pub created_at: String,
    pub updated_at: String,
}

fn node_status(n: Option<&NodeRecord>) -> &'static str {
    match n {
        None => "missing",
        Some(n) if n.offline => "offline",
        Some(n) if n.cordoned || !n.schedulable || n.decommissioning => "cordoned",
        Some(n) if !n.ready => "not_ready",
        Some(_) => "ready",
    }
}

/// Pools' views from one read of their clusters' nodes and cards.
pub fn views(txn: &ReadTransaction, pools: Vec<NodePoolRecord>) -> Result<Vec<NodePoolView>, StoreError> {
    let clusters: BTreeSet<String> = pools.iter().map(|p| p.cluster_id.clone()).collect();
    // (cluster, node) -> (cards, cards booked)
    let mut cards: HashMap<(String, String), (u64, u64)> = HashMap::new();
    let mut nodes: HashMap<(String, String), NodeRecord> = HashMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for c in &clusters {
        let prefix = format!("{c}/");
        for (_, g) in GPUS.list_prefix(txn, &prefix)? {
            let e = cards.entry((c.clone(), g.node.clone())).or_default();
            e.0 += 1;
            if g.used_mem_mb > 0 || g.used_cores > 0 {
                e.1 += 1;
            }
        }
        for (_, n) in NODES.list_prefix(txn, &prefix)? {
            nodes.insert((c.clone(), n.name.clone()), n);
        }
        if let Some(r) = CLUSTERS.get(txn, c)? {
            names.insert(c.clone(), r.name);
        }
    }
    Ok(pools
        .into_iter()
        .map(|p| {
            let (mut total, mut used) = (0, 0);
            let list = p
                .nodes
                .iter()
                .map(|n| {
                    let k = (p.cluster_id.clone(), n.clone());
                    let (t, u) = cards.get(&k).copied().unwrap_or_default();
                    total += t;
                    used += u;
                    PoolNode { hostname: n.clone(), status: node_status(nodes.get(&k)).into(), device_count: t }
                })
                .collect();
            NodePoolView {
                cluster_name: names.get(&p.cluster_id).cloned(),
                node_count: p.nodes.len() as u64,
                nodes: list,
                gpus_total: total,
                gpus_used: used,
                id: p.id,
                cluster_id: p.cluster_id,
                name: p.name,
                description: p.description,
                kind: p.kind,
                groups: p.groups,
                created_at: rfc3339_ms(p.created_at),
                updated_at: rfc3339_ms(p.updated_at),
            }
        })
        .collect())
}

// ---- changes --------------------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("request is invalid")]
    Invalid(Vec<FieldError>),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict { message: String, details: serde_json::Value },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl PoolError {
    pub fn code(&self) -> ErrorCode {
        match self {
            PoolError::Invalid(_) => ErrorCode::ValidationFailed,
            PoolError::NotFound(_) => ErrorCode::NotFound,
            PoolError::Conflict { .. } => ErrorCode::Conflict,
            PoolError::Store(_) => ErrorCode::Internal,
        }
    }
}

fn invalid(loc: &[&str], msg: impl Into<String>, kind: &str) -> PoolError {
    PoolError::Invalid(vec![FieldError::new(loc, msg, kind)])
}

fn check_name(name: &str) -> Result<String, PoolError> {
    let n = name.trim();
    if n.is_empty() {
        return Err(invalid(&["body", "name"], "must not be empty", "value_error"));
    }
    if n.chars().count() > MAX_NAME || n.chars().any(char::is_control) {
        return Err(invalid(
            &["body", "name"],
            format!("must be at most {MAX_NAME} characters, without control characters"),
            "value_error",
        ));
    }
    Ok(n.to_string())
}

fn check_description(d: Option<String>) -> Result<Option<String>, PoolError> {
    let Some(d) = d.map(|d| d.trim().to_string()).filter(|d| !d.is_empty()) else { return Ok(None) };
    if d.chars().count() > MAX_DESCRIPTION || d.chars().any(char::is_control) {
        return Err(invalid(
            &["body", "description"],
            format!("must be at most {MAX_DESCRIPTION} characters, without control characters"),
            "value_error",
        ));
    }
    Ok(Some(d))
}

/// Node names: well-formed, each once, at most [`MAX_POOL_NODES`]; sorted.
fn check_nodes(nodes: Vec<String>) -> Result<Vec<String>, PoolError> {
    if nodes.len() > MAX_POOL_NODES {
        return Err(invalid(
            &["body", "nodes"],
            format!("at most {MAX_POOL_NODES} nodes, not {}", nodes.len()),
            "too_long",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, n) in nodes.into_iter().enumerate() {
        if n.is_empty() || !crate::callbacks::wire::is_dns_subdomain(&n) {
            return Err(invalid(
                &["body", "nodes", &i.to_string()],
                format!("{} is not a node name", crate::http::text::echo(&n)),
                "value_error",
            ));
        }
        if !seen.insert(n.clone()) {
            return Err(invalid(&["body", "nodes", &i.to_string()], format!("{n} is listed twice"), "value_error"));
        }
    }
    Ok(seen.into_iter().collect())
}

fn check_groups(groups: Vec<String>) -> Result<Vec<String>, PoolError> {
    if groups.len() > MAX_POOL_GROUPS {
        return Err(invalid(
            &["body", "groups"],
            format!("at most {MAX_POOL_GROUPS} groups, not {}", groups.len()),
            "too_long",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, g) in groups.into_iter().enumerate() {
        if crate::auth::accounts::check_group(&g).is_err() {
            return Err(invalid(
                &["body", "groups", &i.to_string()],
                format!("{} is not a group name", crate::http::text::echo(&g)),
                "value_error",
            ));
        }
        if !seen.insert(g.clone()) {
            return Err(invalid(&["body", "groups", &i.to_string()], format!("{g} is listed twice"), "value_error"));
        }
    }
    Ok(seen.into_iter().collect())
}

/// Checks `p` against the store (its cluster's nodes, the groups, the other pools) and writes it
/// over `old` with every index, logging the nodes whose placement changed.
fn put_pool(txn: &WriteTxn, old: Option<&NodePoolRecord>, p: &NodePoolRecord) -> Result<(), PoolError> {
    for (i, n) in p.nodes.iter().enumerate() {
        if NODES.get_in_write(txn, &member_key(&p.cluster_id, n))?.is_none()
            && !old.is_some_and(|o| o.nodes.contains(n))
        {
            return Err(invalid(
                &["body", "nodes", &i.to_string()],
                format!("cluster {} has no node {n}", p.cluster_id),
                "value_error",
            ));
        }
        if let Some(m) = POOL_MEMBERS.get_in_write(txn, &member_key(&p.cluster_id, n))?
            && m.pool_id != p.id
        {
            let other = NODE_POOLS.get_in_write(txn, &m.pool_id)?.map(|o| o.name).unwrap_or_default();
            return Err(PoolError::Conflict {
                message: format!("node {n} is in pool {other}; take it out of that pool first"),
                details: json!({ "node": n, "pool_id": m.pool_id, "pool_name": other }),
            });
        }
    }
    for (i, g) in p.groups.iter().enumerate() {
        if crate::policy::model::GROUPS.get_in_write(txn, g)?.is_none() {
            return Err(invalid(
                &["body", "groups", &i.to_string()],
                format!("no group named {g}; create it first (POST /api/v1/groups)"),
                "value_error",
            ));
        }
    }
    if let Some((_, taken)) = NODE_POOLS
        .list_in_write(txn)?
        .into_iter()
        .find(|(_, o)| o.id != p.id && o.cluster_id == p.cluster_id && o.name.eq_ignore_ascii_case(&p.name))
    {
        return Err(PoolError::Conflict {
            message: format!("cluster {} has a pool named {}", p.cluster_id, taken.name),
            details: json!({ "cluster_id": p.cluster_id, "name": taken.name, "pool_id": taken.id }),
        });
    }
    unindex(txn, old, Some(p))?;
    index(txn, p)?;
    NODE_POOLS.put(txn, &p.id, p)?;
    Ok(())
}

/// Takes `old`'s indexes away, logging its nodes whose placement `new` changes.
fn unindex(txn: &WriteTxn, old: Option<&NodePoolRecord>, new: Option<&NodePoolRecord>) -> Result<(), StoreError> {
    let Some(old) = old else { return Ok(()) };
    let kind_changed = new.is_none_or(|n| n.kind != old.kind);
    for n in &old.nodes {
        let stays = new.is_some_and(|p| p.nodes.contains(n));
        if !stays {
            POOL_MEMBERS.delete(txn, &member_key(&old.cluster_id, n))?;
        }
        if !stays || kind_changed {
            fit::changed_node(txn, &old.cluster_id, n);
        }
    }
    if old.kind == PoolKind::Dedicated {
        for g in &old.groups {
            let k = group_key(&old.cluster_id, g);
            let mut ids = POOLS_BY_GROUP.get_in_write(txn, &k)?.unwrap_or_default();
            ids.retain(|id| *id != old.id);
            if ids.is_empty() {
                POOLS_BY_GROUP.delete(txn, &k)?;
            } else {
                POOLS_BY_GROUP.put(txn, &k, &ids)?;
            }
        }
    }
    Ok(())
}

fn index(txn: &WriteTxn, p: &NodePoolRecord) -> Result<(), StoreError> {
    let member = PoolMember { pool_id: p.id.clone(), dedicated: p.kind == PoolKind::Dedicated };
    for n in &p.nodes {
        let k = member_key(&p.cluster_id, n);
        if POOL_MEMBERS.get_in_write(txn, &k)?.as_ref() != Some(&member) {
            POOL_MEMBERS.put(txn, &k, &member)?;
            fit::changed_node(txn, &p.cluster_id, n);
        }
    }
    if p.kind == PoolKind::Dedicated {
        for g in &p.groups {
            let k = group_key(&p.cluster_id, g);
            let mut ids = POOLS_BY_GROUP.get_in_write(txn, &k)?.unwrap_or_default();
            if !ids.contains(&p.id) {
                ids.push(p.id.clone());
                ids.sort();
                POOLS_BY_GROUP.put(txn, &k, &ids)?;
            }
        }
    }
    Ok(())
}

/// The node pools service (each change one transaction).
#[derive(Debug, Clone)]
pub struct NodePools {
    store: Store,
    clock: Clock,
}

impl NodePools {
    pub fn new(store: Store, clock: Clock) -> Self {
        Self { store, clock }
    }

    /// Every pool (of one cluster), by cluster and name.
    pub async fn list(&self, cluster_id: Option<String>) -> Result<Vec<NodePoolView>, PoolError> {
        Ok(self
            .store
            .read(move |txn| {
                let mut pools: Vec<NodePoolRecord> = NODE_POOLS
                    .list(txn)?
                    .into_iter()
                    .map(|(_, p)| p)
                    .filter(|p| cluster_id.as_ref().is_none_or(|c| *c == p.cluster_id))
                    .collect();
                pools.sort_by(|a, b| {
                    (&a.cluster_id, a.name.to_lowercase()).cmp(&(&b.cluster_id, b.name.to_lowercase()))
                });
                views(txn, pools)
            })
            .await?)
    }

    pub async fn get(&self, id: &str) -> Result<NodePoolView, PoolError> {
        let id = id.to_string();
        self.store
            .read(move |txn| match NODE_POOLS.get(txn, &id)? {
                Some(p) => Ok(views(txn, vec![p])?.pop()),
                None => Ok(None),
            })
            .await?
            .ok_or_else(|| PoolError::NotFound("no such node pool".into()))
    }

    pub async fn create(&self, req: PoolCreate) -> Result<NodePoolView, PoolError> {
        let name = check_name(&req.name)?;
        let description = check_description(req.description)?;
        let nodes = check_nodes(req.nodes)?;
        let groups = check_groups(req.groups)?;
        let cluster_id = req.cluster_id.trim().to_string();
        let now = self.clock.now_ms();
        let p = NodePoolRecord {
            id: format!("npl_{}", ulid::Ulid::new()),
            cluster_id,
            name,
            description,
            kind: req.kind.unwrap_or_default(),
            nodes,
            groups,
            created_at: now,
            updated_at: now,
        };
        let id = p.id.clone();
        self.store
            .write_with(move |txn| {
                if !CLUSTERS.get_in_write(txn, &p.cluster_id)?.is_some_and(|c| c.is_live()) {
                    return Err(PoolError::NotFound(format!("no cluster {}", crate::http::text::echo(&p.cluster_id))));
                }
                put_pool(txn, None, &p)
            })
            .await?;
        self.get(&id).await
    }

    pub async fn update(&self, id: &str, req: PoolUpdate) -> Result<(NodePoolView, serde_json::Value), PoolError> {
        let name = req.name.as_deref().map(check_name).transpose()?;
        let description = match req.description {
            Some(d) => Some(check_description(d)?),
            None => None,
        };
        let nodes = req.nodes.map(check_nodes).transpose()?;
        let groups = req.groups.map(check_groups).transpose()?;
        let (id, now) = (id.to_string(), self.clock.now_ms());
        let key = id.clone();
        let changes = self
            .store
            .write_with(move |txn| {
                let old = NODE_POOLS
                    .get_in_write(txn, &key)?
                    .ok_or_else(|| PoolError::NotFound("no such node pool".into()))?;
                let mut p = old.clone();
                if let Some(n) = name {
                    p.name = n;
                }
                if let Some(d) = description {
                    p.description = d;
                }
                if let Some(k) = req.kind {
                    p.kind = k;
                }
                if let Some(n) = nodes {
                    p.nodes = n;
                }
                if let Some(g) = groups {
                    p.groups = g;
                }
                if p == old {
                    return Ok::<_, PoolError>(json!({}));
                }
                p.updated_at = now;
                put_pool(txn, Some(&old), &p)?;
                Ok(diff(&old, &p))
            })
            .await?;
        Ok((self.get(&id).await?, changes))
    }

    /// Deletes a pool: its nodes become shared. Sessions on them keep running.
    pub async fn delete(&self, id: &str) -> Result<NodePoolRecord, PoolError> {
        let id = id.to_string();
        self.store
            .write_with(move |txn| {
                let old = NODE_POOLS
                    .get_in_write(txn, &id)?
                    .ok_or_else(|| PoolError::NotFound("no such node pool".into()))?;
                unindex(txn, Some(&old), None)?;
                NODE_POOLS.delete(txn, &id)?;
                Ok(old)
            })
            .await
    }
}

/// `{field: {from, to}}` of what changed (upstream's audit `changes`).
fn diff(old: &NodePoolRecord, new: &NodePoolRecord) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, a: serde_json::Value, b: serde_json::Value| {
        if a != b {
            out.insert(k.into(), json!({ "from": a, "to": b }));
        }
    };
    put("name", json!(old.name), json!(new.name));
    put("description", json!(old.description), json!(new.description));
    put("kind", json!(old.kind), json!(new.kind));
    put("nodes", json!(old.nodes), json!(new.nodes));
    put("groups", json!(old.groups), json!(new.groups));
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_placement_allows_its_pools_and_the_shared_nodes_only_when_it_may_spill() {
        let own = Placement { pools: ["npl_a".to_string()].into(), shared: false, anywhere: false };
        assert!(own.allows(Some("npl_a")));
        assert!(!own.allows(Some("npl_b")));
        assert!(!own.allows(None));
        let spill = Placement { shared: true, ..own.clone() };
        assert!(spill.allows(None) && !spill.allows(Some("npl_b")));
        assert!(Placement::anywhere().allows(Some("npl_b")));
    }

    #[test]
    fn names_nodes_and_groups_are_checked() {
        assert!(check_name("  ").is_err());
        assert!(check_name(&"x".repeat(65)).is_err());
        assert!(check_name("a\nb").is_err());
        assert_eq!(check_name(" gpu-a ").unwrap(), "gpu-a");
        assert!(check_nodes(vec!["n1".into(), "n1".into()]).is_err());
        assert!(check_nodes(vec!["Bad_Name".into()]).is_err());
        assert!(check_nodes(vec![String::new()]).is_err());
        assert_eq!(check_nodes(vec!["n2".into(), "n1".into()]).unwrap(), ["n1", "n2"]);
        assert!(check_groups(vec!["a b".into()]).is_err());
        assert!(check_groups(vec!["g".into(); MAX_POOL_GROUPS + 1]).is_err());
    }
}
