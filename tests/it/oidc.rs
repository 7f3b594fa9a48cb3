//! Single sign-on with an OpenID Connect issuer (issue 26) against a real OpenID provider (npm
//! `oidc-provider`, `support::oidc`) over HTTPS with the lab's own CA: the code flow with PKCE,
//! groups mapped to the admin role and to a group, accounts made at the first sign-in and linked
//! to the issuer's subject; a wrong, used or another browser's `state`, a replayed code, keys that
//! rotate mid-sign-in, an issuer that is down, silent or untrusted (503, local sign-in goes on).
//! Forged ID tokens (`alg: none`, HS256 keyed by the public key or the client secret, wrong
//! audience or issuer, expired, wrong nonce, unknown key) come from a hostile issuer served here:
//! an attacker, not a stand-in for the provider.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::support::oidc::{self, Browser, CLIENT_SECRET, Provider, free_port, query};
use crate::support::{TestServer, expect_error};

const START: &str = "/api/v1/auth/oidc/start";
const CALLBACK: &str = "/api/v1/auth/oidc/callback";

fn secret_file(dir: &Path) -> std::path::PathBuf {
    let f = dir.join("oidc-client-secret");
    std::fs::write(&f, format!("{CLIENT_SECRET}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// The `[oidc]` table for an issuer.
fn table(issuer: &str, ca_file: Option<&Path>, dir: &Path, extra: &str) -> String {
    let ca = ca_file.map(|c| format!("ca_file = \"{}\"\n", c.display())).unwrap_or_default();
    format!(
        "[oidc]\nissuer = \"{issuer}\"\nclient_id = \"gshare\"\nclient_secret_file = \"{}\"\n{ca}\
         scopes = [\"openid\", \"profile\", \"email\", \"groups\"]\nadmin_groups = [\"gpu-admins\"]\n\
         groups = [{{ directory = \"ml-lab\", group = \"ml\" }}, {{ directory = \"physics\", group = \"phys\" }}]\n\
         button_label = \"Sign in with Lab SSO\"\n{extra}",
        secret_file(dir).display()
    )
}

/// A server on a port picked beforehand (the provider registers its redirect URI), and the
/// provider.
async fn with_provider(extra: &str) -> Option<(TestServer, Provider, tempfile::TempDir)> {
    let port = free_port();
    let p = Provider::start(&format!("http://127.0.0.1:{port}{CALLBACK}")).await?;
    let files = tempfile::tempdir().unwrap();
    let toml = table(&p.issuer, Some(&p.ca_file), files.path(), extra);
    let s = TestServer::start_with_toml_on(&toml, &[], port).await;
    Some((s, p, files))
}

/// A browser that trusts the provider's CA.
fn browser(p: &Provider) -> Browser {
    Browser::new(p.client())
}

/// Starts a sign-in at gshare and goes through the provider as `user` (its `login_hint`) up to
/// the redirect back to gshare; answers the callback URL (not yet requested).
async fn to_callback(s: &TestServer, b: &mut Browser, user: &str) -> String {
    let res = b.get(&s.url(START)).await;
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap());
    let to_issuer = res.headers()["location"].to_str().unwrap().to_string();
    assert!(b.cookie(&s.base, "gshare_oidc").is_some(), "the binding cookie is set");
    let auth = format!("{to_issuer}&login_hint={user}");
    match b.follow_until(&auth, &s.url(CALLBACK)).await {
        Ok(url) => url,
        Err(res) => panic!("the provider stopped at {}: {}", res.status(), res.text().await.unwrap()),
    }
}

/// The whole sign-in: answers the callback's response.
async fn sso(s: &TestServer, b: &mut Browser, user: &str) -> reqwest::Response {
    let cb = to_callback(s, b, user).await;
    b.get(&cb).await
}

/// The session token from a successful callback (the console's cookie).
fn session_token(res: &reqwest::Response) -> String {
    res.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("gshare_console=").map(|r| r.split(';').next().unwrap().to_string()))
        .expect("the console's session cookie")
}

async fn signed_in(s: &TestServer, b: &mut Browser, user: &str) -> String {
    let res = sso(s, b, user).await;
    assert_eq!(res.status(), 303, "{user}: {}", res.text().await.unwrap_or_default());
    assert_eq!(res.headers()["location"], "/");
    session_token(&res)
}

async fn me(s: &TestServer, token: &str) -> Value {
    let res = s.client.get(s.url("/api/v1/auth/me")).bearer_auth(token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

async fn account(s: &TestServer, admin_token: &str, name: &str) -> Option<Value> {
    let res = s.client.get(s.url("/api/v1/users?size=100")).bearer_auth(admin_token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    v["data"].as_array().unwrap().iter().find(|u| u["username"] == name).cloned()
}

async fn local_admin(s: &TestServer) -> String {
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": "admin", "password": s.initial_admin_password()}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the local admin signs in");
    let v: Value = res.json().await.unwrap();
    v["access_token"].as_str().unwrap().to_string()
}

fn pending(s: &TestServer) -> usize {
    s.app().signin.oidc.as_ref().unwrap().pending()
}

#[tokio::test]
async fn sign_in_with_a_real_provider_maps_groups_and_refuses_bad_state_and_replayed_codes() {
    let Some((s, p, _files)) = with_provider("").await else { return };

    // The sign-in page is told about the button.
    let o: Value = s.get("/api/v1/auth/options").await.json().await.unwrap();
    assert_eq!(o["methods"], json!(["local", "oidc"]));
    assert_eq!(o["oidc_label"], "Sign in with Lab SSO");
    assert_eq!(o["oidc_start"], START);

    // alice (gpu-admins, ml-lab): an admin in group ml, her account made now, linked to her sub.
    let mut b = browser(&p);
    let alice = signed_in(&s, &mut b, "alice").await;
    assert!(b.cookie(&s.base, "gshare_oidc").is_none(), "the binding cookie is cleared");
    let m = me(&s, &alice).await;
    assert_eq!((m["username"].as_str(), m["role"].as_str()), (Some("alice"), Some("admin")));
    let a = account(&s, &alice, "alice").await.expect("alice's account was made");
    assert_eq!(a["group"], "ml");
    assert_eq!(a["role"], "admin");
    assert_eq!(a["source"], "oidc");
    assert_eq!(account(&s, &alice, "admin").await.unwrap()["source"], "local");
    assert_eq!(pending(&s), 0, "the finished sign-in is forgotten");

    // The lab's policy group ml (src/policy) with a limit of its own.
    let post = |path: &str, body: Value| s.client.post(s.url(path)).bearer_auth(&alice).json(&body).send();
    assert_eq!(post("/api/v1/groups", json!({"name": "ml"})).await.unwrap().status(), 201);
    let res = post("/api/v1/resource-policies", json!({"scope": "group", "scope_id": "ml", "max_concurrent": 3}));
    assert_eq!(res.await.unwrap().status(), 201);

    // bob (ml-lab): a member of ml, under ml's policy; dave (physics): phys.
    let bob = signed_in(&s, &mut browser(&p), "bob").await;
    assert_eq!(me(&s, &bob).await["role"], "member");
    assert_eq!(account(&s, &alice, "bob").await.unwrap()["group"], "ml");
    let res = s.client.get(s.url("/api/v1/resource-policies/effective")).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let eff: Value = res.json().await.unwrap();
    assert_eq!((eff["group"].as_str(), &eff["max_concurrent"]), (Some("ml"), &json!(3)), "{eff}");
    assert_eq!(eff["sources"]["max_concurrent"], "group", "{eff}");
    let groups: Value =
        s.client.get(s.url("/api/v1/groups")).bearer_auth(&alice).send().await.unwrap().json().await.unwrap();
    let ml = groups.as_array().or(groups["data"].as_array()).unwrap().iter().find(|g| g["name"] == "ml").cloned();
    assert_eq!(ml.unwrap()["members"], json!(["alice", "bob"]));
    signed_in(&s, &mut browser(&p), "dave").await;
    assert_eq!(account(&s, &alice, "dave").await.unwrap()["group"], "phys");

    // carol (visitors, mapped to nothing; unmapped = refuse): 403, no account.
    let res = sso(&s, &mut browser(&p), "carol").await;
    expect_error(res, 403, "account_disabled").await;
    assert!(account(&s, &alice, "carol").await.is_none());

    // mallory calls herself alice at the issuer: another subject, not alice's account.
    let res = sso(&s, &mut browser(&p), "mallory").await;
    let e = expect_error(res, 409, "conflict").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("alice"), "{e}");
    // The issuer's `admin` cannot take the local first admin's account.
    expect_error(sso(&s, &mut browser(&p), "admin").await, 409, "conflict").await;

    // A replayed callback (same state, same code): the state was used.
    let mut b = browser(&p);
    let cb = to_callback(&s, &mut b, "bob").await;
    assert_eq!(b.get(&cb).await.status(), 303);
    let e = expect_error(b.get(&cb).await, 400, "bad_request").await;
    assert_eq!(e["error"]["details"]["reason"], "state");

    // A replayed code under a fresh state of the same browser: the provider refuses it.
    let used_code = query(&cb, "code").unwrap();
    let fresh = to_callback(&s, &mut b, "bob").await;
    let state = query(&fresh, "state").unwrap();
    let forged = format!("{}?code={}&state={}", s.url(CALLBACK), used_code, state);
    let e = expect_error(b.get(&forged).await, 401, "invalid_credentials").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("invalid_grant"), "{e}");
    // That state is spent too: its own code no longer opens anything.
    expect_error(b.get(&fresh).await, 400, "bad_request").await;

    // A browser's navigation is sent back to the sign-in page with the reason.
    let res = b.client.get(&cb).header("accept", "text/html,application/xhtml+xml").send().await.unwrap();
    assert_eq!(res.status(), 303);
    assert_eq!(res.headers()["location"], "/?sso_error=bad_request");

    // A state gshare never issued.
    let mut b = browser(&p);
    let cb = to_callback(&s, &mut b, "bob").await;
    let wrong = format!("{}?code={}&state=not-a-state-we-made", s.url(CALLBACK), query(&cb, "code").unwrap());
    expect_error(b.get(&wrong).await, 400, "bad_request").await;

    // A state another browser started (login CSRF: the victim's browser lacks the binding).
    let mut victim = browser(&p);
    let e = expect_error(victim.get(&cb).await, 400, "bad_request").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("another browser"), "{e}");
    // ...and a tampered binding cookie; the state is spent either way.
    let mut b = browser(&p);
    let cb = to_callback(&s, &mut b, "bob").await;
    b.set_cookie(&s.base, "gshare_oidc", Some("tampered"));
    expect_error(b.get(&cb).await, 400, "bad_request").await;
    // The issuer's own refusal (the user said no).
    let mut b = browser(&p);
    let cb = to_callback(&s, &mut b, "bob").await;
    let denied = format!("{}?error=access_denied&state={}", s.url(CALLBACK), query(&cb, "state").unwrap());
    let e = expect_error(b.get(&denied).await, 401, "invalid_credentials").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("access_denied"), "{e}");
    assert_eq!(pending(&s), 0);

    // The password form does not open an account the issuer made (it has no password).
    let res = s.client.post(s.url("/api/v1/auth/login")).json(&json!({"username": "alice", "password": "x"})).send();
    expect_error(res.await.unwrap(), 401, "invalid_credentials").await;
    // Local sign-in goes on beside it.
    local_admin(&s).await;
    // alice signs in again: the same account.
    let again = signed_in(&s, &mut browser(&p), "alice").await;
    assert_eq!(me(&s, &again).await["role"], "admin");
}

