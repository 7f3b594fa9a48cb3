//! The GShareSession custom resource on a cluster: create (or merge over), pause, resume,
//! delete — with the verbs, patch types and annotations upstream's control plane uses (contract §3).

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::model::{ResourceClass, SessionRecord};

pub const GROUP: &str = "gshare.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "GShareSession";
pub const PLURAL: &str = "gsharesessions";

/// Every spec key the operator knows: a merge-patch over an existing CR sends the unset ones as
/// `null`, so nothing from an earlier object survives.
const SPEC_KEYS: &[&str] = &[
    "clusterId",
    "offeringId",
    "owner",
    "clusterMode",
    "resourceClass",
    "image",
    "mode",
    "projectId",
    "billingWalletId",
    "cpu",
    "memGb",
    "diskGb",
    "gpuMemMb",
    "gpuCores",
    "migProfile",
    "fullCard",
    "pinnedGpuUuid",
    "paused",
    "pauseMode",
    "losslessPause",
    "gracefulDemote",
    "preemptible",
    "privileged",
    "borrowedGpuUuid",
    "borrowedNode",
    "excludedNodes",
    "volumes",
    "connect",
];

#[derive(Debug, thiserror::Error)]
pub enum CrError {
    /// The API server answered with an error status.
    #[error("the cluster's API server refused: {code} {reason}: {message}")]
    Refused { code: u16, reason: String, message: String },
    /// No answer: connection, TLS or timeout.
    #[error("cannot reach the cluster's API server: {0}")]
    Unreachable(String),
    /// No client: the kubeconfig file is missing or unusable.
    #[error("no usable kubeconfig for this cluster: {0}")]
    NoClient(String),
}

impl CrError {
    fn from_kube(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Self::Refused { code: s.code, reason: s.reason.clone(), message: s.message.clone() },
            other => Self::Unreachable(other.to_string()),
        }
    }

    fn is_code(&self, code: u16) -> bool {
        matches!(self, Self::Refused { code: c, .. } if *c == code)
    }
}

pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// A W3C traceparent for the CR annotation.
pub fn traceparent() -> String {
    let trace = ulid::Ulid::new().0;
    let span = ulid::Ulid::new().0 as u64;
    format!("00-{trace:032x}-{span:016x}-01")
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the operator's `run-started-at` format.
fn run_started_at(now_ms: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z")).unwrap_or_default()
}

/// The whole CR for a session. `excluded` are the cluster's cordoned and offline nodes, sorted
/// (upstream's `handoff.py` sets them on create as on resume): the operator moves a pod off them.
pub fn build(s: &SessionRecord, namespace: &str, excluded: &[String]) -> Value {
    let name = s.cr_name();
    let sh = &s.shape;
    let mut annotations = serde_json::Map::new();
    annotations.insert("gshare.io/traceparent".into(), json!(traceparent()));
    annotations.insert("gshare.io/idle-timeout-sec".into(), json!(sh.idle_timeout_sec.to_string()));
    // A session its policy pauses at the limit: the control plane pauses it (the operator's
    // reaper would end it), so the CR carries no cap.
    if sh.max_runtime_sec > 0 && sh.max_runtime_action.is_end() {
        annotations.insert("gshare.io/max-runtime-sec".into(), json!(sh.max_runtime_sec.to_string()));
    }
    let mut spec = serde_json::Map::new();
    spec.insert("clusterId".into(), json!(s.cluster_id));
    spec.insert("offeringId".into(), json!(s.offering_id));
    spec.insert("owner".into(), json!(s.owner));
    spec.insert("clusterMode".into(), json!("single"));
    spec.insert("resourceClass".into(), json!(sh.resource_class.as_str()));
    spec.insert("image".into(), json!(sh.image));
    spec.insert("cpu".into(), json!(sh.cpu));
    spec.insert("memGb".into(), json!(sh.mem_gb));
    spec.insert("diskGb".into(), json!(sh.disk_gb));
    if sh.resource_class == ResourceClass::Gpu {
        if let Some(m) = sh.mode {
            spec.insert("mode".into(), json!(m.as_str()));
        }
        if let Some(v) = sh.gpu_mem_mb {
            spec.insert("gpuMemMb".into(), json!(v));
        }
        if let Some(v) = sh.gpu_cores {
            spec.insert("gpuCores".into(), json!(v));
        }
    }
    spec.insert("paused".into(), json!(s.paused));
    spec.insert("excludedNodes".into(), json!(excluded));
    if !s.volumes.is_empty() {
        spec.insert("volumes".into(), Value::Array(s.volumes.iter().map(volume_spec).collect()));
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "gshare.io/session": name },
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// One `spec.volumes[]` entry as the CRD's `VolumeSpec` takes it: `name` is the volume id (the
/// operator's PVC is its sanitized form), `mode` the PVC access mode, `sizeGb` the claim's size.
fn volume_spec(v: &super::model::SessionVolume) -> Value {
    json!({
        "name": v.claim.as_deref().unwrap_or(&v.volume_id),
        "mountPath": v.mount_path,
        "mode": v.mode.as_kube(),
        "readOnly": v.read_only,
        "sizeGb": v.size_gb,
    })
}

/// The merge-patch sent when the CR already exists: the full object with unset spec keys (and
/// an absent runtime cap) as `null`.
fn merge_over(obj: &Value) -> Value {
    let mut patch = obj.clone();
    if let Some(spec) = patch["spec"].as_object_mut() {
        for key in SPEC_KEYS {
            spec.entry(key.to_string()).or_insert(Value::Null);
        }
    }
    if let Some(a) = patch["metadata"]["annotations"].as_object_mut() {
        a.entry("gshare.io/max-runtime-sec").or_insert(Value::Null);
    }
    patch
}

fn generation(o: &DynamicObject) -> Option<i64> {
    o.metadata.generation
}

/// Talks to one cluster's API server with a deadline per call.
pub struct CrClient {
    api: Api<DynamicObject>,
    timeout: Duration,
}

impl CrClient {
    pub fn new(client: kube::Client, namespace: &str, timeout: Duration) -> Self {
        Self { api: Api::namespaced_with(client, namespace, &api_resource()), timeout }
    }

    async fn timed<T>(&self, f: impl Future<Output = Result<T, kube::Error>>) -> Result<T, CrError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r.map_err(CrError::from_kube),
            Err(_) => Err(CrError::Unreachable(format!("no answer within {} s", self.timeout.as_secs()))),
        }
    }

    /// Creates the CR; if it exists already, merges the full object over it. Returns the generation.
    pub async fn apply(&self, obj: &Value) -> Result<Option<i64>, CrError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let dynamic: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(|e| CrError::NoClient(format!("building the CR: {e}")))?;
        match self.timed(self.api.create(&PostParams::default(), &dynamic)).await {
            Ok(o) => Ok(generation(&o)),
            Err(e) if e.is_code(409) => {
                let o =
                    self.timed(self.api.patch(&name, &PatchParams::default(), &Patch::Merge(merge_over(obj)))).await?;
                Ok(generation(&o))
            }
            Err(e) => Err(e),
        }
    }

    /// Pause: `spec.paused=true` (cold pause) by JSON Patch. Returns the generation.
    pub async fn pause(&self, name: &str) -> Result<Option<i64>, CrError> {
        let ops = json!([
            { "op": "add", "path": "/spec/paused", "value": true },
            { "op": "add", "path": "/spec/pauseMode", "value": "cold" },
        ]);
        self.json_patch(name, ops).await
    }

    /// Resume: `spec.paused=false`, the nodes to avoid now (`excluded`, sorted), and the run
    /// clock and annotations re-stamped.
    pub async fn resume(&self, s: &SessionRecord, now_ms: i64, excluded: &[String]) -> Result<Option<i64>, CrError> {
        let ops = json!([
            { "op": "add", "path": "/spec/paused", "value": false },
            { "op": "add", "path": "/spec/excludedNodes", "value": excluded },
            { "op": "add", "path": "/metadata/annotations/gshare.io~1traceparent", "value": traceparent() },
            { "op": "add", "path": "/metadata/annotations/gshare.io~1idle-timeout-sec",
              "value": s.shape.idle_timeout_sec.to_string() },
            { "op": "add", "path": "/metadata/annotations/gshare.io~1run-started-at", "value": run_started_at(now_ms) },
            { "op": "add", "path": "/metadata/annotations/gshare.io~1pause-reason", "value": "" },
        ]);
        self.json_patch(&s.cr_name(), ops).await
    }

    async fn json_patch(&self, name: &str, ops: Value) -> Result<Option<i64>, CrError> {
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(|e| CrError::NoClient(format!("building the patch: {e}")))?;
        let o = self.timed(self.api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))).await?;
        Ok(generation(&o))
    }

    /// The names of every GShareSession in the namespace.
    pub async fn names(&self) -> Result<Vec<String>, CrError> {
        let list = self.timed(self.api.list(&kube::api::ListParams::default())).await?;
        Ok(list.items.into_iter().filter_map(|o| o.metadata.name).collect())
    }

    /// Does the CR still exist (a finalizer may hold it after a delete)?
    pub async fn exists(&self, name: &str) -> Result<bool, CrError> {
        Ok(self.timed(self.api.get_opt(name)).await?.is_some())
    }

    /// Deletes the CR; already gone is fine. The operator's finalizer reports `Terminated`.
    pub async fn delete(&self, name: &str) -> Result<(), CrError> {
        match self.timed(self.api.delete(name, &DeleteParams::default())).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_code(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::model::{GpuMode, Shape};

    fn session() -> SessionRecord {
        SessionRecord {
            offering_id: "off_1".into(),
            offering_name: "slice".into(),
            shape: Shape {
                resource_class: ResourceClass::Gpu,
                image: "ghcr.io/x/lab:1".into(),
                mode: Some(GpuMode::Fractional),
                gpu_model: Some("A100".into()),
                gpu_mem_mb: Some(20480),
                gpu_cores: Some(30),
                ..Shape::default()
            },
            ..SessionRecord::new(
                "ses_01JABCDEFGHJKMNPQRSTVWXYZ0",
                "clu_01J0000000000000000000000A",
                "gpu-a",
                "alice",
                0,
            )
        }
    }

    #[test]
    fn the_cr_follows_the_contract() {
        let o = build(&session(), "gshare-sessions", &["gpu-2".to_string(), "gpu-9".to_string()]);
        assert_eq!(o["metadata"]["name"], "ses-01jabcdefghjkmnpqrstvwxyz0");
        assert_eq!(o["metadata"]["labels"]["gshare.io/session"], "ses-01jabcdefghjkmnpqrstvwxyz0");
        assert_eq!(o["metadata"]["annotations"]["gshare.io/idle-timeout-sec"], "1800");
        assert!(o["metadata"]["annotations"].get("gshare.io/max-runtime-sec").is_none());
        let tp = o["metadata"]["annotations"]["gshare.io/traceparent"].as_str().unwrap();
        assert!(tp.starts_with("00-") && tp.ends_with("-01") && tp.len() == 55, "{tp}");
        let spec = &o["spec"];
        assert_eq!(spec["resourceClass"], "gpu");
        assert_eq!(spec["mode"], "fractional");
        assert_eq!(spec["gpuMemMb"], 20480);
        assert_eq!(spec["gpuCores"], 30);
        assert_eq!(spec["clusterMode"], "single");
        assert_eq!(spec["memGb"], 4);
        assert_eq!(spec["paused"], false);
        assert_eq!(spec["excludedNodes"], json!(["gpu-2", "gpu-9"]));
        assert!(spec.get("volumes").is_none(), "no volumes: the key is left out (merged over as null)");
        let m = merge_over(&o);
        assert!(m["spec"]["volumes"].is_null() && m["spec"].get("volumes").is_some());
        assert!(m["spec"]["pinnedGpuUuid"].is_null() && m["spec"].get("pinnedGpuUuid").is_some());
        assert!(m["metadata"]["annotations"].get("gshare.io/max-runtime-sec").is_some_and(Value::is_null));
    }

    #[test]
    fn a_session_paused_at_its_runtime_limit_carries_no_cap_for_the_reaper() {
        let mut s = session();
        s.shape.max_runtime_sec = 3600;
        let o = build(&s, "gshare-sessions", &[]);
        assert_eq!(o["metadata"]["annotations"]["gshare.io/max-runtime-sec"], "3600");
        s.shape.max_runtime_action = crate::policy::model::RuntimeAction::Pause;
        let o = build(&s, "gshare-sessions", &[]);
        assert!(o["metadata"]["annotations"].get("gshare.io/max-runtime-sec").is_none());
        assert!(merge_over(&o)["metadata"]["annotations"]["gshare.io/max-runtime-sec"].is_null());
    }

    #[test]
    fn volumes_are_the_crds_volume_specs() {
        use crate::sessions::model::{AccessMode, SessionVolume};
        let mut s = session();
        s.volumes = vec![
            SessionVolume {
                volume_id: "vol_01JHOME0000000000000000000".into(),
                mount_path: "/workspace".into(),
                mode: AccessMode::ReadWriteOnce,
                read_only: false,
                size_gb: 20,
                claim: None,
            },
            SessionVolume {
                volume_id: "vol_01JDATA0000000000000000000".into(),
                mount_path: "/data/imagenet".into(),
                mode: AccessMode::ReadOnlyMany,
                read_only: true,
                size_gb: 500,
                claim: None,
            },
            // An adopted PVC: the CR names its claim, not the volume's id.
            SessionVolume {
                volume_id: "vol_01JADOP0000000000000000000".into(),
                mount_path: "/data/old".into(),
                mode: AccessMode::ReadWriteOnce,
                read_only: false,
                size_gb: 8,
                claim: Some("data-old".into()),
            },
        ];
        let o = build(&s, "gshare-sessions", &[]);
        assert_eq!(
            o["spec"]["volumes"],
            json!([
                {"name": "vol_01JHOME0000000000000000000", "mountPath": "/workspace", "mode": "ReadWriteOnce", "readOnly": false, "sizeGb": 20},
                {"name": "vol_01JDATA0000000000000000000", "mountPath": "/data/imagenet", "mode": "ReadOnlyMany", "readOnly": true, "sizeGb": 500},
                {"name": "data-old", "mountPath": "/data/old", "mode": "ReadWriteOnce", "readOnly": false, "sizeGb": 8}
            ])
        );
    }

    #[test]
    fn run_started_at_has_no_fraction() {
        assert_eq!(run_started_at(1_700_000_000_999), "2023-11-14T22:13:20Z");
    }
}
