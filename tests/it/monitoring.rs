//! The operations kit and who sees what on `/metrics` and `/readyz`: `/metrics` through Debian's
//! `promtool check metrics` with every family present, in both views; per-cluster series only for
//! registered clusters, cluster ids only to the metrics token or an admin; the shipped Prometheus
//! rules through `promtool check rules` and `promtool test rules`; every metric the Grafana
//! dashboard and the rules name exists in `/metrics`.
//!
//! promtool comes from Debian's `prometheus` package (hack/deps.sh installs it).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::sessions::{admin, cluster, offering, operator, register, report, send, ts};
use crate::support::{TestServer, expect_error};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PUBLIC: &str = "https://gshare.example.test";

fn promtool() -> Command {
    // Installed by hack/deps.sh; a missing one fails the test (it is not skipped).
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is not installed: run hack/deps.sh (Debian package `prometheus`)"
    );
    Command::new("promtool")
}

/// `promtool check metrics` on `text`: (success, what it said).
fn check_metrics(text: &str) -> (bool, String) {
    let mut child = promtool()
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && said.trim().is_empty(), said)
}

/// Families (`# TYPE` lines) and the sample names of an exposition text.
fn families(text: &str) -> BTreeSet<String> {
    text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap().to_string()).collect()
}

fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// Every family has HELP, TYPE and at least one sample, and its lines stand together.
fn assert_every_family_present(text: &str) {
    let mut seen = BTreeSet::new();
    let mut current = String::new();
    for l in text.lines() {
        let family = match l.strip_prefix("# HELP ").or_else(|| l.strip_prefix("# TYPE ")) {
            Some(rest) => rest.split(' ').next().unwrap().to_string(),
            None => {
                let name = l.split(['{', ' ']).next().unwrap();
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| *f == current))
                    .unwrap_or(name)
                    .to_string()
            }
        };
        if family != current {
            assert!(seen.insert(family.clone()), "{family}'s lines are not together:\n{text}");
            current = family;
        }
    }
    let samples = sample_names(text);
    for f in families(text) {
        assert!(text.contains(&format!("# HELP {f} ")), "{f} has no HELP");
        let has = samples.iter().any(|s| {
            s == &f || s.strip_prefix(f.as_str()).is_some_and(|rest| ["_bucket", "_sum", "_count"].contains(&rest))
        });
        assert!(has, "family {f} has no sample:\n{text}");
    }
}

/// A metric-name-like identifier in a PromQL expression: `gshare_…` (raw) or `gshare:…` (recorded).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("gshare") {
        let start = i + at;
        let boundary = start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_' || b[end] == b':') {
            end += 1;
        }
        if boundary {
            out.insert(expr[start..end].to_string());
        }
        i = end.max(start + 1);
    }
    out
}

