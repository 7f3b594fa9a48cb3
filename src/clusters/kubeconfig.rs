//! Kubeconfigs: decoding and checking what an admin submits, writing it to
//! `<kubeconfig_dir>/<id>/kubeconfig` (0600 in a 0700 directory, atomically), and reading it back
//! into a `kube::Client`. Kubeconfig content never reaches the database, logs or API answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};

use super::ClusterId;

/// Largest kubeconfig accepted (decoded).
pub const MAX_KUBECONFIG_BYTES: usize = 512 * 1024;

/// Why a kubeconfig was refused, with what to do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{cause}")]
pub struct KubeconfigProblem {
    pub cause: String,
    pub hint: String,
}

fn problem(cause: impl Into<String>, hint: impl Into<String>) -> KubeconfigProblem {
    KubeconfigProblem { cause: cause.into(), hint: hint.into() }
}

/// A parsed kubeconfig with the facts the probe needs.
#[derive(Clone)]
pub struct CheckedKubeconfig {
    pub config: Kubeconfig,
    /// The YAML text as submitted (what gets written to disk).
    pub text: String,
    pub context: String,
    pub server: String,
    /// `token`, `client-certificate`, `basic`, `exec:<cmd>`, `auth-provider:<name>`, `none`.
    pub auth_kind: String,
    pub hash: String,
    /// The cluster entry pins its own CA (`certificate-authority[-data]`) and does not skip TLS
    /// verification: only then may its credentials go to an address other than `server`.
    pub pins_own_ca: bool,
}

impl std::fmt::Debug for CheckedKubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedKubeconfig")
            .field("context", &self.context)
            .field("server", &self.server)
            .field("auth_kind", &self.auth_kind)
            .finish_non_exhaustive()
    }
}

/// Decodes `kubeconfig_b64` (standard or URL-safe alphabet, padding and whitespace tolerated).
pub fn decode_b64(b64: &str) -> Result<String, KubeconfigProblem> {
    let compact: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if compact.is_empty() {
        return Err(problem(
            "kubeconfig_b64 is empty",
            "send the kubeconfig file base64-encoded: base64 -w0 <kubeconfig",
        ));
    }
    let trimmed = compact.trim_end_matches('=');
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(trimmed))
        .map_err(|e| {
            problem(format!("kubeconfig_b64 is not base64 ({e})"), "encode the file with base64 -w0 <kubeconfig")
        })?;
    if bytes.len() > MAX_KUBECONFIG_BYTES {
        return Err(problem(
            format!("the kubeconfig is larger than {MAX_KUBECONFIG_BYTES} bytes"),
            "send a kubeconfig with only the one cluster, user and context needed",
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| problem("the decoded kubeconfig is not UTF-8 text", "send the kubeconfig YAML file itself"))
}

/// Where a kubeconfig came from: the API must be self-contained; files on disk may refer to
/// paths relative to themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Submitted,
    File,
}

