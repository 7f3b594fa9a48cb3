//! Configuration: built-in defaults, then a TOML file, then `GSHARE_*` environment variables.
//! Every key is validated here, once, so the rest of the program works with checked values;
//! secrets never print (`Debug` and `config check` redact them).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::keys::SigningKey;

pub mod directory;
pub mod oidc;
pub mod secret;
pub use directory::LdapSettings;
pub use oidc::OidcSettings;
pub use secret::Secret;

/// Where the file layer comes from when `--config` and `GSHARE_CONFIG` are both absent.
pub const SYSTEM_CONFIG: &str = "/etc/gshare/config.toml";

/// A configuration problem, always naming the offending key (or file) so an admin knows what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { key: key.into(), message: message.into() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

/// The effective, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the file layer came from, if any.
    pub source: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub public_url: String,
    pub cluster_kubeconfig_dir: PathBuf,
    pub session_domain: Option<String>,
    pub session_ingress: Option<String>,
    /// Namespace of the GShareSession CRs; must equal the operator's `--session-namespace`.
    pub sessions_namespace: String,
    /// `https` or `http`: the scheme of session URLs (and whether the session cookie is Secure).
    pub session_url_scheme: String,
    pub trusted_proxy_hops: u32,
    /// Configured signing key (PEM); checked at load time, parsed again where it is used.
    pub internal_jwt_private_key: Option<Secret>,
    pub internal_jwt_kid: Option<String>,
    /// `/metrics`: the bearer token a scraper sends. Set, the page needs it (or an admin token)
    /// and shows per-cluster series; unset, it is open but reduces them to one series per family
    /// without cluster ids.
    pub metrics_token: Option<Secret>,
    pub log_format: LogFormat,
    pub log_level: String,
    pub probe_timeout: Duration,
    pub probe_interval: Duration,
    pub kubeconfig_exec_allow: Vec<String>,
    pub bootstrap_local_cluster: bool,
    pub local_kubeconfig: Option<PathBuf>,
    pub node_stale_after: Duration,
    pub heartbeat_stale_after: Duration,
    /// A running session whose pod has not reported for this long, while its operator is alive,
    /// ends as `pod_lost` (upstream's `SESSION_STALE_SEC`, 300 s).
    pub session_stale_after: Duration,
    /// How often the liveness times of reports that changed nothing else are written (what a
    /// crash may lose of them).
    pub liveness_flush_every: Duration,
    pub shutdown_grace: Duration,
    /// A member's home workspace volume, made on their first session on a cluster (GiB). The
    /// policies' `volume_gb` will override it per member (`volumes::limits`).
    pub volume_home_gb: i64,
    /// What a member's volumes may add up to (GiB; 0 = no limit). The policies' `storage_gb`
    /// will override it per member (`volumes::limits`).
    pub volume_storage_gb: i64,
    /// Sign-in: nearest proxies allowed to set X-Forwarded-For (empty = any peer, when hops > 0).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Sign-in: lifetime of the access token (and console cookie) a login returns.
    pub login_ttl: Duration,
    /// Sign-in: failed logins per client address within `login_failure_window` before 429.
    pub login_max_failures: u32,
    pub login_failure_window: Duration,
    /// Client connections open at once; over it the oldest idle one is closed.
    pub max_connections: u32,
    /// Client connections open at once from one address (an IPv6 /64); `trusted_proxies` exempt.
    pub max_connections_per_address: u32,
    /// A buffered request body must be complete this soon after its head (a relayed one may not
    /// pause longer than this).
    pub request_body_timeout: Duration,
    /// A request body must average at least this many bytes a second (after a 2 s grace).
    pub request_body_min_rate: u32,
    /// Request body bytes the process buffers at once, MiB; over it a body is refused with 503.
    pub max_buffered_body_mb: u32,
    /// redb's page cache for the state file, MiB; `None`: sized at start from the state file and
    /// the machine (`store::cache`).
    pub store_cache_mb: Option<u32>,
    /// Audit entries older than this are removed (hourly pass).
    pub audit_retention: Duration,
    /// Audit entries kept at most; the oldest beyond it are removed by the same pass.
    pub audit_max_entries: u64,
    /// A connection must send a complete request head this soon (after opening, or after its
    /// previous response); else it is closed.
    pub request_head_timeout: Duration,
    /// TLS: PEM certificate chain and private key; both set = HTTPS on `listen`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// TLS: optional plain-HTTP listener that only redirects to HTTPS.
    pub tls_redirect_listen: Option<SocketAddr>,
    /// Snapshots: how often the server takes one (zero: never), how many it keeps, and where.
    pub snapshot_interval: Duration,
    pub snapshot_keep: usize,
    pub snapshot_dir: PathBuf,
    /// Operator: the image `operator manifests` and attach deploy (air-gapped sites mirror it).
    pub operator_image: String,
    /// Operator: which upstream build `operator_image` is (an id of `operator::builds::BUILDS`,
    /// e.g. `mkpong-018e2adb`). Only with an image pinned by digest does it pick the build's own
    /// RBAC profile; checked against the table where the manifests are rendered.
    pub operator_build: Option<String>,
    /// Operator: the longest one attach may take, in total (partial progress is reported).
    pub operator_attach_timeout: Duration,
    /// Operator: lifetime of the tokens attach and rotation write into a cluster's Secret.
    pub operator_token_ttl: Duration,
    /// Operator: a token is renewed once this share of its lifetime (percent, 10-90) has passed.
    pub operator_token_renew_percent: u32,
    /// Sign-in with the lab's directory (`[ldap]`; file only). Unset: local accounts only.
    pub ldap: Option<LdapSettings>,
    /// Sign-in with an OpenID Connect issuer (`[oidc]`; file only). Unset: no single sign-on button.
    pub oidc: Option<OidcSettings>,
}

/// Upstream's operator image, at the tag upstream's chart uses (only `latest` is published).
pub const DEFAULT_OPERATOR_IMAGE: &str = "docker.io/boanlab/gshare-operator:latest";

