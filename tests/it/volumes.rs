//! Members' persistent volumes end to end: a home workspace made on the first session on a
//! cluster and mounted at /workspace in every session there (the CR's `spec.volumes`, accepted by
//! the fake API server with the product's CRD as a real one would), the operator's volume sync
//! answered with quotas and `reclaim` (contract §2.8, bodies as upstream's Go client marshals
//! them), orphans, quotas, grow, delete, and every bad input issue 25 lists.

use reqwest::Method;
use serde_json::{Value, json};

use crate::sessions::{cluster, offering, operator, register, send};
use crate::support::{TestServer, expect_error};

const GIB: i64 = 1 << 30;

async fn server() -> TestServer {
    TestServer::start_with(&[
        ("GSHARE_SESSION_DOMAIN", "sessions.lab.test"),
        ("GSHARE_SESSION_URL_SCHEME", "http"),
        ("GSHARE_VOLUME_HOME_GB", "20"),
        ("GSHARE_VOLUME_STORAGE_GB", "50"),
    ])
    .await
}

/// A member's bearer token (the account made by an invite they accepted, then signed in: an
/// admin-set password opens nothing but its change).
async fn member(s: &TestServer, name: &str) -> String {
    let pw = format!("{name}'s long passphrase");
    crate::users::create_own(s, json!({"username": name, "password": pw})).await;
    let res = s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username": name, "password": pw})).send();
    let v: Value = res.await.unwrap().json().await.unwrap();
    v["access_token"].as_str().unwrap().to_string()
}

async fn as_user(s: &TestServer, token: &str, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let mut r = s.client.request(method, s.url(path)).bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    r.send().await.unwrap()
}

