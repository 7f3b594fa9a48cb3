//! Everything the operator needs on a cluster, following upstream's Helm chart (not its
//! `deploy-operator.sh`, which passes a flag the operator does not define and misses two CRDs and
//! most of the RBAC: operator-contract §8.2, §8.5, §8.7).
//!
//! Read from `Mkpong/gShare`: `charts/gshare/templates/namespaces.yaml` @ 018e2adb,
//! `operator-rbac.yaml` @ 018e2adb, `operator-deployment.yaml` @ 0c3add84, `_helpers.tpl` @ 5b863b6e,
//! `values.yaml` @ 018e2adb. Rendered with the chart's data-plane choices: namespaces created,
//! webhook off, no control-plane objects (the `gshare-controller` service account and its
//! `gshare-session-cr-writer` Role are for the chart's own control plane; gShare Edge reaches the
//! cluster through the registered kubeconfig instead).

use serde_json::{Value, json};

use super::builds::{self, Profile, ProfileChoice};
use super::crds;

pub const SYSTEM_NS: &str = "gshare-system";
pub const INFRA_NS: &str = "gshare-infra";
pub const SERVICE_ACCOUNT: &str = "gshare-operator";
pub const DEPLOYMENT: &str = "gshare-operator";
/// The token Secret the Deployment mounts (chart `operator.internalJwtSecret`).
pub const TOKEN_SECRET: &str = "gshare-operator-internal-jwt";
pub const TOKEN_KEY: &str = "internal-jwt";
/// The field manager of every object attach applies.
pub const FIELD_MANAGER: &str = "gshare";
/// Chart default for `operator.hamiMonitorUrl`.
const HAMI_MONITOR_URL: &str = "http://hami-device-plugin-monitor.kube-system.svc:31992";

/// What varies between clusters.
#[derive(Debug, Clone)]
pub struct Params {
    pub cluster_id: String,
    pub image: String,
    /// Base URL the operator calls back (`--sot-endpoint`) and ingress forward-auth uses.
    pub control_plane_url: String,
    pub session_domain: String,
    /// `--session-namespace`; must equal the server's `sessions_namespace`.
    pub sessions_namespace: String,
    /// The operator token for the Secret; `None` leaves the Secret out.
    pub token: Option<String>,
    /// The RBAC profile and pull policy ([`builds::choose`]).
    pub profile: ProfileChoice,
    /// The HAMi device-plugin monitor Service found on the cluster (else the chart's default,
    /// which exists only for a Helm release named `hami` in kube-system).
    pub hami_monitor_url: Option<String>,
}

/// The ConfigMap a privileged session mounts at `/etc/jupyter` (podbuilder mounts it, not
/// optional): upstream's chart renders it always (`session-privileged-config.yaml`).
pub const PRIVILEGED_CONFIGMAP: &str = "gshare-session-privileged";

/// Why a control-plane URL cannot be handed to an operator.
pub fn check_control_plane_url(url: &str, source: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("{source} `{url}` must be an http:// or https:// URL"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map(|(h, _)| h).unwrap_or(authority),
    };
    let loopback = host.is_empty()
        || host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
    if loopback {
        return Err(format!(
            "{source} is `{url}`, which an operator inside the cluster cannot reach; set public_url \
             (GSHARE_PUBLIC_URL) to the address clusters reach this server at, e.g. https://gshare.example.com, \
             or pass --control-plane-url"
        ));
    }
    Ok(url.to_string())
}

fn labels() -> Value {
    json!({ "app.kubernetes.io/part-of": "gshare", "app.kubernetes.io/managed-by": "gshare-edge" })
}

fn with_labels(extra: Value) -> Value {
    let mut l = labels();
    if let (Some(m), Value::Object(e)) = (l.as_object_mut(), extra) {
        m.extend(e);
    }
    l
}

fn meta(name: &str, namespace: Option<&str>) -> Value {
    let mut m = json!({ "name": name, "labels": labels() });
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({ "apiGroups": groups, "resources": resources, "verbs": verbs })
}

fn role(kind: &str, name: &str, namespace: Option<&str>, rules: Vec<Value>) -> Value {
    json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta(name, namespace), "rules": rules })
}