/// The file layer: every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLayer {
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    public_url: Option<String>,
    cluster_kubeconfig_dir: Option<PathBuf>,
    session_domain: Option<String>,
    session_ingress: Option<String>,
    sessions_namespace: Option<String>,
    session_url_scheme: Option<String>,
    trusted_proxy_hops: Option<i64>,
    internal_jwt_private_key: Option<Secret>,
    internal_jwt_kid: Option<String>,
    metrics_token: Option<Secret>,
    log_format: Option<String>,
    log_level: Option<String>,
    probe_timeout: Option<String>,
    probe_interval: Option<String>,
    kubeconfig_exec_allow: Option<Vec<String>>,
    bootstrap_local_cluster: Option<bool>,
    local_kubeconfig: Option<PathBuf>,
    node_stale_after: Option<String>,
    heartbeat_stale_after: Option<String>,
    session_stale_after: Option<String>,
    liveness_flush_every: Option<String>,
    shutdown_grace: Option<String>,
    volume_home_gb: Option<i64>,
    volume_storage_gb: Option<i64>,
    trusted_proxies: Option<Vec<String>>,
    login_ttl: Option<String>,
    login_max_failures: Option<i64>,
    login_failure_window: Option<String>,
    max_connections: Option<i64>,
    max_connections_per_address: Option<i64>,
    request_body_timeout: Option<String>,
    request_body_min_rate: Option<i64>,
    max_buffered_body_mb: Option<i64>,
    store_cache_mb: Option<i64>,
    audit_retention: Option<String>,
    audit_max_entries: Option<i64>,
    request_head_timeout: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_redirect_listen: Option<String>,
    snapshot_interval: Option<String>,
    snapshot_keep: Option<i64>,
    snapshot_dir: Option<PathBuf>,
    operator_image: Option<String>,
    operator_build: Option<String>,
    operator_attach_timeout: Option<String>,
    operator_token_ttl: Option<String>,
    operator_token_renew_percent: Option<i64>,
    ldap: Option<directory::LdapFile>,
    oidc: Option<oidc::OidcFile>,
}

/// One raw value and where it came from, so errors name the key the admin actually wrote.
struct Raw<T> {
    value: T,
    key: String,
}