#[tokio::test]
async fn an_issuer_whose_keys_rotate_mid_sign_in_is_followed() {
    let Some((s, p, _files)) = with_provider("").await else { return };
    // gshare fetched the provider's keys at this start...
    let mut b = browser(&p);
    let res = b.get(&s.url(START)).await;
    assert_eq!(res.status(), 303);
    let to_issuer = res.headers()["location"].to_str().unwrap().to_string();
    // ...then the provider signs with a new key and no longer publishes the old one.
    let rotated = p.rotate_keys().await;
    let jwks: Value = p.client().get(format!("{}/jwks", p.issuer)).send().await.unwrap().json().await.unwrap();
    let kids: Vec<&str> = jwks["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap()).collect();
    assert_eq!(kids, [rotated["new"].as_str().unwrap()], "the old key is gone");
    let cb = match b.follow_until(&format!("{to_issuer}&login_hint=bob"), &s.url(CALLBACK)).await {
        Ok(u) => u,
        Err(r) => panic!("{}", r.text().await.unwrap()),
    };
    let res = b.get(&cb).await;
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap_or_default());
    assert_eq!(me(&s, &session_token(&res)).await["username"], "bob");
    // And the next sign-in goes on with the new keys.
    signed_in(&s, &mut browser(&p), "dave").await;
}

