//! The operator's three CustomResourceDefinitions, shipped verbatim from upstream's chart
//! (`Mkpong/gShare`, `charts/gshare/crds/`), as `packaging/crds/gshare.io_<plural>.yaml`.
//!
//! The operator registers a controller for each of the three kinds and exits about two minutes
//! after winning its lease when any one is missing (operator-contract §8.5), so attach and
//! `gshare operator manifests` always carry all three.
//!
//! Pinned upstream versions (the commit each file was read at; the index keeps one commit per
//! distinct file content):
//! - `gsharesessions.yaml`    @ 2824c16ca33c24f88aab7b33d8488e376ee188fe (newest of two seen; the
//!   older, 57c1bfc9, differs only in a description that pointed at docs/paper/)
//! - `gpumodechanges.yaml`    @ 8ce1ae31384d9e74429a8729db0b7c842e09ae82
//! - `gshareimagebuilds.yaml` @ ad3dfd9b3c2de9e37fa279a2b229f5551edd4003
//!
//! The files must stay byte-identical to upstream: the SHA-256 below is checked by a test, so an
//! edit fails the build's tests instead of drifting silently. To take a newer upstream CRD,
//! replace the file, its commit and its hash together.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// One upstream CRD file.
#[derive(Debug, Clone, Copy)]
pub struct CrdFile {
    /// `packaging/crds/…` in this repository.
    pub path: &'static str,
    /// Where it comes from in `Mkpong/gShare`.
    pub upstream_path: &'static str,
    pub upstream_commit: &'static str,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: &'static str,
    /// `<plural>.gshare.io`.
    pub name: &'static str,
    pub text: &'static str,
}

pub const GSHARESESSIONS: CrdFile = CrdFile {
    path: "packaging/crds/gshare.io_gsharesessions.yaml",
    upstream_path: "charts/gshare/crds/gsharesessions.yaml",
    upstream_commit: "2824c16ca33c24f88aab7b33d8488e376ee188fe",
    sha256: "f235fc390094131cf7a4dbff6ee67817ae427b2cbeebf3cba8ba78ddfdcfaf9f",
    name: "gsharesessions.gshare.io",
    text: include_str!("../../packaging/crds/gshare.io_gsharesessions.yaml"),
};

pub const GPUMODECHANGES: CrdFile = CrdFile {
    path: "packaging/crds/gshare.io_gpumodechanges.yaml",
    upstream_path: "charts/gshare/crds/gpumodechanges.yaml",
    upstream_commit: "8ce1ae31384d9e74429a8729db0b7c842e09ae82",
    sha256: "12ee55cc453271918a60c3312e7cc4f9b729919a32673ea9f5fb4a3fba528dac",
    name: "gpumodechanges.gshare.io",
    text: include_str!("../../packaging/crds/gshare.io_gpumodechanges.yaml"),
};

pub const GSHAREIMAGEBUILDS: CrdFile = CrdFile {
    path: "packaging/crds/gshare.io_gshareimagebuilds.yaml",
    upstream_path: "charts/gshare/crds/gshareimagebuilds.yaml",
    upstream_commit: "ad3dfd9b3c2de9e37fa279a2b229f5551edd4003",
    sha256: "cb20af13915a93abf032a95ea72bdd7e03875843bad7c2585e3c1b5bf0255724",
    name: "gshareimagebuilds.gshare.io",
    text: include_str!("../../packaging/crds/gshare.io_gshareimagebuilds.yaml"),
};

/// All three, in the order they are applied.
pub const ALL: [CrdFile; 3] = [GSHARESESSIONS, GPUMODECHANGES, GSHAREIMAGEBUILDS];

impl CrdFile {
    /// The CRD as a JSON object (the file is one YAML document).
    pub fn object(&self) -> Value {
        // The files are fixed at build time and checked by tests; a parse failure is a build bug.
        serde_saphyr::from_str(self.text).unwrap_or(Value::Null)
    }

    /// SHA-256 of the embedded text, hex.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.text.as_bytes()))
    }
}

/// What decides whether a CRD on a cluster is "ours": per served version, its name and schema.
/// Everything else (printer columns, annotations, status) may differ without consequence for
/// the operator's objects.
pub fn versions_signature(crd: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .map(|v| (v["name"].as_str().unwrap_or_default().to_string(), v["schema"]["openAPIV3Schema"].clone()))
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::cr;

    #[test]
    fn embedded_files_are_upstreams_bytes() {
        for f in ALL {
            assert_eq!(f.digest(), f.sha256, "{} changed: it must stay upstream's file byte for byte", f.path);
            let on_disk = std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f.path)).unwrap();
            assert_eq!(on_disk, f.text.as_bytes(), "{}", f.path);
            assert_eq!(f.upstream_commit.len(), 40);
            let o = f.object();
            assert_eq!(o["kind"], "CustomResourceDefinition");
            assert_eq!(o["metadata"]["name"], f.name);
            assert_eq!(o["spec"]["group"], "gshare.io");
            assert_eq!(o["spec"]["scope"], "Namespaced");
            assert!(o["spec"]["versions"][0]["subresources"]["status"].is_object());
        }
    }

    /// The CRD sessions are applied against is this file: same group, version, kind and plural,
    /// and every spec field the product sends is in its schema (an unknown one would be pruned).
    #[test]
    fn sessions_are_built_for_the_shipped_crd() {
        let crd = GSHARESESSIONS.object();
        assert_eq!(crd["spec"]["group"], cr::GROUP);
        assert_eq!(crd["spec"]["names"]["kind"], cr::KIND);
        assert_eq!(crd["spec"]["names"]["plural"], cr::PLURAL);
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], cr::VERSION);
        let props = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let required = v["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"].as_array().unwrap().clone();

        let mut s =
            crate::sessions::SessionRecord::new("ses_01JABCDEFGHJKMNPQRSTVWXYZ0", "clu_local", "gpu-a", "alice", 0);
        s.shape.resource_class = crate::sessions::model::ResourceClass::Gpu;
        s.shape.mode = Some(crate::sessions::model::GpuMode::Fractional);
        s.shape.gpu_mem_mb = Some(4096);
        s.shape.image = "ghcr.io/lab/jupyter:4".into();
        let obj = cr::build(&s, "gshare-sessions", &["gpu-node-1".to_string()]);
        assert_eq!(obj["apiVersion"], format!("{}/{}", cr::GROUP, cr::VERSION));
        let spec = obj["spec"].as_object().unwrap();
        for key in spec.keys() {
            assert!(props.get(key).is_some(), "spec.{key} is not in the shipped CRD's schema");
        }
        for key in required {
            assert!(spec.contains_key(key.as_str().unwrap()), "required spec.{key} is not sent");
        }
    }
}
