//! The Kubernetes objects gShare reads (probe, prerequisites, the operator's pods), with only the
//! fields it reads. `k8s-openapi`'s full types decode every field of a Node or a Pod (a PodSpec
//! alone is dozens of nested types); these decode what the code looks at and skip the rest, as
//! the full types skip fields they do not know. Issue "Edge footprint": the full types' decoders
//! were most of `k8s_openapi`'s share of the binary, and a 5,000-node list is decoded whole.
//!
//! Names, field names and optionality follow the API (Kubernetes 1.37, as `k8s-openapi`'s
//! `latest`), so the code reads them as it read the full types. Each type is a
//! [`k8s_openapi::Resource`] and so a [`kube::Resource`]: `Api<Node>` works as before.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::Deserialize;

/// `impl k8s_openapi::Resource + Metadata` for a type with a `metadata: ObjectMeta` field.
macro_rules! resource {
    ($ty:ident, group $group:literal, version $version:literal, plural $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = if $group.is_empty() { $version } else { concat!($group, "/", $version) };
            const GROUP: &'static str = $group;
            const KIND: &'static str = stringify!($ty);
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }
        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// `v1` Namespace: its metadata (the `kube-system` UID is the cluster's identity).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Namespace {
    #[serde(default)]
    pub metadata: ObjectMeta,
}
resource!(Namespace, group "", version "v1", plural "namespaces", ClusterResourceScope);

/// `node.k8s.io/v1` RuntimeClass.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RuntimeClass {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub handler: String,
}
resource!(RuntimeClass, group "node.k8s.io", version "v1", plural "runtimeclasses", ClusterResourceScope);

/// `networking.k8s.io/v1` IngressClass: only whether it exists is read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IngressClass {
    #[serde(default)]
    pub metadata: ObjectMeta,
}
resource!(IngressClass, group "networking.k8s.io", version "v1", plural "ingressclasses", ClusterResourceScope);

/// `v1` ConfigMap: its string data.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ConfigMap {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub data: Option<BTreeMap<String, String>>,
}
resource!(ConfigMap, group "", version "v1", plural "configmaps", NamespaceResourceScope);