#[tokio::test]
async fn an_issuer_that_is_down_silent_or_untrusted_answers_503_and_local_sign_in_goes_on() {
    let files = tempfile::tempdir().unwrap();
    // Nothing listens there.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let s = TestServer::start_with_toml(&table(&closed, None, files.path(), "timeout = \"300ms\"\n"), &[]).await;
    let mut b = Browser::new(reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap());
    let e = expect_error(b.get(&s.url(START)).await, 503, "unavailable").await;
    assert_eq!(e["error"]["details"]["step"], "discovery");
    assert!(e["error"]["message"].as_str().unwrap().contains("local accounts can still sign in"), "{e}");
    // The sign-in page's button is a browser navigation: the refusal goes back to that page, which
    // words it, instead of a JSON page.
    let nav = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = nav.get(s.url(START)).header("accept", "text/html,application/xhtml+xml").send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/?sso_error=unavailable");
    assert!(r.headers().get("set-cookie").is_none(), "no sign-in was started");
    local_admin(&s).await;
    s.stop().await;

    // A listener that never answers: bounded by oidc.timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = silent.accept().await {
            h.lock().unwrap().push(c);
        }
    });
    let s = TestServer::start_with_toml(&table(&silent_url, None, files.path(), "timeout = \"300ms\"\n"), &[]).await;
    let e = expect_error(b.get(&s.url(START)).await, 503, "unavailable").await;
    assert_eq!(e["error"]["details"]["step"], "discovery");
    local_admin(&s).await;
    s.stop().await;

    let Some((s, p, _f)) = with_provider("timeout = \"2s\"\n").await else { return };
    // A provider whose certificate is from a CA we were not told of.
    let other_ca = crate::support::slapd::TestCa::new("some other CA");
    let other = files.path().join("other-ca.pem");
    std::fs::write(&other, other_ca.pem()).unwrap();
    let untrusted = TestServer::start_with_toml(&table(&p.issuer, Some(&other), files.path(), ""), &[]).await;
    let e = expect_error(b.get(&untrusted.url(START)).await, 503, "unavailable").await;
    assert_eq!(e["error"]["details"]["step"], "discovery");
    untrusted.stop().await;

    // The issuer goes down between start and callback: the code cannot be redeemed.
    let mut b = browser(&p);
    let cb = to_callback(&s, &mut b, "bob").await;
    p.stop().await;
    let e = expect_error(b.get(&cb).await, 503, "unavailable").await;
    assert_eq!(e["error"]["details"]["step"], "token");
    // Local sign-in goes on.
    local_admin(&s).await;
}