fn binding(kind: &str, name: &str, namespace: Option<&str>, role_kind: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta(name, namespace),
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name },
        "subjects": [{ "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SYSTEM_NS }],
    })
}

fn namespace(name: &str, psa: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name, "labels": with_labels(psa) } })
}

/// Jupyter refuses to run as root unless told; a privileged session mounts this (chart
/// `session-privileged-config.yaml`, same name, key and content).
fn privileged_configmap(sessions_ns: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(PRIVILEGED_CONFIGMAP, Some(sessions_ns)),
        "data": {
            "jupyter_server_config.py": "c = get_config()  # noqa: F821\nc.ServerApp.allow_root = True\n",
        },
    })
}

/// The token Secret alone (rotation rewrites just this).
pub fn token_secret(token: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(TOKEN_SECRET, Some(SYSTEM_NS)),
        "type": "Opaque",
        "stringData": { TOKEN_KEY: token },
    })
}

/// The operator's arguments: the chart's, with its data-plane values. Every flag is one each
/// known build's `cmd/main.go` defines ([`builds::common_flags`]); any other makes an older
/// build exit 2. `--volume-sync-interval=5m` and `--session-image-pull-policy=IfNotPresent` are
/// left out: those are the defaults wherever the flags exist.
pub fn args(p: &Params) -> Vec<String> {
    vec![
        "--leader-elect".into(),
        format!("--session-namespace={}", p.sessions_namespace),
        format!("--lossless-namespace={INFRA_NS}"),
        format!("--session-domain={}", p.session_domain),
        format!("--connect-verify-url={}/internal/connect/verify", p.control_plane_url),
        format!("--sot-endpoint={}", p.control_plane_url),
        format!("--cluster-id={}", p.cluster_id),
        "--ingress-class=nginx".into(),
        format!("--hami-monitor-url={}", p.hami_monitor_url.as_deref().unwrap_or(HAMI_MONITOR_URL)),
    ]
}

fn deployment(p: &Params) -> Value {
    let selector = json!({ "app.kubernetes.io/name": DEPLOYMENT, "app.kubernetes.io/part-of": "gshare" });
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": DEPLOYMENT,
            "namespace": SYSTEM_NS,
            "labels": with_labels(json!({ "app.kubernetes.io/name": DEPLOYMENT })),
        },
        "spec": {
            // Leader-elected (--leader-elect): one replica, as the chart.
            "replicas": 1,
            "selector": { "matchLabels": selector },
            "template": {
                "metadata": { "labels": with_labels(selector.clone()) },
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": true,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 1000,
                        "fsGroup": 1000,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "containers": [{
                        "name": "operator",
                        "image": p.image,
                        "imagePullPolicy": builds::pull_policy(&p.image),
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "drop": ["ALL"] },
                        },
                        "command": ["/manager"],
                        "args": args(p),
                        "env": [{ "name": "INTERNAL_JWT_TOKEN_FILE", "value": format!("/var/run/gshare/{TOKEN_KEY}") }],
                        "ports": [
                            { "name": "metrics", "containerPort": 8080 },
                            { "name": "healthz", "containerPort": 8081 },
                        ],
                        "readinessProbe": { "httpGet": { "path": "/readyz", "port": "healthz" }, "initialDelaySeconds": 5 },
                        "livenessProbe": { "httpGet": { "path": "/healthz", "port": "healthz" }, "initialDelaySeconds": 15 },
                        "resources": {
                            "requests": { "cpu": "100m", "memory": "128Mi" },
                            "limits": { "cpu": "500m", "memory": "256Mi" },
                        },
                        "volumeMounts": [{ "name": "internal-jwt", "mountPath": "/var/run/gshare", "readOnly": true }],
                    }],
                    "volumes": [{
                        "name": "internal-jwt",
                        "secret": {
                            "secretName": TOKEN_SECRET,
                            // The pod starts before the Secret exists; the token is re-read on every call.
                            "optional": true,
                            "items": [{ "key": TOKEN_KEY, "path": TOKEN_KEY }],
                        },
                    }],
                },
            },
        },
    })
}

