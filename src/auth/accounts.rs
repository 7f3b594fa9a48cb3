//! Admin accounts: usernames and argon2id password hashes in the state file. The first start
//! creates `admin` with a random password written once to `<data_dir>/initial-admin-password`.
//! Everything here is synchronous over a redb transaction; async callers go through `Store`.

use std::path::{Path, PathBuf};

use crate::store::WriteTxn;
use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redb::ReadTransaction;
use serde::{Deserialize, Serialize};

use crate::store::{JsonTable, Store, StoreError};

/// The account a fresh install starts with.
pub const INITIAL_ADMIN: &str = "admin";
/// Where the first start leaves the initial password (0600), relative to the data directory.
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";
/// Shortest password `set-password` / `add` accept.
pub const MIN_PASSWORD_LEN: usize = 12;
/// Longest password accepted anywhere (hashing cost does not depend on it, but a bound keeps
/// request handling predictable).
pub const MAX_PASSWORD_LEN: usize = 1024;
pub const MAX_USERNAME_LEN: usize = 64;

const ACCOUNTS: JsonTable<Account> = JsonTable::new("admin_accounts");
/// Names of deleted accounts (`DELETE /api/v1/users/{username}`): the audit log and sessions keep
/// the name, so it is never given to another person (who would see the old owner's sessions).
const DELETED: JsonTable<DeletedAccount> = JsonTable::new("deleted_accounts");

/// A validated admin username: 1-64 characters from `A-Z a-z 0-9 - _ . @`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Username(String);

impl Username {
    pub fn parse(name: &str) -> Result<Self, AccountError> {
        let ok = !name.is_empty()
            && name.len() <= MAX_USERNAME_LEN
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
        if ok { Ok(Self(name.to_string())) } else { Err(AccountError::BadUsername) }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Username {
    type Error = AccountError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}
impl From<Username> for String {
    fn from(u: Username) -> String {
        u.0
    }
}
impl std::fmt::Display for Username {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an account may do: an `admin` runs the lab (every route); a `member` signs in to use
/// GPUs (their own sessions, the offerings, their own account) and gets 403 `forbidden_role`
/// everywhere else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = UserRole)]
pub enum Role {
    /// Accounts stored before roles existed were all admins: that is the default when reading.
    #[default]
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Member => "member",
        }
    }
}

/// Longest group name (policies attach to groups).
pub const MAX_GROUP_LEN: usize = 64;

/// A group name: the username rule (1-64 of `A-Z a-z 0-9 - _ . @`).
pub fn check_group(group: &str) -> Result<(), AccountError> {
    let ok = !group.is_empty()
        && group.len() <= MAX_GROUP_LEN
        && group.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
    if ok { Ok(()) } else { Err(AccountError::BadGroup) }
}

/// One stored account. The hash is a PHC string (`$argon2id$v=19$…`). Rows written before
/// roles existed read as enabled admins without a group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Account {
    pub username: Username,
    pub password_hash: String,
    pub created_at_ms: i64,
    pub password_changed_at_ms: i64,
    #[serde(default)]
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A disabled account cannot sign in, and its tokens and cookies stop at the next request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// The password was set by an admin (a first password, a reset): the console asks its owner
    /// for a new one at sign-in; changing it clears this.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub must_change_password: bool,
    /// Made by a directory sign-in (`auth::directory`): no local password (its hash is
    /// [`NO_PASSWORD`]); role and group follow the directory at each sign-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectoryLink>,
}

/// The stored hash of an account that has no local password (a directory's): no PHC string, so
/// [`verify_password`] never matches it.
pub const NO_PASSWORD: &str = "!directory";

/// Where a directory account comes from, and what the directory last said of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryLink {
    /// `ldap` (issue 26; `oidc` later).
    pub source: String,
    /// The user's DN (LDAP) or subject (OIDC) when last seen.
    pub id: String,
    /// The directory no longer lets the user in (not found, or in no mapped group): the account
    /// was disabled by a sign-in, not by an admin, and the directory's next yes enables it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// The directory groups seen at the last sign-in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    pub synced_at_ms: i64,
}

