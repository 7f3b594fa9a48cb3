//! The foundation: health, JWKS, CLI-minted tokens verified against the served keys, OpenAPI,
//! error envelopes, and the CLI's answers to bad input.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::support::{TestServer, expect_error, gshare, stderr, stdout};

#[tokio::test]
async fn health_and_readiness() {
    let s = TestServer::start().await;
    let res = s.get("/healthz").await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-request-id"));
    let ready: serde_json::Value = s.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["store"], true);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_minted_token_verifies_against_served_jwks() {
    let mut s = TestServer::start().await;
    let res = s.get("/.well-known/gshare-internal-jwks.json").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "public, max-age=300");
    let jwks: serde_json::Value = res.json().await.unwrap();
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    let key = &keys[0];
    for field in ["kty", "n", "e", "kid", "use", "alg"] {
        assert!(key.get(field).is_some(), "{field} missing");
    }
    for private in ["d", "p", "q", "dp", "dq", "qi"] {
        assert!(key.get(private).is_none(), "private member {private} published");
    }
    assert_eq!(key["alg"], "RS256");

    // While the server runs the CLI asks it over the admin socket (audited), and it knows no such
    // cluster; with the server stopped the CLI mints offline from the same key ring.
    let id = gshare::clusters::ClusterId::mint();
    let out = gshare(&s.data_dir(), &["token", "operator", "--cluster-id", id.as_str(), "--ttl", "24h"], &[]);
    assert!(!out.status.success() && stderr(&out).contains(&format!("no cluster {id}")), "{}", stderr(&out));
    let app = s.app_arc();
    s.server.take().unwrap().stop().await;
    let out = gshare(&s.data_dir(), &["token", "operator", "--cluster-id", id.as_str(), "--ttl", "24h"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).lines().last().unwrap().to_string();

    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(header.alg, Algorithm::RS256);
    assert_eq!(header.kid.as_deref(), key["kid"].as_str());
    let dk = DecodingKey::from_rsa_components(key["n"].as_str().unwrap(), key["e"].as_str().unwrap()).unwrap();
    let mut v = Validation::new(Algorithm::RS256);
    v.set_audience(&["gshare-internal"]);
    v.set_issuer(&["gshare-internal"]);
    let data = jsonwebtoken::decode::<serde_json::Value>(&token, &dk, &v).unwrap();
    let c = data.claims;
    assert_eq!(c["sub"], format!("operator:{id}"));
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 86400);
    assert_eq!(c["nbf"], c["iat"]);
    assert!(c["jti"].as_str().is_some_and(|j| !j.is_empty()));
    // And the server's own verifier accepts it.
    assert_eq!(app.auth.internal.verify(&token).unwrap().sub, format!("operator:{id}"));
    s.stop().await;
}

