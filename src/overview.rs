//! The console's Overview: one picture of the fleet (every GPU card, grouped by node and
//! cluster, with its booked memory and marks), totals, and small time series from a ring buffer
//! kept in memory (sessions running, GPU memory booked, operator callbacks per second).
//!
//! `GET /api/v1/overview` is built to stay cheap at 40,000 cards: the cards of a node travel as
//! one flat array of numbers (four per card), names once per node, and the answer is gzipped
//! when the client accepts it. The fleet is computed in one read transaction and kept until the
//! store's generation moves, and the answer's bytes (and their gzip) until then or the next
//! sample, so consoles refreshing an unchanged fleet cost a copy, not a scan. `GET /api/v1/overview/nodes/{cluster_id}/{node}` gives one node's cards in full: uuid,
//! model, booking, and the sessions and slices on each (what the page shows on hover).
//!
//! It reads three domains (clusters, inventory, sessions), so it sits at the top layer.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::http::api_router::{Docs, routes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use crate::App;
use crate::auth::guard::AdminCaller;
use crate::clock::{Clock, rfc3339_ms};
use crate::clusters::model::CLUSTERS;
use crate::http::error::{ApiError, ErrorBody};
use crate::inventory::gpu_booking::{ALLOCATIONS, allocation_prefix};
use crate::inventory::model::{GPUS, NODES};
use crate::inventory::pools::{NODE_POOLS, POOL_MEMBERS, PoolKind};
use crate::locks::lock;
use crate::sessions::model::{LIVE_SESSIONS, Phase, SESSIONS, live_sessions};
use crate::store::{Store, StoreError};

/// How often the time series take a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept: one hour at [`SAMPLE_EVERY`].
pub const SAMPLES: usize = 720;
/// Shortest time between two computations of the fleet.
pub const MIN_RECOMPUTE: Duration = Duration::from_secs(1);
/// Answers larger than this are gzipped for clients that accept it.
const GZIP_OVER: usize = 8 * 1024;

/// Node flags (`NodeCells::flags`).
pub const NODE_CORDONED: u32 = 1;
pub const NODE_OFFLINE: u32 = 2;
pub const NODE_NOT_READY: u32 = 4;
pub const NODE_DECOMMISSIONING: u32 = 8;
/// Card flags (the third number of a card): bit 0 set when the card is not `ready`; the bits
/// above hold the index of the card's model in the node's `models`.
pub const CARD_ERROR: u32 = 1;

/// `GET /api/v1/overview`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OverviewAnswer {
    pub generated_at: String,
    pub totals: Totals,
    #[schema(value_type = Vec<ClusterCells>)]
    #[serde(serialize_with = "shared_slice")]
    pub clusters: Arc<Vec<ClusterCells>>,
    pub series: Series,
}

/// Serialises the shared fleet without copying it.
fn shared_slice<S: serde::Serializer>(v: &Arc<Vec<ClusterCells>>, s: S) -> Result<S::Ok, S::Error> {
    v.as_slice().serialize(s)
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Totals {
    pub clusters: u64,
    pub nodes: u64,
    pub gpus: u64,
    pub gpu_mem_total_mb: u64,
    pub gpu_mem_booked_mb: u64,
    /// Cards with anything booked.
    pub gpus_busy: u64,
    pub gpus_error: u64,
    pub nodes_cordoned: u64,
    pub nodes_offline: u64,
    pub sessions_live: u64,
    pub sessions_running: u64,
}

/// One cluster's cards, node by node.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClusterCells {
    pub id: String,
    pub name: String,
    /// The cluster's status (`connected`, `degraded`, `unreachable`, `pending`).
    pub status: String,
    pub nodes: Vec<NodeCells>,
    /// The cluster's node pools and their use, by name.
    pub pools: Vec<PoolUse>,
}

/// One node pool's use: its cards, and those busy (a slice booked or a session bound).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PoolUse {
    pub id: String,
    pub name: String,
    pub kind: PoolKind,
    /// The groups it is reserved for.
    pub groups: Vec<String>,
    pub nodes: u64,
    pub gpus_total: u64,
    pub gpus_used: u64,
}

