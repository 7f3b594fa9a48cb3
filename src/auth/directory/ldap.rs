//! The LDAP client of a directory sign-in (`ldap3`, TLS by rustls): connect (LDAPS, or StartTLS
//! before anything is sent, trusting the configured CA), then either bind as the service account,
//! search the user's entry and read their groups, then bind as the user; or bind as the DN the
//! template makes and read the groups as the user. Every step is bounded by `ldap.timeout`; each
//! is recorded in a [`Trace`] (`gshare config check --ldap-test USER` prints it). Values put into
//! a filter are escaped by RFC 4515, into a DN by RFC 4514.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldap3::{LdapConnAsync, LdapConnSettings, Scope, SearchEntry};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::auth::accounts::Role;
use crate::config::directory::{LdapLookup, LdapSettings, Unmapped};

/// LDAP result code of a bind with a wrong password (or, by a direct bind, an unknown DN).
const INVALID_CREDENTIALS: u32 = 49;
/// Entries a user search may return before it is called ambiguous (two is already too many).
const USER_SEARCH_LIMIT: i32 = 2;
/// Groups read for one user at most.
const GROUP_SEARCH_LIMIT: i32 = 1000;

/// One step of a sign-in against the directory.
#[derive(Debug, Clone)]
pub struct Step {
    /// `connect`, `bind`, `search`, `groups`, `bind as user`, `map`.
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub elapsed: Duration,
}

/// The steps one sign-in took, in order.
pub type Trace = Vec<Step>;

/// The directory could not be asked (down, slow, TLS refused, service account refused): no
/// answer about the user. Local accounts sign in as before.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the directory did not answer at `{step}`: {message}")]
pub struct Unavailable {
    pub step: &'static str,
    pub message: String,
}

/// What the directory said of a username and password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The password is right; `allowed` says whether the groups let the user in.
    Accepted(DirectoryUser),
    /// The entry exists (or, by a direct bind, may exist) and the password is wrong.
    WrongPassword,
    /// No entry (or more than one) matches the username: the directory does not know this user.
    NoSuchUser,
}

/// A user the directory vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryUser {
    /// The account name: the entry's `username_attribute` (its spelling), else what was typed.
    pub username: String,
    pub dn: String,
    pub groups: Vec<String>,
    pub role: Role,
    pub group: Option<String>,
    /// In a mapped group (or `unmapped = "member"`).
    pub allowed: bool,
}

/// Substitutes `{name}` placeholders in one pass (a value that itself holds `{dn}` stays as it is).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    'outer: while !rest.is_empty() {
        for (name, value) in values {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(value);
                rest = after;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// The user filter for `username` (RFC 4515: `* ( ) \ NUL` escaped as `\2a \28 \29 \5c \00`).
pub fn user_filter(template: &str, username: &str) -> String {
    fill(template, &[("{username}", &ldap3::ldap_escape(username))])
}

/// The group filter for a user's DN and name, both filter-escaped.
pub fn group_filter(template: &str, dn: &str, username: &str) -> String {
    fill(template, &[("{dn}", &ldap3::ldap_escape(dn)), ("{username}", &ldap3::ldap_escape(username))])
}

/// The DN a direct bind uses (RFC 4514: `, + " \ < > ; =` and leading `#`/space escaped).
pub fn user_dn(template: &str, username: &str) -> String {
    fill(template, &[("{username}", &ldap3::dn_escape(username))])
}

/// Role and group from the directory groups, by the configured mapping.
pub fn map_groups(settings: &LdapSettings, groups: &[String]) -> (Role, Option<String>, bool) {
    let is_in = |name: &str| groups.iter().any(|g| g.eq_ignore_ascii_case(name));
    let admin = settings.admin_groups.iter().any(|g| is_in(g));
    let group = settings.groups.iter().find(|m| is_in(&m.directory)).map(|m| m.group.clone());
    let mapped = admin || group.is_some();
    let allowed = mapped || settings.unmapped == Unmapped::Member;
    (if admin { Role::Admin } else { Role::Member }, group, allowed)
}

/// A directory to sign in against, made once from the settings.
pub struct LdapDirectory {
    settings: LdapSettings,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for LdapDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LdapDirectory").field("url", &self.settings.url).finish_non_exhaustive()
    }
}

/// The TLS client settings: the configured CA file's certificates, else the system's roots.
fn tls_config(settings: &LdapSettings) -> Result<Arc<rustls::ClientConfig>, String> {
    tls_client_config(settings.ca_file.as_deref(), "ldap.ca_file")
}

