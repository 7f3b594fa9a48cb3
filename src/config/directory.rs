//! The `[ldap]` table: signing lab users in with the lab's directory (issue 26). Checked here,
//! once, like every other setting; the bind password is read from its own file (0600 or
//! stricter) and kept as a [`Secret`]. The client that uses these settings is `auth::directory`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Secret};

/// What the file says (every key but `url` optional; unknown keys rejected).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LdapFile {
    url: Option<String>,
    starttls: Option<bool>,
    ca_file: Option<PathBuf>,
    timeout: Option<String>,
    bind_dn: Option<String>,
    bind_password_file: Option<PathBuf>,
    user_base: Option<String>,
    user_filter: Option<String>,
    username_attribute: Option<String>,
    user_dn_template: Option<String>,
    group_base: Option<String>,
    group_filter: Option<String>,
    group_name_attribute: Option<String>,
    admin_groups: Option<Vec<String>>,
    groups: Option<Vec<GroupMapFile>>,
    unmapped: Option<String>,
    recheck_interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupMapFile {
    directory: String,
    group: String,
}

/// How a user is found: the service account searches for the entry, then the user's password is
/// bound against its DN; or the DN is made from a template and bound directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LdapLookup {
    SearchThenBind {
        bind_dn: String,
        bind_password: Secret,
        user_base: String,
        /// With `{username}` (filter-escaped, RFC 4515, where it is put in).
        user_filter: String,
    },
    /// With `{username}` (DN-escaped, RFC 4514).
    DirectBind { user_dn_template: String },
}

/// What a directory user who is in none of the mapped groups gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmapped {
    /// Not let in (403); an account the directory made before is disabled.
    Refuse,
    /// Let in as a `member` without a group.
    Member,
}

/// One directory group made a gshare group (the first listed that the user is in wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMapping {
    pub directory: String,
    pub group: String,
}

/// The checked `[ldap]` settings.
#[derive(Debug, Clone)]
pub struct LdapSettings {
    /// `ldap://host[:port]` or `ldaps://host[:port]`.
    pub url: String,
    /// `ldap://` upgraded with StartTLS before anything is sent.
    pub starttls: bool,
    /// PEM certificates trusted for LDAPS / StartTLS (unset: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// Each step (connect with TLS, bind, search) at most this long.
    pub timeout: Duration,
    pub lookup: LdapLookup,
    /// The attribute whose value is the account name (`uid`; `sAMAccountName` on AD).
    pub username_attribute: String,
    /// Where groups are searched (unset: no groups are read).
    pub group_base: Option<String>,
    /// With `{dn}` (the user's DN) and `{username}`, both filter-escaped.
    pub group_filter: String,
    pub group_name_attribute: String,
    /// Directory groups whose members are admins.
    pub admin_groups: Vec<String>,
    pub groups: Vec<GroupMapping>,
    pub unmapped: Unmapped,
    /// How often the service account looks every directory-made account up again (zero: never;
    /// a direct bind has no service account and never does).
    pub recheck_interval: Duration,
}

impl LdapSettings {
    /// Is the connection encrypted (LDAPS or StartTLS)?
    pub fn tls(&self) -> bool {
        self.starttls || self.url.starts_with("ldaps://")
    }
}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(format!("ldap.{key}"), message)
}

/// A group name as accounts take it: 1-64 of `A-Z a-z 0-9 - _ . @` (the rule of `auth::accounts`).
pub(super) fn group_name_ok(g: &str) -> bool {
    !g.is_empty() && g.len() <= 64 && g.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
}

