//! What a GPU cluster needs before the operator's sessions can run there, as upstream's
//! `hack/attach-cluster.sh` sets it up (operator-contract §8.6): the node labels the operator's
//! pods select on, ingress-nginx (IngressClass `nginx` and a running controller Service), the HAMi
//! scheduler and its device-plugin monitor Service (whose real name and namespace become
//! `--hami-monitor-url`), and a DCGM exporter (without one the operator never idle-reaps a GPU
//! session). Checked at registration and again before attach; none of them refuses
//! registration: each failed check is a stage with its cause and hint. `label_nodes` applies
//! upstream's labels, only when asked, never over a label already set to another value.

use std::collections::BTreeMap;
use std::time::Duration;

use super::kinds::{ConfigMap, Deployment, IngressClass, Node, Pod, Service};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A prerequisite check; the wire names are pinned by tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrereqStage {
    NodeLabels,
    Ingress,
    HamiScheduler,
    HamiMonitor,
    Dcgm,
}

impl PrereqStage {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeLabels => "node_labels",
            Self::Ingress => "ingress",
            Self::HamiScheduler => "hami_scheduler",
            Self::HamiMonitor => "hami_monitor",
            Self::Dcgm => "dcgm",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Prerequisite {
    pub stage: PrereqStage,
    pub ok: bool,
    /// `error`: sessions will not run (or not be reachable); `warning`: a feature is off.
    pub severity: String,
    pub cause: String,
    pub hint: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Prerequisites {
    pub checks: Vec<Prerequisite>,
    /// GPU nodes (HAMi or `nvidia.com/gpu`) lacking one of `gpu=on`, `gshare.io/gpu=true`,
    /// `gshare.io/gpu-mode` (at most 50 named; `unlabeled_gpu_node_count` counts all).
    pub unlabeled_gpu_nodes: Vec<String>,
    pub unlabeled_gpu_node_count: usize,
    /// Worker nodes without GPUs lacking `gshare.io/node-type=cpu`.
    pub unlabeled_cpu_nodes: Vec<String>,
    pub unlabeled_cpu_node_count: usize,
    /// The ingress-nginx controller's HTTP NodePort on a node address: a `session_ingress` to set.
    pub suggested_session_ingress: Option<String>,
    /// The HAMi device-plugin monitor Service found, as the operator's `--hami-monitor-url`.
    pub hami_monitor_url: Option<String>,
}

impl Prerequisites {
    pub fn failed(&self) -> impl Iterator<Item = &Prerequisite> {
        self.checks.iter().filter(|c| !c.ok)
    }
}

/// Upstream's GPU node labels (`attach-cluster.sh` step 3) and CPU node label (`cluster-bootstrap.sh`).
pub const GPU_LABELS: [(&str, &str); 3] =
    [("gpu", "on"), ("gshare.io/gpu", "true"), ("gshare.io/gpu-mode", "fractional")];
pub const CPU_LABEL: (&str, &str) = ("gshare.io/node-type", "cpu");
const NAMED: usize = 50;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

pub fn is_gpu_node(n: &Node) -> bool {
    let annotations = n.metadata.annotations.as_ref();
    let capacity = n.status.as_ref().and_then(|s| s.capacity.as_ref());
    annotations.is_some_and(|a| a.contains_key("hami.io/node-nvidia-register"))
        || capacity.is_some_and(|c| c.get("nvidia.com/gpu").is_some_and(|q| q.0.trim() != "0"))
}

fn is_control_plane(n: &Node) -> bool {
    let l = labels(n);
    l.contains_key("node-role.kubernetes.io/control-plane") || l.contains_key("node-role.kubernetes.io/master")
}

/// The labels a node lacks (key, upstream's value); a label set to another value is not missing.
pub fn missing_labels(n: &Node) -> Vec<(&'static str, &'static str)> {
    let l = labels(n);
    if is_gpu_node(n) {
        GPU_LABELS.iter().copied().filter(|(k, _)| !l.contains_key(*k)).collect()
    } else if !is_control_plane(n) && !l.contains_key(CPU_LABEL.0) {
        vec![CPU_LABEL]
    } else {
        Vec::new()
    }
}

/// Labels already set to a value other than upstream's (`node: key=value`): kept, reported.
pub fn differing_labels(n: &Node) -> Vec<String> {
    let l = labels(n);
    let name = n.metadata.name.clone().unwrap_or_default();
    let wanted: &[(&str, &str)] = if is_gpu_node(n) { &GPU_LABELS } else { std::slice::from_ref(&CPU_LABEL) };
    wanted
        .iter()
        .filter_map(|(k, v)| {
            l.get(*k).filter(|have| have != v).map(|have| format!("{name}: {k}={have} (upstream sets {v})"))
        })
        .collect()
}

async fn bounded<T>(fut: impl std::future::Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(s))) => {
            Err(format!("{} {}: {}", s.code, s.reason, s.message.chars().take(300).collect::<String>()))
        }
        Ok(Err(e)) => Err(e.to_string().chars().take(300).collect()),
        Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
    }
}