async fn ok(res: reqwest::Response, want: u16) -> Value {
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// POST as the operator's `doJSON` sends it.
async fn sync(s: &TestServer, token: &str, body: &Value) -> reqwest::Response {
    let r =
        s.client.post(s.url("/internal/volumes/sync")).bearer_auth(token).header("Content-Type", "application/json");
    r.body(serde_json::to_vec(body).unwrap()).send().await.unwrap()
}

fn cr(c: &gshare_fake_kube::FakeCluster, name: &str) -> Value {
    c.store().get("gshare.io", "v1", "gsharesessions", Some("gshare-sessions"), name).unwrap()
}

fn pvc(id: &str) -> String {
    id.to_lowercase().replace('_', "-")
}

/// A `VolumeObserved` as `sot.VolumeObserved` marshals it: `volume_id`, `used_bytes` and
/// `storage_class` left out when empty.
fn observed(name: &str, id: Option<&str>, capacity_gb: i64, used: Option<i64>, mounted: bool) -> Value {
    let mut v = json!({"name": name, "capacity_gb": capacity_gb, "mounted": mounted, "storage_class": "zfs-nvme"});
    if let Some(id) = id {
        v["volume_id"] = json!(id);
    }
    if let Some(u) = used {
        v["used_bytes"] = json!(u);
    }
    v
}

/// The body `Client.SyncVolumes` posts: the three lists always present, then `cluster_id`.
fn body(cid: &str, volumes: Vec<Value>) -> Value {
    json!({"volumes": volumes, "sessions": [], "pools": [{"storage_class": "zfs-nvme", "capacity_bytes": 4_000_000_000_000i64}], "cluster_id": cid})
}

async fn volume(s: &TestServer, id: &str) -> Value {
    send(s, Method::GET, &format!("/api/v1/volumes/{id}"), None, 200).await
}

#[tokio::test]
async fn a_members_home_follows_their_sessions_and_the_sync_answers_quota_and_reclaim() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let alice = member(&s, "alice").await;
    let bob = member(&s, "bob").await;

    // The first session makes the home workspace; the CR carries it as the CRD's VolumeSpec (the
    // fake API server checks spec.volumes against the installed CRD).
    let new = || as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})));
    let s1 = ok(new().await, 201).await;
    let home = s1["volumes"][0]["volume_id"].as_str().unwrap().to_string();
    assert!(home.starts_with("vol_") && home.len() == 30, "{s1}");
    assert_eq!(
        s1["volumes"],
        json!([{"volume_id": home, "mount_path": "/workspace", "mode": "RWO", "read_only": false, "size_gb": 20}])
    );
    let spec = &cr(&c, s1["cr_name"].as_str().unwrap())["spec"];
    assert_eq!(
        spec["volumes"],
        json!([{"name": home, "mountPath": "/workspace", "mode": "ReadWriteOnce", "readOnly": false, "sizeGb": 20}])
    );
    // Every later session of hers there mounts the same home.
    let s2 = ok(new().await, 201).await;
    assert_eq!(s2["volumes"][0]["volume_id"], home.as_str());
    let mine = ok(as_user(&s, &alice, Method::GET, "/api/v1/volumes", None).await, 200).await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 1, "{mine}");
    let v = &mine["data"][0];
    assert_eq!(
        (&v["kind"], &v["owner"], &v["cluster_id"], &v["size_gb"]),
        (&json!("home"), &json!("alice"), &json!(cid), &json!(20))
    );
    assert_eq!(v["state"], "active");
    let by: Vec<&str> = v["mounted_by"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(by.len(), 2, "{v}");
    assert!(by.contains(&s1["id"].as_str().unwrap()) && by.contains(&s2["id"].as_str().unwrap()));

    // The sync: the home's PVC answered with its quota; a PVC nobody explains is an orphan.
    let report = body(
        &cid,
        vec![
            observed(&pvc(&home), Some(&home), 20, Some(5 * GIB), true),
            observed("scratch-old", None, 5, None, false),
            observed("vol-01jzzzzzzzzzzzzzzzzzzzzzzz", Some("vol_01JZZZZZZZZZZZZZZZZZZZZZZZ"), 8, None, false),
        ],
    );
    let answer = ok(sync(&s, &op, &report).await, 200).await;
    assert_eq!(
        answer,
        json!({"volumes": [
            {"name": pvc(&home), "volume_id": home, "quota_gb": 20, "reclaim": false},
            {"name": "scratch-old", "volume_id": null, "quota_gb": null, "reclaim": false},
            {"name": "vol-01jzzzzzzzzzzzzzzzzzzzzzzz", "volume_id": "vol_01JZZZZZZZZZZZZZZZZZZZZZZZ", "quota_gb": null, "reclaim": false}
        ], "orphans": 2})
    );
    let v = volume(&s, &home).await;
    assert_eq!(
        (&v["pvc"], &v["capacity_gb"], &v["used_bytes"], &v["mounted"], &v["storage_class"], &v["over_capacity"]),
        (&json!(pvc(&home)), &json!(20), &json!(5 * GIB), &json!(true), &json!("zfs-nvme"), &json!(false))
    );
    let key = format!("{cid}/zfs-nvme");
    let pool = s.app().store.read(move |t| gshare::inventory::model::POOLS.get(t, &key)).await.unwrap().unwrap();
    assert_eq!(pool["capacity_bytes"], 4_000_000_000_000i64, "pools still go to the inventory");
    // Orphans are listed for an admin, not for a member.
    let all = send(&s, Method::GET, &format!("/api/v1/volumes?cluster_id={cid}"), None, 200).await;
    let names: Vec<&str> = all["orphans"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["scratch-old", "vol-01jzzzzzzzzzzzzzzzzzzzzzzz"]);
    assert_eq!(ok(as_user(&s, &alice, Method::GET, "/api/v1/volumes", None).await, 200).await["orphans"], json!([]));

    // Named volumes within the limit (50 GiB: home 20 + 25); past it, 409 quota_exceeded.
    let add = |name: &str, gb: i64| {
        as_user(
            &s,
            &alice,
            Method::POST,
            "/api/v1/volumes",
            Some(json!({"name": name, "cluster_id": cid, "size_gb": gb})),
        )
    };
    let data = ok(add("datasets", 25).await, 201).await;
    let data_id = data["id"].as_str().unwrap().to_string();
    assert_eq!(
        (&data["kind"], &data["mount_path"], &data["mode"]),
        (&json!("named"), &json!("/data/datasets"), &json!("RWO"))
    );
    let e = expect_error(add("more", 10).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"scope": "user", "limit_gb": 50, "allocated_gb": 45, "requested_gb": 10}));
    expect_error(add("datasets", 1).await, 409, "conflict").await;
    // Grow: up to the limit; never shrink.
    let grow = |id: &str, gb: i64| {
        let path = format!("/api/v1/volumes/{id}");
        let (s, alice) = (&s, &alice);
        async move { as_user(s, alice, Method::PATCH, &path, Some(json!({"size_gb": gb}))).await }
    };
    assert_eq!(ok(grow(&data_id, 30).await, 200).await["size_gb"], 30);
    let e = expect_error(grow(&data_id, 31).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"scope": "user", "limit_gb": 50, "allocated_gb": 20, "requested_gb": 31}));
    let e = expect_error(grow(&data_id, 10).await, 409, "volume_shrink_not_allowed").await;
    assert_eq!(e["error"]["details"], json!({"quota_gb": 10, "current_gb": 30}));
    expect_error(grow(&data_id, -5).await, 422, "validation_failed").await;
    expect_error(grow(&data_id, 0).await, 422, "validation_failed").await;
    // Another member's volume answers as a missing one.
    expect_error(as_user(&s, &bob, Method::GET, &format!("/api/v1/volumes/{home}"), None).await, 404, "not_found")
        .await;
    expect_error(
        as_user(&s, &bob, Method::PATCH, &format!("/api/v1/volumes/{data_id}"), Some(json!({"size_gb": 40}))).await,
        404,
        "not_found",
    )
    .await;
    expect_error(
        as_user(&s, &bob, Method::DELETE, &format!("/api/v1/volumes/{data_id}"), None).await,
        404,
        "not_found",
    )
    .await;
    let body_for_bob = json!({"name": "x", "cluster_id": cid, "size_gb": 1, "owner": "alice"});
    expect_error(as_user(&s, &bob, Method::POST, "/api/v1/volumes", Some(body_for_bob)).await, 403, "forbidden").await;

    // A new session mounts the home and the named volume.
    let s3 = ok(new().await, 201).await;
    let paths: Vec<&str> =
        s3["volumes"].as_array().unwrap().iter().map(|v| v["mount_path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/workspace", "/data/datasets"]);
    assert_eq!(cr(&c, s3["cr_name"].as_str().unwrap())["spec"]["volumes"][1]["sizeGb"], 30);

    // Deleting a mounted volume: 409 naming the session; after the session ends, reclaim.
    let e = expect_error(
        as_user(&s, &alice, Method::DELETE, &format!("/api/v1/volumes/{data_id}"), None).await,
        409,
        "volume_mounted",
    )
    .await;
    assert_eq!(e["error"]["details"]["sessions"][0]["id"], s3["id"]);
    assert!(e["error"]["message"].as_str().unwrap().contains(s3["id"].as_str().unwrap()), "{e}");
    let e = expect_error(send_raw(&s, Method::DELETE, &format!("/api/v1/volumes/{home}")).await, 409, "volume_mounted")
        .await;
    assert_eq!(e["error"]["details"]["sessions"].as_array().unwrap().len(), 3);
    ok(
        as_user(&s, &alice, Method::DELETE, &format!("/api/v1/sessions/{}", s3["id"].as_str().unwrap()), None).await,
        200,
    )
    .await;
    let gone = ok(as_user(&s, &alice, Method::DELETE, &format!("/api/v1/volumes/{data_id}"), None).await, 200).await;
    assert_eq!(gone["state"], "reclaim_pending");
    // The next sync answers reclaim for its PVC (still with its quota); once the PVC is no longer
    // reported, the volume is reclaimed.
    let report = body(
        &cid,
        vec![
            observed(&pvc(&home), Some(&home), 20, Some(5 * GIB), true),
            observed(&pvc(&data_id), Some(&data_id), 25, Some(GIB), false),
        ],
    );
    let answer = ok(sync(&s, &op, &report).await, 200).await;
    assert_eq!(
        answer["volumes"][1],
        json!({"name": pvc(&data_id), "volume_id": data_id, "quota_gb": 30, "reclaim": true})
    );
    assert_eq!(answer["orphans"], 0);
    let after = send(&s, Method::GET, &format!("/api/v1/volumes?cluster_id={cid}"), None, 200).await;
    assert_eq!(after["orphans"], json!([]), "orphans no longer reported are gone");
    let report = body(&cid, vec![observed(&pvc(&home), Some(&home), 20, Some(5 * GIB), true)]);
    ok(sync(&s, &op, &report).await, 200).await;
    assert_eq!(volume(&s, &data_id).await["state"], "reclaimed");
    let listed = ok(as_user(&s, &alice, Method::GET, "/api/v1/volumes", None).await, 200).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "deleted volumes are listed only when asked");
    let listed = ok(as_user(&s, &alice, Method::GET, "/api/v1/volumes?deleted=true", None).await, 200).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);

    // One cluster per volume: a session on another cluster gets another home there.
    let c2 = cluster("gpu-b").await;
    let cid2 = register(&s, "gpu-b", &c2).await;
    let sb = ok(
        as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": cid2})))
            .await,
        201,
    )
    .await;
    let home_b = sb["volumes"][0]["volume_id"].as_str().unwrap();
    assert_ne!(home_b, home);
    assert_eq!(volume(&s, home_b).await["cluster_id"], cid2.as_str());

    // Deleting the member keeps their volumes (listed by owner for an admin).
    send(&s, Method::DELETE, "/api/v1/users/alice", None, 204).await;
    let kept = send(&s, Method::GET, "/api/v1/volumes?owner=alice", None, 200).await;
    assert_eq!(kept["data"].as_array().unwrap().len(), 2, "{kept}");
    s.stop().await;
}

