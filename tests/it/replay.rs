//! Upstream's operator replayed call by call (contract §2, with the §9 corrections): every
//! callback with the bodies `operator/internal/{controller,inventory,reaper,volumes,health,
//! imagebuild}` build (Go's `omitempty` shapes, RFC 3339 nanosecond times, `traceparent`), then
//! each field at upstream's limits and beyond. The rule checked throughout: input upstream accepts
//! never gets an answer the operator treats as final (a 4xx other than 409).

use gshare_fake_kube::FakeCluster;
use serde_json::{Value, json};

use crate::sessions::{admin, cluster, operator, register, server, session};
use crate::support::{TestServer, expect_error};

const NS: &str = "gshare-sessions";

async fn admin_call(s: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>, want: u16) -> Value {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(admin(s));
    if let Some(b) = body {
        r = r.json(&b);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn offering(s: &TestServer) -> String {
    let body = json!({"name": "slice", "resource_class": "gpu", "image": "ghcr.io/lab/jupyter:4", "gpu_model": "A100",
                      "gpu_mem_mb": 20480, "gpu_cores": 30, "cpu": 4, "mem_gb": 16});
    admin_call(s, reqwest::Method::POST, "/api/v1/offerings", Some(body), 201).await["id"].as_str().unwrap().to_string()
}

/// A new session: (id, CR name).
async fn new_session(s: &TestServer, offering: &str) -> (String, String) {
    let v = admin_call(s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": offering})), 201).await;
    (v["id"].as_str().unwrap().to_string(), v["cr_name"].as_str().unwrap().to_string())
}

/// One POST as the operator's `doJSON` sends it: JSON, bearer, and `traceparent` when the body
/// carries a 32-hex trace id.
async fn op_post(s: &TestServer, token: &str, path: &str, body: &Value) -> reqwest::Response {
    let mut r = s.client.post(s.url(path)).bearer_auth(token).header("Content-Type", "application/json");
    if let Some(t) = body["trace_id"].as_str().filter(|t| t.len() == 32) {
        r = r.header("traceparent", format!("00-{t}-{}-01", &t[16..]));
    }
    r.body(serde_json::to_vec(body).unwrap()).send().await.unwrap()
}

/// The operator's verdict on an answer (client.go `doJSON`): 2xx and 409 done, 5xx and one 401
/// retried, any other 4xx final. Asserts the call was accepted and returns the body.
async fn accepted(s: &TestServer, token: &str, path: &str, body: &Value) -> Value {
    let res = op_post(s, token, path, body).await;
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert!((200..300).contains(&status), "{path} answered {status} to input upstream accepts: {text}\n{body}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn op_get(s: &TestServer, token: &str, path: &str) -> Value {
    // The two hostname GETs send no Content-Type.
    let res = s.client.get(s.url(path)).bearer_auth(token).send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.json().await.unwrap()
}

/// An operator token for the cluster a session landed on.
async fn op_of(s: &TestServer, sid: &str) -> String {
    operator(s, session(s, sid).await["cluster_id"].as_str().unwrap())
}

/// Go's `time.Time` in JSON: RFC 3339 with nanoseconds, UTC.
fn go_ts(s: &TestServer) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(s.clock.now_ms()) * 1_000_000 + 123_456).unwrap();
    t.format(&time::format_description::well_known::Rfc3339).unwrap()
}

fn status_path(cr: &str) -> String {
    format!("/internal/sessions/{cr}/status")
}

/// `StatusEvent` as the session controller fills it for a live pod.
fn pod_report(s: &TestServer, cid: &str, cr: &str, phase: &str, gpu: &str, generation: i64) -> Value {
    json!({"phase": phase, "bound_gpu_uuid": gpu, "node_name": "gpu-node-0", "pod_ref": format!("{NS}/ses-{cr}"),
           "trace_id": "0af7651916cd43dd8448eb211c80319c", "generation": generation, "restart_count": 0,
           "container_state": "Running", "cluster_id": cid, "ts": go_ts(s)})
}

fn cr_obj(c: &FakeCluster, name: &str) -> Value {
    c.store().get("gshare.io", "v1", "gsharesessions", Some(NS), name).unwrap()
}

/// Every §2 call, in the order an operator's first hours produce them.
#[tokio::test]
async fn every_operator_call_with_upstreams_bodies() {
    let s = server().await;
    let c = cluster("replay-a").await;
    let cid = register(&s, "replay-a", &c).await;
    let op = operator(&s, &cid);
    let off = offering(&s).await;

    // §2.6 the inventory controller's first GETs: nothing to cordon or remove yet.
    assert_eq!(op_get(&s, &op, "/internal/nodes/cordoned").await, json!({"hostnames": []}));
    assert_eq!(op_get(&s, &op, "/internal/nodes/decommissioning").await, json!({"hostnames": []}));

    // §2.3 `Node`: zero values omitted, node_ready always sent; a CPU node and a storage node.
    for (node, body) in [
        (
            "gpu-node-0",
            json!({"node_id": "gpu-node-0", "node_cpu": 64, "node_mem_gb": 503, "node_disk_gb": 878, "role": "gpu", "lossless_capable": true, "node_ready": true, "cluster_id": cid}),
        ),
        (
            "cpu-node-7",
            json!({"node_id": "cpu-node-7", "node_cpu": 16, "node_mem_gb": 62, "role": "cpu", "node_ready": true, "cluster_id": cid}),
        ),
        ("nas-1", json!({"node_id": "nas-1", "role": "storage", "node_ready": false, "cluster_id": cid})),
    ] {
        assert_eq!(accepted(&s, &op, "/internal/inventory/nodes", &body).await, json!({"accepted": true}), "{node}");
    }

    // §2.4 `GpuDevice`: HAMi's uuid, the `<node>-gpu-<i>` fallback, and an old MIG id with '/'.
    let hami = gshare_fake_kube::gpu_uuid(&c.kube_system_uid(), "gpu-node-0", 0);
    let mig = "MIG-GPU-5c8e1f2a-93b1-4c6e-9d2f-0a1b2c3d4e5f/1/0";
    for (uuid, mode) in [(hami.as_str(), "fractional"), ("cpu-node-7-gpu-0", "exclusive"), (mig, "mig")] {
        let node = if uuid.starts_with("cpu-node-7") { "cpu-node-7" } else { "gpu-node-0" };
        let body = json!({"node_id": node, "uuid": uuid, "model": "NVIDIA A100-SXM4-80GB", "mode": mode,
            "total_mem_mb": 81920, "used_mem_mb": 0, "total_cores": 100, "used_cores": 0, "status": "ready",
            "node_cpu": 64, "node_ready": true, "node_mem_gb": 503, "node_disk_gb": 878, "cluster_id": cid});
        assert_eq!(accepted(&s, &op, "/internal/inventory/gpu-devices", &body).await, json!({"accepted": true}));
    }
    let nodes = admin_call(&s, reqwest::Method::GET, &format!("/api/v1/clusters/{cid}/nodes"), None, 200).await;
    assert!(nodes.to_string().contains(mig), "the MIG card is stored under its id: {nodes}");

    // §2.5 drift.
    let drift = json!({"cluster_id": cid, "uuid": hami, "used_mem_mb": 90000, "total_mem_mb": 81920});
    assert_eq!(accepted(&s, &op, "/internal/inventory/drift", &drift).await, json!({"accepted": true}));

    // §2.7 health: a warn without a card (action always sent), then a critical Xid with a cordon,
    // and the health controller's `node.cordon` audit (§2.2) for it.
    let warn =
        json!({"node_id": "cpu-node-7", "kind": "temp", "severity": "warn", "action": "alert", "cluster_id": cid});
    assert_eq!(accepted(&s, &op, "/internal/nodes/health-events", &warn).await, json!({"accepted": true}));
    let crit = json!({"node_id": "cpu-node-7", "kind": "xid", "severity": "critical", "action": "cordon", "gpu_uuid": "cpu-node-7-gpu-0", "cluster_id": cid});
    assert_eq!(accepted(&s, &op, "/internal/nodes/health-events", &crit).await, json!({"accepted": true}));
    let audit = json!({"actor": format!("operator:{cid}"), "action": "node.cordon", "target": "cpu-node-7", "result": "ok",
        "detail": {"kind": "xid", "xid": 79}, "ts": go_ts(&s)});
    assert_eq!(accepted(&s, &op, "/internal/audit/operator", &audit).await, json!({"accepted": true}));
    assert_eq!(op_get(&s, &op, "/internal/nodes/cordoned").await, json!({"hostnames": ["cpu-node-7"]}));

    // excludedNodes on create (§3, handoff.py L31): cordoned and offline nodes, sorted.
    let (sid, cr) = new_session(&s, &off).await;
    assert_eq!(cr_obj(&c, &cr)["spec"]["excludedNodes"], json!(["cpu-node-7", "nas-1"]));

    // §2.1 the session controller: Pending (no pod), Preparing, Running on the MIG card with the
    // pod facts, heartbeats; the reaper's IdleWarning.
    let gen1 = cr_obj(&c, &cr)["metadata"]["generation"].as_i64().unwrap();
    let pending = json!({"phase": "Pending", "cluster_id": cid, "generation": gen1, "ts": go_ts(&s)});
    assert_eq!(accepted(&s, &op, &status_path(&cr), &pending).await, json!({"accepted": true}));
    let mut preparing = pod_report(&s, &cid, &cr, "Preparing", "", gen1);
    preparing.as_object_mut().unwrap().remove("bound_gpu_uuid");
    preparing["container_state"] = json!("Waiting:ContainerCreating");
    accepted(&s, &op, &status_path(&cr), &preparing).await;
    assert_eq!(session(&s, &sid).await["phase"], "preparing");
    accepted(&s, &op, &status_path(&cr), &pod_report(&s, &cid, &cr, "Running", mig, gen1)).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["bound_gpu_uuid"]), (&json!("running"), &json!(mig)), "{v}");
    accepted(&s, &op, &status_path(&cr), &pod_report(&s, &cid, &cr, "Heartbeat", mig, gen1)).await;
    let warn = json!({"phase": "IdleWarning", "pod_ref": format!("{NS}/ses-{cr}"), "message": "240", "generation": gen1, "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &warn).await;
    assert_eq!(session(&s, &sid).await["message"], "idle: reaped in 240 s unless used");

    // The reaper pauses it (spec.paused + pause-reason), audits `session.pause`, and the
    // controller reports Paused with the reason as message.
    let paused = json!({"phase": "Paused", "message": "idle-reaped", "generation": gen1 + 1, "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &paused).await;
    let audit = json!({"actor": format!("operator:{cid}"), "action": "session.pause", "target": cr, "result": "ok",
        "detail": {"reason": "idle-reaped", "session": cr}, "ts": go_ts(&s)});
    accepted(&s, &op, "/internal/audit/operator", &audit).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("paused"), &json!("idle")), "{v}");

    // Resume (§3, handoff.py L94): excludedNodes again, and running at once (§9).
    let v = admin_call(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    assert_eq!(v["phase"], "running");
    let o = cr_obj(&c, &cr);
    assert_eq!(o["spec"]["excludedNodes"], json!(["cpu-node-7", "nas-1"]));
    let gen_resumed = o["metadata"]["generation"].as_i64().unwrap();
    accepted(&s, &op, &status_path(&cr), &pod_report(&s, &cid, &cr, "Running", &hami, gen_resumed)).await;
    assert_eq!(session(&s, &sid).await["bound_gpu_uuid"], json!(hami));

    // The reaper's max-runtime path: delete the CR, Terminating, `pod.delete` on the pod ref, then
    // the finalizer's Terminated (the controller sends it with no pod facts).
    let term = json!({"phase": "Terminating", "pod_ref": format!("{NS}/ses-{cr}"), "message": "max-runtime-exceeded", "generation": gen_resumed, "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &term).await;
    let audit = json!({"actor": format!("operator:{cid}"), "action": "pod.delete", "target": format!("{NS}/ses-{cr}"),
        "result": "ok", "detail": {"reason": "max-runtime-exceeded", "session": cr}, "ts": go_ts(&s)});
    accepted(&s, &op, "/internal/audit/operator", &audit).await;
    let done = json!({"phase": "Terminated", "generation": gen_resumed, "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &done).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("terminated"), &json!("max_runtime")), "{v}");
    let log =
        admin_call(&s, reqwest::Method::GET, &format!("/api/v1/audit?actor=operator:{cid}&size=50"), None, 200).await;
    let actions: Vec<&str> = log["data"].as_array().unwrap().iter().filter_map(|e| e["action"].as_str()).collect();
    for a in ["node.cordon", "session.pause", "pod.delete"] {
        assert!(actions.contains(&a), "{a} in {actions:?}");
    }

    // "pod rejected: … is invalid: […]" runs past 1 KiB: Error is applied, the message kept cut.
    let (sid2, cr2) = new_session(&s, &off).await;
    let causes =
        (0..200).map(|i| format!("spec.containers[0].env[{i}].valueFrom: Invalid value: \"\"")).collect::<Vec<_>>();
    let long = format!("pod rejected: Pod \"ses-{cr2}\" is invalid: [{}]", causes.join(", "));
    assert!(long.len() > gshare::callbacks::wire::MAX_MESSAGE);
    let err = json!({"phase": "Error", "message": long, "generation": 1, "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr2), &err).await;
    let v = session(&s, &sid2).await;
    assert_eq!(v["phase"], "error", "the long message no longer strands the session: {v}");
    let m = v["message"].as_str().unwrap();
    assert!(m.starts_with("pod rejected: Pod") && m.contains("…[truncated ") && m.len() < long.len(), "{m}");

    // §2.8 the leader's volume sync, with a scratch-disk reading and a pool: the session's home
    // workspace (its CR's spec.volumes[0]) as the PVC the operator made of it, a PVC with an id
    // that is not ours and one without any (`volume_id` and `used_bytes` omitempty in Go).
    let home = session(&s, &sid2).await["volumes"][0]["volume_id"].as_str().unwrap().to_string();
    let home_pvc = home.to_lowercase().replace('_', "-");
    let sync = json!({"volumes": [{"name": home_pvc, "volume_id": home, "capacity_gb": 10, "used_bytes": 4096, "mounted": true, "storage_class": "zfs-nvme"},
                                  {"name": "vol-01jabc", "volume_id": "vol_01JABC", "capacity_gb": 10, "used_bytes": 4096, "mounted": true, "storage_class": "zfs-nvme"},
                                  {"name": "stray", "capacity_gb": 5, "mounted": false}],
                      "sessions": [{"name": cr2, "ephemeral_used_bytes": 1_048_576, "ephemeral_limit_bytes": 10_737_418_240u64}],
                      "pools": [{"storage_class": "zfs-nvme", "capacity_bytes": 1_000_000_000_000u64}], "cluster_id": cid});
    let answer = accepted(&s, &op, "/internal/volumes/sync", &sync).await;
    // What `VolumeSyncResult` decodes: a directive per PVC, `quota_gb` a number or null.
    assert_eq!(answer["orphans"], 2);
    assert_eq!(
        answer["volumes"],
        json!([{"name": home_pvc, "volume_id": home, "quota_gb": 10, "reclaim": false},
               {"name": "vol-01jabc", "volume_id": "vol_01JABC", "quota_gb": null, "reclaim": false},
               {"name": "stray", "volume_id": null, "quota_gb": null, "reclaim": false}])
    );

    // §2.10 the node agent's samples.
    let samples = json!({"node": "gpu-node-0", "samples": [{"session": cr2, "at": 1714557600.5, "cpu_cores": 0.5, "mem_bytes": 1024}]});
    accepted(&s, &op, "/internal/metrics/session-samples", &samples).await;

    // §2.6 decommission: the admin removes a node, the operator lists it, deletes it, confirms.
    admin_call(&s, reqwest::Method::POST, &format!("/api/v1/clusters/{cid}/nodes/nas-1/decommission"), None, 200).await;
    assert_eq!(op_get(&s, &op, "/internal/nodes/decommissioning").await, json!({"hostnames": ["nas-1"]}));
    let res = s
        .client
        .post(s.url("/internal/nodes/decommissioned"))
        .bearer_auth(&op)
        .header("Content-Type", "application/json")
        .body(r#"{"hostname":"nas-1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    assert_eq!(op_get(&s, &op, "/internal/nodes/decommissioning").await, json!({"hostnames": []}));

    // §2.9 an image-build reconciler's reports: no build is known here, so 202 accepted:false
    // (upstream's answer for an unknown build), never the 404 it would requeue on for ever.
    for phase in ["running", "succeeded", "failed", "queued"] {
        let body =
            json!({"phase": phase, "image_ref": "registry.lab/u/img:1", "error": "", "log_tail": "x".repeat(16384)});
        assert_eq!(
            accepted(&s, &op, "/internal/image-builds/bld_01JXYZ/status", &body).await,
            json!({"accepted": false})
        );
    }
    let res = op_post(&s, &op, "/internal/image-builds/bld_01JXYZ/status", &json!({"image_ref": "x"})).await;
    expect_error(res, 422, "validation_failed").await;
    s.stop().await;
}

/// Each field at upstream's limits and beyond gets upstream's answer.
#[tokio::test]
async fn fields_at_and_beyond_upstreams_limits() {
    let s = server().await;
    let c = cluster("replay-b").await;
    let cid = register(&s, "replay-b", &c).await;
    let op = operator(&s, &cid);
    let off = offering(&s).await;
    let (sid, cr) = new_session(&s, &off).await;
    let huge = "x".repeat(200 * 1024);
    let ctl = "a\u{0}b\u{1b}[2J\r\nc";

    // Status: every optional string very long, empty, or with control characters; unknown
    // phases; times far in the past and future; generation 0, negative, huge, as a string.
    let base = |phase: &str| json!({"phase": phase, "cluster_id": cid, "ts": go_ts(&s)});
    let mut cases = vec![];
    for field in ["bound_gpu_uuid", "node_name", "pod_ref", "yield_state", "message", "trace_id", "container_state"] {
        for v in [json!(huge), json!(""), json!(ctl)] {
            let mut b = base("Heartbeat");
            b[field] = v;
            cases.push(b);
        }
    }
    for phase in ["", "Hibernating", "RUNNING-ish", &huge, ctl] {
        cases.push(base(phase));
    }
    for ts in ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "2025-05-01T10:00:00", "2025-05-01 10:00:00.5"]
    {
        cases.push(json!({"phase": "Pending", "ts": ts}));
    }
    cases.push(json!({"phase": "Pending", "ts": 1_714_557_600}));
    for g in [json!(0), json!(-1), json!(i64::MAX), json!(u64::MAX), json!(1e30), json!("7")] {
        cases.push(json!({"phase": "Pending", "ts": go_ts(&s), "generation": g, "restart_count": g, "used_mem_mb": g}));
    }
    for body in &cases {
        assert_eq!(accepted(&s, &op, &status_path(&cr), body).await, json!({"accepted": true}));
    }
    // A path id longer than any CR name is an unknown session: 202, as upstream.
    accepted(&s, &op, &status_path(&"s".repeat(400)), &base("Running")).await;
    // What the session keeps of a long message is bounded and marked as cut.
    accepted(
        &s,
        &op,
        &status_path(&cr),
        &json!({"phase": "Running", "bound_gpu_uuid": huge, "ts": go_ts(&s), "cluster_id": cid}),
    )
    .await;
    let v = session(&s, &sid).await;
    let kept = v["bound_gpu_uuid"].as_str().unwrap();
    assert!(kept.len() < 400 && kept.ends_with("bytes]"), "{kept}");
    // Upstream refuses these too (its schema): no ts, an unreadable ts, no phase, a wrong type.
    for body in [
        json!({"phase": "Running"}),
        json!({"phase": "Running", "ts": "yesterday"}),
        json!({"phase": "Running", "ts": ""}),
        json!({"ts": go_ts(&s)}),
        json!({"phase": "Running", "ts": go_ts(&s), "generation": "seven"}),
        json!({"phase": "Running", "ts": go_ts(&s), "generation": 1.5}),
    ] {
        expect_error(op_post(&s, &op, &status_path(&cr), &body).await, 422, "validation_failed").await;
    }

    // Inventory: long and empty free text is stored cut; names that cannot be nodes or cards
    // are answered 202 and stored nowhere.
    let node = json!({"node_id": "gpu-node-0", "role": huge, "node_ready": true, "cluster_id": cid});
    assert_eq!(accepted(&s, &op, "/internal/inventory/nodes", &node).await, json!({"accepted": true}));
    for (node_id, uuid) in [("gpu-node-0", huge.as_str()), ("", "GPU-1"), (huge.as_str(), "GPU-1"), ("gpu-node-0", "")]
    {
        let body = json!({"node_id": node_id, "uuid": uuid, "mode": "fractional", "status": "ready", "node_ready": true, "cluster_id": cid});
        assert_eq!(accepted(&s, &op, "/internal/inventory/gpu-devices", &body).await, json!({"accepted": false}));
    }
    let card = json!({"node_id": "gpu-node-0", "uuid": "GPU-long-text", "model": huge, "mode": huge, "status": huge, "node_ready": true});
    assert_eq!(accepted(&s, &op, "/internal/inventory/gpu-devices", &card).await, json!({"accepted": true}));
    let key = format!("{cid}/GPU-long-text");
    let g = s.app().store.read(move |txn| gshare::inventory::model::GPUS.get(txn, &key)).await.unwrap().unwrap();
    assert!(g.model.len() < 2048 && g.model.ends_with("bytes]"), "{}", g.model.len());
    for drift in [json!({"uuid": huge}), json!({"uuid": ""}), json!({})] {
        accepted(&s, &op, "/internal/inventory/drift", &drift).await;
    }
    for hostname in [huge.as_str(), "", ctl] {
        accepted(&s, &op, "/internal/nodes/decommissioned", &json!({"hostname": hostname})).await;
    }

    // Health events: any node (unknown ones are logged), any card or message; the enumerated
    // fields are checked against their values: an unknown kind is 422.
    for ev in [
        json!({"node_id": huge, "kind": "xid", "severity": "critical", "action": "alert"}),
        json!({"node_id": "", "kind": "ECC", "severity": "Warn", "action": ""}),
        json!({"node_id": "gpu-node-0", "kind": "down", "severity": "info", "action": "alert", "gpu_uuid": huge, "message": huge, "id": huge}),
        json!({"node_id": "gpu-node-0", "kind": "temp"}),
    ] {
        assert_eq!(accepted(&s, &op, "/internal/nodes/health-events", &ev).await, json!({"accepted": true}), "{ev}");
    }
    for (ev, field) in [
        (json!({"node_id": "gpu-node-0", "kind": "nvlink"}), "kind"),
        (json!({"node_id": "gpu-node-0", "kind": "xid", "severity": "fatal"}), "severity"),
        (json!({"node_id": "gpu-node-0", "kind": "xid", "action": "reboot"}), "action"),
    ] {
        let b =
            expect_error(op_post(&s, &op, "/internal/nodes/health-events", &ev).await, 422, "validation_failed").await;
        assert_eq!(b["error"]["details"]["errors"][0]["loc"], json!(["body", field]));
        assert_eq!(b["error"]["details"]["errors"][0]["type"], "enum");
    }

    // Volumes: long and odd names are answered, stored only when they can be Kubernetes names.
    let sync = json!({"volumes": [{"name": huge, "volume_id": huge, "capacity_gb": 1, "mounted": false, "storage_class": huge},
                                  {"name": "", "capacity_gb": 0, "mounted": false}],
                      "sessions": [{"name": huge, "ephemeral_used_bytes": 0, "ephemeral_limit_bytes": 0}],
                      "pools": [{"storage_class": huge, "capacity_bytes": 0}], "cluster_id": cid});
    let answer = accepted(&s, &op, "/internal/volumes/sync", &sync).await;
    assert_eq!(answer["volumes"].as_array().unwrap().len(), 2);
    let pools = json!({"volumes": [], "pools": [{"storage_class": "zfs", "capacity_bytes": -1}]});
    expect_error(op_post(&s, &op, "/internal/volumes/sync", &pools).await, 422, "validation_failed").await;

    // Samples: a long node name or session name is read; unknown sessions counted.
    let samples = json!({"node": huge, "samples": [{"session": huge, "at": 1.0, "cpu_cores": 0.0, "mem_bytes": 0}]});
    assert_eq!(
        accepted(&s, &op, "/internal/metrics/session-samples", &samples).await,
        json!({"accepted": 0, "unknown": 1})
    );

    // Audit: long result/trace/detail are stored cut; the ts may be any datetime upstream reads.
    let audit = json!({"actor": format!("operator:{cid}"), "action": "session.pause", "target": cr, "result": huge,
        "trace_id": huge, "detail": {"blob": huge}, "ts": "2025-05-01T10:00:00"});
    accepted(&s, &op, "/internal/audit/operator", &audit).await;
    let log = admin_call(
        &s,
        reqwest::Method::GET,
        &format!("/api/v1/audit?actor=operator:{cid}&action=session.pause"),
        None,
        200,
    )
    .await;
    let e = &log["data"][0];
    assert!(e.to_string().len() < 16 * 1024, "stored bounded: {} bytes", e.to_string().len());
    assert!(e["details"]["detail"]["truncated"]["bytes"].as_u64().unwrap() > 200 * 1024);

    // The body as a whole is still bounded: a clear 413.
    let big = json!({"phase": "Running", "ts": go_ts(&s), "message": "m".repeat(2 << 20)});
    expect_error(op_post(&s, &op, &status_path(&cr), &big).await, 413, "payload_too_large").await;
    // The server kept serving through all of it.
    assert_eq!(s.get("/healthz").await.status(), 200);
    s.stop().await;
}

/// §1 cluster scoping, the operator's audit entries, and the §9 state rules.
#[tokio::test]
async fn scoping_audit_targets_stale_reports_and_modes() {
    let s = server().await;
    let ca = cluster("replay-c").await;
    let a = register(&s, "replay-c", &ca).await;
    let cb = cluster("replay-d").await;
    let b = register(&s, "replay-d", &cb).await;
    let (op_a, op_b) = (operator(&s, &a), operator(&s, &b));
    let off = offering(&s).await;
    let (sid, cr) = new_session(&s, &off).await;
    let sid_cluster = session(&s, &sid).await["cluster_id"].as_str().unwrap().to_string();
    let (mine, theirs, other_cluster) = if sid_cluster == a { (&op_a, &op_b, &b) } else { (&op_b, &op_a, &a) };
    let own_cluster = &sid_cluster;

    // Another cluster's token on this session: 403. Upstream's details also name the session's
    // cluster (`cluster_id`); ours name only the caller's own, so a token for one cluster cannot
    // learn where another cluster's sessions run (the operator reads the status, not the details).
    let body = json!({"phase": "Running", "ts": go_ts(&s)});
    let e = expect_error(op_post(&s, theirs, &status_path(&cr), &body).await, 403, "forbidden").await;
    assert_eq!(e["error"]["details"], json!({"token_cluster": other_cluster}));
    assert!(!e.to_string().contains(own_cluster.as_str()), "the 403 names the session's cluster: {e}");
    // … also when that token's cluster is not registered (or no longer is): upstream's
    // status_router checks the session's cluster before anything else.
    let ghost = operator(&s, "clu_01JZZZZZZZZZZZZZZZZZZZZZZZ");
    let e = expect_error(op_post(&s, &ghost, &status_path(&cr), &body).await, 403, "forbidden").await;
    assert_eq!(e["error"]["details"], json!({"token_cluster": "clu_01JZZZZZZZZZZZZZZZZZZZZZZZ"}));
    assert!(!e.to_string().contains(own_cluster.as_str()), "the 403 names the session's cluster: {e}");
    admin_call(&s, reqwest::Method::DELETE, &format!("/api/v1/clusters/{other_cluster}"), None, 204).await;
    expect_error(op_post(&s, theirs, &status_path(&cr), &body).await, 403, "forbidden").await;
    assert_eq!(session(&s, &sid).await["phase"], "pending", "nothing applied");

    // Operator audit: only upstream's three actions, only on the token's own cluster's objects.
    let audit = |action: &str, target: &str| json!({"actor": format!("operator:{own_cluster}"), "action": action, "target": target, "result": "ok", "ts": go_ts(&s)});
    for action in ["node.drain", "session.force_terminate", "user.delete", ""] {
        let b = expect_error(
            op_post(&s, mine, "/internal/audit/operator", &audit(action, &cr)).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(b["error"]["details"]["errors"][0]["loc"], json!(["body", "action"]));
    }
    let other = {
        // A session on the other cluster (re-registered under a new id for the purpose).
        let cc = cluster("replay-e").await;
        let c2 = register(&s, "replay-e", &cc).await;
        let v = admin_call(
            &s,
            reqwest::Method::POST,
            "/api/v1/sessions",
            Some(json!({"offering_id": off, "cluster_id": c2})),
            201,
        )
        .await;
        v["cr_name"].as_str().unwrap().to_string()
    };
    let e = expect_error(
        op_post(&s, mine, "/internal/audit/operator", &audit("session.pause", &other)).await,
        403,
        "forbidden",
    )
    .await;
    assert_eq!(e["error"]["details"]["token_cluster"], json!(own_cluster));
    for (action, target) in [
        ("session.pause", "ses-01jnobodynobodynobodynobod"),
        ("pod.delete", &format!("{NS}/ses-{other}")),
        ("pod.delete", &format!("kube-system/ses-{cr}")),
        ("pod.delete", "kube-system/coredns-1"),
        ("node.cordon", "not-a-node-here"),
        ("node.cordon", "gpu-node-0\n2026-01-01T00:00:00Z INFO forged"),
    ] {
        expect_error(op_post(&s, mine, "/internal/audit/operator", &audit(action, target)).await, 403, "forbidden")
            .await;
    }
    let before = admin_call(&s, reqwest::Method::GET, "/api/v1/audit?action=pod.delete", None, 200).await["data"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, 0, "refused entries are not written");
    for (action, target) in
        [("session.pause", cr.clone()), ("pod.delete", format!("{NS}/ses-{cr}")), ("node.cordon", "gpu-node-0".into())]
    {
        accepted(&s, mine, "/internal/audit/operator", &audit(action, &target)).await;
    }
    // An empty pod ref (no pod yet) is placed by the detail's session, as the reaper sends it.
    let mut empty_ref = audit("pod.delete", "");
    empty_ref["detail"] = json!({"reason": "max-runtime-exceeded", "session": cr});
    accepted(&s, mine, "/internal/audit/operator", &empty_ref).await;

    // §9 stale rules: only a running session drops old reports. A pending session takes a
    // Terminated with an old ts; a running one drops it (no generation: the ts decides).
    let (sid2, cr2) = new_session(&s, &off).await;
    let op2 = op_of(&s, &sid2).await;
    let old = json!({"phase": "Terminated", "ts": "2001-01-01T00:00:00Z"});
    let (sid3, cr3) = new_session(&s, &off).await;
    let op3 = op_of(&s, &sid3).await;
    accepted(&s, &op2, &status_path(&cr2), &old).await;
    assert_eq!(session(&s, &sid2).await["phase"], "terminated");
    accepted(&s, &op3, &status_path(&cr3), &json!({"phase": "Running", "ts": go_ts(&s), "bound_gpu_uuid": "GPU-x"}))
        .await;
    accepted(&s, &op3, &status_path(&cr3), &old).await;
    assert_eq!(session(&s, &sid3).await["phase"], "running", "stale while running");
    // Generation 0 is "unknown" (the operator omits it), so the ts decides, as upstream's `if ev.generation`.
    accepted(&s, &op3, &status_path(&cr3), &json!({"phase": "Error", "ts": "2001-01-01T00:00:00Z", "generation": 0}))
        .await;
    assert_eq!(session(&s, &sid3).await["phase"], "running");
    // A paused session is not protected: an old-generation Terminated after resume-then-pause
    // ends it, as upstream (whose stale check runs only while running).
    let (sid6, cr6) = new_session(&s, &off).await;
    let op6 = op_of(&s, &sid6).await;
    accepted(&s, &op6, &status_path(&cr6), &json!({"phase": "Running", "ts": go_ts(&s)})).await;
    for action in ["pause", "resume", "pause"] {
        admin_call(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid6}/{action}"), None, 200).await;
    }
    accepted(
        &s,
        &op6,
        &status_path(&cr6),
        &json!({"phase": "Terminated", "ts": "2001-01-01T00:00:00Z", "generation": 1}),
    )
    .await;
    assert_eq!(session(&s, &sid6).await["phase"], "terminated");
    // The reaper's Paused applies to a session neither finished nor paused: a preparing one too.
    let (sid4, cr4) = new_session(&s, &off).await;
    let op4 = op_of(&s, &sid4).await;
    accepted(&s, &op4, &status_path(&cr4), &json!({"phase": "Preparing", "ts": go_ts(&s)})).await;
    accepted(&s, &op4, &status_path(&cr4), &json!({"phase": "Paused", "ts": go_ts(&s), "message": "idle-reaped"}))
        .await;
    let v = session(&s, &sid4).await;
    assert_eq!((&v["phase"], &v["reason"]), (&json!("paused"), &json!("idle")));
    // … but not one being deleted.
    let (sid5, cr5) = new_session(&s, &off).await;
    let op5 = op_of(&s, &sid5).await;
    accepted(
        &s,
        &op5,
        &status_path(&cr5),
        &json!({"phase": "Terminating", "ts": go_ts(&s), "message": "max-runtime-exceeded"}),
    )
    .await;
    accepted(&s, &op5, &status_path(&cr5), &json!({"phase": "Paused", "ts": go_ts(&s), "message": "idle-reaped"}))
        .await;
    assert_eq!(session(&s, &sid5).await["phase"], "terminating");

    // §2.4 corrected: a fractional/exclusive report overwrites an empty or MIG mode (no desired
    // mode here); it never flips fractional and exclusive, and `mig` always wins.
    let gpu = |uuid: &str, mode: Option<&str>| {
        let mut b =
            json!({"node_id": "gpu-node-1", "uuid": uuid, "total_mem_mb": 1000, "status": "ready", "node_ready": true});
        if let Some(m) = mode {
            b["mode"] = json!(m);
        }
        b
    };
    for (uuid, first, then, want) in [
        ("GPU-m1", Some("mig"), "fractional", "fractional"),
        ("GPU-m2", None, "exclusive", "exclusive"),
        ("GPU-m3", Some("exclusive"), "fractional", "exclusive"),
        ("GPU-m4", Some("fractional"), "mig", "mig"),
    ] {
        accepted(&s, mine, "/internal/inventory/gpu-devices", &gpu(uuid, first)).await;
        accepted(&s, mine, "/internal/inventory/gpu-devices", &gpu(uuid, Some(then))).await;
        let key = format!("{own_cluster}/{uuid}");
        let g = s.app().store.read(move |txn| gshare::inventory::model::GPUS.get(txn, &key)).await.unwrap().unwrap();
        assert_eq!(g.mode, want, "{uuid}: {first:?} then {then}");
    }
    s.stop().await;
}

/// The session controller's reports around a replaced pod and a resume, with
/// its bodies (`gsharesession_controller.go`: a live pod with a deletionTimestamp is reported as
/// `Preparing`; the finalizer's and a finished pod's `Terminated` carry the CR generation they were
/// built at, and a retried report keeps its first `ts`). Upstream keeps a running session running
/// on `Preparing` (`status_sync.py` `_reflect_phase`, its test
/// `test_preparing_for_a_running_session_keeps_it_running`), so the stale rule still covers it.
#[tokio::test]
async fn a_replaced_pod_and_a_late_report_from_before_the_resume_keep_the_session_running() {
    let s = server().await;
    let c = cluster("replay-g").await;
    let cid = register(&s, "replay-g", &c).await;
    let op = operator(&s, &cid);
    let off = offering(&s).await;
    let (sid, cr) = new_session(&s, &off).await;
    let gpu = "GPU-5c8e1f2a-93b1-4c6e-9d2f-0a1b2c3d4e5f";
    let gen1 = cr_obj(&c, &cr)["metadata"]["generation"].as_i64().unwrap();
    let mut preparing = pod_report(&s, &cid, &cr, "Preparing", "", gen1);
    preparing.as_object_mut().unwrap().remove("bound_gpu_uuid");
    preparing["container_state"] = json!("Waiting:ContainerCreating");
    accepted(&s, &op, &status_path(&cr), &preparing).await;
    assert_eq!(session(&s, &sid).await["phase"], "preparing", "a pending session advances");
    accepted(&s, &op, &status_path(&cr), &pod_report(&s, &cid, &cr, "Running", gpu, gen1)).await;
    assert_eq!(session(&s, &sid).await["phase"], "running");

    // 1. The pod is deleted under a running session (a drain, `kubectl delete pod`): the controller
    // reports the terminating pod as Preparing, then the new pod on another node as Running.
    let mut replaced = pod_report(&s, &cid, &cr, "Preparing", gpu, gen1);
    replaced["container_state"] = json!("Running");
    accepted(&s, &op, &status_path(&cr), &replaced).await;
    let v = session(&s, &sid).await;
    assert_eq!(v["phase"], "running", "Preparing moved a running session back: {v}");
    let mut moved = pod_report(&s, &cid, &cr, "Preparing", "", gen1);
    moved.as_object_mut().unwrap().remove("bound_gpu_uuid");
    moved["node_name"] = json!("gpu-node-1");
    moved["container_state"] = json!("Waiting:ContainerCreating");
    accepted(&s, &op, &status_path(&cr), &moved).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["node_name"]), (&json!("running"), &json!("gpu-node-1")), "{v}");
    let mut back = pod_report(&s, &cid, &cr, "Running", gpu, gen1);
    back["node_name"] = json!("gpu-node-1");
    accepted(&s, &op, &status_path(&cr), &back).await;
    assert_eq!(session(&s, &sid).await["phase"], "running");

    // 2. Pause: the controller deletes the pod and reports Paused (the echo of our pause). The old
    // pod's exit, built now at the pause's generation, is delivered late (the operator's retries
    // keep the report's first ts).
    admin_call(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/pause"), None, 200).await;
    let gen_paused = cr_obj(&c, &cr)["metadata"]["generation"].as_i64().unwrap();
    assert!(gen_paused > gen1);
    let echo = json!({"phase": "Paused", "generation": gen_paused, "trace_id": "0af7651916cd43dd8448eb211c80319c", "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &echo).await;
    let late_terminated = json!({"phase": "Terminated", "generation": gen_paused, "node_name": "gpu-node-1",
        "pod_ref": format!("{NS}/ses-{cr}"), "restart_count": 0, "container_state": "Terminated:Completed",
        "trace_id": "0af7651916cd43dd8448eb211c80319c", "cluster_id": cid, "ts": go_ts(&s)});
    let mut late_no_generation = late_terminated.clone();
    late_no_generation.as_object_mut().unwrap().remove("generation");
    late_no_generation["phase"] = json!("Error");
    late_no_generation["message"] = json!("Error: exit code 137");
    s.clock.advance(std::time::Duration::from_secs(30));

    // 3. Resume: running at once (as upstream); the new pod is Preparing, then the late reports
    // from the old run arrive. None of them ends a session whose new pod is coming up.
    let v = admin_call(&s, reqwest::Method::POST, &format!("/api/v1/sessions/{sid}/resume"), None, 200).await;
    assert_eq!(v["phase"], "running");
    let gen_resumed = cr_obj(&c, &cr)["metadata"]["generation"].as_i64().unwrap();
    assert!(gen_resumed > gen_paused);
    let mut new_pod = pod_report(&s, &cid, &cr, "Preparing", "", gen_resumed);
    new_pod.as_object_mut().unwrap().remove("bound_gpu_uuid");
    new_pod["container_state"] = json!("Waiting:ContainerCreating");
    accepted(&s, &op, &status_path(&cr), &new_pod).await;
    assert_eq!(session(&s, &sid).await["phase"], "running", "Preparing after the resume");
    accepted(&s, &op, &status_path(&cr), &late_terminated).await;
    let v = session(&s, &sid).await;
    assert_eq!(v["phase"], "running", "a Terminated from before the resume ended the session: {v}");
    accepted(&s, &op, &status_path(&cr), &late_no_generation).await;
    let v = session(&s, &sid).await;
    assert_eq!(v["phase"], "running", "an Error stamped before the resume (no generation: the ts decides): {v}");
    accepted(&s, &op, &status_path(&cr), &pod_report(&s, &cid, &cr, "Running", gpu, gen_resumed)).await;
    let v = session(&s, &sid).await;
    assert_eq!((&v["phase"], &v["bound_gpu_uuid"]), (&json!("running"), &json!(gpu)), "{v}");

    // 4. A report of this run still ends it: the finalizer's Terminated after a delete.
    admin_call(&s, reqwest::Method::DELETE, &format!("/api/v1/sessions/{sid}"), None, 200).await;
    let gen_deleted = c
        .store()
        .get("gshare.io", "v1", "gsharesessions", Some(NS), &cr)
        .map_or(gen_resumed, |o| o["metadata"]["generation"].as_i64().unwrap_or(gen_resumed));
    let done = json!({"phase": "Terminated", "generation": gen_deleted, "trace_id": "0af7651916cd43dd8448eb211c80319c", "cluster_id": cid, "ts": go_ts(&s)});
    accepted(&s, &op, &status_path(&cr), &done).await;
    assert_eq!(session(&s, &sid).await["phase"], "terminated");
    s.stop().await;
}

/// A lab moving from upstream keeps its operators: with upstream's signing key and kid
/// (`GSHARE_INTERNAL_JWT_PRIVATE_KEY` + `GSHARE_INTERNAL_JWT_KID=internal`), a token upstream's
/// `sign_internal_jwt` minted before the move is accepted.
#[tokio::test]
async fn a_token_upstream_minted_keeps_working() {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    crate::support::init();
    // Upstream's Secret `gshare-jwt-signing` holds `private.pem` (PKCS#1 from older OpenSSL,
    // PKCS#8 from newer): both are taken.
    let key = gshare::auth::keys::SigningKey::generate_for_tests();
    let pkcs8 = key.private_pem().expose().to_string();
    let rsa_key = rsa::PrivateKey::from_pkcs8_pem(&pkcs8).unwrap();
    let pkcs1 = rsa_key.to_pkcs1_pem(rsa::pkcs8::LineEnding::LF).unwrap().to_string();
    for pem in [pkcs1, pkcs8] {
        // Minted first, from the PEM alone, exactly as sign_internal_jwt does it.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let cluster = "clu_01JABCDEFGHJKMNPQRSTVWXYZ0";
        let claims = json!({"sub": format!("operator:{cluster}"), "aud": "gshare-internal", "iss": "gshare-internal",
                            "iat": now, "nbf": now, "exp": now + 604_800});
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some("internal".into());
        let token =
            jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap())
                .unwrap();

        // With upstream's kid set, and without it: a token whose kid names no
        // key here is checked against each key of the ring, as upstream's verifier does.
        for kid in [Some("internal"), None] {
            let mut env = vec![("GSHARE_INTERNAL_JWT_PRIVATE_KEY", pem.as_str())];
            env.extend(kid.map(|k| ("GSHARE_INTERNAL_JWT_KID", k)));
            let s = TestServer::start_with(&env).await;
            let jwks: Value = s.get("/.well-known/gshare-internal-jwks.json").await.json().await.unwrap();
            if kid.is_some() {
                assert_eq!(jwks["keys"][0]["kid"], "internal");
            } else {
                assert_ne!(jwks["keys"][0]["kid"], "internal", "{jwks}");
            }
            assert_eq!(op_get(&s, &token, "/internal/nodes/cordoned").await, json!({"hostnames": []}), "kid {kid:?}");
            let node = json!({"node_id": "gpu-1", "node_ready": true, "cluster_id": cluster});
            assert_eq!(accepted(&s, &token, "/internal/inventory/nodes", &node).await, json!({"accepted": true}));
            // A token from any other key is still refused.
            let other = gshare::auth::keys::SigningKey::generate_for_tests();
            let forged = jsonwebtoken::encode(
                &header,
                &claims,
                &jsonwebtoken::EncodingKey::from_rsa_pem(other.private_pem().expose().as_bytes()).unwrap(),
            )
            .unwrap();
            let res = s.client.get(s.url("/internal/nodes/cordoned")).bearer_auth(forged).send().await.unwrap();
            expect_error(res, 401, "unauthenticated").await;
            s.stop().await;
        }
    }
}

/// A `\n` in an operator-sent `node_id` cannot write a second log line.
#[tokio::test]
async fn a_newline_in_node_id_cannot_forge_a_log_line() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    // The same field formatter `gshare serve` installs for its plain-text log.
    let sub = tracing_subscriber::fmt()
        .with_writer(move || buf.clone())
        .with_ansi(false)
        .fmt_fields(gshare::logging::EscapedFields)
        .finish();
    let _guard = tracing::subscriber::set_default(sub);

    let s = server().await;
    let c = cluster("replay-f").await;
    let cid = register(&s, "replay-f", &c).await;
    let op = operator(&s, &cid);
    let forged = "2026-12-01T04:00:00.000000Z  INFO gshare: admin password changed by admin";
    let ev = json!({"node_id": format!("gpu-x\n{forged}"), "kind": "xid", "severity": "critical", "action": "cordon", "cluster_id": cid});
    accepted(&s, &op, "/internal/nodes/health-events", &ev).await;
    let bad = json!({"node_id": format!("gpu-y\r\n{forged}"), "uuid": "GPU-1", "node_ready": true});
    accepted(&s, &op, "/internal/inventory/gpu-devices", &bad).await;
    s.stop().await;

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let health: Vec<&str> = text.lines().filter(|l| l.contains("node health event")).collect();
    assert_eq!(health.len(), 1, "{text}");
    assert!(health[0].contains(&format!("node=gpu-x\\n{forged}")), "{}", health[0]);
    assert!(text.lines().any(|l| l.contains("gpu-y\\r\\n")), "{text}");
    assert!(!text.lines().any(|l| l.starts_with(forged)), "a forged line: {text}");
}
