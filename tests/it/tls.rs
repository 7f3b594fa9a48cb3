//! HTTPS in the binary: served with a certificate from a generated CA, renewed in place (the new
//! certificate is the one served, open connections keep working), broken renewals keep the old
//! certificate, bad files at start are named, and the plain-HTTP listener redirects.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;

use crate::support::{TestServer, gshare, stderr};

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new() -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "gshare test CA");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        Self { issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap() }
    }

    fn leaf(&self, cn: &str) -> Leaf {
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }

    fn client(&self) -> reqwest::Client {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        reqwest::Client::builder().use_preconfigured_tls(config).tls_info(true).build().unwrap()
    }
}

/// Writes a file the way renewals do: a temp file beside it, then rename.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn tls_files(dir: &Path, leaf: &Leaf) -> (PathBuf, PathBuf) {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let (cert, key) = (tls.join("cert.pem"), tls.join("key.pem"));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    (cert, key)
}

async fn served_cert(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let res = client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let info = res.extensions().get::<reqwest::tls::TlsInfo>().expect("tls info");
    info.peer_certificate().expect("peer certificate").to_vec()
}

/// A server on HTTPS with a fresh CA; the returned temp dir holds the certificate files.
async fn start_tls(extra: &[(&str, &str)]) -> (TestServer, tempfile::TempDir) {
    let ca = Ca::new();
    let leaf = ca.leaf("first");
    let holder = tempfile::tempdir().unwrap();
    let (cert, key) = tls_files(holder.path(), &leaf);
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let mut env = vec![("GSHARE_TLS_CERT", c.as_str()), ("GSHARE_TLS_KEY", k.as_str())];
    env.extend_from_slice(extra);
    let mut s = TestServer::start_with(&env).await;
    s.client = ca.client();
    (s, holder)
}

#[tokio::test]
async fn https_with_a_generated_ca_and_renewal_in_place() {
    let ca = Ca::new();
    let first = ca.leaf("first");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = tls_files(dir.path(), &first);
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let mut s = TestServer::start_with(&[("GSHARE_TLS_CERT", &c), ("GSHARE_TLS_KEY", &k)]).await;
    assert!(s.base.starts_with("https://"), "{}", s.base);
    s.client = ca.client();
    let healthz = s.url("/healthz");
    assert_eq!(served_cert(&s.client, &healthz).await, first.der);

    // Sign in over HTTPS: the cookie is Secure.
    let password = crate::signin::initial_password(&s);
    let res = s
        .client
        .post(s.url("/api/v1/auth/login"))
        .json(&json!({"username":"admin","password":password}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let cookie = res.headers().get_all("set-cookie").iter().next().unwrap().to_str().unwrap().to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");
    // … with the `__Host-` prefix (no other host may set or shadow it), and only that name counts.
    assert!(cookie.starts_with("__Host-gshare_console=") && cookie.contains("; Path=/;"), "{cookie}");
    let value = cookie.split(';').next().unwrap().split_once('=').unwrap().1.to_string();
    let me = |c: String| s.client.get(s.url("/api/v1/auth/me")).header("cookie", c).send();
    assert_eq!(me(format!("__Host-gshare_console={value}")).await.unwrap().status(), 200);
    assert_eq!(
        me(format!("gshare_console={value}")).await.unwrap().status(),
        401,
        "the unprefixed name is not ours under TLS"
    );

    // Renew: new key and certificate, written like certbot/cert-manager do.
    let tls = s.app().tls.clone().expect("tls");
    let mut status = tls.subscribe();
    let second = ca.leaf("second");
    replace(&key, &second.key_pem);
    replace(&cert, &second.cert_pem);
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|st| st.reloaded >= 1)).await.unwrap().unwrap();
    // The open (pooled) connection keeps working; new connections get the new certificate.
    assert_eq!(served_cert(&s.client, &healthz).await, first.der, "kept-alive connection is not dropped");
    assert_eq!(served_cert(&ca.client(), &healthz).await, second.der);

    // A broken renewal (garbage certificate) keeps the second certificate, and says why.
    let failed = status.borrow().failed;
    replace(&cert, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|st| st.failed > failed)).await.unwrap().unwrap();
    let why = status.borrow().last_error.clone().unwrap();
    assert!(why.contains("cert.pem"), "{why}");
    assert_eq!(served_cert(&ca.client(), &healthz).await, second.der);

    // A mismatched pair (third's certificate, second's key) too.
    let third = ca.leaf("third");
    let failed = status.borrow().failed;
    replace(&cert, &third.cert_pem);
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|st| st.failed > failed)).await.unwrap().unwrap();
    let why = status.borrow().last_error.clone().unwrap();
    assert!(why.contains("does not belong"), "{why}");
    assert_eq!(served_cert(&ca.client(), &healthz).await, second.der);

    // An unreadable key file.
    std::fs::remove_file(&key).unwrap();
    assert!(tls.reload().is_err());
    assert!(status.borrow().last_error.as_deref().unwrap().contains("key.pem"));
    assert_eq!(served_cert(&ca.client(), &healthz).await, second.der);

    // Fixed: the matching pair is picked up.
    let reloaded = status.borrow().reloaded;
    replace(&key, &third.key_pem);
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|st| st.reloaded > reloaded)).await.unwrap().unwrap();
    assert_eq!(served_cert(&ca.client(), &healthz).await, third.der);
    s.stop().await;
}