async fn send_raw(s: &TestServer, method: Method, path: &str) -> reqwest::Response {
    crate::sessions::call(s, method, path, None).await
}

#[tokio::test]
async fn bad_syncs_are_refused_whole_or_kept_as_said() {
    let s = server().await;
    let (ca, cb) = (cluster("gpu-a").await, cluster("gpu-b").await);
    let a = register(&s, "gpu-a", &ca).await;
    let b = register(&s, "gpu-b", &cb).await;
    let off = offering(&s, "slice").await;
    let ses = send(
        &s,
        Method::POST,
        "/api/v1/sessions",
        Some(json!({"offering_id": off, "owner": "carol", "cluster_id": a})),
        201,
    )
    .await;
    let home = ses["volumes"][0]["volume_id"].as_str().unwrap().to_string();
    let (op_a, op_b) = (operator(&s, &a), operator(&s, &b));
    let good = body(&a, vec![observed(&pvc(&home), Some(&home), 20, Some(GIB), true)]);
    ok(sync(&s, &op_a, &good).await, 200).await;
    let before = volume(&s, &home).await;

    // Another cluster's operator naming a's volume: 403, nothing of the sync kept (its orphan,
    // its pool).
    let theirs = json!({"volumes": [observed(&pvc(&home), Some(&home), 99, Some(GIB), false), observed("b-orphan", None, 1, None, false)],
                        "sessions": [], "pools": [{"storage_class": "b-pool", "capacity_bytes": 1}], "cluster_id": b});
    let e = expect_error(sync(&s, &op_b, &theirs).await, 403, "forbidden").await;
    assert_eq!(e["error"]["details"], json!({"token_cluster": b, "volumes": [pvc(&home)]}));
    // Matched by name alone (no annotation) too.
    let by_name = body(&b, vec![observed(&pvc(&home), None, 99, None, false)]);
    expect_error(sync(&s, &op_b, &by_name).await, 403, "forbidden").await;
    assert_eq!(volume(&s, &home).await["capacity_gb"], before["capacity_gb"]);
    let listed = send(&s, Method::GET, &format!("/api/v1/volumes?cluster_id={b}"), None, 200).await;
    assert_eq!(listed["orphans"], json!([]));
    let key = format!("{b}/b-pool");
    assert!(s.app().store.read(move |t| gshare::inventory::model::POOLS.get(t, &key)).await.unwrap().is_none());
    // A body naming another cluster_id than the token's: 403 as every callback.
    expect_error(sync(&s, &op_b, &good).await, 403, "forbidden").await;

    // Negative sizes: 422 naming the field, nothing kept.
    for (field, v) in [
        ("capacity_gb", json!({"name": pvc(&home), "volume_id": home, "capacity_gb": -1, "mounted": false})),
        (
            "used_bytes",
            json!({"name": pvc(&home), "volume_id": home, "capacity_gb": 20, "used_bytes": -7, "mounted": false}),
        ),
    ] {
        let e = expect_error(sync(&s, &op_a, &body(&a, vec![v])).await, 422, "validation_failed").await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["body", "volumes", "0", field]), "{e}");
    }
    let neg = json!({"volumes": [], "sessions": [{"name": "ses-x", "ephemeral_used_bytes": -1, "ephemeral_limit_bytes": 10}], "pools": [], "cluster_id": a});
    expect_error(sync(&s, &op_a, &neg).await, 422, "validation_failed").await;
    assert_eq!(volume(&s, &home).await["used_bytes"], before["used_bytes"]);

    // Used bytes above the capacity: kept as the kubelet said it, and flagged.
    let over = body(&a, vec![observed(&pvc(&home), Some(&home), 20, Some(21 * GIB), true)]);
    assert_eq!(ok(sync(&s, &op_a, &over).await, 200).await["volumes"][0]["quota_gb"], 20);
    let v = volume(&s, &home).await;
    assert_eq!((&v["used_bytes"], &v["over_capacity"]), (&json!(21 * GIB), &json!(true)));

    // 10,000 volumes in one sync: more than one answer the operator can read; refused, named.
    let many: Vec<Value> =
        (0..10_000).map(|i| json!({"name": format!("p{i}"), "capacity_gb": 1, "mounted": false})).collect();
    let e = expect_error(sync(&s, &op_a, &body(&a, many)).await, 422, "validation_failed").await;
    let err = &e["error"]["details"]["errors"][0];
    assert_eq!((&err["loc"], &err["type"]), (&json!(["body", "volumes"]), &json!("too_long")), "{e}");
    assert!(err["msg"].as_str().unwrap().contains("5000"), "{e}");
    let listed = send(&s, Method::GET, &format!("/api/v1/volumes?cluster_id={a}"), None, 200).await;
    assert_eq!(listed["orphans"], json!([]), "nothing of the refused sync is kept");
    // 5,000 is answered whole.
    let most: Vec<Value> =
        (0..5_000).map(|i| json!({"name": format!("p{i}"), "capacity_gb": 1, "mounted": false})).collect();
    let answer = ok(sync(&s, &op_a, &body(&a, most)).await, 200).await;
    assert_eq!((answer["volumes"].as_array().unwrap().len(), &answer["orphans"]), (5_000, &json!(5_000)));

    // The server still serves, and the home is still answered.
    let answer = ok(sync(&s, &op_a, &good).await, 200).await;
    assert_eq!(
        answer,
        json!({"volumes": [{"name": pvc(&home), "volume_id": home, "quota_gb": 20, "reclaim": false}], "orphans": 0})
    );
    s.stop().await;
}