impl Config {
    /// Loads defaults -> file -> environment. `explicit` is `--config`; `env` is the process
    /// environment (passed in so tests don't mutate global state).
    pub fn load(explicit: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let path = match (explicit, env.get("GSHARE_CONFIG")) {
            (Some(p), _) => Some(p.to_path_buf()),
            (None, Some(p)) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => {
                let system = Path::new(SYSTEM_CONFIG);
                system.exists().then(|| system.to_path_buf())
            }
        };
        let file = match &path {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|source| ConfigError::Unreadable { path: p.clone(), source })?;
                Self::parse_file(p, &text)?
            }
            None => FileLayer::default(),
        };
        Self::build(path, file, env)
    }

    /// Loads only from a TOML text (used by tests and `config check` on the example file).
    pub fn from_toml(path: &Path, text: &str, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let file = Self::parse_file(path, text)?;
        Self::build(Some(path.to_path_buf()), file, env)
    }

    fn parse_file(path: &Path, text: &str) -> Result<FileLayer, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::File { path: path.to_path_buf(), message: e.to_string().trim_end().to_string() })
    }

    fn build(source: Option<PathBuf>, f: FileLayer, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        check_env_names(env)?;
        let layer = Layer { env };
        let data_dir = layer
            .pick("data_dir", f.data_dir.map(|p| p.display().to_string()))
            .map(|r| PathBuf::from(r.value))
            .unwrap_or_else(|| PathBuf::from("gshare-data"));
        non_empty_path("data_dir", &data_dir)?;

        let listen = match layer.pick("listen", f.listen) {
            Some(r) => r.value.parse::<SocketAddr>().map_err(|_| {
                ConfigError::invalid(&r.key, format!("`{}` is not an address:port such as 127.0.0.1:8080", r.value))
            })?,
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
        };

        let public_url_defaulted = layer.pick("public_url", None).is_none() && f.public_url.is_none();
        let public_url = match layer.pick("public_url", f.public_url) {
            Some(r) => {
                let url = r.value.trim_end_matches('/').to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= "https://".len() {
                    return Err(ConfigError::invalid(
                        &r.key,
                        format!("`{}` must be an http:// or https:// URL", r.value),
                    ));
                }
                url
            }
            // Becomes https:// below when TLS is configured.
            None => format!("http://{listen}"),
        };

        let cluster_kubeconfig_dir = layer
            .pick("cluster_kubeconfig_dir", f.cluster_kubeconfig_dir.map(|p| p.display().to_string()))
            .map(|r| PathBuf::from(r.value))
            .unwrap_or_else(|| data_dir.join("clusters"));
        non_empty_path("cluster_kubeconfig_dir", &cluster_kubeconfig_dir)?;

        let session_domain = match layer.pick("session_domain", f.session_domain) {
            Some(r) if r.value.is_empty() => None,
            Some(r) => Some(hostname(&r.key, &r.value)?),
            None => None,
        };
        let session_ingress = match layer.pick("session_ingress", f.session_ingress) {
            Some(r) if r.value.is_empty() => None,
            Some(r) => Some(validate_ingress(&r.value).map_err(|m| ConfigError::invalid(&r.key, m))?),
            None => None,
        };

        let sessions_namespace = match layer.pick("sessions_namespace", f.sessions_namespace) {
            Some(r) => {
                let ok = !r.value.is_empty()
                    && r.value.len() <= 63
                    && r.value.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                    && !r.value.starts_with('-')
                    && !r.value.ends_with('-');
                if !ok {
                    return Err(ConfigError::invalid(
                        &r.key,
                        format!("`{}` is not a Kubernetes namespace name (lower-case letters, digits, -)", r.value),
                    ));
                }
                r.value
            }
            None => "gshare-sessions".into(),
        };
        let session_url_scheme = match layer.pick("session_url_scheme", f.session_url_scheme) {
            Some(r) => match r.value.as_str() {
                "https" | "http" => r.value,
                other => return Err(ConfigError::invalid(&r.key, format!("`{other}` is neither `https` nor `http`"))),
            },
            None => "https".into(),
        };

        let trusted_proxy_hops =
            match layer.pick_typed("trusted_proxy_hops", f.trusted_proxy_hops, |s| s.parse::<i64>().ok())? {
                Some(r) => u32::try_from(r.value).ok().filter(|v| *v <= 16).ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a hop count between 0 and 16", r.value))
                })?,
                None => 0,
            };

        let internal_jwt_kid =
            layer.pick("internal_jwt_kid", f.internal_jwt_kid).map(|r| r.value).filter(|v| !v.is_empty());
        if let Some(kid) = &internal_jwt_kid
            && (kid.len() > 128 || !kid.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        {
            return Err(ConfigError::invalid("internal_jwt_kid", "use 1-128 characters from A-Z a-z 0-9 - _ ."));
        }
        let internal_jwt_private_key = match env.get("GSHARE_INTERNAL_JWT_PRIVATE_KEY").filter(|v| !v.is_empty()) {
            Some(v) => Some(Raw { value: Secret::new(v.clone()), key: "GSHARE_INTERNAL_JWT_PRIVATE_KEY".into() }),
            None => f
                .internal_jwt_private_key
                .filter(|s| !s.expose().is_empty())
                .map(|value| Raw { value, key: "internal_jwt_private_key".into() }),
        };
        if let Some(r) = &internal_jwt_private_key {
            SigningKey::from_pem(r.value.expose(), None).map_err(|e| ConfigError::invalid(&r.key, e.to_string()))?;
        }

        let metrics_token = match env.get("GSHARE_METRICS_TOKEN").filter(|v| !v.is_empty()) {
            Some(v) => Some(Raw { value: Secret::new(v.clone()), key: "GSHARE_METRICS_TOKEN".into() }),
            None => f
                .metrics_token
                .filter(|s| !s.expose().is_empty())
                .map(|value| Raw { value, key: "metrics_token".into() }),
        };
        if let Some(r) = &metrics_token {
            let t = r.value.expose();
            if t.len() < 16 || t.len() > 256 || !t.chars().all(|c| c.is_ascii_graphic()) {
                return Err(ConfigError::invalid(
                    &r.key,
                    "use 16-256 printable ASCII characters without spaces (e.g. `openssl rand -hex 32`)",
                ));
            }
        }

        let log_format = match layer.pick("log_format", f.log_format) {
            Some(r) => match r.value.as_str() {
                "human" | "text" | "" => LogFormat::Human,
                "json" => LogFormat::Json,
                other => {
                    return Err(ConfigError::invalid(&r.key, format!("`{other}` is neither `human` nor `json`")));
                }
            },
            None => LogFormat::Human,
        };
        let log_level = match layer.pick("log_level", f.log_level) {
            Some(r) => {
                tracing_subscriber::EnvFilter::try_new(&r.value)
                    .map_err(|e| ConfigError::invalid(&r.key, format!("`{}` is not a log filter: {e}", r.value)))?;
                r.value
            }
            None => "info".to_string(),
        };

        let probe_timeout = layer.duration(
            "probe_timeout",
            f.probe_timeout,
            "10s",
            Duration::from_secs(1)..=Duration::from_secs(300),
        )?;
        let probe_interval = layer.duration(
            "probe_interval",
            f.probe_interval,
            "60s",
            Duration::from_secs(5)..=Duration::from_secs(86400),
        )?;
        let node_stale_after = layer.duration(
            "node_stale_after",
            f.node_stale_after,
            "120s",
            Duration::from_secs(15)..=Duration::from_secs(86400),
        )?;
        let heartbeat_stale_after = layer.duration(
            "heartbeat_stale_after",
            f.heartbeat_stale_after,
            "90s",
            Duration::from_secs(15)..=Duration::from_secs(86400),
        )?;
        let session_stale_after = layer.duration(
            "session_stale_after",
            f.session_stale_after,
            "300s",
            Duration::from_secs(60)..=Duration::from_secs(86400),
        )?;
        let liveness_flush_every = layer.duration(
            "liveness_flush_every",
            f.liveness_flush_every,
            "5s",
            Duration::from_secs(1)..=Duration::from_secs(60),
        )?;
        let shutdown_grace = layer.duration(
            "shutdown_grace",
            f.shutdown_grace,
            "20s",
            Duration::from_secs(0)..=Duration::from_secs(600),
        )?;

        let gib = |key: &str, file: Option<i64>, default: i64, min: i64| -> Result<i64, ConfigError> {
            match layer.pick_typed(key, file, |s| s.parse::<i64>().ok())? {
                Some(r) if r.value < min || r.value > 1 << 20 => Err(ConfigError::invalid(
                    &r.key,
                    format!("{} is not a size in GiB between {min} and {}", r.value, 1 << 20),
                )),
                Some(r) => Ok(r.value),
                None => Ok(default),
            }
        };
        let volume_home_gb = gib("volume_home_gb", f.volume_home_gb, 10, 1)?;
        let volume_storage_gb = gib("volume_storage_gb", f.volume_storage_gb, 0, 0)?;

        let kubeconfig_exec_allow = match env.get("GSHARE_KUBECONFIG_EXEC_ALLOW") {
            Some(v) => v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
            None => f.kubeconfig_exec_allow.unwrap_or_default(),
        };
        let bootstrap_local_cluster = layer
            .pick_typed("bootstrap_local_cluster", f.bootstrap_local_cluster, parse_bool)?
            .is_some_and(|r| r.value);
        let local_kubeconfig = layer
            .pick("local_kubeconfig", f.local_kubeconfig.map(|p| p.display().to_string()))
            .map(|r| PathBuf::from(r.value))
            .filter(|p| !p.as_os_str().is_empty());

        let trusted_proxies = match env.get("GSHARE_TRUSTED_PROXIES") {
            Some(v) => cidrs("GSHARE_TRUSTED_PROXIES", v.split(',').map(str::trim).filter(|s| !s.is_empty()))?,
            None => cidrs("trusted_proxies", f.trusted_proxies.unwrap_or_default().iter().map(String::as_str))?,
        };
        let login_ttl = layer.duration(
            "login_ttl",
            f.login_ttl,
            "1h",
            Duration::from_secs(60)..=Duration::from_secs(30 * 86400),
        )?;
        let login_max_failures =
            match layer.pick_typed("login_max_failures", f.login_max_failures, |s| s.parse::<i64>().ok())? {
                Some(r) => u32::try_from(r.value).ok().filter(|v| (1..=10_000).contains(v)).ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a count between 1 and 10000", r.value))
                })?,
                None => 10,
            };
        let snapshot_interval = layer.duration(
            "snapshot_interval",
            f.snapshot_interval,
            "1d",
            Duration::from_secs(0)..=Duration::from_secs(365 * 86400),
        )?;
        if !snapshot_interval.is_zero() && snapshot_interval < Duration::from_secs(60) {
            return Err(ConfigError::invalid(
                layer.pick("snapshot_interval", None).map(|r| r.key).unwrap_or_else(|| "snapshot_interval".into()),
                "must be 0s (off) or at least 1m",
            ));
        }
        let snapshot_keep = match layer.pick_typed("snapshot_keep", f.snapshot_keep, |s| s.parse::<i64>().ok())? {
            Some(r) => usize::try_from(r.value).ok().filter(|v| (1..=1000).contains(v)).ok_or_else(|| {
                ConfigError::invalid(&r.key, format!("{} is not a count between 1 and 1000", r.value))
            })?,
            None => 7,
        };
        let snapshot_dir = layer
            .pick("snapshot_dir", f.snapshot_dir.map(|p| p.display().to_string()))
            .filter(|r| !r.value.is_empty())
            .map(|r| PathBuf::from(r.value))
            .unwrap_or_else(|| data_dir.join("snapshots"));
        let login_failure_window = layer.duration(
            "login_failure_window",
            f.login_failure_window,
            "5m",
            Duration::from_secs(1)..=Duration::from_secs(86400),
        )?;
        let max_connections = match layer.pick_typed("max_connections", f.max_connections, |s| s.parse::<i64>().ok())? {
            Some(r) => u32::try_from(r.value).ok().filter(|v| (16..=1_000_000).contains(v)).ok_or_else(|| {
                ConfigError::invalid(&r.key, format!("{} is not a count between 16 and 1000000", r.value))
            })?,
            None => 4096,
        };
        let max_connections_per_address =
            match layer
                .pick_typed("max_connections_per_address", f.max_connections_per_address, |s| s.parse::<i64>().ok())?
            {
                Some(r) => u32::try_from(r.value).ok().filter(|v| (1..=1_000_000).contains(v)).ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a count between 1 and 1000000", r.value))
                })?,
                None => 1024,
            };
        let request_body_timeout = layer.duration(
            "request_body_timeout",
            f.request_body_timeout,
            "30s",
            Duration::from_secs(1)..=Duration::from_secs(3600),
        )?;
        let request_body_min_rate =
            match layer.pick_typed("request_body_min_rate", f.request_body_min_rate, |s| s.parse::<i64>().ok())? {
                Some(r) => u32::try_from(r.value).ok().filter(|v| (16..=100_000_000).contains(v)).ok_or_else(|| {
                    ConfigError::invalid(
                        &r.key,
                        format!("{} is not a rate in bytes a second between 16 and 100000000", r.value),
                    )
                })?,
                None => 1024,
            };
        let max_buffered_body_mb =
            match layer.pick_typed("max_buffered_body_mb", f.max_buffered_body_mb, |s| s.parse::<i64>().ok())? {
                Some(r) => u32::try_from(r.value).ok().filter(|v| (4..=65_536).contains(v)).ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a size in MiB between 4 and 65536", r.value))
                })?,
                None => 64,
            };
        let store_cache_mb = match layer.pick_typed("store_cache_mb", f.store_cache_mb, |s| s.parse::<i64>().ok())? {
            Some(r) => u32::try_from(r.value)
                .ok()
                .filter(|v| (8..=65_536).contains(v))
                .ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a size in MiB between 8 and 65536", r.value))
                })
                .map(Some)?,
            None => None,
        };
        let audit_retention = layer.duration(
            "audit_retention",
            f.audit_retention,
            "400d",
            Duration::from_secs(86400)..=Duration::from_secs(100 * 365 * 86400),
        )?;
        let audit_max_entries = match layer
            .pick_typed("audit_max_entries", f.audit_max_entries, |s| s.parse::<i64>().ok())?
        {
            Some(r) => u64::try_from(r.value).ok().filter(|v| (100..=1_000_000_000).contains(v)).ok_or_else(|| {
                ConfigError::invalid(&r.key, format!("{} is not a count between 100 and 1000000000", r.value))
            })?,
            None => 1_000_000,
        };
        let request_head_timeout = layer.duration(
            "request_head_timeout",
            f.request_head_timeout,
            "5s",
            Duration::from_secs(1)..=Duration::from_secs(600),
        )?;
        let path_key = |key: &str, file: Option<PathBuf>| {
            layer
                .pick(key, file.map(|p| p.display().to_string()))
                .map(|r| PathBuf::from(r.value))
                .filter(|p| !p.as_os_str().is_empty())
        };
        let tls_cert = path_key("tls_cert", f.tls_cert);
        let tls_key = path_key("tls_key", f.tls_key);
        match (&tls_cert, &tls_key) {
            (Some(_), None) => return Err(ConfigError::invalid("tls_key", "tls_cert is set, so tls_key must be too")),
            (None, Some(_)) => return Err(ConfigError::invalid("tls_cert", "tls_key is set, so tls_cert must be too")),
            _ => {}
        }
        let public_url =
            if public_url_defaulted && tls_cert.is_some() { format!("https://{listen}") } else { public_url };
        if let Some(d) = &session_domain {
            check_session_domain_apart(d, &public_url).map_err(|m| ConfigError::invalid("session_domain", m))?;
        }
        let tls_redirect_listen = match layer.pick("tls_redirect_listen", f.tls_redirect_listen) {
            Some(r) if r.value.is_empty() => None,
            Some(r) => {
                if tls_cert.is_none() {
                    return Err(ConfigError::invalid(&r.key, "redirects to HTTPS need tls_cert and tls_key"));
                }
                Some(r.value.parse::<SocketAddr>().map_err(|_| {
                    ConfigError::invalid(&r.key, format!("`{}` is not an address:port such as 0.0.0.0:80", r.value))
                })?)
            }
            None => None,
        };

        let operator_image = match layer.pick("operator_image", f.operator_image) {
            Some(r) => {
                let v = r.value.trim().to_string();
                if v.is_empty() || v.len() > 512 || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ConfigError::invalid(
                        &r.key,
                        format!("`{}` is not an image reference such as registry.lan/gshare-operator:latest", r.value),
                    ));
                }
                v
            }
            None => DEFAULT_OPERATOR_IMAGE.to_string(),
        };
        let operator_build = match layer.pick("operator_build", f.operator_build) {
            Some(r) if r.value.trim().is_empty() => None,
            Some(r) => {
                let v = r.value.trim().to_ascii_lowercase();
                if v.len() > 64 || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    return Err(ConfigError::invalid(
                        &r.key,
                        format!("`{}` is not a build id such as mkpong-018e2adb", r.value),
                    ));
                }
                Some(v)
            }
            None => None,
        };
        let operator_attach_timeout = layer.duration(
            "operator_attach_timeout",
            f.operator_attach_timeout,
            "2m",
            Duration::from_secs(1)..=Duration::from_secs(1800),
        )?;
        let operator_token_ttl = layer.duration(
            "operator_token_ttl",
            f.operator_token_ttl,
            "7d",
            Duration::from_secs(3600)..=Duration::from_secs(30 * 86400),
        )?;
        let operator_token_renew_percent =
            match layer
                .pick_typed("operator_token_renew_percent", f.operator_token_renew_percent, |s| s.parse::<i64>().ok())?
            {
                Some(r) => u32::try_from(r.value).ok().filter(|v| (10..=90).contains(v)).ok_or_else(|| {
                    ConfigError::invalid(&r.key, format!("{} is not a percentage between 10 and 90", r.value))
                })?,
                None => 50,
            };
        let ldap = f.ldap.map(directory::build).transpose()?;
        let oidc = f.oidc.map(oidc::build).transpose()?;

        Ok(Self {
            source,
            data_dir,
            listen,
            public_url,
            cluster_kubeconfig_dir,
            session_domain,
            session_ingress,
            sessions_namespace,
            session_url_scheme,
            trusted_proxy_hops,
            internal_jwt_private_key: internal_jwt_private_key.map(|r| r.value),
            internal_jwt_kid,
            metrics_token: metrics_token.map(|r| r.value),
            log_format,
            log_level,
            probe_timeout,
            probe_interval,
            kubeconfig_exec_allow,
            bootstrap_local_cluster,
            local_kubeconfig,
            node_stale_after,
            heartbeat_stale_after,
            session_stale_after,
            liveness_flush_every,
            shutdown_grace,
            volume_home_gb,
            volume_storage_gb,
            trusted_proxies,
            login_ttl,
            login_max_failures,
            login_failure_window,
            max_connections,
            max_connections_per_address,
            request_body_timeout,
            request_body_min_rate,
            max_buffered_body_mb,
            store_cache_mb,
            audit_retention,
            audit_max_entries,
            request_head_timeout,
            tls_cert,
            tls_key,
            tls_redirect_listen,
            snapshot_interval,
            snapshot_keep,
            snapshot_dir,
            operator_image,
            operator_build,
            operator_attach_timeout,
            operator_token_ttl,
            operator_token_renew_percent,
            ldap,
            oidc,
        })
    }

    /// Is HTTPS on (cookies get `Secure`)?
    pub fn tls_enabled(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// The state file: one redb database.
    pub fn state_file(&self) -> PathBuf {
        self.data_dir.join("gshare.redb")
    }

    /// Where generated signing keys live.
    pub fn keys_dir(&self) -> PathBuf {
        self.data_dir.join("keys")
    }

    /// The effective configuration as TOML, secrets redacted: what `gshare config check` prints.
    pub fn render_redacted(&self) -> String {
        let mut t = toml::Table::new();
        let s = |v: &str| toml::Value::String(v.to_string());
        let d = |v: Duration| toml::Value::String(humantime::format_duration(v).to_string());
        t.insert("data_dir".into(), s(&self.data_dir.display().to_string()));
        t.insert("listen".into(), s(&self.listen.to_string()));
        t.insert("public_url".into(), s(&self.public_url));
        t.insert("cluster_kubeconfig_dir".into(), s(&self.cluster_kubeconfig_dir.display().to_string()));
        t.insert("session_domain".into(), s(self.session_domain.as_deref().unwrap_or("")));
        t.insert("session_ingress".into(), s(self.session_ingress.as_deref().unwrap_or("")));
        t.insert("sessions_namespace".into(), s(&self.sessions_namespace));
        t.insert("session_url_scheme".into(), s(&self.session_url_scheme));
        t.insert("trusted_proxy_hops".into(), toml::Value::Integer(i64::from(self.trusted_proxy_hops)));
        t.insert(
            "internal_jwt_private_key".into(),
            s(if self.internal_jwt_private_key.is_some() { "<redacted>" } else { "" }),
        );
        t.insert("internal_jwt_kid".into(), s(self.internal_jwt_kid.as_deref().unwrap_or("")));
        t.insert("metrics_token".into(), s(if self.metrics_token.is_some() { "<redacted>" } else { "" }));
        t.insert("log_format".into(), s(if self.log_format == LogFormat::Json { "json" } else { "human" }));
        t.insert("log_level".into(), s(&self.log_level));
        t.insert("probe_timeout".into(), d(self.probe_timeout));
        t.insert("probe_interval".into(), d(self.probe_interval));
        t.insert(
            "kubeconfig_exec_allow".into(),
            toml::Value::Array(self.kubeconfig_exec_allow.iter().map(|v| s(v)).collect()),
        );
        t.insert("bootstrap_local_cluster".into(), toml::Value::Boolean(self.bootstrap_local_cluster));
        t.insert(
            "local_kubeconfig".into(),
            s(&self.local_kubeconfig.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
        );
        t.insert("node_stale_after".into(), d(self.node_stale_after));
        t.insert("heartbeat_stale_after".into(), d(self.heartbeat_stale_after));
        t.insert("session_stale_after".into(), d(self.session_stale_after));
        t.insert("liveness_flush_every".into(), d(self.liveness_flush_every));
        t.insert("shutdown_grace".into(), d(self.shutdown_grace));
        t.insert("volume_home_gb".into(), toml::Value::Integer(self.volume_home_gb));
        t.insert("volume_storage_gb".into(), toml::Value::Integer(self.volume_storage_gb));
        t.insert(
            "trusted_proxies".into(),
            toml::Value::Array(self.trusted_proxies.iter().map(|n| s(&n.to_string())).collect()),
        );
        t.insert("login_ttl".into(), d(self.login_ttl));
        t.insert("login_max_failures".into(), toml::Value::Integer(i64::from(self.login_max_failures)));
        t.insert("login_failure_window".into(), d(self.login_failure_window));
        t.insert("max_connections".into(), toml::Value::Integer(i64::from(self.max_connections)));
        t.insert(
            "max_connections_per_address".into(),
            toml::Value::Integer(i64::from(self.max_connections_per_address)),
        );
        t.insert("request_body_timeout".into(), d(self.request_body_timeout));
        t.insert("request_body_min_rate".into(), toml::Value::Integer(i64::from(self.request_body_min_rate)));
        t.insert("max_buffered_body_mb".into(), toml::Value::Integer(i64::from(self.max_buffered_body_mb)));
        if let Some(mb) = self.store_cache_mb {
            t.insert("store_cache_mb".into(), toml::Value::Integer(i64::from(mb)));
        }
        t.insert("audit_retention".into(), d(self.audit_retention));
        t.insert("audit_max_entries".into(), toml::Value::Integer(self.audit_max_entries.min(i64::MAX as u64) as i64));
        t.insert("request_head_timeout".into(), d(self.request_head_timeout));
        let path = |p: &Option<PathBuf>| s(&p.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        t.insert("tls_cert".into(), path(&self.tls_cert));
        t.insert("tls_key".into(), path(&self.tls_key));
        t.insert("tls_redirect_listen".into(), s(&self.tls_redirect_listen.map(|a| a.to_string()).unwrap_or_default()));
        t.insert("snapshot_interval".into(), d(self.snapshot_interval));
        t.insert("snapshot_keep".into(), toml::Value::Integer(self.snapshot_keep as i64));
        t.insert("snapshot_dir".into(), s(&self.snapshot_dir.display().to_string()));
        t.insert("operator_image".into(), s(&self.operator_image));
        t.insert("operator_build".into(), s(self.operator_build.as_deref().unwrap_or("")));
        t.insert("operator_attach_timeout".into(), d(self.operator_attach_timeout));
        t.insert("operator_token_ttl".into(), d(self.operator_token_ttl));
        t.insert(
            "operator_token_renew_percent".into(),
            toml::Value::Integer(i64::from(self.operator_token_renew_percent)),
        );
        if let Some(ldap) = &self.ldap {
            t.insert("ldap".into(), toml::Value::Table(directory::render(ldap)));
        }
        if let Some(o) = &self.oidc {
            t.insert("oidc".into(), toml::Value::Table(oidc::render(o)));
        }
        toml::to_string(&t).unwrap_or_default()
    }

    /// Defaults only, rooted at `data_dir`, with `extra` environment on top (tests and embedded use).
    pub fn for_data_dir(data_dir: &Path, extra: &[(&str, &str)]) -> Result<Self, ConfigError> {
        let mut env: BTreeMap<String, String> = extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.insert("GSHARE_DATA_DIR".to_string(), data_dir.display().to_string());
        Self::build(None, FileLayer::default(), &env)
    }
}

/// Keys of the file layer that are tables (`[ldap]`): set in the file only, never by a variable.
const TABLES: &[&str] = &["ldap", "oidc"];

/// `GSHARE_*` variables that are not settings: read by the CLI, the build, tests or the scripts
/// of `hack/` and `web/e2e/`, which may leave them in a server's environment.
const NOT_SETTINGS: &[&str] = &[
    "GSHARE_SNAPSHOT_PASSPHRASE",
    "GSHARE_WEB_DIST",
    "GSHARE_NPM",
    "GSHARE_UPDATE_MAN",
    "GSHARE_UPDATE_COMPLETIONS",
    "GSHARE_UPDATE_OPENAPI",
    "GSHARE_TEST_NGINX",
    "GSHARE_FUZZ_TARGET",
    "GSHARE_FUZZ_SECONDS",
    "GSHARE_BIN",
    "GSHARE_BENCH_BIN",
    "GSHARE_URL",
    "GSHARE_SCHEMATHESIS_INNER",
    "GSHARE_SCHEMATHESIS_VENV",
    "GSHARE_LDAP_TEST_PASSWORD",
];

/// The keys of the file layer, as its `Deserialize` names them (so the list cannot drift from
/// the struct): a deserializer that only records the field list it is asked for.
fn setting_keys() -> &'static [&'static str] {
    struct FieldNames(Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for &mut FieldNames {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("field names only"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = Some(fields);
            Err(serde::de::Error::custom("field names only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = FieldNames(None);
    let _ = FileLayer::deserialize(&mut names);
    names.0.unwrap_or_default()
}

/// A `GSHARE_*` variable that is neither a setting nor on [`NOT_SETTINGS`] is refused, naming the
/// closest setting: a misspelled setting would otherwise be silently ignored.
fn check_env_names(env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let settings: Vec<String> = std::iter::once("GSHARE_CONFIG".to_string())
        .chain(setting_keys().iter().filter(|k| !TABLES.contains(k)).map(|k| Layer::env_name(k)))
        .collect();
    for name in env.keys().filter(|k| k.starts_with("GSHARE_")) {
        if settings.contains(name) || NOT_SETTINGS.contains(&name.as_str()) {
            continue;
        }
        let closest = settings.iter().min_by_key(|s| edit_distance(name, s)).map_or("", String::as_str);
        return Err(ConfigError::invalid(
            name,
            format!("no such setting (did you mean {closest}?); config.example.toml lists every GSHARE_* setting"),
        ));
    }
    Ok(())
}

/// Levenshtein distance (insertions, deletions, substitutions), by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The environment layer over the file layer for one key.
struct Layer<'a> {
    env: &'a BTreeMap<String, String>,
}

impl Layer<'_> {
    fn env_name(key: &str) -> String {
        format!("GSHARE_{}", key.to_ascii_uppercase())
    }

    /// String-typed key: the environment wins over the file.
    fn pick(&self, key: &str, file: Option<String>) -> Option<Raw<String>> {
        let name = Self::env_name(key);
        match self.env.get(&name) {
            Some(v) => Some(Raw { value: v.clone(), key: name }),
            None => file.map(|value| Raw { value, key: key.to_string() }),
        }
    }

    /// Typed key: the file value is already typed; an env value is parsed, naming the variable on failure.
    fn pick_typed<T>(
        &self,
        key: &str,
        file: Option<T>,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<Raw<T>>, ConfigError> {
        let name = Self::env_name(key);
        match self.env.get(&name) {
            Some(v) => parse(v.trim())
                .map(|value| Some(Raw { value, key: name.clone() }))
                .ok_or_else(|| ConfigError::invalid(&name, format!("`{v}` is not a valid value"))),
            None => Ok(file.map(|value| Raw { value, key: key.to_string() })),
        }
    }

    fn duration(
        &self,
        key: &str,
        file: Option<String>,
        default: &str,
        range: std::ops::RangeInclusive<Duration>,
    ) -> Result<Duration, ConfigError> {
        let raw = self.pick(key, file).unwrap_or(Raw { value: default.to_string(), key: key.to_string() });
        let d = humantime::parse_duration(raw.value.trim()).map_err(|e| {
            ConfigError::invalid(&raw.key, format!("`{}` is not a duration like 30s or 5m: {e}", raw.value))
        })?;
        if !range.contains(&d) {
            return Err(ConfigError::invalid(
                &raw.key,
                format!(
                    "{} is outside {}..={}",
                    raw.value,
                    humantime::format_duration(*range.start()),
                    humantime::format_duration(*range.end())
                ),
            ));
        }
        Ok(d)
    }
}

/// CIDRs (`10.0.0.0/8`) or single addresses (`192.0.2.7`), each error naming `key`.
fn cidrs<'a>(key: &str, items: impl Iterator<Item = &'a str>) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    items
        .map(|item| {
            item.parse::<ipnet::IpNet>().or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from)).map_err(
                |_| ConfigError::invalid(key, format!("`{item}` is not an address or CIDR such as 10.0.0.0/8")),
            )
        })
        .collect()
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

fn non_empty_path(key: &str, p: &Path) -> Result<(), ConfigError> {
    if p.as_os_str().is_empty() {
        return Err(ConfigError::invalid(key, "must not be empty"));
    }
    Ok(())
}

/// `host:port` of a session ingress (the relay target): a DNS name or IP address and a port.
pub fn validate_ingress(v: &str) -> Result<String, String> {
    let v = v.trim();
    let bad = || format!("`{v}` is not host:port, such as gpu-node-1:30080 or 10.0.0.5:30080");
    let (host, port) = v.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.parse::<std::net::IpAddr>().is_err() && hostname("session_ingress", host).is_err() {
        return Err(bad());
    }
    Ok(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{}:{port}", host.to_ascii_lowercase()) })
}

/// A DNS host name (session domains), lower-cased.
fn hostname(key: &str, v: &str) -> Result<String, ConfigError> {
    let v = v.trim().trim_end_matches('.').to_ascii_lowercase();
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if !ok {
        return Err(ConfigError::invalid(key, format!("`{v}` is not a DNS name such as sessions.example.com")));
    }
    Ok(v)
}

/// The host of an `http(s)://` URL (no port, lower-case, IPv6 without brackets).
pub fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match hostport.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => hostport.split(':').next()?,
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

/// A session domain must not be the console's own host: session apps would then share the
/// console's origin (its cookies, its CSRF protection) and `/proxy/` would be served beside `/api/`.
pub fn check_session_domain_apart(domain: &str, public_url: &str) -> Result<(), String> {
    match url_host(public_url) {
        Some(h) if h == domain.trim_end_matches('.').to_ascii_lowercase() => Err(format!(
            "`{domain}` is the console's own host (public_url {public_url}); session apps need a domain of their own"
        )),
        _ => Ok(()),
    }
}

/// Exposed for the clusters API, which validates session domains the same way.
pub fn validate_hostname(v: &str) -> Result<String, String> {
    hostname("session_domain", v).map_err(|e| match e {
        ConfigError::Invalid { message, .. } => message,
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn from(text: &str, e: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_toml(Path::new("test.toml"), text, &env(e))
    }

    #[test]
    fn defaults_without_any_config() {
        let c = Config::load(None, &env(&[("GSHARE_CONFIG", "/dev/null")])).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("gshare-data"));
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.public_url, "http://127.0.0.1:8080");
        assert_eq!(c.cluster_kubeconfig_dir, PathBuf::from("gshare-data/clusters"));
        assert_eq!(c.trusted_proxy_hops, 0);
        assert_eq!(c.probe_timeout, Duration::from_secs(10));
    }

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let c = from(
            "data_dir = \"/srv/g\"\nlisten = \"0.0.0.0:9000\"\ntrusted_proxy_hops = 1\nsession_domain = \"s.example.com\"\n",
            &[("GSHARE_LISTEN", "127.0.0.1:9100"), ("GSHARE_TRUSTED_PROXY_HOPS", "2")],
        )
        .unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/srv/g"));
        assert_eq!(c.cluster_kubeconfig_dir, PathBuf::from("/srv/g/clusters"));
        assert_eq!(c.listen.to_string(), "127.0.0.1:9100");
        assert_eq!(c.trusted_proxy_hops, 2);
        assert_eq!(c.session_domain.as_deref(), Some("s.example.com"));
    }

    #[test]
    fn a_session_domain_is_not_the_consoles_host() {
        for url in ["https://GShare.Lab.test", "https://gshare.lab.test:8443/console", "http://u@gshare.lab.test./"] {
            let e = from(&format!("public_url = \"{url}\"\nsession_domain = \"gshare.lab.test\"\n"), &[]);
            let e = e.unwrap_err().to_string();
            assert!(e.starts_with("session_domain") && e.contains("console's own host"), "{url}: {e}");
        }
        let c = from("public_url = \"https://gshare.lab.test\"\nsession_domain = \"s.gshare.lab.test\"\n", &[]);
        assert_eq!(c.unwrap().session_domain.as_deref(), Some("s.gshare.lab.test"));
        assert_eq!(url_host("http://[::1]:8080/x").as_deref(), Some("::1"));
        assert_eq!(url_host("https://h?x").as_deref(), Some("h"));
        assert_eq!(url_host("nothing"), None);
    }

    #[test]
    fn tls_and_sign_in_keys() {
        let e = from("tls_cert = \"/c.pem\"\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("tls_key"), "{e}");
        let e = from("", &[("GSHARE_TLS_KEY", "/k.pem")]).unwrap_err().to_string();
        assert!(e.starts_with("tls_cert"), "{e}");
        let e = from("tls_redirect_listen = \"0.0.0.0:80\"\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("tls_redirect_listen"), "{e}");
        let c = from("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n", &[]).unwrap();
        assert!(c.tls_enabled());
        assert_eq!(c.public_url, "https://127.0.0.1:8080");
        let e = from("", &[("GSHARE_TRUSTED_PROXIES", "10.0.0.0/8, nope")]).unwrap_err().to_string();
        assert!(e.starts_with("GSHARE_TRUSTED_PROXIES") && e.contains("nope"), "{e}");
        let c = from("trusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\"]\n", &[]).unwrap();
        assert_eq!(c.trusted_proxies.len(), 2);
        let e = from("login_max_failures = 0\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("login_max_failures"), "{e}");
        assert_eq!(from("", &[]).unwrap().login_ttl, Duration::from_secs(3600));
    }

    #[test]
    fn unknown_key_is_named() {
        let e = from("listen = \"127.0.0.1:1\"\nlisten_addr = \"x\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("listen_addr"), "{e}");
    }

    #[test]
    fn wrong_type_is_named() {
        let e = from("trusted_proxy_hops = \"two\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("trusted_proxy_hops"), "{e}");
    }

    #[test]
    fn bad_proxy_hops_from_env() {
        for bad in ["-1", "abc", "99"] {
            let e = from("", &[("GSHARE_TRUSTED_PROXY_HOPS", bad)]).unwrap_err().to_string();
            assert!(e.starts_with("GSHARE_TRUSTED_PROXY_HOPS"), "{bad}: {e}");
        }
        let e = from("trusted_proxy_hops = -1\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("trusted_proxy_hops"), "{e}");
    }

    #[test]
    fn unreadable_file_is_named() {
        let e = Config::load(Some(Path::new("/nonexistent/gshare.toml")), &env(&[])).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/gshare.toml"), "{e}");
    }

    #[test]
    fn bad_listen_and_durations() {
        let e = from("", &[("GSHARE_LISTEN", "localhost")]).unwrap_err().to_string();
        assert!(e.starts_with("GSHARE_LISTEN"), "{e}");
        let e = from("probe_timeout = \"forever\"\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("probe_timeout"), "{e}");
        let e = from("probe_timeout = \"0s\"\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("probe_timeout"), "{e}");
    }

    #[test]
    fn bad_private_keys_are_refused_by_name() {
        let e = from("", &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", "not a pem")]).unwrap_err().to_string();
        assert!(e.starts_with("GSHARE_INTERNAL_JWT_PRIVATE_KEY"), "{e}");
        let ec = include_str!("../../tests/testdata/ec-pkcs8.pem");
        let e = from("", &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", ec)]).unwrap_err().to_string();
        assert!(e.contains("RSA"), "{e}");
        let small = include_str!("../../tests/testdata/rsa1024.pem");
        let e = from(&format!("internal_jwt_private_key = \"\"\"\n{small}\"\"\"\n"), &[]).unwrap_err().to_string();
        assert!(e.starts_with("internal_jwt_private_key") && e.contains("1024"), "{e}");
    }

    #[test]
    fn debug_redacts_the_private_key() {
        let key = crate::auth::keys::SigningKey::generate_for_tests();
        let pem = key.private_pem().expose().to_string();
        let c = from("", &[("GSHARE_INTERNAL_JWT_PRIVATE_KEY", &pem)]).unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        let rendered = c.render_redacted();
        assert!(!rendered.contains("PRIVATE KEY"));
        assert!(rendered.contains("internal_jwt_private_key = \"<redacted>\""));
    }

    #[test]
    fn an_unknown_gshare_variable_is_refused_naming_the_closest_setting() {
        let e = from("", &[("GSHARE_LISTNE", "127.0.0.1:9100")]).unwrap_err().to_string();
        assert!(e.starts_with("GSHARE_LISTNE: ") && e.contains("did you mean GSHARE_LISTEN?"), "{e}");
        let e = from("", &[("GSHARE_SNAPSHOT_INTERVALL", "1h")]).unwrap_err().to_string();
        assert!(e.contains("did you mean GSHARE_SNAPSHOT_INTERVAL?"), "{e}");
        let e = Config::for_data_dir(Path::new("d"), &[("GSHARE_TLS_CRT", "/c.pem")]).unwrap_err().to_string();
        assert!(e.contains("did you mean GSHARE_TLS_CERT?"), "{e}");
        // Variables of the CLI, the build and the scripts are not settings, and not refused.
        let not_settings: Vec<(&str, &str)> = NOT_SETTINGS.iter().map(|n| (*n, "x")).collect();
        from("", &not_settings).unwrap();
        // Every setting is known, each by its GSHARE_ name; other variables are not looked at.
        let keys = setting_keys();
        assert!(keys.contains(&"listen") && keys.contains(&"operator_token_renew_percent"), "{keys:?}");
        let rendered = from("", &[]).unwrap().render_redacted();
        for line in rendered.lines() {
            let key = line.split(" = ").next().unwrap();
            assert!(keys.contains(&key), "{key} is rendered but not a setting key");
        }
        from("", &[("GSHARE_CONFIG", "/dev/null"), ("HOME", "/root"), ("gshare_listne", "x")]).unwrap();
    }

    #[test]
    fn store_cache_mb_is_a_bounded_size() {
        let path = Path::new("/etc/gshare/config.toml");
        assert_eq!(Config::from_toml(path, "", &env(&[])).unwrap().store_cache_mb, None, "unset: sized at start");
        assert_eq!(Config::from_toml(path, "store_cache_mb = 32\n", &env(&[])).unwrap().store_cache_mb, Some(32));
        let by_env = Config::from_toml(path, "store_cache_mb = 32\n", &env(&[("GSHARE_STORE_CACHE_MB", "64")]));
        assert_eq!(by_env.unwrap().store_cache_mb, Some(64), "the environment wins");
        for bad in ["store_cache_mb = 0\n", "store_cache_mb = 7\n", "store_cache_mb = 65537\n", "store_cache_mb = -1\n"]
        {
            let e = Config::from_toml(path, bad, &env(&[])).unwrap_err().to_string();
            assert!(e.contains("store_cache_mb") && e.contains("between 8 and 65536"), "{bad}: {e}");
        }
        let e = Config::from_toml(path, "", &env(&[("GSHARE_STORE_CACHE_MB", "lots")])).unwrap_err().to_string();
        assert!(e.contains("GSHARE_STORE_CACHE_MB"), "{e}");
    }

    #[test]
    fn example_config_loads_and_documents_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        // Every key is present but commented out; uncommenting them all must still load.
        let uncommented: String = text
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| {
                        r.split_once(" = ").is_some_and(|(k, _)| {
                            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        })
                    })
                    .unwrap_or(l)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::from_toml(&path, &text, &env(&[])).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        Config::from_toml(&path, &uncommented, &env(&[])).unwrap();
        let rendered = Config::from_toml(&path, &uncommented, &env(&[])).unwrap().render_redacted();
        for line in rendered.lines() {
            let key = line.split(" = ").next().unwrap();
            assert!(text.contains(&format!("# {key} = ")), "config.example.toml does not document `{key}`");
            let env_name = format!("GSHARE_{}", key.to_ascii_uppercase());
            assert!(text.contains(&env_name), "config.example.toml does not name {env_name}");
        }
    }
}