/// Reads a secret file that only its owner may read (mode 0600 or 0400); its first line is the secret.
pub fn read_secret_file(key: &str, path: &Path) -> Result<Secret, ConfigError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| bad(key, format!("cannot read {}: {e}", path.display())))?;
    if meta.mode() & 0o077 != 0 {
        return Err(bad(
            key,
            format!(
                "{} can be read by group or others (mode {:o}): chmod 600 it",
                path.display(),
                meta.mode() & 0o7777
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(key, format!("cannot read {}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or_default().to_string();
    if line.is_empty() {
        return Err(bad(key, format!("{} is empty", path.display())));
    }
    Ok(Secret::new(line))
}

/// Checks a filter template: parenthesised, balanced, naming each placeholder it must.
fn filter_template(key: &str, f: &str, must: &[&str]) -> Result<(), ConfigError> {
    let mut depth = 0i32;
    for c in f.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            break;
        }
    }
    if !f.starts_with('(') || !f.ends_with(')') || depth != 0 {
        return Err(bad(key, format!("`{f}` is not a parenthesised LDAP filter such as (uid={{username}})")));
    }
    if !must.iter().any(|m| f.contains(m)) {
        return Err(bad(key, format!("`{f}` names none of {}", must.join(", "))));
    }
    Ok(())
}

fn dn(key: &str, v: &str) -> Result<String, ConfigError> {
    let v = v.trim();
    if v.is_empty() || !v.contains('=') || v.chars().any(char::is_control) {
        return Err(bad(key, format!("`{v}` is not a DN such as ou=people,dc=lab,dc=example")));
    }
    Ok(v.to_string())
}

fn attribute(key: &str, v: &str) -> Result<String, ConfigError> {
    let ok = !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !ok {
        return Err(bad(key, format!("`{v}` is not an attribute name such as uid or cn")));
    }
    Ok(v.to_string())
}

pub(super) fn build(f: LdapFile) -> Result<LdapSettings, ConfigError> {
    let url = f.url.map(|u| u.trim().trim_end_matches('/').to_string()).unwrap_or_default();
    let rest = url.strip_prefix("ldap://").or_else(|| url.strip_prefix("ldaps://"));
    let Some(host) = rest.filter(|r| !r.is_empty() && !r.contains(['/', '?', '#', ' ', '@'])) else {
        return Err(bad("url", format!("`{url}` is not ldap://host[:port] or ldaps://host[:port]")));
    };
    let _ = host;
    let starttls = f.starttls.unwrap_or(false);
    if starttls && url.starts_with("ldaps://") {
        return Err(bad("starttls", "StartTLS is for ldap:// URLs; ldaps:// is TLS from the start"));
    }
    if let Some(ca) = &f.ca_file
        && !ca.is_file()
    {
        return Err(bad("ca_file", format!("{} is not a readable file", ca.display())));
    }
    let timeout = match f.timeout {
        Some(t) => humantime::parse_duration(t.trim())
            .map_err(|e| bad("timeout", format!("`{t}` is not a duration like 5s: {e}")))?,
        None => Duration::from_secs(5),
    };
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&timeout) {
        return Err(bad("timeout", "must be between 100ms and 60s"));
    }
    let lookup = match (f.bind_dn, f.user_dn_template) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "user_dn_template",
                "set either bind_dn (search, then bind) or user_dn_template (direct bind), not both",
            ));
        }
        (Some(bind_dn), None) => {
            let bind_dn = dn("bind_dn", &bind_dn)?;
            let Some(pw_file) = f.bind_password_file else {
                return Err(bad("bind_password_file", "bind_dn needs a bind_password_file (mode 0600)"));
            };
            let bind_password = read_secret_file("bind_password_file", &pw_file)?;
            let Some(user_base) = f.user_base else {
                return Err(bad("user_base", "search-then-bind needs the DN users are searched under"));
            };
            let user_base = dn("user_base", &user_base)?;
            let user_filter = f.user_filter.unwrap_or_else(|| "(uid={username})".into());
            filter_template("user_filter", &user_filter, &["{username}"])?;
            LdapLookup::SearchThenBind { bind_dn, bind_password, user_base, user_filter }
        }
        (None, Some(t)) => {
            if !t.contains("{username}") || !t.contains('=') {
                return Err(bad(
                    "user_dn_template",
                    format!("`{t}` needs {{username}}, as uid={{username}},ou=people,…"),
                ));
            }
            if f.bind_password_file.is_some() || f.user_base.is_some() || f.user_filter.is_some() {
                return Err(bad(
                    "user_dn_template",
                    "a direct bind takes no bind_password_file, user_base or user_filter",
                ));
            }
            LdapLookup::DirectBind { user_dn_template: t.trim().to_string() }
        }
        (None, None) => {
            return Err(bad("bind_dn", "set bind_dn (search, then bind) or user_dn_template (direct bind)"));
        }
    };
    let username_attribute = attribute("username_attribute", f.username_attribute.as_deref().unwrap_or("uid"))?;
    let group_base = f.group_base.map(|b| dn("group_base", &b)).transpose()?;
    let group_filter = f.group_filter.unwrap_or_else(|| "(member={dn})".into());
    filter_template("group_filter", &group_filter, &["{dn}", "{username}"])?;
    let group_name_attribute = attribute("group_name_attribute", f.group_name_attribute.as_deref().unwrap_or("cn"))?;
    let admin_groups: Vec<String> =
        f.admin_groups.unwrap_or_default().into_iter().map(|g| g.trim().to_string()).collect();
    if admin_groups.iter().any(String::is_empty) {
        return Err(bad("admin_groups", "a group name is empty"));
    }
    let mut groups = Vec::new();
    for (i, g) in f.groups.unwrap_or_default().into_iter().enumerate() {
        if g.directory.trim().is_empty() {
            return Err(bad(&format!("groups[{i}].directory"), "a directory group name is empty"));
        }
        if !group_name_ok(&g.group) {
            return Err(bad(
                &format!("groups[{i}].group"),
                format!("`{}` is not a group name (1-64 of A-Z a-z 0-9 - _ . @)", g.group),
            ));
        }
        groups.push(GroupMapping { directory: g.directory.trim().to_string(), group: g.group });
    }
    if group_base.is_none() && (!admin_groups.is_empty() || !groups.is_empty()) {
        return Err(bad("group_base", "admin_groups and groups need the DN groups are searched under"));
    }
    let unmapped = match f.unmapped.as_deref() {
        None | Some("refuse") => Unmapped::Refuse,
        Some("member") => Unmapped::Member,
        Some(other) => return Err(bad("unmapped", format!("`{other}` is neither `refuse` nor `member`"))),
    };
    if unmapped == Unmapped::Refuse && group_base.is_none() {
        return Err(bad(
            "unmapped",
            "with no group_base every user is unmapped and would be refused: set group_base, or unmapped = \"member\"",
        ));
    }
    let recheck_interval = match f.recheck_interval {
        Some(t) => humantime::parse_duration(t.trim())
            .map_err(|e| bad("recheck_interval", format!("`{t}` is not a duration like 15m: {e}")))?,
        None => Duration::from_secs(15 * 60),
    };
    if !recheck_interval.is_zero() && recheck_interval < Duration::from_secs(60) {
        return Err(bad("recheck_interval", "must be 0s (off) or at least 1m"));
    }
    Ok(LdapSettings {
        url,
        starttls,
        ca_file: f.ca_file,
        timeout,
        lookup,
        username_attribute,
        group_base,
        group_filter,
        group_name_attribute,
        admin_groups,
        groups,
        unmapped,
        recheck_interval,
    })
}