#[tokio::test]
async fn the_api_refuses_bad_volumes() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let post = |b: Value| crate::sessions::call(&s, Method::POST, "/api/v1/volumes", Some(b));
    for (b, field) in [
        (json!({"name": "Big Data", "cluster_id": cid, "size_gb": 1}), "name"),
        (json!({"name": "../etc", "cluster_id": cid, "size_gb": 1}), "name"),
        (json!({"name": "", "cluster_id": cid, "size_gb": 1}), "name"),
        (json!({"name": "ok", "cluster_id": cid, "size_gb": -3}), "size_gb"),
        (json!({"name": "ok", "cluster_id": cid, "size_gb": 0}), "size_gb"),
        (json!({"name": "ok", "cluster_id": cid, "size_gb": 2_000_000}), "size_gb"),
        (json!({"name": "ok", "cluster_id": cid, "size_gb": 1, "mode": "RWZ"}), "mode"),
        (json!({"name": "ok", "cluster_id": cid, "size_gb": 1, "colour": "red"}), "colour"),
    ] {
        let e = expect_error(post(b.clone()).await, 422, "validation_failed").await;
        let loc = e["error"]["details"]["errors"][0]["loc"].to_string();
        assert!(loc.contains(field), "{b}: {e}");
    }
    expect_error(post(json!({"name": "ok", "cluster_id": "clu_nope", "size_gb": 1})).await, 404, "not_found").await;
    expect_error(crate::sessions::call(&s, Method::GET, "/api/v1/volumes/vol_nope", None).await, 404, "not_found")
        .await;
    expect_error(
        crate::sessions::call(&s, Method::GET, "/api/v1/volumes?deleted=maybe", None).await,
        422,
        "validation_failed",
    )
    .await;
    // Filters no account or cluster could match are mistakes (an unknown but valid owner is an
    // empty list: a deleted account's volumes stay listed under its name).
    let long = "a".repeat(20_000);
    for (query, field) in [
        (format!("owner={long}"), "owner"),
        ("owner=%2A%29%28uid%3D%2A".to_string(), "owner"),
        ("owner=x%E2%80%AEy".to_string(), "owner"),
        ("cluster_id=clu_nope".to_string(), "cluster_id"),
    ] {
        let e = expect_error(
            crate::sessions::call(&s, Method::GET, &format!("/api/v1/volumes?{query}"), None).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["query", field]), "{query}: {e}");
        assert!(e.to_string().len() < 2_000, "the echo is bounded: {}", e.to_string().len());
    }
    let none = send(&s, Method::GET, "/api/v1/volumes?owner=nobody-here", None, 200).await;
    assert_eq!(none["data"], json!([]), "{none}");
    // An admin adds one for a member; ROX mounts read-only.
    let v = send(
        &s,
        Method::POST,
        "/api/v1/volumes",
        Some(json!({"name": "corpus", "cluster_id": cid, "size_gb": 5, "mode": "ROX", "owner": "dave"})),
        201,
    )
    .await;
    assert_eq!((&v["owner"], &v["mode"]), (&json!("dave"), &json!("ROX")));
    let off = offering(&s, "slice").await;
    let ses = send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "dave"})), 201).await;
    let spec = &cr(&c, ses["cr_name"].as_str().unwrap())["spec"];
    assert_eq!(
        spec["volumes"][1],
        json!({"name": v["id"], "mountPath": "/data/corpus", "mode": "ReadOnlyMany", "readOnly": true, "sizeGb": 5})
    );
    s.stop().await;
}

