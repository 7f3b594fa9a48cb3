//! The staged cluster probe: `connect` (DNS/TCP/TLS), `auth`, `version`, `runtime_class`, `hami`
//! (the `kubeconfig` stage runs before, in [`super::kubeconfig::check`]). Every stage shares one
//! deadline, so a probe never takes longer than `probe_timeout`. The probe also reads the
//! `kube-system` UID (cluster identity) and the node list (to seed inventory).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::ListParams;
use serde::Deserialize;

use super::kinds::{Namespace, Node, RuntimeClass};
use super::kubeconfig::ServerAddr;
use super::model::{Check, ClusterStatus, ProbeError, Stage};

/// The probe's stages in order (see [`Stage::PROBE`]).
pub const STAGES: [Stage; 6] = Stage::PROBE;
pub const MISSING_RUNTIME_CLASS: &str = "runtime_class_nvidia";
pub const MISSING_HAMI: &str = "hami_device_plugin";

/// A GPU as read from a node (HAMi's register annotation, or the capacity fallback).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbedGpu {
    pub uuid: String,
    pub model: String,
    pub mode: String,
    pub memory_mb: u64,
    pub cores: u64,
    pub healthy: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbedNode {
    pub name: String,
    pub ready: bool,
    pub schedulable: bool,
    pub role: String,
    pub cpu: Option<f64>,
    pub mem_gb: Option<f64>,
    pub gpus: Vec<ProbedGpu>,
}

/// The result of one probe.
#[derive(Debug, Clone)]
pub struct ProbeOutcome {
    pub checks: Vec<Check>,
    pub failure: Option<ProbeError>,
    /// Upstream's names for what a GPU cluster lacks: `runtime_class_nvidia`, `hami_device_plugin`.
    pub missing: Vec<String>,
    pub status: ClusterStatus,
    pub kube_system_uid: Option<String>,
    pub version: Option<String>,
    pub latency_ms: u64,
    pub nodes: Option<Vec<ProbedNode>>,
    /// What upstream's attach-cluster.sh sets up (node labels, ingress-nginx, HAMi, DCGM):
    /// reported, never a reason to refuse registration.
    pub prerequisites: Option<super::prereq::Prerequisites>,
}

impl ProbeOutcome {
    /// A probe that failed before talking to the cluster (bad kubeconfig, missing file).
    pub fn failed_early(stage: Stage, cause: String, hint: String, status: ClusterStatus) -> Self {
        // Stages before the failing one passed; the ones after it never ran.
        let failed_at = STAGES.iter().position(|s| *s == stage).unwrap_or(0);
        let checks = STAGES
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (ok, detail) = match i.cmp(&failed_at) {
                    std::cmp::Ordering::Less => (true, "ok".to_string()),
                    std::cmp::Ordering::Equal => (false, cause.clone()),
                    std::cmp::Ordering::Greater => (false, "not run".to_string()),
                };
                Check { name: s.as_str().into(), ok, detail }
            })
            .collect();
        Self {
            checks,
            failure: Some(ProbeError { stage, cause, hint }),
            missing: Vec::new(),
            status,
            kube_system_uid: None,
            version: None,
            latency_ms: 0,
            nodes: None,
            prerequisites: None,
        }
    }

    /// Registration needs every check to pass.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

struct Failure {
    stage: Stage,
    cause: String,
    hint: String,
}

