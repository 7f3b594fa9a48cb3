//! The local admin socket `<data_dir>/gshare.sock`: the CLI reaches the running server through it
//! whatever `listen` says; it is the owner's only (mode and peer uid); requests over it are
//! validated and audited as over HTTP, with actor `local:<uid>`; a stale socket is replaced and a
//! second server on the data directory refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};

use axum::http::Method;
use gshare::cli::LocalServer;
use gshare::cli::client::NoBody;
use gshare::http::admin_socket::socket_path;
use serde_json::{Value, json};

use crate::operator::admin;
use crate::support::{TestServer, expect_error, gshare, stderr, stdout};

/// The CLI with `stdin` piped in (passwords), against `data`, with `listen` pointing elsewhere.
fn gshare_in(data: &Path, args: &[&str], stdin: &str) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"));
    cmd.args(args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    // A port nothing serves: the CLI must not need it.
    cmd.env("GSHARE_DATA_DIR", data).env("GSHARE_CONFIG", "/dev/null").env("GSHARE_LISTEN", "127.0.0.1:1");
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn audit(s: &TestServer) -> Vec<Value> {
    let res = s.client.get(s.url("/api/v1/audit?size=100")).bearer_auth(admin(s)).send().await.unwrap();
    let v: Value = res.json().await.unwrap();
    v["data"].as_array().unwrap().clone()
}

/// The repro, as a new admin would run it: a server on another port than the configured
/// one, and `GSHARE_DATA_DIR=d gshare snapshot save F`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_save_reaches_a_server_on_another_port() {
    let s = TestServer::start().await;
    let sock = socket_path(&s.data_dir());
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "owner only");
    let uid = meta.uid();
    // A bare file name, relative to where the admin stands.
    let file = s.dir.path().join("F");
    let (data, cwd) = (s.data_dir(), s.dir.path().to_path_buf());
    let out = blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"));
        cmd.args(["snapshot", "save", "F"]).env_clear().current_dir(cwd);
        cmd.env("GSHARE_DATA_DIR", data).env("GSHARE_CONFIG", "/dev/null");
        cmd.output().unwrap()
    })
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("saved"), "{}", stdout(&out));
    let bytes = std::fs::read(&file).unwrap();
    gshare::snapshot::format::decode(&bytes).unwrap();
    // Audited as over HTTP, by the local user.
    let entries = audit(&s).await;
    let e = entries.iter().find(|e| e["action"] == "snapshot.download").expect("the download is audited");
    assert_eq!(e["actor"], format!("local:{uid}"));
    s.stop().await;
    assert!(!sock.exists(), "a stopped server leaves no socket behind");
}

/// `admin add|set-password|remove|list` and `audit tail` while the server runs: through the
/// socket, validated like the HTTP API (a weak password is refused with its message) and audited
/// with actor `local:<uid>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_commands_and_audit_tail_work_while_the_server_runs() {
    let s = TestServer::start().await;
    let uid = std::fs::metadata(socket_path(&s.data_dir())).unwrap().uid();
    let actor = format!("local:{uid}");
    let data = s.data_dir();
    let run = |args: &'static [&'static str], stdin: &'static str| {
        let data = data.clone();
        blocking(move || gshare_in(&data, args, stdin))
    };
    let out = run(&["admin", "add", "bob"], "bob's long password\n").await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("admin account `bob` added"), "{}", stdout(&out));
    let out = run(&["admin", "list"], "").await;
    assert!(stdout(&out).contains("bob") && stdout(&out).contains("admin"), "{}", stdout(&out));

    // Bad input: the server's own checks and words.
    let http = s
        .client
        .post(s.url("/api/v1/admins/bob/password"))
        .bearer_auth(admin(&s))
        .json(&json!({"password": "short"}))
        .send()
        .await
        .unwrap();
    let body = expect_error(http, 422, "validation_failed").await;
    let message = body["error"]["message"].as_str().unwrap().to_string();
    let out = run(&["admin", "set-password", "bob"], "short\n").await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&message), "the socket's refusal is HTTP's: {message} / {}", stderr(&out));
    let out = run(&["admin", "set-password", "bob"], "aaaaaaaaaaaaaaaa\n").await;
    assert!(!out.status.success() && stderr(&out).contains("guess"), "{}", stderr(&out));
    let out = run(&["admin", "add", "bob"], "another long password\n").await;
    assert!(!out.status.success() && stderr(&out).contains("already exists"), "{}", stderr(&out));
    let out = run(&["admin", "add", "b b"], "another long password\n").await;
    assert!(!out.status.success() && stderr(&out).contains("username"), "{}", stderr(&out));
    let out = run(&["admin", "set-password", "carol"], "a long enough password\n").await;
    assert!(!out.status.success() && stderr(&out).contains("no account carol"), "{}", stderr(&out));

    // bob signs in with the password the socket set.
    let out = run(&["admin", "set-password", "bob"], "bob's newer long password\n").await;
    assert!(out.status.success(), "{}", stderr(&out));
    let login = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "bob", "password": "bob's newer long password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    let out = run(&["admin", "remove", "bob"], "").await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["admin", "remove", "admin"], "").await;
    assert!(!out.status.success() && stderr(&out).contains("last enabled admin account"), "{}", stderr(&out));

    // Every change is audited as the local user; `audit tail` shows them, oldest first.
    let mine: Vec<(String, String)> = audit(&s)
        .await
        .iter()
        .filter(|e| e["actor"] == actor.as_str())
        .map(|e| (e["action"].as_str().unwrap().to_string(), e["result"].as_str().unwrap().to_string()))
        .collect();
    for expected in [("admin.add", "success"), ("admin.set_password", "failure"), ("admin.set_password", "success")] {
        assert!(mine.iter().any(|(a, r)| a == expected.0 && r == expected.1), "{expected:?} in {mine:?}");
    }
    let out = run(&["audit", "tail", "-n", "3"], "").await;
    assert!(out.status.success(), "{}", stderr(&out));
    let tail = stdout(&out);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 3, "{tail}");
    assert!(lines[1].contains("admin.remove") && lines[1].contains(&actor), "{tail}");
    assert!(lines[2].contains("admin.remove") && lines[2].contains("failure"), "{tail}");
    // More than one page (500) is walked by cursor; fewer entries than asked print them all.
    let out = run(&["audit", "tail", "-n", "10000"], "").await;
    assert!(stdout(&out).lines().count() >= 8, "{}", stdout(&out));
    s.stop().await;
}