/// One node's cards, compact: four numbers per card in `cards`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeCells {
    pub name: String,
    /// Bits: 1 cordoned, 2 offline, 4 not ready, 8 decommissioning.
    pub flags: u32,
    /// The distinct card models on the node (cards refer to them by index).
    pub models: Vec<String>,
    /// Per card, in uuid order: memory MiB, booked MiB, flags (bit 0: not ready; bits 1..:
    /// model index), live sessions on the card.
    pub cards: Vec<u64>,
    /// The cards' uuids, in the same order (kept for the node's detail, not sent).
    #[serde(skip)]
    pub uuids: Vec<String>,
}

/// Time series, oldest first, one value per sample (columns of equal length).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Series {
    pub interval_s: u64,
    /// Unix milliseconds of each sample.
    pub t: Vec<i64>,
    pub sessions_running: Vec<u64>,
    /// GPU memory (MiB) booked by the open allocations of live sessions.
    pub gpu_mem_booked_mb: Vec<u64>,
    /// Operator callbacks answered per second since the previous sample.
    pub callbacks_per_s: Vec<f64>,
}

/// `GET /api/v1/overview/nodes/{cluster_id}/{node}`: one node's cards in full.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeDetail {
    pub cluster_id: String,
    pub cluster_name: String,
    pub node: String,
    pub flags: u32,
    pub cards: Vec<CardDetail>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CardDetail {
    pub uuid: String,
    pub model: String,
    pub mode: String,
    pub memory_mb: u64,
    pub booked_mem_mb: u64,
    pub total_cores: u64,
    pub booked_cores: u64,
    pub status: String,
    pub sessions: Vec<CardSession>,
}

/// A live session bound to a card, with the slice it booked there (if any).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CardSession {
    pub id: String,
    pub name: Option<String>,
    pub owner: String,
    pub phase: String,
    /// The open allocation on this card: memory and cores booked, and since when.
    pub allocation_id: Option<String>,
    pub booked_mem_mb: u64,
    pub booked_cores: u64,
    pub booked_at: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: i64,
    sessions_running: u64,
    mem_booked_mb: u64,
    callbacks_per_s: f64,
}

/// The fleet as last computed, with the store generation it was read at.
#[derive(Debug)]
struct Fleet {
    generation: u64,
    computed: std::time::Instant,
    totals: Totals,
    clusters: Arc<Vec<ClusterCells>>,
}

/// The overview service: the fleet cache and the ring buffer.
#[derive(Debug)]
pub struct Overview {
    store: Store,
    clock: Clock,
    /// One computation at a time; the answer is shared.
    fleet: tokio::sync::Mutex<Option<Arc<Fleet>>>,
    samples: Mutex<VecDeque<Sample>>,
    /// The callback counter and time at the last sample.
    last_callbacks: Mutex<Option<(i64, u64)>>,
    /// The last answer as sent.
    encoded: Mutex<Option<Arc<Encoded>>>,
}

/// One serialised answer, and its gzip once a client asked for it.
#[derive(Debug)]
pub struct Encoded {
    key: (u64, i64),
    pub json: Vec<u8>,
    gzip: OnceLock<std::io::Result<Vec<u8>>>,
}

impl Encoded {
    /// The gzip of `json` (made on first use; blocking: call off the executor).
    fn gzip(&self) -> Result<&[u8], String> {
        let r = self.gzip.get_or_init(|| {
            let mut e =
                flate2::write::GzEncoder::new(Vec::with_capacity(self.json.len() / 8), flate2::Compression::fast());
            e.write_all(&self.json)?;
            e.finish()
        });
        r.as_deref().map_err(|e| e.to_string())
    }
}

impl Overview {
    pub fn new(store: Store, clock: Clock) -> Self {
        Self {
            store,
            clock,
            fleet: tokio::sync::Mutex::new(None),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
            last_callbacks: Mutex::new(None),
            encoded: Mutex::new(None),
        }
    }

