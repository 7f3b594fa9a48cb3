//! gShare Edge: the gShare GPU-sharing control plane as one binary. This crate is the whole
//! server; `main.rs` only parses the command line and calls in here.

// Tests may unwrap; server code may not (see [lints] in Cargo.toml).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[cfg(test)]
mod architecture;
pub mod audit;
pub mod auth;
pub mod background;
pub mod callbacks;
pub mod cli;
pub mod clock;
pub mod cluster_id;
pub mod clusters;
pub mod config;
pub mod console;
pub mod events;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod inventory;
pub mod locks;
pub mod logging;
pub mod metrics;
pub mod notifications;
pub mod operator;
pub mod overview;
pub mod policy;
pub mod sessions;
pub mod snapshot;
pub mod store;
pub mod views;
pub mod volumes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use tokio::sync::watch;

use auth::Authorities;
use clock::Clock;
use config::Config;
use store::Store;

/// The state file's schema, in order: each domain declares the steps for its own tables, and
/// this list is the only place that knows them all (the store knows no domain).
pub const MIGRATIONS: &[store::Migration] = &[
    store::FIRST_SCHEMA,
    sessions::model::INDEX_LIVE_SESSIONS,
    inventory::gpu_booking::KEY_BY_SESSION,
    sessions::model::INDEX_SESSION_LISTS,
    inventory::gpu_booking::COUNT_OPEN_ALLOCATIONS,
    inventory::model::MOVE_CLUSTER_COUNTS,
    policy::model::SEED_GLOBAL_POLICY,
    sessions::model::COUNT_OWNER_USAGE,
    sessions::model::OPEN_USAGE_RUNS,
];

/// Everything the server holds, shared as `Arc<App>` through axum's state. Only the composition
/// root names it: each room's handlers take their own small state (below, `FromRef`), and the
/// guards take [`auth::guard::Gate`].
#[derive(Debug)]
pub struct App {
    pub config: Arc<Config>,
    pub store: Store,
    pub auth: Authorities,
    pub clock: Clock,
    /// `/api/openapi.json` and `/api/docs`, made on first use.
    pub api_docs: Arc<http::docs::ApiDocs>,
    /// Sign-in: login throttling and ended sessions (see `auth::login`).
    pub signin: Arc<auth::login::SignIn>,
    /// The audit log's writer (see `audit::record`).
    pub audit: Arc<audit::AuditLog>,
    /// The live TLS certificate when serving HTTPS.
    pub tls: Option<Arc<http::tls::CertReloader>>,
    pub clusters: Arc<clusters::Clusters>,
    /// `Idempotency-Key`s whose first request is still running.
    pub idempotency: Arc<http::idempotency::InFlight>,
    /// Operator callbacks: inventory, liveness, node actions, callback metrics.
    pub inventory: Arc<inventory::Inventory>,
    /// Offerings, sessions, connection tokens.
    pub sessions: Arc<sessions::Sessions>,
    /// Members' persistent volumes and the operators' volume syncs.
    pub volumes: Arc<volumes::Volumes>,
    /// Scheduled and on-demand snapshots of the state file, and their last result.
    pub snapshots: Arc<snapshot::Snapshots>,
    /// The operator on each cluster: attach, detach, token renewal, connection state.
    pub operator: Arc<operator::Operator>,
    /// The console's fleet picture and its time series (`/api/v1/overview`).
    pub overview: Arc<overview::Overview>,
    /// Groups and resource policies (fair sharing).
    pub policies: Arc<policy::Policies>,
    /// When this process opened its state (the clock's milliseconds; `/metrics`).
    pub started_at_ms: i64,
}

/// Each room's state, made from the router state's fields of the same names (one `Arc` clone
/// per field and request).
macro_rules! sub_state {
    ($($state:ty { $($field:ident),* $(,)? })*) => {$(
        impl FromRef<Arc<App>> for $state {
            fn from_ref(app: &Arc<App>) -> Self {
                Self { $($field: app.$field.clone()),* }
            }
        }
    )*};
}