/// Parses and checks a kubeconfig: YAML, a current context that resolves, and an auth method we
/// support without running commands (unless `exec_allow` names them).
pub fn check(text: &str, origin: Origin, exec_allow: &[String]) -> Result<CheckedKubeconfig, KubeconfigProblem> {
    if text.trim().is_empty() {
        return Err(problem("the kubeconfig is empty", "send the kubeconfig YAML file itself"));
    }
    // Before the full parse: an alias bomb (anchors referenced many times over) costs memory in
    // proportion to its expansion, not its size; kubeconfigs written by kubectl never use them.
    if let Some(line) = anchor_or_alias_line(text) {
        return Err(problem(
            format!("the kubeconfig uses YAML anchors or aliases (line {line}), which gshare refuses"),
            "write each value out in full, as kubectl config view --minify --flatten --raw does",
        ));
    }
    let config = Kubeconfig::from_yaml(text).map_err(|e| {
        problem(
            format!("the kubeconfig is not valid kubeconfig YAML: {}", first_line(&e.to_string())),
            "check the file with kubectl --kubeconfig <file> config view",
        )
    })?;
    let context = match &config.current_context {
        Some(c) if !c.is_empty() => c.clone(),
        _ if config.contexts.len() == 1 => config.contexts[0].name.clone(),
        _ if config.contexts.is_empty() => {
            return Err(problem(
                "the kubeconfig has no contexts",
                "a kubeconfig needs a cluster, a user and a context joining them",
            ));
        }
        _ => {
            return Err(problem(
                "the kubeconfig has several contexts and no current-context",
                "set one with kubectl --kubeconfig <file> config use-context <name>",
            ));
        }
    };
    let ctx = config.contexts.iter().find(|c| c.name == context).and_then(|c| c.context.clone()).ok_or_else(|| {
        problem(format!("current-context `{context}` is not defined"), "fix current-context or add the context")
    })?;
    let cluster =
        config.clusters.iter().find(|c| c.name == ctx.cluster).and_then(|c| c.cluster.clone()).ok_or_else(|| {
            problem(
                format!("context `{context}` names cluster `{}`, which is not defined", ctx.cluster),
                "add the cluster entry",
            )
        })?;
    let server = cluster.server.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
        problem(format!("cluster `{}` has no server address", ctx.cluster), "set clusters[].cluster.server")
    })?;
    parse_server(&server)?;
    let user = match &ctx.user {
        Some(u) => {
            config.auth_infos.iter().find(|a| &a.name == u).and_then(|a| a.auth_info.clone()).ok_or_else(|| {
                problem(format!("context `{context}` names user `{u}`, which is not defined"), "add the user entry")
            })?
        }
        None => Default::default(),
    };
    let auth_kind = if let Some(exec) = &user.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let base = Path::new(&cmd).file_name().and_then(|n| n.to_str()).unwrap_or(&cmd).to_string();
        if !exec_allow.iter().any(|a| a == &cmd || a == &base) {
            return Err(problem(
                format!("the user runs the command `{base}` for credentials (exec), which gshare refuses"),
                "use a token or client certificate (e.g. a ServiceAccount token), or allow the command in kubeconfig_exec_allow",
            ));
        }
        format!("exec:{base}")
    } else if let Some(ap) = &user.auth_provider {
        if !exec_allow.iter().any(|a| a == &ap.name) {
            return Err(problem(
                format!("the user uses the auth-provider `{}`, which gshare refuses", ap.name),
                "use a token or client certificate, or allow the provider in kubeconfig_exec_allow",
            ));
        }
        format!("auth-provider:{}", ap.name)
    } else if user.token.is_some() || user.token_file.is_some() {
        "token".into()
    } else if user.client_certificate_data.is_some() || user.client_certificate.is_some() {
        if user.client_key_data.is_none() && user.client_key.is_none() {
            return Err(problem("the user has a client certificate but no client key", "add client-key-data"));
        }
        "client-certificate".into()
    } else if user.username.is_some() && user.password.is_some() {
        "basic".into()
    } else {
        return Err(problem(
            "the user has no credentials (no token, client certificate or password)",
            "add a ServiceAccount token or client-certificate-data/client-key-data",
        ));
    };
    if origin == Origin::Submitted {
        let file_refs = [
            ("certificate-authority", cluster.certificate_authority.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
            ("tokenFile", user.token_file.is_some()),
        ];
        if let Some((field, _)) = file_refs.iter().find(|(_, present)| *present) {
            return Err(problem(
                format!("the kubeconfig refers to a file ({field}) on this server instead of embedding it"),
                "embed the data: kubectl config view --minify --flatten --raw > kubeconfig",
            ));
        }
    }
    let hash = content_hash(text.as_bytes());
    let has_ca = cluster.certificate_authority_data.as_deref().is_some_and(|d| !d.trim().is_empty())
        || cluster.certificate_authority.as_deref().is_some_and(|p| !p.is_empty());
    let pins_own_ca = has_ca && cluster.insecure_skip_tls_verify != Some(true);
    Ok(CheckedKubeconfig { config, text: text.to_string(), context, server, auth_kind, hash, pins_own_ca })
}

