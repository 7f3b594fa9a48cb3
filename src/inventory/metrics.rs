//! The inventory's part of `GET /metrics` (Prometheus text, format 0.0.4, written by hand):
//! operator callbacks by route and status and by route and cluster, and clusters by status.
//! The whole document is put together in `crate::metrics`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use crate::auth::guard::CallerSlot;
use crate::clusters::model::{ClusterRecord, ClusterStatus};
use crate::locks::lock;

/// Counts by route template, then by a second label.
type ByRoute<K> = Mutex<HashMap<Arc<str>, HashMap<K, u64>>>;

/// Callback counts by route template, then by status and by cluster (both bounded: routes are
/// templates, clusters are the verified tokens' registered ids).
#[derive(Debug, Default)]
pub struct Callbacks {
    by_status: ByRoute<u16>,
    by_cluster: ByRoute<Arc<str>>,
}

fn bump<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u64>, k: K) {
    *m.entry(k).or_insert(0) += 1;
}

impl Callbacks {
    pub fn count(&self, route: &str, status: u16, cluster: Option<&str>) {
        {
            let mut m = lock(&self.by_status);
            match m.get_mut(route) {
                Some(s) => bump(s, status),
                None => {
                    m.insert(Arc::from(route), HashMap::from([(status, 1)]));
                }
            }
        }
        let Some(cluster) = cluster else { return };
        let mut m = lock(&self.by_cluster);
        let per = match m.get_mut(route) {
            Some(per) => per,
            None => m.entry(Arc::from(route)).or_default(),
        };
        match per.get_mut(cluster) {
            Some(n) => *n += 1,
            None => {
                per.insert(Arc::from(cluster), 1);
            }
        }
    }

    /// (route, status, count), sorted.
    pub fn snapshot(&self) -> Vec<(String, u16, u64)> {
        let m = lock(&self.by_status);
        let sorted: BTreeMap<(&str, u16), u64> =
            m.iter().flat_map(|(r, s)| s.iter().map(move |(st, n)| ((&**r, *st), *n))).collect();
        sorted.into_iter().map(|((r, s), n)| (r.to_string(), s, n)).collect()
    }

    /// (route, cluster, count), sorted.
    pub fn by_cluster(&self) -> Vec<(String, String, u64)> {
        let m = lock(&self.by_cluster);
        let sorted: BTreeMap<(&str, &str), u64> =
            m.iter().flat_map(|(r, c)| c.iter().map(move |(id, n)| ((&**r, &**id), *n))).collect();
        sorted.into_iter().map(|((r, c), n)| (r.to_string(), c.to_string(), n)).collect()
    }
}

/// An `/internal` callback being answered, counted once its answer is known. Part of the router's
/// per-route rules (`crate::http`): every answer of an `/internal` route is counted by status and,
/// once the operator guard verified the caller, by cluster.
pub struct CountedCallback {
    route: String,
    slot: CallerSlot,
}

impl CountedCallback {
    /// For a request routed to an `/internal` route (`None` for any other): the slot the
    /// operator guard fills in goes into the request.
    pub fn begin(req: &mut Request) -> Option<Self> {
        let route = req.extensions().get::<MatchedPath>()?.as_str();
        if !route.starts_with("/internal/") {
            return None;
        }
        let counted = Self { route: route.to_string(), slot: CallerSlot::default() };
        req.extensions_mut().insert(counted.slot.clone());
        Some(counted)
    }

    pub fn answered(self, inventory: &super::Inventory, res: &Response) {
        inventory.metrics.count(&self.route, res.status().as_u16(), self.slot.0.get().map(|c| c.as_str()));
    }
}

pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Callbacks, clusters by status, and when each cluster's operator last reported. `clusters`
/// are the live (registered) ones: per-cluster series are written for them only.
/// `clusters`: the live ones, each with its operator's last report.
pub fn render(callbacks: &Callbacks, clusters: &[(ClusterRecord, Option<i64>)], out: &mut String) {
    let _ = writeln!(out, "# HELP gshare_callbacks_total Operator callbacks answered, by route and status.");
    let _ = writeln!(out, "# TYPE gshare_callbacks_total counter");
    for (route, status, n) in callbacks.snapshot() {
        let _ = writeln!(out, "gshare_callbacks_total{{route=\"{}\",status=\"{status}\"}} {n}", escape(&route));
    }
    let _ = writeln!(
        out,
        "# HELP gshare_callbacks_by_cluster_total Operator callbacks with a verified token, by route and cluster (rates: rate() in Prometheus)."
    );
    let _ = writeln!(out, "# TYPE gshare_callbacks_by_cluster_total counter");
    let registered: HashSet<&str> = clusters.iter().map(|(c, _)| c.id.as_str()).collect();
    for (route, cluster, n) in callbacks.by_cluster() {
        // A token can outlive its cluster's registration: no series for an unregistered one.
        if !registered.contains(cluster.as_str()) {
            continue;
        }
        let _ = writeln!(
            out,
            "gshare_callbacks_by_cluster_total{{route=\"{}\",cluster_id=\"{}\"}} {n}",
            escape(&route),
            escape(&cluster)
        );
    }

    let mut by_status: BTreeMap<&'static str, u64> =
        [ClusterStatus::Pending, ClusterStatus::Connected, ClusterStatus::Degraded, ClusterStatus::Unreachable]
            .iter()
            .map(|s| (s.as_str(), 0))
            .collect();
    for (c, _) in clusters {
        *by_status.entry(c.status.as_str()).or_default() += 1;
    }
    let _ = writeln!(out, "# HELP gshare_clusters Registered clusters by status.");
    let _ = writeln!(out, "# TYPE gshare_clusters gauge");
    for (status, n) in by_status {
        let _ = writeln!(out, "gshare_clusters{{status=\"{status}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP gshare_operator_last_report_timestamp_seconds When a cluster's operator last reported (clusters whose operator ever did; written every liveness_flush_every)."
    );
    let _ = writeln!(out, "# TYPE gshare_operator_last_report_timestamp_seconds gauge");
    for (c, heartbeat_at) in clusters {
        if let Some(ms) = *heartbeat_at {
            let _ = writeln!(
                out,
                "gshare_operator_last_report_timestamp_seconds{{cluster_id=\"{}\"}} {}",
                escape(&c.id),
                ms as f64 / 1000.0
            );
        }
    }
}
