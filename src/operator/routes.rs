//! `/api/v1/clusters/{id}/attach`, `/detach`, `/operator-token` and `/operator-manifests`.

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::{OperatorError, Report, TokenView};
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::auth::tokens::{MAX_TTL, parse_ttl};
use crate::clusters::ClusterId;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody, ErrorCode, plural};
use crate::http::extract::{ApiQuery, parse_json};

/// What the operator's handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct OperatorState {
    pub config: Arc<crate::config::Config>,
    pub clusters: Arc<crate::clusters::Clusters>,
    pub operator: Arc<super::Operator>,
    pub audit: Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    OperatorState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: attach))
        .routes(routes!(D: detach))
        .routes(routes!(D: operator_token))
        .routes(routes!(D: operator_manifests))
        .routes(routes!(D: settings))
}

/// The server's own settings that decide whether a cluster can be attached and its sessions
/// opened: what the console's first-run checklist and the attach panel read.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerSettings {
    /// `public_url`: the address the operator calls back (and links point at).
    pub public_url: String,
    /// Why an operator inside a cluster cannot call `public_url` back (a loopback address, say);
    /// `null` when it can. Attach is refused while this is set.
    pub public_url_problem: Option<String>,
    /// The default session domain (`session_domain`): clusters without their own use it; `null`:
    /// each cluster needs its own before attach.
    pub session_domain: Option<String>,
    /// `https` or `http`: the scheme of session URLs.
    pub session_url_scheme: String,
    /// The configuration file the settings were read from; `null`: built-in defaults and the
    /// environment (`GSHARE_*`) only.
    pub config_file: Option<String>,
}

