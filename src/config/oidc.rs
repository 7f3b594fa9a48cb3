//! The `[oidc]` table: signing lab users in with an OpenID Connect issuer (issue 26; Keycloak,
//! Dex, Authentik… on the lab's network). Checked here, once; the client secret is read from its
//! own file (0600 or stricter) and kept as a [`Secret`]. The flow itself is `auth::directory::oidc`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::directory::{GroupMapping, Unmapped, group_name_ok, read_secret_file, render_mapping};
use super::{ConfigError, Secret};

/// What the file says (unknown keys rejected).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OidcFile {
    issuer: Option<String>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    redirect_url: Option<String>,
    scopes: Option<Vec<String>>,
    username_claim: Option<String>,
    groups_claim: Option<String>,
    admin_groups: Option<Vec<String>>,
    groups: Option<Vec<GroupMapFile>>,
    unmapped: Option<String>,
    ca_file: Option<PathBuf>,
    timeout: Option<String>,
    signing_algs: Option<Vec<String>>,
    button_label: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupMapFile {
    directory: String,
    group: String,
}

/// ID token signature algorithms a lab may allow: asymmetric only. `HS*` (a MAC keyed by the
/// client secret, or by a public key an attacker knows) and `none` are never accepted.
pub const SIGNING_ALGS: &[&str] = &["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

/// The checked `[oidc]` settings.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The issuer URL exactly as the provider names itself (`iss`), without a trailing slash.
    pub issuer: String,
    pub client_id: String,
    /// A confidential client's secret (`client_secret_basic`); unset: a public client (PKCE only).
    pub client_secret: Option<Secret>,
    /// Where the provider sends the browser back (unset: `public_url` + `/api/v1/auth/oidc/callback`).
    pub redirect_url: Option<String>,
    /// Always starts with `openid`.
    pub scopes: Vec<String>,
    /// The ID token claim that names the account (`preferred_username`).
    pub username_claim: String,
    /// The ID token claim listing the user's groups (`groups`; a list of strings).
    pub groups_claim: String,
    pub admin_groups: Vec<String>,
    pub groups: Vec<GroupMapping>,
    pub unmapped: Unmapped,
    /// PEM certificates trusted for the issuer (unset: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// Each request to the issuer (discovery, keys, token) at most this long.
    pub timeout: Duration,
    pub signing_algs: Vec<String>,
    /// What the sign-in page's button says.
    pub button_label: String,
}

impl OidcSettings {
    /// The redirect URL this server registers with the issuer.
    pub fn redirect_url_for(&self, public_url: &str) -> String {
        self.redirect_url
            .clone()
            .unwrap_or_else(|| format!("{}/api/v1/auth/oidc/callback", public_url.trim_end_matches('/')))
    }
}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(format!("oidc.{key}"), message)
}

/// `https://…`, or `http://` to a loopback host only (a provider on this machine); no query,
/// fragment or credentials.
fn url(key: &str, v: &str) -> Result<String, ConfigError> {
    let v = v.trim().trim_end_matches('/').to_string();
    let (scheme, rest) = v.split_once("://").unwrap_or(("", ""));
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    let host =
        if rest.starts_with('[') { rest.split(']').next().unwrap_or_default().trim_start_matches('[') } else { host };
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let ok = !host.is_empty()
        && !rest.contains(['?', '#', '@', ' '])
        && (scheme == "https" || (scheme == "http" && loopback));
    if !ok {
        return Err(bad(
            key,
            format!("`{v}` is not an https:// URL (http:// is taken for a provider on this machine only)"),
        ));
    }
    Ok(v)
}

fn claim(key: &str, v: &str) -> Result<String, ConfigError> {
    let v = v.trim();
    if v.is_empty() || v.len() > 128 || v.chars().any(|c| c.is_control() || c == ' ') {
        return Err(bad(key, format!("`{v}` is not a claim name such as preferred_username")));
    }
    Ok(v.to_string())
}

