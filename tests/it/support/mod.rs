//! Shared test plumbing: an in-process server on an ephemeral port with its own temp dir, an
//! HTTP client, and a way to run the real `gshare` binary against the same data directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use gshare::clock::Clock;
use gshare::config::Config;
use gshare::{App, RunningServer};

pub mod oidc;
pub mod slapd;

pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    gshare::auth::jwt_crypto::install();
}

/// A server running in this process, with its data directory.
pub struct TestServer {
    pub server: Option<RunningServer>,
    pub dir: tempfile::TempDir,
    pub base: String,
    pub client: reqwest::Client,
    pub clock: Clock,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts with extra `GSHARE_*` settings on top of the defaults.
    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        init();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut all: Vec<(&str, &str)> = vec![("GSHARE_LISTEN", "127.0.0.1:0")];
        // Tests move the clock by hours with sessions running and no heartbeats: the session
        // liveness sweep (every 30 s of real time) must not end them as `pod_lost` meanwhile.
        // Tests of liveness set it back (tests/it/notify.rs).
        if !env.iter().any(|(k, _)| *k == "GSHARE_SESSION_STALE_AFTER") {
            all.push(("GSHARE_SESSION_STALE_AFTER", "1d"));
        }
        all.extend_from_slice(env);
        let config = Config::for_data_dir(&dir.path().join("data"), &all).expect("config");
        let clock = Clock::system();
        let server = RunningServer::start(config, clock.clone()).await.expect("server starts");
        // A new state file holds upstream's global policy: one live session per owner. Tests that
        // are not about fair sharing create several, so it is lifted here; `seed_policy` puts it
        // back (tests/it/policy.rs).
        let lifted = server.app.store.write(|txn| gshare::policy::model::POLICIES.delete(txn, "global"));
        assert!(lifted.await.expect("the seeded policy is lifted"), "a new state file has a global policy");
        let base = server.base_url();
        Self { server: Some(server), dir, base, client: reqwest::Client::new(), clock }
    }

    /// Puts upstream's global policy back (lifted at start).
    pub async fn seed_policy(&self) {
        let now = self.clock.now_ms();
        let seeded = self.app().store.write(move |txn| gshare::policy::model::seed_global(txn, now));
        assert!(seeded.await.expect("seed"));
    }

    /// Starts with a TOML configuration file's settings (tables such as `[ldap]` are file-only),
    /// with `env` on top.
    pub async fn start_with_toml(toml: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with_toml_on(toml, env, 0).await
    }

    /// The same, listening on `port` (0: one the kernel picks). A test that must name the
    /// server's URL in its configuration first (an OpenID provider's registered redirect URI)
    /// picks a free port beforehand.
    pub async fn start_with_toml_on(toml: &str, env: &[(&str, &str)], port: u16) -> Self {
        init();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut all: std::collections::BTreeMap<String, String> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        all.insert("GSHARE_LISTEN".into(), format!("127.0.0.1:{port}"));
        all.insert("GSHARE_DATA_DIR".into(), dir.path().join("data").display().to_string());
        let config = Config::from_toml(&dir.path().join("config.toml"), toml, &all).expect("config");
        let clock = Clock::system();
        let server = RunningServer::start(config, clock.clone()).await.expect("server starts");
        let base = server.base_url();
        Self { server: Some(server), dir, base, client: reqwest::Client::new(), clock }
    }

    /// The first admin's password (`<data_dir>/initial-admin-password`).
    pub fn initial_admin_password(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("initial-admin-password"))
            .expect("initial password")
            .trim()
            .to_string()
    }

    pub fn app(&self) -> &App {
        &self.server.as_ref().expect("running").app
    }

    /// The server's state, kept past a stop.
    pub fn app_arc(&self) -> std::sync::Arc<App> {
        self.server.as_ref().expect("running").app.clone()
    }

    /// The address the server listens on (for raw TCP clients).
    pub fn app_addr(&self) -> std::net::SocketAddr {
        self.server.as_ref().expect("running").addr
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("request")
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.stop().await;
        }
    }
}

/// Runs the real `gshare` binary with `args`, a data dir and extra environment; no config file.
pub fn gshare(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"));
    cmd.args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.env("GSHARE_DATA_DIR", data_dir).env("GSHARE_CONFIG", "/dev/null");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run gshare")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a JSON error envelope with `code`, returning the body.
pub async fn expect_error(res: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(res.status().as_u16(), status, "status");
    let request_id = res.headers().get("x-request-id").map(|v| v.to_str().unwrap_or("").to_string());
    let body: serde_json::Value = res.json().await.expect("JSON error body");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(body["error"]["details"].is_object(), "{body}");
    assert_eq!(body["error"]["request_id"].as_str(), request_id.as_deref(), "{body}");
    body
}