sub_state! {
    auth::guard::Gate { auth, signin, clock }
    http::client_addr::AddrConfig { config }
    auth::AuthState { config, store, auth, clock, signin, audit }
    audit::AuditState { store, audit }
    clusters::routes::ClustersState { store, clock, clusters, idempotency, audit }
    inventory::routes::InventoryState { store, inventory, audit }
    callbacks::CallbacksState { inventory, sessions, volumes }
    volumes::routes::VolumesState { volumes, audit }
    sessions::routes::SessionsState { config, store, clock, sessions, idempotency, audit, tls, signin }
    operator::routes::OperatorState { config, clusters, operator, audit }
    snapshot::routes::SnapshotState { config, snapshots, audit }
    policy::routes::PolicyState { policies, audit }
    notifications::routes::NotificationsState { store }
}

/// For callers holding the whole server (tests, `inventory::sweep`).
impl AsRef<inventory::Inventory> for App {
    fn as_ref(&self) -> &inventory::Inventory {
        &self.inventory
    }
}

/// For callers holding the whole server (tests, `audit::record`).
impl AsRef<audit::AuditLog> for Arc<App> {
    fn as_ref(&self) -> &audit::AuditLog {
        &self.audit
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("signing keys: {0}")]
    Keys(#[from] auth::keys::KeyError),
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind { addr: SocketAddr, source: std::io::Error, hint: &'static str },
    #[error(transparent)]
    Tls(#[from] http::tls::TlsError),
    #[error(transparent)]
    AdminSocket(#[from] http::admin_socket::SocketError),
    #[error("{0}")]
    Other(String),
}

impl App {
    /// Opens the state file and key rings (blocking work runs off the executor).
    pub async fn open(config: Config, clock: Clock) -> Result<Arc<Self>, StartError> {
        let config = Arc::new(config);
        let (store, auth) = {
            let config = config.clone();
            let clock = clock.clone();
            tokio::task::spawn_blocking(move || -> Result<_, StartError> {
                let cache = match config.store_cache_mb {
                    Some(mb) => u64::from(mb) << 20,
                    None => {
                        let size = store::cache::default_for(&config.state_file());
                        tracing::info!(
                            cache_mb = size.bytes >> 20,
                            state_file_mb = size.state_file_bytes >> 20,
                            memory_mb = size.memory_bytes.map(|m| m >> 20),
                            "state cache sized from the state file and the machine (store_cache_mb overrides)"
                        );
                        size.bytes
                    }
                };
                let cache = usize::try_from(cache).ok();
                let store = Store::open_with_cache(&config.state_file(), MIGRATIONS, cache).map_err(|e| match e {
                    // A state file that does not open: name the way back.
                    store::StoreError::Corrupt { .. } | store::StoreError::Open { .. } => {
                        match snapshot::restore_hint(&config) {
                            Some(hint) => StartError::Other(format!("{e}; {hint}")),
                            None => StartError::Store(e),
                        }
                    }
                    e => StartError::Store(e),
                })?;
                let (auth, generated) = Authorities::open(&config, clock)?;
                for kid in generated {
                    tracing::info!(%kid, dir = %config.keys_dir().display(), "generated a new JWT signing key");
                }
                Ok((store, auth))
            })
            .await
            .map_err(|e| StartError::Other(e.to_string()))??
        };
        if let Some(path) = auth::accounts::ensure_initial_admin(&store, &config.data_dir, clock.now_ms())
            .await
            .map_err(|e| StartError::Other(format!("cannot create the first admin account: {e}")))?
        {
            tracing::warn!(
                file = %path.display(),
                "created the admin account `admin`; its password is in this file (sign in, then change it with `gshare admin set-password`)"
            );
        }
        let directory = auth::directory::Directory::from_config(&config).map_err(StartError::Other)?;
        let oidc = config
            .oidc
            .as_ref()
            .map(|o| auth::directory::oidc::OidcProvider::new(o, &config.public_url, clock.clone()))
            .transpose()
            .map_err(StartError::Other)?;
        let signin = Arc::new(
            auth::login::SignIn::open(&config, &store, &clock).await?.with_directory(directory).with_oidc(oidc),
        );
        let audit = Arc::new(audit::AuditLog::start(store.clone(), clock.clone(), config.audit_max_entries));
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(http::tls::CertReloader::load(cert, key)?)),
            _ => None,
        };
        let clusters = Arc::new(clusters::Clusters::new(
            store.clone(),
            config.clone(),
            clock.clone(),
            Arc::new(sessions::cluster_in_use),
            Arc::new(inventory::cluster_part::ClusterPart),
        ));
        let connect_keys = {
            let dir = config.keys_dir();
            tokio::task::spawn_blocking(move || sessions::connect::ConnectKeys::open(&dir))
                .await
                .map_err(|e| StartError::Other(e.to_string()))?
                .map_err(StartError::Other)?
        };
        let volumes = Arc::new(volumes::Volumes::new(store.clone(), clock.clone(), config.clone()));
        let sessions = Arc::new(
            sessions::Sessions::new(
                store.clone(),
                clock.clone(),
                config.clone(),
                clusters.clone(),
                connect_keys,
                Arc::new(operator_gate),
            )
            .with_volumes(volumes.session_hook()),
        );
        let operator = Arc::new(operator::Operator::new(
            store.clone(),
            clock.clone(),
            config.clone(),
            clusters.clone(),
            auth.internal.clone(),
        ));
        // The guard reports refused operator tokens; the operator view shows the last reason.
        let reported = operator.clone();
        auth.report_rejections_to(Arc::new(move |token, error| reported.note_rejection(token, error)));
        let (store_for_inventory, clock_for_inventory, config_for_inventory) =
            (store.clone(), clock.clone(), config.clone());
        let snapshots = Arc::new(snapshot::Snapshots::new(store.clone(), config.clone(), clock.clone()));
        let overview = Arc::new(overview::Overview::new(store.clone(), clock.clone()));
        let policies = Arc::new(policy::Policies::new(store.clone(), clock.clone()));
        policies.hold_groups_with(Arc::new(inventory::pools::pools_of_group));
        Ok(Arc::new(Self {
            started_at_ms: clock.now_ms(),
            overview,
            policies,
            snapshots,
            config,
            store,
            auth,
            clock,
            api_docs: Default::default(),
            signin,
            audit,
            tls,
            clusters,
            idempotency: Default::default(),
            inventory: Arc::new(inventory::Inventory::new(
                store_for_inventory,
                clock_for_inventory,
                config_for_inventory,
            )),
            sessions,
            volumes,
            operator,
        }))
    }
}

/// A server bound and serving in the background; dropping `shutdown` (or calling
/// [`RunningServer::stop`]) begins a graceful stop.
pub struct RunningServer {
    pub addr: SocketAddr,
    /// The plain-HTTP listener that redirects to HTTPS, when configured.
    pub redirect_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningServer {
    /// Binds the configured address (port 0 picks a free one) and starts serving.
    pub async fn start(config: Config, clock: Clock) -> Result<Self, StartError> {
        let listen = config.listen;
        let app = App::open(config, clock).await?;
        let listener = http::server::bind(listen).map_err(|source| StartError::Bind {
            addr: listen,
            hint: if source.kind() == std::io::ErrorKind::AddrInUse {
                " (another process listens there; set GSHARE_LISTEN to another address)"
            } else {
                ""
            },
            source,
        })?;
        let addr = listener.local_addr().map_err(|e| StartError::Other(e.to_string()))?;
        // The local admins' way in (`gshare` on this host), whatever `listen` says.
        let admin_socket = http::admin_socket::AdminSocket::bind(&app.config.data_dir).await?;
        let fd_limit = http::server::raise_fd_limit();
        tracing::info!(
            open_files = fd_limit,
            max_connections = http::server::connection_cap(app.config.max_connections, fd_limit),
            "connection limits"
        );
        let (shutdown, mut rx) = watch::channel(false);
        spawn_background(app.clone(), rx.clone());
        if app.config.bootstrap_local_cluster {
            app.clusters
                .ensure_local()
                .await
                .map_err(|e| StartError::Other(format!("bootstrap_local_cluster: {e}")))?;
        }
        app.clusters.recover_staged().await.map_err(|e| StartError::Other(e.to_string()))?;
        clusters::watcher::spawn(app.clusters.clone(), rx.clone()).map_err(StartError::Other)?;
        spawn_cluster_upkeep(app.clone(), rx.clone());
        operator::spawn_rotation(app.operator.clone(), Duration::from_secs(30), rx.clone());
        operator::spawn_pod_watch(app.operator.clone(), Duration::from_secs(10), rx.clone());
        inventory::spawn_sweeper(app.inventory.clone(), &app.config, rx.clone());
        spawn_memory_flush(app.clone(), rx.clone());
        spawn_runtime_sweep(app.clone(), rx.clone());
        spawn_queue(app.clone(), rx.clone());
        spawn_liveness_sweep(app.clone(), rx.clone());
        spawn_directory_recheck(app.clone(), rx.clone());
        snapshot::spawn(
            snapshot::Upkeep {
                config: app.config.clone(),
                clock: app.clock.clone(),
                snapshots: app.snapshots.clone(),
                clusters: app.clusters.clone(),
                sessions: app.sessions.clone(),
            },
            rx.clone(),
        );
        overview::spawn(app.clone(), rx.clone());
        let tls_config = match &app.tls {
            Some(tls) => {
                tls.spawn_watcher(rx.clone())?;
                Some(tls.server_config()?)
            }
            None => None,
        };
        // One budget of buffered request bodies for the process, over both listeners.
        let bodies = http::body::Budgets::new(http::body::BodyLimits {
            timeout: app.config.request_body_timeout,
            min_rate: app.config.request_body_min_rate,
            grace: http::body::RATE_GRACE,
            process_budget: (app.config.max_buffered_body_mb as usize) << 20,
        });
        let redirect_addr = match app.config.tls_redirect_listen {
            Some(at) => {
                let l = http::server::bind(at).map_err(|source| StartError::Bind {
                    addr: at,
                    hint: " (tls_redirect_listen)",
                    source,
                })?;
                let bound = l.local_addr().map_err(|e| StartError::Other(e.to_string()))?;
                let redirect = http::tls::redirect_router(&app.config.public_url, addr.port());
                let mut stop = rx.clone();
                let limits = http::server::Limits::from_config(&app.config, fd_limit, bodies.clone());
                tokio::spawn(async move {
                    let stopped = async move {
                        let _ = stop.wait_for(|v| *v).await;
                    };
                    http::server::serve(l, redirect.into(), None, stopped, limits).await;
                });
                Some(bound)
            }
            None => None,
        };
        let router = http::router(app.clone());
        let relay = http::relay_handle(&app);
        let local_admins = {
            let (router, mut stop) = (router.clone(), rx.clone());
            let (grace, head) = (app.config.shutdown_grace, app.config.request_head_timeout);
            admin_socket.serve(
                router,
                async move {
                    let _ = stop.wait_for(|v| *v).await;
                },
                grace,
                head,
            )
        };
        let limits = http::server::Limits::from_config(&app.config, fd_limit, bodies);
        let task = tokio::spawn(async move {
            let tcp = http::server::serve(
                listener,
                http::server::Routes { all: router, relay },
                tls_config,
                async move {
                    let _ = rx.wait_for(|v| *v).await;
                },
                limits,
            );
            tokio::join!(tcp, local_admins);
        });
        Ok(Self { addr, redirect_addr, app, shutdown, task })
    }

    pub fn base_url(&self) -> String {
        let scheme = if self.app.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and waits for the server task.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        flush_held(&self.app).await;
    }

    /// Waits until the server task ends (after a stop).
    pub async fn wait(self) {
        let _ = self.task.await;
        flush_held(&self.app).await;
    }

    /// A handle that triggers a graceful stop.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// Looks the directory's accounts up again every `ldap.recheck_interval` (search-then-bind only).
fn spawn_directory_recheck(app: Arc<App>, stop: watch::Receiver<bool>) {
    let Some(dir) = app.signin.directory.clone() else { return };
    let period = dir.ldap.settings().recheck_interval;
    if period.is_zero() {
        return;
    }
    tokio::spawn(background::every(period, stop, move || {
        let (app, dir) = (app.clone(), dir.clone());
        async move {
            let parts =
                auth::directory::Parts { store: &app.store, signin: &app.signin, clock: &app.clock, audit: &app.audit };
            match auth::directory::recheck(&dir, &parts).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    disabled = n,
                    "ldap re-check: accounts the directory no longer lets in were disabled"
                ),
                Err(e) => tracing::warn!(error = %e.message, "ldap re-check failed"),
            }
        }
    }));
}

/// The runtime limit's sweep (`Sessions::enforce_runtime`) every 30 s: warnings 10 minutes
/// before, the end at the limit. A timer task: nothing on the request or callback path.
fn spawn_runtime_sweep(app: Arc<App>, stop: watch::Receiver<bool>) {
    tokio::spawn(background::every(Duration::from_secs(30), stop, move || {
        let app = app.clone();
        async move {
            match app.sessions.enforce_runtime().await {
                Ok(s) if s.warned.is_empty() && s.ended.is_empty() => {}
                Ok(s) => tracing::info!(warned = ?s.warned, ended = ?s.ended, "runtime limits"),
                Err(e) => tracing::warn!(error = %e, "runtime limit sweep failed"),
            }
            match app.sessions.enforce_budgets().await {
                Ok(b) if b.warned.is_empty() && b.exhausted.is_empty() && b.paused.is_empty() => {}
                Ok(b) => {
                    tracing::info!(warned = ?b.warned, exhausted = ?b.exhausted, paused = ?b.paused, "GPU-hour budgets")
                }
                Err(e) => tracing::warn!(error = %e, "budget sweep failed"),
            }
            serve_queue(&app).await;
        }
    }));
}

/// Serves the session queues as capacity frees: woken by commits that can change what a queued
/// session waits for (sessions ending or pausing, inventory, offerings, accounts, policies), at
/// most twice a second, only while sessions wait; the 30 s sweep serves them too.
fn spawn_queue(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    const WATCHED: &[&str] = &[
        "sessions",
        "gpu_devices",
        "nodes",
        "offerings",
        "admin_accounts",
        "resource_policies",
        "clusters",
        "usage_rollup",
    ];
    tokio::spawn(async move {
        let (mut seen, mut generation) = (0, app.store.generation());
        loop {
            tokio::select! {
                g = app.store.changed_since(generation) => generation = g,
                _ = stop.wait_for(|v| *v) => return,
            }
            let now = app.store.table_generation(WATCHED);
            if now == seen {
                continue;
            }
            seen = now;
            let waiting = app.store.read(|txn| Ok(sessions::model::SESSION_QUEUE.len(txn)? > 0)).await;
            if waiting.unwrap_or(false) {
                serve_queue(&app).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
}

async fn serve_queue(app: &App) {
    match app.sessions.serve_queue().await {
        Ok(p) if p.started.is_empty() && p.dropped.is_empty() => {}
        Ok(p) => tracing::info!(started = ?p.started, dropped = ?p.dropped, "session queue"),
        Err(e) => tracing::warn!(error = %e, "session queue pass failed"),
    }
}

/// Sessions' liveness (`Sessions::enforce_liveness`) every 30 s: running sessions on a node gone
/// offline end `node_offline`, those whose pod stopped reporting for `session_stale_after` end
/// `pod_lost` (only where the operator is heard from). Off the callback path.
fn spawn_liveness_sweep(app: Arc<App>, stop: watch::Receiver<bool>) {
    tokio::spawn(background::every(Duration::from_secs(30), stop, move || {
        let app = app.clone();
        async move {
            // The operators' heartbeats held in memory count: a live operator must not look silent.
            if let Err(e) = app.inventory.flush_liveness().await {
                tracing::warn!(error = %e, "cannot write the liveness times before the session liveness sweep");
            }
            match app.sessions.enforce_liveness().await {
                Ok(s) if s.node_offline.is_empty() && s.pod_lost.is_empty() => {
                    if !s.left.is_empty() {
                        tracing::debug!(left = ?s.left, "stale sessions on clusters whose operator is silent: left alone");
                    }
                }
                Ok(s) => tracing::info!(node_offline = ?s.node_offline, pod_lost = ?s.pod_lost, "session liveness"),
                Err(e) => tracing::warn!(error = %e, "session liveness sweep failed"),
            }
        }
    }));
}

/// Writes what is held in memory only (nodes' and clusters' liveness times, running sessions'
/// heartbeats) every `liveness_flush_every` (5 s). The last flush is the stop's own, once the
/// in-flight requests are done (`RunningServer::stop` and `wait`).
fn spawn_memory_flush(app: Arc<App>, stop: watch::Receiver<bool>) {
    tokio::spawn(background::every(app.config.liveness_flush_every, stop, move || {
        let app = app.clone();
        async move { flush_held(&app).await }
    }));
}

/// Writes what is held in memory only (the periodic flush, and before the process ends).
async fn flush_held(app: &App) {
    if let Err(e) = app.inventory.flush_liveness().await {
        tracing::error!(error = %e, "cannot write the nodes' and clusters' liveness times");
    }
    if let Err(e) = app.sessions.flush_heartbeats().await {
        tracing::error!(error = %e, "cannot write the sessions' heartbeats");
    }
}

/// Bootstraps `clu_local` if asked, re-probes every cluster every `probe_interval`, and expires
/// idempotency keys.
fn spawn_cluster_upkeep(app: Arc<App>, stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        if app.config.bootstrap_local_cluster
            && let Err(e) = app.clusters.reprobe(&clusters::ClusterId::local()).await
        {
            tracing::warn!(error = %e, "first probe of the local cluster clu_local failed");
        }
        background::every(app.config.probe_interval, stop, || cluster_upkeep(app.clone())).await;
    });
}

async fn cluster_upkeep(app: Arc<App>) {
    match app.clusters.live_ids().await {
        Ok(ids) => {
            // A few at a time: one slow cluster must not hold up the others.
            use futures::StreamExt;
            futures::stream::iter(ids)
                .for_each_concurrent(8, |id| {
                    let app = app.clone();
                    async move {
                        if let Err(e) = app.clusters.reprobe(&id).await {
                            tracing::warn!(cluster_id = %id, error = %e, "background probe failed");
                        }
                    }
                })
                .await;
        }
        Err(e) => tracing::error!(error = %e, "cannot list clusters for the background probe"),
    }
    // Sessions recorded just before a crash, whose CR was never applied.
    if let Err(e) = app.sessions.apply_unapplied(30_000).await {
        tracing::warn!(error = %e, "cannot apply pending GShareSessions");
    }
    if let Err(e) = http::idempotency::sweep(&app.store, &app.clock).await {
        tracing::warn!(error = %e, "cannot expire idempotency keys");
    }
}

/// Periodic upkeep that lives as long as the server.
/// Audit upkeep: closes coalescing windows (every 10 s) and enforces retention (at start, then
/// hourly); at shutdown the open windows are written.
fn spawn_audit_upkeep(app: Arc<App>, stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let last_prune = Arc::new(std::sync::Mutex::new(None));
        let upkeep = || audit_upkeep(app.clone(), last_prune.clone());
        upkeep().await;
        background::every(Duration::from_secs(10), stop, upkeep).await;
        app.audit.close_windows(app.config.login_failure_window, true).await;
    });
}

async fn audit_upkeep(app: Arc<App>, last_prune: Arc<std::sync::Mutex<Option<i64>>>) {
    app.audit.close_windows(app.config.login_failure_window, false).await;
    let now = app.clock.now_ms();
    let due = {
        let mut last = locks::lock(&last_prune);
        let due = last.is_none_or(|t| now - t >= 3_600_000);
        if due {
            *last = Some(now);
        }
        due
    };
    if due {
        match audit::prune(&app.store, now, app.config.audit_retention, app.config.audit_max_entries).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "audit retention: old entries removed"),
            Err(e) => tracing::error!(error = %e, "audit retention pass failed"),
        }
    }
}

