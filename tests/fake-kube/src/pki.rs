//! The fake cluster's own CA, its serving certificate and an admin client certificate.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

pub(crate) struct Pki {
    pub ca_pem: String,
    ca_der: CertificateDer<'static>,
    server_der: CertificateDer<'static>,
    server_key_der: Vec<u8>,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("fake cluster PKI: {e}"))
}

impl Pki {
    pub fn generate(bind: IpAddr) -> std::io::Result<Pki> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(io_err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "gshare-fake-kube-ca");
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(io_err)?).map_err(io_err)?;

        let mut server_params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .map_err(io_err)?;
        server_params.subject_alt_names.push(SanType::IpAddress(bind));
        server_params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(io_err)?;
        let server_cert = server_params.signed_by(&server_key, &ca).map_err(io_err)?;

        let mut client_params = CertificateParams::new(Vec::<String>::new()).map_err(io_err)?;
        client_params.distinguished_name.push(DnType::CommonName, "gshare-admin");
        client_params.distinguished_name.push(DnType::OrganizationName, "system:masters");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(io_err)?;
        let client_cert = client_params.signed_by(&client_key, &ca).map_err(io_err)?;

        Ok(Pki {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server_der: server_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// rustls server config (ring), h2 and http/1.1; client certificates from our CA
    /// are verified when offered.
    pub fn server_config(&self) -> std::io::Result<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(io_err)?;
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).map_err(io_err)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(io_err)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone()));
        let mut cfg = builder
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.server_der.clone()], key)
            .map_err(io_err)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}