/// The settings attach and sessions depend on (admins only).
#[utoipa::path(get, path = "/api/v1/settings", tag = "system",
    responses((status = 200, body = ServerSettings), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn settings(State(app): State<OperatorState>, _admin: AdminCaller) -> axum::Json<ServerSettings> {
    let c = &app.config;
    axum::Json(ServerSettings {
        public_url: c.public_url.clone(),
        public_url_problem: super::manifests::check_control_plane_url(&c.public_url, "public_url").err(),
        session_domain: c.session_domain.clone(),
        session_url_scheme: c.session_url_scheme.clone(),
        config_file: c.source.as_ref().map(|p| p.display().to_string()),
    })
}

impl From<OperatorError> for ApiError {
    fn from(e: OperatorError) -> Self {
        let message = e.to_string();
        match e {
            OperatorError::NotFound(id) => ApiError::not_found(format!("no cluster {id}")),
            OperatorError::Setting(setting, message) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::SettingRequired, message)
                    .with_details(json!({ "setting": setting }))
            }
            OperatorError::NoClient { id, cause } => ApiError::new(
                StatusCode::BAD_GATEWAY,
                ErrorCode::ClusterUnreachable,
                format!("no usable connection to cluster {id}: {cause}"),
            ),
            OperatorError::Forbidden { denied, objects } => {
                let each: Vec<String> = denied
                    .iter()
                    .take(12)
                    .map(|d| {
                        format!(
                            "{} {}{} (for {}{})",
                            d.verb,
                            d.resource,
                            d.namespace.as_deref().map(|n| format!(" in namespace {n}")).unwrap_or_default(),
                            d.objects.iter().take(4).cloned().collect::<Vec<_>>().join(", "),
                            if d.missing.is_empty() {
                                String::new()
                            } else {
                                format!(", which grants rights the credentials lack: {}", d.missing.join(", "))
                            }
                        )
                    })
                    .collect();
                let message = match denied.first() {
                    Some(_) => format!(
                        "the cluster's credentials may not {}{}; grant those rights to the kubeconfig's user (for \
                         example cluster-admin), or have an admin apply `gshare operator manifests` with kubectl; \
                         nothing was applied{}",
                        each.join("; "),
                        if denied.len() > each.len() {
                            format!(" (and {} more)", denied.len() - each.len())
                        } else {
                            String::new()
                        },
                        if objects.iter().any(|o| matches!(o.result.as_str(), "created" | "updated" | "unchanged")) {
                            " after the objects listed as applied"
                        } else {
                            ""
                        }
                    ),
                    None => "the cluster's credentials lack rights attach needs".into(),
                };
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::ClusterForbidden, message)
                    .with_details(json!({ "denied": denied, "objects": objects }))
            }
            OperatorError::DetachForbidden { denied } => {
                let each: Vec<String> = denied
                    .iter()
                    .take(12)
                    .map(|d| {
                        format!(
                            "{} {}{} (for {})",
                            d.verb,
                            d.resource,
                            d.namespace.as_deref().map(|n| format!(" in namespace {n}")).unwrap_or_default(),
                            d.objects.iter().take(4).cloned().collect::<Vec<_>>().join(", "),
                        )
                    })
                    .collect();
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ErrorCode::ClusterForbidden,
                    format!(
                        "the cluster's credentials may not {}{}; grant those rights to the kubeconfig's user (for \
                         example cluster-admin) and detach again; nothing was deleted",
                        each.join("; "),
                        if denied.len() > each.len() {
                            format!(" (and {} more)", denied.len() - each.len())
                        } else {
                            String::new()
                        },
                    ),
                )
                .with_details(json!({ "denied": denied, "objects": [] }))
            }
            OperatorError::Exists(all) => {
                let each: Vec<String> = all
                    .iter()
                    .take(6)
                    .map(|e| {
                        format!(
                            "{} was installed by {}{}",
                            e.object,
                            e.manager,
                            if e.differences.is_empty() {
                                String::new()
                            } else {
                                format!(" (differs from gShare's: {})", e.differences.join("; "))
                            }
                        )
                    })
                    .collect();
                ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::OperatorExists,
                    format!(
                        "{}{}, not by gShare; nothing was applied. Attach again with ?replace=true to delete {} \
                         and create gShare's",
                        each.join("; "),
                        if all.len() > each.len() {
                            format!(" (and {} more)", all.len() - each.len())
                        } else {
                            String::new()
                        },
                        if all.len() == 1 { "it" } else { "them" },
                    ),
                )
                .with_details(json!({ "existing": all.first(), "installs": all }))
            }
            OperatorError::FinalizersPending { waited_s, held, objects } => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::FinalizersPending,
                format!(
                    "{} still {} a finalizer after {waited_s} s: {}; the operator, which clears them, was left \
                     running and nothing else was deleted. Check the operator is running (GET \
                     /api/v1/clusters/{{id}} shows its pods) and detach again, or detach with \
                     ?force=true to remove the finalizers",
                    plural(held.len(), "custom resource", "custom resources"),
                    if held.len() == 1 { "holds" } else { "hold" },
                    held.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
                ),
            )
            .with_details(json!({ "held": held, "objects": objects })),
            OperatorError::CrdConflict { crds } => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::CrdConflict,
                format!(
                    "{} on the cluster {} from the shipped {}: {}; nothing was applied. Attach again with \
                     ?force=true to replace {}",
                    crds.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
                    if crds.len() == 1 { "differs" } else { "differ" },
                    if crds.len() == 1 { "one" } else { "ones" },
                    crds.iter().map(|c| c.detail.as_str()).collect::<Vec<_>>().join("; "),
                    if crds.len() == 1 { "it" } else { "them" },
                ),
            )
            .with_details(json!({ "crds": crds })),
            OperatorError::Unreachable { cause, objects } => {
                let done: Vec<&str> = objects
                    .iter()
                    .filter(|o| matches!(o.result.as_str(), "created" | "updated" | "unchanged" | "deleted" | "absent"))
                    .map(|o| o.object.as_str())
                    .collect();
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    ErrorCode::ClusterUnreachable,
                    format!(
                        "the cluster became unreachable after {} ({cause}); run it again to converge",
                        plural(done.len(), "object", "objects")
                    ),
                )
                .with_details(json!({ "done": done, "objects": objects }))
            }
            OperatorError::Deadline { after_s, objects } => {
                let done: Vec<&str> = objects
                    .iter()
                    .filter(|o| matches!(o.result.as_str(), "created" | "updated" | "unchanged"))
                    .map(|o| o.object.as_str())
                    .collect();
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    ErrorCode::AttachDeadline,
                    format!(
                        "attach stopped after {after_s} s (operator_attach_timeout) with {} applied{}; \
                         the cluster answers slowly: run it again to converge",
                        plural(done.len(), "object", "objects"),
                        if objects.is_empty() { " (it ran out during the checks before applying)" } else { "" }
                    ),
                )
                .with_details(json!({ "done": done, "objects": objects, "after_s": after_s }))
            }
            OperatorError::Refused { object, code, reason, message, objects } => ApiError::new(
                StatusCode::BAD_GATEWAY,
                ErrorCode::ClusterRefused,
                format!("the cluster refused {object}: {code} {reason}: {message}"),
            )
            .with_details(json!({ "object": object, "status": code, "reason": reason, "objects": objects })),
            OperatorError::LiveSessions { id, sessions } => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::ClusterInUse,
                format!(
                    "cluster {id} still has {} ({}); end them before detaching the operator",
                    plural(sessions.len(), "live session", "live sessions"),
                    sessions.join(", ")
                ),
            )
            .with_details(json!({ "sessions": sessions })),
            OperatorError::NotAttached(_) => ApiError::new(StatusCode::CONFLICT, ErrorCode::NotAttached, message),
            OperatorError::Token(m) => ApiError::internal(m),
            OperatorError::Store(e) => ApiError::from(e),
        }
    }
}