/// A rustls client (ring) trusting the PEM certificates of `ca_file` (named `key` in
/// errors), else the system's roots. Also the OpenID Connect client's.
pub(crate) fn tls_client_config(
    ca_file: Option<&std::path::Path>,
    key: &str,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<_, _>>())
                .map_err(|e| format!("{key} {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("{key} {}: no PEM certificate in it", path.display()));
            }
            for c in certs {
                roots.add(c).map_err(|e| format!("{key} {}: {e}", path.display()))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Runs one bounded step, recording it.
async fn step<T, E: std::fmt::Display>(
    trace: &mut Trace,
    name: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, Unavailable> {
    let started = Instant::now();
    let res = tokio::time::timeout(limit, fut).await;
    let elapsed = started.elapsed();
    let err = match res {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {}", humantime::format_duration(limit)),
    };
    trace.push(Step { name, ok: false, detail: err.clone(), elapsed });
    Err(Unavailable { step: name, message: err })
}

fn ok(trace: &mut Trace, name: &'static str, detail: String, started: Instant) {
    trace.push(Step { name, ok: true, detail, elapsed: started.elapsed() });
}

impl LdapDirectory {
    /// Reads the CA file now: a broken one is a start-up error, not a refusal at every sign-in.
    pub fn new(settings: &LdapSettings) -> Result<Self, String> {
        let tls = if settings.tls() { Some(tls_config(settings)?) } else { None };
        Ok(Self { settings: settings.clone(), tls })
    }

    pub fn settings(&self) -> &LdapSettings {
        &self.settings
    }

    /// Asks the directory about `username` and `password`. An empty password is refused before
    /// any bind (an LDAP bind with a DN and no password is an anonymous bind, which succeeds).
    pub async fn authenticate(
        &self,
        username: &str,
        password: &str,
        trace: &mut Trace,
    ) -> Result<Outcome, Unavailable> {
        if password.is_empty() || username.is_empty() {
            return Ok(Outcome::WrongPassword);
        }
        let (mut ldap, driver) = self.connect(trace).await?;
        let result = self.ask(&mut ldap, username, password, trace).await;
        let _ = tokio::time::timeout(self.settings.timeout, ldap.unbind()).await;
        driver.abort();
        result
    }

    /// Asks the directory about a user without their password, with the service account's
    /// rights: whether the entry is still there and which groups it is in (`None` for a direct
    /// bind, which has no rights of its own). The periodic re-check uses it.
    pub async fn lookup(&self, username: &str, trace: &mut Trace) -> Result<Option<Outcome>, Unavailable> {
        if !matches!(self.settings.lookup, LdapLookup::SearchThenBind { .. }) {
            return Ok(None);
        }
        let (mut ldap, driver) = self.connect(trace).await?;
        let result = match self.find(&mut ldap, username, trace).await {
            Ok(Ok((dn, name, groups))) => Ok(Some(self.verdict(dn, name, groups, trace))),
            Ok(Err(outcome)) => Ok(Some(outcome)),
            Err(e) => Err(e),
        };
        let _ = tokio::time::timeout(self.settings.timeout, ldap.unbind()).await;
        driver.abort();
        result
    }

    /// Opens the connection (TLS as configured) and starts driving it.
    async fn connect(&self, trace: &mut Trace) -> Result<(ldap3::Ldap, tokio::task::JoinHandle<()>), Unavailable> {
        let s = &self.settings;
        let t = s.timeout;
        let started = Instant::now();
        let mut conn_settings = LdapConnSettings::new().set_conn_timeout(t).set_starttls(s.starttls);
        if let Some(tls) = &self.tls {
            conn_settings = conn_settings.set_config(tls.clone());
        }
        let (conn, ldap) = step(trace, "connect", t, LdapConnAsync::with_settings(conn_settings, &s.url)).await?;
        let driver = tokio::spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::debug!(error = %e, "ldap connection ended");
            }
        });
        let how = if s.starttls {
            "StartTLS"
        } else if s.url.starts_with("ldaps://") {
            "LDAPS"
        } else {
            "plain LDAP"
        };
        ok(trace, "connect", format!("{} ({how})", s.url), started);
        Ok((ldap, driver))
    }

    async fn ask(
        &self,
        ldap: &mut ldap3::Ldap,
        username: &str,
        password: &str,
        trace: &mut Trace,
    ) -> Result<Outcome, Unavailable> {
        let s = &self.settings;
        let t = s.timeout;
        let (dn, name) = match &s.lookup {
            LdapLookup::SearchThenBind { .. } => {
                let (dn, name, groups) = match self.find(ldap, username, trace).await? {
                    Ok(found) => found,
                    Err(outcome) => return Ok(outcome),
                };
                let entry_dn = dn;
                let started = Instant::now();
                let res = step(trace, "bind as user", t, ldap.with_timeout(t).simple_bind(&entry_dn, password)).await?;
                match res.rc {
                    0 => ok(trace, "bind as user", entry_dn.clone(), started),
                    INVALID_CREDENTIALS => {
                        trace.push(Step {
                            name: "bind as user",
                            ok: false,
                            detail: format!("{}: wrong password", entry_dn),
                            elapsed: started.elapsed(),
                        });
                        return Ok(Outcome::WrongPassword);
                    }
                    rc => {
                        let message = format!("binding as {} failed (result {rc}: {})", entry_dn, res.text);
                        trace.push(Step {
                            name: "bind as user",
                            ok: false,
                            detail: message.clone(),
                            elapsed: started.elapsed(),
                        });
                        return Err(Unavailable { step: "bind as user", message });
                    }
                }
                return Ok(self.verdict(entry_dn, name, groups, trace));
            }
            LdapLookup::DirectBind { user_dn_template } => {
                let dn = user_dn(user_dn_template, username);
                let started = Instant::now();
                let res = step(trace, "bind", t, ldap.with_timeout(t).simple_bind(&dn, password)).await?;
                match res.rc {
                    0 => ok(trace, "bind", format!("as {dn}"), started),
                    INVALID_CREDENTIALS => {
                        trace.push(Step {
                            name: "bind",
                            ok: false,
                            detail: format!("{dn}: wrong password or no such entry"),
                            elapsed: started.elapsed(),
                        });
                        return Ok(Outcome::WrongPassword);
                    }
                    rc => {
                        let message = format!("binding as {dn} failed (result {rc}: {})", res.text);
                        trace.push(Step {
                            name: "bind",
                            ok: false,
                            detail: message.clone(),
                            elapsed: started.elapsed(),
                        });
                        return Err(Unavailable { step: "bind", message });
                    }
                }
                (dn, username.to_string())
            }
        };
        let groups = self.groups(ldap, &dn, &name, trace).await?;
        Ok(self.verdict(dn, name, groups, trace))
    }

    /// Search-then-bind's first half, with the service account: its bind, the user's entry, the
    /// groups. `Ok(Err(outcome))`: the directory does not know the user.
    #[allow(clippy::type_complexity)]
    async fn find(
        &self,
        ldap: &mut ldap3::Ldap,
        username: &str,
        trace: &mut Trace,
    ) -> Result<Result<(String, String, Vec<String>), Outcome>, Unavailable> {
        let s = &self.settings;
        let t = s.timeout;
        let LdapLookup::SearchThenBind { bind_dn, bind_password, user_base, user_filter: template } = &s.lookup else {
            return Ok(Err(Outcome::NoSuchUser));
        };
        let started = Instant::now();
        let res = step(trace, "bind", t, ldap.with_timeout(t).simple_bind(bind_dn, bind_password.expose())).await?;
        if res.rc != 0 {
            let message = format!("the service account {bind_dn} was refused (result {}: {})", res.rc, res.text);
            trace.push(Step { name: "bind", ok: false, detail: message.clone(), elapsed: started.elapsed() });
            return Err(Unavailable { step: "bind", message });
        }
        ok(trace, "bind", format!("as {bind_dn}"), started);
        let started = Instant::now();
        let filter = user_filter(template, username);
        let attrs = vec![s.username_attribute.as_str()];
        let found =
            step(
                trace,
                "search",
                t,
                ldap.with_timeout(t)
                    .with_search_options(ldap3::SearchOptions::new().sizelimit(USER_SEARCH_LIMIT))
                    .search(user_base, Scope::Subtree, &filter, attrs),
            )
            .await?;
        // sizeLimitExceeded (4) means more than one: ambiguous, like two entries.
        let (entries, rc) = (found.0, found.1.rc);
        if rc != 0 && rc != 4 {
            let message = format!("search under {user_base} failed (result {rc}: {})", found.1.text);
            trace.push(Step { name: "search", ok: false, detail: message.clone(), elapsed: started.elapsed() });
            return Err(Unavailable { step: "search", message });
        }
        if entries.len() != 1 {
            let detail = format!("{filter} under {user_base}: {} entries (exactly one is needed)", entries.len());
            trace.push(Step { name: "search", ok: false, detail, elapsed: started.elapsed() });
            return Ok(Err(Outcome::NoSuchUser));
        }
        let Some(entry) = entries.into_iter().next().map(SearchEntry::construct) else {
            return Ok(Err(Outcome::NoSuchUser));
        };
        let name = entry
            .attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(&s.username_attribute))
            .and_then(|(_, v)| v.iter().find(|v| v.eq_ignore_ascii_case(username)).cloned())
            .unwrap_or_else(|| username.to_string());
        ok(trace, "search", format!("{filter} under {user_base}: {}", entry.dn), started);
        // The groups are read with the service account's rights, before the user's bind.
        let groups = self.groups(ldap, &entry.dn, &name, trace).await?;
        Ok(Ok((entry.dn, name, groups)))
    }

    /// The names of the groups the user is in (none when no `group_base` is set).
    async fn groups(
        &self,
        ldap: &mut ldap3::Ldap,
        dn: &str,
        username: &str,
        trace: &mut Trace,
    ) -> Result<Vec<String>, Unavailable> {
        let s = &self.settings;
        let Some(base) = &s.group_base else {
            return Ok(Vec::new());
        };
        let started = Instant::now();
        let filter = group_filter(&s.group_filter, dn, username);
        let found = step(
            trace,
            "groups",
            s.timeout,
            ldap.with_timeout(s.timeout)
                .with_search_options(ldap3::SearchOptions::new().sizelimit(GROUP_SEARCH_LIMIT))
                .search(base, Scope::Subtree, &filter, vec![s.group_name_attribute.as_str()]),
        )
        .await?;
        if found.1.rc != 0 && found.1.rc != 4 {
            let message = format!("group search under {base} failed (result {}: {})", found.1.rc, found.1.text);
            trace.push(Step { name: "groups", ok: false, detail: message.clone(), elapsed: started.elapsed() });
            return Err(Unavailable { step: "groups", message });
        }
        let mut groups: Vec<String> = found
            .0
            .into_iter()
            .map(SearchEntry::construct)
            .filter_map(|e| {
                e.attrs
                    .into_iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(&s.group_name_attribute))
                    .and_then(|(_, v)| v.into_iter().next())
            })
            .collect();
        groups.sort();
        groups.dedup();
        ok(trace, "groups", format!("{filter} under {base}: [{}]", groups.join(", ")), started);
        Ok(groups)
    }

    fn verdict(&self, dn: String, username: String, groups: Vec<String>, trace: &mut Trace) -> Outcome {
        let (role, group, allowed) = map_groups(&self.settings, &groups);
        let detail = if allowed {
            format!("role {}, group {}", role.as_str(), group.as_deref().unwrap_or("(none)"))
        } else {
            "in none of the mapped groups: refused (unmapped = \"refuse\")".to_string()
        };
        trace.push(Step { name: "map", ok: allowed, detail, elapsed: Duration::ZERO });
        Outcome::Accepted(DirectoryUser { username, dn, groups, role, group, allowed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_escape_by_rfc_4515() {
        assert_eq!(user_filter("(uid={username})", "alice"), "(uid=alice)");
        assert_eq!(user_filter("(uid={username})", "*)(uid=*"), "(uid=\\2a\\29\\28uid=\\2a)");
        assert_eq!(user_filter("(uid={username})", "\\2a"), "(uid=\\5c2a)");
        assert_eq!(user_filter("(uid={username})", "a\0b"), "(uid=a\\00b)");
        // One pass: a value holding a placeholder is not filled again.
        assert_eq!(
            group_filter("(|(member={dn})(memberUid={username}))", "uid={username},dc=x", "bob"),
            "(|(member=uid={username},dc=x)(memberUid=bob))"
        );
        assert_eq!(group_filter("(member={dn})", "cn=a\\,b (x)", "u"), "(member=cn=a\\5c,b \\28x\\29)");
    }

    #[test]
    fn dns_escape_by_rfc_4514() {
        assert_eq!(user_dn("uid={username},ou=people,dc=lab", "alice"), "uid=alice,ou=people,dc=lab");
        assert_eq!(user_dn("uid={username},ou=people,dc=lab", "x,ou=admins"), "uid=x\\2cou\\3dadmins,ou=people,dc=lab");
    }
}