/// May the kubeconfig's credentials be sent to `address`? Its own `server`: yes. Any other
/// address: only over TLS verified against the kubeconfig's own CA (no `http://`, no
/// `insecure-skip-tls-verify`, no system roots), so a listener that cannot prove itself with that
/// CA never sees the token or client certificate. Otherwise a new kubeconfig must come with it.
pub fn may_send_credentials_to(kc: &CheckedKubeconfig, address: &str) -> Result<(), KubeconfigProblem> {
    let address = address.trim_end_matches('/');
    if address.eq_ignore_ascii_case(kc.server.trim_end_matches('/')) {
        return Ok(());
    }
    let target = parse_server(address)?;
    let hint = "send the cluster's kubeconfig (kubeconfig_b64) with the new address, or use an https:// address whose certificate the kubeconfig's certificate-authority-data verifies";
    if target.scheme != "https" {
        return Err(problem(format!("the stored credentials are not sent to `{address}` over plain HTTP"), hint));
    }
    if !kc.pins_own_ca {
        return Err(problem(
            format!(
                "the stored credentials go to another address (`{address}`) only over TLS verified by the kubeconfig's own CA, and this kubeconfig has no certificate-authority-data or skips verification"
            ),
            hint,
        ));
    }
    Ok(())
}

/// The first line (1-based) holding a YAML anchor (`&name`) or alias (`*name`) outside quoted
/// scalars and comments; `None` when there is none.
pub fn anchor_or_alias_line(text: &str) -> Option<usize> {
    for (n, line) in text.lines().enumerate() {
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if (c == '"' || c == '\'') && token_start(prev) => quote = Some(c),
                None if c == '#' && prev.is_whitespace() => break,
                None if (c == '&' || c == '*')
                    && token_start(prev)
                    && chars.peek().is_some_and(|next| !next.is_whitespace()) =>
                {
                    return Some(n + 1);
                }
                None => {}
            }
            prev = c;
        }
    }
    None
}

/// Where a YAML node (and so an anchor, alias or quoted scalar) can begin.
fn token_start(prev: char) -> bool {
    prev.is_whitespace() || matches!(prev, '[' | '{' | ',' | ':' | '-')
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").chars().take(300).collect()
}

