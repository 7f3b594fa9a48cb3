//! A full disk under the state file, on a real small tmpfs: writes answer 507
//! `storage_full` naming the data directory and its free space, `/readyz` and `/metrics` say the
//! store cannot write, reads and `/healthz` go on, audit entries are held, and once space is
//! freed the server writes again by itself (no restart) and every acknowledged write is there.
//! Mounting needs root (CI runs as root); where it is not allowed the test says so and skips.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gshare::RunningServer;
use gshare::clock::Clock;
use gshare::config::Config;
use serde_json::{Value, json};

use crate::support::init;

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().to_path_buf();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Self { _dir: dir, path })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes `path` in 256 KiB pieces until the filesystem refuses: returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0xa5u8; 256 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(28), "filling: {e}");
                break;
            }
        }
    }
    // The last partial pages too.
    let small = [0u8; 512];
    while f.write(&small).is_ok_and(|n| n > 0) {}
    written
}

async fn start(data: &Path) -> RunningServer {
    init();
    let config = Config::for_data_dir(data, &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    RunningServer::start(config, Clock::system()).await.unwrap()
}

fn offering(name: &str) -> Value {
    json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
           "gpu_mem_mb": 20480, "gpu_cores": 30, "cpu": 4, "mem_gb": 16, "max_runtime_sec": 7200})
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn add(&self, name: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/api/v1/offerings", self.base))
            .bearer_auth(&self.token)
            .json(&offering(name))
            .send()
            .await
            .unwrap()
    }

    async fn names(&self) -> Vec<String> {
        let res =
            self.http.get(format!("{}/api/v1/offerings", self.base)).bearer_auth(&self.token).send().await.unwrap();
        assert_eq!(res.status(), 200, "reads go on");
        let v: Value = res.json().await.unwrap();
        let items = v["data"].as_array().or(v.as_array()).cloned().unwrap_or_default();
        let mut names: Vec<String> = items.iter().map(|o| o["name"].as_str().unwrap().to_string()).collect();
        names.sort();
        names
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(format!("{}{path}", self.base)).send().await.unwrap()
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }

    async fn failed_logins(&self) -> usize {
        let v: Value = self
            .http
            .get(format!("{}/api/v1/audit?action=auth.login&size=100", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let items = v["data"].as_array().or(v["items"].as_array()).cloned().unwrap_or_default();
        items.iter().filter(|e| e["result"] != "success").count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_507_keeps_reads_and_writes_again_once_space_is_freed() {
    let fs = match Tmpfs::mount("24m") {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("storage_full: SKIPPED, cannot mount a tmpfs here ({e}); run as root to test a full disk");
            return;
        }
    };
    let data = fs.path.join("data");
    let s = start(&data).await;
    let c = Client {
        http: reqwest::Client::new(),
        base: s.base_url(),
        token: s.app.auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap(),
    };
    assert_eq!(c.add("before").await.status(), 201);
    let mut acknowledged = vec!["before".to_string()];

    // Fill the filesystem; the state file may still have room inside it for a few writes, so
    // write until one is refused (each one that is answered 201 must survive).
    let filler = fs.path.join("filler");
    fill(&filler);
    let mut refused = None;
    for i in 0..500 {
        let name = format!("during-{i}");
        let res = c.add(&name).await;
        match res.status().as_u16() {
            201 => acknowledged.push(name),
            _ => {
                refused = Some(res);
                break;
            }
        }
    }
    let res = refused.expect("no write was refused on a full filesystem");
    assert_eq!(res.status(), 507, "a full disk is 507, not a generic 500");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "storage_full", "{body}");
    let dir = data.display().to_string();
    assert!(body["error"]["message"].as_str().unwrap().contains(&dir), "names the data directory: {body}");
    assert_eq!(body["error"]["details"]["data_dir"], dir.as_str(), "{body}");
    assert!(body["error"]["details"]["avail_bytes"].is_u64(), "says the free space: {body}");

    // Refused up front from now on; reads, /healthz go on; /readyz and /metrics tell.
    let again = c.add("refused-again").await;
    assert_eq!(again.status(), 507);
    acknowledged.sort();
    assert_eq!(c.names().await, acknowledged);
    assert_eq!(c.get("/healthz").await.status(), 200);
    let ready = c.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["error"]["details"]["store_writable"], false, "{ready}");
    assert_eq!(ready["error"]["details"]["storage_full"], true, "{ready}");
    assert_eq!(c.metric("gshare_store_writable").await, Some(0.0));
    assert_eq!(c.metric("gshare_store_storage_full").await, Some(1.0));
    assert!(c.metric("gshare_store_write_refusals_total").await.unwrap() >= 1.0);

    // A failed sign-in meanwhile: its audit entry is held, not dropped.
    let logins_before = c.failed_logins().await;
    let res = c
        .http
        .post(format!("{}/api/v1/auth/login", c.base))
        .json(&json!({"username": "admin", "password": "not the password at all"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    s.app.audit.flush().await;
    assert!(c.metric("gshare_audit_entries_held").await.unwrap() >= 1.0);
    assert_eq!(c.metric("gshare_audit_entries_dropped_total").await, Some(0.0));

    // Space comes back: the next write goes through, no restart, and the held entry is written.
    std::fs::remove_file(&filler).unwrap();
    assert_eq!(c.add("after").await.status(), 201);
    acknowledged.push("after".into());
    acknowledged.sort();
    let ready = c.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["store_writable"], true);
    assert_eq!(c.metric("gshare_store_writable").await, Some(1.0));
    assert!(c.metric("gshare_store_reopens_total").await.unwrap() >= 1.0);
    s.app.audit.flush().await;
    assert_eq!(c.failed_logins().await, logins_before + 1, "the held audit entry was written");
    assert_eq!(c.metric("gshare_audit_entries_held").await, Some(0.0));
    assert_eq!(c.names().await, acknowledged);

    // Nothing acknowledged was lost (each 201 was a durable commit; read back above).
    s.stop().await;
}