/// `v1` Service: its ports.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Service {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<ServiceSpec>,
}
resource!(Service, group "", version "v1", plural "services", NamespaceResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceSpec {
    pub ports: Option<Vec<ServicePort>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    pub name: Option<String>,
    #[serde(default)]
    pub port: i32,
    pub node_port: Option<i32>,
}

/// `v1` Node: schedulability, conditions, addresses, capacity and allocatable.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<NodeSpec>,
    pub status: Option<NodeStatus>,
}
resource!(Node, group "", version "v1", plural "nodes", ClusterResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeSpec {
    pub unschedulable: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeStatus {
    pub addresses: Option<Vec<NodeAddress>>,
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    pub capacity: Option<BTreeMap<String, Quantity>>,
    pub conditions: Option<Vec<Condition>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeAddress {
    #[serde(default)]
    pub address: String,
    #[serde(rename = "type", default)]
    pub type_: String,
}

/// A Node's or a Pod's condition (`status` is `"True"`, `"False"` or `"Unknown"`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// `v1` Pod: where it runs and its status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<PodSpec>,
    pub status: Option<PodStatus>,
}
resource!(Pod, group "", version "v1", plural "pods", NamespaceResourceScope);
// `Api<Pod>::log_stream` is for pods only.
impl kube::api::Log for Pod {}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub node_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<Container>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Container {
    #[serde(default)]
    pub name: String,
    pub image: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    pub phase: Option<String>,
    pub conditions: Option<Vec<Condition>>,
    pub container_statuses: Option<Vec<ContainerStatus>>,
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    pub state: Option<ContainerStateOf>,
    pub last_state: Option<ContainerStateOf>,
}

/// `ContainerState`: at most one of its members is set (running is the absence of the others here).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerStateOf {
    pub waiting: Option<ContainerStateWaiting>,
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerStateWaiting {
    pub reason: Option<String>,
    pub message: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    #[serde(default)]
    pub exit_code: i32,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub finished_at: Option<Time>,
}

/// `apps/v1` Deployment: replicas, its pod template's image, status and conditions.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Deployment {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: DeploymentSpec,
    pub status: Option<DeploymentStatus>,
}
resource!(Deployment, group "apps", version "v1", plural "deployments", NamespaceResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
pub struct DeploymentSpec {
    pub replicas: Option<i32>,
    #[serde(default)]
    pub template: PodTemplateSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodTemplateSpec {
    pub spec: Option<PodSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    pub ready_replicas: Option<i32>,
    pub available_replicas: Option<i32>,
    pub conditions: Option<Vec<DeploymentCondition>>,
}

/// A Deployment's condition (its `type` and `status` are read as optional, as before).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct DeploymentCondition {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub status: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// `v1` Event (core, as `kubectl get events` reads them).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub involved_object: ObjectReference,
    #[serde(rename = "type")]
    pub type_: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub count: Option<i32>,
    pub last_timestamp: Option<Time>,
    pub event_time: Option<MicroTime>,
}
resource!(Event, group "", version "v1", plural "events", NamespaceResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ObjectReference {
    pub kind: Option<String>,
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn urls_and_api_versions_are_the_apis() {
        assert_eq!(Node::url_path(&(), None), "/api/v1/nodes");
        assert_eq!(Pod::url_path(&(), Some("gshare-system")), "/api/v1/namespaces/gshare-system/pods");
        assert_eq!(Deployment::url_path(&(), Some("ns")), "/apis/apps/v1/namespaces/ns/deployments");
        assert_eq!(RuntimeClass::url_path(&(), None), "/apis/node.k8s.io/v1/runtimeclasses");
        assert_eq!(IngressClass::url_path(&(), None), "/apis/networking.k8s.io/v1/ingressclasses");
        assert_eq!(<Event as k8s_openapi::Resource>::API_VERSION, "v1");
        assert_eq!(<Deployment as k8s_openapi::Resource>::API_VERSION, "apps/v1");
        assert_eq!(<RuntimeClass as k8s_openapi::Resource>::API_VERSION, "node.k8s.io/v1");
        // The full types name the same paths.
        assert_eq!(Service::url_path(&(), Some("a")), k8s_openapi::api::core::v1::Service::url_path(&(), Some("a")));
        assert_eq!(
            ConfigMap::url_path(&(), Some("a")),
            k8s_openapi::api::core::v1::ConfigMap::url_path(&(), Some("a"))
        );
        assert_eq!(Namespace::url_path(&(), None), k8s_openapi::api::core::v1::Namespace::url_path(&(), None));
        assert_eq!(Event::url_path(&(), Some("a")), k8s_openapi::api::core::v1::Event::url_path(&(), Some("a")));
    }

    /// A Pod as the API server sends it, fields we do not read included, decodes to what we read.
    #[test]
    fn a_full_pod_decodes_to_the_fields_read() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "op-1", "namespace": "gshare-system", "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "manager", "image": "boanlab/gshare-operator:v1",
                "args": ["--x"], "resources": {"limits": {"cpu": "1"}}}], "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "manager", "image": "boanlab/gshare-operator:v1", "imageID": "x",
                    "ready": false, "restartCount": 3, "started": false,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "finishedAt": "2026-12-01T10:01:00Z"}}}]}
        }))
        .unwrap();
        assert_eq!(p.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
        let cs = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!((cs.restart_count, cs.ready), (3, false));
        assert_eq!(cs.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
        let t = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (2, Some("Error")));
        assert!(t.finished_at.is_some());
        // A wrong type where a field is read is an error, as with the full type.
        let bad = serde_json::json!({"status": {"phase": 3}});
        assert!(serde_json::from_value::<Pod>(bad.clone()).is_err());
        assert!(serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(bad).is_err());
    }
}
