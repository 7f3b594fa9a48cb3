//! `gshare keys list|rotate|prune`: the internal signing keys of an existing data directory (never
//! a new ring: the server makes it on its first start). With the server running, `rotate` is its
//! `POST /api/v1/keys/rotate` over the admin socket (in force at once, audited), and `prune` asks it
//! which operator tokens its attached clusters hold; with it stopped, the ring and the state file.
//! A running server picks a pruned ring up within 10 s.

use anyhow::{Result, bail};
use axum::http::Method;

use super::client::NoBody;
use crate::auth::offline;
use crate::auth::tokens::MAX_TTL;
use crate::clock::Clock;
use crate::config::Config;
use crate::operator::key_use::{self, KeyUse};

#[derive(serde::Deserialize)]
struct Rotated {
    kid: String,
}

pub fn list(config: &Config) -> Result<()> {
    let auth = offline::existing_internal(config, Clock::system())?;
    let ttl_s = MAX_TTL.as_secs() as i64;
    println!("{:<45} {:<22} {:<12} note", "kid", "created", "state");
    for k in auth.keys() {
        let created = k.created_at.map(|t| crate::clock::rfc3339_ms(t * 1000)).unwrap_or_else(|| "-".into());
        let note = match (k.state.as_str(), k.retired_at) {
            ("retired", Some(at)) => {
                format!("verifies until pruned; prunable after {}", crate::clock::rfc3339_ms((at + ttl_s) * 1000))
            }
            ("active", _) => "signs new tokens".to_string(),
            ("configured", _) => "signs new tokens (from configuration)".to_string(),
            _ => "verifies only".to_string(),
        };
        println!("{:<45} {:<22} {:<12} {note}", k.kid, &created[..created.len().min(20)], k.state);
    }
    Ok(())
}

pub fn rotate(config: &Config) -> Result<()> {
    if config.internal_jwt_private_key.is_some() {
        bail!(
            "the signing key is set by configuration (internal_jwt_private_key / GSHARE_INTERNAL_JWT_PRIVATE_KEY); change it there"
        );
    }
    let rt = super::runtime()?;
    if let Some(server) = super::local_server(&rt, config)? {
        let r: Rotated = rt
            .block_on(server.call(Method::POST, "/api/v1/keys/rotate", None::<&NoBody>))
            .map_err(|e| anyhow::anyhow!("the server did not rotate the signing key: {e}"))?;
        println!("new signing key {}; older keys keep verifying until `gshare keys prune` (after 30 days)", r.kid);
        println!("the running server signs with it from now on");
        return Ok(());
    }
    let ring = offline::existing_internal_ring(config)?;
    let entry = ring.rotate(Clock::system().now())?;
    println!("new signing key {}; older keys keep verifying until `gshare keys prune` (after 30 days)", entry.kid);
    Ok(())
}

pub fn prune(config: &Config, older_than: &str, force: bool) -> Result<()> {
    let older_than_s = humantime::parse_duration(older_than.trim())
        .map_err(|e| anyhow::anyhow!("--older-than {older_than:?}: {e} (e.g. 30d, 12h, 0s)"))?
        .as_secs()
        .min(i64::MAX as u64) as i64;
    let ring = crate::auth::internal_ring(config);
    let now = Clock::system().now();
    // A missing ring has nothing to prune, and `prunable` creates nothing.
    let kids: Vec<String> = ring.prunable(now, older_than_s)?.into_iter().map(|k| k.kid).collect();
    if kids.is_empty() {
        println!("nothing to prune");
        return Ok(());
    }
    let needed = key_use::needing(recorded_operator_tokens(config)?, &kids, now);
    if !needed.is_empty() {
        let message = key_use::refusal(&needed);
        if !force {
            bail!("{message}");
        }
        eprintln!("--force: pruning anyway.\n{message}");
    }
    for kid in ring.prune_only(now, older_than_s, Some(&kids))? {
        println!("pruned {kid}");
    }
    Ok(())
}

/// The operator tokens gShare wrote into attached clusters: from the running server, else from
/// the state file (none when there is no state file yet).
fn recorded_operator_tokens(config: &Config) -> Result<Vec<KeyUse>> {
    const PAGE: usize = 100;
    let rt = super::runtime()?;
    if let Some(server) = super::local_server(&rt, config)? {
        return rt.block_on(async {
            let mut all = Vec::new();
            for page in 1.. {
                let path = format!("/api/v1/clusters?page={page}&size={PAGE}");
                // The cluster view is the clusters' own; `key_use` reads the operator part of it.
                let body: serde_json::Value = server
                    .call(Method::GET, &path, None::<&NoBody>)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot list the clusters to check their operator tokens: {e}"))?;
                all.extend(key_use::from_cluster_page(&body).map_err(anyhow::Error::msg)?);
                if body["data"].as_array().is_none_or(|d| d.len() < PAGE) {
                    break;
                }
            }
            Ok(all)
        });
    }
    if !config.state_file().exists() {
        return Ok(Vec::new());
    }
    rt.block_on(async {
        let store = offline::open_store(config, crate::MIGRATIONS)?;
        Ok(key_use::recorded(&store).await?)
    })
}