/// What is kept of a deleted account: its name (never reused) and who deleted it when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeletedAccount {
    pub username: String,
    pub role: Role,
    pub deleted_at_ms: i64,
    pub deleted_by: String,
}

/// What listings show: never the hash.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AccountSummary {
    #[schema(value_type = String)]
    pub username: Username,
    pub role: Role,
    pub group: Option<String>,
    pub disabled: bool,
    /// The password was set by an admin and its owner has not changed it yet.
    pub must_change_password: bool,
    pub created_at: String,
    pub password_changed_at: String,
    /// Where the account signs in: `local` (its password here), `ldap` (the lab's directory) or
    /// `oidc` (the lab's OpenID Connect issuer); the last two were made by their first sign-in.
    pub source: String,
}

impl From<&Account> for AccountSummary {
    fn from(a: &Account) -> Self {
        Self {
            username: a.username.clone(),
            role: a.role,
            group: a.group.clone(),
            disabled: a.disabled,
            must_change_password: a.must_change_password,
            created_at: crate::clock::rfc3339_ms(a.created_at_ms),
            password_changed_at: crate::clock::rfc3339_ms(a.password_changed_at_ms),
            source: a.directory.as_ref().map_or_else(|| "local".to_string(), |l| l.source.clone()),
        }
    }
}

/// What the request guard needs of an account at every request, kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub role: Role,
    pub disabled: bool,
    /// An admin set the password: until its owner changes it, the guard lets the account reach
    /// only what changing it needs ([`crate::auth::guard`]).
    pub must_change_password: bool,
}

impl From<&Account> for Standing {
    fn from(a: &Account) -> Self {
        Self { role: a.role, disabled: a.disabled, must_change_password: a.must_change_password }
    }
}

/// A change to an account's role, group or enabled state (`PATCH /api/v1/users/{username}`).
#[derive(Debug, Clone, Default)]
pub struct AccountPatch {
    pub role: Option<Role>,
    /// `Some(None)` clears the group.
    pub group: Option<Option<String>>,
    pub disabled: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("a username is 1-64 characters from A-Z a-z 0-9 - _ . @")]
    BadUsername,
    #[error("a group is 1-64 characters from A-Z a-z 0-9 - _ . @")]
    BadGroup,
    #[error("a password has {MIN_PASSWORD_LEN}-{MAX_PASSWORD_LEN} characters")]
    BadPassword,
    #[error("this password is too easy to guess: {0}")]
    WeakPassword(&'static str),
    #[error("no account named `{0}`")]
    NotFound(String),
    #[error("an account named `{0}` exists already")]
    Exists(String),
    #[error("an account named `{0}` was deleted; its history keeps the name, so it is not given again")]
    Deleted(String),
    #[error("`{0}` is the last enabled admin account; add another admin before removing, disabling or demoting it")]
    LastAccount(String),
    #[error("cannot hash the password: {0}")]
    Hash(String),
    #[error("cannot write {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a new password: its length, and that it is not trivially weak — blank, with control
/// characters, made of fewer than [`MIN_DISTINCT_CHARS`] different characters, or one run of
/// consecutive characters (`abcdefghijkl`, `987654321098`). No composition rules: long random
/// passphrases beat them.
pub fn check_new_password(password: &str) -> Result<(), AccountError> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_LEN || password.len() > MAX_PASSWORD_LEN {
        return Err(AccountError::BadPassword);
    }
    if password.chars().all(char::is_whitespace) {
        return Err(AccountError::WeakPassword("it is blank"));
    }
    if password.chars().any(char::is_control) {
        return Err(AccountError::WeakPassword("it has control characters"));
    }
    let distinct: std::collections::BTreeSet<char> = password.chars().collect();
    if distinct.len() < MIN_DISTINCT_CHARS {
        return Err(AccountError::WeakPassword("it repeats too few different characters"));
    }
    let chars: Vec<char> = password.chars().collect();
    let step = |d: i64| {
        chars.windows(2).all(|w| {
            let (a, b) = (i64::from(u32::from(w[0])), i64::from(u32::from(w[1])));
            // Digits wrap (…8 9 0 1…).
            b - a == d || (w[0].is_ascii_digit() && w[1].is_ascii_digit() && (b - a).rem_euclid(10) == d.rem_euclid(10))
        })
    };
    if step(1) || step(-1) {
        return Err(AccountError::WeakPassword("it is one run of consecutive characters"));
    }
    Ok(())
}