fn spawn_background(app: Arc<App>, stop: watch::Receiver<bool>) {
    spawn_audit_upkeep(app.clone(), stop.clone());
    tokio::spawn(async move {
        let reload = || reload_keys(app.clone());
        reload().await;
        background::every(Duration::from_secs(10), stop, reload).await;
    });
}

/// `gshare keys rotate|prune` run as separate processes; pick their result up here.
async fn reload_keys(app: Arc<App>) {
    let auth = app.auth.clone();
    match tokio::task::spawn_blocking(move || auth.internal.reload_if_changed()).await {
        Ok(Ok(true)) => {
            let kid = app.auth.internal.signing_kid();
            tracing::info!(signing_kid = ?kid, "internal JWT key ring reloaded");
            // `gshare keys rotate|prune` ran beside the server: record what it changed.
            audit::record(
                &app,
                audit::AuditEntry::system("cli", "keys.reload", audit::AuditResult::Success)
                    .target(kid.unwrap_or_default())
                    .details(serde_json::json!({
                        "keys": app.auth.internal.keys().iter().map(|k| &k.kid).collect::<Vec<_>>()
                    })),
            )
            .await;
        }
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot reload the internal JWT key ring; keeping the loaded keys")
        }
        Err(e) => tracing::error!(error = %e, "key ring reload task failed"),
    }
}