fn parse_id(raw: &str) -> Result<ClusterId, ApiError> {
    ClusterId::parse(raw).map_err(|e| ApiError::not_found(e.to_string()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct AttachParams {
    /// `true` replaces CRDs on the cluster that differ from the shipped ones.
    #[param(value_type = Option<bool>)]
    force: Option<String>,
    /// `true` deletes an operator Deployment another tool installed (Helm, deploy-operator.sh)
    /// and creates gShare's.
    #[param(value_type = Option<bool>)]
    replace: Option<String>,
    /// `true` applies upstream's node labels where missing (never over another value) and
    /// lists the nodes in the answer.
    #[param(value_type = Option<bool>)]
    label_nodes: Option<String>,
}

fn flag(v: Option<&str>, name: &'static str) -> Result<bool, ApiError> {
    match v {
        None | Some("") | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::field(&["query", name], "must be true or false", "bool_parsing")),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct DetachParams {
    /// `true` removes the finalizers of custom resources an operator will not clear.
    #[param(value_type = Option<bool>)]
    force: Option<String>,
}

/// Attach the operator: server-side apply (field manager `gshare`) of its CRDs, namespaces, RBAC,
/// token Secret and Deployment through the cluster's kubeconfig. Re-running converges.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/attach", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), AttachParams),
    responses(
        (status = 200, body = Report, description = "every object with created, updated or unchanged"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "crd_conflict: a CRD at another version (details.crds); operator_exists: another tool's operator Deployment (details.existing: manager, differences)"),
        (status = 422, body = ErrorBody, description = "setting_required (public_url, session_domain) or cluster_forbidden (details.denied: verb, resource, objects)"),
        (status = 502, body = ErrorBody, description = "cluster_unreachable (details.done: objects applied so far) or cluster_refused"),
        (status = 504, body = ErrorBody, description = "attach_deadline: operator_attach_timeout ran out (details.done, details.objects)"),
    ))]
async fn attach(
    State(app): State<OperatorState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    ApiQuery(p): ApiQuery<AttachParams>,
) -> Result<axum::Json<Report>, ApiError> {
    let id = parse_id(&id)?;
    // Parsed here, so a bad value is a 422 naming the parameter (axum's Query says only 400).
    let force = flag(p.force.as_deref(), "force")?;
    let replace = flag(p.replace.as_deref(), "replace")?;
    let label_nodes = flag(p.label_nodes.as_deref(), "label_nodes")?;
    let outcome = app.operator.attach(&id, force, replace, label_nodes).await.map_err(ApiError::from);
    let details = match &outcome {
        Ok(r) => json!({
            "force": force,
            "replace": replace,
            "label_nodes": label_nodes,
            "labeled": r.labeled_nodes.len(),
            "changed": r.changed,
            "kid": r.token.as_ref().map(|t| &t.kid),
            "profile": r.profile.as_ref().map(|p| p.profile),
        }),
        Err(e) => json!({ "force": force, "message": e.message }),
    };
    audit(&app.audit, &meta, &admin, "cluster.attach", id.as_str(), details, &outcome).await;
    // Kept on the cluster (its view's `operator.last_attach`), except for a cluster that is not
    // there: nothing to keep it on.
    let kept = match &outcome {
        Ok(_) => Some((true, None, None, None)),
        Err(e) if e.code == ErrorCode::NotFound => None,
        Err(e) => Some((false, Some(e.code.as_str()), Some(e.message.as_str()), e.details["setting"].as_str())),
    };
    if let Some((ok, code, message, setting)) = kept {
        // The attach itself happened; failing to note its outcome must not turn its answer into an error.
        if let Err(e) = app.operator.record_attach_result(&id, ok, code, message, setting).await {
            tracing::warn!(cluster = %id, error = %e, "could not keep the attach result");
        }
    }
    Ok(axum::Json(outcome?))
}

/// Detach the operator: custom resources first (waiting for their finalizers), then what attach
/// created, newest first; CRDs only when no custom resource remains. Refused while sessions live.
#[utoipa::path(post, path = "/api/v1/clusters/{id}/detach", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local"), DetachParams),
    responses(
        (status = 200, body = Report, description = "every object with deleted, absent or kept (not made by attach)"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "cluster_in_use (details.sessions), not_attached, or finalizers_pending (details.held)"),
        (status = 422, body = ErrorBody, description = "cluster_forbidden: the credentials may not delete what detach removes (details.denied: verb, resource, objects); nothing was deleted"),
        (status = 502, body = ErrorBody),
    ))]