/// A member in `group` (their bearer token).
async fn member_in(s: &TestServer, name: &str, group: &str) -> String {
    let pw = format!("{name}'s long passphrase");
    crate::users::create_own(s, json!({"username": name, "group": group, "password": pw})).await;
    let res = s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username": name, "password": pw})).send();
    let v: Value = res.await.unwrap().json().await.unwrap();
    v["access_token"].as_str().unwrap().to_string()
}

fn orphan_names(list: &Value) -> Vec<String> {
    list["orphans"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn an_admin_adopts_or_reclaims_an_orphan() {
    let s = server().await;
    let (ca, cb) = (cluster("gpu-a").await, cluster("gpu-b").await);
    let a = register(&s, "gpu-a", &ca).await;
    let b = register(&s, "gpu-b", &cb).await;
    let off = offering(&s, "slice").await;
    let (op_a, op_b) = (operator(&s, &a), operator(&s, &b));
    let alice = member(&s, "alice").await;
    let ours = "vol-01jqqqqqqqqqqqqqqqqqqqqqqq";
    let report_a = body(
        &a,
        vec![
            observed("data-old", None, 40, Some(3 * GIB), false),
            observed(ours, None, 8, None, false),
            observed("scratch-old", Some("not-ours"), 5, None, false),
        ],
    );
    assert_eq!(ok(sync(&s, &op_a, &report_a).await, 200).await["orphans"], 3);
    ok(sync(&s, &op_b, &body(&b, vec![observed("b-only", None, 2, None, false)])).await, 200).await;
    let listed = send(&s, Method::GET, "/api/v1/volumes", None, 200).await;
    assert_eq!(orphan_names(&listed), ["data-old", "scratch-old", ours, "b-only"]);

    let adopt = |cluster: &str, pvc: &str, b: Value| {
        let (s, path) = (&s, format!("/api/v1/volumes/orphans/{cluster}/{pvc}/adopt"));
        async move { crate::sessions::call(s, Method::POST, &path, Some(b)).await }
    };
    // Bad input: nothing changes.
    expect_error(adopt(&a, "no-such-pvc", json!({"owner": "alice"})).await, 404, "not_found").await;
    let e = expect_error(adopt(&a, "b-only", json!({"owner": "alice"})).await, 404, "not_found").await;
    assert!(e["error"]["message"].as_str().unwrap().contains(&b), "names the cluster that has it: {e}");
    let e = expect_error(adopt(&a, "data-old", json!({"owner": "nobody"})).await, 422, "validation_failed").await;
    assert_eq!(e["error"]["details"]["errors"][0]["loc"], json!(["body", "owner"]), "{e}");
    expect_error(adopt(&a, "data-old", json!({"owner": "alice", "name": "Bad Name"})).await, 422, "validation_failed")
        .await;
    expect_error(adopt(&a, "data-old", json!({"owner": "alice", "colour": 1})).await, 422, "validation_failed").await;
    expect_error(adopt(&a, "data-old", json!({"owner": "alice", "mode": "RWZ"})).await, 422, "validation_failed").await;
    let path = format!("/api/v1/volumes/orphans/{a}/data-old/adopt");
    let by_member = as_user(&s, &alice, Method::POST, &path, Some(json!({"owner": "alice"})));
    expect_error(by_member.await, 403, "forbidden_role").await;
    let path = format!("/api/v1/volumes/orphans/{a}/scratch-old/reclaim");
    expect_error(as_user(&s, &alice, Method::POST, &path, None).await, 403, "forbidden_role").await;
    assert_eq!(orphan_names(&send(&s, Method::GET, "/api/v1/volumes", None, 200).await).len(), 4, "nothing changed");

    // Adopt: alice's named volume, her data kept, sized as reported.
    let v = send(
        &s,
        Method::POST,
        &format!("/api/v1/volumes/orphans/{a}/data-old/adopt"),
        Some(json!({"owner": "alice", "name": "thesis"})),
        201,
    )
    .await;
    let adopted = v["id"].as_str().unwrap().to_string();
    assert_eq!(
        (&v["owner"], &v["name"], &v["cluster_id"], &v["size_gb"], &v["pvc"], &v["used_bytes"], &v["mount_path"]),
        (
            &json!("alice"),
            &json!("thesis"),
            &json!(a),
            &json!(40),
            &json!("data-old"),
            &json!(3 * GIB),
            &json!("/data/thesis")
        )
    );
    // A PVC named as ours keeps its id.
    let v2 = send(
        &s,
        Method::POST,
        &format!("/api/v1/volumes/orphans/{a}/{ours}/adopt"),
        Some(json!({"owner": "alice"})),
        201,
    )
    .await;
    assert_eq!((&v2["id"], &v2["name"]), (&json!("vol_01JQQQQQQQQQQQQQQQQQQQQQQQ"), &json!(ours)));
    // Adopting it again: no longer an orphan.
    expect_error(adopt(&a, "data-old", json!({"owner": "alice"})).await, 404, "not_found").await;

    // Reclaim: the next sync answers reclaim for it; asking again changes nothing.
    let path = format!("/api/v1/volumes/orphans/{a}/scratch-old/reclaim");
    let o = send(&s, Method::POST, &path, None, 200).await;
    assert_eq!(o["reclaim_requested_by"], "admin");
    assert!(o["reclaim_requested_at"].is_string(), "{o}");
    assert_eq!(send(&s, Method::POST, &path, None, 200).await["reclaim_requested_at"], o["reclaim_requested_at"]);
    expect_error(
        crate::sessions::call(&s, Method::POST, &format!("/api/v1/volumes/orphans/{a}/b-only/reclaim"), None).await,
        404,
        "not_found",
    )
    .await;

    // The sync now: the adopted claims are answered as alice's volumes, the reclaimed orphan with
    // reclaim; only it is still counted an orphan.
    let answer = ok(sync(&s, &op_a, &report_a).await, 200).await;
    assert_eq!(
        answer,
        json!({"volumes": [
            {"name": "data-old", "volume_id": adopted, "quota_gb": 40, "reclaim": false},
            {"name": ours, "volume_id": "vol_01JQQQQQQQQQQQQQQQQQQQQQQQ", "quota_gb": 8, "reclaim": false},
            {"name": "scratch-old", "volume_id": "not-ours", "quota_gb": null, "reclaim": true}
        ], "orphans": 1})
    );
    // Her next session mounts the adopted claim by its own name.
    let ses = ok(
        as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "cluster_id": a}))).await,
        201,
    )
    .await;
    let spec = &cr(&ca, ses["cr_name"].as_str().unwrap())["spec"];
    let thesis = spec["volumes"].as_array().unwrap().iter().find(|v| v["mountPath"] == "/data/thesis").cloned();
    assert_eq!(
        thesis,
        Some(
            json!({"name": "data-old", "mountPath": "/data/thesis", "mode": "ReadWriteOnce", "readOnly": false, "sizeGb": 40})
        )
    );
    // The operator deleted the reclaimed PVC: it is no longer an orphan.
    let report = body(
        &a,
        vec![observed("data-old", Some("data-old"), 40, Some(3 * GIB), true), observed(ours, None, 8, None, false)],
    );
    assert_eq!(ok(sync(&s, &op_a, &report).await, 200).await["orphans"], 0);
    assert_eq!(orphan_names(&send(&s, Method::GET, "/api/v1/volumes", None, 200).await), ["b-only"]);
    assert_eq!(volume(&s, &adopted).await["mounted"], true);
    s.stop().await;
}

