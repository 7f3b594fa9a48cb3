//! Putting objects on a cluster and taking them off: server-side apply with field manager
//! `gshare`, an access preflight (SelfSubjectAccessReview for every verb apply uses, and the
//! RBAC escalation and bind checks) so missing rights are found before anything is written, and
//! the CRD version check.

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
    /// `created`, `updated`, `unchanged`, `replaced`, `deleted`, `terminating` (deleted, kept
    /// by the server while finalizers run), `absent`, `kept` (detach: not made by attach, or
    /// CRDs whose resources remain elsewhere), `conflict` (a CRD at another version, left alone), `failed`, `not_attempted`.
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
        "ConfigMap" => "configmaps",
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

/// Deletes one object: `deleted`, `absent`, or `terminating` (the server keeps it while its
/// finalizers run: a namespace while its content goes).
pub async fn delete(client: &kube::Client, o: &Value) -> Result<&'static str, ApplyFailure> {
    let Some((api, name)) = api_for(client, o) else {
        return Err(ApplyFailure::Refused { code: 0, reason: "UnknownKind".into(), message: describe(o) });
    };
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(answer) if answer.as_ref().left().is_some_and(|kept| kept.metadata.deletion_timestamp.is_some()) => {
            // Kept while its finalizers run: gone already (an empty namespace may be) or not.
            match api.get_opt(&name).await {
                Ok(None) => Ok("deleted"),
                _ => Ok("terminating"),
            }
        }
        Ok(_) => Ok("deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok("absent"),
        // A namespace already Terminating refuses a second DELETE with 409 Conflict.
        Err(kube::Error::Api(s)) if s.code == 409 && o["kind"] == "Namespace" => Ok("terminating"),
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
    /// For `escalate` and `bind`: the rights the Role grants that the credentials do not hold
    /// (`list pods`, `get secrets.`…), so the API server would refuse the grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

type Attr = (String, String, String, Option<String>, Option<String>);

/// Asks the cluster (SelfSubjectAccessReview) once per distinct right.
struct Reviews {
    api: Api<SelfSubjectAccessReview>,
    seen: BTreeMap<Attr, bool>,
}

enum Review {
    Answer(bool),
    /// The cluster cannot answer reviews (403/404/405 on the review itself).
    Unavailable,
}

impl Reviews {
    async fn allowed(
        &mut self,
        group: &str,
        resource: &str,
        verb: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> Result<Review, ApplyFailure> {
        let key = (
            group.to_string(),
            resource.to_string(),
            verb.to_string(),
            ns.map(str::to_string),
            name.map(str::to_string),
        );
        if let Some(a) = self.seen.get(&key) {
            return Ok(Review::Answer(*a));
        }
        let (resource_only, sub) = match resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (resource.to_string(), None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.into()),
                    resource: Some(resource_only),
                    subresource: sub,
                    verb: Some(verb.into()),
                    namespace: ns.map(str::to_string),
                    name: name.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = match self.api.create(&PostParams::default(), &review).await {
            Ok(a) => a.status.is_some_and(|s| s.allowed),
            Err(kube::Error::Api(s)) if (403..=405).contains(&s.code) => return Ok(Review::Unavailable),
            Err(e) => return Err(ApplyFailure::from_kube(e)),
        };
        self.seen.insert(key, answer);
        Ok(Review::Answer(answer))
    }

    /// The rights among `rules` the credentials do not hold in `ns` (`None`: cluster scope).
    async fn not_held(&mut self, rules: &[Value], ns: Option<&str>) -> Result<Option<Vec<String>>, ApplyFailure> {
        let mut out = Vec::new();
        for rule in rules {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                    .unwrap_or_default()
            };
            for g in list("apiGroups") {
                for r in list("resources") {
                    for v in list("verbs") {
                        match self.allowed(&g, &r, &v, ns, None).await? {
                            Review::Unavailable => return Ok(None),
                            Review::Answer(true) => {}
                            Review::Answer(false) => out
                                .push(format!("{v} {r}{}", if g.is_empty() { String::new() } else { format!(".{g}") })),
                        }
                    }
                }
            }
        }
        Ok(Some(out))
    }
}

/// One access review: may the credentials do `verb` on `resource`? A cluster that cannot answer
/// reviews counts as yes (the write itself then reports a refusal).
pub async fn may(
    client: &kube::Client,
    group: &str,
    resource: &str,
    verb: &str,
    ns: Option<&str>,
) -> Result<bool, ApplyFailure> {
    let mut reviews = Reviews { api: Api::all(client.clone()), seen: BTreeMap::new() };
    Ok(match reviews.allowed(group, resource, verb, ns, None).await? {
        Review::Answer(a) => a,
        Review::Unavailable => true,
    })
}

/// Asks the cluster whether its credentials may do everything attach does, before anything is
/// written: `get`, `create` and `patch` on every object (server-side apply reads, creates and
/// patches; `delete` too when `replace`), and for each Role and ClusterRole the right to grant
/// its rules (`escalate`, else holding every right it grants), for each binding the right to
/// bind its role (`bind`, else holding the role's rights) — what the API server's RBAC storage
/// checks. A cluster that cannot answer reviews is let through: the apply then reports refusals.
pub async fn preflight(client: &kube::Client, objects: &[Value], replace: bool) -> Result<Vec<Denied>, ApplyFailure> {
    let mut wanted: BTreeMap<(String, String, Option<String>), Vec<String>> = BTreeMap::new();
    for o in objects {
        let Some(ar) = api_resource(o) else { continue };
        let ns = o["metadata"]["namespace"].as_str().map(str::to_string);
        wanted.entry((ar.group.clone(), ar.plural.clone(), ns)).or_default().push(describe(o));
    }
    let mut reviews = Reviews { api: Api::all(client.clone()), seen: BTreeMap::new() };
    let mut denied = Vec::new();
    let qualified = |group: &str, plural: &str| {
        if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }
    };
    for ((group, plural, ns), objs) in &wanted {
        let mut verbs = vec!["get", "create", "patch"];
        if replace
            && matches!(
                plural.as_str(),
                "deployments" | "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
            )
        {
            verbs.push("delete");
        }
        for verb in verbs {
            match reviews.allowed(group, plural, verb, ns.as_deref(), None).await? {
                Review::Unavailable => return Ok(Vec::new()),
                Review::Answer(true) => {}
                Review::Answer(false) => denied.push(Denied {
                    verb: verb.into(),
                    resource: qualified(group, plural),
                    namespace: ns.clone(),
                    objects: objs.clone(),
                    missing: Vec::new(),
                }),
            }
        }
    }
    const RBAC: &str = "rbac.authorization.k8s.io";
    let role_rules = |kind: &str, name: &str, ns: Option<&str>| -> Vec<Value> {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name && o["metadata"]["namespace"].as_str() == ns)
            .and_then(|o| o["rules"].as_array().cloned())
            .unwrap_or_default()
    };
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let ns = o["metadata"]["namespace"].as_str();
        let (verb, plural, rules) = match kind {
            "Role" | "ClusterRole" => {
                ("escalate", if kind == "Role" { "roles" } else { "clusterroles" }, role_rules(kind, name, ns))
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let role_kind = o["roleRef"]["kind"].as_str().unwrap_or_default();
                let role_name = o["roleRef"]["name"].as_str().unwrap_or_default();
                let role_ns = if role_kind == "Role" { ns } else { None };
                (
                    "bind",
                    if role_kind == "Role" { "roles" } else { "clusterroles" },
                    role_rules(role_kind, role_name, role_ns),
                )
            }
            _ => continue,
        };
        let target = if verb == "bind" { o["roleRef"]["name"].as_str() } else { Some(name) };
        match reviews.allowed(RBAC, plural, verb, ns, target).await? {
            Review::Unavailable => return Ok(Vec::new()),
            Review::Answer(true) => continue,
            Review::Answer(false) => {}
        }
        let Some(missing) = reviews.not_held(&rules, ns).await? else { return Ok(Vec::new()) };
        if !missing.is_empty() {
            denied.push(Denied {
                verb: verb.into(),
                resource: qualified(RBAC, plural),
                namespace: ns.map(str::to_string),
                objects: vec![describe(o)],
                missing,
            });
        }
    }
    Ok(denied)
}