/// The table as `config check` prints it (the bind password redacted).
pub(super) fn render(s: &LdapSettings) -> toml::Table {
    let mut t = toml::Table::new();
    let v = |x: &str| toml::Value::String(x.to_string());
    t.insert("url".into(), v(&s.url));
    t.insert("starttls".into(), toml::Value::Boolean(s.starttls));
    t.insert("ca_file".into(), v(&s.ca_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()));
    t.insert("timeout".into(), v(&humantime::format_duration(s.timeout).to_string()));
    match &s.lookup {
        LdapLookup::SearchThenBind { bind_dn, user_base, user_filter, .. } => {
            t.insert("bind_dn".into(), v(bind_dn));
            t.insert("bind_password_file".into(), v("<redacted>"));
            t.insert("user_base".into(), v(user_base));
            t.insert("user_filter".into(), v(user_filter));
        }
        LdapLookup::DirectBind { user_dn_template } => {
            t.insert("user_dn_template".into(), v(user_dn_template));
        }
    }
    t.insert("username_attribute".into(), v(&s.username_attribute));
    t.insert("group_base".into(), v(s.group_base.as_deref().unwrap_or("")));
    t.insert("group_filter".into(), v(&s.group_filter));
    t.insert("group_name_attribute".into(), v(&s.group_name_attribute));
    render_mapping(&mut t, &s.admin_groups, &s.groups, s.unmapped);
    t.insert("recheck_interval".into(), v(&humantime::format_duration(s.recheck_interval).to_string()));
    t
}

