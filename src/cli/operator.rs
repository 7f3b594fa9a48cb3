//! `gshare token operator`, `gshare operator manifests` and `gshare cluster attach|detach`: the
//! operator's token and objects, minted and applied by the running server over the admin socket
//! (audited there); `token operator` falls back to the key ring on disk — never a new one.

use anyhow::{Result, bail};
use axum::http::Method;
use serde::{Deserialize, Serialize};

use super::LocalServer;
use super::client::NoBody;
use crate::clock::Clock;
use crate::cluster_id::ClusterId;
use crate::config::Config;
use crate::operator::manifests;

#[derive(Serialize)]
struct TokenRequest<'a> {
    ttl: &'a str,
}

/// `POST /api/v1/clusters/{id}/operator-token`'s answer.
#[derive(Debug, Deserialize)]
pub struct OperatorToken {
    pub token: String,
    pub kid: String,
    pub expires_at: String,
}

/// The part of a cluster view `operator manifests` reads.
#[derive(Debug, Default, Deserialize)]
struct ClusterPrerequisites {
    #[serde(default)]
    prerequisites: Option<HamiMonitor>,
}

#[derive(Debug, Default, Deserialize)]
struct HamiMonitor {
    #[serde(default)]
    hami_monitor_url: Option<String>,
}

/// Attach's and detach's answer (and a refusal's `details`, which carry `objects` too).
#[derive(Debug, Default, Deserialize)]
struct Report {
    #[serde(default)]
    objects: Vec<ObjectResult>,
    #[serde(default)]
    labeled_nodes: Vec<NodeLabeling>,
    #[serde(default)]
    prerequisites: Option<Prerequisites>,
    #[serde(default)]
    profile: Option<ProfileChoice>,
    #[serde(default)]
    token: Option<TokenView>,
}