/// Runs the network stages against `client`, bounded by `timeout` in total.
pub async fn probe(client: &kube::Client, server: &ServerAddr, timeout: Duration) -> ProbeOutcome {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut checks = vec![Check {
        name: Stage::Kubeconfig.as_str().into(),
        ok: true,
        detail: "parsed; credentials supported".into(),
    }];
    let mut missing = Vec::new();
    let mut failure: Option<Failure> = None;
    let mut uid = None;
    let mut version = None;
    let mut nodes = None;
    let mut prerequisites = None;
    let secs = timeout.as_secs_f32();

    macro_rules! within {
        ($stage:expr, $fut:expr) => {
            match tokio::time::timeout_at(deadline, $fut).await {
                Ok(v) => Ok(v),
                Err(_) => Err(Failure {
                    stage: $stage,
                    cause: format!("no answer within the {secs:.0} s probe limit"),
                    hint: "the API server is slow or a firewall drops packets; check it answers quickly from this host"
                        .into(),
                }),
            }
        };
    }

    // connect: DNS and TCP ourselves, so the cause is precise; TLS shows up on the first request.
    let connect = within!(Stage::Connect, tcp_connect(server));
    match connect {
        Ok(Ok(detail)) => checks.push(Check { name: Stage::Connect.as_str().into(), ok: true, detail }),
        Ok(Err(ConnectFailure { cause, mut hint, refused })) => {
            if server.is_loopback() {
                hint = if refused { loopback_refused_hint(server) } else { loopback_hint(server) };
            }
            failure = Some(Failure { stage: Stage::Connect, cause, hint });
        }
        Err(f) => failure = Some(f),
    }

    // auth: an authenticated read that also gives the cluster's identity.
    if failure.is_none() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        match within!(Stage::Auth, namespaces.get("kube-system")) {
            Ok(Ok(ns)) => {
                uid = ns.metadata.uid.clone();
                checks.push(Check {
                    name: Stage::Auth.as_str().into(),
                    ok: true,
                    detail: "credentials accepted".into(),
                });
            }
            Ok(Err(e)) => failure = Some(classify(Stage::Auth, &e, server)),
            Err(f) => failure = Some(f),
        }
        if failure.is_none() && uid.is_none() {
            failure = Some(Failure {
                stage: Stage::Auth,
                cause: "namespace kube-system has no uid".into(),
                hint: "this does not look like a Kubernetes API server".into(),
            });
        }
    }

    if failure.is_none() {
        let t = Instant::now();
        match within!(Stage::Version, client.apiserver_version()) {
            Ok(Ok(info)) => {
                let ms = t.elapsed().as_millis();
                checks.push(Check {
                    name: Stage::Version.as_str().into(),
                    ok: true,
                    detail: format!("{} ({ms} ms)", info.git_version),
                });
                version = Some(info.git_version);
            }
            Ok(Err(e)) => failure = Some(classify(Stage::Version, &e, server)),
            Err(f) => failure = Some(f),
        }
    }

    // runtime_class and hami both run, so `missing` lists everything a GPU cluster lacks at once.
    if failure.is_none() {
        let rcs: Api<RuntimeClass> = Api::all(client.clone());
        match within!(Stage::RuntimeClass, rcs.get_opt("nvidia")) {
            Ok(Ok(Some(rc))) => checks.push(Check {
                name: Stage::RuntimeClass.as_str().into(),
                ok: true,
                detail: format!("RuntimeClass nvidia (handler {})", rc.handler),
            }),
            Ok(Ok(None)) => {
                missing.push(MISSING_RUNTIME_CLASS.to_string());
                checks.push(Check {
                    name: Stage::RuntimeClass.as_str().into(),
                    ok: false,
                    detail: "RuntimeClass nvidia not found".into(),
                });
            }
            Ok(Err(e)) => {
                let f = classify(Stage::RuntimeClass, &e, server);
                checks.push(Check { name: Stage::RuntimeClass.as_str().into(), ok: false, detail: f.cause.clone() });
                failure = Some(f);
            }
            Err(f) => failure = Some(f),
        }
    }
    if uid.is_some() && failure.as_ref().is_none_or(|f| f.stage == Stage::RuntimeClass) {
        let api: Api<Node> = Api::all(client.clone());
        match within!(Stage::Hami, api.list(&ListParams::default())) {
            Ok(Ok(list)) => {
                let parsed: Vec<ProbedNode> = list.items.iter().map(read_node).collect();
                let hami_nodes = list.items.iter().filter(|n| has_hami(n)).count();
                if hami_nodes > 0 {
                    let gpus: usize = parsed.iter().map(|n| n.gpus.len()).sum();
                    checks.push(Check {
                        name: Stage::Hami.as_str().into(),
                        ok: true,
                        detail: format!("{hami_nodes} of {} nodes run HAMi; {gpus} GPUs", parsed.len()),
                    });
                } else {
                    missing.push(MISSING_HAMI.to_string());
                    checks.push(Check {
                        name: Stage::Hami.as_str().into(),
                        ok: false,
                        detail: format!("no node of {} advertises HAMi (hami.io/node-nvidia-register)", parsed.len()),
                    });
                }
                nodes = Some(parsed);
                // Bounded by the probe's deadline; a cluster too slow for it reports none.
                if let Ok(p) =
                    tokio::time::timeout_at(deadline, super::prereq::check_cluster(client, &list.items)).await
                {
                    prerequisites = Some(p);
                }
            }
            Ok(Err(e)) => {
                let f = classify(Stage::Hami, &e, server);
                checks.push(Check { name: Stage::Hami.as_str().into(), ok: false, detail: f.cause.clone() });
                failure.get_or_insert(f);
            }
            Err(f) => {
                failure.get_or_insert(f);
            }
        }
    }
    if failure.is_none() && !missing.is_empty() {
        let first = if missing.iter().any(|m| m == MISSING_RUNTIME_CLASS) { Stage::RuntimeClass } else { Stage::Hami };
        let (cause, hint) = missing_text(&missing);
        failure = Some(Failure { stage: first, cause, hint });
    }
    if let Some(f) = &failure {
        // Record the failing stage and mark the rest as not run.
        if !checks.iter().any(|c| c.name == f.stage.as_str()) {
            checks.push(Check { name: f.stage.as_str().into(), ok: false, detail: f.cause.clone() });
        }
    }
    for stage in STAGES {
        if !checks.iter().any(|c| c.name == stage.as_str()) {
            checks.push(Check { name: stage.as_str().into(), ok: false, detail: "not run".into() });
        }
    }
    let status = match &failure {
        Some(f) if f.stage.is_reachability() => ClusterStatus::Unreachable,
        Some(_) => ClusterStatus::Degraded,
        None if nodes.as_ref().is_some_and(|n| n.iter().any(|n| !n.ready)) => ClusterStatus::Degraded,
        None => ClusterStatus::Connected,
    };
    ProbeOutcome {
        checks,
        failure: failure.map(|f| ProbeError { stage: f.stage, cause: f.cause, hint: f.hint }),
        missing,
        status,
        kube_system_uid: uid,
        version,
        latency_ms: started.elapsed().as_millis() as u64,
        nodes,
        prerequisites,
    }
}