/// The library client: no token over the socket, and the same envelope as over HTTP; over TCP
/// the same route without a token is refused (the socket's caller cannot be claimed from there).
#[tokio::test]
async fn the_socket_needs_no_token_and_tcp_still_does() {
    let s = TestServer::start().await;
    let local = LocalServer::at(socket_path(&s.data_dir()));
    let me: Value = local.call(Method::GET, "/api/v1/auth/me", None::<&NoBody>).await.unwrap();
    assert_eq!(me["auth"], "local");
    assert!(me["username"].as_str().unwrap().starts_with("local:"), "{me}");
    assert_eq!(me["account"], false);
    let res = s.client.get(s.url("/api/v1/auth/me")).send().await.unwrap();
    expect_error(res, 401, "unauthenticated").await;
    // Bad input over the socket: the JSON error envelope, code and all.
    let e = local
        .call::<Value>(Method::POST, "/api/v1/admins", Some(&json!({"username": "x", "password": "y", "extra": 1})))
        .await
        .unwrap_err();
    match e {
        gshare::cli::ClientError::Refused { status, code, .. } => {
            assert_eq!(status, 422);
            assert_eq!(code, "validation_failed");
        }
        other => panic!("{other}"),
    }
    let e = local.call::<Value>(Method::GET, "/api/v1/clusters/clu_nope", None::<&NoBody>).await.unwrap_err();
    assert!(matches!(e, gshare::cli::ClientError::Refused { status: 404 | 422, .. }), "{e}");
    s.stop().await;
}

/// `keys rotate` while the server runs: its endpoint over the socket, in force at once, audited as
/// the local user; refused (409, the envelope) when the key comes from configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_goes_through_the_running_server() {
    let s = TestServer::start().await;
    let before = s.app().auth.internal.signing_kid().unwrap();
    let data = s.data_dir();
    let out = blocking(move || gshare_in(&data, &["keys", "rotate"], "")).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let after = s.app().auth.internal.signing_kid().unwrap();
    assert_ne!(before, after, "signing with the new key at once");
    assert!(stdout(&out).contains(&after), "{}", stdout(&out));
    let uid = std::fs::metadata(socket_path(&s.data_dir())).unwrap().uid();
    let entries = audit(&s).await;
    let e = entries.iter().find(|e| e["action"] == "keys.rotate").expect("audited");
    assert_eq!(
        (e["actor"].as_str(), e["target"].as_str()),
        (Some(format!("local:{uid}").as_str()), Some(after.as_str()))
    );
    s.stop().await;
}

