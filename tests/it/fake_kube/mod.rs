//! Fidelity tests of the fake Kubernetes API server (`gshare-fake-kube`): real `kubectl` and
//! the `kube` crate against it, bad input, and the failure knobs.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests fail loudly by design

mod bad_input;
mod kube_client;
mod kubectl;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gshare_fake_kube::{ClusterSpec, FakeCluster};
use serde_json::Value;

pub const CRD_YAML: &str = include_str!("gsharesession-crd.yaml");

pub const SESSION_NS_YAML: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: gshare-sessions
";

pub fn session_yaml(user: &str, mem: u64) -> String {
    format!(
        "apiVersion: gshare.io/v1
kind: GShareSession
metadata:
  name: s1
  namespace: gshare-sessions
spec:
  user: {user}
  gpuMemMb: {mem}
"
    )
}

/// A fake cluster plus a private directory with its kubeconfig and kubectl's caches.
pub struct Harness {
    pub cluster: FakeCluster,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Harness {
    pub async fn start(spec: ClusterSpec) -> Harness {
        let cluster = FakeCluster::start(spec).await.expect("fake cluster starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, cluster.kubeconfig_yaml()).expect("write kubeconfig");
        Harness { cluster, dir, kubeconfig }
    }

    pub async fn default() -> Harness {
        Harness::start(ClusterSpec::default()).await
    }

    /// Writes a file into the harness directory and returns its path.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write file");
        p
    }

    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        kubectl_command(&self.kubeconfig, self.dir.path(), args)
    }

    /// Runs kubectl on the blocking pool (the server shares the test's runtime).
    pub async fn kubectl(&self, args: &[&str]) -> Output {
        let mut cmd = self.kubectl_command(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs (is it installed?)"))
            .await
            .expect("kubectl task")
    }

    /// Runs kubectl, asserts success, returns stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub async fn kubectl_json(&self, args: &[&str]) -> Value {
        let out = self.kubectl_ok(args).await;
        serde_json::from_str(&out).expect("kubectl printed JSON")
    }

    pub async fn kube_client(&self) -> kube::Client {
        kube_client_for(&self.kubeconfig).await
    }

    /// A raw HTTP client trusting the cluster's CA (no credentials of its own).
    pub fn http(&self) -> reqwest::Client {
        let mut b = reqwest::Client::builder();
        if let Some(tls) = self.cluster.client_tls_config() {
            b = b.use_preconfigured_tls(tls);
        }
        b.build().expect("reqwest client")
    }
}

pub fn kubectl_command(kubeconfig: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(home.join("kube-cache"))
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG");
    cmd
}

pub async fn kube_client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}
