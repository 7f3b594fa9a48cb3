//! A fake Kubernetes API server for tests and trials. Never compiled into the shipped binary.
//!
//! [`FakeCluster::start`] serves, on an ephemeral port, a faithful subset of the Kubernetes API
//! (discovery, OpenAPI v3, CRUD, patches, server-side apply with managedFields, watches) over
//! HTTPS with its own CA, and hands out a kubeconfig that real `kubectl` and the `kube` crate
//! accept. [`Store`] inspects and changes objects; [`Knobs`] make the cluster misbehave.

mod api;
mod discovery;
mod fields;
mod knobs;
mod patch;
mod pki;
mod proto;
mod rbac;
mod resources;
mod schema;
mod seed;
mod select;
mod server;
mod status;
mod store;
mod table;
mod util;
mod watch;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use base64::Engine;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch as tokio_watch;

pub use knobs::Knobs;
pub use rbac::Right;
pub use resources::ResourceType;
pub use seed::gpu_uuid;
pub use store::{Store, StoreError};

/// How clients authenticate; the kubeconfig carries the matching credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    /// A bearer token (`users[].user.token`).
    #[default]
    Token,
    /// A client certificate signed by the cluster's CA (`client-certificate-data`). Needs TLS.
    ClientCert,
}

/// What a fake cluster looks like when it starts.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub nodes: usize,
    pub gpus_per_node: usize,
    /// Memory of one GPU, MiB.
    pub gpu_mem_mb: u64,
    pub gpu_model: String,
    /// Nodes carry `hami.io/node-nvidia-register` and `hami.io/node-handshake`.
    pub hami: bool,
    /// RuntimeClass `nvidia` (handler `nvidia`) exists.
    pub runtime_class_nvidia: bool,
    pub auth: Auth,
    /// `false`: plain HTTP, like `kubectl proxy`: requests without credentials are served (kubectl
    /// sends no token over plain HTTP), a wrong token still gets 401. `auth` must be
    /// [`Auth::Token`].
    pub tls: bool,
    /// Where to listen: 127.0.0.1 by default; 127.0.0.2 plays a remote cluster.
    pub bind: IpAddr,
    /// The uid of namespace `kube-system` (the cluster's identity); random when `None`.
    pub kube_system_uid: Option<String>,
    /// Nodes are `<node_prefix>0`, `<node_prefix>1`, ...
    pub node_prefix: String,
    /// Cluster, user and context name in the kubeconfig.
    pub name: String,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            nodes: 2,
            gpus_per_node: 4,
            gpu_mem_mb: 81_920,
            gpu_model: "NVIDIA A100-SXM4-80GB".into(),
            hami: true,
            runtime_class_nvidia: true,
            auth: Auth::Token,
            tls: true,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            kube_system_uid: None,
            node_prefix: "gpu-node-".into(),
            name: "fake".into(),
        }
    }
}

/// A running fake API server. Dropping it stops the server too; [`FakeCluster::shutdown`]
/// also waits for the listener to close.
pub struct FakeCluster {
    addr: SocketAddr,
    spec: ClusterSpec,
    store: Store,
    knobs: Knobs,
    token: String,
    ca_pem: Option<String>,
    client_cert: Option<(String, String)>,
    kube_system_uid: String,
    shutdown: tokio_watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster").field("addr", &self.addr).field("name", &self.spec.name).finish_non_exhaustive()
    }
}

