//! Single-use invite links: an admin invites an account's owner to set their own password
//! (`POST /api/v1/users/{username}/invite`), the link is good for [`INVITE_TTL_MS`] and once.
//! Only a SHA-256 of the secret is stored: the store (or a snapshot of it) cannot be turned into
//! working links. Accepting (`POST /api/v1/auth/invite`) refuses an unknown, used or expired
//! link, one for an account deleted since, and one whose inviter's account was deleted since.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redb::ReadTransaction;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::accounts::{self, Account, AccountError, Username};
use crate::store::{JsonTable, StoreError, WriteTxn};

/// How long an invite link is good for: 72 hours.
pub const INVITE_TTL_MS: i64 = 72 * 3600 * 1000;
/// Prefix of invite tokens (the secret follows: 32 random bytes, base64url).
pub const TOKEN_PREFIX: &str = "inv_";

/// SHA-256 (hex) of the secret -> the invite.
const INVITES: JsonTable<Invite> = JsonTable::new("auth_invites");

/// One invite link, stored under the hash of its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invite {
    pub username: String,
    /// Who made it (`admin:<name>`, or `local:<uid>` on the admin socket).
    pub inviter: String,
    /// The inviter's account name when it had one then: its deletion voids the link.
    pub inviter_account: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub used_at_ms: Option<i64>,
}

/// Why an invite link is refused.
#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    #[error("this invite link is not known; ask an admin of the lab for a new one")]
    Unknown,
    #[error("this invite link was used already; sign in with the password set then, or ask an admin for a new link")]
    Used,
    #[error("this invite link expired; ask an admin of the lab for a new one")]
    Expired,
    #[error("the admin who sent this invite link no longer has an account; ask another admin for a new link")]
    InviterGone,
    #[error("the account this invite link was for no longer exists")]
    AccountGone,
    #[error(transparent)]
    Account(#[from] AccountError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A fresh secret and the token carrying it.
pub fn new_token() -> Result<String, AccountError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AccountError::Hash(e.to_string()))?;
    Ok(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The key a token is stored under: SHA-256 of the whole token, hex.
pub fn token_key(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Stores a new invite for `username` (replacing any unused one of theirs: one link at a time).
pub fn create(txn: &WriteTxn, token: &str, invite: Invite) -> Result<Invite, AccountError> {
    if accounts::get_in_write(txn, &invite.username)?.is_none() {
        return Err(AccountError::NotFound(invite.username));
    }
    forget_for(txn, &invite.username)?;
    INVITES.put(txn, &token_key(token), &invite)?;
    Ok(invite)
}

/// Drops the unused invites for `username` (a new link replaces them; a deleted account's go).
pub fn forget_for(txn: &WriteTxn, username: &str) -> Result<(), StoreError> {
    for (key, inv) in INVITES.list_in_write(txn)? {
        if inv.username == username && inv.used_at_ms.is_none() {
            INVITES.delete(txn, &key)?;
        }
    }
    Ok(())
}

/// Checks a token without changing anything (before the slow password hash).
pub fn check(txn: &ReadTransaction, token: &str, now_ms: i64) -> Result<Invite, InviteError> {
    let invite = INVITES.get(txn, &token_key(token))?.ok_or(InviteError::Unknown)?;
    let account = accounts::get(txn, &invite.username)?;
    let inviter_gone = match &invite.inviter_account {
        Some(name) => accounts::get(txn, name)?.is_none(),
        None => false,
    };
    judge(&invite, account.is_some(), inviter_gone, now_ms)?;
    Ok(invite)
}

fn judge(invite: &Invite, account_exists: bool, inviter_gone: bool, now_ms: i64) -> Result<(), InviteError> {
    if invite.used_at_ms.is_some() {
        return Err(InviteError::Used);
    }
    if now_ms >= invite.expires_at_ms {
        return Err(InviteError::Expired);
    }
    if !account_exists {
        return Err(InviteError::AccountGone);
    }
    if inviter_gone {
        return Err(InviteError::InviterGone);
    }
    Ok(())
}

/// Accepts an invite: checks it again inside the write, sets the password (its owner chose it:
/// no change asked at sign-in) and marks the link used. Returns the account.
pub fn accept(txn: &WriteTxn, token: &str, password_hash: String, now_ms: i64) -> Result<Account, InviteError> {
    let key = token_key(token);
    let mut invite = INVITES.get_in_write(txn, &key)?.ok_or(InviteError::Unknown)?;
    let account = accounts::get_in_write(txn, &invite.username)?;
    let inviter_gone = match &invite.inviter_account {
        Some(name) => accounts::get_in_write(txn, name)?.is_none(),
        None => false,
    };
    judge(&invite, account.is_some(), inviter_gone, now_ms)?;
    let name = Username::parse(&invite.username)?;
    let account = accounts::set_password_as(txn, &name, password_hash, now_ms, false)?;
    invite.used_at_ms = Some(now_ms);
    INVITES.put(txn, &key, &invite)?;
    Ok(account)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn invite() -> Invite {
        Invite {
            username: "alice".into(),
            inviter: "admin:root".into(),
            inviter_account: Some("root".into()),
            created_at_ms: 0,
            expires_at_ms: INVITE_TTL_MS,
            used_at_ms: None,
        }
    }

    #[test]
    fn a_link_is_good_once_within_72_hours_while_both_accounts_exist() {
        assert!(judge(&invite(), true, false, INVITE_TTL_MS - 1).is_ok());
        assert!(matches!(judge(&invite(), true, false, INVITE_TTL_MS), Err(InviteError::Expired)));
        let used = Invite { used_at_ms: Some(5), ..invite() };
        assert!(matches!(judge(&used, true, false, 10), Err(InviteError::Used)));
        assert!(matches!(judge(&invite(), false, false, 10), Err(InviteError::AccountGone)));
        assert!(matches!(judge(&invite(), true, true, 10), Err(InviteError::InviterGone)));
    }

    #[test]
    fn tokens_are_random_and_stored_only_as_a_hash() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 43, "{a}");
        let key = token_key(&a);
        assert_eq!(key.len(), 64);
        assert!(!key.contains(&a[TOKEN_PREFIX.len()..]));
    }
}
