//! `GET /api/v1/overview` and `/api/v1/overview/nodes/{cluster}/{node}`: the console's fleet
//! picture — every card of a registered cluster, bookings and sessions on them, marks, the ring
//! buffer's series, gzip, and the size of a 40,000-card answer.

use std::io::Read;
use std::time::Duration;

use gshare::inventory::model::{GPUS, GpuRecord, NODES, NodeRecord};
use serde_json::{Value, json};

use crate::sessions::{call, cluster, offering, operator, register, report, send, server, ts};
use crate::support::{TestServer, expect_error};

async fn get_overview(s: &TestServer) -> Value {
    send(s, reqwest::Method::GET, "/api/v1/overview", None, 200).await
}

/// The four numbers of card `i` of a node.
fn card(node: &Value, i: usize) -> [u64; 4] {
    let c = node["cards"].as_array().unwrap();
    [0, 1, 2, 3].map(|k| c[i * 4 + k].as_u64().unwrap())
}

#[tokio::test]
async fn the_fleet_shows_every_card_with_its_booking_sessions_and_marks() {
    let s = server().await;
    expect_error(s.client.get(s.url("/api/v1/overview")).send().await.unwrap(), 401, "unauthenticated").await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;

    let v = get_overview(&s).await;
    assert_eq!(v["totals"]["clusters"], 1);
    assert_eq!(v["totals"]["nodes"], 2);
    assert_eq!(v["totals"]["gpus"], 8);
    assert_eq!(v["totals"]["gpu_mem_total_mb"], 8 * 81_920);
    assert_eq!(v["totals"]["gpu_mem_booked_mb"], 0);
    let cl = &v["clusters"][0];
    assert_eq!((&cl["id"], &cl["name"], &cl["status"]), (&json!(cid), &json!("gpu-a"), &json!("connected")));
    let nodes = cl["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for n in nodes {
        assert_eq!(n["cards"].as_array().unwrap().len(), 4 * 4, "{n}");
        assert_eq!(n["models"], json!(["NVIDIA A100-SXM4-80GB"]));
        assert_eq!(n["flags"], 0);
        assert_eq!(card(n, 0), [81_920, 0, 0, 0]);
        assert!(n.get("uuids").is_none(), "uuids are not sent");
    }

    // A running session books a 20 GiB slice on a card: the card shows it, with one session.
    let node0 = nodes[0]["name"].as_str().unwrap().to_string();
    let detail = send(&s, reqwest::Method::GET, &format!("/api/v1/overview/nodes/{cid}/{node0}"), None, 200).await;
    assert_eq!(detail["cards"].as_array().unwrap().len(), 4);
    let uuid = detail["cards"][1]["uuid"].as_str().unwrap().to_string();
    let off = offering(&s, "slice").await;
    let ses =
        send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "name": "lab-1"})), 201)
            .await;
    let cr = ses["cr_name"].as_str().unwrap();
    let op = operator(&s, &cid);
    report(&s, &op, cr, json!({"phase": "Running", "ts": ts(&s), "bound_gpu_uuid": uuid, "node_name": node0})).await;

    let v = get_overview(&s).await;
    assert_eq!(v["totals"]["gpu_mem_booked_mb"], 20_480);
    assert_eq!(v["totals"]["gpus_busy"], 1);
    assert_eq!(v["totals"]["sessions_running"], 1);
    assert_eq!(card(&v["clusters"][0]["nodes"][0], 1), [81_920, 20_480, 0, 1]);
    let detail = send(&s, reqwest::Method::GET, &format!("/api/v1/overview/nodes/{cid}/{node0}"), None, 200).await;
    let on = &detail["cards"][1];
    assert_eq!((&on["uuid"], &on["booked_mem_mb"], &on["booked_cores"]), (&json!(uuid), &json!(20_480), &json!(30)));
    let sessions = on["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((&sessions[0]["id"], &sessions[0]["name"]), (&ses["id"], &json!("lab-1")));
    assert_eq!((&sessions[0]["phase"], &sessions[0]["booked_mem_mb"]), (&json!("running"), &json!(20_480)));
    assert!(sessions[0]["allocation_id"].as_str().unwrap().starts_with("alc_"));
    assert!(detail["cards"][0]["sessions"].as_array().unwrap().is_empty());

    // Marks: a cordoned, offline node and a card in error (written as the inventory would).
    let (cid2, node1) = (cid.clone(), nodes[1]["name"].as_str().unwrap().to_string());
    s.app()
        .store
        .write(move |txn| {
            let key = format!("{cid2}/{node1}");
            let mut n: NodeRecord = NODES.get_in_write(txn, &key)?.unwrap();
            (n.cordoned, n.offline) = (true, true);
            NODES.put(txn, &key, &n)?;
            let (gk, mut g): (String, GpuRecord) =
                GPUS.list_in_write(txn)?.into_iter().find(|(_, g)| g.node == node1).unwrap();
            g.status = "notready".into();
            GPUS.put(txn, &gk, &g)
        })
        .await
        .unwrap();
    let v = get_overview(&s).await;
    let n1 = &v["clusters"][0]["nodes"][1];
    assert_eq!(n1["flags"].as_u64().unwrap() & 3, 3, "cordoned and offline: {n1}");
    assert_eq!(card(n1, 0)[2] & 1, 1, "the card in error");
    assert_eq!(
        (&v["totals"]["nodes_cordoned"], &v["totals"]["nodes_offline"], &v["totals"]["gpus_error"]),
        (&json!(1), &json!(1), &json!(1))
    );

    // Unknown nodes and clusters are 404 in the error envelope.
    expect_error(
        call(&s, reqwest::Method::GET, &format!("/api/v1/overview/nodes/{cid}/no-such-node"), None).await,
        404,
        "not_found",
    )
    .await;
    expect_error(call(&s, reqwest::Method::GET, "/api/v1/overview/nodes/clu_nope/x", None).await, 404, "not_found")
        .await;
    // Path tricks are not cluster ids, and huge names are not echoed back whole.
    let huge = "a".repeat(10_000);
    for path in [
        "/api/v1/overview/nodes/..%2F..%2Fetc/passwd".to_string(),
        format!("/api/v1/overview/nodes/{huge}/x"),
        format!("/api/v1/overview/nodes/{cid}/{huge}"),
    ] {
        let body = expect_error(call(&s, reqwest::Method::GET, &path, None).await, 404, "not_found").await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.len() < 300, "{message}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_series_sample_sessions_memory_and_callbacks_per_second() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    // No callback before the first sample: the ten below are the only ones.
    let cid = crate::sessions::register_only(&s, "gpu-a", &c).await;
    let app = s.app();
    app.overview.sample(gshare::overview::callbacks_total(app)).await.unwrap();
    // Ten operator callbacks, then ten seconds later (the test clock) a second sample.
    let op = operator(&s, &cid);
    for _ in 0..10 {
        let res = s
            .client
            .post(s.url("/internal/inventory/nodes"))
            .bearer_auth(&op)
            .json(&json!({"node_id": "gpu-node-0", "node_ready": true, "cluster_id": cid}))
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{}", res.status());
    }
    s.clock.advance(Duration::from_secs(10));
    app.overview.sample(gshare::overview::callbacks_total(app)).await.unwrap();
    let series = get_overview(&s).await["series"].clone();
    assert_eq!(series["interval_s"], gshare::overview::SAMPLE_EVERY.as_secs());
    let t = series["t"].as_array().unwrap();
    let n = t.len();
    assert!(n >= 2, "{series}");
    for col in ["sessions_running", "gpu_mem_booked_mb", "callbacks_per_s"] {
        assert_eq!(series[col].as_array().unwrap().len(), n, "{col}");
    }
    // Rate × interval over every pair of samples adds up to the ten callbacks (the background
    // sampler may have taken samples in between: that only splits them).
    let rates: Vec<f64> = series["callbacks_per_s"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let at: Vec<i64> = t.iter().map(|x| x.as_i64().unwrap()).collect();
    let total: f64 = (1..n).map(|i| rates[i] * (at[i] - at[i - 1]) as f64 / 1000.0).sum();
    assert!((9.5..=10.5).contains(&total), "{rates:?} at {at:?}: {total}");
    assert_eq!(series["sessions_running"][n - 1], 0);

    // A running session with one open and one released allocation, and a pending one: the
    // sample counts the running session and the open allocation's memory only.
    let id = cid.clone();
    app.store
        .write(move |txn| {
            use gshare::inventory::gpu_booking::{ALLOCATIONS, AllocationRecord, allocation_key};
            use gshare::sessions::model::{Phase, SessionRecord, put_session};
            let run = SessionRecord {
                phase: Phase::Running,
                ..SessionRecord::new("ses_01JSERIESAAAAAAAAAAAAAAAA", &id, "x", "u", 0)
            };
            let wait = SessionRecord {
                phase: Phase::Pending,
                ..SessionRecord::new("ses_01JSERIESBBBBBBBBBBBBBBBB", &id, "x", "u", 0)
            };
            put_session(txn, &run)?;
            put_session(txn, &wait)?;
            for (alc, released, mem) in [("alc_1", None, 20480), ("alc_2", Some(5), 8192)] {
                let a = AllocationRecord {
                    id: alc.into(),
                    cluster_id: id.clone(),
                    session_id: run.id.clone(),
                    gpu_uuid: Some("GPU-1".into()),
                    created_at: 1,
                    released_at: released,
                    gpu_mem_mb: mem,
                    gpu_cores: 30,
                };
                ALLOCATIONS.put(txn, &allocation_key(&run.id, alc), &a)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    s.clock.advance(Duration::from_secs(5));
    app.overview.sample(gshare::overview::callbacks_total(app)).await.unwrap();
    let series = get_overview(&s).await["series"].clone();
    let last = series["t"].as_array().unwrap().len() - 1;
    assert_eq!((&series["sessions_running"][last], &series["gpu_mem_booked_mb"][last]), (&json!(1), &json!(20480)));
    s.stop().await;
}

#[tokio::test]
async fn forty_thousand_cards_travel_compact_and_gzipped() {
    let s = TestServer::start().await;
    // A fleet of 10 clusters × 500 nodes × 8 cards, written as the registry and inventory do.
    let now = s.clock.now_ms();
    s.app()
        .store
        .write(move |txn| {
            for c in 0..10 {
                let id = format!("clu_01JOVERVIEW{c:014}");
                let mut rec = gshare::clusters::model::ClusterRecord::new(
                    &id,
                    format!("gpu-{c:02}"),
                    gshare::clusters::model::Role::Primary,
                    "https://10.0.0.1:6443".into(),
                    format!("file:{id}/kubeconfig"),
                    now,
                );
                rec.status = gshare::clusters::model::ClusterStatus::Connected;
                gshare::clusters::model::CLUSTERS.put(txn, &id, &rec)?;
                for n in 0..500 {
                    let name = format!("gpu-node-{n:04}");
                    let node = NodeRecord {
                        cluster_id: id.clone(),
                        name: name.clone(),
                        ready: true,
                        schedulable: n % 50 != 0,
                        cordoned: false,
                        decommissioning: false,
                        offline: false,
                        role: None,
                        cpu: Some(64.0),
                        mem_gb: Some(512.0),
                        disk_gb: None,
                        lossless_capable: false,
                        last_seen: Some(now),
                        not_ready_since: None,
                        gpu_count: 8,
                    };
                    NODES.put(txn, &format!("{id}/{name}"), &node)?;
                    for g in 0..8 {
                        let uuid = format!("GPU-{c:02}{n:04}{g:02}-0000-0000-0000-000000000000");
                        let used = if (n + g) % 3 == 0 { 20_480 } else { 0 };
                        let rec = GpuRecord {
                            cluster_id: id.clone(),
                            node: name.clone(),
                            uuid: uuid.clone(),
                            model: "NVIDIA A100-SXM4-80GB".into(),
                            mode: "fractional".into(),
                            total_mem_mb: 81_920,
                            used_mem_mb: used,
                            total_cores: 100,
                            used_cores: if used > 0 { 30 } else { 0 },
                            status: "ready".into(),
                        };
                        GPUS.put(txn, &format!("{id}/{uuid}"), &rec)?;
                    }
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    let token = crate::sessions::admin(&s);
    let plain = s.client.get(s.url("/api/v1/overview")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("content-encoding").is_none());
    let raw = plain.bytes().await.unwrap();
    let v: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(v["totals"]["gpus"], 40_000);
    assert_eq!(v["totals"]["nodes_cordoned"], 100);

    let gz = s
        .client
        .get(s.url("/api/v1/overview"))
        .bearer_auth(&token)
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    assert_eq!(gz.headers()["vary"], "accept-encoding");
    let packed = gz.bytes().await.unwrap();
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&packed[..]).read_to_end(&mut unpacked).unwrap();
    let again: Value = serde_json::from_slice(&unpacked).unwrap();
    assert_eq!(again["clusters"], v["clusters"]);
    // The compact form: well under 30 bytes a card raw, and a few bytes a card gzipped.
    eprintln!("overview of 40,000 cards: {} bytes JSON, {} bytes gzip", raw.len(), packed.len());
    assert!(raw.len() < 40_000 * 30, "{} bytes", raw.len());
    assert!(packed.len() < 40_000 * 3, "{} bytes gzipped", packed.len());
    s.stop().await;
}

#[tokio::test]
async fn the_openapi_document_has_the_overview() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    for path in ["/api/v1/overview", "/api/v1/overview/nodes/{cluster_id}/{node}", "/api/v1/snapshots/status"] {
        assert!(doc["paths"][path]["get"].is_object(), "{path}");
    }
    assert!(doc["components"]["schemas"]["NodeCells"]["properties"]["cards"].is_object());
    assert!(doc["components"]["schemas"]["NodeCells"]["properties"].get("uuids").is_none());
    s.stop().await;
}