// ---- a hostile issuer ------------------------------------------------------------------------

struct Hostile {
    issuer: String,
    key: gshare::auth::keys::SigningKey,
    /// The ID token its token endpoint answers with next.
    id_token: Mutex<String>,
}

async fn hostile_issuer() -> Arc<Hostile> {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let h = Arc::new(Hostile {
        issuer: issuer.clone(),
        key: gshare::auth::keys::SigningKey::generate_for_tests(),
        id_token: Mutex::new(String::new()),
    });
    let (d, j, t) = (h.clone(), h.clone(), h.clone());
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || async move {
                axum::Json(json!({
                    "issuer": d.issuer,
                    "authorization_endpoint": format!("{}/authorize", d.issuer),
                    "token_endpoint": format!("{}/token", d.issuer),
                    "jwks_uri": format!("{}/jwks", d.issuer),
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256", "HS256", "none"],
                }))
            }),
        )
        .route("/jwks", get(move || async move { axum::Json(json!({"keys": [j.key.public_jwk()]})) }))
        .route(
            "/token",
            post(move || async move {
                let id_token = t.id_token.lock().unwrap().clone();
                axum::Json(
                    json!({"access_token": "at", "token_type": "Bearer", "expires_in": 300, "id_token": id_token}),
                )
            }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    h
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

fn sign(alg: jsonwebtoken::Algorithm, kid: Option<&str>, key: &jsonwebtoken::EncodingKey, claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

#[tokio::test]
async fn forged_id_tokens_from_a_hostile_issuer_are_refused() {
    crate::support::init();
    let h = hostile_issuer().await;
    let files = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_toml(&table(&h.issuer, None, files.path(), "unmapped = \"member\"\n"), &[]).await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let rs256 = jsonwebtoken::EncodingKey::from_rsa_pem(h.key.private_pem().expose().as_bytes()).unwrap();
    let kid = h.key.kid().to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let iss = h.issuer.clone();
    let claims = move |nonce: &str| {
        json!({"iss": iss, "aud": "gshare", "sub": "sub-eve", "preferred_username": "eve",
               "iat": now, "exp": now + 300, "nonce": nonce, "groups": ["ml-lab"]})
    };
    let other_key = gshare::auth::keys::SigningKey::generate_for_tests();
    let other_rs256 = jsonwebtoken::EncodingKey::from_rsa_pem(other_key.private_pem().expose().as_bytes()).unwrap();
    let public_pem = h.key.public_pem().unwrap();
    let public_jwk = serde_json::to_string(&h.key.public_jwk()).unwrap();

    type Forge<'a> = Box<dyn Fn(&str) -> String + 'a>;
    let cases: Vec<(&str, Forge<'_>)> = vec![
        ("alg none", {
            let c = claims.clone();
            Box::new(move |n| format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&c(n))))
        }),
        ("HS256 keyed by the public key (PEM)", {
            let (c, k) = (claims.clone(), jsonwebtoken::EncodingKey::from_secret(public_pem.as_bytes()).unwrap());
            Box::new(move |n| sign(jsonwebtoken::Algorithm::HS256, None, &k, &c(n)))
        }),
        ("HS256 keyed by the public key (JWK)", {
            let (c, k) = (claims.clone(), jsonwebtoken::EncodingKey::from_secret(public_jwk.as_bytes()).unwrap());
            let kid = kid.clone();
            Box::new(move |n| sign(jsonwebtoken::Algorithm::HS256, Some(&kid), &k, &c(n)))
        }),
        ("HS256 keyed by the client secret", {
            let (c, k) = (claims.clone(), jsonwebtoken::EncodingKey::from_secret(CLIENT_SECRET.as_bytes()).unwrap());
            Box::new(move |n| sign(jsonwebtoken::Algorithm::HS256, None, &k, &c(n)))
        }),
        ("wrong audience", {
            let (c, k, kid) = (claims.clone(), rs256.clone(), kid.clone());
            Box::new(move |n| {
                let mut v = c(n);
                v["aud"] = json!("some-other-client");
                sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &v)
            })
        }),
        ("wrong issuer", {
            let (c, k, kid) = (claims.clone(), rs256.clone(), kid.clone());
            Box::new(move |n| {
                let mut v = c(n);
                v["iss"] = json!("https://evil.example");
                sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &v)
            })
        }),
        ("expired", {
            let (c, k, kid) = (claims.clone(), rs256.clone(), kid.clone());
            Box::new(move |n| {
                let mut v = c(n);
                v["iat"] = json!(now - 3600);
                v["exp"] = json!(now - 600);
                sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &v)
            })
        }),
        ("nonce mismatch", {
            let (c, k, kid) = (claims.clone(), rs256.clone(), kid.clone());
            Box::new(move |_| sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &c("not-the-nonce")))
        }),
        ("no nonce", {
            let (c, k, kid) = (claims.clone(), rs256.clone(), kid.clone());
            Box::new(move |n| {
                let mut v = c(n);
                v.as_object_mut().unwrap().remove("nonce");
                sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &v)
            })
        }),
        ("signed by a key the issuer does not publish", {
            let c = claims.clone();
            Box::new(move |n| sign(jsonwebtoken::Algorithm::RS256, Some("unpublished"), &other_rs256, &c(n)))
        }),
        ("a published kid over another key's signature", {
            let (c, kid) = (claims.clone(), kid.clone());
            let k = jsonwebtoken::EncodingKey::from_rsa_pem(other_key.private_pem().expose().as_bytes()).unwrap();
            Box::new(move |n| sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &k, &c(n)))
        }),
    ];
    for (name, forge) in &cases {
        let mut b = Browser::new(client.clone());
        let res = b.get(&s.url(START)).await;
        assert_eq!(res.status(), 303, "{name}");
        let to_issuer = res.headers()["location"].to_str().unwrap().to_string();
        assert_eq!(query(&to_issuer, "code_challenge_method").as_deref(), Some("S256"), "PKCE");
        let (state, nonce) = (query(&to_issuer, "state").unwrap(), query(&to_issuer, "nonce").unwrap());
        *h.id_token.lock().unwrap() = forge(&nonce);
        let res = b.get(&format!("{}?code=c&state={state}", s.url(CALLBACK))).await;
        let e = expect_error(res, 401, "invalid_credentials").await;
        eprintln!("{name}: {}", e["error"]["message"]);
    }
    let admin = local_admin(&s).await;
    assert!(account(&s, &admin, "eve").await.is_none(), "no forged token made an account");

    // Sign-ins started and never finished: one address holds at most 256 (then 429), and the
    // table is not left with them beyond that.
    assert_eq!(pending(&s), 0);
    let mut last = String::new();
    for _ in 0..256 {
        let res = client.get(s.url(START)).send().await.unwrap();
        assert_eq!(res.status(), 303);
        last = query(res.headers()["location"].to_str().unwrap(), "state").unwrap();
    }
    let e = expect_error(client.get(s.url(START)).send().await.unwrap(), 429, "rate_limited").await;
    assert_eq!(e["error"]["details"]["scope"], "client_addr");
    assert_eq!(pending(&s), 256);
    // Ending one (here: the issuer's refusal) makes room again.
    let res = client.get(format!("{}?error=access_denied&state={last}", s.url(CALLBACK))).send().await.unwrap();
    expect_error(res, 401, "invalid_credentials").await;
    assert_eq!(pending(&s), 255);

    // The same harness with an honest token signs eve in: the refusals above are the tokens'.
    let mut b = Browser::new(client.clone());
    let res = b.get(&s.url(START)).await;
    let to_issuer = res.headers()["location"].to_str().unwrap().to_string();
    let (state, nonce) = (query(&to_issuer, "state").unwrap(), query(&to_issuer, "nonce").unwrap());
    *h.id_token.lock().unwrap() = sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &rs256, &claims(&nonce));
    let res = b.get(&format!("{}?code=c&state={state}", s.url(CALLBACK))).await;
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap_or_default());
    assert_eq!(account(&s, &admin, "eve").await.unwrap()["group"], "ml");
    let _ = oidc::CLIENT_SECRET;
}