impl FakeCluster {
    /// Binds an ephemeral port on `spec.bind`, seeds the objects and starts serving.
    pub async fn start(spec: ClusterSpec) -> std::io::Result<FakeCluster> {
        if !spec.tls && spec.auth == Auth::ClientCert {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "client-certificate auth needs TLS: set tls = true or auth = Auth::Token",
            ));
        }
        let mut rng = util::Rng::from_entropy();
        let token = rng.hex(32);
        let kube_system_uid = spec.kube_system_uid.clone().unwrap_or_else(|| rng.uuid());
        let store = Store::new(rng);
        seed_store(&store, &spec, &kube_system_uid)?;
        let knobs = Knobs::new(store.clone(), token.clone());

        let listener = TcpListener::bind(SocketAddr::new(spec.bind, 0)).await?;
        let addr = listener.local_addr()?;
        let (tls, ca_pem, client_cert) = if spec.tls {
            let pki = pki::Pki::generate(spec.bind)?;
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()?));
            let client =
                (spec.auth == Auth::ClientCert).then(|| (pki.client_cert_pem.clone(), pki.client_key_pem.clone()));
            (Some(acceptor), Some(pki.ca_pem.clone()), client)
        } else {
            (None, None, None)
        };
        let app = Arc::new(api::App {
            store: store.clone(),
            knobs: knobs.clone(),
            server_address: addr.to_string(),
            user: match spec.auth {
                Auth::Token => "system:serviceaccount:kube-system:gshare".into(),
                Auth::ClientCert => "gshare-admin".into(),
            },
            ca_pem: ca_pem.clone(),
            plain_http: !spec.tls,
        });
        let router = api::router(app);
        let (shutdown, shutdown_rx) = tokio_watch::channel(false);
        let task = tokio::spawn(server::accept_loop(listener, tls, router, knobs.clone(), shutdown_rx));
        Ok(FakeCluster {
            addr,
            spec,
            store,
            knobs,
            token,
            ca_pem,
            client_cert,
            kube_system_uid,
            shutdown,
            task: Some(task),
        })
    }

    /// `https://127.0.0.1:PORT` (or `http://` without TLS).
    pub fn server_url(&self) -> String {
        let scheme = if self.spec.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The uid namespace `kube-system` had at start (see [`Knobs::set_kube_system_uid`]).
    pub fn kube_system_uid(&self) -> String {
        self.store
            .get("", "v1", "namespaces", None, "kube-system")
            .and_then(|ns| ns["metadata"]["uid"].as_str().map(str::to_string))
            .unwrap_or_else(|| self.kube_system_uid.clone())
    }

    /// The admin bearer token (accepted in both auth modes).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The CA certificate (PEM) clients must trust; `None` without TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A rustls client config (ring) trusting this cluster's CA and, in client-certificate
    /// mode, presenting the admin certificate; `None` without TLS. For raw HTTP clients in tests.
    pub fn client_tls_config(&self) -> Option<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let ca = CertificateDer::from_pem_slice(self.ca_pem.as_deref()?.as_bytes()).ok()?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).ok()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots);
        match &self.client_cert {
            Some((cert, key)) => {
                let cert = CertificateDer::from_pem_slice(cert.as_bytes()).ok()?;
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?;
                builder.with_client_auth_cert(vec![cert], key).ok()
            }
            None => Some(builder.with_no_client_auth()),
        }
    }

    /// Names of the seeded GPU nodes.
    pub fn node_names(&self) -> Vec<String> {
        (0..self.spec.nodes).map(|i| seed::node_name(&self.spec, i)).collect()
    }

    /// A complete kubeconfig: cluster (with `certificate-authority-data`), user (token or
    /// client certificate), context, and `current-context`.
    pub fn kubeconfig_yaml(&self) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let name = &self.spec.name;
        let mut cluster = json!({"server": self.server_url()});
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] = json!(b64(ca));
        }
        let user = match &self.client_cert {
            Some((cert, key)) => json!({
                "client-certificate-data": b64(cert),
                "client-key-data": b64(key),
            }),
            None => json!({"token": self.token}),
        };
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": format!("{name}-admin"), "user": user}],
            "contexts": [{"name": name, "context": {
                "cluster": name, "user": format!("{name}-admin"), "namespace": "default"}}],
            "current-context": name,
        });
        serde_yaml::to_string(&config).unwrap_or_default()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn knobs(&self) -> &Knobs {
        &self.knobs
    }

    /// Stops accepting, cuts every open connection and waits for the listener to close.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

fn seed_store(store: &Store, spec: &ClusterSpec, kube_system_uid: &str) -> std::io::Result<()> {
    let put = |group: &str, resource: &str, obj: serde_json::Value| {
        let version = "v1";
        store
            .put(group, version, resource, obj)
            .map(|_| ())
            .map_err(|e| std::io::Error::other(format!("seeding the fake cluster: {e}")))
    };
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let uid = (ns == "kube-system").then_some(kube_system_uid);
        put("", "namespaces", seed::namespace(ns, uid))?;
        put("", "serviceaccounts", seed::service_account(ns, "default"))?;
    }
    for i in 0..spec.nodes {
        put("", "nodes", seed::node(spec, kube_system_uid, i))?;
    }
    if spec.runtime_class_nvidia {
        put("node.k8s.io", "runtimeclasses", seed::runtime_class_nvidia())?;
    }
    put("rbac.authorization.k8s.io", "clusterroles", seed::cluster_admin())?;
    Ok(())
}