/// SHA-256 of kubeconfig bytes, hex: detects real changes on disk.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Host and port of an API server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddr {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl ServerAddr {
    /// Loopback names an admin copies from a kubeadm `admin.conf` by mistake.
    pub fn is_loopback(&self) -> bool {
        let h = self.host.trim_matches(|c| c == '[' || c == ']');
        h.eq_ignore_ascii_case("localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

pub fn parse_server(server: &str) -> Result<ServerAddr, KubeconfigProblem> {
    let bad = || problem(format!("`{server}` is not an API server URL"), "use https://<host>:<port>");
    let uri: axum::http::Uri = server.parse().map_err(|_| bad())?;
    let scheme = uri.scheme_str().ok_or_else(bad)?.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(bad());
    }
    let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(bad)?.to_string();
    let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
    Ok(ServerAddr { scheme, host, port })
}

/// Builds a client from a checked kubeconfig. `api_server` overrides the kubeconfig's server.
pub async fn client_for(
    kc: &CheckedKubeconfig,
    api_server: Option<&str>,
    timeout: Duration,
) -> Result<kube::Client, KubeconfigProblem> {
    let mut config = kube::Config::from_custom_kubeconfig(
        kc.config.clone(),
        &KubeConfigOptions { context: Some(kc.context.clone()), ..Default::default() },
    )
    .await
    .map_err(|e| {
        problem(
            format!("the kubeconfig cannot be used: {}", first_line(&e.to_string())),
            "check certificate-authority-data and the user's credentials",
        )
    })?;
    if let Some(server) = api_server {
        config.cluster_url = server
            .parse()
            .map_err(|_| problem(format!("`{server}` is not an API server URL"), "use https://<host>:<port>"))?;
    }
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    kube::Client::try_from(config).map_err(|e| {
        problem(
            format!("cannot build a client: {}", first_line(&e.to_string())),
            "check the TLS settings of the kubeconfig",
        )
    })
}

/// The directory holding one cluster's kubeconfig.
pub fn cluster_dir(root: &Path, id: &ClusterId) -> PathBuf {
    root.join(id.as_str())
}

pub fn kubeconfig_path(root: &Path, id: &ClusterId) -> PathBuf {
    cluster_dir(root, id).join("kubeconfig")
}

/// Writes `<root>/<id>/kubeconfig` atomically with private permissions.
pub fn write_file(root: &Path, id: &ClusterId, text: &str) -> std::io::Result<PathBuf> {
    crate::auth::keys::create_private_dir(root).map_err(std::io::Error::other)?;
    let dir = cluster_dir(root, id);
    crate::auth::keys::create_private_dir(&dir).map_err(std::io::Error::other)?;
    let path = dir.join("kubeconfig");
    crate::auth::keys::write_private_file(&path, text.as_bytes())?;
    Ok(path)
}

/// Prefix of a registration's staging directory, `<root>/.pending-<id>/`: the kubeconfig is written
/// there before the cluster's row commits and renamed to `<id>/` after, so a crash (kill -9) in
/// between never leaves a `<id>/` directory that no cluster claims. The watcher ignores dot-names.
pub const STAGING_PREFIX: &str = ".pending-";

/// A registration's kubeconfig, written but not yet published under `<root>/<id>/`.
#[derive(Debug)]
pub struct Staged {
    root: PathBuf,
    id: ClusterId,
}

/// Writes `<root>/.pending-<id>/kubeconfig` (private, atomic): step one of a registration.
pub fn stage_file(root: &Path, id: &ClusterId, text: &str) -> std::io::Result<Staged> {
    crate::auth::keys::create_private_dir(root).map_err(std::io::Error::other)?;
    let dir = staging_dir(root, id);
    crate::auth::keys::create_private_dir(&dir).map_err(std::io::Error::other)?;
    crate::auth::keys::write_private_file(&dir.join("kubeconfig"), text.as_bytes())?;
    Ok(Staged { root: root.to_path_buf(), id: id.clone() })
}

fn staging_dir(root: &Path, id: &ClusterId) -> PathBuf {
    root.join(format!("{STAGING_PREFIX}{id}"))
}

impl Staged {
    /// Step two, once the cluster's row has committed: `.pending-<id>/` becomes `<id>/`.
    pub fn publish(self) -> std::io::Result<PathBuf> {
        publish_staged(&self.root, &self.id)?;
        Ok(kubeconfig_path(&self.root, &self.id))
    }

    /// The registration failed before its commit: the staged directory goes.
    pub fn discard(self) -> std::io::Result<()> {
        remove_tree(&staging_dir(&self.root, &self.id))
    }
}

fn publish_staged(root: &Path, id: &ClusterId) -> std::io::Result<()> {
    std::fs::rename(staging_dir(root, id), cluster_dir(root, id))?;
    std::fs::File::open(root)?.sync_all()
}

fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What [`recover_staged`] did with the staging directories a crash left.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Registrations whose row had committed: their directory was published as `<id>/`.
    pub published: Vec<String>,
    /// Registrations that never committed: their directory was removed.
    pub removed: Vec<String>,
}

/// At start, before the watcher: finishes or removes every `.pending-<id>/` left by a crash.
/// `committed(id)` says whether a live cluster row claims the id.
pub fn recover_staged(root: &Path, committed: impl Fn(&str) -> bool) -> std::io::Result<Recovered> {
    let mut done = Recovered::default();
    let entries = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(STAGING_PREFIX) else { continue };
        match ClusterId::parse(rest) {
            Ok(id) if committed(id.as_str()) && !cluster_dir(root, &id).exists() => {
                publish_staged(root, &id)?;
                done.published.push(id.to_string());
            }
            _ => {
                remove_tree(&entry.path())?;
                done.removed.push(name);
            }
        }
    }
    Ok(done)
}

/// Removes a cluster's kubeconfig directory (unregister, or cleanup after a failed registration).
pub fn remove_dir(root: &Path, id: &ClusterId) -> std::io::Result<()> {
    remove_tree(&cluster_dir(root, id))
}

