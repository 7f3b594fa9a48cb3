//! Secrets typed at a terminal or piped in: new passwords and snapshot passphrases.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::snapshot::secrets::Passphrase;

/// A new password: typed twice without echo on a terminal, else the first line of stdin.
pub fn new_password(name: &str) -> Result<String> {
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("new password for {name}: "))?;
        let again = rpassword::prompt_password("again: ")?;
        if first != again {
            bail!("the two passwords differ; nothing changed");
        }
        Ok(first)
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).context("cannot read the password from stdin")?;
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }
}

/// A passphrase from `file`, $GSHARE_SNAPSHOT_PASSPHRASE, or a terminal prompt (`confirm`: twice).
pub fn passphrase(file: Option<&Path>, confirm: bool) -> Result<Passphrase> {
    let text = if let Some(f) = file {
        let t =
            std::fs::read_to_string(f).with_context(|| format!("cannot read the passphrase file {}", f.display()))?;
        t.lines().next().unwrap_or_default().to_string()
    } else if let Ok(v) = std::env::var("GSHARE_SNAPSHOT_PASSPHRASE") {
        v
    } else if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("snapshot passphrase: ")?;
        if confirm && rpassword::prompt_password("again: ")? != first {
            bail!("the two passphrases differ");
        }
        first
    } else {
        bail!("no passphrase: pass --passphrase-file FILE or set GSHARE_SNAPSHOT_PASSPHRASE");
    };
    Ok(Passphrase::new(text)?)
}
