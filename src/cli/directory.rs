//! `gshare config check --ldap-test USER`: signs USER in against the configured directory (the
//! password typed without echo, or the first line of stdin) and prints each step — connect,
//! bind, search, groups, bind as the user, and the role and group the mapping gives — with its
//! time. Nothing is written: no account is made or changed.

use std::io::IsTerminal;

use anyhow::{Context, Result, bail};

use crate::auth::directory::ldap::{LdapDirectory, Outcome};
use crate::config::Config;

pub fn ldap_test(config: &Config, user: &str) -> Result<()> {
    let Some(settings) = &config.ldap else {
        bail!("no [ldap] table in the configuration: nothing to test");
    };
    let password = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("directory password for {user}: "))?
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).context("cannot read the password from stdin")?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = LdapDirectory::new(settings).map_err(anyhow::Error::msg)?;
    let rt = super::runtime()?;
    let mut trace = Vec::new();
    let res = rt.block_on(dir.authenticate(user, &password, &mut trace));
    for s in &trace {
        println!(
            "{:<5} {:<13} {:>6} ms  {}",
            if s.ok { "ok" } else { "FAIL" },
            s.name,
            s.elapsed.as_millis(),
            s.detail
        );
    }
    match res {
        Err(e) => bail!("{e}"),
        Ok(Outcome::WrongPassword) => bail!("the directory refused the password of {user}"),
        Ok(Outcome::NoSuchUser) => bail!("the directory has no single entry for {user}"),
        Ok(Outcome::Accepted(u)) if !u.allowed => {
            bail!("{user} is in none of the mapped groups: sign-in would be refused (ldap.unmapped = \"refuse\")")
        }
        Ok(Outcome::Accepted(u)) => {
            println!(
                "{} would sign in as `{}`: role {}, group {}",
                user,
                u.username,
                u.role.as_str(),
                u.group.as_deref().unwrap_or("(none)")
            );
            Ok(())
        }
    }
}