/// Different characters a new password has at least.
pub const MIN_DISTINCT_CHARS: usize = 5;

/// argon2id with the crate's defaults (m=19 MiB, t=2, p=1: OWASP's recommendation).
pub fn hash_password(password: &str) -> Result<String, AccountError> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| AccountError::Hash(e.to_string()))
}

/// A PHC string with the parameters `hash_password` uses today, a random salt and a random output:
/// verifying any password against it costs one full argon2id run, as for a real account, and
/// never succeeds (no password is known to hash to 32 random bytes). Sign-in checks unknown
/// usernames against it so they take as long as known ones. Made without running argon2id, so
/// starting the server costs neither its time nor its 19 MiB.
pub fn decoy_hash() -> Result<String, AccountError> {
    use argon2::password_hash::phc::{Output, ParamsString, PasswordHash, Salt};
    fn hash_err(e: impl std::fmt::Display) -> AccountError {
        AccountError::Hash(e.to_string())
    }
    let mut salt = [0u8; Salt::RECOMMENDED_LENGTH];
    let mut output = [0u8; argon2::Params::DEFAULT_OUTPUT_LEN];
    getrandom::fill(&mut salt).map_err(hash_err)?;
    getrandom::fill(&mut output).map_err(hash_err)?;
    let argon2 = Argon2::default();
    let phc = PasswordHash {
        algorithm: argon2::Algorithm::default().ident(),
        version: Some(argon2::Version::default().into()),
        params: ParamsString::try_from(argon2.params()).map_err(hash_err)?,
        salt: Some(Salt::new(&salt).map_err(hash_err)?),
        hash: Some(Output::new(&output).map_err(hash_err)?),
    };
    Ok(phc.to_string())
}

/// Constant-work verification against a PHC string; any parse problem is a mismatch.
pub fn verify_password(hash: &str, password: &str) -> bool {
    Argon2::default().verify_password(password.as_bytes(), hash).is_ok()
}

/// A random password: 24 bytes of OS randomness, base64url (32 characters).
pub fn random_password() -> Result<String, AccountError> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| AccountError::Hash(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

pub fn get(txn: &ReadTransaction, name: &str) -> Result<Option<Account>, StoreError> {
    ACCOUNTS.get(txn, name)
}

/// The group `name`'s account is in (`None`: no account, or no group), from whichever
/// transaction the caller holds (fair sharing reads it inside a session's create).
pub fn group_of(txn: &impl crate::store::Rows, name: &str) -> Result<Option<String>, StoreError> {
    Ok(txn.get(ACCOUNTS, name)?.and_then(|a| a.group))
}

/// Whether `name` is an account that is disabled (a name no account has is not).
pub fn is_disabled(txn: &impl crate::store::Rows, name: &str) -> Result<bool, StoreError> {
    Ok(txn.get(ACCOUNTS, name)?.is_some_and(|a| a.disabled))
}

/// The accounts in `group`, by name.
pub fn members_in_write(txn: &WriteTxn, group: &str) -> Result<Vec<String>, StoreError> {
    Ok(ACCOUNTS
        .list_in_write(txn)?
        .into_iter()
        .filter(|(_, a)| a.group.as_deref() == Some(group))
        .map(|(n, _)| n)
        .collect())
}

pub fn list(txn: &ReadTransaction) -> Result<Vec<Account>, StoreError> {
    Ok(ACCOUNTS.list(txn)?.into_iter().map(|(_, a)| a).collect())
}

fn list_in_write(txn: &WriteTxn) -> Result<Vec<String>, StoreError> {
    let table = txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("admin_accounts"))?;
    let mut names = Vec::new();
    for item in redb::ReadableTable::iter(&table)? {
        let (k, _) = item?;
        names.push(k.value().to_string());
    }
    Ok(names)
}