fn check(stage: PrereqStage, ok: bool, severity: &str, cause: String, hint: &str) -> Prerequisite {
    Prerequisite { stage, ok, severity: severity.into(), cause, hint: hint.into() }
}

fn node_address(n: &Node) -> Option<String> {
    let addrs = n.status.as_ref()?.addresses.as_ref()?;
    addrs.iter().find(|a| a.type_ == "InternalIP").or_else(|| addrs.first()).map(|a| a.address.clone())
}

fn running(pods: &[Pod]) -> usize {
    pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count()
}

/// Runs every check against the cluster; `nodes` is the probe's node list.
pub async fn check_cluster(client: &kube::Client, nodes: &[Node]) -> Prerequisites {
    let mut out = Prerequisites::default();

    // Node labels.
    let mut gpu_nodes = 0;
    let mut differing = Vec::new();
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let missing = missing_labels(n);
        differing.extend(differing_labels(n));
        if is_gpu_node(n) {
            gpu_nodes += 1;
            if !missing.is_empty() {
                out.unlabeled_gpu_node_count += 1;
                if out.unlabeled_gpu_nodes.len() < NAMED {
                    out.unlabeled_gpu_nodes.push(name);
                }
            }
        } else if !missing.is_empty() {
            out.unlabeled_cpu_node_count += 1;
            if out.unlabeled_cpu_nodes.len() < NAMED {
                out.unlabeled_cpu_nodes.push(name);
            }
        }
    }
    let names = |v: &[String], n: usize| {
        let mut s = v.join(", ");
        if n > v.len() {
            s.push_str(&format!(" and {} more", n - v.len()));
        }
        s
    };
    let labels_ok = out.unlabeled_gpu_node_count == 0 && out.unlabeled_cpu_node_count == 0;
    let mut cause = if labels_ok {
        format!("{gpu_nodes} GPU nodes carry gpu=on, gshare.io/gpu and gshare.io/gpu-mode")
    } else {
        let mut parts = Vec::new();
        if out.unlabeled_gpu_node_count > 0 {
            parts.push(format!(
                "{} of {gpu_nodes} GPU nodes lack upstream's labels (gpu=on, gshare.io/gpu=true, gshare.io/gpu-mode): {}; \
                 the operator's GPU pods select on them, so sessions there stay Pending",
                out.unlabeled_gpu_node_count,
                names(&out.unlabeled_gpu_nodes, out.unlabeled_gpu_node_count)
            ));
        }
        if out.unlabeled_cpu_node_count > 0 {
            parts.push(format!(
                "{} CPU nodes lack gshare.io/node-type=cpu: {}",
                out.unlabeled_cpu_node_count,
                names(&out.unlabeled_cpu_nodes, out.unlabeled_cpu_node_count)
            ));
        }
        parts.join("; ")
    };
    if !differing.is_empty() {
        cause.push_str(&format!(
            "; set to other values (kept): {}",
            differing.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    out.checks.push(check(
        PrereqStage::NodeLabels,
        labels_ok,
        "error",
        cause,
        if labels_ok {
            ""
        } else {
            "attach with ?label_nodes=true (gshare cluster attach --label-nodes) to apply upstream's labels, or \
             kubectl label node <name> gpu=on gshare.io/gpu=true gshare.io/gpu-mode=fractional"
        },
    ));

    // ingress-nginx: IngressClass nginx and a controller Service with running pods, and the
    // ConfigMap setting a lab needs (proxy-body-size).
    let mut body_size_hint: Option<String> = None;
    let classes: Api<IngressClass> = Api::all(client.clone());
    let class = bounded(classes.get_opt("nginx")).await;
    let services: Api<Service> = Api::all(client.clone());
    let sel = "app.kubernetes.io/name=ingress-nginx,app.kubernetes.io/component=controller";
    let controller = bounded(services.list(&ListParams::default().labels(sel).limit(20))).await;
    let pods_all: Api<Pod> = Api::all(client.clone());
    let controller_pods = bounded(pods_all.list(&ListParams::default().labels(sel).limit(50))).await;
    let (ok, cause) = match (&class, &controller, &controller_pods) {
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => (false, format!("cannot read ingress-nginx: {e}")),
        (Ok(None), _, _) => (false, "no IngressClass nginx: session URLs lead nowhere".to_string()),
        (Ok(Some(_)), Ok(svcs), _) if svcs.items.is_empty() => {
            (false, "IngressClass nginx exists but no ingress-nginx controller Service".to_string())
        }
        (Ok(Some(_)), Ok(svcs), Ok(pods)) if running(&pods.items) == 0 => (
            false,
            format!(
                "the ingress-nginx controller Service {} has no running pod",
                svcs.items[0].metadata.name.as_deref().unwrap_or("?")
            ),
        ),
        (Ok(Some(_)), Ok(svcs), Ok(pods)) => {
            let svc = &svcs.items[0];
            let node_port = svc
                .spec
                .as_ref()
                .and_then(|s| s.ports.as_ref())
                .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some("http") || p.port == 80))
                .and_then(|p| p.node_port);
            let addr = nodes.iter().find(|n| !is_control_plane(n)).or(nodes.first()).and_then(node_address);
            if let (Some(port), Some(addr)) = (node_port, addr) {
                out.suggested_session_ingress = Some(format!("{addr}:{port}"));
            }
            // The chart's controller ConfigMap has the Service's name: upstream's session Ingress
            // sets no proxy-body-size, so nginx's 1 MiB default refuses larger uploads (413).
            let (ns, name) =
                (svc.metadata.namespace.as_deref().unwrap_or("default"), svc.metadata.name.as_deref().unwrap_or("?"));
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let body_size = match bounded(maps.get_opt(name)).await {
                Ok(Some(cm)) => cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("proxy-body-size"))
                    .map(|v| v.chars().take(32).collect::<String>()),
                _ => None,
            };
            body_size_hint = body_size.is_none().then(|| {
                format!(
                    "set proxy-body-size in ConfigMap {ns}/{name}: kubectl -n {ns} patch configmap {name} --type merge \
                     -p '{{\"data\":{{\"proxy-body-size\":\"0\"}}}}'"
                )
            });
            (
                true,
                format!(
                    "IngressClass nginx; controller Service {ns}/{name} with {} running pods{}; {}",
                    running(&pods.items),
                    node_port.map(|p| format!(", HTTP NodePort {p}")).unwrap_or_default(),
                    match &body_size {
                        Some(v) => format!("proxy-body-size {v} (ConfigMap {ns}/{name})"),
                        None => format!(
                            "proxy-body-size not set in ConfigMap {ns}/{name}: nginx's 1 MiB default answers 413 to \
                             larger uploads through session URLs"
                        ),
                    }
                ),
            )
        }
    };
    out.checks.push(check(
        PrereqStage::Ingress,
        ok,
        "error",
        cause,
        if ok {
            body_size_hint.as_deref().unwrap_or("")
        } else {
            "install ingress-nginx (upstream: chart ingress-nginx 4.15.1 in namespace ingress-nginx, NodePort 30080/30443)"
        },
    ));

    // HAMi scheduler and device-plugin monitor.
    let deployments: Api<Deployment> = Api::all(client.clone());
    let scheduler =
        bounded(deployments.list(&ListParams::default().labels("app.kubernetes.io/component=hami-scheduler").limit(5)))
            .await;
    let (ok, cause) = match &scheduler {
        Err(e) => (false, format!("cannot read the HAMi scheduler: {e}")),
        Ok(l) if l.items.is_empty() => {
            (false, "no HAMi scheduler Deployment (app.kubernetes.io/component=hami-scheduler)".into())
        }
        Ok(l) => {
            let d = &l.items[0];
            let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
            (
                ready > 0,
                format!(
                    "HAMi scheduler {}/{} ({ready} ready)",
                    d.metadata.namespace.as_deref().unwrap_or("?"),
                    d.metadata.name.as_deref().unwrap_or("?")
                ),
            )
        }
    };
    out.checks.push(check(
        PrereqStage::HamiScheduler,
        ok,
        "error",
        cause,
        if ok { "" } else { "install HAMi (upstream: chart hami/hami 2.10.0 in kube-system)" },
    ));
    let monitor = bounded(
        services.list(&ListParams::default().labels("app.kubernetes.io/component=hami-device-plugin").limit(20)),
    )
    .await;
    let (ok, cause) =
        match &monitor {
            Err(e) => (false, format!("cannot read the HAMi monitor Service: {e}")),
            Ok(l) => {
                let found =
                    l.items.iter().find_map(|s| {
                        let name = s.metadata.name.as_deref()?;
                        let ns = s.metadata.namespace.as_deref()?;
                        let port =
                            s.spec.as_ref()?.ports.as_ref()?.iter().find(|p| {
                                p.name.as_deref().is_some_and(|n| n.contains("monitor")) || p.port == 31992
                            })?;
                        name.ends_with("-monitor").then(|| format!("http://{name}.{ns}.svc:{}", port.port))
                    });
                match found {
                    Some(url) => {
                        out.hami_monitor_url = Some(url.clone());
                        (true, format!("HAMi device-plugin monitor at {url}"))
                    }
                    None => (
                        false,
                        "no HAMi device-plugin monitor Service: the operator cannot read GPU use, so GPU idle-pausing \
                     never fires"
                            .into(),
                    ),
                }
            }
        };
    out.checks.push(check(
        PrereqStage::HamiMonitor,
        ok,
        "warning",
        cause,
        if ok { "" } else { "install HAMi with its device-plugin monitor Service (default port 31992)" },
    ));

    // DCGM exporter.
    let dcgm =
        bounded(services.list(&ListParams::default().labels("app.kubernetes.io/name=dcgm-exporter").limit(5))).await;
    let (ok, cause) = match &dcgm {
        Err(e) => (false, format!("cannot look for a DCGM exporter: {e}")),
        Ok(l) if l.items.is_empty() => (
            false,
            "no DCGM exporter Service (app.kubernetes.io/name=dcgm-exporter): idle reclaim is off for GPU sessions"
                .into(),
        ),
        Ok(l) => (
            true,
            format!(
                "DCGM exporter {}/{}",
                l.items[0].metadata.namespace.as_deref().unwrap_or("?"),
                l.items[0].metadata.name.as_deref().unwrap_or("?")
            ),
        ),
    };
    out.checks.push(check(
        PrereqStage::Dcgm,
        ok,
        "warning",
        cause,
        if ok { "" } else { "install NVIDIA's dcgm-exporter (GPU operator or its Helm chart) for GPU idle reclaim" },
    ));
    out
}