#[tokio::test]
async fn policies_size_the_home_and_bound_the_volumes() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let off = offering(&s, "slice").await;
    let alice = member_in(&s, "alice", "vision").await;
    let bob = member_in(&s, "bob", "vision").await;
    send(&s, Method::POST, "/api/v1/groups", Some(json!({"name": "vision"})), 201).await;
    // The group's policy: homes of 7 GiB, volumes up to 100 GiB; alice's own: 30 GiB.
    let policy = |scope: &str, id: &str, limits: Value| {
        send(
            &s,
            Method::POST,
            "/api/v1/resource-policies",
            Some(json!({"scope": scope, "scope_id": id, "limits": limits})),
            201,
        )
    };
    policy("group", "vision", json!({"volume_gb": 7, "storage_gb": 100})).await;
    policy("user", "alice", json!({"storage_gb": 30})).await;
    let new = |t: &str| {
        let (s, t, b) = (&s, t.to_string(), json!({"offering_id": off}));
        async move { as_user(s, &t, Method::POST, "/api/v1/sessions", Some(b)).await }
    };
    let sa = ok(new(&alice).await, 201).await;
    assert_eq!(sa["volumes"][0]["size_gb"], 7, "{sa}");
    let sb = ok(new(&bob).await, 201).await;
    assert_eq!(sb["volumes"][0]["size_gb"], 7);
    let add = |t: &str, gb: i64| {
        let (s, t, b) = (&s, t.to_string(), json!({"name": "data", "cluster_id": cid, "size_gb": gb}));
        async move { as_user(s, &t, Method::POST, "/api/v1/volumes", Some(b)).await }
    };
    // alice: 30 (her policy) - 7 (home) = 23 GiB left; bob: 93 (the group's).
    let e = expect_error(add(&alice, 24).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"], json!({"scope": "user", "limit_gb": 30, "allocated_gb": 7, "requested_gb": 24}));
    let d = ok(add(&alice, 23).await, 201).await;
    ok(add(&bob, 90).await, 201).await;
    // Grow past it: the same refusal, counting the other volumes only.
    let e = expect_error(
        as_user(
            &s,
            &alice,
            Method::PATCH,
            &format!("/api/v1/volumes/{}", d["id"].as_str().unwrap()),
            Some(json!({"size_gb": 24})),
        )
        .await,
        409,
        "quota_exceeded",
    )
    .await;
    assert_eq!(e["error"]["details"], json!({"scope": "user", "limit_gb": 30, "allocated_gb": 7, "requested_gb": 24}));
    // No policy sets it: the server's settings (home 20 GiB, 50 GiB in all).
    let carol = member(&s, "carol").await;
    assert_eq!(ok(new(&carol).await, 201).await["volumes"][0]["size_gb"], 20);
    let e = expect_error(add(&carol, 31).await, 409, "quota_exceeded").await;
    assert_eq!(e["error"]["details"]["limit_gb"], 50);
    s.stop().await;
}

