//! Sign-in with the lab's directory (issue 26). The login route asks [`local_or_directory`]
//! first: a name with a local account is checked by its argon2 hash as always (the first admin is
//! local, so a broken directory never locks the lab out); any other name, when `[ldap]` is
//! configured, is asked of the directory ([`check`]). The directory's yes makes or updates the
//! account (`accounts::sync_directory`: no local password, role and group from the directory's
//! groups); a user the directory no longer knows, or no longer lets in by its groups, has the
//! account it made disabled. A directory that is down or slow answers 503 within
//! `ldap.timeout` per step, and local sign-in goes on.
//!
//! The group a directory group maps to is stored as the account's plain `group` string (what the
//! users routes show and set); group policies hang off that name.

pub mod ldap;
pub mod oidc;

use axum::http::StatusCode;

use super::AuthState;
use super::accounts::{self, AccountError, DirectoryVerdict, Standing, Username};
use crate::audit::{AuditEntry, AuditResult, RequestMeta};
use crate::config::Config;
use crate::http::error::{ApiError, ErrorCode};

/// The configured directories (LDAP now).
#[derive(Debug)]
pub struct Directory {
    pub ldap: ldap::LdapDirectory,
}

impl Directory {
    /// `None` without an `[ldap]` table; an error names a CA file that cannot be used.
    pub fn from_config(config: &Config) -> Result<Option<Self>, String> {
        let Some(settings) = &config.ldap else {
            return Ok(None);
        };
        Ok(Some(Self { ldap: ldap::LdapDirectory::new(settings)? }))
    }
}

/// Where a sign-in's password is checked.
pub enum Route {
    /// The local account's hash (or the decoy, for a name no one has, without a directory).
    Local,
    Directory(std::sync::Arc<Directory>),
}

/// A local account's name (exact) is always checked locally; names the username rule refuses
/// never reach the directory (they answer as unknown local names).
pub async fn local_or_directory(app: &AuthState, typed: &str) -> Result<Route, ApiError> {
    let Some(dir) = app.signin.directory.clone() else {
        return Ok(Route::Local);
    };
    if Username::parse(typed).is_err() {
        return Ok(Route::Local);
    }
    let name = typed.to_string();
    let account = app.store.read(move |txn| accounts::get(txn, &name)).await?;
    Ok(match account {
        // A local account, or one the OpenID Connect issuer made (no password of ours or the
        // directory's opens it: its `!directory` hash never verifies).
        Some(a) if a.directory.as_ref().is_none_or(|l| l.source == "oidc") => Route::Local,
        _ => Route::Directory(dir),
    })
}

fn unavailable(e: &ldap::Unavailable) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unavailable,
        format!("the lab's directory did not answer ({}); try again later — local accounts can still sign in", e.step),
    )
    .with_details(serde_json::json!({ "directory": "ldap", "step": e.step }))
}

fn refused(groups: &[String]) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        ErrorCode::AccountDisabled,
        "the lab's directory knows you, but you are in none of the groups allowed to use gshare; ask an admin of the lab",
    )
    .with_details(serde_json::json!({ "directory": "ldap", "groups": groups }))
}

/// Asks the directory; answers the account's name, standing and `must_change_password` (never,
/// for a directory's) when the password is right and the directory lets the user in, `None` for
/// a wrong password or an unknown user (401, counted by the throttle), or the error to answer:
/// 503 `unavailable` (the directory did not answer), 403 `account_disabled` (in no mapped group),
/// 409 `conflict` (the name belongs to a local or deleted account).
pub async fn check(
    app: &AuthState,
    dir: &Directory,
    typed: &str,
    password: &str,
    meta: &RequestMeta,
) -> Result<Option<(String, Standing, bool)>, ApiError> {
    let mut trace = ldap::Trace::new();
    let outcome = match dir.ldap.authenticate(typed, password, &mut trace).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(step = e.step, error = %e.message, "ldap sign-in: the directory did not answer");
            return Err(unavailable(&e));
        }
    };
    let user = match outcome {
        ldap::Outcome::WrongPassword => return Ok(None),
        ldap::Outcome::NoSuchUser => {
            // An account the directory made before is disabled: the directory no longer has it.
            if let Ok(name) = Username::parse(typed) {
                let verdict = DirectoryVerdict {
                    source: "ldap",
                    id: String::new(),
                    groups: Vec::new(),
                    role: accounts::Role::Member,
                    group: None,
                    allowed: false,
                };
                sync(app, meta, name, verdict).await?;
            }
            return Ok(None);
        }
        ldap::Outcome::Accepted(user) => user,
    };
    let Ok(name) = Username::parse(&user.username) else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "the directory's name for you is not a gshare username (1-64 of A-Z a-z 0-9 - _ . @); ask an admin of the lab",
        ));
    };
    let verdict = DirectoryVerdict {
        source: "ldap",
        id: user.dn.clone(),
        groups: user.groups.clone(),
        role: user.role,
        group: user.group.clone(),
        allowed: user.allowed,
    };
    let account = sync(app, meta, name.clone(), verdict).await?;
    match account {
        Some(a) if user.allowed => Ok(Some((name.to_string(), Standing::from(&a), false))),
        _ => Err(refused(&user.groups)),
    }
}

