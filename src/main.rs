//! The `gshare` command line: parse, load config, call into the library.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use gshare::auth::keys::KeyRingDir;
use gshare::auth::tokens::{self, AUD_INTERNAL, MAX_TTL, TokenAuthority};
use gshare::clock::Clock;
use gshare::clusters::ClusterId;
use gshare::config::{Config, LogFormat};
use gshare::snapshot::secrets::Passphrase;

/// jemalloc instead of glibc's malloc: under the operators' steady flood glibc spent a quarter of
/// the server's CPU in malloc/free (`perf`, 40,000 GPUs) and its arenas kept what a storm took
/// (RSS 228 MiB after the fleet mix, 824 MiB at 4x the fleet); jemalloc's background thread
/// returns freed pages within seconds. Figures: README "Memory".
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Lets jemalloc purge unused pages on its own thread, so an idle server gives back what a burst
/// took (without it, pages are only purged when later allocations happen).
fn return_freed_memory() {
    #[cfg(not(target_env = "msvc"))]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "jemalloc background purging is off: freed memory returns only on later allocations");
    }
}

#[derive(Parser)]
#[command(
    name = "gshare",
    version,
    about = "gShare Edge: the gShare GPU-sharing control plane in one binary",
    long_about = "gShare Edge registers Kubernetes GPU clusters, applies GShareSession resources to them and \
accepts the callbacks of the gShare operator running in each cluster.\n\n\
Start with `gshare serve`: with no configuration it keeps its state in ./gshare-data and listens on \
127.0.0.1:8080. Settings come from built-in defaults, then a TOML file (--config, $GSHARE_CONFIG, or \
/etc/gshare/config.toml when present), then GSHARE_* environment variables; `gshare config check` prints the result."
)]
struct Cli {
    /// TOML configuration file (default: $GSHARE_CONFIG, else /etc/gshare/config.toml if it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane: the API, operator callbacks and the console on one port.
    Serve,
    /// Mint tokens offline, from the signing keys in the data directory.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Administrator access to the API.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Manage the internal JWT signing keys (the ones operators' tokens are checked against).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Validate the configuration and print it, secrets redacted.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The audit log: logins and admin changes.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Snapshots of the state file: save (also while the server runs), list, prune, restore.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Write clusters, nodes, GPUs, offerings, sessions and audit as JSON lines
    /// (`{"kind": ..., "record": ...}` per line; see the README's "Export" section).
    Export {
        /// Output format; only `json` (JSON lines).
        #[arg(long, default_value = "json", value_parser = ["json"])]
        format: String,
        /// Read a snapshot file instead of the live state.
        #[arg(long, value_name = "SNAPSHOT")]
        from: Option<PathBuf>,
        /// Write here instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// The gShare operator's Kubernetes objects.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// Registered clusters, through the running server.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Print a completion script for a shell. The packages install them
    /// (bash-completion, zsh, fish); by hand: `gshare completions bash > ~/.local/share/bash-completion/completions/gshare`.
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

/// The shells `gshare completions` writes for.
#[derive(Clone, Copy, clap::ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Self::Bash => clap_complete::Shell::Bash,
            Self::Zsh => clap_complete::Shell::Zsh,
            Self::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// The completion script for `shell`, from the clap definitions.
fn completion_script(shell: CompletionShell) -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_complete::generate(shell.generator(), &mut Cli::command(), "gshare", &mut out);
    out
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Print every object the operator needs on a cluster (upstream's chart): 3 CRDs, namespaces,
    /// RBAC, the token Secret and the Deployment. The token is OPERATOR_TOKEN if set, else minted
    /// by the running server (audited); `--no-token` leaves the Secret out.
    ///
    /// Example: `gshare operator manifests --cluster-id clu_… | kubectl apply -f -`.
    Manifests {
        #[arg(long, value_name = "CLUSTER_ID")]
        cluster_id: String,
        /// Operator image (default: operator_image).
        #[arg(long, value_name = "REF")]
        image: Option<String>,
        /// URL the operator calls back and ingress forward-auth uses (default: public_url).
        #[arg(long, value_name = "URL")]
        control_plane_url: Option<String>,
        /// Session domain; must equal this server's (default: session_domain).
        #[arg(long, value_name = "D")]
        session_domain: Option<String>,
        /// The operator token for Secret gshare-operator-internal-jwt (default: minted by the running server).
        #[arg(long, env = "OPERATOR_TOKEN", hide_env_values = true, value_name = "JWT")]
        token: Option<String>,
        /// Leave the token Secret out (apply it later, e.g. from `gshare token operator`).
        #[arg(long, conflicts_with = "token")]
        no_token: bool,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// Take a snapshot now: into FILE, else into snapshot_dir. Works while the server runs
    /// (through its API, with an admin token minted from the data directory's keys).
    Save {
        file: Option<PathBuf>,
        /// A short word in the header and file name.
        #[arg(long, default_value = "manual")]
        reason: String,
        /// Add the key rings and kubeconfigs, encrypted with a passphrase (age, scrypt).
        #[arg(long)]
        include_secrets: bool,
        /// The passphrase's file (first line); else $GSHARE_SNAPSHOT_PASSPHRASE, else a prompt.
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
        /// Only if another gshare version last ran on this data directory (the unit's ExecStartPre):
        /// reason `pre-upgrade`, never pruned. Does nothing otherwise.
        #[arg(long)]
        pre_upgrade: bool,
    },
    /// List the snapshots in snapshot_dir, oldest first.
    Ls,
    /// Delete all but the newest N snapshots in snapshot_dir (pre-upgrade ones stay).
    Prune {
        #[arg(long)]
        keep: usize,
    },
    /// Replace the state with a snapshot (server stopped). The current state file is kept
    /// beside it as gshare.redb.before-restore-<time>.
    Restore {
        file: PathBuf,
        /// For snapshots with secrets: the passphrase's file; else $GSHARE_SNAPSHOT_PASSPHRASE, else a prompt.
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
        /// Restore the state only, even if the snapshot holds secrets.
        #[arg(long)]
        skip_secrets: bool,
    },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Attach the operator: apply its objects through the cluster's kubeconfig (the server must run).
    Attach {
        id: String,
        /// Replace CRDs on the cluster that differ from the shipped ones.
        #[arg(long)]
        force: bool,
        /// Delete an operator Deployment another tool installed (Helm, deploy-operator.sh) and create gShare's.
        #[arg(long)]
        replace: bool,
        /// Apply upstream's node labels (GPU nodes: gpu=on, gshare.io/gpu=true,
        /// gshare.io/gpu-mode=fractional; CPU nodes: gshare.io/node-type=cpu) where missing.
        #[arg(long)]
        label_nodes: bool,
    },
    /// Remove what attach made (refused while the cluster has live sessions): custom resources
    /// first, then the operator, its RBAC and namespaces, the CRDs last.
    Detach {
        id: String,
        /// Remove the finalizers of custom resources an operator will not clear.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print an operator token for one cluster (the Secret `gshare-operator-internal-jwt`, key `internal-jwt`).
    ///
    /// The token is the last line on stdout, so `TOKEN=$(gshare token operator --cluster-id clu_… | tail -1)` works.
    Operator {
        /// The cluster's id, as returned by registration (clu_<ULID> or clu_local).
        #[arg(long, value_name = "CLUSTER_ID")]
        cluster_id: String,
        /// How long the token stays valid: e.g. 24h, 7d (at most 30d).
        #[arg(long, default_value = "7d", allow_hyphen_values = true)]
        ttl: String,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Print an admin API token (last line of stdout) for `Authorization: Bearer` on /api/v1.
    ///
    /// Example: `ADMIN_JWT=$(gshare admin token | tail -1)`.
    Token {
        /// How long the token stays valid: e.g. 15m, 1h, 8h (at most 30d).
        #[arg(long, default_value = "1h", allow_hyphen_values = true)]
        ttl: String,
        /// The account the token acts as (recorded in the audit log).
        #[arg(long, default_value = "admin")]
        name: String,
    },
    /// Set an account's password: typed twice on a terminal, else the first line of stdin.
    ///
    /// Works on the state file, so stop the server first. Signs out the account's sessions.
    SetPassword {
        /// The account (default: admin).
        #[arg(default_value = "admin")]
        name: String,
    },
    /// Add an admin account; its password is read like `set-password` (server stopped).
    Add { name: String },
    /// List the admin accounts (server stopped).
    List,
    /// Remove an admin account; the last one can't be removed (server stopped).
    Remove { name: String },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Print the newest audit entries, oldest first (server stopped; while it runs use GET /api/v1/audit).
    Tail {
        /// How many entries.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// List the signing keys: kid, created, state.
    List,
    /// Make a new signing key; tokens signed by older keys keep verifying until pruned.
    Rotate,
    /// Drop keys retired for longer than the longest token lifetime (30 days). Refuses, naming
    /// the clusters, while an attached cluster's current operator token was signed by a key it
    /// would drop and has not expired.
    Prune {
        /// Drop keys retired longer ago than this (e.g. `2h`, `0s`). Operator tokens minted by
        /// hand (`gshare token operator`) are not recorded: below 30 days they may stop verifying.
        #[arg(long, default_value = "30d")]
        older_than: String,
        /// Prune even when an attached cluster's live operator token needs the key (its operator
        /// is refused until the token is renewed).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check the effective configuration; exits non-zero naming the offending key.
    Check,
}

fn process_env() -> BTreeMap<String, String> {
    std::env::vars().filter(|(k, _)| k.starts_with("GSHARE_")).collect()
}

fn init_logging(config: &Config) {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log_level.clone());
    let filter =
        tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal; journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        // Every field value escaped: operator- and client-sent text cannot start a log line.
        LogFormat::Human => builder.fmt_fields(gshare::logging::EscapedFields).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gshare: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // Needs no configuration (a package's build runs it without one).
    if let Command::Completions { shell } = cli.command {
        use std::io::Write;
        std::io::stdout().write_all(&completion_script(shell)).context("cannot write the completion script")?;
        return Ok(());
    }
    let env = process_env();
    let config = Config::load(cli.config.as_deref(), &env)?;
    match cli.command {
        Command::Config(ConfigCommand::Check) => {
            match &config.source {
                Some(p) => println!("# effective configuration (file: {})", p.display()),
                None => println!("# effective configuration (no file; defaults and environment)"),
            }
            print!("{}", config.render_redacted());
            Ok(())
        }
        Command::Serve => serve(config),
        // Answered before the configuration is read.
        Command::Completions { .. } => Ok(()),
        Command::Token(TokenCommand::Operator { cluster_id, ttl }) => {
            let id = ClusterId::parse(cluster_id.trim())?;
            let ttl_d = tokens::parse_ttl(&ttl).map_err(anyhow::Error::msg)?;
            // Through the server when it runs (audited), else from the key ring on disk — never a new one.
            let rt = offline_runtime()?;
            if rt.block_on(gshare::operator::cli::server_running(&config)) {
                let (status, body) = rt
                    .block_on(gshare::operator::cli::call(
                        &config,
                        "POST",
                        &format!("/api/v1/clusters/{id}/operator-token"),
                        Some(serde_json::json!({ "ttl": ttl })),
                    ))
                    .map_err(anyhow::Error::msg)?;
                if status != 201 {
                    bail!("the server refused ({status}): {}", gshare::operator::cli::error_message(&body));
                }
                eprintln!(
                    "operator token for {id} from the server, kid {}, expires {}",
                    body["kid"].as_str().unwrap_or_default(),
                    body["expires_at"].as_str().unwrap_or_default()
                );
                println!("{}", body["token"].as_str().unwrap_or_default());
                return Ok(());
            }
            let internal =
                gshare::operator::cli::existing_internal(&config, Clock::system()).map_err(anyhow::Error::msg)?;
            let token = internal.mint(&id.operator_subject(), ttl_d)?;
            eprintln!(
                "operator token for {id} (offline: no server answers on {}), kid {}, valid {}",
                config.listen,
                internal.signing_kid().unwrap_or_default(),
                humantime::format_duration(ttl_d)
            );
            println!("{token}");
            Ok(())
        }
        Command::Operator(OperatorCommand::Manifests {
            cluster_id,
            image,
            control_plane_url,
            session_domain,
            token,
            no_token,
        }) => {
            use gshare::operator::manifests;
            let id = ClusterId::parse(cluster_id.trim())?;
            let control_plane_url = match control_plane_url {
                Some(u) => manifests::check_control_plane_url(&u, "--control-plane-url"),
                None => manifests::check_control_plane_url(&config.public_url, "public_url"),
            }
            .map_err(anyhow::Error::msg)?;
            let session_domain = session_domain.or(config.session_domain.clone()).ok_or_else(|| {
                anyhow::anyhow!(
                    "no session domain: pass --session-domain or set session_domain (GSHARE_SESSION_DOMAIN)"
                )
            })?;
            let session_domain = gshare::config::validate_hostname(session_domain.trim())
                .map_err(|m| anyhow::anyhow!("--session-domain: {m}"))?;
            let mut token = token.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
            let mut hami_monitor_url = None;
            if no_token {
                eprintln!(
                    "note: --no-token, so Secret gshare-operator-internal-jwt is left out (mint one with `gshare token operator --cluster-id {id}`)"
                );
            } else if token.is_none() {
                // Minted by the running server, so it is audited and signed by the key it checks.
                let rt = offline_runtime()?;
                if !rt.block_on(gshare::operator::cli::server_running(&config)) {
                    bail!(
                        "no server answers on {} to mint the operator token: start it (gshare serve), set \
                         OPERATOR_TOKEN (gshare token operator --cluster-id {id} | tail -1), or pass --no-token",
                        config.listen
                    );
                }
                let (status, body) = rt
                    .block_on(gshare::operator::cli::call(
                        &config,
                        "POST",
                        &format!("/api/v1/clusters/{id}/operator-token"),
                        None,
                    ))
                    .map_err(anyhow::Error::msg)?;
                if status != 201 {
                    bail!(
                        "the server refused the operator token ({status}): {}",
                        gshare::operator::cli::error_message(&body)
                    );
                }
                eprintln!(
                    "operator token for {id} from the server (audited), kid {}, expires {}",
                    body["kid"].as_str().unwrap_or_default(),
                    body["expires_at"].as_str().unwrap_or_default()
                );
                token = body["token"].as_str().map(str::to_string);
                // The HAMi monitor the cluster's last probe found, as attach would pass it.
                if let Ok((200, c)) =
                    rt.block_on(gshare::operator::cli::call(&config, "GET", &format!("/api/v1/clusters/{id}"), None))
                {
                    hami_monitor_url = c["prerequisites"]["hami_monitor_url"].as_str().map(str::to_string);
                }
            }
            let image = image.unwrap_or_else(|| config.operator_image.clone());
            let profile = gshare::operator::builds::choose(&image, config.operator_build.as_deref())
                .map_err(anyhow::Error::msg)?;
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
        Command::Cluster(cmd) => {
            let (path, id) = match &cmd {
                ClusterCommand::Attach { id, force, replace, label_nodes } => {
                    let mut q: Vec<&str> = Vec::new();
                    if *label_nodes {
                        q.push("label_nodes=true");
                    }
                    if *force {
                        q.push("force=true");
                    }
                    if *replace {
                        q.push("replace=true");
                    }
                    let q = if q.is_empty() { String::new() } else { format!("?{}", q.join("&")) };
                    (format!("/api/v1/clusters/{}/attach{q}", id.trim()), id)
                }
                ClusterCommand::Detach { id, force } => {
                    (format!("/api/v1/clusters/{}/detach{}", id.trim(), if *force { "?force=true" } else { "" }), id)
                }
            };
            let rt = offline_runtime()?;
            if !rt.block_on(gshare::operator::cli::server_running(&config)) {
                bail!("no server answers on {}; start it (gshare serve) first", config.listen);
            }
            let (status, body) =
                rt.block_on(gshare::operator::cli::call(&config, "POST", &path, None)).map_err(anyhow::Error::msg)?;
            if let Some(objects) = body["objects"].as_array().or(body["error"]["details"]["objects"].as_array()) {
                for o in objects {
                    let extra = match (o["status"].as_u64(), o["message"].as_str()) {
                        (Some(s), Some(m)) => format!("  ({s}: {m})"),
                        (None, Some(m)) => format!("  ({m})"),
                        _ => String::new(),
                    };
                    println!(
                        "{:<14} {}{extra}",
                        o["result"].as_str().unwrap_or("?"),
                        o["object"].as_str().unwrap_or("?")
                    );
                }
            }
            if status != 200 {
                bail!(
                    "{} {id}: {}",
                    if path.ends_with("detach") { "detach" } else { "attach" },
                    gshare::operator::cli::error_message(&body)
                );
            }
            for n in body["labeled_nodes"].as_array().into_iter().flatten() {
                println!(
                    "labeled        Node/{} {}{}",
                    n["node"].as_str().unwrap_or("?"),
                    n["applied"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(" "))
                        .unwrap_or_default(),
                    n["kept"]
                        .as_array()
                        .filter(|k| !k.is_empty())
                        .map(|k| format!(
                            " (kept: {})",
                            k.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
                        ))
                        .unwrap_or_default()
                );
            }
            for c in body["prerequisites"]["checks"].as_array().into_iter().flatten().filter(|c| c["ok"] == false) {
                println!(
                    "{:<14} {}: {} ({})",
                    c["severity"].as_str().unwrap_or("?"),
                    c["stage"].as_str().unwrap_or("?"),
                    c["cause"].as_str().unwrap_or(""),
                    c["hint"].as_str().unwrap_or("")
                );
            }
            if let Some(p) = body["profile"].as_object() {
                println!(
                    "RBAC profile {}: {} (imagePullPolicy {})",
                    p.get("profile").and_then(|v| v.as_str()).unwrap_or("?"),
                    p.get("reason").and_then(|v| v.as_str()).unwrap_or(""),
                    p.get("pull_policy").and_then(|v| v.as_str()).unwrap_or("?")
                );
            }
            if let Some(exp) = body["token"]["expires_at"].as_str() {
                println!("operator token in Secret gshare-system/gshare-operator-internal-jwt expires {exp}");
            }
            Ok(())
        }
        Command::Admin(AdminCommand::Token { ttl, name }) => {
            let ttl = tokens::parse_ttl(&ttl).map_err(anyhow::Error::msg)?;
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
            {
                bail!("admin name `{name}` must be 1-64 characters from A-Z a-z 0-9 - _ . @");
            }
            let (auth, _) = gshare::auth::Authorities::open(&config, Clock::system())
                .with_context(|| format!("cannot open the signing keys under {}", config.keys_dir().display()))?;
            let token = auth.api.mint(&format!("{}{name}", gshare::auth::guard::ADMIN_PREFIX), ttl)?;
            eprintln!("admin token for {name}, valid {}", humantime::format_duration(ttl));
            println!("{token}");
            Ok(())
        }
        Command::Keys(cmd) => keys(&config, cmd),
        Command::Snapshot(cmd) => snapshot(&config, cmd),
        Command::Export { format: _, from, output } => export(&config, from, output),
        Command::Admin(cmd) => admin_accounts(&config, cmd),
        Command::Audit(AuditCommand::Tail { lines }) => offline_runtime()?.block_on(async {
            let store = gshare::auth::offline::open_store(&config, gshare::MIGRATIONS)?;
            for rec in gshare::auth::offline::audit_tail(&store, lines.clamp(1, 10_000)).await? {
                println!("{}", gshare::audit::format_line(&rec));
            }
            Ok(())
        }),
    }
}

fn keys(config: &Config, cmd: KeysCommand) -> Result<()> {
    let clock = Clock::system();
    let ring = gshare::auth::internal_ring(config);
    let ttl_s = MAX_TTL.as_secs() as i64;
    match cmd {
        KeysCommand::List => {
            let (auth, _) = open_internal(config, &ring, &clock)?;
            println!("{:<45} {:<22} {:<12} note", "kid", "created", "state");
            for k in auth.keys() {
                let created = k.created_at.map(|t| gshare::clock::rfc3339_ms(t * 1000)).unwrap_or_else(|| "-".into());
                let note = match (k.state.as_str(), k.retired_at) {
                    ("retired", Some(at)) => format!(
                        "verifies until pruned; prunable after {}",
                        gshare::clock::rfc3339_ms((at + ttl_s) * 1000)
                    ),
                    ("active", _) => "signs new tokens".to_string(),
                    ("configured", _) => "signs new tokens (from configuration)".to_string(),
                    _ => "verifies only".to_string(),
                };
                println!("{:<45} {:<22} {:<12} {note}", k.kid, &created[..created.len().min(20)], k.state);
            }
            Ok(())
        }
        KeysCommand::Rotate => {
            if config.internal_jwt_private_key.is_some() {
                bail!(
                    "the signing key is set by configuration (internal_jwt_private_key / GSHARE_INTERNAL_JWT_PRIVATE_KEY); change it there"
                );
            }
            let entry = ring.rotate(clock.now())?;
            println!(
                "new signing key {}; older keys keep verifying until `gshare keys prune` (after 30 days)",
                entry.kid
            );
            println!("a running server picks the new key up within 10 s");
            Ok(())
        }
        KeysCommand::Prune { older_than, force } => {
            let older_than_s = humantime::parse_duration(older_than.trim())
                .map_err(|e| anyhow::anyhow!("--older-than {older_than:?}: {e} (e.g. 30d, 12h, 0s)"))?
                .as_secs()
                .min(i64::MAX as u64) as i64;
            let now = clock.now();
            let kids: Vec<String> = ring.prunable(now, older_than_s)?.into_iter().map(|k| k.kid).collect();
            if kids.is_empty() {
                println!("nothing to prune");
                return Ok(());
            }
            let needed = gshare::operator::key_use::needing(recorded_operator_tokens(config)?, &kids, now);
            if !needed.is_empty() {
                let message = gshare::operator::key_use::refusal(&needed);
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
    }
}

/// The operator tokens gShare wrote into attached clusters: from the running server, else from
/// the state file (none when there is no state file yet).
fn recorded_operator_tokens(config: &Config) -> Result<Vec<gshare::operator::key_use::KeyUse>> {
    use gshare::operator::{cli, key_use};
    let rt = offline_runtime()?;
    if rt.block_on(cli::server_running(config)) {
        let mut all = Vec::new();
        for page in 1.. {
            let path = format!("/api/v1/clusters?page={page}&size=100");
            let (status, body) = rt.block_on(cli::call(config, "GET", &path, None)).map_err(anyhow::Error::msg)?;
            if status != 200 {
                bail!(
                    "cannot list the clusters to check their operator tokens ({status}): {}",
                    cli::error_message(&body)
                );
            }
            let uses = key_use::from_cluster_page(&body).map_err(anyhow::Error::msg)?;
            all.extend(uses);
            if body["data"].as_array().is_none_or(|d| d.len() < 100) {
                break;
            }
        }
        return Ok(all);
    }
    if !config.state_file().exists() {
        return Ok(Vec::new());
    }
    rt.block_on(async {
        let store = gshare::auth::offline::open_store(config, gshare::MIGRATIONS)?;
        Ok(key_use::recorded(&store).await?)
    })
}

/// A passphrase from `file`, $GSHARE_SNAPSHOT_PASSPHRASE, or a terminal prompt (`confirm`: twice).
fn read_passphrase(file: Option<&std::path::Path>, confirm: bool) -> Result<Passphrase> {
    use std::io::IsTerminal;
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

/// The snapshot bytes of the live state: from the file when no server holds it, else from the
/// server (`download`). `Ok(None)` when the server wrote it into its snapshot_dir itself.
fn live_snapshot(
    config: &Config,
    reason: &str,
    download: bool,
    pass: Option<&Passphrase>,
) -> Result<Result<Vec<u8>, gshare::snapshot::SnapshotInfo>> {
    use gshare::snapshot::{self, SnapshotError, client};
    let now = Clock::system().now_ms();
    match snapshot::save_offline(config, now, reason, pass) {
        Ok(bytes) => Ok(Ok(bytes)),
        Err(SnapshotError::Locked) => {
            let (auth, _) = gshare::auth::Authorities::open(config, Clock::system())
                .with_context(|| format!("cannot open the signing keys under {}", config.keys_dir().display()))?;
            let token =
                auth.api.mint(&format!("{}cli", gshare::auth::guard::ADMIN_PREFIX), Duration::from_secs(300))?;
            let download = download || pass.is_some();
            match offline_runtime()?.block_on(client::request(config, &token, reason, download))? {
                client::Answer::Saved(info) => Ok(Err(info)),
                client::Answer::Downloaded(bytes) => match pass {
                    Some(p) => Ok(Ok(snapshot::add_secrets(&bytes, config, p)?)),
                    None => Ok(Ok(bytes)),
                },
            }
        }
        Err(e) => Err(e.into()),
    }
}

fn print_saved(info: &gshare::snapshot::SnapshotInfo, bytes: Option<&[u8]>) {
    println!("saved {} ({} bytes, schema {}, sha256 {})", info.path, info.size_bytes, info.schema_version, info.sha256);
    if let Some(h) = bytes.and_then(|b| gshare::snapshot::format::read_header(b).ok()).map(|(h, _)| h) {
        for left in &h.secrets.omitted {
            println!("left out (use --include-secrets to add them, encrypted): {left}");
        }
    }
}

fn snapshot(config: &Config, cmd: SnapshotCommand) -> Result<()> {
    use gshare::snapshot;
    let now = Clock::system().now_ms();
    match cmd {
        SnapshotCommand::Save { file, reason, include_secrets, passphrase_file, pre_upgrade } => {
            let reason = if pre_upgrade {
                match snapshot::upgrade_pending(config) {
                    None => {
                        eprintln!(
                            "no upgrade pending (no state file, or gshare {} ran last)",
                            env!("CARGO_PKG_VERSION")
                        );
                        return Ok(());
                    }
                    Some(from) => {
                        eprintln!(
                            "gshare {from} ran last on this data directory; snapshot before {} opens it",
                            env!("CARGO_PKG_VERSION")
                        );
                        "pre-upgrade".to_string()
                    }
                }
            } else {
                reason
            };
            snapshot::check_reason(&reason)?;
            let pass = if include_secrets { Some(read_passphrase(passphrase_file.as_deref(), true)?) } else { None };
            match live_snapshot(config, &reason, file.is_some(), pass.as_ref())? {
                Err(info) => print_saved(&info, None),
                Ok(bytes) => {
                    let info = match file {
                        Some(path) => {
                            snapshot::write_atomic(&path, &bytes)?;
                            let (h, _) = snapshot::format::read_header(&bytes)?;
                            gshare::snapshot::SnapshotInfo {
                                name: String::new(),
                                path: path.display().to_string(),
                                size_bytes: bytes.len() as u64,
                                created_at: h.created_at,
                                reason: h.reason,
                                schema_version: h.schema_version,
                                binary_version: h.binary_version,
                                sha256: h.sha256,
                                secrets_included: h.secrets.included,
                            }
                        }
                        None => snapshot::write_into(&config.snapshot_dir, &bytes, now, &reason)?,
                    };
                    print_saved(&info, Some(&bytes));
                }
            }
            Ok(())
        }
        SnapshotCommand::Ls => {
            println!(
                "{:<26} {:<12} {:>12} {:>6} {:<8} {:<7} file",
                "created", "reason", "bytes", "schema", "version", "secrets"
            );
            for s in snapshot::list(&config.snapshot_dir)? {
                println!(
                    "{:<26} {:<12} {:>12} {:>6} {:<8} {:<7} {}",
                    s.created_at,
                    s.reason,
                    s.size_bytes,
                    s.schema_version,
                    s.binary_version,
                    if s.secrets_included { "yes" } else { "no" },
                    s.path
                );
            }
            Ok(())
        }
        SnapshotCommand::Prune { keep } => {
            let gone = snapshot::prune(&config.snapshot_dir, keep)?;
            if gone.is_empty() {
                println!("nothing to prune");
            }
            for s in gone {
                println!("deleted {}", s.path);
            }
            Ok(())
        }
        SnapshotCommand::Restore { file, passphrase_file, skip_secrets } => {
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let checked =
                snapshot::format::decode(&bytes).with_context(|| format!("{} was not restored", file.display()))?;
            let pass = if checked.header.secrets.included && !skip_secrets {
                Some(read_passphrase(passphrase_file.as_deref(), false).context(
                    "the snapshot holds encrypted secrets: give the passphrase, or --skip-secrets to restore the state only",
                )?)
            } else {
                None
            };
            let restored = match snapshot::restore(config, &bytes, pass.as_ref(), now) {
                Ok(r) => r,
                Err(snapshot::SnapshotError::Locked) => bail!(
                    "a running server holds {}; stop it (e.g. `systemctl stop gshare`), restore, then start it again. Nothing was changed",
                    config.state_file().display()
                ),
                Err(e) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("{} was not restored; the current state is untouched", file.display())));
                }
            };
            println!(
                "restored the state of {} (reason {}, schema {}, gshare {}) into {}",
                restored.header.created_at,
                restored.header.reason,
                restored.header.schema_version,
                restored.header.binary_version,
                config.state_file().display()
            );
            for p in &restored.set_aside {
                println!("kept the previous {} ", p.display());
            }
            if !restored.secrets_restored.is_empty() {
                println!("restored {} secret files (key rings, kubeconfigs)", restored.secrets_restored.len());
            }
            for w in &restored.warnings {
                eprintln!("warning: {w}");
            }
            println!(
                "on its next start the server re-probes every cluster and lists GShareSessions the restored state does not know (in its log and /readyz)"
            );
            Ok(())
        }
    }
}

fn export(config: &Config, from: Option<PathBuf>, output: Option<PathBuf>) -> Result<()> {
    use gshare::snapshot;
    let bytes = match from {
        Some(f) => std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?,
        None => match live_snapshot(config, "export", true, None)? {
            Ok(b) => b,
            Err(_) => bail!("the server saved a snapshot instead of returning it"),
        },
    };
    let snap = snapshot::format::decode(&bytes)?;
    let counts = match &output {
        Some(path) => {
            let mut buf = Vec::new();
            let counts = snapshot::export::write_json_lines(snap.state, &mut buf)?;
            snapshot::write_atomic(path, &buf)?;
            counts
        }
        None => snapshot::export::write_json_lines(snap.state, &mut std::io::stdout().lock())?,
    };
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!("exported {} (state of {})", summary.join(", "), snap.header.created_at);
    Ok(())
}

fn offline_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// `admin set-password|add|list|remove`: on the state file, with the server stopped.
fn admin_accounts(config: &Config, cmd: AdminCommand) -> Result<()> {
    use gshare::auth::offline;
    let clock = Clock::system();
    offline_runtime()?.block_on(async {
        let store = offline::open_store(config, gshare::MIGRATIONS)?;
        offline::ensure_initial(&store, config, &clock).await?;
        match cmd {
            AdminCommand::Token { .. } => bail!("`admin token` needs no state file"),
            AdminCommand::SetPassword { name } => {
                let password = read_new_password(&name)?;
                let name = offline::set_password(&store, &clock, config, &name, password).await?;
                println!("password of `{name}` changed; its earlier sessions are signed out");
            }
            AdminCommand::Add { name } => {
                let password = read_new_password(&name)?;
                let name = offline::add(&store, &clock, &name, password).await?;
                println!("admin account `{name}` added");
            }
            AdminCommand::List => {
                println!("{:<32} {:<26} password changed", "username", "created");
                for a in offline::list(&store).await? {
                    println!("{:<32} {:<26} {}", a.username, a.created_at, a.password_changed_at);
                }
            }
            AdminCommand::Remove { name } => {
                let name = offline::remove(&store, &clock, &name).await?;
                println!("admin account `{name}` removed; its sessions are signed out");
            }
        }
        Ok(())
    })
}

/// A new password: typed twice without echo on a terminal, else the first line of stdin.
fn read_new_password(name: &str) -> Result<String> {
    use std::io::IsTerminal;
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

fn open_internal(config: &Config, ring: &KeyRingDir, clock: &Clock) -> Result<(TokenAuthority, Option<String>)> {
    let configured = match &config.internal_jwt_private_key {
        Some(pem) => Some(gshare::auth::keys::SigningKey::from_pem(pem.expose(), config.internal_jwt_kid.as_deref())?),
        None => None,
    };
    Ok(TokenAuthority::open(AUD_INTERNAL, ring.clone(), configured, clock.clone())?)
}

fn serve(config: Config) -> Result<()> {
    init_logging(&config);
    return_freed_memory();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let server = gshare::RunningServer::start(config.clone(), Clock::system()).await?;
        // Handlers first: a SIGTERM right after "serving" (or READY=1) must stop gracefully, not kill.
        let signals = Signals::install();
        tracing::info!(
            addr = %server.addr,
            data_dir = %config.data_dir.display(),
            signing_kid = ?server.app.auth.internal.signing_kid(),
            "gshare serving; API reference at {}/api/docs",
            config.public_url
        );
        if std::env::var_os("NOTIFY_SOCKET").is_some()
            && let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready])
        {
            tracing::warn!(error = %e, "sd_notify READY=1 failed");
        }
        let stopper = server.stopper();
        tokio::spawn(async move {
            signals.wait().await;
            tracing::info!("shutting down: finishing in-flight requests");
            if std::env::var_os("NOTIFY_SOCKET").is_some() {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
            }
            let _ = stopper.send(true);
        });
        server.wait().await;
        tracing::info!("stopped");
        Ok(())
    })
}

/// SIGTERM and SIGINT, caught from the moment of `install`.
struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => Self(Some((term, int))),
            _ => {
                tracing::warn!("cannot install SIGTERM/SIGINT handlers; the server stops only when killed");
                Self(None)
            }
        }
    }

    async fn wait(self) {
        let Some((mut term, mut int)) = self.0 else {
            return std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// The man pages in `packaging/man/` (shipped in the deb and rpm) are generated from the clap
/// definitions above: one page per command, `gshare.1`, `gshare-token-operator.1`, …
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod man_pages {
    use std::collections::BTreeMap;
    use std::path::Path;

    use clap::CommandFactory;

    fn pages(dir: &Path) -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "1"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
            .collect()
    }

    /// Fails when a command, flag or help text changed without the pages being regenerated:
    /// `GSHARE_UPDATE_MAN=1 cargo test --bin gshare man_pages` rewrites them.
    #[test]
    fn are_generated_from_the_cli() {
        let out = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(super::Cli::command(), out.path()).unwrap();
        let generated = pages(out.path());
        assert!(generated.contains_key("gshare.1") && generated.contains_key("gshare-token-operator.1"));
        let committed_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/man");
        if std::env::var_os("GSHARE_UPDATE_MAN").is_some() {
            let _ = std::fs::remove_dir_all(&committed_dir);
            std::fs::create_dir_all(&committed_dir).unwrap();
            for (name, text) in &generated {
                std::fs::write(committed_dir.join(name), text).unwrap();
            }
        }
        let committed = pages(&committed_dir);
        assert_eq!(
            committed.keys().collect::<Vec<_>>(),
            generated.keys().collect::<Vec<_>>(),
            "packaging/man/ lists other commands than the CLI has; run GSHARE_UPDATE_MAN=1 cargo test --bin gshare man_pages"
        );
        for (name, text) in &generated {
            assert!(
                committed[name] == *text,
                "packaging/man/{name} is out of date; run GSHARE_UPDATE_MAN=1 cargo test --bin gshare man_pages"
            );
        }
    }
}
