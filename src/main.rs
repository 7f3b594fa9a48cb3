//! The `gshare` command line: parse, load config, call into the library.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use gshare::cli;
use gshare::clock::Clock;
use gshare::config::{Config, LogFormat};

/// jemalloc instead of glibc's malloc: under the operators' steady flood glibc spent a quarter of
/// the server's CPU in malloc/free (`perf`, 40,000 GPUs) and its arenas kept what a storm took
/// (RSS 228 MiB after the fleet mix, 824 MiB at 4x the fleet); jemalloc's background thread
/// returns freed pages within seconds. Figures: README "Memory".
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long freed pages stay with jemalloc before its background thread returns them (its default
/// is 10 s). At 5 s the start-up's short-lived allocations (the router's OpenAPI document, the
/// store's first reads) are gone 10 s after ready: an idle server on an empty state held 9.0 MiB
/// anonymous memory at 10 s with 10 s, 4.7 MiB with 5 s (4.5 MiB either way at 30 s), at the same
/// fleet mix rate (README "Memory", issue "Edge footprint").
#[cfg(not(target_env = "msvc"))]
const DIRTY_DECAY_MS: isize = 5_000;

/// Lets jemalloc purge unused pages on its own thread, so an idle server gives back what a burst
/// took (without it, pages are only purged when later allocations happen), after
/// [`DIRTY_DECAY_MS`]. `_RJEM_MALLOC_CONF=dirty_decay_ms:N` still chooses another delay.
fn return_freed_memory() {
    #[cfg(not(target_env = "msvc"))]
    {
        use tikv_jemalloc_ctl::{Access, AsName};
        if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
            tracing::warn!(error = %e, "jemalloc background purging is off: freed memory returns only on later allocations");
        }
        if std::env::var_os("_RJEM_MALLOC_CONF").is_none() {
            // The default for arenas made from now on (the runtime's threads), then the arenas
            // that already exist (the main thread's); those not made yet refuse, which is fine.
            let _ = b"arenas.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS);
            let arenas: u32 = b"arenas.narenas\0".name().read().unwrap_or(0);
            for i in 0..arenas {
                let _ = format!("arena.{i}.dirty_decay_ms\0").as_bytes().name().write(DIRTY_DECAY_MS);
            }
        }
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
/etc/gshare/config.toml when present), then GSHARE_* environment variables; `gshare config check` prints the result.\n\n\
While the server runs, the other commands reach it through its admin socket <data_dir>/gshare.sock (0600: only the \
server's user and root), whatever `listen` says; with it stopped they work on the data directory itself."
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
    /// Operator tokens: minted by the running server (audited), else from the signing keys in the data directory.
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
    /// Registered clusters, through the running server (its admin socket).
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
    /// (through its admin socket, <data_dir>/gshare.sock).
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
    /// Through the running server (its admin socket), else on the state file. Signs out the account's sessions.
    SetPassword {
        /// The account (default: admin).
        #[arg(default_value = "admin")]
        name: String,
    },
    /// Add an admin account; its password is read like `set-password`.
    Add { name: String },
    /// List the admin accounts.
    List,
    /// Remove an admin account; the last one can't be removed.
    Remove { name: String },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Print the newest audit entries, oldest first.
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
    Check {
        /// Also sign USER in against the configured `[ldap]` directory (password typed, or the
        /// first line of stdin) and print each step: connect, bind, search, groups, role and
        /// group. Writes nothing.
        #[arg(long, value_name = "USER")]
        ldap_test: Option<String>,
    },
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
        Command::Config(ConfigCommand::Check { ldap_test }) => {
            if let Some(user) = ldap_test {
                return cli::directory::ldap_test(&config, &user);
            }
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
        Command::Token(TokenCommand::Operator { cluster_id, ttl }) => cli::operator::token(&config, &cluster_id, &ttl),
        Command::Operator(OperatorCommand::Manifests {
            cluster_id,
            image,
            control_plane_url,
            session_domain,
            token,
            no_token,
        }) => cli::operator::manifests(
            &config,
            cli::operator::Manifests { cluster_id, image, control_plane_url, session_domain, token, no_token },
        ),
        Command::Cluster(cmd) => cli::operator::cluster(
            &config,
            match cmd {
                ClusterCommand::Attach { id, force, replace, label_nodes } => {
                    cli::operator::ClusterCommand::Attach { id, force, replace, label_nodes }
                }
                ClusterCommand::Detach { id, force } => cli::operator::ClusterCommand::Detach { id, force },
            },
        ),
        Command::Admin(cmd) => {
            use cli::admin::{AccountCommand, accounts};
            match cmd {
                AdminCommand::Token { ttl, name } => cli::admin::token(&config, &name, &ttl),
                AdminCommand::SetPassword { name } => accounts(&config, AccountCommand::SetPassword { name }),
                AdminCommand::Add { name } => accounts(&config, AccountCommand::Add { name }),
                AdminCommand::List => accounts(&config, AccountCommand::List),
                AdminCommand::Remove { name } => accounts(&config, AccountCommand::Remove { name }),
            }
        }
        Command::Keys(KeysCommand::List) => cli::keys::list(&config),
        Command::Keys(KeysCommand::Rotate) => cli::keys::rotate(&config),
        Command::Keys(KeysCommand::Prune { older_than, force }) => cli::keys::prune(&config, &older_than, force),
        Command::Snapshot(SnapshotCommand::Save { file, reason, include_secrets, passphrase_file, pre_upgrade }) => {
            cli::snapshot::save(
                &config,
                cli::snapshot::Save { file, reason, include_secrets, passphrase_file, pre_upgrade },
            )
        }
        Command::Snapshot(SnapshotCommand::Ls) => cli::snapshot::ls(&config),
        Command::Snapshot(SnapshotCommand::Prune { keep }) => cli::snapshot::prune(&config, keep),
        Command::Snapshot(SnapshotCommand::Restore { file, passphrase_file, skip_secrets }) => {
            cli::snapshot::restore(&config, &file, passphrase_file.as_deref(), skip_secrets)
        }
        Command::Export { from, output } => cli::snapshot::export(&config, from.as_deref(), output.as_deref()),
        Command::Audit(AuditCommand::Tail { lines }) => cli::audit::tail(&config, lines),
    }
}

fn serve(config: Config) -> Result<()> {
    init_logging(&config);
    return_freed_memory();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let server = gshare::RunningServer::start(config.clone(), Clock::system()).await.map_err(|e| match e {
            gshare::StartError::Store(gshare::store::StoreError::AlreadyOpen { path }) => anyhow::anyhow!(
                "another gshare server is running on the data directory {} (it holds {}); only one server may use a \
                 data directory: stop it, or give this one another data_dir (GSHARE_DATA_DIR)",
                std::path::absolute(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone()).display(),
                path.display()
            ),
            e => e.into(),
        })?;
        // Handlers first: a SIGTERM right after "serving" (or READY=1) must stop gracefully, not kill.
        let signals = Signals::install();
        tracing::info!(
            addr = %server.addr,
            data_dir = %config.data_dir.display(),
            admin_socket = %gshare::http::admin_socket::socket_path(&config.data_dir).display(),
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
