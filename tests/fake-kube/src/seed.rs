//! The objects a new fake cluster starts with: namespaces, GPU nodes, RuntimeClass `nvidia`.

use serde_json::{Value, json};

use crate::ClusterSpec;
use crate::util::{derived_uuid, now_rfc3339};

/// The uuid HAMi reports for GPU `index` of `node` in the cluster whose kube-system uid is
/// `cluster_uid`: `GPU-<uuid>`, stable for the same inputs.
pub fn gpu_uuid(cluster_uid: &str, node: &str, index: usize) -> String {
    format!("GPU-{}", derived_uuid(&format!("{cluster_uid}/{node}/{index}")))
}

pub fn node_name(spec: &ClusterSpec, index: usize) -> String {
    format!("{}{index}", spec.node_prefix)
}

pub(crate) fn namespace(name: &str, uid: Option<&str>) -> Value {
    let mut ns = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    if let Some(uid) = uid {
        ns["metadata"]["uid"] = json!(uid);
    }
    ns
}

pub(crate) fn service_account(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": name, "namespace": ns}})
}

/// HAMi's `hami.io/node-nvidia-register` value for one node.
pub(crate) fn hami_register(spec: &ClusterSpec, cluster_uid: &str, node: &str) -> String {
    let devices: Vec<Value> = (0..spec.gpus_per_node)
        .map(|i| {
            json!({
                "id": gpu_uuid(cluster_uid, node, i),
                "count": 10,
                "devmem": spec.gpu_mem_mb,
                "devcore": 100,
                "type": format!("NVIDIA-{}", spec.gpu_model),
                "health": true,
                "mode": "hami-core",
            })
        })
        .collect();
    Value::Array(devices).to_string()
}

pub(crate) fn node(spec: &ClusterSpec, cluster_uid: &str, index: usize) -> Value {
    let name = node_name(spec, index);
    let now = now_rfc3339();
    let gpus = spec.gpus_per_node.to_string();
    let gpumem = (spec.gpu_mem_mb * spec.gpus_per_node as u64).to_string();
    let octet = match spec.bind {
        std::net::IpAddr::V4(v4) => v4.octets()[3],
        std::net::IpAddr::V6(_) => 1,
    };
    let mut annotations = json!({
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    });
    if spec.hami {
        annotations["hami.io/node-nvidia-register"] = json!(hami_register(spec, cluster_uid, &name));
        annotations["hami.io/node-handshake"] =
            json!(format!("Reported {}", now.replace('T', " ").replace('Z', " +0000 UTC")));
    }
    let condition = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = |cpu: &str, memory: &str| {
        let mut r = json!({
            "cpu": cpu, "memory": memory, "pods": "110",
            "ephemeral-storage": "1921208588Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
            "nvidia.com/gpu": gpus,
        });
        // Only a HAMi node advertises the gpumem extended resource.
        if spec.hami {
            r["nvidia.com/gpumem"] = json!(gpumem);
        }
        r
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": derived_uuid(&format!("{cluster_uid}/node/{name}")),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "gshare.io/gpu": "true",
                "gshare.io/gpu-mode": "fractional",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": spec.gpu_model.replace(' ', "-"),
                "nvidia.com/gpu.count": gpus,
                "nvidia.com/gpu.memory": spec.gpu_mem_mb.to_string(),
            },
            "annotations": annotations,
        },
        "spec": {
            "podCIDR": format!("10.244.{index}.0/24"),
            "podCIDRs": [format!("10.244.{index}.0/24")],
        },
        "status": {
            "capacity": resources("64", "528291688Ki"),
            "allocatable": resources("63900m", "523048808Ki"),
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": format!("10.{octet}.0.{}", 10 + index)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": derived_uuid(&format!("{cluster_uid}/machine/{name}")).replace('-', ""),
                "systemUUID": derived_uuid(&format!("{cluster_uid}/system/{name}")),
                "bootID": derived_uuid(&format!("{cluster_uid}/boot/{name}")),
                "kernelVersion": "6.8.0-60-generic",
                "osImage": "Ubuntu 24.04.2 LTS",
                "containerRuntimeVersion": "containerd://1.7.27",
                "kubeletVersion": crate::discovery::KUBE_VERSION,
                "kubeProxyVersion": crate::discovery::KUBE_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

pub(crate) fn runtime_class_nvidia() -> Value {
    json!({
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    })
}

pub(crate) fn cluster_admin() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "cluster-admin",
                     "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    })
}
