//! Router assembly: each domain contributes its routes; this module only puts them together and
//! wraps them in the shared layers (request context with security headers, body limit, panic guard).

pub mod admin_socket;
pub mod api_router;
pub mod body;
pub mod client_addr;
pub mod docs;
pub mod error;
pub mod error_code;
pub mod extract;
pub mod idempotency;
pub mod middleware;
pub mod server;
pub mod system;
pub mod text;
pub mod timer;
pub mod tls;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use utoipa::OpenApi;

use crate::App;
use api_router::{Docs, Document, OpenApiRouter, Serve};
use error::ApiError;

#[derive(OpenApi)]
#[openapi(
    info(title = "gShare Edge", description = "The gShare GPU-sharing control plane: admin API (/api/v1), operator callbacks (/internal) and key publication."),
    components(schemas(error::ErrorBody, error::ErrorDetail, error::FieldError, error_code::ErrorCode)),
    tags(
        (name = "system", description = "Process health"),
        (name = "auth", description = "Keys and tokens"),
        (name = "audit", description = "Who changed what: logins and admin changes"),
        (name = "clusters", description = "GPU clusters: registration, probe, inventory"),
        (name = "sessions", description = "Offerings and sessions: GShareSession apply, pause, resume, delete, connect"),
        (name = "volumes", description = "Members' persistent volumes: home workspaces, named volumes, quotas, reclaim, orphans"),
        (name = "notifications", description = "A signed-in user's own notifications: idle, runtime limit, admin actions, drain, node and pod loss"),
        (name = "policies", description = "Fair sharing: groups, resource policies (global, group, user) and their effective merge"),
        (name = "internal", description = "Operator callbacks (upstream's /internal API): operator JWT, sub=operator:<cluster_id>"),
    )
)]
struct ApiDoc;

/// Every documented route: the server's router (routes only; see `api_router`).
pub fn api_routes() -> Router<Arc<App>> {
    build::<Serve>(OpenApiRouter::new()).0
}

/// The OpenAPI document the handlers describe, before `docs::add_shared_answers`. The server
/// serves the committed snapshot of it (`web/src/api/openapi.json`); tests hold the two equal.
pub fn api_document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    build::<Document>(OpenApiRouter::with_openapi(doc)).1
}

fn build<D: Docs>(base: OpenApiRouter<Arc<App>>) -> (Router<Arc<App>>, utoipa::openapi::OpenApi) {
    base.merge(system::routes::<D>())
        .merge(crate::auth::routes::routes::<_, D>())
        .merge(crate::auth::login::routes::<_, D>())
        .merge(crate::auth::oidc_routes::routes::<_, D>())
        .merge(crate::auth::account_routes::routes::<_, D>())
        .merge(crate::auth::user_routes::routes::<_, D>())
        .merge(crate::events::routes::<D>())
        .merge(crate::overview::routes::<D>())
        .merge(crate::audit::routes::routes::<_, D>())
        .merge(crate::clusters::routes::routes::<_, D>())
        .merge(crate::views::routes::<D>())
        .merge(crate::inventory::routes::routes::<_, D>())
        .merge(crate::inventory::pool_routes::routes::<_, D>())
        .merge(crate::callbacks::routes::<_, D>())
        .merge(crate::sessions::routes::routes::<_, D>())
        .merge(crate::volumes::routes::routes::<_, D>())
        .merge(crate::policy::routes::routes::<_, D>())
        .merge(crate::notifications::routes::routes::<_, D>())
        .merge(crate::snapshot::routes::routes::<_, D>())
        .merge(crate::operator::routes::routes::<_, D>())
        .merge(crate::metrics::routes::<D>())
        .split_for_parts()
}

/// The relay's route in the complete router (the listeners send `/proxy/…` to [`relay_handle`]).
const RELAY_PATH: &str = "/proxy/{*rest}";

/// The complete application router.
pub fn router(app: Arc<App>) -> Router {
    let api = api_routes();
    let rules = RouteRules { sessions: app.sessions.clone(), inventory: app.inventory.clone() };
    let router = api
        .route("/api/openapi.json", get(system::openapi_json))
        .route("/api/docs", get(system::reference_page))
        // Session apps through this server, for installs whose session domain points here.
        .route(RELAY_PATH, axum::routing::any(crate::sessions::relay::relay))
        // The console SPA; it answers the API prefixes with the same JSON 404 as before.
        .fallback(crate::console::serve)
        .layer(axum::middleware::from_fn_with_state(rules, route_rules))
        .layer(DefaultBodyLimit::max(extract::MAX_JSON_BODY));
    shared_layers(router).with_state(app)
}

/// What the listeners call for `/proxy/…` requests (`server::Routes`): the relay handler inside
/// the request context and a panic guard — what the complete [`router`]'s shared layers do — called
/// directly. The relay streams bodies (no JSON body limit), answers on every host (the
/// session-origin rule lets `/proxy/` through) and is no callback, so it needs no other layer; and
/// without a router, layer services to clone and futures to box, each relayed request costs less.
/// The complete [`router`] routes `/proxy/` to the same handler (the admin socket, router tests).
pub fn relay_handle(app: &Arc<App>) -> server::HandleMaker {
    use axum::extract::FromRef;
    use futures::FutureExt;
    let state =
        Arc::new(crate::sessions::relay::RelayState { sessions: FromRef::from_ref(app), gate: FromRef::from_ref(app) });
    Arc::new(move |ticket: &server::ConnectionTicket| {
        // The connection's own reference to the state, and what the relay keeps of it: one count
        // its requests clone (see `HandleMaker`).
        let own = Arc::new((state.clone(), crate::sessions::relay::RelayConnection::new(ticket.clone())));
        Arc::new(move |req| {
            let own = own.clone();
            Box::pin(middleware::with_context(req, own.1.reserve(), move |req| async move {
                let (state, connection) = (&own.0, &own.1);
                let relayed =
                    crate::sessions::relay::relay_request(&state.sessions, &state.gate, req, Some(connection));
                match std::panic::AssertUnwindSafe(relayed).catch_unwind().await {
                    Ok(res) => res,
                    Err(_) => axum::response::IntoResponse::into_response(ApiError::internal("handler panicked")),
                }
            }))
        })
    })
}

/// The layers every answer passes: the panic guard and the request context (outermost).
fn shared_layers(router: Router<Arc<App>>) -> Router<Arc<App>> {
    router
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(ApiError::internal("handler panicked"))
        }))
        .layer(axum::middleware::from_fn(middleware::request_context))
}

/// What the per-route rules read.
#[derive(Clone)]
struct RouteRules {
    sessions: Arc<crate::sessions::Sessions>,
    inventory: Arc<crate::inventory::Inventory>,
}

/// The per-route rules, one layer (each layer costs every request a clone of the services below
/// it and a boxed future): on a session domain only the relay, verify and health answer (421
/// otherwise); operator callbacks are counted by route and status for /metrics (this needs the
/// matched route, so it runs inside the router).
async fn route_rules(
    axum::extract::State(rules): axum::extract::State<RouteRules>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let callback = crate::inventory::metrics::CountedCallback::begin(&mut req);
    let refused = match crate::sessions::origin::host_to_check(&req) {
        Some(host) => crate::sessions::origin::refusal(&rules.sessions, host).await,
        None => None,
    };
    let res = match refused {
        Some(refusal) => refusal,
        None => next.run(req).await,
    };
    if let Some(callback) = callback {
        callback.answered(&rules.inventory, &res);
    }
    res
}
