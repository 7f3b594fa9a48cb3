//! `gshare admin token|add|set-password|remove|list`: through the running server's admin socket
//! (validated and audited there, actor `local:<uid>`), else on the state file (actor `cli`).

use anyhow::{Context, Result, bail};
use axum::http::Method;
use serde::{Deserialize, Serialize};

use super::client::NoBody;
use crate::auth::offline;
use crate::clock::Clock;
use crate::config::Config;

/// What an account command does.
#[derive(Debug, Clone)]
pub enum AccountCommand {
    Add { name: String },
    SetPassword { name: String },
    Remove { name: String },
    List,
}

/// An admin account as `GET /api/v1/admins` lists it.
#[derive(Debug, Deserialize)]
pub struct Admin {
    pub username: String,
    pub created_at: String,
    pub password_changed_at: String,
}

#[derive(Debug, Deserialize)]
struct AdminList {
    data: Vec<Admin>,
}

#[derive(Serialize)]
struct NewAdmin<'a> {
    username: &'a str,
    password: &'a str,
}

#[derive(Serialize)]
struct NewPassword<'a> {
    password: &'a str,
}

/// `admin token`: an admin API token (last line of stdout), minted from the existing key ring.
pub fn token(config: &Config, name: &str, ttl: &str) -> Result<()> {
    let ttl = crate::auth::tokens::parse_ttl(ttl).map_err(anyhow::Error::msg)?;
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
        bail!("admin name `{name}` must be 1-64 characters from A-Z a-z 0-9 - _ . @");
    }
    let token = offline::mint_admin_token(config, Clock::system(), name, ttl)
        .with_context(|| format!("cannot mint an admin token from the keys under {}", config.keys_dir().display()))?;
    eprintln!("admin token for {name}, valid {}", humantime::format_duration(ttl));
    println!("{token}");
    Ok(())
}

/// `admin add|set-password|remove|list`.
pub fn accounts(config: &Config, cmd: AccountCommand) -> Result<()> {
    let rt = super::runtime()?;
    match super::local_server(&rt, config)? {
        Some(server) => rt.block_on(online(&server, cmd)),
        None => rt.block_on(offline(config, cmd)),
    }
}

fn print_list(admins: &[Admin]) {
    println!("{:<32} {:<26} password changed", "username", "created");
    for a in admins {
        println!("{:<32} {:<26} {}", a.username, a.created_at, a.password_changed_at);
    }
}

fn path_segment(name: &str) -> String {
    // Usernames are letters, digits and `-_.@`; anything else is refused by the server as unknown.
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.@".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn online(server: &super::LocalServer, cmd: AccountCommand) -> Result<()> {
    match cmd {
        AccountCommand::Add { name } => {
            let password = super::prompt::new_password(&name)?;
            let added: Admin = server
                .call(Method::POST, "/api/v1/admins", Some(&NewAdmin { username: &name, password: &password }))
                .await
                .with_context(|| format!("admin account `{name}` was not added"))?;
            println!("admin account `{}` added", added.username);
        }
        AccountCommand::SetPassword { name } => {
            let password = super::prompt::new_password(&name)?;
            server
                .call_empty(
                    Method::POST,
                    &format!("/api/v1/admins/{}/password", path_segment(&name)),
                    Some(&NewPassword { password: &password }),
                )
                .await
                .with_context(|| format!("the password of `{name}` was not changed"))?;
            println!("password of `{name}` changed; its earlier sessions are signed out");
        }
        AccountCommand::Remove { name } => {
            server
                .call_empty(Method::DELETE, &format!("/api/v1/admins/{}", path_segment(&name)), None::<&NoBody>)
                .await
                .with_context(|| format!("admin account `{name}` was not removed"))?;
            println!("admin account `{name}` removed; its sessions are signed out");
        }
        AccountCommand::List => {
            let list: AdminList = server.call(Method::GET, "/api/v1/admins", None::<&NoBody>).await?;
            print_list(&list.data);
        }
    }
    Ok(())
}

async fn offline(config: &Config, cmd: AccountCommand) -> Result<()> {
    let clock = Clock::system();
    let store = offline::open_store(config, crate::MIGRATIONS)?;
    offline::ensure_initial(&store, config, &clock).await?;
    match cmd {
        AccountCommand::SetPassword { name } => {
            let password = super::prompt::new_password(&name)?;
            let name = offline::set_password(&store, &clock, config, &name, password).await?;
            println!("password of `{name}` changed; its earlier sessions are signed out");
        }
        AccountCommand::Add { name } => {
            let password = super::prompt::new_password(&name)?;
            let name = offline::add(&store, &clock, &name, password).await?;
            println!("admin account `{name}` added");
        }
        AccountCommand::List => {
            let admins: Vec<Admin> = offline::list(&store)
                .await?
                .into_iter()
                .map(|a| Admin {
                    username: a.username.to_string(),
                    created_at: a.created_at,
                    password_changed_at: a.password_changed_at,
                })
                .collect();
            print_list(&admins);
        }
        AccountCommand::Remove { name } => {
            let name = offline::remove(&store, &clock, &name).await?;
            println!("admin account `{name}` removed; its sessions are signed out");
        }
    }
    Ok(())
}