/// Adds an account with an already-computed hash (hash outside the transaction: it is slow).
/// Names are unique without regard to case: `Admin` is refused while `admin` exists.
pub fn add(txn: &WriteTxn, name: &Username, password_hash: String, now_ms: i64) -> Result<(), AccountError> {
    add_account(txn, name, password_hash, NewAccount { role: Role::Admin, ..Default::default() }, now_ms).map(|_| ())
}

/// What an account is created with besides its name and hash.
#[derive(Debug, Clone, Default)]
pub struct NewAccount {
    pub role: Role,
    pub group: Option<String>,
    /// An admin chose or generated the password: its owner replaces it at first sign-in.
    pub must_change_password: bool,
}

/// Whether `name` is taken, without regard to case, by an account or a deleted one's name.
pub fn taken(txn: &WriteTxn, name: &str) -> Result<Option<AccountError>, StoreError> {
    if let Some(t) = list_in_write(txn)?.into_iter().find(|n| n.eq_ignore_ascii_case(name)) {
        return Ok(Some(AccountError::Exists(t)));
    }
    if let Some((t, _)) = DELETED.list_in_write(txn)?.into_iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
        return Ok(Some(AccountError::Deleted(t)));
    }
    Ok(None)
}

/// The names of deleted accounts, as they were written.
pub fn deleted_names(txn: &ReadTransaction) -> Result<Vec<String>, StoreError> {
    Ok(DELETED.list(txn)?.into_iter().map(|(n, _)| n).collect())
}

/// Every name in use or kept (accounts and deleted accounts), lower-cased: for checking many
/// new names at once (bulk import).
pub fn taken_names(txn: &ReadTransaction) -> Result<std::collections::HashMap<String, bool>, StoreError> {
    let mut names: std::collections::HashMap<String, bool> =
        DELETED.list(txn)?.into_iter().map(|(n, _)| (n.to_ascii_lowercase(), true)).collect();
    for (n, _) in ACCOUNTS.list(txn)? {
        names.insert(n.to_ascii_lowercase(), false);
    }
    Ok(names)
}

/// Adds an account with a role and an optional group; returns it.
pub fn add_account(
    txn: &WriteTxn,
    name: &Username,
    password_hash: String,
    new: NewAccount,
    now_ms: i64,
) -> Result<Account, AccountError> {
    if let Some(e) = taken(txn, name.as_str())? {
        return Err(e);
    }
    if let Some(g) = &new.group {
        check_group(g)?;
    }
    let account = Account {
        username: name.clone(),
        password_hash,
        created_at_ms: now_ms,
        password_changed_at_ms: now_ms,
        role: new.role,
        group: new.group,
        disabled: false,
        must_change_password: new.must_change_password,
        directory: None,
    };
    ACCOUNTS.put(txn, name.as_str(), &account)?;
    Ok(account)
}

/// Enabled admin accounts other than `except`, inside a write.
fn other_enabled_admins(txn: &WriteTxn, except: &str) -> Result<usize, StoreError> {
    let mut n = 0;
    for name in list_in_write(txn)? {
        if name != except
            && let Some(a) = ACCOUNTS.get_in_write(txn, &name)?
            && a.role == Role::Admin
            && !a.disabled
        {
            n += 1;
        }
    }
    Ok(n)
}

/// Changes an account's role, group or enabled state; never leaves the lab without an enabled
/// admin. Returns the account as it is now.
pub fn patch(txn: &WriteTxn, name: &Username, change: &AccountPatch) -> Result<Account, AccountError> {
    let Some(mut account) = ACCOUNTS.get_in_write(txn, name.as_str())? else {
        return Err(AccountError::NotFound(name.to_string()));
    };
    if let Some(Some(g)) = &change.group {
        check_group(g)?;
    }
    if let Some(role) = change.role {
        account.role = role;
    }
    if let Some(group) = &change.group {
        account.group = group.clone();
    }
    if let Some(disabled) = change.disabled {
        account.disabled = disabled;
    }
    let loses_admin = account.role != Role::Admin || account.disabled;
    if loses_admin && other_enabled_admins(txn, name.as_str())? == 0 {
        return Err(AccountError::LastAccount(name.to_string()));
    }
    ACCOUNTS.put(txn, name.as_str(), &account)?;
    Ok(account)
}

