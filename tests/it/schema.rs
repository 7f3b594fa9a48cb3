//! Schema honesty: the OpenAPI document states every answer a route can give
//! and the limits it enforces; bodies the operator must send are required; names and image
//! references refuse characters that make text display other than it reads.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::support::{TestServer, expect_error};

fn admin(s: &TestServer) -> String {
    s.app().auth.api.mint("admin:admin", Duration::from_secs(3600)).unwrap()
}

fn operator(s: &TestServer) -> String {
    s.app().auth.internal.mint("operator:clu_local", Duration::from_secs(3600)).unwrap()
}

fn responses(op: &Value) -> Vec<&str> {
    op["responses"].as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn every_operation_documents_the_answers_its_extractors_give() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    let mut checked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let codes = responses(op);
            let has = |code: &str| codes.contains(&code);
            let what = format!("{} {path}", method.to_uppercase());
            if op.get("requestBody").is_some() {
                for code in ["400", "413", "422"] {
                    assert!(has(code), "{what} takes a JSON body but does not document {code}: {codes:?}");
                }
            }
            let public = ["/healthz", "/readyz", "/metrics", "/.well-known/gshare-internal-jwks.json"];
            if path.starts_with("/api/v1/") && path != "/api/v1/auth/login" {
                assert!(has("401"), "{what} needs an admin token but does not document 401");
                // Operator tokens are refused with 403, and so are cookie requests without CSRF.
                assert!(has("403"), "{what} does not document 403");
            } else if path.starts_with("/internal/") && path != "/internal/connect/verify" {
                assert!(has("401") && has("403"), "{what} needs an operator token: 401 and 403 ({codes:?})");
            } else {
                assert!(
                    public.contains(&path.as_str()) || path.starts_with("/api/v1/auth") || path.ends_with("verify")
                );
            }
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            for p in &params {
                let name = p["name"].as_str().unwrap();
                if name == "Idempotency-Key" {
                    assert!(has("400") && has("409"), "{what}: a bad or busy Idempotency-Key is 400/409");
                    assert_eq!(p["schema"]["maxLength"], 255, "{what} Idempotency-Key");
                }
                if p["in"] == "query" {
                    // A query string axum cannot read (a parameter twice) is 400; a value out of range 422.
                    assert!(has("400") && has("422"), "{what}: query {name}");
                }
                if p["in"] == "query" && (name == "page" || name == "size") {
                    assert!(has("422"), "{what}: {name} out of range is 422");
                    assert_eq!(p["schema"]["minimum"], 1, "{what} {name}: {p}");
                    assert!(p["schema"]["maximum"].is_u64(), "{what} {name} has no maximum: {p}");
                }
                if p["in"] == "path" {
                    assert!(has("404") || path.starts_with("/internal/"), "{what}: an unknown {name} is 404");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} operations");
    s.stop().await;
}

/// The server serves the committed `web/src/api/openapi.json` (the console's types come from it:
/// openapi-typescript writes `schema.d.ts`, `npm test` checks that one), so it must be the document
/// the handlers describe. `GSHARE_UPDATE_OPENAPI=1 cargo test --test it openapi_snapshot` rewrites
/// it, and `npm run api:update` in web/ does that and regenerates the types.
#[tokio::test]
async fn the_consoles_openapi_snapshot_is_the_handlers_document_and_is_served() {
    let generated = serde_json::to_string_pretty(&gshare::http::docs::generated()).unwrap() + "\n";
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("web/src/api/openapi.json");
    if std::env::var_os("GSHARE_UPDATE_OPENAPI").is_some() {
        // The server embeds the file when it is built: the next build serves what is written here.
        std::fs::write(&committed, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&committed).unwrap_or_default();
    assert!(
        on_disk == generated,
        "web/src/api/openapi.json is not the document the handlers describe; run `npm run api:update` in web/ \
         (GSHARE_UPDATE_OPENAPI=1 cargo test --test it openapi_snapshot, then openapi-typescript)"
    );
    // What the server answers is that file, byte for byte (embedded at build time).
    let s = TestServer::start().await;
    let res = s.get("/api/openapi.json").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let served = res.text().await.unwrap();
    s.stop().await;
    assert!(served == on_disk, "the server serves another document than web/src/api/openapi.json");
}

#[tokio::test]
async fn the_document_states_limits_and_enums() {
    let s = TestServer::start().await;
    let doc: Value = s.get("/api/openapi.json").await.json().await.unwrap();
    let schemas = &doc["components"]["schemas"];
    let param = |path: &str, name: &str| -> Value {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("GET {path} has no parameter {name}"))
            .clone()
    };
    assert_eq!(param("/api/v1/sessions", "size")["schema"]["maximum"], 100);
    assert_eq!(param("/api/v1/clusters", "size")["schema"]["maximum"], 100);
    assert!(param("/api/v1/sessions", "phase")["schema"]["enum"].as_array().is_some_and(|e| e.len() == 7));
    assert!(param("/api/v1/clusters", "status")["schema"]["enum"].is_array());
    assert!(param("/api/v1/offerings", "status")["schema"]["enum"].is_array());
    for (schema, field, max) in [
        ("OfferingCreate", "name", 80),
        ("OfferingCreate", "image", 512),
        ("RegisterRequest", "name", 80),
        ("CreateSession", "name", 80),
        ("CreateSession", "owner", 64),
        ("LoginRequest", "username", 64),
        ("LoginRequest", "password", 1024),
    ] {
        let f = &schemas[schema]["properties"][field];
        assert!(f.is_object(), "{schema}.{field} missing");
        let max_length = f["maxLength"]
            .as_u64()
            .or_else(|| f["oneOf"].as_array().and_then(|v| v.iter().find_map(|x| x["maxLength"].as_u64())));
        assert_eq!(max_length, Some(max), "{schema}.{field}: {f}");
    }
    s.stop().await;
}

#[tokio::test]
async fn drift_and_decommissioned_need_a_body() {
    let s = TestServer::start().await;
    let token = operator(&s);
    for path in ["/internal/inventory/drift", "/internal/nodes/decommissioned"] {
        for body in ["", "  \n"] {
            let res = s.client.post(s.url(path)).bearer_auth(&token).body(body).send().await.unwrap();
            let v = expect_error(res, 422, "validation_failed").await;
            assert_eq!(v["error"]["details"]["errors"][0]["loc"], json!(["body"]), "{path}: {v}");
        }
        let res = s.client.post(s.url(path)).bearer_auth(&token).body("{").send().await.unwrap();
        expect_error(res, 400, "invalid_json").await;
        let res = s.client.post(s.url(path)).bearer_auth(&token).body("[]").send().await.unwrap();
        expect_error(res, 422, "validation_failed").await;
    }
    // What the operator sends is still accepted.
    let res = s
        .client
        .post(s.url("/internal/inventory/drift"))
        .bearer_auth(&token)
        .json(&json!({"uuid": "GPU-1", "used_mem_mb": 2, "total_mem_mb": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let res = s
        .client
        .post(s.url("/internal/nodes/decommissioned"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    s.stop().await;
}

/// Every disguising character, alone and inside an otherwise good value.
const DECEPTIVE: [char; 14] = [
    '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    '\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}',
];

async fn refused(s: &TestServer, method: reqwest::Method, path: &str, body: Value, loc: &[&str]) {
    let res = s.client.request(method.clone(), s.url(path)).bearer_auth(admin(s)).json(&body).send().await.unwrap();
    let v = expect_error(res, 422, "validation_failed").await;
    assert_eq!(v["error"]["details"]["errors"][0]["loc"], json!(loc), "{method} {path} {body}: {v}");
}

#[tokio::test]
async fn names_and_images_refuse_bidi_and_zero_width_characters() {
    let s = TestServer::start().await;
    let good = json!({"name": "A100 20 GB", "resource_class": "gpu", "image": "ghcr.io/org/lab:1",
        "gpu_mem_mb": 20480, "gpu_cores": 30});
    let res = s.client.post(s.url("/api/v1/offerings")).bearer_auth(admin(&s)).json(&good).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let off: Value = res.json().await.unwrap();
    let off_path = format!("/api/v1/offerings/{}", off["id"].as_str().unwrap());
    let kubeconfig_b64 = STANDARD.encode("apiVersion: v1\nkind: Config\n");
    for c in DECEPTIVE {
        let name = format!("lab{c}gpu");
        let image = format!("ghcr.io/org/lab{c}:1");
        let post = reqwest::Method::POST;
        let mut body = good.clone();
        body["name"] = json!(name);
        refused(&s, post.clone(), "/api/v1/offerings", body, &["body", "name"]).await;
        let mut body = good.clone();
        body["image"] = json!(image);
        refused(&s, post.clone(), "/api/v1/offerings", body, &["body", "image"]).await;
        refused(&s, reqwest::Method::PATCH, &off_path, json!({"name": c.to_string()}), &["body", "name"]).await;
        refused(&s, reqwest::Method::PATCH, &off_path, json!({"image": image}), &["body", "image"]).await;
        refused(
            &s,
            post.clone(),
            "/api/v1/clusters",
            json!({"name": name, "role": "primary", "kubeconfig_b64": kubeconfig_b64}),
            &["body", "name"],
        )
        .await;
        let session = |field: &str, v: &str| json!({"offering_id": off["id"], field: v});
        refused(&s, post.clone(), "/api/v1/sessions", session("name", &name), &["body", "name"]).await;
        refused(&s, post.clone(), "/api/v1/sessions", session("image", &image), &["body", "image"]).await;
        refused(&s, post.clone(), "/api/v1/sessions", session("owner", &format!("alice{c}")), &["body", "owner"]).await;
    }
    // Nothing was created by the refused requests, and ordinary non-ASCII names still work.
    let list: Value =
        s.client.get(s.url("/api/v1/offerings")).bearer_auth(admin(&s)).send().await.unwrap().json().await.unwrap();
    assert_eq!(list["data"].as_array().map(Vec::len).or(list.as_array().map(Vec::len)), Some(1), "{list}");
    let mut body = good.clone();
    body["name"] = json!("Überlab – A100 (東京)");
    let res = s.client.post(s.url("/api/v1/offerings")).bearer_auth(admin(&s)).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    s.stop().await;
}