pub(super) fn build(f: OidcFile) -> Result<OidcSettings, ConfigError> {
    let issuer = url("issuer", f.issuer.as_deref().unwrap_or_default())?;
    let client_id = f.client_id.map(|c| c.trim().to_string()).unwrap_or_default();
    if client_id.is_empty() || client_id.chars().any(char::is_control) {
        return Err(bad("client_id", "set the client id this server is registered with at the issuer"));
    }
    let client_secret = f.client_secret_file.map(|p| read_secret_file_as("client_secret_file", &p)).transpose()?;
    let redirect_url = f.redirect_url.map(|r| url("redirect_url", &r)).transpose()?;
    let mut scopes: Vec<String> = f.scopes.unwrap_or_else(|| vec!["openid".into(), "profile".into(), "email".into()]);
    for s in &scopes {
        if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\') {
            return Err(bad("scopes", format!("`{s}` is not a scope")));
        }
    }
    if !scopes.iter().any(|s| s == "openid") {
        scopes.insert(0, "openid".into());
    }
    let username_claim = claim("username_claim", f.username_claim.as_deref().unwrap_or("preferred_username"))?;
    let groups_claim = claim("groups_claim", f.groups_claim.as_deref().unwrap_or("groups"))?;
    let admin_groups: Vec<String> =
        f.admin_groups.unwrap_or_default().into_iter().map(|g| g.trim().to_string()).collect();
    if admin_groups.iter().any(String::is_empty) {
        return Err(bad("admin_groups", "a group name is empty"));
    }
    let mut groups = Vec::new();
    for (i, g) in f.groups.unwrap_or_default().into_iter().enumerate() {
        if g.directory.trim().is_empty() {
            return Err(bad(&format!("groups[{i}].directory"), "an issuer's group name is empty"));
        }
        if !group_name_ok(&g.group) {
            return Err(bad(
                &format!("groups[{i}].group"),
                format!("`{}` is not a group name (1-64 of A-Z a-z 0-9 - _ . @)", g.group),
            ));
        }
        groups.push(GroupMapping { directory: g.directory.trim().to_string(), group: g.group });
    }
    let unmapped = match f.unmapped.as_deref() {
        None | Some("refuse") => Unmapped::Refuse,
        Some("member") => Unmapped::Member,
        Some(other) => return Err(bad("unmapped", format!("`{other}` is neither `refuse` nor `member`"))),
    };
    if let Some(ca) = &f.ca_file {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| bad("ca_file", format!("{}: {e}", ca.display())))?;
        if certs.is_empty() {
            return Err(bad("ca_file", format!("{}: no PEM certificate in it", ca.display())));
        }
    }
    let timeout = match f.timeout {
        Some(t) => humantime::parse_duration(t.trim())
            .map_err(|e| bad("timeout", format!("`{t}` is not a duration like 5s: {e}")))?,
        None => Duration::from_secs(5),
    };
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&timeout) {
        return Err(bad("timeout", "must be between 100ms and 60s"));
    }
    let signing_algs = f.signing_algs.unwrap_or_else(|| vec!["RS256".into()]);
    if signing_algs.is_empty() {
        return Err(bad("signing_algs", format!("name at least one of {}", SIGNING_ALGS.join(", "))));
    }
    for a in &signing_algs {
        if !SIGNING_ALGS.contains(&a.as_str()) {
            return Err(bad(
                "signing_algs",
                format!("`{a}` is not allowed: one of {} (never none or HS*)", SIGNING_ALGS.join(", ")),
            ));
        }
    }
    let button_label = f.button_label.map(|b| b.trim().to_string()).unwrap_or_else(|| "Single sign-on".into());
    if button_label.is_empty() || button_label.chars().count() > 64 || button_label.chars().any(char::is_control) {
        return Err(bad("button_label", "1-64 printable characters"));
    }
    Ok(OidcSettings {
        issuer,
        client_id,
        client_secret,
        redirect_url,
        scopes,
        username_claim,
        groups_claim,
        admin_groups,
        groups,
        unmapped,
        ca_file: f.ca_file,
        timeout,
        signing_algs,
        button_label,
    })
}

/// The LDAP table's secret-file rule (0600 or 0400), its errors named under `oidc.`.
fn read_secret_file_as(key: &str, path: &std::path::Path) -> Result<Secret, ConfigError> {
    read_secret_file(key, path).map_err(|e| match e {
        ConfigError::Invalid { key: k, message } => {
            ConfigError::Invalid { key: k.replacen("ldap.", "oidc.", 1), message }
        }
        other => other,
    })
}