#[tokio::test]
async fn plain_http_listener_redirects_to_https() {
    let (s, _files) = start_tls(&[("GSHARE_TLS_REDIRECT_LISTEN", "127.0.0.1:0")]).await;
    let server = s.server.as_ref().unwrap();
    let redirect = server.redirect_addr.expect("redirect listener");
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let res = client.post(format!("http://{redirect}/api/v1/auth/me?x=1")).send().await.unwrap();
    assert_eq!(res.status(), 308);
    assert_eq!(res.headers()["location"], format!("https://127.0.0.1:{}/api/v1/auth/me?x=1", server.addr.port()));
    s.stop().await;
}

#[tokio::test]
async fn bad_certificate_files_at_start_are_named() {
    let ca = Ca::new();
    let a = ca.leaf("a");
    let b = ca.leaf("b");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = tls_files(dir.path(), &a);
    let start = |cert: PathBuf, key: PathBuf| async move {
        crate::support::init();
        let data = tempfile::tempdir().unwrap();
        let (c, k) = (cert.display().to_string(), key.display().to_string());
        let config = gshare::config::Config::for_data_dir(
            data.path(),
            &[("GSHARE_LISTEN", "127.0.0.1:0"), ("GSHARE_TLS_CERT", &c), ("GSHARE_TLS_KEY", &k)],
        )
        .unwrap();
        match gshare::RunningServer::start(config, gshare::clock::Clock::system()).await {
            Ok(_) => panic!("started with bad TLS files"),
            Err(e) => e.to_string(),
        }
    };
    let missing = dir.path().join("missing.pem");
    let e = start(missing.clone(), key.clone()).await;
    assert!(e.contains("missing.pem") && e.contains("cannot read"), "{e}");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "hello").unwrap();
    let e = start(garbage.clone(), key.clone()).await;
    assert!(e.contains("garbage.pem") && e.contains("no PEM certificate"), "{e}");
    let e = start(cert.clone(), garbage.clone()).await;
    assert!(e.contains("garbage.pem") && e.contains("private key"), "{e}");
    let other_key = dir.path().join("other-key.pem");
    std::fs::write(&other_key, &b.key_pem).unwrap();
    let e = start(cert.clone(), other_key).await;
    assert!(e.contains("does not belong") && e.contains("cert.pem") && e.contains("other-key.pem"), "{e}");
    let unreadable = dir.path().join("dir-not-file.pem");
    std::fs::create_dir(&unreadable).unwrap();
    let e = start(cert.clone(), unreadable).await;
    assert!(e.contains("dir-not-file.pem"), "{e}");

    // The binary exits non-zero with the same message, and config check names half-set pairs.
    let data = tempfile::tempdir().unwrap();
    let out = gshare(
        data.path(),
        &["serve"],
        &[
            ("GSHARE_LISTEN", "127.0.0.1:0"),
            ("GSHARE_TLS_CERT", &missing.display().to_string()),
            ("GSHARE_TLS_KEY", &key.display().to_string()),
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.pem"), "{}", stderr(&out));
    let out = gshare(data.path(), &["config", "check"], &[("GSHARE_TLS_CERT", &cert.display().to_string())]);
    assert!(!out.status.success() && stderr(&out).contains("tls_key"), "{}", stderr(&out));
}
