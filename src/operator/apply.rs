//! Putting objects on a cluster and taking them off: server-side apply with field manager
//! `gshare`, an access preflight (SelfSubjectAccessReview) so missing rights are found before
//! anything is written, and the CRD version check.

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::crds;
use super::manifests::{FIELD_MANAGER, describe};

/// What happened to one object.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct ObjectResult {
    /// `Kind/name` or `Kind/namespace/name`.
    pub object: String,
    /// `created`, `updated`, `unchanged`, `deleted`, `absent`, `kept` (detach: not made by
    /// attach), `conflict` (a CRD at another version, left alone), `failed`, `not_attempted`.
    pub result: String,
    /// The API server's HTTP status on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ObjectResult {
    fn new(o: &Value, result: &str) -> Self {
        Self { object: describe(o), result: result.into(), status: None, reason: None, message: None }
    }
}

/// How applying one object went wrong.
#[derive(Debug, Clone)]
pub enum ApplyFailure {
    /// The API server answered with an error status.
    Refused { code: u16, reason: String, message: String },
    /// No answer (connection, TLS, timeout).
    Unreachable(String),
}

impl ApplyFailure {
    fn from_kube(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self::Refused { code: s.code, reason: s.reason.clone(), message: s.message.clone() },
            other => Self::Unreachable(other.to_string()),
        }
    }

    pub fn result_for(&self, o: &Value) -> ObjectResult {
        let mut r = ObjectResult::new(o, "failed");
        match self {
            Self::Refused { code, reason, message } => {
                r.status = Some(*code);
                r.reason = Some(reason.clone());
                r.message = Some(message.clone());
            }
            Self::Unreachable(cause) => {
                r.reason = Some("Unreachable".into());
                r.message = Some(cause.clone());
            }
        }
        r
    }
}

/// `ApiResource` of an object we ship (the kinds are fixed, so no discovery round trip).
pub fn api_resource(o: &Value) -> Option<ApiResource> {
    let api_version = o["apiVersion"].as_str()?;
    let kind = o["kind"].as_str()?;
    let plural = match kind {
        "CustomResourceDefinition" => "customresourcedefinitions",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "Secret" => "secrets",
        "Deployment" => "deployments",
        _ => return None,
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural))
}

fn api_for(client: &kube::Client, o: &Value) -> Option<(Api<DynamicObject>, String)> {
    let ar = api_resource(o)?;
    let name = o["metadata"]["name"].as_str()?.to_string();
    let api = match o["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    Some((api, name))
}

/// Reads the object as it is on the cluster (`None`: absent).
pub async fn get(client: &kube::Client, o: &Value) -> Result<Option<DynamicObject>, ApplyFailure> {
    let Some((api, name)) = api_for(client, o) else {
        return Err(ApplyFailure::Refused { code: 0, reason: "UnknownKind".into(), message: describe(o) });
    };
    api.get_opt(&name).await.map_err(ApplyFailure::from_kube)
}

/// Server-side apply of one object (field manager `gshare`, forced: these objects are ours).
/// Returns `created`, `updated` or `unchanged`, judged by the resourceVersion before and after.
pub async fn apply(client: &kube::Client, o: &Value) -> Result<&'static str, ApplyFailure> {
    let Some((api, name)) = api_for(client, o) else {
        return Err(ApplyFailure::Refused { code: 0, reason: "UnknownKind".into(), message: describe(o) });
    };
    let before = api.get_opt(&name).await.map_err(ApplyFailure::from_kube)?;
    let after = api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(o))
        .await
        .map_err(ApplyFailure::from_kube)?;
    Ok(match before {
        None => "created",
        Some(b) if b.metadata.resource_version == after.metadata.resource_version => "unchanged",
        Some(_) => "updated",
    })
}

/// Deletes one object; `deleted` or `absent`.
pub async fn delete(client: &kube::Client, o: &Value) -> Result<&'static str, ApplyFailure> {
    let Some((api, name)) = api_for(client, o) else {
        return Err(ApplyFailure::Refused { code: 0, reason: "UnknownKind".into(), message: describe(o) });
    };
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => Ok("deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok("absent"),
        Err(e) => Err(ApplyFailure::from_kube(e)),
    }
}

/// A verb the cluster's credentials lack, and the objects that need it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Denied {
    pub verb: String,
    /// `clusterroles.rbac.authorization.k8s.io`.
    pub resource: String,
    pub namespace: Option<String>,
    pub objects: Vec<String>,
}

/// Asks the cluster whether its credentials may create and patch every object (server-side
/// apply needs both). A cluster that cannot answer (no SelfSubjectAccessReview) is let through:
/// the apply itself then reports any refusal.
pub async fn preflight(client: &kube::Client, objects: &[Value]) -> Result<Vec<Denied>, ApplyFailure> {
    let mut wanted: BTreeMap<(String, String, Option<String>), Vec<String>> = BTreeMap::new();
    for o in objects {
        let Some(ar) = api_resource(o) else { continue };
        let ns = o["metadata"]["namespace"].as_str().map(str::to_string);
        wanted.entry((ar.group.clone(), ar.plural.clone(), ns)).or_default().push(describe(o));
    }
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for ((group, plural, ns), objs) in wanted {
        for verb in ["create", "patch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(group.clone()),
                        resource: Some(plural.clone()),
                        verb: Some(verb.into()),
                        namespace: ns.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = match api.create(&PostParams::default(), &review).await {
                Ok(a) => a,
                Err(kube::Error::Api(s)) if (403..=405).contains(&s.code) => return Ok(Vec::new()),
                Err(e) => return Err(ApplyFailure::from_kube(e)),
            };
            if !answer.status.is_some_and(|s| s.allowed) {
                let resource = if group.is_empty() { plural.clone() } else { format!("{plural}.{group}") };
                denied.push(Denied { verb: verb.into(), resource, namespace: ns.clone(), objects: objs.clone() });
            }
        }
    }
    Ok(denied)
}

/// A CRD on the cluster whose versions or schemas differ from the one we ship.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CrdDifference {
    pub name: String,
    /// Versions served on the cluster.
    pub cluster_versions: Vec<String>,
    pub shipped_versions: Vec<String>,
    /// The cluster's `controller-gen.kubebuilder.io/version` annotation, if any.
    pub cluster_generator: Option<String>,
    pub detail: String,
}

/// Compares the CRDs on the cluster with ours.
pub async fn crd_differences(client: &kube::Client) -> Result<Vec<CrdDifference>, ApplyFailure> {
    let mut out = Vec::new();
    for f in crds::ALL {
        let ours = f.object();
        let Some(theirs) = get(client, &ours).await? else { continue };
        let theirs = serde_json::to_value(&theirs).unwrap_or(Value::Null);
        let (a, b) = (crds::versions_signature(&theirs), crds::versions_signature(&ours));
        if a == b {
            continue;
        }
        let names = |s: &[(String, Value)]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        let detail = if names(&a) != names(&b) {
            format!("the cluster serves versions {:?}; gShare ships {:?}", names(&a), names(&b))
        } else {
            "same versions, different schema".to_string()
        };
        out.push(CrdDifference {
            name: f.name.to_string(),
            cluster_versions: names(&a),
            shipped_versions: names(&b),
            cluster_generator: theirs["metadata"]["annotations"]["controller-gen.kubebuilder.io/version"]
                .as_str()
                .map(str::to_string),
            detail,
        });
    }
    Ok(out)
}