    /// The fleet, recomputed only when a commit landed since the last computation.
    /// At most one computation per [`MIN_RECOMPUTE`]: under a stream of operator callbacks
    /// the generation moves all the time, and every console would otherwise rescan the fleet.
    async fn fleet(&self) -> Result<Arc<Fleet>, StoreError> {
        let mut cached = self.fleet.lock().await;
        if let Some(f) = cached.as_ref() {
            if f.generation == self.store.generation() {
                return Ok(f.clone());
            }
            // Later callers wait on the lock and share this computation.
            tokio::time::sleep(MIN_RECOMPUTE.saturating_sub(f.computed.elapsed())).await;
        }
        let generation = self.store.generation();
        let (totals, clusters) = self.store.read(compute).await?;
        let f =
            Arc::new(Fleet { generation, computed: std::time::Instant::now(), totals, clusters: Arc::new(clusters) });
        *cached = Some(f.clone());
        Ok(f)
    }

    /// Takes one sample into the ring buffer; `callbacks_total` is the operator callbacks
    /// answered since start (the `/metrics` counter).
    pub async fn sample(&self, callbacks_total: u64) -> Result<(), StoreError> {
        // From the live sessions and their open allocations only: the whole fleet (every node
        // and card) is computed when a console asks, not every 5 s (at 160,000 cards that
        // rescan was a tenth of a core).
        let (sessions_running, mem_booked_mb) = self.store.read(sample_totals).await?;
        let now = self.clock.now_ms();
        let rate = {
            let mut last = lock(&self.last_callbacks);
            let rate = match *last {
                Some((at, n)) if now > at => callbacks_total.saturating_sub(n) as f64 * 1000.0 / (now - at) as f64,
                _ => 0.0,
            };
            *last = Some((now, callbacks_total));
            rate
        };
        let mut samples = lock(&self.samples);
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at_ms: now,
            sessions_running,
            mem_booked_mb,
            callbacks_per_s: (rate * 100.0).round() / 100.0,
        });
        Ok(())
    }

    fn series(&self) -> Series {
        let samples = lock(&self.samples);
        Series {
            interval_s: SAMPLE_EVERY.as_secs(),
            t: samples.iter().map(|s| s.at_ms).collect(),
            sessions_running: samples.iter().map(|s| s.sessions_running).collect(),
            gpu_mem_booked_mb: samples.iter().map(|s| s.mem_booked_mb).collect(),
            callbacks_per_s: samples.iter().map(|s| s.callbacks_per_s).collect(),
        }
    }

    /// The answer, serialised once per (fleet generation, newest sample): consoles refreshing
    /// an unchanged fleet get the same bytes (and the same gzip) without any work.
    pub async fn encoded(&self) -> Result<Arc<Encoded>, StoreError> {
        let fleet = self.fleet().await?;
        let newest = lock(&self.samples).back().map_or(0, |s| s.at_ms);
        let key = (fleet.generation, newest);
        if let Some(e) = lock(&self.encoded).as_ref().filter(|e| e.key == key) {
            return Ok(e.clone());
        }
        let answer = OverviewAnswer {
            generated_at: rfc3339_ms(self.clock.now_ms()),
            totals: fleet.totals.clone(),
            clusters: fleet.clusters.clone(),
            series: self.series(),
        };
        let json = tokio::task::spawn_blocking(move || serde_json::to_vec(&answer))
            .await
            .map_err(|e| StoreError::Join(e.to_string()))?
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let e = Arc::new(Encoded { key, json, gzip: OnceLock::new() });
        *lock(&self.encoded) = Some(e.clone());
        Ok(e)
    }

    /// One node's cards in full; `None` when the fleet has no such node.
    pub async fn node(&self, cluster_id: &str, node: &str) -> Result<Option<NodeDetail>, StoreError> {
        let fleet = self.fleet().await?;
        let Some(cluster) = fleet.clusters.iter().find(|c| c.id == cluster_id) else { return Ok(None) };
        let Some(cells) = cluster.nodes.iter().find(|n| n.name == node) else { return Ok(None) };
        let (cluster_id, cluster_name, node, flags, uuids) =
            (cluster.id.clone(), cluster.name.clone(), cells.name.clone(), cells.flags, cells.uuids.clone());
        self.store
            .read(move |txn| {
                let mut cards = Vec::with_capacity(uuids.len());
                let mut index = HashMap::new();
                for uuid in &uuids {
                    if let Some(g) = GPUS.get(txn, &format!("{cluster_id}/{uuid}"))? {
                        index.insert(g.uuid.clone(), cards.len());
                        cards.push(CardDetail {
                            uuid: g.uuid,
                            model: g.model,
                            mode: g.mode,
                            memory_mb: g.total_mem_mb,
                            booked_mem_mb: g.used_mem_mb,
                            total_cores: g.total_cores,
                            booked_cores: g.used_cores,
                            status: g.status.into(),
                            sessions: Vec::new(),
                        });
                    }
                }
                for (id, on) in LIVE_SESSIONS.list(txn)? {
                    if on != cluster_id {
                        continue;
                    }
                    let Some(s) = SESSIONS.get(txn, &id)? else { continue };
                    let Some(&at) = s.bound_gpu_uuid.as_ref().and_then(|u| index.get(u)) else { continue };
                    let alloc = ALLOCATIONS
                        .list_prefix(txn, &allocation_prefix(&s.id))?
                        .into_iter()
                        .map(|(_, a)| a)
                        .find(|a| a.is_open() && a.gpu_uuid.as_deref() == Some(cards[at].uuid.as_str()));
                    cards[at].sessions.push(CardSession {
                        id: s.id,
                        name: s.name,
                        owner: s.owner,
                        phase: s.phase.as_str().to_string(),
                        allocation_id: alloc.as_ref().map(|a| a.id.clone()),
                        booked_mem_mb: alloc.as_ref().map_or(0, |a| a.gpu_mem_mb),
                        booked_cores: alloc.as_ref().map_or(0, |a| a.gpu_cores),
                        booked_at: alloc.as_ref().map(|a| rfc3339_ms(a.created_at)),
                    });
                }
                Ok(Some(NodeDetail { cluster_id, cluster_name, node, flags, cards }))
            })
            .await
    }
}