#[tokio::test]
async fn default_ttl_is_seven_days() {
    let dir = tempfile::tempdir().unwrap();
    // The key rings a server makes on its first start (the CLI never makes them).
    let config = gshare::config::Config::for_data_dir(dir.path(), &[]).unwrap();
    gshare::auth::Authorities::open(&config, gshare::clock::Clock::system()).unwrap();
    let out = gshare(dir.path(), &["token", "operator", "--cluster-id", "clu_local"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).lines().last().unwrap().to_string();
    let payload = token.split('.').nth(1).unwrap();
    let c: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 7 * 86400);
    assert_eq!(c["aud"], "gshare-internal");
    assert_eq!(c["iss"], "gshare-internal");
    // Keys: 0700 dir, 0600 files.
    use std::os::unix::fs::PermissionsExt;
    let keys = dir.path().join("keys");
    assert_eq!(std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777, 0o700);
    for entry in std::fs::read_dir(keys.join("internal")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().ends_with(".pem") {
            assert_eq!(entry.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        }
    }
}

#[tokio::test]
async fn token_cli_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    for (id, ttl) in [
        ("clu_bad", "1h"),
        ("../x", "1h"),
        ("", "1h"),
        ("clu_local", "0"),
        ("clu_local", "0s"),
        ("clu_local", "-1d"),
        ("clu_local", "999d"),
        ("clu_local", "31d"),
    ] {
        let out = gshare(dir.path(), &["token", "operator", "--cluster-id", id, "--ttl", ttl], &[]);
        assert!(!out.status.success(), "{id:?} {ttl:?} accepted");
        assert!(stdout(&out).is_empty(), "printed a token for {id:?} {ttl:?}");
        let err = stderr(&out);
        assert!(err.contains("cluster id") || err.contains("ttl"), "{id:?} {ttl:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_keeps_old_tokens_and_prune_respects_ttl() {
    let s = TestServer::start().await;
    let old = s.app().auth.internal.mint("operator:clu_local", Duration::from_secs(3600)).unwrap();
    let out = gshare(&s.data_dir(), &["keys", "rotate"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Through the running server (its admin socket): in force at once, nothing left to reload.
    assert!(!s.app().auth.internal.reload_if_changed().unwrap());
    let jwks: serde_json::Value = s.get("/.well-known/gshare-internal-jwks.json").await.json().await.unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);
    s.app().auth.internal.verify(&old).unwrap();
    let list = stdout(&gshare(&s.data_dir(), &["keys", "list"], &[]));
    assert_eq!(list.lines().filter(|l| l.contains(" active ")).count(), 1, "{list}");
    assert_eq!(list.lines().filter(|l| l.contains(" retired ")).count(), 1, "{list}");
    // Retired just now: prune keeps it.
    let out = gshare(&s.data_dir(), &["keys", "prune"], &[]);
    assert!(stdout(&out).contains("nothing to prune"), "{}", stdout(&out));
    s.stop().await;
}

#[tokio::test]
async fn openapi_and_reference_page() {
    let s = TestServer::start().await;
    let doc: serde_json::Value = s.get("/api/openapi.json").await.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in ["/healthz", "/readyz", "/.well-known/gshare-internal-jwks.json"] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from OpenAPI");
    }
    assert!(doc["components"]["schemas"].get("ErrorBody").is_some());
    let page = s.get("/api/docs").await;
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("/.well-known/gshare-internal-jwks.json"));
    assert!(!html.contains("<script"), "reference page must not need scripts");
    s.stop().await;
}

#[tokio::test]
async fn errors_are_json_envelopes() {
    let s = TestServer::start().await;
    expect_error(s.get("/api/nope").await, 404, "not_found").await;
    let res = s.client.post(s.url("/healthz")).send().await.unwrap();
    expect_error(res, 405, "method_not_allowed").await;
    // A 1 MB Authorization header: refused cleanly, and the server keeps serving.
    let huge = format!("Bearer {}", "a".repeat(1 << 20));
    let res = s.client.get(s.url("/healthz")).header("authorization", huge).send().await.unwrap();
    expect_error(res, 431, "headers_too_large").await;
    assert_eq!(s.get("/healthz").await.status(), 200);
    // A caller's request id is echoed.
    let res = s.client.get(s.url("/api/nope")).header("x-request-id", "trace-123").send().await.unwrap();
    let body = expect_error(res, 404, "not_found").await;
    assert_eq!(body["error"]["request_id"], "trace-123");
    s.stop().await;
}

#[tokio::test]
async fn second_server_on_same_data_dir_fails_clearly() {
    let s = TestServer::start().await;
    let out = gshare(&s.data_dir(), &["serve"], &[("GSHARE_LISTEN", "127.0.0.1:0")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("gshare.redb") && err.contains("another gshare"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    s.stop().await;
}

#[tokio::test]
async fn unusable_data_dirs_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A data dir below a regular file cannot be created (root ignores permission bits).
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let out = gshare(&file.join("data"), &["serve"], &[("GSHARE_LISTEN", "127.0.0.1:0")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&file.display().to_string()) && !err.contains("panicked"), "{err}");

    // A corrupted state file.
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("gshare.redb"), vec![7u8; 10_000]).unwrap();
    let out = gshare(&data, &["serve"], &[("GSHARE_LISTEN", "127.0.0.1:0")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("gshare.redb") && !err.contains("panicked"), "{err}");
}

#[tokio::test]
async fn config_check_names_bad_keys_and_redacts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:9999\"\nbogus_key = 1\n").unwrap();
    let out = gshare(dir.path(), &["--config", path.to_str().unwrap(), "config", "check"], &[("GSHARE_CONFIG", "")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bogus_key"), "{}", stderr(&out));

    let out = gshare(dir.path(), &["config", "check"], &[("GSHARE_TRUSTED_PROXY_HOPS", "abc")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("GSHARE_TRUSTED_PROXY_HOPS"));

    let key = gshare::auth::keys::SigningKey::generate_for_tests();
    let out = gshare(
        dir.path(),
        &["config", "check"],
        &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", key.private_pem().expose()), ("GSHARE_INTERNAL_JWT_KID", "internal")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    assert!(printed.contains("internal_jwt_private_key = \"<redacted>\""), "{printed}");
    assert!(printed.contains("internal_jwt_kid = \"internal\""));
    assert!(!printed.contains("PRIVATE KEY"));
}

#[tokio::test]
async fn a_misspelled_gshare_variable_stops_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = gshare(dir.path(), &["serve"], &[("GSHARE_LISTNE", "127.0.0.1:0")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("GSHARE_LISTNE") && err.contains("did you mean GSHARE_LISTEN?"), "{err}");
    assert!(!dir.path().join("gshare.redb").exists(), "refused before the state was opened");
    // A variable of the CLI is not a setting, and not refused.
    let out = gshare(dir.path(), &["config", "check"], &[("GSHARE_SNAPSHOT_PASSPHRASE", "x")]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_key_and_kid_sign_operator_tokens() {
    let key = gshare::auth::keys::SigningKey::generate_for_tests();
    let pem = key.private_pem().expose().to_string();
    let mut s =
        TestServer::start_with(&[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", &pem), ("GSHARE_INTERNAL_JWT_KID", "internal")])
            .await;
    let jwks: serde_json::Value = s.get("/.well-known/gshare-internal-jwks.json").await.json().await.unwrap();
    assert_eq!(jwks["keys"][0]["kid"], "internal");
    assert_eq!(jwks["keys"][0]["n"], key.n_b64());
    // Offline (the server stopped; while it runs it mints, and only for registered clusters).
    let app = s.app_arc();
    s.server.take().unwrap().stop().await;
    let out = gshare(
        &s.data_dir(),
        &["token", "operator", "--cluster-id", "clu_local"],
        &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", &pem), ("GSHARE_INTERNAL_JWT_KID", "internal")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).lines().last().unwrap().to_string();
    assert_eq!(jsonwebtoken::decode_header(&token).unwrap().kid.as_deref(), Some("internal"));
    app.auth.internal.verify(&token).unwrap();
    // Rotation is refused while the key comes from configuration.
    let out = gshare(&s.data_dir(), &["keys", "rotate"], &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", &pem)]);
    assert!(!out.status.success());
    s.stop().await;
}

#[tokio::test]
async fn sigterm_stops_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"))
        .arg("serve")
        .env_clear()
        .env("GSHARE_DATA_DIR", dir.path())
        .env("GSHARE_CONFIG", "/dev/null")
        .env("GSHARE_LISTEN", "127.0.0.1:0")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the "serving" line rather than sleeping.
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = lines.by_ref().map_while(Result::ok).find(|l| l.contains("gshare serving"));
    assert!(serving.is_some());
    let status = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?} {rest:?}");
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}