/// A server with one attached, reporting cluster with a running and a preparing session, and a
/// second cluster that reported once and was then unregistered.
async fn busy_server(extra: &[(&str, &str)]) -> (TestServer, String, String) {
    let mut env = vec![
        ("GSHARE_PUBLIC_URL", PUBLIC),
        ("GSHARE_SESSION_DOMAIN", "sessions.lab.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
    ];
    env.extend_from_slice(extra);
    let s = TestServer::start_with(&env).await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let attached = s
        .client
        .post(s.url(&format!("/api/v1/clusters/{cid}/attach?force=true")))
        .bearer_auth(admin(&s))
        .send()
        .await
        .unwrap();
    assert_eq!(attached.status(), 200, "{}", attached.text().await.unwrap());
    let op = operator(&s, &cid);
    let node = json!({"node_id": "gpu-node-0", "node_cpu": 64, "node_mem_gb": 512, "node_disk_gb": 900,
                      "role": "gpu", "node_ready": true, "cluster_id": cid});
    let res = s.client.post(s.url("/internal/inventory/nodes")).bearer_auth(&op).json(&node).send().await.unwrap();
    assert_eq!(res.status(), 202);
    // A refused callback too (4xx series).
    let res = s.client.post(s.url("/internal/inventory/nodes")).bearer_auth(&op).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), 422);
    s.app().inventory.flush_liveness().await.unwrap();

    let off = offering(&s, "A100 slice").await;
    let gpu = gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), "gpu-node-0", 1);
    for (phase, bound) in [("Running", true), ("Preparing", false)] {
        let v = send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201).await;
        let cr = v["cr_name"].as_str().unwrap().to_string();
        report(&s, &op, &cr, json!({"phase": "Preparing", "ts": ts(&s), "cluster_id": cid})).await;
        if bound {
            report(
                &s,
                &op,
                &cr,
                json!({"phase": phase, "ts": ts(&s), "bound_gpu_uuid": gpu, "node_name": "gpu-node-0"}),
            )
            .await;
        }
    }

    // A cluster that reported and was unregistered: none of its series may stay.
    let gone_c = cluster("gpu-gone").await;
    let gone = register(&s, "gpu-gone", &gone_c).await;
    let res = s
        .client
        .post(s.url("/internal/inventory/nodes"))
        .bearer_auth(operator(&s, &gone))
        .json(&json!({"node_id": "n9", "node_cpu": 8, "node_mem_gb": 32, "node_disk_gb": 100, "role": "gpu",
                      "node_ready": true, "cluster_id": gone}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    send(&s, reqwest::Method::DELETE, &format!("/api/v1/clusters/{gone}"), None, 204).await;
    (s, cid, gone)
}

async fn metrics_with(s: &TestServer, token: Option<&str>) -> reqwest::Response {
    let mut r = s.client.get(s.url("/metrics"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_with_every_family_and_name_clusters_only_to_admins() {
    let (s, cid, gone) = busy_server(&[]).await;

    let full = metrics_with(&s, Some(&admin(&s))).await;
    assert_eq!(full.status(), 200);
    let full = full.text().await.unwrap();
    let anon = metrics_with(&s, None).await.text().await.unwrap();
    for (view, text) in [("admin", &full), ("anonymous", &anon)] {
        let (ok, said) = check_metrics(text);
        assert!(ok, "promtool check metrics ({view}): {said}\n{text}");
        assert_every_family_present(text);
    }
    // The anonymous view has the same families, no cluster id, and what the alerts need.
    assert_eq!(families(&full), families(&anon));
    assert!(full.contains(&format!("cluster_id=\"{cid}\"")), "{full}");
    for text in [&full, &anon] {
        assert!(!text.contains(&gone), "an unregistered cluster's series stayed:\n{text}");
    }
    assert!(!anon.contains(&cid) && !anon.contains("cluster_id"), "{anon}");
    for want in [
        "gshare_sessions{phase=\"running\"} 1\n",
        "gshare_sessions{phase=\"preparing\"} 1\n",
        "gshare_gpu_allocations_open 1\n",
        "gshare_gpu_memory_booked_bytes 21474836480\n",
        "gshare_clusters{status=\"connected\"} 1\n",
        "gshare_snapshot_last_attempt_failed 0\n",
    ] {
        assert!(full.contains(want) && anon.contains(want), "{want} missing:\n{full}");
    }
    let expiry = |text: &str, series: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series}:\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    assert_eq!(
        expiry(&full, &format!("gshare_operator_token_expiry_seconds{{cluster_id=\"{cid}\"}}")),
        expiry(&anon, "gshare_operator_token_expiry_seconds ")
    );
    let oldest = expiry(&anon, "gshare_sessions_oldest_created_timestamp_seconds{phase=\"preparing\"}");
    assert!(oldest > 1.0e9 && oldest <= s.clock.now_ms() as f64 / 1000.0, "{oldest}");
    assert!(expiry(&anon, "gshare_state_filesystem_size_bytes ") > 0.0);

    // Labels are bounded: routes are templates, the rest enums; nothing per session or user.
    let sessions: Vec<String> = s
        .app()
        .store
        .read(|txn| gshare::sessions::SESSIONS.list(txn))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(sessions.len(), 2);
    for id in &sessions {
        let cr = id.to_lowercase().replace('_', "-");
        assert!(!full.contains(id.as_str()) && !full.contains(&cr), "{id} in /metrics");
    }
    assert!(!full.contains("admin:") && !full.contains("owner"), "{full}");

    // The dashboard and the rules name only metrics that exist (recording rules: their own).
    let rules = std::fs::read_to_string(Path::new(ROOT).join("packaging/prometheus/gshare.rules.yml")).unwrap();
    let rules: serde_yaml::Value = serde_yaml::from_str(&rules).unwrap();
    let mut recorded = BTreeSet::new();
    let mut rule_exprs = Vec::new();
    for g in rules["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            if let Some(name) = r["record"].as_str() {
                recorded.insert(name.to_string());
            }
            rule_exprs.push(r["expr"].as_str().unwrap().to_string());
        }
    }
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(ROOT).join("packaging/grafana/gshare.json")).unwrap())
            .unwrap();
    let dash_exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(dash_exprs.len() >= 15, "{dash_exprs:?}");
    let exposed = sample_names(&full);
    for (what, exprs) in [("dashboard", &dash_exprs), ("rules", &rule_exprs)] {
        for e in exprs {
            let names = metric_names(e);
            assert!(!names.is_empty(), "{what}: {e} names no gshare metric");
            for n in names {
                assert!(
                    exposed.contains(&n) || recorded.contains(&n),
                    "{what}: `{n}` (in `{e}`) is not in /metrics nor recorded by the rules"
                );
            }
        }
    }
    // The dashboard's expressions parse (promtool checks them as recording rules).
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("dashboard.rules.yml");
    let mut doc = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in dash_exprs.iter().enumerate() {
        doc.push_str(&format!("      - record: dashboard:e{i}\n        expr: {}\n", serde_json::to_string(e).unwrap()));
    }
    std::fs::write(&file, doc).unwrap();
    let out = promtool().args(["check", "rules"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    s.stop().await;
}

/// The check can fail: promtool refuses what the issue found (a family without HELP).
#[test]
fn promtool_refuses_a_family_without_help() {
    let (ok, said) = check_metrics("# TYPE x_total counter\nx_total 1\n");
    assert!(!ok && said.contains("no help text"), "{said}");
    assert!(check_metrics("# HELP x_total X.\n# TYPE x_total counter\nx_total 1\n").0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_token_guards_metrics_and_shows_clusters() {
    let token = "0123456789abcdef0123456789abcdef";
    let (s, cid, _) = busy_server(&[("GSHARE_METRICS_TOKEN", token)]).await;
    expect_error(metrics_with(&s, None).await, 401, "unauthenticated").await;
    expect_error(metrics_with(&s, Some("0123456789abcdef0123456789abcdeX")).await, 401, "unauthenticated").await;
    expect_error(metrics_with(&s, Some(&operator(&s, &cid))).await, 401, "unauthenticated").await;
    for t in [token.to_string(), admin(&s)] {
        let res = metrics_with(&s, Some(&t)).await;
        assert_eq!(res.status(), 200);
        let text = res.text().await.unwrap();
        assert!(text.contains(&format!("gshare_operator_token_expiry_seconds{{cluster_id=\"{cid}\"}}")), "{text}");
        assert!(check_metrics(&text).0);
    }
    // The console cookie counts as an admin too.
    let cookie = format!("gshare_console={}", admin(&s));
    let res = s.client.get(s.url("/metrics")).header("Cookie", cookie).send().await.unwrap();
    assert_eq!(res.status(), 200);
    s.stop().await;
}

#[test]
fn a_short_metrics_token_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let e = gshare::config::Config::for_data_dir(dir.path(), &[("GSHARE_METRICS_TOKEN", "short")]).unwrap_err();
    assert!(e.to_string().starts_with("GSHARE_METRICS_TOKEN"), "{e}");
    let c = gshare::config::Config::for_data_dir(dir.path(), &[("GSHARE_METRICS_TOKEN", "0123456789abcdef")]).unwrap();
    assert!(!format!("{c:?}").contains("0123456789abcdef"), "redacted in Debug");
    assert!(c.render_redacted().contains("metrics_token = \"<redacted>\""));
}

/// Anonymous `/readyz` answers the status without the snapshot's path or error; an admin sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_readyz_names_no_path() {
    let s = TestServer::start().await;
    let res = s.client.post(s.url("/api/v1/snapshots")).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let data = s.data_dir();
    let anon: Value = s.get("/readyz").await.json().await.unwrap();
    assert_eq!(anon["status"], "ready");
    assert!(anon["snapshot"]["last_success_at"].is_string(), "{anon}");
    assert!(anon["snapshot"].get("last_file").is_none_or(Value::is_null), "{anon}");
    assert!(!anon.to_string().contains(data.to_str().unwrap()), "{anon}");
    let full: Value = s.client.get(s.url("/readyz")).bearer_auth(admin(&s)).send().await.unwrap().json().await.unwrap();
    assert!(full["snapshot"]["last_file"].as_str().is_some_and(|f| f.starts_with(data.to_str().unwrap())), "{full}");

    // A failing snapshot: anonymous callers learn that it failed, not where or why.
    let snaps = data.join("snapshots");
    std::fs::remove_dir_all(&snaps).unwrap();
    std::fs::write(&snaps, b"not a directory").unwrap();
    let res = s.client.post(s.url("/api/v1/snapshots")).bearer_auth(admin(&s)).send().await.unwrap();
    assert_eq!(res.status(), 507);
    let anon: Value = s.get("/readyz").await.json().await.unwrap();
    assert_eq!(anon["snapshot"]["last_error"], gshare::http::system::SNAPSHOT_FAILED_ANONYMOUS, "{anon}");
    assert!(!anon.to_string().contains(data.to_str().unwrap()), "{anon}");
    let full: Value = s.client.get(s.url("/readyz")).bearer_auth(admin(&s)).send().await.unwrap().json().await.unwrap();
    assert_ne!(full["snapshot"]["last_error"], gshare::http::system::SNAPSHOT_FAILED_ANONYMOUS, "{full}");
    assert!(full["snapshot"]["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{full}");
    let metrics = s.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("gshare_snapshot_last_attempt_failed 1\n"), "{metrics}");
    s.stop().await;
}

fn rules_dir() -> PathBuf {
    Path::new(ROOT).join("packaging/prometheus")
}

#[test]
fn the_prometheus_rules_check_and_their_tests_pass() {
    let out = promtool().args(["check", "rules"]).arg(rules_dir().join("gshare.rules.yml")).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tests: Vec<PathBuf> = std::fs::read_dir(rules_dir().join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    assert!(tests.len() >= 2, "{tests:?}");
    let out = promtool().args(["test", "rules"]).args(&tests).current_dir(rules_dir()).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    // Every alert the issue asks for is there and has a test that expects it to fire.
    let rules = std::fs::read_to_string(rules_dir().join("gshare.rules.yml")).unwrap();
    let fixtures: String = tests.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    for alert in [
        "GShareOperatorSilent",
        "GShareOperatorTokenExpiringSoon",
        "GShareOperatorTokenRenewalFailing",
        "GShareClusterUnreachable",
        "GShareSnapshotFailing",
        "GShareSnapshotTooOld",
        "GShareStateFilesystemNearlyFull",
        "GShareCallbackErrors",
        "GShareSessionsStuckPreparing",
    ] {
        assert!(rules.contains(&format!("alert: {alert}\n")), "{alert} missing");
        assert!(fixtures.contains(&format!("alertname: {alert}\n")), "{alert} has no test");
    }
}

/// The tests can fail: a rule whose threshold moved fails its fixture.
#[test]
fn a_changed_threshold_fails_the_rule_tests() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = std::fs::read_to_string(rules_dir().join("gshare.rules.yml")).unwrap();
    let changed = rules.replace(
        "time() - gshare_operator_last_report_timestamp_seconds > 2 * 60",
        "time() - gshare_operator_last_report_timestamp_seconds > 5 * 60",
    );
    assert_ne!(rules, changed);
    std::fs::create_dir(tmp.path().join("tests")).unwrap();
    std::fs::write(tmp.path().join("gshare.rules.yml"), changed).unwrap();
    std::fs::copy(rules_dir().join("tests/alerts.yml"), tmp.path().join("tests/alerts.yml")).unwrap();
    let out = promtool().args(["test", "rules", "tests/alerts.yml"]).current_dir(tmp.path()).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && said.contains("GShareOperatorSilent"), "{said}");
}