/// Running sessions and the GPU memory their open allocations book (what the series charts).
fn sample_totals(txn: &redb::ReadTransaction) -> Result<(u64, u64), StoreError> {
    let (mut running, mut booked) = (0, 0);
    for s in live_sessions(txn)? {
        if s.phase == Phase::Running {
            running += 1;
        }
        for (_, a) in ALLOCATIONS.list_prefix(txn, &allocation_prefix(&s.id))? {
            if a.is_open() {
                booked += a.gpu_mem_mb;
            }
        }
    }
    Ok((running, booked))
}

/// Reads the whole fleet in one transaction.
fn compute(txn: &redb::ReadTransaction) -> Result<(Totals, Vec<ClusterCells>), StoreError> {
    let mut totals = Totals::default();
    let mut clusters: Vec<ClusterCells> = Vec::new();
    let mut cluster_at: HashMap<String, usize> = HashMap::new();
    for (_, c) in CLUSTERS.list(txn)? {
        if !c.is_live() {
            continue;
        }
        cluster_at.insert(c.id.clone(), clusters.len());
        clusters.push(ClusterCells {
            id: c.id,
            name: c.name,
            status: c.status.as_str().to_string(),
            nodes: Vec::new(),
            pools: Vec::new(),
        });
    }
    // Node pools: (cluster index, pool index) by pool id, and each pooled node's pool.
    let mut pool_at: HashMap<String, (usize, usize)> = HashMap::new();
    let mut pools: Vec<_> = NODE_POOLS.list(txn)?.into_iter().map(|(_, p)| p).collect();
    pools.sort_by_key(|p| p.name.to_lowercase());
    for p in pools {
        let Some(&ci) = cluster_at.get(&p.cluster_id) else { continue };
        pool_at.insert(p.id.clone(), (ci, clusters[ci].pools.len()));
        clusters[ci].pools.push(PoolUse {
            id: p.id,
            name: p.name,
            kind: p.kind,
            groups: p.groups,
            nodes: p.nodes.len() as u64,
            gpus_total: 0,
            gpus_used: 0,
        });
    }
    let mut pool_of_node: HashMap<(String, String), (usize, usize)> = HashMap::new();
    for (k, m) in POOL_MEMBERS.list(txn)? {
        let (Some((cluster, node)), Some(&at)) = (k.split_once('/'), pool_at.get(&m.pool_id)) else { continue };
        pool_of_node.insert((cluster.to_string(), node.to_string()), at);
    }
    totals.clusters = clusters.len() as u64;
    // Nodes: key `<cluster>/<node>`, so they come grouped by cluster and sorted by name.
    let mut node_at: HashMap<(usize, String), usize> = HashMap::new();
    for (_, n) in NODES.list(txn)? {
        let Some(&ci) = cluster_at.get(&n.cluster_id) else { continue };
        let mut flags = 0;
        if n.cordoned || !n.schedulable {
            flags |= NODE_CORDONED;
            totals.nodes_cordoned += 1;
        }
        if n.offline {
            flags |= NODE_OFFLINE;
            totals.nodes_offline += 1;
        }
        if !n.ready {
            flags |= NODE_NOT_READY;
        }
        if n.decommissioning {
            flags |= NODE_DECOMMISSIONING;
        }
        let nodes = &mut clusters[ci].nodes;
        node_at.insert((ci, n.name.clone()), nodes.len());
        nodes.push(NodeCells { name: n.name, flags, models: Vec::new(), cards: Vec::new(), uuids: Vec::new() });
    }
    totals.nodes = node_at.len() as u64;
    // Live sessions per card.
    let mut on_card: HashMap<(String, String), u64> = HashMap::new();
    for s in live_sessions(txn)? {
        totals.sessions_live += 1;
        if s.phase == Phase::Running {
            totals.sessions_running += 1;
        }
        if let Some(uuid) = s.bound_gpu_uuid {
            *on_card.entry((s.cluster_id, uuid)).or_default() += 1;
        }
    }
    for (_, g) in GPUS.list(txn)? {
        let Some(&ci) = cluster_at.get(&g.cluster_id) else { continue };
        let ni = match node_at.get(&(ci, g.node.clone())) {
            Some(&ni) => ni,
            None => {
                // A card whose node record is missing still shows, under its node's name.
                let nodes = &mut clusters[ci].nodes;
                node_at.insert((ci, g.node.clone()), nodes.len());
                nodes.push(NodeCells {
                    name: g.node.clone(),
                    flags: 0,
                    models: Vec::new(),
                    cards: Vec::new(),
                    uuids: Vec::new(),
                });
                nodes.len() - 1
            }
        };
        let node = &mut clusters[ci].nodes[ni];
        let model = match node.models.iter().position(|m| *m == g.model) {
            Some(i) => i,
            None => {
                node.models.push(g.model.clone());
                node.models.len() - 1
            }
        };
        let error = !g.status.is_ready();
        let sessions = on_card.get(&(g.cluster_id.clone(), g.uuid.clone())).copied().unwrap_or(0);
        node.cards.extend([g.total_mem_mb, g.used_mem_mb, (model as u64) << 1 | u64::from(error), sessions]);
        node.uuids.push(g.uuid);
        totals.gpus += 1;
        totals.gpu_mem_total_mb += g.total_mem_mb;
        totals.gpu_mem_booked_mb += g.used_mem_mb;
        let busy = g.used_mem_mb > 0 || g.used_cores > 0 || sessions > 0;
        if busy {
            totals.gpus_busy += 1;
        }
        if !pool_of_node.is_empty()
            && let Some(&(pc, pi)) = pool_of_node.get(&(g.cluster_id.clone(), clusters[ci].nodes[ni].name.clone()))
        {
            let pool = &mut clusters[pc].pools[pi];
            pool.gpus_total += 1;
            pool.gpus_used += u64::from(busy);
        }
        if error {
            totals.gpus_error += 1;
        }
    }
    Ok((totals, clusters))
}