/// Replaces an account's password hash.
pub fn set_password(txn: &WriteTxn, name: &Username, password_hash: String, now_ms: i64) -> Result<(), AccountError> {
    set_password_as(txn, name, password_hash, now_ms, false).map(|_| ())
}

/// Sets a password; `must_change`: an admin set it, so its owner replaces it at sign-in.
pub fn set_password_as(
    txn: &WriteTxn,
    name: &Username,
    password_hash: String,
    now_ms: i64,
    must_change: bool,
) -> Result<Account, AccountError> {
    let Some(mut account) = ACCOUNTS.get_in_write(txn, name.as_str())? else {
        return Err(AccountError::NotFound(name.to_string()));
    };
    account.password_hash = password_hash;
    account.password_changed_at_ms = now_ms;
    account.must_change_password = must_change;
    ACCOUNTS.put(txn, name.as_str(), &account)?;
    Ok(account)
}

/// Deletes an account for good (`DELETE /api/v1/users/{username}`), never the last enabled
/// admin: its name is kept as a deleted account's (not given again), its pending invites go, and
/// the audit log and its sessions keep the name.
pub fn delete_account(txn: &WriteTxn, name: &Username, by: &str, now_ms: i64) -> Result<Account, AccountError> {
    let Some(account) = ACCOUNTS.get_in_write(txn, name.as_str())? else {
        return Err(AccountError::NotFound(name.to_string()));
    };
    if account.role == Role::Admin && !account.disabled && other_enabled_admins(txn, name.as_str())? == 0 {
        return Err(AccountError::LastAccount(name.to_string()));
    }
    ACCOUNTS.delete(txn, name.as_str())?;
    let kept = DeletedAccount {
        username: name.to_string(),
        role: account.role,
        deleted_at_ms: now_ms,
        deleted_by: by.to_string(),
    };
    DELETED.put(txn, name.as_str(), &kept)?;
    super::invites::forget_for(txn, name.as_str())?;
    Ok(account)
}

/// Adds many accounts in one transaction (bulk import): all or none. The names are checked
/// against those taken (accounts and deleted ones, without regard to case) once, and each other.
pub fn add_many(
    txn: &WriteTxn,
    rows: Vec<(Username, String, NewAccount)>,
    now_ms: i64,
) -> Result<Vec<Account>, AccountError> {
    let mut taken: std::collections::HashMap<String, AccountError> = std::collections::HashMap::new();
    for (n, _) in DELETED.list_in_write(txn)? {
        taken.insert(n.to_ascii_lowercase(), AccountError::Deleted(n));
    }
    for n in list_in_write(txn)? {
        taken.insert(n.to_ascii_lowercase(), AccountError::Exists(n));
    }
    let mut added = Vec::with_capacity(rows.len());
    for (name, password_hash, new) in rows {
        let key = name.as_str().to_ascii_lowercase();
        if let Some(e) = taken.remove(&key) {
            return Err(e);
        }
        if let Some(g) = &new.group {
            check_group(g)?;
        }
        let account = Account {
            username: name.clone(),
            password_hash,
            created_at_ms: now_ms,
            password_changed_at_ms: now_ms,
            role: new.role,
            group: new.group,
            disabled: false,
            must_change_password: new.must_change_password,
            directory: None,
        };
        ACCOUNTS.put(txn, name.as_str(), &account)?;
        taken.insert(key, AccountError::Exists(name.to_string()));
        added.push(account);
    }
    Ok(added)
}