/// A socket file left by a killed server is replaced at start; a second server on the same data
/// directory is refused, naming it, and leaves the first one's socket working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_is_replaced_and_a_second_server_refused() {
    crate::support::init();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    // What a SIGKILLed server leaves: the file, no listener.
    drop(std::os::unix::net::UnixListener::bind(socket_path(&data)).unwrap());
    let config = || gshare::config::Config::for_data_dir(&data, &[("GSHARE_LISTEN", "127.0.0.1:0")]).unwrap();
    let first = gshare::RunningServer::start(config(), gshare::clock::Clock::system()).await.expect("starts");
    let local = LocalServer::at(socket_path(&data));
    let _: Value = local.call(Method::GET, "/api/v1/admins", None::<&NoBody>).await.unwrap();

    let second = gshare::RunningServer::start(config(), gshare::clock::Clock::system()).await;
    assert!(matches!(
        second.err().expect("a second server is refused"),
        gshare::StartError::Store(gshare::store::StoreError::AlreadyOpen { .. })
    ));
    // As an admin sees it: `gshare serve` names the data directory.
    let d = data.clone();
    let out = blocking(move || gshare(&d, &["serve"], &[("GSHARE_LISTEN", "127.0.0.1:0")])).await;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("another gshare server is running on the data directory") && e.contains(&data.display().to_string()),
        "{e}"
    );
    let _: Value = local.call(Method::GET, "/api/v1/admins", None::<&NoBody>).await.expect("the first still serves");
    first.stop().await;
    assert!(!socket_path(&data).exists());
}

/// Another local user (neither root nor the owner) cannot use the socket, even where the file's
/// mode would let them: the peer uid is checked too. Needs root (to run as `nobody`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_user_is_refused() {
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX);
    let tools = ["setpriv", "curl"].iter().all(|t| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if me != 0 || !tools {
        eprintln!("skipped: needs root, setpriv and curl");
        return;
    }
    let s = TestServer::start().await;
    let sock = socket_path(&s.data_dir());
    let curl_as = |uid: Option<u32>, sock: std::path::PathBuf| {
        blocking(move || {
            let mut cmd = match uid {
                Some(u) => {
                    let mut c = std::process::Command::new("setpriv");
                    c.args([format!("--reuid={u}"), format!("--regid={u}"), "--clear-groups".into(), "curl".into()]);
                    c
                }
                None => std::process::Command::new("curl"),
            };
            cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--unix-socket"])
                .arg(&sock)
                .arg("http://localhost/api/v1/admins")
                .output()
                .unwrap()
        })
    };
    // The owner (root here) is served.
    let out = curl_as(None, sock.clone()).await;
    assert_eq!(stdout(&out), "200");
    // Open the way for `nobody` (as a careless admin might): the peer check still refuses.
    let dirs = [s.dir.path().to_path_buf(), s.data_dir()];
    for d in &dirs {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = curl_as(Some(65534), sock.clone()).await;
    assert!(!out.status.success(), "nobody was answered: {}", stdout(&out));
    assert_ne!(stdout(&out), "200");
    // And with the mode as the server set it, `nobody` is refused by the file system already.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = curl_as(Some(65534), sock.clone()).await;
    assert!(!out.status.success());
    for d in &dirs {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // No audit entry: the request never reached the router.
    assert!(audit(&s).await.iter().all(|e| !e["actor"].as_str().unwrap_or("").starts_with("local:65534")));
    s.stop().await;
}

/// With no server: the offline paths work, and no CLI path creates a key ring.
#[tokio::test]
async fn offline_commands_create_no_key_ring() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for args in [
        &["admin", "token"][..],
        &["keys", "list"][..],
        &["keys", "rotate"][..],
        &["token", "operator", "--cluster-id", "clu_local"][..],
    ] {
        let out = gshare(&data, args, &[]);
        assert!(!out.status.success(), "{args:?} succeeded without a key ring");
        assert!(stderr(&out).contains("no signing key ring"), "{args:?}: {}", stderr(&out));
        assert!(!data.join("keys").exists(), "{args:?} created {}", data.join("keys").display());
    }
    let out = gshare(&data, &["keys", "prune"], &[]);
    assert!(out.status.success() && stdout(&out).contains("nothing to prune"), "{}", stderr(&out));
    assert!(!data.join("keys").exists());
    // Commands that need the server say so, naming the data directory.
    let out = gshare(&data, &["cluster", "attach", "clu_local"], &[]);
    assert!(!out.status.success() && stderr(&out).contains("no server runs on"), "{}", stderr(&out));
    // Account commands work on the state file (and make the first account, not a key ring).
    let out = gshare_in(&data, &["admin", "add", "bob"], "bob's long password\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = gshare(&data, &["admin", "list"], &[]);
    assert!(stdout(&out).contains("bob"), "{}", stdout(&out));
    assert!(!data.join("keys").exists());
}