/// What a GPU cluster lacks, in words (the codes stay in `missing`): one cause, and a hint that
/// names only what is missing.
fn missing_text(missing: &[String]) -> (String, String) {
    let rc = missing.iter().any(|m| m == MISSING_RUNTIME_CLASS);
    let hami = missing.iter().any(|m| m == MISSING_HAMI);
    let cause = match (rc, hami) {
        (true, true) => "the cluster has no RuntimeClass named nvidia, and no node runs the HAMi device plugin",
        (true, false) => "the cluster has no RuntimeClass named nvidia",
        _ => "no node runs the HAMi device plugin",
    };
    let mut hints = Vec::new();
    if rc {
        hints.push(
            "create a RuntimeClass named nvidia with handler nvidia (the NVIDIA container toolkit or GPU operator \
             installs the handler on the GPU nodes)",
        );
    }
    if hami {
        hints.push(
            "install the HAMi device plugin on the GPU nodes (its nodes carry the hami.io/node-nvidia-register \
             annotation)",
        );
    }
    (cause.to_string(), format!("{}; then register again", hints.join("; ")))
}

fn loopback_hint(server: &ServerAddr) -> String {
    format!(
        "the kubeconfig points at {}, a loopback address: gshare must reach the API server over the network — \
         use the node's IP or DNS name (kubeadm's admin.conf often says 127.0.0.1), or fill in the API address \
         (api_server)",
        server.host
    )
}

/// A refused connection to a loopback address: the port is closed on this host.
fn loopback_refused_hint(server: &ServerAddr) -> String {
    format!(
        "nothing accepts connections on {}:{} on this control plane's host (connection refused): if the API \
         server runs here, check that it is up on that port; if it runs on another machine, {} means this host — \
         use that machine's IP or DNS name in the kubeconfig, or fill in the API address (api_server)",
        server.host, server.port, server.host
    )
}

struct ConnectFailure {
    cause: String,
    hint: String,
    /// The address answered with a refusal (nothing listens on the port).
    refused: bool,
}

