//! Sign-in with the lab's directory (issue 26) against a real OpenLDAP `slapd` on loopback
//! (`support::slapd`): search-then-bind over LDAPS and direct bind over StartTLS, groups mapped to
//! the admin role and to a group, accounts made at the first sign-in and disabled when the
//! directory no longer lets the user in, filter injection, a directory that is down, silent or
//! presents a certificate from another CA (503, local sign-in goes on), and
//! `gshare config check --ldap-test`.

use std::io::Write;
use std::path::Path;

use gshare::auth::directory::ldap::{LdapDirectory, Outcome};
use serde_json::{Value, json};

use crate::support::slapd::{self, Slapd};
use crate::support::{TestServer, expect_error};

async fn login(s: &TestServer, username: &str, password: &str) -> reqwest::Response {
    s.client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap()
}

async fn signed_in(s: &TestServer, username: &str, password: &str) -> Value {
    let res = login(s, username, password).await;
    assert_eq!(res.status(), 200, "{username}: {}", res.text().await.unwrap());
    res.json().await.unwrap()
}

/// The account as the admins' users list shows it.
async fn account(s: &TestServer, admin_token: &str, name: &str) -> Option<Value> {
    let res = s.client.get(s.url("/api/v1/users?size=100")).bearer_auth(admin_token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let v: Value = res.json().await.unwrap();
    v["data"].as_array().unwrap().iter().find(|u| u["username"] == name).cloned()
}

/// The `[ldap]` table of a search-then-bind over LDAPS.
fn search_then_bind(d: &Slapd, dir: &Path, extra: &str) -> String {
    let pw = d.password_file(dir);
    format!(
        "[ldap]\nurl = \"{}\"\nca_file = \"{}\"\ntimeout = \"5s\"\nbind_dn = \"{}\"\nbind_password_file = \"{}\"\n\
         user_base = \"ou=people,{base}\"\ngroup_base = \"ou=groups,{base}\"\nadmin_groups = [\"gpu-admins\"]\n\
         groups = [{{ directory = \"ml-lab\", group = \"ml\" }}, {{ directory = \"physics\", group = \"phys\" }}]\n{extra}",
        d.ldaps_url(),
        d.ca_file.display(),
        slapd::SERVICE_DN,
        pw.display(),
        base = slapd::BASE,
    )
}

#[tokio::test]
async fn ldaps_search_then_bind_maps_groups_makes_accounts_and_disables_them_when_the_directory_says_no() {
    let Some(d) = Slapd::start() else { return };
    let files = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_toml(&search_then_bind(&d, files.path(), ""), &[]).await;

    // alice is in gpu-admins and ml-lab: an admin in group ml, her account made now.
    let alice = signed_in(&s, "alice", &slapd::password("alice")).await;
    assert_eq!(alice["role"], "admin");
    assert_eq!(alice["username"], "alice");
    assert_eq!(alice["must_change_password"], false);
    let admin = alice["access_token"].as_str().unwrap().to_string();
    let a = account(&s, &admin, "alice").await.expect("alice's account was made");
    assert_eq!(a["group"], "ml");
    assert_eq!(a["source"], "ldap");
    assert_eq!(a["disabled"], false);

    // bob (ml-lab): a member of ml. dave (physics): a member of phys.
    let bob = signed_in(&s, "bob", &slapd::password("bob")).await;
    assert_eq!(bob["role"], "member");
    let bob_token = bob["access_token"].as_str().unwrap().to_string();
    assert_eq!(account(&s, &admin, "bob").await.unwrap()["group"], "ml");
    signed_in(&s, "dave", &slapd::password("dave")).await;
    assert_eq!(account(&s, &admin, "dave").await.unwrap()["group"], "phys");

    // A wrong password and an unknown user are both 401, and make no account.
    expect_error(login(&s, "bob", "not-bobs-password").await, 401, "invalid_credentials").await;
    expect_error(login(&s, "zed", "whatever-password").await, 401, "invalid_credentials").await;
    assert!(account(&s, &admin, "zed").await.is_none());

    // carol is in no mapped group: refused (unmapped = "refuse"), with no account.
    let body = expect_error(login(&s, "carol", &slapd::password("carol")).await, 403, "account_disabled").await;
    assert_eq!(body["error"]["details"]["groups"], json!([]));
    assert!(account(&s, &admin, "carol").await.is_none());

    // Filter injection in the username never matches another entry.
    expect_error(login(&s, "*)(uid=*", &slapd::password("alice")).await, 401, "invalid_credentials").await;
    expect_error(login(&s, "*", &slapd::password("alice")).await, 401, "invalid_credentials").await;

    // The local first admin signs in beside the directory.
    let local = signed_in(&s, "admin", &s.initial_admin_password()).await;
    assert_eq!(local["role"], "admin");

    // bob leaves ml-lab: his next sign-in is refused and the account the directory made is
    // disabled — his earlier token stops at its next request.
    d.as_root(|mut l| async move {
        let member = "uid=bob,ou=people,dc=lab,dc=test";
        let mods = vec![ldap3::Mod::Delete("member", std::collections::HashSet::from([member]))];
        l.modify("cn=ml-lab,ou=groups,dc=lab,dc=test", mods).await.unwrap().success().unwrap();
    })
    .await;
    expect_error(login(&s, "bob", &slapd::password("bob")).await, 403, "account_disabled").await;
    assert_eq!(account(&s, &admin, "bob").await.unwrap()["disabled"], true);
    let res = s.client.get(s.url("/api/v1/auth/me")).bearer_auth(&bob_token).send().await.unwrap();
    assert!(matches!(res.status().as_u16(), 401 | 403), "a disabled account's token: {}", res.status());

    // Back in the group: enabled again by the directory's yes.
    d.as_root(|mut l| async move {
        let member = "uid=bob,ou=people,dc=lab,dc=test";
        let mods = vec![ldap3::Mod::Add("member", std::collections::HashSet::from([member]))];
        l.modify("cn=ml-lab,ou=groups,dc=lab,dc=test", mods).await.unwrap().success().unwrap();
    })
    .await;
    signed_in(&s, "bob", &slapd::password("bob")).await;
    assert_eq!(account(&s, &admin, "bob").await.unwrap()["disabled"], false);

    // An admin's own disabling stays, whatever the directory says.
    let res = s
        .client
        .patch(s.url("/api/v1/users/bob"))
        .bearer_auth(&admin)
        .json(&json!({"disabled": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    expect_error(login(&s, "bob", &slapd::password("bob")).await, 403, "account_disabled").await;
    assert_eq!(account(&s, &admin, "bob").await.unwrap()["disabled"], true);

    // alice leaves ml-lab, and gpu-admins is removed, while she is signed in: the periodic
    // re-check (run here by hand) disables her account without waiting for a sign-in, and her
    // token stops.
    d.as_root(|mut l| async move {
        let member = "uid=alice,ou=people,dc=lab,dc=test";
        let mods = vec![ldap3::Mod::Delete("member", std::collections::HashSet::from([member]))];
        l.modify("cn=ml-lab,ou=groups,dc=lab,dc=test", mods).await.unwrap().success().unwrap();
        l.delete("cn=gpu-admins,ou=groups,dc=lab,dc=test").await.unwrap().success().unwrap();
    })
    .await;
    let app = s.app();
    let parts =
        gshare::auth::directory::Parts { store: &app.store, signin: &app.signin, clock: &app.clock, audit: &app.audit };
    let dir = app.signin.directory.clone().unwrap();
    assert_eq!(
        gshare::auth::directory::recheck(&dir, &parts).await.unwrap(),
        1,
        "alice only (bob was disabled by an admin)"
    );
    let local_admin = local["access_token"].as_str().unwrap().to_string();
    assert_eq!(account(&s, &local_admin, "alice").await.unwrap()["disabled"], true);
    let res = s.client.get(s.url("/api/v1/auth/me")).bearer_auth(&admin).send().await.unwrap();
    assert!(matches!(res.status().as_u16(), 401 | 403), "alice's token after the re-check: {}", res.status());
    assert_eq!(gshare::auth::directory::recheck(&dir, &parts).await.unwrap(), 0, "nothing more to disable");
    let admin = local_admin;

    // dave's entry is deleted: the directory no longer knows him; 401, and his account is disabled.
    d.as_root(|mut l| async move {
        l.delete("uid=dave,ou=people,dc=lab,dc=test").await.unwrap().success().unwrap();
    })
    .await;
    expect_error(login(&s, "dave", &slapd::password("dave")).await, 401, "invalid_credentials").await;
    assert_eq!(account(&s, &admin, "dave").await.unwrap()["disabled"], true);
    s.stop().await;
}

#[tokio::test]
async fn filter_escaping_keeps_wildcards_and_escapes_out_of_the_search() {
    // Straight to the client (the login route refuses these names before any search): without
    // RFC 4515 escaping `al*` would find alice, and her password would sign it in.
    let Some(d) = Slapd::start() else { return };
    crate::support::init();
    let files = tempfile::tempdir().unwrap();
    let toml = search_then_bind(&d, files.path(), "");
    let config = gshare::config::Config::from_toml(&files.path().join("c.toml"), &toml, &Default::default()).unwrap();
    let dir = LdapDirectory::new(config.ldap.as_ref().unwrap()).unwrap();
    let alice = slapd::password("alice");
    let mut trace = Vec::new();
    assert!(matches!(dir.authenticate("alice", &alice, &mut trace).await.unwrap(), Outcome::Accepted(_)));
    for name in ["al*", "*", "*)(uid=*", "al\\2a", "alice)(|(uid=*", "\\2a"] {
        let mut trace = Vec::new();
        let out = dir.authenticate(name, &alice, &mut trace).await.unwrap();
        assert_eq!(out, Outcome::NoSuchUser, "{name}: {trace:?}");
    }
    // An empty password is never sent as a bind (an unauthenticated bind succeeds).
    assert_eq!(dir.authenticate("alice", "", &mut trace).await.unwrap(), Outcome::WrongPassword);
}

#[tokio::test]
async fn starttls_direct_bind_with_unmapped_users_as_members() {
    let Some(d) = Slapd::start() else { return };
    let toml = format!(
        "[ldap]\nurl = \"{}\"\nstarttls = true\nca_file = \"{}\"\nuser_dn_template = \"uid={{username}},ou=people,{base}\"\n\
         group_base = \"ou=groups,{base}\"\nadmin_groups = [\"gpu-admins\"]\ngroups = [{{ directory = \"ml-lab\", group = \"ml\" }}]\n\
         unmapped = \"member\"\n",
        d.ldap_url(),
        d.ca_file.display(),
        base = slapd::BASE
    );
    let s = TestServer::start_with_toml(&toml, &[]).await;
    let alice = signed_in(&s, "alice", &slapd::password("alice")).await;
    assert_eq!(alice["role"], "admin", "groups read as the user over StartTLS");
    let admin = alice["access_token"].as_str().unwrap().to_string();
    // carol is in no group: a member without one.
    let carol = signed_in(&s, "carol", &slapd::password("carol")).await;
    assert_eq!(carol["role"], "member");
    let c = account(&s, &admin, "carol").await.unwrap();
    assert_eq!(c["group"], Value::Null);
    expect_error(login(&s, "carol", "wrong-password-1").await, 401, "invalid_credentials").await;
    // A DN injection (`,` `=`) in the name binds as no other entry.
    expect_error(login(&s, "x,ou=people", &slapd::password("alice")).await, 401, "invalid_credentials").await;
    s.stop().await;
}

/// A TCP listener that accepts and then says nothing: a directory that hangs.
async fn silent_listener() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = l.accept().await {
            held.push(c);
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_directory_that_is_down_silent_or_untrusted_answers_503_and_local_sign_in_goes_on() {
    let Some(d) = Slapd::start() else { return };
    let files = tempfile::tempdir().unwrap();
    let (silent, task) = silent_listener().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let other_ca = slapd::TestCa::new("another CA");
    let other_ca_file = files.path().join("other-ca.pem");
    std::fs::write(&other_ca_file, other_ca.pem()).unwrap();
    let pw = d.password_file(files.path());
    let table = |url: &str, ca: &Path| {
        format!(
            "[ldap]\nurl = \"{url}\"\nca_file = \"{}\"\ntimeout = \"300ms\"\nbind_dn = \"{}\"\nbind_password_file = \"{}\"\n\
             user_base = \"ou=people,{base}\"\nunmapped = \"member\"\n",
            ca.display(),
            slapd::SERVICE_DN,
            pw.display(),
            base = slapd::BASE
        )
    };
    let cases = [
        // Nothing listens there (the port was free a moment ago).
        (format!("ldap://{closed}"), d.ca_file.clone(), "connect"),
        // It accepts and never answers the bind: bounded by the timeout.
        (format!("ldap://{silent}"), d.ca_file.clone(), "bind"),
        // It accepts and never answers the TLS handshake.
        (format!("ldaps://{silent}"), d.ca_file.clone(), "connect"),
        // slapd's certificate is from a CA we were not told to trust.
        (d.ldaps_url(), other_ca_file.clone(), "connect"),
    ];
    for (url, ca, step) in cases {
        let s = TestServer::start_with_toml(&table(&url, &ca), &[]).await;
        let body = expect_error(login(&s, "alice", &slapd::password("alice")).await, 503, "unavailable").await;
        assert_eq!(body["error"]["details"]["step"], step, "{url}: {body}");
        assert_eq!(body["error"]["details"]["directory"], "ldap");
        // The first admin is local: the lab is never locked out.
        signed_in(&s, "admin", &s.initial_admin_password()).await;
        // The refusals were not counted as wrong passwords.
        for _ in 0..12 {
            expect_error(login(&s, "alice", &slapd::password("alice")).await, 503, "unavailable").await;
        }
        s.stop().await;
    }
    task.abort();
    // The same settings with the right CA sign in.
    let s = TestServer::start_with_toml(&table(&d.ldaps_url(), &d.ca_file), &[]).await;
    signed_in(&s, "alice", &slapd::password("alice")).await;
    s.stop().await;
}

#[tokio::test]
async fn a_directory_user_cannot_take_a_local_accounts_name() {
    let Some(d) = Slapd::start() else { return };
    let files = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_toml(&search_then_bind(&d, files.path(), ""), &[]).await;
    let admin = signed_in(&s, "admin", &s.initial_admin_password()).await["access_token"].as_str().unwrap().to_string();
    // A local `bob` exists: the directory's bob is not asked for that name; bob's directory
    // password is wrong for the local account.
    let res = s
        .client
        .post(s.url("/api/v1/users"))
        .bearer_auth(&admin)
        .json(&json!({"username": "bob", "password": "local bob password 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    expect_error(login(&s, "bob", &slapd::password("bob")).await, 401, "invalid_credentials").await;
    let local = signed_in(&s, "bob", "local bob password 1").await;
    assert_eq!(local["role"], "member");
    // `Bob` (another case) is the directory's answer for bob, but the name is taken.
    expect_error(login(&s, "Bob", &slapd::password("bob")).await, 409, "conflict").await;
    // Wrong directory passwords count against the address like wrong local ones (the wrong
    // password for the local bob above was the first of its 10).
    for _ in 0..9 {
        expect_error(login(&s, "alice", "not-alices-password").await, 401, "invalid_credentials").await;
    }
    expect_error(login(&s, "alice", &slapd::password("alice")).await, 429, "rate_limited").await;
    s.stop().await;
}

#[tokio::test]
async fn config_check_ldap_test_prints_each_step() {
    let Some(d) = Slapd::start() else { return };
    let files = tempfile::tempdir().unwrap();
    let cfg = files.path().join("config.toml");
    std::fs::write(&cfg, search_then_bind(&d, files.path(), "")).unwrap();
    let run = |user: &str, password: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gshare"))
            .args(["--config", cfg.to_str().unwrap(), "config", "check", "--ldap-test", user])
            .env_clear()
            .env("GSHARE_DATA_DIR", files.path().join("data"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run("alice", &slapd::password("alice"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for step in ["connect", "bind", "search", "groups", "bind as user", "map"] {
        assert!(text.lines().any(|l| l.starts_with("ok") && l.contains(step)), "{step}:\n{text}");
    }
    assert!(text.contains("gpu-admins") && text.contains("role admin, group ml"), "{text}");
    assert!(!text.contains(slapd::SERVICE_PASSWORD), "{text}");

    let out = run("alice", "wrong");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(text.lines().any(|l| l.starts_with("FAIL") && l.contains("bind as user")), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the password"));

    let out = run("carol", &slapd::password("carol"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("none of the mapped groups"));
}