/// Whether a cluster's operator can run a new session: it called back within two heartbeat
/// intervals (the rule of the cluster view's `operator.state`, `operator::status`), else why not.
fn operator_gate(
    txn: &crate::store::WriteTxn,
    c: &clusters::model::ClusterRecord,
    now: i64,
) -> Result<Option<sessions::NotConnected>, store::StoreError> {
    let fresh_ms = 2 * operator::CALLBACK_INTERVAL.as_millis() as i64;
    let heartbeat_at = inventory::model::CLUSTER_COUNTS.get_in_write(txn, &c.id)?.and_then(|k| k.heartbeat_at);
    if heartbeat_at.is_some_and(|h| now - h <= fresh_ms) {
        return Ok(None);
    }
    let attachment = operator::model::ATTACHMENTS.get_in_write(txn, &c.id)?;
    let (state, message) = match attachment {
        None => (
            "not_attached",
            match heartbeat_at {
                None => "no operator has called back; attach it (`gshare cluster attach <id>`, console: Attach \
                         operator) or deploy it by hand"
                    .to_string(),
                Some(h) => format!(
                    "it is not attached from here and its last callback was {} s ago; attach it or check the \
                     operator deployed by hand",
                    (now - h) / 1000
                ),
            },
        ),

        Some(a) if !a.complete => (
            "attach_incomplete",
            "the last attach stopped part-way; attach again (see the cluster's operator view)".to_string(),
        ),
        Some(_) => (
            "silent",
            match heartbeat_at {
                Some(h) => {
                    format!("its last callback was {} s ago; see the cluster's operator view for why", (now - h) / 1000)
                }
                None => "it never called back; see the cluster's operator view for why".to_string(),
            },
        ),
    };
    Ok(Some(sessions::NotConnected { state, message }))
}
