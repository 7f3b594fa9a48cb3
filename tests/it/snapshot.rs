//! Snapshots: save while the server runs and while it does not, ls/prune, restore and
//! every refusal with the current state untouched, secrets under a passphrase, a failing snapshot
//! directory with the server still serving, the way back named when the state file does not open,
//! the reconcile after a restore, export, and the 0.1.0 fixture opening in this build.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gshare::clock::Clock;
use gshare::config::Config;
use gshare::snapshot::format;
use gshare::{RunningServer, StartError};
use serde_json::{Value, json};
use sha2::Digest;

use crate::support::{gshare, init, stderr, stdout};

/// A server on a given data directory (restarts keep the directory).
async fn start_on(data: &Path, env: &[(&str, &str)]) -> Result<RunningServer, StartError> {
    init();
    let mut all: Vec<(&str, &str)> = vec![("GSHARE_LISTEN", "127.0.0.1:0")];
    all.extend_from_slice(env);
    RunningServer::start(Config::for_data_dir(data, &all).unwrap(), Clock::system()).await
}

/// The real binary serving on an ephemeral port (so that, once stopped, the CLI can open the
/// file: an in-process server's handle may outlive its stop).
struct Srv {
    child: tokio::process::Child,
    base: String,
    addr: String,
    token: String,
}

impl Srv {
    async fn start(data: &Path, env: &[(&str, &str)]) -> Srv {
        use tokio::io::{AsyncBufReadExt, BufReader};
        init();
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_gshare"));
        cmd.arg("serve")
            .env_clear()
            .env("GSHARE_DATA_DIR", data)
            .env("GSHARE_CONFIG", "/dev/null")
            .env("GSHARE_LISTEN", "127.0.0.1:0")
            .env("GSHARE_LOG_FORMAT", "json")
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next_line().await.unwrap().expect("the server exited before serving");
            if line.contains("gshare serving") {
                let v: Value = serde_json::from_str(&line).unwrap();
                break v["fields"]["addr"].as_str().or(v["addr"].as_str()).unwrap().to_string();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let token = ok(&gshare(data, &["admin", "token"], &[])).lines().last().unwrap().trim().to_string();
        Srv { child, base: format!("http://{addr}"), addr, token }
    }

    /// SIGTERM and wait: a graceful stop that releases the state file.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "{status}");
    }
}