#[derive(Debug, Deserialize)]
struct ObjectResult {
    object: String,
    result: String,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct NodeLabeling {
    node: String,
    #[serde(default)]
    applied: Vec<String>,
    #[serde(default)]
    kept: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Prerequisites {
    #[serde(default)]
    checks: Vec<Prerequisite>,
}

#[derive(Debug, Deserialize)]
struct Prerequisite {
    stage: String,
    ok: bool,
    severity: String,
    #[serde(default)]
    cause: String,
    #[serde(default)]
    hint: String,
}

#[derive(Debug, Deserialize)]
struct ProfileChoice {
    profile: String,
    #[serde(default)]
    reason: String,
    pull_policy: String,
}

#[derive(Debug, Deserialize)]
struct TokenView {
    expires_at: String,
}

async fn mint(server: &LocalServer, id: &ClusterId, ttl: Option<&str>) -> Result<OperatorToken, super::ClientError> {
    let path = format!("/api/v1/clusters/{id}/operator-token");
    match ttl {
        Some(ttl) => server.call(Method::POST, &path, Some(&TokenRequest { ttl })).await,
        None => server.call(Method::POST, &path, None::<&NoBody>).await,
    }
}

/// `token operator`: the token is the last line of stdout.
pub fn token(config: &Config, cluster_id: &str, ttl: &str) -> Result<()> {
    let id = ClusterId::parse(cluster_id.trim())?;
    let ttl_d = crate::auth::tokens::parse_ttl(ttl).map_err(anyhow::Error::msg)?;
    let rt = super::runtime()?;
    if let Some(server) = super::local_server(&rt, config)? {
        let t = rt
            .block_on(mint(&server, &id, Some(ttl)))
            .map_err(|e| anyhow::anyhow!("the server refused the operator token: {e}"))?;
        eprintln!("operator token for {id} from the server (audited), kid {}, expires {}", t.kid, t.expires_at);
        println!("{}", t.token);
        return Ok(());
    }
    let internal = crate::auth::offline::existing_internal(config, Clock::system())?;
    let token = internal.mint(&id.operator_subject(), ttl_d)?;
    eprintln!(
        "operator token for {id} (offline: no server runs on {}), kid {}, valid {}",
        config.data_dir.display(),
        internal.signing_kid().unwrap_or_default(),
        humantime::format_duration(ttl_d)
    );
    println!("{token}");
    Ok(())
}

/// `operator manifests`' arguments.
#[derive(Debug, Clone)]
pub struct Manifests {
    pub cluster_id: String,
    pub image: Option<String>,
    pub control_plane_url: Option<String>,
    pub session_domain: Option<String>,
    pub token: Option<String>,
    pub no_token: bool,
}

pub fn manifests(config: &Config, args: Manifests) -> Result<()> {
    let Manifests { cluster_id, image, control_plane_url, session_domain, token, no_token } = args;
    let id = ClusterId::parse(cluster_id.trim())?;
    let control_plane_url = match control_plane_url {
        Some(u) => manifests::check_control_plane_url(&u, "--control-plane-url"),
        None => manifests::check_control_plane_url(&config.public_url, "public_url"),
    }
    .map_err(anyhow::Error::msg)?;
    let session_domain = session_domain.or(config.session_domain.clone()).ok_or_else(|| {
        anyhow::anyhow!("no session domain: pass --session-domain or set session_domain (GSHARE_SESSION_DOMAIN)")
    })?;
    let session_domain = crate::config::validate_hostname(session_domain.trim())
        .map_err(|m| anyhow::anyhow!("--session-domain: {m}"))?;
    let mut token = token.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    let mut hami_monitor_url = None;
    if no_token {
        eprintln!(
            "note: --no-token, so Secret gshare-operator-internal-jwt is left out (mint one with `gshare token operator --cluster-id {id}`)"
        );
    } else if token.is_none() {
        // Minted by the running server, so it is audited and signed by the key it checks.
        let rt = super::runtime()?;
        let Some(server) = super::local_server(&rt, config)? else {
            bail!(
                "no server runs on {} to mint the operator token: start it (gshare serve), set OPERATOR_TOKEN \
                 (gshare token operator --cluster-id {id} | tail -1), or pass --no-token",
                config.data_dir.display()
            );
        };
        let t = rt
            .block_on(mint(&server, &id, None))
            .map_err(|e| anyhow::anyhow!("the server refused the operator token: {e}"))?;
        eprintln!("operator token for {id} from the server (audited), kid {}, expires {}", t.kid, t.expires_at);
        token = Some(t.token);
        // The HAMi monitor the cluster's last probe found, as attach would pass it.
        if let Ok(c) = rt.block_on(server.call::<ClusterPrerequisites>(
            Method::GET,
            &format!("/api/v1/clusters/{id}"),
            None::<&NoBody>,
        )) {
            hami_monitor_url = c.prerequisites.and_then(|p| p.hami_monitor_url);
        }
    }
    let image = image.unwrap_or_else(|| config.operator_image.clone());
    let profile =
        crate::operator::builds::choose(&image, config.operator_build.as_deref()).map_err(anyhow::Error::msg)?;
    eprintln!(
        "RBAC profile {}: {} (imagePullPolicy {})",
        manifests::profile_name(profile.profile),
        profile.reason,
        profile.pull_policy
    );
    let params = manifests::Params {
        profile,
        hami_monitor_url,
        cluster_id: id.to_string(),
        image,
        control_plane_url,
        session_domain,
        sessions_namespace: config.sessions_namespace.clone(),
        token,
    };
    print!("{}", manifests::to_yaml(&params).map_err(anyhow::Error::msg)?);
    Ok(())
}

/// `cluster attach` or `cluster detach`.
#[derive(Debug, Clone)]
pub enum ClusterCommand {
    Attach { id: String, force: bool, replace: bool, label_nodes: bool },
    Detach { id: String, force: bool },
}

pub fn cluster(config: &Config, cmd: ClusterCommand) -> Result<()> {
    let (verb, id, query) = match &cmd {
        ClusterCommand::Attach { id, force, replace, label_nodes } => {
            let q: Vec<&str> = [(*label_nodes, "label_nodes=true"), (*force, "force=true"), (*replace, "replace=true")]
                .into_iter()
                .filter_map(|(on, q)| on.then_some(q))
                .collect();
            ("attach", id, q)
        }
        ClusterCommand::Detach { id, force } => ("detach", id, if *force { vec!["force=true"] } else { vec![] }),
    };
    let id = ClusterId::parse(id.trim())?;
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    let path = format!("/api/v1/clusters/{id}/{verb}{query}");
    let rt = super::runtime()?;
    let Some(server) = super::local_server(&rt, config)? else {
        bail!("no server runs on {}; start it (gshare serve) first", config.data_dir.display());
    };
    let answer = rt.block_on(server.call::<Report>(Method::POST, &path, None::<&NoBody>));
    let report = match &answer {
        Ok(r) => r,
        Err(e) => {
            // A refusal lists what was applied before it, like an answer.
            let partial: Report = e.details().and_then(|d| serde_json::from_value(d.clone()).ok()).unwrap_or_default();
            print_objects(&partial.objects);
            bail!("{verb} {id}: {e}");
        }
    };
    print_objects(&report.objects);
    for n in &report.labeled_nodes {
        let kept = if n.kept.is_empty() { String::new() } else { format!(" (kept: {})", n.kept.join(", ")) };
        println!("labeled        Node/{} {}{kept}", n.node, n.applied.join(" "));
    }
    for c in report.prerequisites.iter().flat_map(|p| &p.checks).filter(|c| !c.ok) {
        println!("{:<14} {}: {} ({})", c.severity, c.stage, c.cause, c.hint);
    }
    if let Some(p) = &report.profile {
        println!("RBAC profile {}: {} (imagePullPolicy {})", p.profile, p.reason, p.pull_policy);
    }
    if let Some(t) = &report.token {
        println!("operator token in Secret gshare-system/gshare-operator-internal-jwt expires {}", t.expires_at);
    }
    Ok(())
}

fn print_objects(objects: &[ObjectResult]) {
    for o in objects {
        let extra = match (o.status, &o.message) {
            (Some(s), Some(m)) => format!("  ({s}: {m})"),
            (None, Some(m)) => format!("  ({m})"),
            _ => String::new(),
        };
        println!("{:<14} {}{extra}", o.result, o.object);
    }
}