/// Every object, in apply order: CRDs, namespaces, service accounts, RBAC, the token Secret
/// (when a token is given), the Deployment.
pub fn objects(p: &Params) -> Vec<Value> {
    let sessions = p.sessions_namespace.as_str();
    let gss = ["gsharesessions", "gpumodechanges", "gshareimagebuilds"];
    let mut out: Vec<Value> = crds::ALL.iter().map(crds::CrdFile::object).collect();
    out.push(namespace(
        SYSTEM_NS,
        json!({
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
        }),
    ));
    // Baseline, not restricted: a policy-granted privileged session runs as root.
    out.push(namespace(
        sessions,
        json!({
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
            "gshare.io/tenant-namespace": "true",
        }),
    ));
    out.push(namespace(
        INFRA_NS,
        json!({ "pod-security.kubernetes.io/enforce": "privileged", "gshare.io/infra": "true" }),
    ));
    out.push(
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(SERVICE_ACCOUNT, Some(SYSTEM_NS)) }),
    );
    // Checkpoint Jobs and restore pods in gshare-infra; they call no API, so no RBAC.
    out.push(
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("gshare-lossless-agent", Some(INFRA_NS)) }),
    );
    out.push(role(
        "ClusterRole",
        "gshare-controller-inventory",
        None,
        vec![
            rule(&[""], &["nodes"], &["get", "list", "watch"]),
            rule(&[""], &["namespaces"], &["get", "list", "watch"]),
            rule(&["node.k8s.io"], &["runtimeclasses"], &["get", "list", "watch"]),
            rule(&["apps"], &["daemonsets"], &["get", "list", "watch"]),
            rule(&[""], &["nodes"], &["patch", "delete"]),
            rule(&[""], &["nodes/proxy"], &["get"]),
            rule(&["storage.k8s.io"], &["csistoragecapacities", "storageclasses"], &["get", "list", "watch"]),
            rule(&["batch"], &["jobs"], &["get", "list", "watch"]),
            rule(
                &["admissionregistration.k8s.io"],
                &["validatingwebhookconfigurations"],
                &["get", "list", "watch", "update"],
            ),
        ],
    ));
    out.push(binding("ClusterRoleBinding", "gshare-controller-inventory", None, "ClusterRole"));
    out.push(role(
        "ClusterRole",
        "gshare-operator-watch",
        None,
        vec![
            // boanlab's builds watch Secrets cluster-wide (their chart grants it); Mkpong 018e2adb
            // confines that informer to the sessions namespace.
            if p.profile.profile == Profile::LeastPrivilege {
                rule(&[""], &["pods", "services", "persistentvolumeclaims"], &["get", "list", "watch"])
            } else {
                rule(&[""], &["pods", "services", "secrets", "persistentvolumeclaims"], &["get", "list", "watch"])
            },
            rule(&["networking.k8s.io"], &["ingresses"], &["get", "list", "watch"]),
            rule(
                &["gshare.io"],
                &[
                    "gsharesessions",
                    "gsharesessions/status",
                    "gpumodechanges",
                    "gpumodechanges/status",
                    "gshareimagebuilds",
                    "gshareimagebuilds/status",
                ],
                &["get", "list", "watch"],
            ),
        ],
    ));
    out.push(binding("ClusterRoleBinding", "gshare-operator-watch", None, "ClusterRole"));
    out.push(role(
        "Role",
        "gshare-build-manager",
        Some(INFRA_NS),
        vec![
            rule(&["batch"], &["jobs"], &["get", "list", "watch", "create", "delete"]),
            rule(&[""], &["pods"], &["get", "list", "watch", "create", "delete"]),
            rule(&[""], &["configmaps"], &["create", "get", "delete"]),
            rule(&[""], &["pods/log"], &["get"]),
        ],
    ));
    out.push(binding("RoleBinding", "gshare-build-manager", Some(INFRA_NS), "Role"));
    out.push(role(
        "Role",
        "gshare-session-manager",
        Some(sessions),
        vec![
            rule(&[""], &["pods", "services", "configmaps"], &["create", "get", "list", "watch", "delete"]),
            rule(&[""], &["persistentvolumeclaims"], &["create", "get", "list", "watch", "patch", "delete"]),
            rule(&["networking.k8s.io"], &["ingresses"], &["create", "get", "list", "watch", "delete"]),
            rule(&[""], &["secrets"], &["create", "get", "list", "watch", "delete"]),
            rule(&[""], &["events"], &["get", "list"]),
        ],
    ));
    out.push(binding("RoleBinding", "gshare-session-manager", Some(sessions), "Role"));
    out.push(role(
        "Role",
        "gshare-operator-cr",
        Some(sessions),
        vec![
            rule(&["gshare.io"], &gss, &["get", "list", "watch", "update", "patch"]),
            rule(&["gshare.io"], &["gsharesessions"], &["delete"]),
            rule(
                &["gshare.io"],
                &[
                    "gsharesessions/status",
                    "gsharesessions/finalizers",
                    "gpumodechanges/status",
                    "gshareimagebuilds/status",
                ],
                &["get", "update", "patch"],
            ),
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["get", "list", "watch", "create", "update", "patch", "delete"],
            ),
        ],
    ));
    out.push(binding("RoleBinding", "gshare-operator-cr", Some(sessions), "Role"));
    out.push(role(
        "Role",
        "gshare-operator-leaderelection",
        Some(SYSTEM_NS),
        vec![
            rule(
                &["coordination.k8s.io"],
                &["leases"],
                &["get", "list", "watch", "create", "update", "patch", "delete"],
            ),
            rule(&[""], &["events"], &["create", "patch"]),
        ],
    ));
    out.push(binding("RoleBinding", "gshare-operator-leaderelection", Some(SYSTEM_NS), "Role"));
    out.push(role(
        "Role",
        "gshare-operator-deviceplugin-restart",
        Some("kube-system"),
        vec![rule(&[""], &["pods"], &["get", "list", "watch", "delete"])],
    ));
    out.push(binding("RoleBinding", "gshare-operator-deviceplugin-restart", Some("kube-system"), "Role"));
    out.push(privileged_configmap(sessions));
    if let Some(t) = &p.token {
        out.push(token_secret(t));
    }
    out.push(deployment(p));
    out
}