async fn add_offering_at(base: &str, token: &str, name: &str) {
    let body = json!({"name": name, "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
                      "gpu_mem_mb": 20480, "gpu_cores": 30, "cpu": 4, "mem_gb": 16, "max_runtime_sec": 7200});
    let res = reqwest::Client::new()
        .post(format!("{base}/api/v1/offerings"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
}

async fn names_at(base: &str, token: &str) -> Vec<String> {
    let v: Value = reqwest::Client::new()
        .get(format!("{base}/api/v1/offerings"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = v["data"].as_array().or(v.as_array()).cloned().unwrap_or_default();
    let mut names: Vec<String> = items.iter().map(|o| o["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

fn admin(s: &RunningServer) -> String {
    s.app.auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

/// `/readyz` as an admin sees it (with the snapshot's file and error).
async fn admin_readyz(s: &RunningServer) -> reqwest::Result<reqwest::Response> {
    reqwest::Client::new().get(format!("{}/readyz", s.base_url())).bearer_auth(admin(s)).send().await
}

async fn add_offering(s: &RunningServer, name: &str) {
    add_offering_at(&s.base_url(), &admin(s), name).await
}

async fn offering_names(s: &RunningServer) -> Vec<String> {
    names_at(&s.base_url(), &admin(s)).await
}

fn sha(path: &Path) -> String {
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

fn snapshots_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(".gshare-snapshot")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "stdout: {}\nstderr: {}", stdout(o), stderr(o));
    stdout(o)
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_ls_prune_and_restore_round_trip_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let s = Srv::start(&data, &[]).await;
    add_offering_at(&s.base, &s.token, "before").await;
    s.stop().await;

    // Offline (no server): straight from the file, into snapshot_dir.
    let out = ok(&gshare(&data, &["snapshot", "save"], &[]));
    assert!(out.contains("saved "), "{out}");
    assert!(out.contains("left out"), "without --include-secrets the snapshot says what it left out: {out}");
    let dir = data.join("snapshots");
    let first = snapshots_in(&dir);
    assert_eq!(first.len(), 1);
    assert_eq!((mode(&dir), mode(&first[0])), (0o700, 0o600));
    let bytes = std::fs::read(&first[0]).unwrap();
    let snap = format::decode(&bytes).unwrap();
    assert_eq!(snap.header.format, "gshare-snapshot");
    assert_eq!(snap.header.schema_version, gshare::store::schema_of(gshare::MIGRATIONS));
    assert_eq!(snap.header.binary_version, env!("CARGO_PKG_VERSION"));
    assert!(!snap.header.secrets.included && !snap.header.secrets.omitted.is_empty());
    assert_eq!(snap.header.tables.get("offerings"), Some(&1));

    // The state moves on; the restore takes it back, keeping the current file aside.
    let s = Srv::start(&data, &[]).await;
    add_offering_at(&s.base, &s.token, "after").await;
    assert_eq!(names_at(&s.base, &s.token).await, ["after", "before"]);
    s.stop().await;
    let out = ok(&gshare(&data, &["snapshot", "restore", first[0].to_str().unwrap()], &[]));
    assert!(out.contains("restored the state"), "{out}");
    let aside: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gshare.redb.before-restore-"))
        .collect();
    assert_eq!(aside.len(), 1, "the replaced state file is kept");
    assert_eq!(mode(&data.join("gshare.redb")), 0o600);
    let s = Srv::start(&data, &[]).await;
    assert_eq!(names_at(&s.base, &s.token).await, ["before"]);
    s.stop().await;

    // ls lists them oldest first; prune keeps the newest N.
    for _ in 0..2 {
        ok(&gshare(&data, &["snapshot", "save"], &[]));
    }
    let ls = ok(&gshare(&data, &["snapshot", "ls"], &[]));
    assert_eq!(ls.lines().count(), 4, "{ls}");
    let out = ok(&gshare(&data, &["snapshot", "prune", "--keep", "1"], &[]));
    assert_eq!(out.lines().filter(|l| l.starts_with("deleted ")).count(), 2, "{out}");
    let left = snapshots_in(&dir);
    assert_eq!(left.len(), 1);
    assert!(!left.contains(&first[0]), "the oldest went first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn save_while_the_server_runs_goes_through_its_api_and_restore_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let s = start_on(&data, &[]).await.unwrap();
    add_offering(&s, "live").await;
    let listen = s.addr.to_string();
    let env = [("GSHARE_LISTEN", listen.as_str())];

    // Into a file of the caller's choosing: downloaded from the server, written by the CLI.
    let file = tmp.path().join("out").join("manual.snap");
    std::fs::create_dir(tmp.path().join("out")).unwrap();
    let out = ok(&gshare(&data, &["snapshot", "save", file.to_str().unwrap()], &env));
    assert!(out.contains(file.to_str().unwrap()), "{out}");
    assert_eq!(mode(&file), 0o600);
    let snap_bytes = std::fs::read(&file).unwrap();
    let snap = format::decode(&snap_bytes).unwrap();
    assert_eq!(snap.header.tables.get("offerings"), Some(&1));
    // Into the server's snapshot_dir, written by the server.
    ok(&gshare(&data, &["snapshot", "save", "--reason", "before-change"], &env));
    let saved = snapshots_in(&data.join("snapshots"));
    assert_eq!(saved.len(), 1);
    assert!(saved[0].to_string_lossy().contains("before-change"));
    let ready: Value = admin_readyz(&s).await.unwrap().json().await.unwrap();
    assert_eq!(ready["snapshot"]["last_file"], saved[0].to_str().unwrap(), "{ready}");
    let metrics = reqwest::get(format!("{}/metrics", s.base_url())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gshare_snapshot_failures_total 0"), "{metrics}");
    assert!(!metrics.contains("gshare_snapshot_last_success_timestamp_seconds 0\n"), "{metrics}");
    // The API refuses what it should.
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/snapshots", s.base_url());
    assert_eq!(http.post(&url).send().await.unwrap().status(), 401);
    let res = http.post(&url).bearer_auth(admin(&s)).json(&json!({"reason": "../../etc"})).send().await.unwrap();
    crate::support::expect_error(res, 422, "validation_failed").await;

    // Restore while the server holds the file: refused, nothing changed.
    let out = gshare(&data, &["snapshot", "restore", file.to_str().unwrap()], &env);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("running server holds"), "{}", stderr(&out));
    assert!(
        std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().contains("before-restore"))
    );
    assert_eq!(offering_names(&s).await, ["live"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshots_are_refused_and_the_state_is_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let s = Srv::start(&data, &[]).await;
    add_offering_at(&s.base, &s.token, "current").await;
    s.stop().await;
    let pass = tmp.path().join("pass");
    std::fs::write(&pass, "correct horse battery staple\n").unwrap();
    let good = tmp.path().join("good.snap");
    let out = ok(&gshare(
        &data,
        &["snapshot", "save", good.to_str().unwrap(), "--include-secrets", "--passphrase-file", pass.to_str().unwrap()],
        &[],
    ));
    assert!(!out.contains("left out"), "{out}");
    let bytes = std::fs::read(&good).unwrap();
    let snap = format::decode(&bytes).unwrap();
    assert!(snap.header.secrets.included);
    assert!(snap.header.secrets.files.iter().any(|f| f.starts_with("keys/internal/")), "{:?}", snap.header.secrets);
    // The key material is not readable in the file.
    let ring = std::fs::read_to_string(data.join("keys/internal/ring.json")).unwrap();
    let pem_line = ring.lines().find(|l| l.contains("PRIVATE KEY")).map(|_| "PRIVATE KEY").unwrap_or("PRIVATE KEY");
    assert!(!String::from_utf8_lossy(&bytes).contains(pem_line));

    let before = sha(&data.join("gshare.redb"));
    let keys_before = sha(&data.join("keys/internal/ring.json"));
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", bytes[..bytes.len() - 100].to_vec(), "truncated"),
        ("other product", b"SQLite format 3\0 this is someone else's file".to_vec(), "not a gshare snapshot"),
        (
            "flipped byte",
            {
                let mut b = bytes.clone();
                let n = b.len() - 10;
                b[n] ^= 0xff;
                b
            },
            "damaged",
        ),
    ];
    // From a newer gshare, and from a newer schema: re-encoded with a valid hash.
    let mut newer = snap.header.clone();
    newer.binary_version = "99.0.0".into();
    cases.push(("newer binary", format::encode(newer, snap.state, snap.secrets).unwrap(), "newer than this one"));
    let mut newer_schema = snap.header.clone();
    newer_schema.schema_version = gshare::store::schema_of(gshare::MIGRATIONS) + 1;
    cases.push((
        "newer schema",
        format::encode(newer_schema, snap.state, snap.secrets).unwrap(),
        "newer than this gshare",
    ));
    for (what, content, expect) in cases {
        let f = tmp.path().join("bad.snap");
        std::fs::write(&f, content).unwrap();
        let out = gshare(
            &data,
            &["snapshot", "restore", f.to_str().unwrap(), "--passphrase-file", pass.to_str().unwrap()],
            &[],
        );
        assert!(!out.status.success(), "{what}");
        assert!(stderr(&out).contains(expect), "{what}: {}", stderr(&out));
        assert_eq!(sha(&data.join("gshare.redb")), before, "{what}: state touched");
    }
    // A wrong passphrase: named, nothing touched.
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "not the passphrase at all").unwrap();
    let out = gshare(
        &data,
        &["snapshot", "restore", good.to_str().unwrap(), "--passphrase-file", wrong.to_str().unwrap()],
        &[],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("wrong passphrase"), "{}", stderr(&out));
    // No passphrase at all (not a terminal): asked for, nothing touched.
    let out = gshare(&data, &["snapshot", "restore", good.to_str().unwrap()], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--skip-secrets"), "{}", stderr(&out));
    assert_eq!(sha(&data.join("gshare.redb")), before);
    assert_eq!(sha(&data.join("keys/internal/ring.json")), keys_before);
    assert!(
        std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().contains("before-restore"))
    );

    // Into another install: with the secrets, its keys come along; without, a warning.
    let other = tmp.path().join("other");
    Srv::start(&other, &[]).await.stop().await;
    let out = gshare(&other, &["snapshot", "restore", good.to_str().unwrap(), "--skip-secrets"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("operator tokens"), "{}", stderr(&out));
    let out = gshare(
        &other,
        &["snapshot", "restore", good.to_str().unwrap()],
        &[("GSHARE_SNAPSHOT_PASSPHRASE", "correct horse battery staple")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("operator tokens"), "{}", stderr(&out));
    assert_eq!(sha(&other.join("keys/internal/ring.json")), keys_before);
    assert_eq!(mode(&other.join("keys/internal/ring.json")), 0o600);
    let s = start_on(&other, &[]).await.unwrap();
    assert_eq!(offering_names(&s).await, ["current"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_snapshot_dir_shows_in_status_and_the_server_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let snaps = tmp.path().join("snaps");
    let s = start_on(&data, &[("GSHARE_SNAPSHOT_DIR", snaps.to_str().unwrap())]).await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/snapshots", s.base_url());
    let res = http.post(&url).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let good: Value = res.json().await.unwrap();
    let kept = PathBuf::from(good["path"].as_str().unwrap());
    let good_bytes = std::fs::read(&kept).unwrap();

    // The directory becomes unusable (here: a file where it was; a full disk fails the same write).
    std::fs::rename(&snaps, tmp.path().join("aside")).unwrap();
    std::fs::write(&snaps, b"not a directory").unwrap();
    let res = http.post(&url).bearer_auth(admin(&s)).send().await.unwrap();
    crate::support::expect_error(res, 507, "snapshot_failed").await;
    let ready = admin_readyz(&s).await.unwrap();
    assert_eq!(ready.status(), 200, "a failing snapshot does not make the server unready");
    let ready: Value = ready.json().await.unwrap();
    assert!(ready["snapshot"]["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{ready}");
    assert_eq!(ready["snapshot"]["failures"], 1);
    assert_eq!(ready["snapshot"]["last_file"], kept.to_str().unwrap(), "the last good one is still named");
    let metrics = reqwest::get(format!("{}/metrics", s.base_url())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("gshare_snapshot_failures_total 1"), "{metrics}");
    assert!(metrics.contains(&format!("gshare_snapshot_last_size_bytes {}", good_bytes.len())), "{metrics}");
    add_offering(&s, "still-serving").await;

    // Back in place: the older snapshot is intact, the next one succeeds and clears the error.
    std::fs::remove_file(&snaps).unwrap();
    std::fs::rename(tmp.path().join("aside"), &snaps).unwrap();
    assert_eq!(std::fs::read(&kept).unwrap(), good_bytes);
    let res = http.post(&url).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let ready: Value = admin_readyz(&s).await.unwrap().json().await.unwrap();
    assert!(ready["snapshot"]["last_error"].is_null(), "{ready}");
    assert_eq!(snapshots_in(&snaps).len(), 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_that_does_not_open_names_the_newest_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    Srv::start(&data, &[]).await.stop().await;
    ok(&gshare(&data, &["snapshot", "save"], &[]));
    let newest = snapshots_in(&data.join("snapshots")).pop().unwrap();
    std::fs::write(data.join("gshare.redb"), b"this is not a database at all, just some text that is long enough")
        .unwrap();
    let e = start_on(&data, &[]).await.err().expect("a damaged file does not open").to_string();
    assert!(e.contains(&format!("gshare snapshot restore {}", newest.display())), "{e}");
    // The named command works.
    ok(&gshare(&data, &["snapshot", "restore", newest.to_str().unwrap()], &[]));
    start_on(&data, &[]).await.unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restore_unknown_crs_are_listed_not_deleted() {
    use kube::api::{Api, DynamicObject, PostParams};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let c = crate::sessions::cluster("restore").await;
    let s = Srv::start(&data, &[]).await;
    let body = json!({"name": "restore", "role": "primary",
        "kubeconfig_b64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, c.kubeconfig_yaml())});
    let res = reqwest::Client::new()
        .post(format!("{}/api/v1/clusters", s.base))
        .bearer_auth(&s.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let cid = res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let file = tmp.path().join("s.snap");
    ok(&gshare(&data, &["snapshot", "save", file.to_str().unwrap()], &[("GSHARE_LISTEN", s.addr.as_str())]));
    s.stop().await;
    // The cluster runs a GShareSession the snapshot does not know (made after it).
    let kc = kube::config::Kubeconfig::from_yaml(&c.kubeconfig_yaml()).unwrap();
    let client =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, "gshare-sessions", &gshare::sessions::cr::api_resource());
    let cr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gshare.io/v1", "kind": "GShareSession",
        "metadata": {"name": "ses-01jorphan0000000000000000", "namespace": "gshare-sessions"},
        "spec": {"clusterId": cid, "offeringId": "off_x", "owner": "u", "clusterMode": "single",
                 "resourceClass": "cpu", "image": "ghcr.io/lab/jupyter:4"}}))
    .unwrap();
    api.create(&PostParams::default(), &cr).await.unwrap();
    ok(&gshare(&data, &["snapshot", "restore", file.to_str().unwrap()], &[]));
    let s = start_on(&data, &[]).await.unwrap();
    s.app.snapshots.reconciled().await;
    let report = s.app.snapshots.status().restore.unwrap();
    assert_eq!(report.clusters_probed, 1);
    assert_eq!(report.unknown_crs, [format!("{cid}/ses-01jorphan0000000000000000")], "{report:?}");
    assert!(api.get_opt("ses-01jorphan0000000000000000").await.unwrap().is_some(), "listed, never deleted");
    assert!(!data.join(gshare::snapshot::RESTORE_MARKER).exists());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_documented_json_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let s = Srv::start(&data, &[]).await;
    add_offering_at(&s.base, &s.token, "exported").await;
    // The audit writer commits on its own task: wait until the change is in the log, so the live
    // export (quick over the admin socket) cannot run ahead of it.
    let client = reqwest::Client::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let v: Value = client
                .get(format!("{}/api/v1/audit?action=offering.*", s.base))
                .bearer_auth(&s.token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if v["data"].as_array().is_some_and(|d| !d.is_empty()) {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the offering's audit entry is written");
    let listen = s.addr.clone();
    // While the server runs (through its API) and from a snapshot file: the same lines.
    let live = ok(&gshare(&data, &["export"], &[("GSHARE_LISTEN", listen.as_str())]));
    s.stop().await;
    let file = tmp.path().join("s.snap");
    ok(&gshare(&data, &["snapshot", "save", file.to_str().unwrap()], &[]));
    let from = ok(&gshare(&data, &["export", "--from", file.to_str().unwrap()], &[]));
    let kinds = |text: &str| -> Vec<(String, Value)> {
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                assert_eq!(v.as_object().unwrap().len(), 2, "{l}");
                (v["kind"].as_str().unwrap().to_string(), v["record"].clone())
            })
            .collect()
    };
    let live = kinds(&live);
    assert!(live.iter().any(|(k, r)| k == "offering" && r["name"] == "exported"), "{live:?}");
    assert!(live.iter().any(|(k, _)| k == "audit"));
    assert!(live.iter().all(|(k, _)| ["cluster", "node", "gpu", "offering", "session", "audit"].contains(&k.as_str())));
    let from = kinds(&from);
    assert_eq!(
        from.iter().filter(|(k, _)| k == "offering").collect::<Vec<_>>(),
        live.iter().filter(|(k, _)| k == "offering").collect::<Vec<_>>()
    );
}

/// Every committed fixture (one per schema, made by `cargo run --example make-fixture`) opens in
/// this build: the state file migrates to the current schema with its records readable, and the
/// snapshot restores and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_opens_and_migrates() {
    use gshare::clusters::model::CLUSTERS;
    use gshare::inventory::model::GPUS;
    use gshare::sessions::model::{LIVE_SESSIONS, OFFERINGS, SESSIONS};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut states = 0;
    for e in std::fs::read_dir(&fixtures).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if name.ends_with(".redb") {
            states += 1;
            std::fs::copy(e.path(), data.join("gshare.redb")).unwrap();
        } else if name.ends_with(".gshare-snapshot") {
            let bytes = std::fs::read(e.path()).unwrap();
            gshare::snapshot::restore(&Config::for_data_dir(&data, &[]).unwrap(), &bytes, None, 0).unwrap();
        } else {
            continue;
        }
        let s = start_on(&data, &[]).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.app.store.schema_version().unwrap(), gshare::store::schema_of(gshare::MIGRATIONS), "{name}");
        let (clusters, gpus, offerings, sessions, live) = s
            .app
            .store
            .read(|t| {
                Ok((
                    CLUSTERS.list(t)?.len(),
                    GPUS.list(t)?.len(),
                    OFFERINGS.list(t)?.len(),
                    SESSIONS.list(t)?.len(),
                    LIVE_SESSIONS.list(t)?.len(),
                ))
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((clusters, gpus, offerings, sessions, live), (1, 4, 1, 2, 1), "{name}");
        // The cluster counters, on the cluster row before schema 5, are the inventory's row now.
        let counts = s
            .app
            .store
            .read(|t| {
                let (id, _) = CLUSTERS.list(t)?.pop().expect("one cluster");
                gshare::inventory::model::CLUSTER_COUNTS.get(t, &id)
            })
            .await
            .unwrap();
        assert_eq!(counts.map(|c| c.node_count), Some(2), "{name}");
        // The session list's indexes (schema 3) were built from its sessions, and answer.
        use gshare::sessions::model::ListIndex;
        let (indexed, stored) = s
            .app
            .store
            .read(|t| {
                let mut indexed = Vec::new();
                for idx in ListIndex::ALL {
                    indexed.push(idx.set().keys(t)?.len());
                }
                let stored = SESSIONS.list(t)?.into_iter().map(|(_, r)| r).collect::<Vec<_>>();
                Ok((indexed, stored))
            })
            .await
            .unwrap();
        assert_eq!(indexed, [2, 2, 2], "{name}");
        for r in &stored {
            let q = gshare::sessions::SessionQuery {
                owner: Some(r.owner.clone()),
                cluster_id: Some(r.cluster_id.clone()),
                phase: Some(r.phase),
                page: 1,
                size: 20,
                ..Default::default()
            };
            let page = s.app.sessions.list(q).await.unwrap();
            assert!(page.data.iter().any(|v| v.id == r.id), "{name}: {} by its owner, cluster and phase", r.id);
        }
        assert_eq!(offering_names(&s).await, ["a100-slice"], "{name}");
        s.stop().await;
    }
    assert!(states >= 1, "no state fixture under tests/fixtures");
}

/// The unit's ExecStartPre takes a pre-upgrade snapshot once, when another version ran last, and
/// prune never deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_upgrade_snapshot_is_taken_once_and_kept() {
    const UNIT: &str = include_str!("../../packaging/systemd/gshare.service");
    let pre: Vec<&str> = UNIT.lines().filter_map(|l| l.strip_prefix("ExecStartPre=-")).collect();
    assert_eq!(pre.len(), 1);
    let args: Vec<&str> = pre[0].split_whitespace().collect();
    assert_eq!(args[0], "/usr/bin/gshare");
    assert_eq!(&args[1..4], ["snapshot", "save", "--pre-upgrade"]);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let argv: Vec<&str> =
        args[1..].iter().copied().filter(|a| !a.starts_with("--config") && !a.starts_with('/')).collect();
    // A fresh install: nothing to keep.
    let out = gshare(&data, &argv, &[]);
    assert!(out.status.success() && stderr(&out).contains("no upgrade pending"), "{}", stderr(&out));
    Srv::start(&data, &[]).await.stop().await;
    assert_eq!(
        std::fs::read_to_string(data.join(gshare::snapshot::VERSION_MARKER)).unwrap(),
        env!("CARGO_PKG_VERSION")
    );
    // Same version again: nothing.
    let out = gshare(&data, &argv, &[]);
    assert!(out.status.success() && stderr(&out).contains("no upgrade pending"), "{}", stderr(&out));
    assert!(snapshots_in(&data.join("snapshots")).is_empty());
    // The state was last opened by an older gshare: one snapshot, named and kept by prune.
    std::fs::write(data.join(gshare::snapshot::VERSION_MARKER), "0.0.9").unwrap();
    ok(&gshare(&data, &argv, &[]));
    let taken = snapshots_in(&data.join("snapshots"));
    assert_eq!(taken.len(), 1);
    assert!(taken[0].to_string_lossy().contains("pre-upgrade"));
    ok(&gshare(&data, &["snapshot", "prune", "--keep", "1"], &[]));
    ok(&gshare(&data, &["snapshot", "save"], &[]));
    ok(&gshare(&data, &["snapshot", "save"], &[]));
    ok(&gshare(&data, &["snapshot", "prune", "--keep", "1"], &[]));
    let left = snapshots_in(&data.join("snapshots"));
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&taken[0]));
    // Five upgrades later only the newest three pre-upgrade snapshots are kept.
    for old in ["0.0.10", "0.0.11", "0.0.12", "0.0.13"] {
        std::fs::write(data.join(gshare::snapshot::VERSION_MARKER), old).unwrap();
        ok(&gshare(&data, &argv, &[]));
    }
    ok(&gshare(&data, &["snapshot", "prune", "--keep", "1"], &[]));
    let left = snapshots_in(&data.join("snapshots"));
    let upgrades: Vec<_> = left.iter().filter(|p| p.to_string_lossy().contains("pre-upgrade")).collect();
    assert_eq!((upgrades.len(), left.len()), (3, 4), "{left:?}");
    assert!(!left.contains(&taken[0]), "the oldest pre-upgrade snapshot went");
}

/// API callers cannot name a snapshot `pre-upgrade` (those are pruned apart).
#[tokio::test]
async fn the_api_cannot_take_a_pre_upgrade_snapshot() {
    let s = crate::support::TestServer::start().await;
    let token = s.app().auth.api.mint("admin:admin", std::time::Duration::from_secs(600)).unwrap();
    let res = s
        .client
        .post(s.url("/api/v1/snapshots"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"reason": "pre-upgrade"}))
        .send()
        .await
        .unwrap();
    let body = crate::support::expect_error(res, 422, "validation_failed").await;
    assert!(body.to_string().contains("--pre-upgrade"), "{body}");
    assert!(snapshots_in(&s.data_dir().join("snapshots")).is_empty());
    s.stop().await;
}

/// kill -9 in the middle of `snapshot save`: the final name never holds a partial file (the
/// bytes go to `.<name>.tmp-*` and are renamed only after fsync), and the next save succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_save_leaves_no_partial_file_under_the_final_name() {
    const BLOBS: gshare::store::JsonTable<String> = gshare::store::JsonTable::new("crash_blobs");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    {
        // ~30 MB of state so that writing the snapshot takes a while.
        let store = gshare::store::Store::open(&data.join("gshare.redb"), gshare::MIGRATIONS).unwrap();
        for chunk in 0..3 {
            store
                .write(move |txn| {
                    let blob = "x".repeat(10_000);
                    for i in 0..1000 {
                        BLOBS.put(txn, &format!("{chunk:02}-{i:05}"), &blob)?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
        }
    }
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let target = out_dir.join("s.snap");
    let mut caught = 0;
    for _ in 0..3 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"))
            .args(["snapshot", "save", target.to_str().unwrap()])
            .env_clear()
            .env("GSHARE_DATA_DIR", &data)
            .env("GSHARE_CONFIG", "/dev/null")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Watch the directory until the temp file appears (or the save is over), then kill -9.
        loop {
            let temp = std::fs::read_dir(&out_dir)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".s.snap.tmp-"));
            if temp {
                child.kill().unwrap();
                caught += 1;
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::yield_now();
        }
        child.wait().unwrap();
        // Whatever moment it died at, the final name is absent or a whole, valid snapshot.
        if target.exists() {
            format::decode(&std::fs::read(&target).unwrap()).expect("a complete snapshot under the final name");
            std::fs::remove_file(&target).unwrap();
        }
    }
    eprintln!("killed mid-write {caught} of 3 times");
    // The next save completes, beside any leftover temp file.
    ok(&gshare(&data, &["snapshot", "save", target.to_str().unwrap()], &[]));
    let snap = std::fs::read(&target).unwrap();
    assert_eq!(format::decode(&snap).unwrap().header.tables.get("crash_blobs"), Some(&3_000));
}

/// `GET /api/v1/snapshots/status` (the console's snapshot section): the schedule, then the last
/// result once a snapshot was taken through the API.
#[tokio::test]
async fn the_status_route_tells_the_schedule_and_the_last_result() {
    let s = crate::support::TestServer::start().await;
    let token = s.app().auth.api.mint("admin:admin", std::time::Duration::from_secs(3600)).unwrap();
    let status = || async {
        let res = s.client.get(s.url("/api/v1/snapshots/status")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.json::<serde_json::Value>().await.unwrap()
    };
    let v = status().await;
    assert_eq!(v["interval_s"], s.app().config.snapshot_interval.as_secs());
    assert_eq!(v["keep"], s.app().config.snapshot_keep as u64);
    assert_eq!(v["dir"], s.app().config.snapshot_dir.display().to_string());
    assert!(v["status"]["last_success_at"].is_null(), "{v}");
    let res = s
        .client
        .post(s.url("/api/v1/snapshots"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"reason": "console"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let made: serde_json::Value = res.json().await.unwrap();
    let v = status().await;
    assert_eq!(v["status"]["last_success_at"], made["created_at"]);
    assert_eq!(v["status"]["last_size_bytes"], made["size_bytes"]);
    assert_eq!(v["status"]["last_file"], made["path"]);
    if v["interval_s"].as_u64().unwrap() > 0 {
        assert!(v["next_at"].is_string(), "{v}");
    }
    crate::support::expect_error(
        s.client.get(s.url("/api/v1/snapshots/status")).send().await.unwrap(),
        401,
        "unauthenticated",
    )
    .await;
    s.stop().await;
}

/// A `snapshot_dir` others can write (a 1777 directory, also through a symlink)
/// is refused, naming it, and its mode is left as it was (it used to be chmodded to 0700).
#[tokio::test]
async fn a_world_writable_snapshot_dir_is_refused_not_chmodded() {
    use std::os::unix::fs::PermissionsExt;
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let link = shared.path().with_extension("link");
    std::os::unix::fs::symlink(shared.path(), &link).unwrap();
    for dir in [shared.path().to_path_buf(), link.clone()] {
        let s = crate::support::TestServer::start_with(&[("GSHARE_SNAPSHOT_DIR", dir.to_str().unwrap())]).await;
        let token = s.app().auth.api.mint("admin:admin", std::time::Duration::from_secs(600)).unwrap();
        let res = s.client.post(s.url("/api/v1/snapshots")).bearer_auth(&token).send().await.unwrap();
        let status = res.status().as_u16();
        let body = res.text().await.unwrap();
        assert!(status >= 400 && body.contains("writable by group or others"), "{status} {body}");
        assert!(body.contains(&shared.path().file_name().unwrap().to_string_lossy().to_string()), "{body}");
        assert_eq!(std::fs::metadata(shared.path()).unwrap().permissions().mode() & 0o7777, 0o1777);
        assert_eq!(s.get("/healthz").await.status(), 200);
        s.stop().await;
    }
    let _ = std::fs::remove_file(&link);
}

/// Every file under `root` (relative name → SHA-256 of its content), and each directory (→ "dir").
fn tree(root: &Path) -> std::collections::BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &p, out);
            } else {
                out.insert(rel, sha(&p));
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Names in `dir` (not recursive) that a restore leaves only on success or while it runs.
fn restore_leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("before-restore") || n.contains(".restore-"))
        .collect()
}

/// The target install of a restore: one offering `current`, its key rings, one kubeconfig; and
/// another install's snapshot with its secrets (offering `other`), under `PASS`.
const PASS: &str = "correct horse battery staple";
struct RestoreCase {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    snap: Vec<u8>,
    before: (String, std::collections::BTreeMap<String, String>, std::collections::BTreeMap<String, String>),
}

async fn restore_case() -> RestoreCase {
    let tmp = tempfile::tempdir().unwrap();
    let (data, other) = (tmp.path().join("data"), tmp.path().join("other"));
    for (dir, name) in [(&data, "current"), (&other, "other")] {
        let s = Srv::start(dir, &[]).await;
        add_offering_at(&s.base, &s.token, name).await;
        s.stop().await;
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).recursive(true).create(data.join("clusters")).unwrap();
        std::fs::write(data.join("clusters/clu_01JAAAAAAAAAAAAAAAAAAAAAAA.kubeconfig"), "apiVersion: v1\n").unwrap();
    }
    let file = tmp.path().join("other.snap");
    ok(&gshare(
        &other,
        &["snapshot", "save", file.to_str().unwrap(), "--include-secrets"],
        &[("GSHARE_SNAPSHOT_PASSPHRASE", PASS)],
    ));
    let snap = std::fs::read(&file).unwrap();
    let before = (sha(&data.join("gshare.redb")), tree(&data.join("keys")), tree(&data.join("clusters")));
    assert!(before.1.contains_key("internal/ring.json") && before.2.len() == 1, "{before:?}");
    RestoreCase { _tmp: tmp, data, snap, before }
}

impl RestoreCase {
    fn restore(&self, snap: &[u8]) -> std::process::Output {
        let f = self.data.parent().unwrap().join("restore.snap");
        std::fs::write(&f, snap).unwrap();
        gshare(&self.data, &["snapshot", "restore", f.to_str().unwrap()], &[("GSHARE_SNAPSHOT_PASSPHRASE", PASS)])
    }

    /// The state file, keys/ and the kubeconfigs are exactly as before, nothing staged or set
    /// aside is left, and the server starts on it serving the old state.
    /// (The server's start writes to the state file: what counts as "before" is taken again.)
    async fn assert_untouched(&mut self, what: &str) {
        let now =
            (sha(&self.data.join("gshare.redb")), tree(&self.data.join("keys")), tree(&self.data.join("clusters")));
        assert_eq!(now, self.before, "{what}: the data dir changed");
        assert_eq!(restore_leftovers(&self.data), Vec::<String>::new(), "{what}");
        let s = Srv::start(&self.data, &[]).await;
        assert_eq!(names_at(&s.base, &s.token).await, ["current"], "{what}");
        s.stop().await;
        self.before =
            (sha(&self.data.join("gshare.redb")), tree(&self.data.join("keys")), tree(&self.data.join("clusters")));
    }
}

/// A secret file that cannot be written (the snapshot names
/// `keys/internal/ring.json` and a file below it: a non-directory where a directory must go)
/// refuses the restore before anything is switched: the state, keys/ and the kubeconfigs stay as
/// they were (the old code had replaced the state and moved keys/ aside, then said "untouched").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_file_that_cannot_be_written_leaves_state_keys_and_kubeconfigs_as_they_were() {
    use base64::Engine;
    let mut case = restore_case().await;
    let snap = format::decode(&case.snap).unwrap();
    let ring = base64::engine::general_purpose::STANDARD.encode(b"{\"keys\":[]}");
    let bundle = json!({"files": [
        {"path": "keys/internal/ring.json", "data_b64": ring},
        {"path": "keys/internal/ring.json/below", "data_b64": ring},
    ]});
    let recipient = age::scrypt::Recipient::new(age::secrecy::SecretString::from(PASS.to_string()));
    let sealed = age::encrypt(&recipient, &serde_json::to_vec(&bundle).unwrap()).unwrap();
    let mut header = snap.header.clone();
    header.secrets.files = vec!["keys/internal/ring.json".into(), "keys/internal/ring.json/below".into()];
    let crafted = format::encode(header, snap.state, &sealed).unwrap();

    let out = case.restore(&crafted);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("not restored") && err.contains("ring.json"), "{err}");
    case.assert_untouched("unwritable secret file").await;
}

/// A step of the switch that fails (here the restore marker, whose path is
/// taken by a directory) undoes every rename already done; and a snapshot whose tables record a
/// schema this build does not know is refused even when its header says a known one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_switch_is_undone_and_the_schema_is_read_from_the_tables() {
    use redb::ReadableDatabase;
    let mut case = restore_case().await;
    let marker = case.data.join(gshare::snapshot::RESTORE_MARKER);
    std::fs::create_dir(&marker).unwrap();
    std::fs::write(marker.join("in-the-way"), "x").unwrap();
    let out = case.restore(&case.snap);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("every step was undone") && err.contains("untouched"), "{err}");
    std::fs::remove_dir_all(&marker).unwrap();
    case.assert_untouched("failed switch").await;

    // Header: the current schema; tables: schema 99 (re-hashed, so only the tables tell).
    let snap = format::decode(&case.snap).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let db = redb::Database::create(tmp.path().join("x.redb")).unwrap();
    let w = db.begin_write().unwrap();
    format::load(&w, snap.state).unwrap();
    w.open_table(redb::TableDefinition::<&str, u64>::new("meta")).unwrap().insert("schema_version", 99).unwrap();
    w.commit().unwrap();
    let dump = format::dump(&db.begin_read().unwrap()).unwrap();
    assert_eq!(dump.schema_version, 99);
    let forged = format::encode(snap.header.clone(), &dump.bytes, snap.secrets).unwrap();
    assert_eq!(format::decode(&forged).unwrap().header.schema_version, snap.header.schema_version);
    let out = case.restore(&forged);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("state schema 99"), "{}", stderr(&out));
    case.assert_untouched("schema 99 in the tables").await;

    // And the real thing goes through: every root holds exactly the snapshot's files, the old
    // ones kept aside.
    let out = case.restore(&case.snap);
    assert!(out.status.success(), "{}", stderr(&out));
    let keys = tree(&case.data.join("keys"));
    assert_ne!(keys, case.before.1);
    assert!(keys.contains_key("internal/ring.json"));
    assert_eq!(tree(&case.data.join("clusters")), Default::default(), "the other install has no kubeconfigs");
    let mut aside = restore_leftovers(&case.data);
    aside.sort();
    assert_eq!(aside.len(), 3, "{aside:?}");
    assert!(aside.iter().all(|n| n.contains(".before-restore-")), "{aside:?}");
    let s = Srv::start(&case.data, &[]).await;
    assert_eq!(names_at(&s.base, &s.token).await, ["other"]);
    s.stop().await;
}