/// Reads `<root>/<id>/kubeconfig`, refusing a symlink chain that leaves `root`.
pub fn read_file(root: &Path, id: &ClusterId) -> Result<Option<(String, PathBuf)>, KubeconfigProblem> {
    let path = kubeconfig_path(root, id);
    let real = match std::fs::canonicalize(&path) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(problem(format!("cannot read {}: {e}", path.display()), "check the file's permissions")),
    };
    let root_real = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if !real.starts_with(&root_real) {
        return Err(problem(
            format!("{} points outside {} (to {})", path.display(), root.display(), real.display()),
            "place the kubeconfig itself in the directory; symlinks must stay inside it",
        ));
    }
    let meta = std::fs::metadata(&real).map_err(|e| problem(format!("cannot read {}: {e}", path.display()), ""))?;
    if meta.len() as usize > MAX_KUBECONFIG_BYTES {
        return Err(problem(format!("{} is larger than {MAX_KUBECONFIG_BYTES} bytes", path.display()), ""));
    }
    let text = std::fs::read_to_string(&real).map_err(|e| {
        problem(format!("cannot read {}: {e}", path.display()), "the file must be UTF-8 kubeconfig YAML")
    })?;
    Ok(Some((text, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: AAAA\nusers:\n- name: u\n  user:\n    token: abc\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\ncurrent-context: ctx\n";

    #[test]
    fn good_kubeconfig_passes() {
        let kc = check(GOOD, Origin::Submitted, &[]).unwrap();
        assert_eq!(kc.context, "ctx");
        assert_eq!(kc.server, "https://10.0.0.1:6443");
        assert_eq!(kc.auth_kind, "token");
        assert!(!format!("{kc:?}").contains("abc"));
    }

    #[test]
    fn base64_variants() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        assert_eq!(decode_b64(&STANDARD.encode(GOOD)).unwrap(), GOOD);
        assert_eq!(decode_b64(&URL_SAFE_NO_PAD.encode(GOOD)).unwrap(), GOOD);
        let wrapped: String =
            STANDARD.encode(GOOD).as_bytes().chunks(76).map(|c| format!("{}\n", String::from_utf8_lossy(c))).collect();
        assert_eq!(decode_b64(&wrapped).unwrap(), GOOD);
        assert!(decode_b64("!!!not base64!!!").is_err());
        assert!(decode_b64("").is_err());
        assert!(decode_b64(&STANDARD.encode([0xff, 0xfe, 0x00])).is_err());
    }

    #[test]
    fn refusals() {
        assert!(check("", Origin::Submitted, &[]).unwrap_err().cause.contains("empty"));
        assert!(check(": : not yaml [", Origin::Submitted, &[]).unwrap_err().cause.contains("YAML"));
        let no_ctx = "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n";
        assert!(check(no_ctx, Origin::Submitted, &[]).unwrap_err().cause.contains("no contexts"));
        let exec = GOOD.replace("    token: abc\n", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /usr/bin/aws\n      args: [eks, get-token]\n");
        let e = check(&exec, Origin::Submitted, &[]).unwrap_err();
        assert!(e.cause.contains("exec") && e.cause.contains("aws"), "{e}");
        assert_eq!(check(&exec, Origin::Submitted, &["aws".into()]).unwrap().auth_kind, "exec:aws");
        let ap = GOOD.replace("    token: abc\n", "    auth-provider:\n      name: gcp\n");
        assert!(check(&ap, Origin::Submitted, &[]).unwrap_err().cause.contains("auth-provider"));
        let file_ref = GOOD.replace("certificate-authority-data: AAAA", "certificate-authority: /etc/ssl/ca.pem");
        assert!(check(&file_ref, Origin::Submitted, &[]).unwrap_err().cause.contains("certificate-authority"));
        assert!(check(&file_ref, Origin::File, &[]).is_ok());
        let no_creds = GOOD.replace("    token: abc\n", "    {}\n");
        assert!(check(&no_creds, Origin::Submitted, &[]).is_err());
    }

    #[test]
    fn stored_credentials_go_elsewhere_only_under_the_kubeconfigs_own_ca() {
        let kc = check(GOOD, Origin::Submitted, &[]).unwrap();
        assert!(kc.pins_own_ca);
        may_send_credentials_to(&kc, "https://10.0.0.1:6443/").unwrap();
        may_send_credentials_to(&kc, "https://10.0.0.2:6443").unwrap();
        assert!(may_send_credentials_to(&kc, "http://10.0.0.2:6443").unwrap_err().cause.contains("plain HTTP"));
        for variant in [
            GOOD.replace("    certificate-authority-data: AAAA\n", ""),
            GOOD.replace(
                "certificate-authority-data: AAAA",
                "certificate-authority-data: AAAA\n    insecure-skip-tls-verify: true",
            ),
        ] {
            let kc = check(&variant, Origin::Submitted, &[]).unwrap();
            assert!(!kc.pins_own_ca);
            may_send_credentials_to(&kc, "https://10.0.0.1:6443").unwrap();
            assert!(may_send_credentials_to(&kc, "https://10.0.0.2:6443").unwrap_err().cause.contains("own CA"));
        }
    }

    #[test]
    fn alias_bombs_are_refused_before_parsing() {
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
        assert_eq!(anchor_or_alias_line(bomb), Some(1));
        let e = check(&format!("{GOOD}{bomb}"), Origin::Submitted, &[]).unwrap_err();
        assert!(e.cause.contains("anchors or aliases"), "{e}");
        assert_eq!(anchor_or_alias_line("users:\n- name: u\n  user: *u\n"), Some(3));
        // Not anchors: inside quotes, comments, URLs, words.
        for fine in [
            GOOD,
            "password: \"a &b *c\"\n",
            "password: 'x *y'\n",
            "server: https://*.example.com # *wild &card\n",
            "password: a&b*c\n",
        ] {
            assert_eq!(anchor_or_alias_line(fine), None, "{fine}");
        }
    }

    #[test]
    fn loopback_detection() {
        for s in ["https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443"] {
            assert!(parse_server(s).unwrap().is_loopback(), "{s}");
        }
        assert!(!parse_server("https://10.1.2.3:6443").unwrap().is_loopback());
        assert_eq!(parse_server("https://k8s.example.com").unwrap().port, 443);
        assert!(parse_server("ftp://x").is_err());
    }

    #[test]
    fn a_crash_before_the_commit_leaves_no_claimable_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("clusters");
        let (lost, committed) = (ClusterId::mint(), ClusterId::mint());
        // Two registrations killed after writing their kubeconfig: one before its row committed,
        // one after. Neither looks like a cluster directory yet.
        let _ = stage_file(&root, &lost, GOOD).unwrap();
        let _ = stage_file(&root, &committed, GOOD).unwrap();
        assert!(!cluster_dir(&root, &lost).exists() && !cluster_dir(&root, &committed).exists());
        let done = recover_staged(&root, |id| id == committed.as_str()).unwrap();
        assert_eq!(done.published, [committed.to_string()]);
        assert_eq!(done.removed, [format!("{STAGING_PREFIX}{lost}")]);
        let left: Vec<String> =
            std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, [committed.to_string()]);
        assert_eq!(read_file(&root, &committed).unwrap().unwrap().0, GOOD);
        // The normal path: stage, commit, publish.
        let id = ClusterId::mint();
        let path = stage_file(&root, &id, GOOD).unwrap().publish().unwrap();
        assert_eq!(path, kubeconfig_path(&root, &id));
        assert!(!root.join(format!("{STAGING_PREFIX}{id}")).exists());
    }

    #[test]
    fn files_are_private_and_symlinks_stay_inside() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("clusters");
        let id = ClusterId::mint();
        let path = write_file(&root, &id, GOOD).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(read_file(&root, &id).unwrap().unwrap().0, GOOD);
        // A symlink out of the directory is refused.
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, GOOD).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        assert!(read_file(&root, &id).unwrap_err().cause.contains("outside"));
        remove_dir(&root, &id).unwrap();
        assert!(read_file(&root, &id).unwrap().is_none());
    }
}
