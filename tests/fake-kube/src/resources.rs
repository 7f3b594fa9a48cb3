//! The kinds of objects the fake serves: built-in types and those defined by CRDs created in it.

use serde_json::{Value, json};

/// One served (group, version, resource).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    /// Defined by a CustomResourceDefinition (no strategic merge patch, stricter updates).
    pub custom: bool,
    /// Only `create` is served (reviews such as SelfSubjectAccessReview).
    pub create_only: bool,
    /// `metadata.generation` is kept and bumped on spec changes.
    pub has_generation: bool,
    /// From a CRD's `additionalPrinterColumns`: (name, type, jsonPath, priority). kubectl shows
    /// priority-0 columns, and the others only with `-o wide`.
    pub printer_columns: Vec<(String, String, String, i64)>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `nodes` or `gsharesessions.gshare.io`, as in the real server's messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            vec!["create"]
        } else {
            vec!["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        }
    }
}

struct Builtin {
    gv: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
}

const fn b(
    gv: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
) -> Builtin {
    Builtin { gv, plural, singular, kind, namespaced, short, status }
}

const BUILTINS: &[Builtin] = &[
    b("v1", "namespaces", "namespace", "Namespace", false, &["ns"], true),
    b("v1", "nodes", "node", "Node", false, &["no"], true),
    b("v1", "secrets", "secret", "Secret", true, &[], false),
    b("v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, &["sa"], false),
    b("v1", "configmaps", "configmap", "ConfigMap", true, &["cm"], false),
    b("v1", "pods", "pod", "Pod", true, &["po"], true),
    b("v1", "services", "service", "Service", true, &["svc"], true),
    b("v1", "events", "event", "Event", true, &["ev"], false),
    b("v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true, &["pvc"], true),
    b("apps/v1", "deployments", "deployment", "Deployment", true, &["deploy"], true),
    b("apps/v1", "daemonsets", "daemonset", "DaemonSet", true, &["ds"], true),
    b("apps/v1", "statefulsets", "statefulset", "StatefulSet", true, &["sts"], true),
    b("apps/v1", "replicasets", "replicaset", "ReplicaSet", true, &["rs"], true),
    b("rbac.authorization.k8s.io/v1", "roles", "role", "Role", true, &[], false),
    b("rbac.authorization.k8s.io/v1", "rolebindings", "rolebinding", "RoleBinding", true, &[], false),
    b("rbac.authorization.k8s.io/v1", "clusterroles", "clusterrole", "ClusterRole", false, &[], false),
    b(
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    b("node.k8s.io/v1", "runtimeclasses", "runtimeclass", "RuntimeClass", false, &[], false),
    b("networking.k8s.io/v1", "ingressclasses", "ingressclass", "IngressClass", false, &[], false),
    b("networking.k8s.io/v1", "ingresses", "ingress", "Ingress", true, &["ing"], true),
    b("storage.k8s.io/v1", "storageclasses", "storageclass", "StorageClass", false, &["sc"], false),
    b("coordination.k8s.io/v1", "leases", "lease", "Lease", true, &[], false),
    b(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    ),
];

pub(crate) fn builtins() -> Vec<ResourceType> {
    let mut out: Vec<ResourceType> = BUILTINS
        .iter()
        .map(|bi| {
            let (group, version) = match bi.gv.split_once('/') {
                Some((g, v)) => (g, v),
                None => ("", bi.gv),
            };
            ResourceType {
                group: group.into(),
                version: version.into(),
                plural: bi.plural.into(),
                singular: bi.singular.into(),
                kind: bi.kind.into(),
                namespaced: bi.namespaced,
                short_names: bi.short.iter().map(|s| s.to_string()).collect(),
                categories: Vec::new(),
                status_subresource: bi.status,
                custom: false,
                create_only: false,
                has_generation: !group.is_empty(),
                printer_columns: Vec::new(),
            }
        })
        .collect();
    out.push(ResourceType {
        group: "authorization.k8s.io".into(),
        version: "v1".into(),
        plural: "selfsubjectaccessreviews".into(),
        singular: "selfsubjectaccessreview".into(),
        kind: "SelfSubjectAccessReview".into(),
        namespaced: false,
        short_names: Vec::new(),
        categories: Vec::new(),
        status_subresource: false,
        custom: false,
        create_only: true,
        has_generation: false,
        printer_columns: Vec::new(),
    });
    out.push(ResourceType {
        group: "authorization.k8s.io".into(),
        version: "v1".into(),
        plural: "selfsubjectrulesreviews".into(),
        singular: "selfsubjectrulesreview".into(),
        kind: "SelfSubjectRulesReview".into(),
        namespaced: false,
        short_names: Vec::new(),
        categories: Vec::new(),
        status_subresource: false,
        custom: false,
        create_only: true,
        has_generation: false,
        printer_columns: Vec::new(),
    });
    out
}

/// The resource types a CRD object defines (one per served version); empty if it is malformed.
pub(crate) fn from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let (Some(group), Some(plural), Some(kind)) =
        (spec["group"].as_str(), spec["names"]["plural"].as_str(), spec["names"]["kind"].as_str())
    else {
        return Vec::new();
    };
    let singular = spec["names"]["singular"].as_str().map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let short_names = strings(&spec["names"]["shortNames"]);
    let categories = strings(&spec["names"]["categories"]);
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    spec["versions"]
        .as_array()
        .map(|vs| vs.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            let printer_columns = v["additionalPrinterColumns"]
                .as_array()
                .map(|cols| {
                    cols.iter()
                        .filter_map(|c| {
                            Some((
                                c["name"].as_str()?.to_string(),
                                c["type"].as_str().unwrap_or("string").to_string(),
                                c["jsonPath"].as_str()?.to_string(),
                                c["priority"].as_i64().unwrap_or(0),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(ResourceType {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: singular.clone(),
                kind: kind.into(),
                namespaced,
                short_names: short_names.clone(),
                categories: categories.clone(),
                status_subresource: v["subresources"]["status"].is_object(),
                custom: true,
                create_only: false,
                has_generation: true,
                printer_columns,
            })
        })
        .collect()
}

/// What a real server writes into a new CRD's status.
pub(crate) fn crd_status(crd: &Value, now: &str) -> Value {
    let names = crd["spec"]["names"].clone();
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| vs.iter().filter(|v| v["storage"].as_bool() == Some(true)).map(|v| v["name"].clone()).collect())
        .unwrap_or_default();
    json!({
        "acceptedNames": names,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    })
}