#[tokio::test]
async fn a_volume_shared_with_a_group_mounts_read_only_in_its_members_sessions() {
    let s = server().await;
    let (c, c2) = (cluster("gpu-a").await, cluster("gpu-b").await);
    let cid = register(&s, "gpu-a", &c).await;
    let cid2 = register(&s, "gpu-b", &c2).await;
    let off = offering(&s, "slice").await;
    let alice = member_in(&s, "alice", "vision").await;
    let bob = member_in(&s, "bob", "vision").await;
    let carol = member_in(&s, "carol", "audio").await;
    let mk = |name: &str, mode: &str| {
        as_user(
            &s,
            &alice,
            Method::POST,
            "/api/v1/volumes",
            Some(json!({"name": name, "cluster_id": cid, "size_gb": 5, "mode": mode})),
        )
    };
    let corpus = ok(mk("corpus", "RWX").await, 201).await["id"].as_str().unwrap().to_string();
    let scratch = ok(mk("scratch", "RWO").await, 201).await["id"].as_str().unwrap().to_string();
    let share = |t: &str, id: &str, b: Value| {
        let (s, t, path) = (&s, t.to_string(), format!("/api/v1/volumes/{id}/share"));
        async move { as_user(s, &t, Method::PUT, &path, Some(b)).await }
    };
    // Bad input.
    expect_error(share(&alice, &scratch, json!({"group": "vision"})).await, 409, "conflict").await;
    expect_error(share(&alice, &corpus, json!({"group": "nosuch"})).await, 404, "not_found").await;
    expect_error(share(&alice, &corpus, json!({"group": ""})).await, 422, "validation_failed").await;
    expect_error(share(&alice, &corpus, json!({"groups": "vision"})).await, 422, "validation_failed").await;
    expect_error(share(&bob, &corpus, json!({"group": "vision"})).await, 404, "not_found").await;
    let ses =
        ok(as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off}))).await, 201).await;
    let home = ses["volumes"][0]["volume_id"].as_str().unwrap().to_string();
    expect_error(share(&alice, &home, json!({"group": "vision"})).await, 409, "conflict").await;

    let v = ok(share(&alice, &corpus, json!({"group": "vision"})).await, 200).await;
    assert_eq!(v["shared_group"], "vision");
    // bob (vision) mounts it read-only on its cluster; carol (audio) does not; on another
    // cluster it is not there.
    let new = |t: &str, cl: &str| {
        let (s, t, b) = (&s, t.to_string(), json!({"offering_id": off, "cluster_id": cl}));
        async move { as_user(s, &t, Method::POST, "/api/v1/sessions", Some(b)).await }
    };
    let sb = ok(new(&bob, &cid).await, 201).await;
    let spec = &cr(&c, sb["cr_name"].as_str().unwrap())["spec"];
    assert_eq!(
        spec["volumes"][1],
        json!({"name": corpus, "mountPath": "/shared/alice/corpus", "mode": "ReadWriteMany", "readOnly": true, "sizeGb": 5})
    );
    assert_eq!(spec["volumes"].as_array().unwrap().len(), 2, "{spec}");
    let sc = ok(new(&carol, &cid).await, 201).await;
    assert_eq!(sc["volumes"].as_array().unwrap().len(), 1, "{sc}");
    let sb2 = ok(new(&bob, &cid2).await, 201).await;
    assert_eq!(sb2["volumes"].as_array().unwrap().len(), 1, "{sb2}");
    // bob sees it in his list (read-only: he cannot grow or delete it).
    let listed = ok(as_user(&s, &bob, Method::GET, "/api/v1/volumes", None).await, 200).await;
    assert!(listed["data"].as_array().unwrap().iter().any(|v| v["id"] == corpus.as_str()), "{listed}");
    let path = format!("/api/v1/volumes/{corpus}");
    expect_error(as_user(&s, &bob, Method::PATCH, &path, Some(json!({"size_gb": 6}))).await, 404, "not_found").await;
    // bob's session mounts it (and alice's own, made after it): she cannot delete it under him.
    let e = expect_error(
        as_user(&s, &alice, Method::DELETE, &format!("/api/v1/volumes/{corpus}"), None).await,
        409,
        "volume_mounted",
    )
    .await;
    let using = ids_of(&e["error"]["details"]["sessions"]);
    assert_eq!(using.len(), 2, "{e}");
    assert!(
        using.contains(&sb["id"].as_str().unwrap().to_string())
            && using.contains(&ses["id"].as_str().unwrap().to_string())
    );
    // Unshared: bob's next session no longer mounts it.
    let v = ok(as_user(&s, &alice, Method::DELETE, &format!("/api/v1/volumes/{corpus}/share"), None).await, 200).await;
    assert_eq!(v["shared_group"], Value::Null);
    assert_eq!(ok(new(&bob, &cid).await, 201).await["volumes"].as_array().unwrap().len(), 1);
    s.stop().await;
}