async fn detach(
    State(app): State<OperatorState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    ApiQuery(p): ApiQuery<DetachParams>,
) -> Result<axum::Json<Report>, ApiError> {
    let id = parse_id(&id)?;
    let force = flag(p.force.as_deref(), "force")?;
    app.clusters.get(&id).await.map_err(ApiError::from)?;
    let outcome = app.operator.detach(&id, force).await.map_err(ApiError::from);
    let details = match &outcome {
        Ok(r) => json!({ "changed": r.changed, "force": force }),
        Err(e) => json!({ "message": e.message }),
    };
    audit(&app.audit, &meta, &admin, "cluster.detach", id.as_str(), details, &outcome).await;
    Ok(axum::Json(outcome?))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// Lifetime, e.g. `24h` or `7d`; at most 30 days (default: `operator_token_ttl`).
    pub ttl: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TokenAnswer {
    pub cluster_id: String,
    /// The JWT for Secret `gshare-operator-internal-jwt`, key `internal-jwt`.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenView,
}

/// Mint an operator token for a registered cluster (audited; the token itself is not logged).
#[utoipa::path(post, path = "/api/v1/clusters/{id}/operator-token", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    request_body(content = Option<TokenRequest>),
    responses(
        (status = 201, body = TokenAnswer),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
async fn operator_token(
    State(app): State<OperatorState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, axum::Json<TokenAnswer>), ApiError> {
    let id = parse_id(&id)?;
    let req: TokenRequest =
        if body.iter().all(u8::is_ascii_whitespace) { TokenRequest::default() } else { parse_json(&body)? };
    let ttl = match req.ttl.as_deref() {
        None => app.config.operator_token_ttl,
        Some(t) => parse_ttl(t).map_err(|m| ApiError::field(&["body", "ttl"], m, "value_error"))?,
    };
    if ttl > MAX_TTL {
        return Err(ApiError::field(&["body", "ttl"], "must be at most 30 days", "value_error"));
    }
    app.clusters.get(&id).await.map_err(ApiError::from)?;
    let outcome = app.operator.mint(&id, ttl).map_err(ApiError::from);
    let details = match &outcome {
        Ok(m) => json!({ "kid": m.info.kid, "expires_at": m.info.expires_at, "ttl_s": ttl.as_secs() }),
        Err(_) => json!({ "ttl_s": ttl.as_secs() }),
    };
    audit(&app.audit, &meta, &admin, "cluster.operator_token", id.as_str(), details, &outcome).await;
    let m = outcome?;
    Ok((
        StatusCode::CREATED,
        axum::Json(TokenAnswer { cluster_id: id.to_string(), info: TokenView::from(&m.info), token: m.token }),
    ))
}

/// The objects attach would apply (no token Secret), as JSON: for admins who deploy by hand.
#[utoipa::path(get, path = "/api/v1/clusters/{id}/operator-manifests", tag = "clusters",
    params(("id" = String, Path, description = "clu_<ULID> or clu_local")),
    responses(
        (status = 200, body = Object, description = "{items: [...]}, a kubectl-appliable List"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
async fn operator_manifests(
    State(app): State<OperatorState>,
    _admin: AdminCaller,
    Path(id): Path<String>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let id = parse_id(&id)?;
    let params = app.operator.params(&id).await?;
    Ok(axum::Json(json!({ "apiVersion": "v1", "kind": "List", "items": super::manifests::objects(&params) })))
}
