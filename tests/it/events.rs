//! `GET /api/v1/events`: the console's live updates (server-sent events) — `hello`, then one
//! event per topic whose data a commit changed; a member hears only of their own sessions and the
//! offerings.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestServer, expect_error};

/// Reads the stream until `want` appears (bounded: an event that never comes fails the test).
pub(crate) async fn read_until(res: &mut reqwest::Response, text: &mut String, want: &str) {
    read_until_from(res, text, 0, want).await
}

/// Reads the stream until `want` appears after byte `from` of what was read.
pub(crate) async fn read_until_from(res: &mut reqwest::Response, text: &mut String, from: usize, want: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !text[from..].contains(want) {
            let chunk = res.chunk().await.expect("stream error").expect("stream ended");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {want:?} in {text:?}"));
}

/// The generation in the data of the first `kind` event.
fn generation(text: &str, kind: &str) -> u64 {
    let at = text.find(&format!("event: {kind}\n")).unwrap_or_else(|| panic!("no {kind} in {text}"));
    let data = text[at..].lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str::<serde_json::Value>(data).unwrap()["generation"].as_u64().unwrap()
}

#[tokio::test]
async fn a_write_is_pushed_to_the_console_under_its_topic() {
    let s = TestServer::start().await;
    let token = s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap();
    expect_error(s.client.get(s.url("/api/v1/events")).send().await.unwrap(), 401, "unauthenticated").await;

    let mut stream = s.client.get(s.url("/api/v1/events")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    read_until(&mut stream, &mut text, "event: hello\n").await;
    assert!(
        text.contains(r#""topics":["clusters","sessions","offerings","inventory","overview","audit","notifications"]"#),
        "{text}"
    );

    // An offering is created: the offerings topic, not the sessions' or the clusters'.
    let res = s
        .client
        .post(s.url("/api/v1/offerings"))
        .bearer_auth(&token)
        .json(&json!({"name": "cpu", "resource_class": "cpu", "image": "registry.example/cpu:1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    read_until(&mut stream, &mut text, "event: offerings\n").await;
    assert!(generation(&text, "offerings") > generation(&text, "hello"), "{text}");
    // Its audit entry lands too (written by the audit log's own writer).
    read_until(&mut stream, &mut text, "event: audit\n").await;
    for other in ["clusters", "sessions", "inventory", "overview"] {
        assert!(!text.contains(&format!("event: {other}\n")), "{other} in {text}");
    }
    drop(stream);
    s.stop().await;
}

#[tokio::test]
async fn a_session_change_is_a_sessions_event_and_not_a_clusters_one() {
    let s = crate::sessions::server().await;
    let c = crate::sessions::cluster("gpu-a").await;
    let cid = crate::sessions::register(&s, "gpu-a", &c).await;
    let off = crate::sessions::offering(&s, "slice").await;
    let token = crate::sessions::admin(&s);

    let mut stream = s.client.get(s.url("/api/v1/events")).bearer_auth(&token).send().await.unwrap();
    let mut text = String::new();
    read_until(&mut stream, &mut text, "event: hello\n").await;
    // A new session is pending: the sessions (and overview) topics; the cluster row is untouched.
    let ses =
        crate::sessions::send(&s, reqwest::Method::POST, "/api/v1/sessions", Some(json!({"offering_id": off})), 201)
            .await;
    read_until(&mut stream, &mut text, "event: sessions\n").await;
    read_until(&mut stream, &mut text, "event: overview\n").await;
    assert!(!text.contains("event: clusters\n"), "{text}");
    assert!(!text.contains("event: offerings\n"), "{text}");

    // Running: the cluster's running-session count changes, so clusters hears of it now.
    let seen = text.len();
    let op = crate::sessions::operator(&s, &cid);
    let cr = ses["cr_name"].as_str().unwrap();
    crate::sessions::report(&s, &op, cr, json!({"phase": "Running", "ts": crate::sessions::ts(&s)})).await;
    read_until_from(&mut stream, &mut text, seen, "event: clusters\n").await;
    read_until_from(&mut stream, &mut text, seen, "event: sessions\n").await;
    drop(stream);
    s.stop().await;
}

#[tokio::test]
async fn a_members_stream_hears_of_their_own_sessions_and_not_of_others() {
    use reqwest::Method;
    let s = crate::sessions::server().await;
    let c = crate::sessions::cluster("gpu-m").await;
    let cid = crate::sessions::register(&s, "gpu-m", &c).await;
    let off = crate::sessions::offering(&s, "slice").await;
    let body = json!({"username": "alice", "password": "alice's long passphrase"});
    crate::users::create_own(&s, body).await;
    let alice = s.app().auth.api.mint("user:alice", Duration::from_secs(3600)).unwrap();
    let op = crate::sessions::operator(&s, &cid);

    let mut stream = s.client.get(s.url("/api/v1/events")).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut text = String::new();
    read_until(&mut stream, &mut text, "event: hello\n").await;
    assert!(text.contains(r#""topics":["sessions","notifications","offerings"]"#), "{text}");

    // Bob's session starts and runs (an admin names him its owner): nothing for alice. Then an
    // offering is written, which she hears: had bob's commits (made before it) reached her
    // stream, a `sessions` event would come before or in the same burst as this one.
    let bobs = json!({"offering_id": off, "owner": "bob", "cluster_id": cid});
    let bobs = crate::sessions::send(&s, Method::POST, "/api/v1/sessions", Some(bobs), 201).await;
    let cr = bobs["cr_name"].as_str().unwrap();
    crate::sessions::report(&s, &op, cr, json!({"phase": "Running", "ts": crate::sessions::ts(&s)})).await;
    crate::sessions::offering(&s, "marker").await;
    read_until(&mut stream, &mut text, "event: offerings\n").await;
    assert!(!text.contains("event: sessions\n"), "another user's session reached a member: {text}");

    // Her own: created, then reported running; each is a `sessions` event on her stream.
    let seen = text.len();
    let res = s
        .client
        .post(s.url("/api/v1/sessions"))
        .bearer_auth(&alice)
        .json(&json!({"offering_id": off}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let hers: serde_json::Value = res.json().await.unwrap();
    assert_eq!(hers["owner"], "alice", "{hers}");
    read_until_from(&mut stream, &mut text, seen, "event: sessions\n").await;
    let seen = text.len();
    let cr = hers["cr_name"].as_str().unwrap();
    crate::sessions::report(&s, &op, cr, json!({"phase": "Running", "ts": crate::sessions::ts(&s)})).await;
    read_until_from(&mut stream, &mut text, seen, "event: sessions\n").await;
    // Her stream counts its own events (hello 0, then 1, 2, …): the store's commit generations
    // (dozens by now: the cluster, the offerings, bob's session) would tell the fleet's activity.
    let shown: Vec<u64> = text
        .match_indices(r#""generation":"#)
        .map(|(i, m)| text[i + m.len()..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap())
        .collect();
    let counted: Vec<u64> = (0..shown.len() as u64).collect();
    assert_eq!(shown, counted, "{text}");
    assert!(shown.len() >= 3, "{text}");
    // The admin's other topics never reach a member.
    for other in ["clusters", "inventory", "overview", "audit"] {
        assert!(!text.contains(&format!("event: {other}\n")), "{other} in {text}");
    }
    // Disabled: her open stream ends, and the browser's reconnect is refused.
    let body = json!({"disabled": true});
    crate::sessions::send(&s, Method::PATCH, "/api/v1/users/alice", Some(body), 200).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        while stream.chunk().await.expect("stream error").is_some() {}
    })
    .await
    .expect("a disabled member's stream kept going");
    let again = s.client.get(s.url("/api/v1/events")).bearer_auth(&alice).send().await.unwrap();
    expect_error(again, 401, "unauthenticated").await;
    s.stop().await;
}