async fn tcp_connect(server: &ServerAddr) -> Result<String, ConnectFailure> {
    let target = format!("{}:{}", server.host.trim_matches(|c| c == '[' || c == ']'), server.port);
    let addrs: Vec<_> = tokio::net::lookup_host(&target)
        .await
        .map_err(|e| ConnectFailure {
            cause: format!("cannot resolve {}: {e}", server.host),
            hint: "check the server name in the kubeconfig and this host's DNS".to_string(),
            refused: false,
        })?
        .collect();
    let mut last = None;
    for addr in &addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => return Ok(format!("TCP {addr} reachable")),
            Err(e) => last = Some((addr, e)),
        }
    }
    match last {
        Some((addr, e)) => Err(ConnectFailure {
            cause: format!("cannot connect to {addr}: {e}"),
            hint: "check that the API server is up and that firewalls allow this host to reach it".to_string(),
            refused: e.kind() == std::io::ErrorKind::ConnectionRefused,
        }),
        None => Err(ConnectFailure {
            cause: format!("{} resolves to no address", server.host),
            hint: "check DNS".to_string(),
            refused: false,
        }),
    }
}

/// Maps a client error to the stage that failed and a cause a person understands.
fn classify(stage: Stage, e: &kube::Error, server: &ServerAddr) -> Failure {
    if let kube::Error::Api(status) = e {
        return match status.code {
            401 => Failure {
                stage: Stage::Auth,
                cause: "the API server rejected the credentials (401 Unauthorized)".into(),
                hint: "the token or client certificate is wrong or expired; export a fresh kubeconfig".into(),
            },
            403 => Failure {
                stage,
                cause: format!("forbidden (403): {}", status.message),
                hint: "the user needs get on namespaces, nodes and runtimeclasses (cluster-admin or gShare's control-plane role)"
                    .into(),
            },
            code => Failure {
                stage,
                cause: format!("the API server answered {code}: {}", status.message),
                hint: String::new(),
            },
        };
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") || lower.contains("issuer")
    {
        return Failure {
            stage: Stage::Connect,
            cause: format!("TLS with {} failed: {}", server.host, shorten(&text)),
            hint: "certificate-authority-data must be the CA that signed the API server's certificate, and the server name must be in it".into(),
        };
    }
    let hint = if server.is_loopback() {
        loopback_hint(server)
    } else {
        "check that the API server is up and reachable from this host".into()
    };
    Failure { stage: Stage::Connect, cause: format!("cannot talk to the API server: {}", shorten(&text)), hint }
}

fn shorten(s: &str) -> String {
    s.chars().take(400).collect()
}

const HAMI_REGISTER: &str = "hami.io/node-nvidia-register";
const HAMI_HANDSHAKE: &str = "hami.io/node-handshake";

fn has_hami(node: &Node) -> bool {
    let annotations = node.metadata.annotations.as_ref();
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    annotations.is_some_and(|a| a.contains_key(HAMI_REGISTER) || a.contains_key(HAMI_HANDSHAKE))
        || allocatable.is_some_and(|a| a.contains_key("nvidia.com/gpumem"))
}

#[derive(Deserialize)]
struct HamiDevice {
    id: Option<String>,
    #[serde(default)]
    devmem: i64,
    #[serde(default)]
    devcore: i64,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default = "yes")]
    health: bool,
    #[serde(default)]
    mode: String,
}

fn yes() -> bool {
    true
}