/// What a directory said of a user at sign-in (`auth::directory`).
#[derive(Debug, Clone)]
pub struct DirectoryVerdict {
    /// `ldap`.
    pub source: &'static str,
    /// The DN (or subject) the directory knows the user by.
    pub id: String,
    pub groups: Vec<String>,
    pub role: Role,
    pub group: Option<String>,
    /// `false`: the directory no longer lets this user in (not found, or in no mapped group).
    pub allowed: bool,
}

/// Brings a directory user's account in line with what the directory said: made at the first
/// sign-in it allows (no local password), its role and group set from the directory at each one,
/// disabled when the directory no longer lets the user in and enabled again when it does (an
/// admin's own disabling stays). A local account of that name is never touched (its name is
/// answered as taken), and neither rule leaves the lab without an enabled admin. Answers the
/// account as it is now (`None`: refused and there was none).
pub fn sync_directory(
    txn: &WriteTxn,
    name: &Username,
    verdict: &DirectoryVerdict,
    now_ms: i64,
) -> Result<Option<Account>, AccountError> {
    let existing = ACCOUNTS.get_in_write(txn, name.as_str())?;
    if existing.as_ref().is_some_and(|a| a.directory.is_none()) {
        return Err(AccountError::Exists(name.to_string()));
    }
    // An account made by another source, or by the issuer for another subject (a claimed name
    // is not an identity: `preferred_username` can be changed at many issuers), is not this one.
    if let Some(l) = existing.as_ref().and_then(|a| a.directory.as_ref())
        && (l.source != verdict.source || (verdict.source == "oidc" && l.id != verdict.id))
    {
        return Err(AccountError::Exists(name.to_string()));
    }
    let link = |refused: bool| DirectoryLink {
        source: verdict.source.to_string(),
        id: verdict.id.clone(),
        refused,
        groups: verdict.groups.clone(),
        synced_at_ms: now_ms,
    };
    if let Some(g) = &verdict.group {
        check_group(g)?;
    }
    let account = match (existing, verdict.allowed) {
        (None, false) => return Ok(None),
        (None, true) => {
            if let Some(e) = taken(txn, name.as_str())? {
                return Err(e);
            }
            Account {
                username: name.clone(),
                password_hash: NO_PASSWORD.to_string(),
                created_at_ms: now_ms,
                password_changed_at_ms: now_ms,
                role: verdict.role,
                group: verdict.group.clone(),
                disabled: false,
                must_change_password: false,
                directory: Some(link(false)),
            }
        }
        (Some(mut a), true) => {
            let was_refused = a.directory.as_ref().is_some_and(|l| l.refused);
            let demoted = a.role == Role::Admin && verdict.role != Role::Admin && !a.disabled;
            if !demoted || other_enabled_admins(txn, name.as_str())? > 0 {
                a.role = verdict.role;
            }
            a.group = verdict.group.clone();
            if was_refused {
                a.disabled = false;
            }
            a.directory = Some(link(false));
            a
        }
        (Some(mut a), false) => {
            let last_admin = a.role == Role::Admin && !a.disabled && other_enabled_admins(txn, name.as_str())? == 0;
            if !last_admin && !a.disabled {
                a.disabled = true;
                a.directory = Some(link(true));
            } else if let Some(l) = a.directory.as_mut() {
                l.synced_at_ms = now_ms;
            }
            a
        }
    };
    ACCOUNTS.put(txn, name.as_str(), &account)?;
    Ok(Some(account))
}

/// One account inside a write.
pub fn get_in_write(txn: &WriteTxn, name: &str) -> Result<Option<Account>, StoreError> {
    ACCOUNTS.get_in_write(txn, name)
}

/// The running server's writes (the console's Account page), one transaction each: a new
/// password, a new admin; deletion is `delete_account`. The offline CLI's are in `auth::offline`.
pub async fn store_password(store: &Store, name: Username, hash: String, now_ms: i64) -> Result<Account, AccountError> {
    store.write_with(move |txn| set_password_as(txn, &name, hash, now_ms, false)).await
}

pub async fn store_new(store: &Store, name: Username, hash: String, now_ms: i64) -> Result<(), AccountError> {
    store.write_with(move |txn| add(txn, &name, hash, now_ms)).await
}