/// Samples the fleet every [`SAMPLE_EVERY`] until the server stops.
pub fn spawn(app: Arc<App>, mut stop: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|v| *v) => return,
            }
            if let Err(e) = app.overview.sample(callbacks_total(&app)).await {
                tracing::warn!(error = %e, "overview sample failed");
            }
        }
    });
}

/// Operator callbacks answered since start, all routes and statuses (the `/metrics` counter).
pub fn callbacks_total(app: &App) -> u64 {
    app.inventory.metrics.snapshot().iter().map(|(_, _, n)| n).sum()
}

pub fn routes<D: Docs>() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(D: overview)).routes(routes!(D: overview_node))
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|part| {
            let mut it = part.split(';');
            let name = it.next().unwrap_or("").trim();
            let refused =
                it.any(|p| matches!(p.trim().replace(' ', "").as_str(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            name.eq_ignore_ascii_case("gzip") && !refused
        })
    })
}

/// The fleet picture: every card of every live cluster (compact), totals, and the last hour of
/// samples.
#[utoipa::path(get, path = "/api/v1/overview", tag = "clusters",
    responses(
        (status = 200, body = OverviewAnswer, description = "gzip-encoded when the request accepts it; `clusters[].nodes[].cards` holds four numbers per card: memory MiB, booked MiB, flags (bit 0 not ready, bits 1.. the index into `models`), live sessions"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn overview(State(app): State<Arc<App>>, _admin: AdminCaller, headers: HeaderMap) -> Result<Response, ApiError> {
    let encoded = app.overview.encoded().await.map_err(ApiError::internal)?;
    let json = HeaderValue::from_static("application/json");
    let vary = HeaderValue::from_static("accept-encoding");
    if encoded.json.len() > GZIP_OVER && accepts_gzip(&headers) {
        let gz = tokio::task::spawn_blocking(move || encoded.gzip().map(<[u8]>::to_vec))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?;
        let headers = [
            (header::CONTENT_TYPE, json),
            (header::CONTENT_ENCODING, HeaderValue::from_static("gzip")),
            (header::VARY, vary),
        ];
        return Ok((headers, gz).into_response());
    }
    Ok(([(header::CONTENT_TYPE, json), (header::VARY, vary)], encoded.json.clone()).into_response())
}

/// One node's cards in full: uuid, model, booking, and the live sessions on each with the slice
/// they booked.
#[utoipa::path(get, path = "/api/v1/overview/nodes/{cluster_id}/{node}", tag = "clusters",
    params(("cluster_id" = String, Path, description = "clu_…"), ("node" = String, Path, description = "node name")),
    responses(
        (status = 200, body = NodeDetail),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such node in the fleet")))]
async fn overview_node(
    State(app): State<Arc<App>>,
    _admin: AdminCaller,
    Path((cluster_id, node)): Path<(String, String)>,
) -> Result<axum::Json<NodeDetail>, ApiError> {
    // The same id rule as every cluster route: a path trick or a huge string is not echoed back.
    let cluster_id =
        crate::cluster_id::ClusterId::parse(&cluster_id).map_err(|e| ApiError::not_found(e.to_string()))?;
    match app.overview.node(cluster_id.as_str(), &node).await? {
        Some(d) => Ok(axum::Json(d)),
        None => {
            let shown: String = node.chars().take(80).collect();
            Err(ApiError::not_found(format!("no node {shown:?} in cluster {cluster_id}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_used_only_when_accepted() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip, deflate, br")));
        assert!(accepts_gzip(&h("br;q=1.0, GZIP;q=0.5")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&h("br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
