//! `GET /api/v1/events`: the console's live updates (server-sent events) — `hello`, then a
//! `change` after a write, for signed-in admins only.

use std::time::Duration;

use serde_json::json;

use crate::support::{TestServer, expect_error};

/// Reads the stream until `want` appears (bounded: an event that never comes fails the test).
async fn read_until(res: &mut reqwest::Response, text: &mut String, want: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !text.contains(want) {
            let chunk = res.chunk().await.expect("stream error").expect("stream ended");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {want:?} in {text:?}"));
}

#[tokio::test]
async fn a_write_is_pushed_to_the_console_as_a_change_event() {
    let s = TestServer::start().await;
    let token = s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap();
    expect_error(s.client.get(s.url("/api/v1/events")).send().await.unwrap(), 401, "unauthenticated").await;

    let mut stream = s.client.get(s.url("/api/v1/events")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    read_until(&mut stream, &mut text, "event: hello\n").await;
    assert!(!text.contains("event: change"), "{text}");

    // Any committed change: an offering is created.
    let res = s
        .client
        .post(s.url("/api/v1/offerings"))
        .bearer_auth(&token)
        .json(&json!({"name": "cpu", "resource_class": "cpu", "image": "registry.example/cpu:1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    read_until(&mut stream, &mut text, "event: change\n").await;
    let generation = |kind: &str| -> u64 {
        let at = text.find(&format!("event: {kind}\n")).unwrap();
        let data = text[at..].lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str::<serde_json::Value>(data).unwrap()["generation"].as_u64().unwrap()
    };
    assert!(generation("change") > generation("hello"), "{text}");
    drop(stream);
    s.stop().await;
}