/// Asks the cluster whether its credentials may do everything detach does, before anything is
/// deleted: `delete` on every object in `objects` and on each custom resource in `custom`
/// (and `patch` on those when `strip`: their finalizers are removed first). A cluster that
/// cannot answer reviews is let through: the deletes then report refusals.
pub async fn preflight_delete(
    client: &kube::Client,
    objects: &[Value],
    custom: &[CustomResource],
    strip: bool,
) -> Result<Vec<Denied>, ApplyFailure> {
    let mut wanted: BTreeMap<(String, String, Option<String>, &'static str), Vec<String>> = BTreeMap::new();
    for o in objects {
        let Some(ar) = api_resource(o) else { continue };
        let ns = o["metadata"]["namespace"].as_str().map(str::to_string);
        wanted.entry((ar.group.clone(), ar.plural.clone(), ns, "delete")).or_default().push(describe(o));
    }
    for cr in custom {
        let Some(ar) = custom_resource_type(&cr.object) else { continue };
        let ns = cr.object["metadata"]["namespace"].as_str().map(str::to_string);
        let verbs: &[&'static str] =
            if strip && !cr.finalizers.is_empty() { &["patch", "delete"] } else { &["delete"] };
        for verb in verbs {
            wanted.entry((ar.group.clone(), ar.plural.clone(), ns.clone(), verb)).or_default().push(cr.describe());
        }
    }
    let mut reviews = Reviews { api: Api::all(client.clone()), seen: BTreeMap::new() };
    let mut denied = Vec::new();
    for ((group, plural, ns, verb), objs) in wanted {
        match reviews.allowed(&group, &plural, verb, ns.as_deref(), None).await? {
            Review::Unavailable => return Ok(Vec::new()),
            Review::Answer(true) => {}
            Review::Answer(false) => denied.push(Denied {
                verb: verb.into(),
                resource: if group.is_empty() { plural } else { format!("{plural}.{group}") },
                namespace: ns,
                objects: objs,
                missing: Vec::new(),
            }),
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

/// An operator Deployment on the cluster that another tool installed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExistingInstall {
    pub object: String,
    /// Who installed it, in words: `Helm (release gshare in gshare-system)`, `hack/deploy-operator.sh
    /// (kubectl apply)`, or the field managers.
    pub manager: String,
    /// The field managers of the Deployment (`metadata.managedFields`).
    pub field_managers: Vec<String>,
    /// What differs from what attach would apply (selector, image, flags, pull policy).
    pub differences: Vec<String>,
}

/// The kinds attach does not take over from another tool silently: the operator's Deployment
/// and its RBAC (a Helm release may own the RBAC with no Deployment left).
pub const GUARDED_KINDS: [&str; 5] = ["Deployment", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

/// The objects among `ours` (of [`GUARDED_KINDS`]) that are on the cluster and someone
/// else's, in `ours`' order. Objects gShare's field manager owns (a previous attach) are not.
pub async fn existing_installs(client: &kube::Client, ours: &[Value]) -> Result<Vec<ExistingInstall>, ApplyFailure> {
    let mut out = Vec::new();
    for o in ours.iter().filter(|o| GUARDED_KINDS.iter().any(|k| o["kind"] == *k)) {
        let Some(theirs) = get(client, o).await? else { continue };
        let theirs = serde_json::to_value(&theirs).unwrap_or(Value::Null);
        out.extend(foreign(&theirs, o));
    }
    Ok(out)
}

/// Is `theirs` (as read from the cluster) another tool's object? `None` when gShare's field
/// manager owns it. Who installed it is read from Helm's label and annotations, kubectl's
/// last-applied annotation (deploy-operator.sh) and the field managers; what differs from
/// `ours` by kind (a Deployment's selector, image, pull policy and flags; a role's rules; a
/// binding's role and subjects).
pub fn foreign(theirs: &Value, ours: &Value) -> Option<ExistingInstall> {
    let mut field_managers: Vec<String> = theirs["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str().map(|s| s.chars().take(128).collect())).collect())
        .unwrap_or_default();
    field_managers.sort();
    field_managers.dedup();
    if field_managers.iter().any(|m| m == FIELD_MANAGER) {
        return None;
    }
    let labels = &theirs["metadata"]["labels"];
    let annotations = &theirs["metadata"]["annotations"];
    let text = |v: &Value| v.as_str().map(|s| s.chars().take(128).collect::<String>());
    let args_of = |o: &Value| -> Vec<String> {
        o["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(|s| s.chars().take(256).collect())).collect())
            .unwrap_or_default()
    };
    let their_args = args_of(theirs);
    let manager =
        if labels["app.kubernetes.io/managed-by"] == "Helm" || annotations["meta.helm.sh/release-name"].is_string() {
            format!(
                "Helm (release {} in {})",
                text(&annotations["meta.helm.sh/release-name"]).unwrap_or_else(|| "?".into()),
                text(&annotations["meta.helm.sh/release-namespace"]).unwrap_or_else(|| "?".into())
            )
        } else if their_args.iter().any(|a| a.starts_with("--internal-jwks-url"))
            || annotations["kubectl.kubernetes.io/last-applied-configuration"].is_string()
        {
            "hack/deploy-operator.sh or kubectl apply".to_string()
        } else if field_managers.is_empty() {
            "an unknown tool (no field managers recorded)".to_string()
        } else {
            format!("field managers {}", field_managers.join(", "))
        };
    let differences = match ours["kind"].as_str().unwrap_or_default() {
        "Deployment" => deployment_differences(theirs, ours, &their_args, &args_of(ours)),
        "Role" | "ClusterRole" => rule_differences(theirs, ours),
        _ => binding_differences(theirs, ours),
    };
    Some(ExistingInstall { object: describe(ours), manager, field_managers, differences })
}

fn deployment_differences(theirs: &Value, ours: &Value, their_args: &[String], our_args: &[String]) -> Vec<String> {
    let mut differences = Vec::new();
    let sel = |o: &Value| o["spec"]["selector"].clone();
    if sel(theirs) != sel(ours) {
        differences.push(format!(
            "spec.selector {} (attach applies {}; immutable, so it must be replaced)",
            bounded(&sel(theirs)),
            sel(ours)
        ));
    }
    let field = |o: &Value, f: &str| o["spec"]["template"]["spec"]["containers"][0][f].clone();
    for f in ["image", "imagePullPolicy"] {
        if field(theirs, f) != field(ours, f) {
            let theirs = match field(theirs, f) {
                Value::Null => "unset".to_string(),
                v => bounded(&v),
            };
            differences.push(format!("{f} {theirs} (attach applies {})", field(ours, f)));
        }
    }
    let flag = |a: &String| a.split('=').next().unwrap_or_default().to_string();
    let only_theirs: Vec<String> = their_args.iter().filter(|a| !our_args.contains(a)).take(10).cloned().collect();
    let only_ours: Vec<String> = our_args.iter().filter(|a| !their_args.contains(a)).map(flag).take(10).collect();
    if !only_theirs.is_empty() {
        differences.push(format!("arguments attach would drop: {}", only_theirs.join(" ")));
    }
    if !only_ours.is_empty() {
        differences.push(format!("flags attach would set: {}", only_ours.join(" ")));
    }
    differences
}

/// Cluster-supplied JSON, cut to a readable length.
fn bounded(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 200 { format!("{}…", s.chars().take(200).collect::<String>()) } else { s }
}

/// A rule in words: `get,list,watch secrets` (`.group` when not core).
fn rule_text(rule: &Value) -> String {
    let list = |k: &str| -> String {
        rule[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.chars().take(64).collect::<String>())
                    .take(12)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let groups = list("apiGroups");
    let groups = if groups.is_empty() { String::new() } else { format!(" ({groups})") };
    format!("{} {}{groups}", list("verbs"), list("resources"))
}

fn rule_differences(theirs: &Value, ours: &Value) -> Vec<String> {
    let rules = |o: &Value| -> Vec<Value> { o["rules"].as_array().cloned().unwrap_or_default() };
    let (t, o) = (rules(theirs), rules(ours));
    let mut out = Vec::new();
    let only_theirs: Vec<String> = t.iter().filter(|r| !o.contains(r)).take(10).map(rule_text).collect();
    let only_ours: Vec<String> = o.iter().filter(|r| !t.contains(r)).take(10).map(rule_text).collect();
    if !only_theirs.is_empty() {
        out.push(format!("rules attach would drop: {}", only_theirs.join("; ")));
    }
    if !only_ours.is_empty() {
        out.push(format!("rules attach would add: {}", only_ours.join("; ")));
    }
    out
}

fn binding_differences(theirs: &Value, ours: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if theirs["roleRef"] != ours["roleRef"] {
        out.push(format!(
            "roleRef {} (attach applies {}; immutable, so it must be replaced)",
            bounded(&theirs["roleRef"]),
            ours["roleRef"]
        ));
    }
    if theirs["subjects"] != ours["subjects"] {
        out.push(format!("subjects {} (attach applies {})", bounded(&theirs["subjects"]), ours["subjects"]));
    }
    out
}

/// A custom resource of one of the shipped CRDs, as detach sees it.
#[derive(Debug, Clone)]
pub struct CustomResource {
    /// `GShareSession/<namespace>/<name>`.
    pub object: Value,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

impl CustomResource {
    pub fn describe(&self) -> String {
        describe(&self.object)
    }
}

fn crd_resource(f: &crds::CrdFile) -> Option<ApiResource> {
    let crd = f.object();
    let group = crd["spec"]["group"].as_str()?;
    let kind = crd["spec"]["names"]["kind"].as_str()?;
    let plural = crd["spec"]["names"]["plural"].as_str()?;
    let version = crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .or_else(|| crd["spec"]["versions"].as_array()?.first())?["name"]
        .as_str()?;
    Some(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural))
}

/// Every custom resource of the shipped CRDs, in every namespace (at most 1,000 per kind).
pub async fn custom_resources(client: &kube::Client) -> Result<Vec<CustomResource>, ApplyFailure> {
    let mut out = Vec::new();
    for f in crds::ALL {
        let Some(ar) = crd_resource(&f) else { continue };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let list = match api.list(&kube::api::ListParams::default().limit(1000)).await {
            Ok(l) => l,
            // No such CRD (never installed, or already gone): no resources of it.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(ApplyFailure::from_kube(e)),
        };
        for item in list.items {
            let finalizers = item.metadata.finalizers.clone().unwrap_or_default();
            let deleting = item.metadata.deletion_timestamp.is_some();
            let mut object = serde_json::to_value(&item).unwrap_or(Value::Null);
            object["apiVersion"] = Value::String(ar.api_version.clone());
            object["kind"] = Value::String(ar.kind.clone());
            out.push(CustomResource { object, finalizers, deleting });
        }
    }
    Ok(out)
}

/// The API resource of a custom resource of one of the shipped CRDs, from its apiVersion and kind.
fn custom_resource_type(o: &Value) -> Option<ApiResource> {
    let api_version = o["apiVersion"].as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = o["kind"].as_str()?;
    let plural = crds::ALL.iter().find_map(|f| crd_resource(f).filter(|ar| ar.kind == kind).map(|ar| ar.plural))?;
    Some(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural))
}

/// Deletes a custom resource (`strip`: its finalizers are removed first, for an operator that
/// will never clear them). `deleted` or `absent`.
pub async fn delete_custom(
    client: &kube::Client,
    cr: &CustomResource,
    strip: bool,
) -> Result<&'static str, ApplyFailure> {
    let o = &cr.object;
    let (Some(name), Some(ns)) = (o["metadata"]["name"].as_str(), o["metadata"]["namespace"].as_str()) else {
        return Ok("absent");
    };
    let Some(ar) = custom_resource_type(o) else { return Ok("absent") };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    if strip && !cr.finalizers.is_empty() {
        let patch = serde_json::json!({ "metadata": { "finalizers": null } });
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok("absent"),
            Err(e) => return Err(ApplyFailure::from_kube(e)),
        }
    }
    if cr.deleting && !strip {
        return Ok("deleted");
    }
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok("deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok("absent"),
        Err(e) => Err(ApplyFailure::from_kube(e)),
    }
}