pub fn profile_name(p: Profile) -> &'static str {
    match p {
        Profile::Compatible => "compatible",
        Profile::LeastPrivilege => "least_privilege",
    }
}

/// `kind/name` or `kind/namespace/name`, for answers and errors.
pub fn describe(o: &Value) -> String {
    let kind = o["kind"].as_str().unwrap_or("?");
    let name = o["metadata"]["name"].as_str().unwrap_or("?");
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// The objects as one multi-document YAML stream, CRDs as upstream's files byte for byte.
pub fn to_yaml(p: &Params) -> Result<String, String> {
    let mut out = String::from("# gShare operator for cluster ");
    out.push_str(&p.cluster_id);
    out.push_str(" (generated by `gshare operator manifests`; apply with `kubectl apply -f -`)\n");
    out.push_str(&format!(
        "# RBAC profile {}: {}; imagePullPolicy {}\n",
        profile_name(p.profile.profile),
        p.profile.reason.replace('\n', " "),
        p.profile.pull_policy
    ));
    for f in crds::ALL {
        if !f.text.starts_with("---") {
            out.push_str("---\n");
        }
        out.push_str(f.text);
    }
    for o in objects(p).into_iter().skip(crds::ALL.len()) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&o).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            cluster_id: "clu_01J0000000000000000000000A".into(),
            image: "docker.io/boanlab/gshare-operator:latest".into(),
            control_plane_url: "https://gshare.example.com".into(),
            session_domain: "lab.example.com".into(),
            sessions_namespace: "gshare-sessions".into(),
            token: Some("tok".into()),
            profile: builds::choose("docker.io/boanlab/gshare-operator:latest", None).unwrap(),
            hami_monitor_url: None,
        }
    }

    fn watch_rules(objs: &[Value]) -> Vec<Value> {
        let watch = objs.iter().find(|o| o["metadata"]["name"] == "gshare-operator-watch").unwrap();
        watch["rules"].as_array().unwrap().clone()
    }

    fn grants_cluster_wide_secrets(objs: &[Value]) -> bool {
        watch_rules(objs).iter().any(|r| {
            r["apiGroups"] == json!([""])
                && r["resources"].as_array().unwrap().iter().any(|x| x == "secrets")
                && ["get", "list", "watch"].iter().all(|v| r["verbs"].as_array().unwrap().iter().any(|x| x == v))
        })
    }

    /// The published image may be any boanlab build, whose session controller watches Secrets in
    /// every namespace: by default the operator may read them (else its cache never syncs and it
    /// crash-loops), pulls its moving tag every time, and gets only flags every build defines.
    #[test]
    fn default_manifests_run_every_known_build() {
        let objs = objects(&params());
        assert!(grants_cluster_wide_secrets(&objs));
        let dep = objs.last().unwrap();
        let c = &dep["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        for build in builds::BUILDS {
            for a in c["args"].as_array().unwrap() {
                let flag = a.as_str().unwrap().split('=').next().unwrap();
                assert!(build.flags.contains(&flag), "{flag} is not defined by {}", build.id);
            }
        }
        let y = to_yaml(&params()).unwrap();
        assert!(y.contains("# RBAC profile compatible: no operator_build declared"), "{}", &y[..300]);
    }

    #[test]
    fn least_privilege_only_for_a_pinned_restricted_build() {
        let image = format!("registry.lan/op@sha256:{}", "ab".repeat(32));
        let mut p = params();
        p.image = image.clone();
        p.profile = builds::choose(&image, Some("mkpong-018e2adb")).unwrap();
        let objs = objects(&p);
        assert!(!grants_cluster_wide_secrets(&objs));
        assert_eq!(
            objs.last().unwrap()["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        // The sessions namespace still lets it manage the per-session Secrets.
        let mgr = objs.iter().find(|o| o["metadata"]["name"] == "gshare-session-manager").unwrap();
        assert!(mgr["rules"].as_array().unwrap().iter().any(|r| r["resources"] == json!(["secrets"])));
    }

    /// A privileged session's pod mounts ConfigMap gshare-session-privileged (not optional):
    /// rendered as the chart does, in the sessions namespace.
    #[test]
    fn privileged_session_configmap_as_the_chart() {
        let objs = objects(&params());
        let cm = objs.iter().find(|o| o["kind"] == "ConfigMap").expect("ConfigMap");
        assert_eq!(describe(cm), "ConfigMap/gshare-sessions/gshare-session-privileged");
        assert_eq!(
            cm["data"]["jupyter_server_config.py"],
            "c = get_config()  # noqa: F821\nc.ServerApp.allow_root = True\n"
        );
    }

    #[test]
    fn loopback_control_plane_urls_are_refused_with_what_to_set() {
        for bad in ["http://127.0.0.1:8080", "http://localhost", "https://[::1]:8443/", "http://0.0.0.0:80"] {
            let e = check_control_plane_url(bad, "public_url").unwrap_err();
            assert!(e.contains("set public_url (GSHARE_PUBLIC_URL)"), "{e}");
        }
        assert!(check_control_plane_url("ftp://x", "public_url").is_err());
        assert_eq!(check_control_plane_url("https://cp.example.com/", "x").unwrap(), "https://cp.example.com");
        assert_eq!(check_control_plane_url("http://10.0.0.10:8080", "x").unwrap(), "http://10.0.0.10:8080");
    }

    #[test]
    fn every_object_the_operator_needs_and_only_flags_it_defines() {
        let objs = objects(&params());
        let names: Vec<String> = objs.iter().map(describe).collect();
        for want in [
            "CustomResourceDefinition/gsharesessions.gshare.io",
            "CustomResourceDefinition/gpumodechanges.gshare.io",
            "CustomResourceDefinition/gshareimagebuilds.gshare.io",
            "Namespace/gshare-system",
            "Namespace/gshare-sessions",
            "Namespace/gshare-infra",
            "ServiceAccount/gshare-system/gshare-operator",
            "ClusterRole/gshare-controller-inventory",
            "ClusterRole/gshare-operator-watch",
            "Role/gshare-sessions/gshare-operator-cr",
            "Role/gshare-system/gshare-operator-leaderelection",
            "Secret/gshare-system/gshare-operator-internal-jwt",
            "Deployment/gshare-system/gshare-operator",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        // Flags of Mkpong operator/cmd/main.go (operator-contract §8.3).
        const DEFINED: &[&str] = &[
            "--metrics-bind-address",
            "--health-probe-bind-address",
            "--leader-elect",
            "--cluster-id",
            "--session-namespace",
            "--ingress-class",
            "--connect-verify-url",
            "--session-domain",
            "--sot-endpoint",
            "--sot-status-path",
            "--sot-audit-path",
            "--internal-jwt-token-file",
            "--lossless-agent-image",
            "--lossless-namespace",
            "--lossless-service-account",
            "--lossless-checkpoint-pvc",
            "--prometheus-url",
            "--hami-monitor-url",
            "--hami-yield-extender",
            "--per-card-mode",
            "--build-insecure-registry",
            "--webhook-enabled",
            "--session-image-pull-policy",
            "--mig-agent-image",
            "--kaniko-image",
            "--volume-sync-interval",
            "--volume-storage-class",
            "--system-namespace",
            "--webhook-port",
            "--webhook-cert-dir",
            "--webhook-service",
            "--webhook-config-name",
        ];
        let dep = objs.last().unwrap();
        let args = dep["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
        for a in args {
            let flag = a.as_str().unwrap().split('=').next().unwrap();
            assert!(DEFINED.contains(&flag), "{flag} is not an operator flag");
        }
        assert!(args.iter().any(|a| a == "--sot-endpoint=https://gshare.example.com"));
        assert!(args.iter().any(|a| a == "--connect-verify-url=https://gshare.example.com/internal/connect/verify"));
        let sessions_ns = objs.iter().find(|o| o["metadata"]["name"] == "gshare-sessions").unwrap();
        assert_eq!(sessions_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "baseline");
    }

    #[test]
    fn yaml_carries_the_crd_files_verbatim() {
        let y = to_yaml(&params()).unwrap();
        for f in crds::ALL {
            assert!(y.contains(f.text), "{}", f.path);
        }
        let docs: Vec<Value> = y
            .split("\n---\n")
            .filter(|d| d.lines().any(|l| !l.starts_with('#') && !l.trim().is_empty() && l != "---"))
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), objects(&params()).len());
    }

    /// kubectl reads YAML 1.1 (`yes`, `on`, `n`, `12:30`, `0o17` are not strings there): every
    /// scalar such a reader could take for another type is written quoted, and reads back equal.
    #[test]
    fn yaml_quotes_what_a_yaml_1_1_reader_would_retype() {
        let tricky = [
            "yes",
            "on",
            "y",
            "n",
            "NO",
            "Off",
            "~",
            "null",
            "1.0",
            "0o17",
            "0x1f",
            "1e3",
            "1_000",
            "012",
            "+1",
            ".inf",
            "-.Inf",
            ".nan",
            "2001-12-14",
            "12:30",
            "true",
            "False",
            ":x",
            "- a",
            "#c",
            "a: b",
            "",
            " lead",
            "trail ",
            "@x",
            "`x",
            "'q",
            "\"d",
            "a #b",
            "*a",
            "&a",
            "!t",
            "%x",
            "{a}",
            "[a]",
            "|",
            "> x",
        ];
        let mut o = serde_json::Map::new();
        for t in tricky {
            o.insert(t.to_string(), Value::String(t.to_string()));
        }
        let v = Value::Object(o);
        let y = serde_saphyr::to_string(&v).unwrap();
        for line in y.lines() {
            // Key and value are the same string, so the line is `<q>: <q>`.
            let q = &line[..(line.len() - 2) / 2];
            assert_eq!(line, format!("{q}: {q}"), "{line}");
            assert!(q.starts_with('"') && q.ends_with('"'), "unquoted: {line}");
        }
        let back: Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(back, v);
    }
}