/// Writes what the directory said (one transaction) and tells the guard.
pub(crate) async fn sync(
    app: &AuthState,
    meta: &RequestMeta,
    name: Username,
    verdict: DirectoryVerdict,
) -> Result<Option<accounts::Account>, ApiError> {
    let parts = Parts { store: &app.store, signin: &app.signin, clock: &app.clock, audit: &app.audit };
    sync_with(&parts, Some(meta), name, verdict).await
}

/// What writing a directory's answer needs (the login route's state, or the server's for the
/// periodic re-check).
pub struct Parts<'a> {
    pub store: &'a crate::store::Store,
    pub signin: &'a super::login::SignIn,
    pub clock: &'a crate::clock::Clock,
    pub audit: &'a std::sync::Arc<crate::audit::AuditLog>,
}

async fn sync_with(
    app: &Parts<'_>,
    meta: Option<&RequestMeta>,
    name: Username,
    verdict: DirectoryVerdict,
) -> Result<Option<accounts::Account>, ApiError> {
    let now = app.clock.now_ms();
    let allowed = verdict.allowed;
    let actor = format!("directory:{}", verdict.source);
    let n = name.clone();
    let before = app.signin.standing(name.as_str());
    let res = app.store.write_with(move |txn| accounts::sync_directory(txn, &n, &verdict, now)).await;
    let account = match res {
        Ok(a) => a,
        Err(AccountError::Exists(taken) | AccountError::Deleted(taken)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::Conflict,
                format!(
                    "the name `{taken}` belongs to a local or deleted account, not to the directory's user; ask an admin of the lab"
                ),
            ));
        }
        Err(AccountError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(ApiError::internal(e)),
    };
    if let Some(a) = &account {
        app.signin.note_account(a);
        let (action, result) = match (before, allowed, a.disabled) {
            (None, true, _) => ("account.create", AuditResult::Success),
            (Some(b), false, true) if !b.disabled => ("account.disable", AuditResult::Success),
            _ => ("", AuditResult::Success),
        };
        if !action.is_empty() {
            let entry = match meta {
                Some(meta) => AuditEntry::new(meta, actor.as_str(), action, result),
                None => AuditEntry::system(actor.as_str(), action, result),
            };
            crate::audit::record(
                app.audit,
                entry.target(name.to_string()).details(
                    serde_json::json!({ "role": a.role.as_str(), "group": a.group, "reason": if allowed { "first_sign_in" } else { "directory_refused" } }),
                ),
            )
            .await;
        }
    }
    Ok(account)
}

/// Asks the directory again about every account it made (search-then-bind only: the service
/// account looks each user up) and writes what it says: a user no longer found, or no longer in a
/// mapped group, has the account disabled without waiting for a sign-in (their tokens stop at the
/// next request); one let in again is enabled. Nothing changes while the directory does not
/// answer. Answers how many accounts it disabled.
pub async fn recheck(dir: &Directory, app: &Parts<'_>) -> Result<usize, ApiError> {
    let names: Vec<String> = app
        .store
        .read(|txn| {
            Ok(accounts::list(txn)?
                .into_iter()
                .filter(|a| a.directory.as_ref().is_some_and(|l| l.source == "ldap"))
                .map(|a| a.username.to_string())
                .collect())
        })
        .await?;
    let mut disabled = 0;
    for name in names {
        let mut trace = ldap::Trace::new();
        let outcome = match dir.ldap.lookup(&name, &mut trace).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(0),
            Err(e) => {
                tracing::warn!(step = e.step, error = %e.message, "ldap re-check: the directory did not answer");
                return Ok(disabled);
            }
        };
        let Ok(username) = Username::parse(&name) else { continue };
        let verdict = match outcome {
            ldap::Outcome::Accepted(u) => DirectoryVerdict {
                source: "ldap",
                id: u.dn,
                groups: u.groups,
                role: u.role,
                group: u.group,
                allowed: u.allowed,
            },
            ldap::Outcome::NoSuchUser | ldap::Outcome::WrongPassword => DirectoryVerdict {
                source: "ldap",
                id: String::new(),
                groups: Vec::new(),
                role: accounts::Role::Member,
                group: None,
                allowed: false,
            },
        };
        let was_enabled = app.signin.standing(&name).is_some_and(|s| !s.disabled);
        let allowed = verdict.allowed;
        match sync_with(app, None, username, verdict).await {
            Ok(Some(a)) if was_enabled && !allowed && a.disabled => disabled += 1,
            Ok(_) => {}
            // A name taken meanwhile by a local account: nothing of the directory's to change.
            Err(e) => tracing::warn!(account = %name, error = %e.message, "ldap re-check: cannot write the account"),
        }
    }
    Ok(disabled)
}