/// The table as `config check` prints it (the client secret redacted).
pub(super) fn render(s: &OidcSettings) -> toml::Table {
    let mut t = toml::Table::new();
    let v = |x: &str| toml::Value::String(x.to_string());
    t.insert("issuer".into(), v(&s.issuer));
    t.insert("client_id".into(), v(&s.client_id));
    if s.client_secret.is_some() {
        t.insert("client_secret_file".into(), v("<redacted>"));
    }
    t.insert("redirect_url".into(), v(s.redirect_url.as_deref().unwrap_or("")));
    t.insert("scopes".into(), toml::Value::Array(s.scopes.iter().map(|x| v(x)).collect()));
    t.insert("username_claim".into(), v(&s.username_claim));
    t.insert("groups_claim".into(), v(&s.groups_claim));
    render_mapping(&mut t, &s.admin_groups, &s.groups, s.unmapped);
    t.insert("ca_file".into(), v(&s.ca_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()));
    t.insert("timeout".into(), v(&humantime::format_duration(s.timeout).to_string()));
    t.insert("signing_algs".into(), toml::Value::Array(s.signing_algs.iter().map(|x| v(x)).collect()));
    t.insert("button_label".into(), v(&s.button_label));
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use crate::config::Config;

    fn load(dir: &std::path::Path, table: &str) -> Result<Config, String> {
        Config::from_toml(&dir.join("c.toml"), &format!("[oidc]\n{table}"), &BTreeMap::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_client_secret_is_read_from_its_file_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("secret");
        std::fs::write(&f, "s3cret-client\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = load(
            dir.path(),
            &format!(
                "issuer = \"https://sso.lab.example/realms/lab/\"\nclient_id = \"gshare\"\nclient_secret_file = \"{}\"\nadmin_groups = [\"gpu-admins\"]\ngroups = [{{ directory = \"ml-lab\", group = \"ml\" }}]\n",
                f.display()
            ),
        )
        .unwrap();
        let o = c.oidc.as_ref().unwrap();
        assert_eq!(o.issuer, "https://sso.lab.example/realms/lab");
        assert_eq!(o.client_secret.as_ref().unwrap().expose(), "s3cret-client");
        assert_eq!(o.scopes, ["openid", "profile", "email"]);
        assert_eq!(o.signing_algs, ["RS256"]);
        assert_eq!(o.redirect_url_for("https://gpu.lab/"), "https://gpu.lab/api/v1/auth/oidc/callback");
        assert!(!format!("{c:?}").contains("s3cret"));
        let rendered = c.render_redacted();
        assert!(rendered.contains("[oidc]") && !rendered.contains("s3cret"), "{rendered}");
        assert!(rendered.contains("client_secret_file = \"<redacted>\""), "{rendered}");
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::write(&open, "x\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let ok = "issuer = \"https://sso.lab\"\nclient_id = \"g\"\n";
        let cases = [
            ("client_id = \"g\"".to_string(), "oidc.issuer"),
            ("issuer = \"http://sso.lab\"\nclient_id = \"g\"".to_string(), "oidc.issuer"),
            ("issuer = \"https://sso.lab?x=1\"\nclient_id = \"g\"".to_string(), "oidc.issuer"),
            ("issuer = \"https://sso.lab\"".to_string(), "oidc.client_id"),
            (format!("{ok}signing_algs = [\"HS256\"]"), "oidc.signing_algs"),
            (format!("{ok}signing_algs = [\"none\"]"), "oidc.signing_algs"),
            (format!("{ok}signing_algs = []"), "oidc.signing_algs"),
            (format!("{ok}timeout = \"2h\""), "oidc.timeout"),
            (format!("{ok}unmapped = \"maybe\""), "oidc.unmapped"),
            (format!("{ok}groups = [{{ directory = \"a\", group = \"no spaces\" }}]"), "oidc.groups[0].group"),
            (format!("{ok}ca_file = \"/nonexistent/ca.pem\""), "oidc.ca_file"),
            (format!("{ok}client_secret_file = \"{}\"", open.display()), "oidc.client_secret_file"),
            (format!("{ok}redirect_url = \"ftp://x\""), "oidc.redirect_url"),
            (format!("{ok}username_claim = \"\""), "oidc.username_claim"),
            (format!("{ok}surprise = 1"), "surprise"),
        ];
        for (table, key) in &cases {
            let e = load(dir.path(), table).unwrap_err();
            assert!(e.contains(key), "{table}: {e}");
        }
        // A provider on this machine may be plain http.
        let c = load(dir.path(), "issuer = \"http://127.0.0.1:9000\"\nclient_id = \"g\"").unwrap();
        assert_eq!(c.oidc.unwrap().issuer, "http://127.0.0.1:9000");
    }

    #[test]
    fn no_variable_sets_the_table() {
        let e = Config::from_toml(
            std::path::Path::new("c.toml"),
            "",
            &BTreeMap::from([("GSHARE_OIDC".to_string(), "x".to_string())]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("GSHARE_OIDC") && e.contains("no such setting"), "{e}");
    }
}