#[tokio::test]
async fn a_deleted_accounts_volumes_are_kept_or_reclaimed() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let alice = member(&s, "alice").await;
    let ses =
        ok(as_user(&s, &alice, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off}))).await, 201).await;
    let home = ses["volumes"][0]["volume_id"].as_str().unwrap().to_string();
    let data = ok(
        as_user(
            &s,
            &alice,
            Method::POST,
            "/api/v1/volumes",
            Some(json!({"name": "data", "cluster_id": cid, "size_gb": 2})),
        )
        .await,
        201,
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    send(&s, Method::DELETE, "/api/v1/users/alice", None, 204).await;
    // Kept by default, listed by owner.
    let kept = send(&s, Method::GET, "/api/v1/volumes?owner=alice", None, 200).await;
    assert_eq!(kept["data"].as_array().unwrap().len(), 2);
    // Bad input.
    let reclaim = |b: Value| crate::sessions::call(&s, Method::POST, "/api/v1/volumes/reclaim", Some(b));
    expect_error(reclaim(json!({"owner": ""})).await, 422, "validation_failed").await;
    // A name no account could have had (an LDAP filter, a newline): refused, echoed bounded.
    for bad in ["*)(uid=*", "alice\n", "\u{202e}alice"] {
        let r = reclaim(json!({ "owner": bad })).await;
        let body = expect_error(r, 422, "validation_failed").await;
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(!msg.contains('\n') && !msg.contains('\u{202e}'), "{msg}");
        assert_eq!(body["error"]["details"]["errors"][0]["loc"], json!(["body", "owner"]));
    }
    expect_error(reclaim(json!({"user": "alice"})).await, 422, "validation_failed").await;
    let bob = member(&s, "bob").await;
    let by_member = as_user(&s, &bob, Method::POST, "/api/v1/volumes/reclaim", Some(json!({"owner": "alice"})));
    expect_error(by_member.await, 403, "forbidden_role").await;
    // Reclaimed: the one her running session mounts is kept and named.
    let r = send(&s, Method::POST, "/api/v1/volumes/reclaim", Some(json!({"owner": "alice"})), 200).await;
    let ids =
        |k: &str| r[k].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!((ids("reclaimed"), ids("kept")), (vec![data.clone()], vec![home.clone()]));
    assert_eq!(r["kept"][0]["mounted_by"][0]["id"], ses["id"]);
    assert_eq!(r["reclaimed"][0]["state"], "reclaim_pending");
    assert_eq!(r["reclaimed"][0]["reclaim_stalled"], false);
    // The sync answers reclaim for it and notes when.
    let report = body(&cid, vec![observed(&pvc(&data), Some(&data), 2, None, false)]);
    assert_eq!(ok(sync(&s, &op, &report).await, 200).await["volumes"][0]["reclaim"], true);
    let v = volume(&s, &data).await;
    assert!(v["reclaim_answered_at"].is_string() && v["reclaim_stalled"] == false, "{v}");
    // Nothing left to reclaim: an empty answer, not an error.
    send(&s, Method::DELETE, &format!("/api/v1/sessions/{}", ses["id"].as_str().unwrap()), None, 200).await;
    let r = send(&s, Method::POST, "/api/v1/volumes/reclaim", Some(json!({"owner": "alice"})), 200).await;
    assert_eq!(ids_of(&r["reclaimed"]), vec![home]);
    let r = send(&s, Method::POST, "/api/v1/volumes/reclaim", Some(json!({"owner": "alice"})), 200).await;
    assert_eq!((r["reclaimed"].as_array().unwrap().len(), r["kept"].as_array().unwrap().len()), (0, 0));
    s.stop().await;
}

fn ids_of(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn a_sessions_ephemeral_disk_use_is_shown_with_a_warning_near_its_limit() {
    let s = server().await;
    let c = cluster("gpu-a").await;
    let cid = register(&s, "gpu-a", &c).await;
    let off = offering(&s, "slice").await;
    let op = operator(&s, &cid);
    let new = || send(&s, Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off, "owner": "erin"})), 201);
    let (a, b) = (new().await, new().await);
    let get = |id: &Value| {
        let path = format!("/api/v1/sessions/{}", id.as_str().unwrap());
        let s = &s;
        async move { send(s, Method::GET, &path, None, 200).await }
    };
    assert_eq!(get(&a["id"]).await["ephemeral_disk"], Value::Null, "nothing reported yet");
    let disks = json!({"volumes": [], "sessions": [
        {"name": a["cr_name"], "ephemeral_used_bytes": 19 * GIB, "ephemeral_limit_bytes": 20 * GIB},
        {"name": b["cr_name"], "ephemeral_used_bytes": 5 * GIB, "ephemeral_limit_bytes": 20 * GIB}
    ], "pools": [], "cluster_id": cid});
    ok(sync(&s, &op, &disks).await, 200).await;
    assert_eq!(
        get(&a["id"]).await["ephemeral_disk"],
        json!({"used_bytes": 19 * GIB, "limit_bytes": 20 * GIB, "used_pct": 95, "near_limit": true})
    );
    assert_eq!(get(&b["id"]).await["ephemeral_disk"]["near_limit"], false);
    let listed = send(&s, Method::GET, "/api/v1/sessions?owner=erin", None, 200).await;
    let near: Vec<&Value> =
        listed["data"].as_array().unwrap().iter().map(|v| &v["ephemeral_disk"]["near_limit"]).collect();
    assert_eq!(near.len(), 2);
    assert!(near.contains(&&json!(true)) && near.contains(&&json!(false)), "{listed}");
    // Ended: the last reading is no longer shown.
    send(&s, Method::DELETE, &format!("/api/v1/sessions/{}", a["id"].as_str().unwrap()), None, 200).await;
    assert_eq!(get(&a["id"]).await["ephemeral_disk"], Value::Null);
    s.stop().await;
}