/// What `label_nodes` did to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct NodeLabeling {
    pub node: String,
    /// `key=value` applied.
    pub applied: Vec<String>,
    /// Labels already set to another value, left as they are (`key=value (upstream sets v)`).
    pub kept: Vec<String>,
}

/// Applies upstream's labels to GPU and CPU nodes that lack them (merge patch of the missing
/// keys only: a label set to another value is kept and reported), eight nodes at a time.
pub async fn label_nodes(client: &kube::Client, nodes: &[Node]) -> Result<Vec<NodeLabeling>, String> {
    use futures::StreamExt;
    let api: Api<Node> = Api::all(client.clone());
    // (node, labels to add, labels kept at other values)
    type Work = (String, Vec<(String, String)>, Vec<String>);
    let work: Vec<Work> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let kept: Vec<String> = differing_labels(n)
                .into_iter()
                .map(|d| d.split_once(": ").map(|(_, r)| r.to_string()).unwrap_or(d))
                .collect();
            let missing: Vec<(String, String)> =
                missing_labels(n).into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            (!missing.is_empty() || !kept.is_empty()).then_some((name, missing, kept))
        })
        .collect();
    let results: Vec<Result<NodeLabeling, String>> = futures::stream::iter(work)
        .map(|(name, missing, kept)| {
            let api = api.clone();
            async move {
                if !missing.is_empty() {
                    let map: serde_json::Map<String, serde_json::Value> =
                        missing.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
                    let patch = serde_json::json!({ "metadata": { "labels": map } });
                    bounded(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
                        .await
                        .map_err(|e| format!("labelling node {name}: {e}"))?;
                }
                Ok(NodeLabeling {
                    node: name,
                    applied: missing.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    kept,
                })
            }
        })
        .buffered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn labels_missing_and_differing() {
        let gpu = node(serde_json::json!({"metadata": {"name": "g", "labels": {"gshare.io/gpu-mode": "mig"},
            "annotations": {"hami.io/node-nvidia-register": "[]"}}}));
        assert_eq!(missing_labels(&gpu), [("gpu", "on"), ("gshare.io/gpu", "true")]);
        assert_eq!(differing_labels(&gpu), ["g: gshare.io/gpu-mode=mig (upstream sets fractional)"]);
        let cpu = node(serde_json::json!({"metadata": {"name": "c"}}));
        assert_eq!(missing_labels(&cpu), [CPU_LABEL]);
        let cp = node(
            serde_json::json!({"metadata": {"name": "m", "labels": {"node-role.kubernetes.io/control-plane": ""}}}),
        );
        assert!(missing_labels(&cp).is_empty());
    }
}