fn quantity_f64(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<f64> {
    let s = q.0.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match unit {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some(n * mult)
}

/// Node facts as the operator reports them (§2.3, §6), read straight from the Node object.
pub fn read_node(node: &Node) -> ProbedNode {
    let name = node.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let schedulable = !node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let cpu = capacity.and_then(|c| c.get("cpu")).and_then(quantity_f64);
    let mem_gb = capacity.and_then(|c| c.get("memory")).and_then(quantity_f64).map(|b| b / 1024f64.powi(3));
    let label_mode = labels.get("gshare.io/gpu-mode").cloned().unwrap_or_else(|| "fractional".into());

    let mut gpus = Vec::new();
    if let Some(Ok(devices)) = annotations.get(HAMI_REGISTER).map(|raw| serde_json::from_str::<Vec<HamiDevice>>(raw)) {
        for d in devices {
            let Some(id) = d.id.filter(|id| !id.is_empty()) else { continue };
            if d.devmem <= 0 {
                continue;
            }
            let mode = if d.mode == "mig" { "mig".to_string() } else { label_mode.clone() };
            // HAMi prefixes the vendor to NVML's name ("NVIDIA-NVIDIA A100-…"); show the name once.
            let model = match d.kind.strip_prefix("NVIDIA-") {
                Some(rest) if rest.starts_with("NVIDIA") => rest.to_string(),
                _ => d.kind,
            };
            gpus.push(ProbedGpu {
                uuid: id,
                model,
                mode,
                memory_mb: d.devmem as u64,
                cores: d.devcore.clamp(0, 100) as u64,
                healthy: d.health,
            });
        }
    } else {
        // Fallback: capacity nvidia.com/gpu, gpumem split evenly, model from the GPU feature label.
        let count = capacity.and_then(|c| c.get("nvidia.com/gpu")).and_then(quantity_f64).unwrap_or(0.0) as u64;
        let gpumem = allocatable
            .and_then(|a| a.get("nvidia.com/gpumem"))
            .or_else(|| capacity.and_then(|c| c.get("nvidia.com/gpumem")))
            .and_then(quantity_f64)
            .unwrap_or(0.0) as u64;
        let model = labels.get("nvidia.com/gpu.product").cloned().unwrap_or_default();
        for i in 0..count.min(64) {
            gpus.push(ProbedGpu {
                uuid: format!("{name}-gpu-{i}"),
                model: model.clone(),
                mode: label_mode.clone(),
                memory_mb: gpumem.checked_div(count).unwrap_or(0),
                cores: 100,
                healthy: true,
            });
        }
    }
    let role = if labels.contains_key("node-role.kubernetes.io/control-plane")
        || labels.contains_key("node-role.kubernetes.io/master")
    {
        "master"
    } else if labels.get("gshare.io/role").is_some_and(|r| r == "storage") {
        "storage"
    } else if !gpus.is_empty() {
        "gpu"
    } else {
        "cpu"
    };
    ProbedNode { name, ready, schedulable, role: role.into(), cpu, mem_gb, gpus }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn reads_hami_annotation() {
        let n = node(serde_json::json!({
            "metadata": {"name": "gpu-1", "labels": {"gshare.io/gpu-mode": "exclusive"}, "annotations": {
                "hami.io/node-nvidia-register": "[{\"id\":\"GPU-a\",\"count\":10,\"devmem\":81920,\"devcore\":100,\"type\":\"NVIDIA-A100\",\"health\":true,\"mode\":\"hami-core\"},{\"id\":\"GPU-b\",\"devmem\":0},{\"devmem\":100},{\"id\":\"MIG-c\",\"devmem\":10240,\"health\":false,\"mode\":\"mig\",\"type\":\"A100-1g\"}]"
            }},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": {"cpu": "64", "memory": "512Gi"}}
        }));
        let p = read_node(&n);
        assert!(p.ready && !p.schedulable);
        assert_eq!(p.role, "gpu");
        assert_eq!(p.cpu, Some(64.0));
        assert_eq!(p.mem_gb, Some(512.0));
        assert_eq!(p.gpus.len(), 2);
        assert_eq!(p.gpus[0].uuid, "GPU-a");
        assert_eq!(p.gpus[0].mode, "exclusive");
        assert_eq!(p.gpus[0].memory_mb, 81920);
        assert_eq!(p.gpus[1].mode, "mig");
        assert!(!p.gpus[1].healthy);
        assert!(has_hami(&n));
    }

    #[test]
    fn falls_back_to_capacity() {
        let n = node(serde_json::json!({
            "metadata": {"name": "gpu-2", "labels": {"nvidia.com/gpu.product": "Tesla-T4"}, "annotations": {"hami.io/node-nvidia-register": "garbage"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}], "capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpumem": "30000"}}
        }));
        let p = read_node(&n);
        assert!(!p.ready);
        assert_eq!(p.gpus.len(), 2);
        assert_eq!(p.gpus[1].uuid, "gpu-2-gpu-1");
        assert_eq!(p.gpus[0].memory_mb, 15000);
        assert_eq!(p.gpus[0].model, "Tesla-T4");
        let plain = node(
            serde_json::json!({"metadata": {"name": "cp", "labels": {"node-role.kubernetes.io/control-plane": ""}}}),
        );
        assert_eq!(read_node(&plain).role, "master");
        assert!(!has_hami(&plain));
    }
}