/// A started sign-in waits 10 minutes (`FLOW_TTL`) on the app's clock: just inside, it finishes;
/// past it, the callback is refused 400 (`state`) with an otherwise good code and ID token, and
/// the entry is gone (taken by the callback; swept by the next start when never called back).
#[tokio::test]
async fn a_sign_in_started_more_than_ten_minutes_ago_is_refused_and_forgotten() {
    crate::support::init();
    let h = hostile_issuer().await;
    let files = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_toml(&table(&h.issuer, None, files.path(), ""), &[]).await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let rs256 = jsonwebtoken::EncodingKey::from_rsa_pem(h.key.private_pem().expose().as_bytes()).unwrap();
    let kid = h.key.kid().to_string();
    let ttl = gshare::auth::directory::oidc::FLOW_TTL;
    // An honest ID token for the sign-in `to_issuer` started.
    let honest = |to_issuer: &str| {
        let nonce = query(to_issuer, "nonce").unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let claims = json!({"iss": h.issuer, "aud": "gshare", "sub": "sub-eve", "preferred_username": "eve",
                            "iat": now, "exp": now + 300, "nonce": nonce, "groups": ["ml-lab"]});
        *h.id_token.lock().unwrap() = sign(jsonwebtoken::Algorithm::RS256, Some(&kid), &rs256, &claims);
    };
    async fn start(s: &TestServer, b: &mut Browser) -> String {
        let res = b.get(&s.url(START)).await;
        assert_eq!(res.status(), 303);
        res.headers()["location"].to_str().unwrap().to_string()
    }

    // Called back a second short of 10 minutes: signed in.
    let mut b = Browser::new(client.clone());
    let to_issuer = start(&s, &mut b).await;
    s.clock.advance(ttl - std::time::Duration::from_secs(1));
    honest(&to_issuer);
    let state = query(&to_issuer, "state").unwrap();
    let res = b.get(&format!("{}?code=c&state={state}", s.url(CALLBACK))).await;
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap_or_default());
    assert_eq!(pending(&s), 0);

    // Two started; 10 minutes pass.
    let mut late = Browser::new(client.clone());
    let to_issuer = start(&s, &mut late).await;
    let mut never = Browser::new(client.clone());
    start(&s, &mut never).await;
    assert_eq!(pending(&s), 2);
    s.clock.advance(ttl);
    // The late callback, with a good code and token, is refused and its entry is gone.
    honest(&to_issuer);
    let state = query(&to_issuer, "state").unwrap();
    let e =
        expect_error(late.get(&format!("{}?code=c&state={state}", s.url(CALLBACK))).await, 400, "bad_request").await;
    assert_eq!(e["error"]["details"]["reason"], "state", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("expired"), "{e}");
    assert_eq!(pending(&s), 1, "the expired entry was taken; the one never called back is still there");
    // The next start sweeps the one never called back, and its own sign-in goes through.
    let mut next = Browser::new(client.clone());
    let to_issuer = start(&s, &mut next).await;
    assert_eq!(pending(&s), 1, "only the new sign-in is pending");
    honest(&to_issuer);
    let state = query(&to_issuer, "state").unwrap();
    let res = next.get(&format!("{}?code=c&state={state}", s.url(CALLBACK))).await;
    assert_eq!(res.status(), 303, "{}", res.text().await.unwrap_or_default());
    assert_eq!(pending(&s), 0);
}

/// `gshare config check` with the real binary: a good `[oidc]` table is printed with the client
/// secret redacted; a table allowing HS256 is refused, naming the key.
#[test]
fn config_check_validates_the_oidc_table() {
    let files = tempfile::tempdir().unwrap();
    let cfg = files.path().join("config.toml");
    let check = |toml: &str| {
        std::fs::write(&cfg, toml).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_gshare"))
            .args(["--config", cfg.to_str().unwrap(), "config", "check"])
            .env_clear()
            .env("GSHARE_DATA_DIR", files.path().join("data"))
            .output()
            .unwrap()
    };
    let good = table("https://sso.lab.example/realms/lab", None, files.path(), "");
    let out = check(&good);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("[oidc]") && text.contains("client_secret_file = \"<redacted>\""), "{text}");
    assert!(!text.contains(CLIENT_SECRET), "{text}");
    let out = check(&format!("{good}signing_algs = [\"HS256\"]\n"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("oidc.signing_algs") && err.contains("HS256"), "{err}");
}