pub async fn store_account(
    store: &Store,
    name: Username,
    hash: String,
    new: NewAccount,
    now_ms: i64,
) -> Result<Account, AccountError> {
    store.write_with(move |txn| add_account(txn, &name, hash, new, now_ms)).await
}

pub async fn store_patch(store: &Store, name: Username, change: AccountPatch) -> Result<Account, AccountError> {
    store.write_with(move |txn| patch(txn, &name, &change)).await
}

/// On a store with no account at all, creates `admin` with a random password and writes that
/// password to `<data_dir>/initial-admin-password` (0600). Returns the file's path when it did.
pub async fn ensure_initial_admin(
    store: &Store,
    data_dir: &Path,
    now_ms: i64,
) -> Result<Option<PathBuf>, AccountError> {
    let data_dir = data_dir.to_path_buf();
    store
        .write_with(move |txn| {
            if !list_in_write(txn)?.is_empty() {
                return Ok(None);
            }
            let password = random_password()?;
            let hash = hash_password(&password)?;
            let name = Username::parse(INITIAL_ADMIN)?;
            add(txn, &name, hash, now_ms)?;
            let path = data_dir.join(INITIAL_PASSWORD_FILE);
            // Written before the commit: an account whose password nobody knows would lock the admin out.
            crate::auth::keys::write_private_file(&path, format!("{password}\n").as_bytes())
                .map_err(|source| AccountError::File { path: path.clone(), source })?;
            Ok(Some(path))
        })
        .await
}

/// Deletes the initial-password file once `admin` has a password of its owner's choosing.
pub fn forget_initial_password(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(INITIAL_PASSWORD_FILE));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn usernames() {
        assert!(Username::parse("admin").is_ok());
        assert!(Username::parse("a.b-c_d@e").is_ok());
        for bad in ["", "a b", "ü", "x/y", &"a".repeat(65)] {
            assert!(Username::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hashes_are_argon2id_and_verify() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password(&h, "correct horse battery"));
        assert!(!verify_password(&h, "wrong"));
        assert!(!verify_password("not a hash", "x"));
    }

    #[test]
    fn the_decoy_costs_what_a_real_hash_costs_and_opens_nothing() {
        use argon2::password_hash::phc::PasswordHash;
        let real = hash_password("correct horse battery").unwrap();
        let (d1, d2) = (decoy_hash().unwrap(), decoy_hash().unwrap());
        assert_ne!(d1, d2, "random salt and output");
        let (real, decoy) = (PasswordHash::new(&real).unwrap(), PasswordHash::new(&d1).unwrap());
        // Same algorithm, version and cost parameters: verifying against it is one full argon2id run.
        assert_eq!(decoy.algorithm, real.algorithm);
        assert_eq!(decoy.version, real.version);
        assert_eq!(decoy.params, real.params);
        assert_eq!(decoy.salt.unwrap().len(), real.salt.unwrap().len());
        assert_eq!(decoy.hash.unwrap().len(), real.hash.unwrap().len());
        for guess in ["", "correct horse battery", "admin"] {
            assert!(!verify_password(&d1, guess));
        }
    }

    #[test]
    fn password_rules() {
        assert!(check_new_password("short").is_err());
        assert!(check_new_password(&"x".repeat(MAX_PASSWORD_LEN + 1)).is_err());
        assert!(check_new_password("twelve chars").is_ok());
        for weak in [
            " ".repeat(12),
            "\0".repeat(12),
            "a".repeat(12),
            "abababababab".to_string(),
            "abcdeabcdeab".to_string().replace('e', "\u{7}"),
            "abcdefghijkl".to_string(),
            "lkjihgfedcba".to_string(),
            "345678901234".to_string(),
            "\t\n \t\n \t\n \t\n ".to_string(),
        ] {
            assert!(matches!(check_new_password(&weak), Err(AccountError::WeakPassword(_))), "{weak:?}");
        }
        assert!(check_new_password("abcdeabcdeab").is_ok(), "five different characters, not one run");
        assert!(check_new_password("correct horse battery staple").is_ok());
    }
}
