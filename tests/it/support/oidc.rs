//! A real OpenID provider for the OIDC sign-in tests: npm `oidc-provider` driven by
//! `tests/oidc/provider.mjs` (installed by `hack/deps.sh`), on loopback on a port the kernel
//! picked, over HTTPS with a certificate from a test CA. Ready when it prints `ready <issuer>`
//! (no sleeps); stopped when dropped. Also a browser for the tests: follows the flow's redirects
//! by hand, keeping each origin's cookies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::slapd::TestCa;

/// The client secret the provider registers gshare with.
pub const CLIENT_SECRET: &str = "gshare-test-client-secret-0123456789";

pub struct Provider {
    pub issuer: String,
    pub dir: tempfile::TempDir,
    /// The test CA's certificate, for `oidc.ca_file`.
    pub ca_file: PathBuf,
    pub ca_pem: String,
    child: tokio::process::Child,
}

fn script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

/// A free loopback port, for a server that must be named before it starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Provider {
    /// Starts one registering `redirect_uri`; `None` (the test says so and passes) only where
    /// Node or the npm package is missing outside CI — CI installs them and fails without.
    pub async fn start(redirect_uri: &str) -> Option<Self> {
        let dir = script_dir();
        let node_ok = std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
        if !node_ok || !dir.join("node_modules/oidc-provider").is_dir() {
            assert!(std::env::var_os("CI").is_none(), "node or tests/oidc/node_modules missing: run hack/deps.sh");
            eprintln!("node or oidc-provider is not installed (hack/deps.sh installs them): skipping");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let ca = TestCa::new("gshare test OIDC CA");
        let (cert, key) = ca.leaf();
        std::fs::write(tmp.path().join("cert.pem"), cert).unwrap();
        std::fs::write(tmp.path().join("key.pem"), key).unwrap();
        let ca_file = tmp.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let mut child = tokio::process::Command::new("node")
            .arg(dir.join("provider.mjs"))
            .args(["--redirect-uri", redirect_uri, "--client-secret", CLIENT_SECRET])
            .arg("--cert")
            .arg(tmp.path().join("cert.pem"))
            .arg("--key")
            .arg(tmp.path().join("key.pem"))
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Bounded, not a sleep: the line comes once the provider listens.
        let issuer = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(issuer) = line.strip_prefix("ready ") {
                    return issuer.to_string();
                }
            }
            panic!("the provider exited before it was ready");
        })
        .await
        .expect("the provider says ready within 60 s");
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Some(Self { issuer, dir: tmp, ca_file, ca_pem: ca.pem(), child })
    }

    /// A client trusting the test CA that follows no redirects.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// Replaces the provider's signing key (the old one is no longer published).
    pub async fn rotate_keys(&self) -> serde_json::Value {
        let res = self.client().post(format!("{}/__test/rotate", self.issuer)).send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    }

    /// Stops the provider (an issuer that is down).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A browser, as far as the flow needs one: each origin's cookies, redirects followed by hand.
pub struct Browser {
    pub client: reqwest::Client,
    jars: HashMap<String, HashMap<String, String>>,
}

fn origin(url: &str) -> String {
    let u = reqwest::Url::parse(url).unwrap();
    format!("{}://{}:{}", u.scheme(), u.host_str().unwrap(), u.port_or_known_default().unwrap())
}

impl Browser {
    pub fn new(client: reqwest::Client) -> Self {
        Self { client, jars: HashMap::new() }
    }

    /// GET with this origin's cookies; takes the answer's `Set-Cookie`s (an empty value or
    /// `Max-Age=0` removes one).
    pub async fn get(&mut self, url: &str) -> reqwest::Response {
        let o = origin(url);
        let jar = self.jars.entry(o).or_default();
        let cookie = jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let mut req = self.client.get(url);
        if !cookie.is_empty() {
            req = req.header("cookie", cookie);
        }
        let res = req.send().await.unwrap();
        for v in res.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let first = v.split(';').next().unwrap();
            let (k, val) = first.split_once('=').unwrap();
            if val.is_empty() || v.contains("Max-Age=0") || v.contains("max-age=0") {
                jar.remove(k);
            } else {
                jar.insert(k.to_string(), val.to_string());
            }
        }
        res
    }

    pub fn cookie(&self, url: &str, name: &str) -> Option<String> {
        self.jars.get(&origin(url)).and_then(|j| j.get(name)).cloned()
    }

    /// Sets or drops one of an origin's cookies (a tampered or another browser's binding).
    pub fn set_cookie(&mut self, url: &str, name: &str, value: Option<&str>) {
        let jar = self.jars.entry(origin(url)).or_default();
        match value {
            Some(v) => jar.insert(name.to_string(), v.to_string()),
            None => jar.remove(name),
        };
    }

    /// Follows redirects from `url` until one leads to a URL starting with `stop` (answered
    /// without being requested) or an answer is not a redirect (answered as an error).
    pub async fn follow_until(&mut self, url: &str, stop: &str) -> Result<String, reqwest::Response> {
        let mut next = url.to_string();
        for _ in 0..20 {
            if next.starts_with(stop) {
                return Ok(next);
            }
            let res = self.get(&next).await;
            if !res.status().is_redirection() {
                return Err(res);
            }
            let loc = res.headers()["location"].to_str().unwrap().to_string();
            next = reqwest::Url::parse(&next).unwrap().join(&loc).unwrap().to_string();
        }
        panic!("more than 20 redirects from {url}");
    }
}

/// A query parameter of a URL.
pub fn query(url: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(url).unwrap().query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}