/// The group mapping keys `[ldap]` and `[oidc]` share (`admin_groups`, `groups`, `unmapped`), rendered.
pub(super) fn render_mapping(
    t: &mut toml::Table,
    admin_groups: &[String],
    groups: &[GroupMapping],
    unmapped: Unmapped,
) {
    let v = |x: &str| toml::Value::String(x.to_string());
    t.insert("admin_groups".into(), toml::Value::Array(admin_groups.iter().map(|g| v(g)).collect()));
    let groups = groups
        .iter()
        .map(|g| {
            let mut m = toml::Table::new();
            m.insert("directory".into(), v(&g.directory));
            m.insert("group".into(), v(&g.group));
            toml::Value::Table(m)
        })
        .collect();
    t.insert("groups".into(), toml::Value::Array(groups));
    let unmapped = match unmapped {
        Unmapped::Refuse => "refuse",
        Unmapped::Member => "member",
    };
    t.insert("unmapped".into(), v(unmapped));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use crate::config::Config;

    fn load(dir: &std::path::Path, table: &str) -> Result<Config, String> {
        Config::from_toml(&dir.join("c.toml"), &format!("[ldap]\n{table}"), &BTreeMap::new()).map_err(|e| e.to_string())
    }

    fn password_file(dir: &std::path::Path, mode: u32) -> std::path::PathBuf {
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret-bind-password\nignored\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    #[test]
    fn search_then_bind_reads_the_password_file_and_never_prints_it() {
        let dir = tempfile::tempdir().unwrap();
        let pw = password_file(dir.path(), 0o600);
        let c = load(
            dir.path(),
            &format!(
                "url = \"ldaps://ldap.lab:636\"\nbind_dn = \"cn=svc,dc=lab\"\nbind_password_file = \"{}\"\nuser_base = \"ou=people,dc=lab\"\ngroup_base = \"ou=groups,dc=lab\"\nadmin_groups = [\"admins\"]\ngroups = [{{ directory = \"ml-lab\", group = \"ml\" }}]\n",
                pw.display()
            ),
        )
        .unwrap();
        let l = c.ldap.as_ref().unwrap();
        assert!(l.tls());
        match &l.lookup {
            super::LdapLookup::SearchThenBind { bind_password, user_filter, .. } => {
                assert_eq!(bind_password.expose(), "s3cret-bind-password");
                assert_eq!(user_filter, "(uid={username})");
            }
            other => panic!("{other:?}"),
        }
        assert!(!format!("{c:?}").contains("s3cret"));
        let rendered = c.render_redacted();
        assert!(!rendered.contains("s3cret") && rendered.contains("[ldap]"), "{rendered}");
        assert!(rendered.contains("bind_password_file = \"<redacted>\""), "{rendered}");
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let open = password_file(dir.path(), 0o644);
        let cases = [
            ("url = \"http://x\"\nuser_dn_template = \"uid={username},dc=x\"\nunmapped = \"member\"", "ldap.url"),
            (
                "url = \"ldaps://x\"\nstarttls = true\nuser_dn_template = \"uid={username},dc=x\"\nunmapped = \"member\"",
                "ldap.starttls",
            ),
            ("url = \"ldap://x\"\nunmapped = \"member\"", "ldap.bind_dn"),
            ("url = \"ldap://x\"\nuser_dn_template = \"dc=x\"\nunmapped = \"member\"", "ldap.user_dn_template"),
            ("url = \"ldap://x\"\nuser_dn_template = \"uid={username},dc=x\"", "ldap.unmapped"),
            (
                &format!(
                    "url = \"ldap://x\"\nbind_dn = \"cn=a,dc=x\"\nbind_password_file = \"{}\"\nuser_base = \"dc=x\"\nunmapped = \"member\"",
                    open.display()
                ),
                "ldap.bind_password_file",
            ),
            (
                "url = \"ldap://x\"\nuser_dn_template = \"uid={username},dc=x\"\ngroup_base = \"dc=x\"\ngroup_filter = \"member={dn}\"",
                "ldap.group_filter",
            ),
            (
                "url = \"ldap://x\"\nuser_dn_template = \"uid={username},dc=x\"\ngroup_base = \"dc=x\"\ngroups = [{ directory = \"a\", group = \"no spaces\" }]",
                "ldap.groups[0].group",
            ),
            (
                "url = \"ldap://x\"\nuser_dn_template = \"uid={username},dc=x\"\nunmapped = \"member\"\ntimeout = \"2h\"",
                "ldap.timeout",
            ),
            ("url = \"ldap://x\"\nsurprise = 1", "surprise"),
        ];
        for (table, key) in cases {
            let e = load(dir.path(), table).unwrap_err();
            assert!(e.contains(key), "{table}: {e}");
        }
        // The world-readable password file is named with its mode.
        let e = load(dir.path(), cases[5].0).unwrap_err();
        assert!(e.contains("644") && e.contains("chmod 600"), "{e}");
    }

    #[test]
    fn no_variable_sets_the_table() {
        let e = Config::from_toml(
            std::path::Path::new("c.toml"),
            "",
            &BTreeMap::from([("GSHARE_LDAP".to_string(), "x".to_string())]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("GSHARE_LDAP") && e.contains("no such setting"), "{e}");
    }
}
