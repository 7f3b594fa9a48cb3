//! `/api/v1/volumes`: list, add, grow, delete. An admin acts on every volume; a member sees and
//! acts on their own only (another's answers as a missing one).

use std::sync::Arc;

use crate::http::api_router::{Docs, routes};
use axum::body::Bytes;
use axum::extract::{FromRef, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

use super::model::{OrphanView, OwnerReclaimView, VolumeList, VolumeView};
use super::{Actor, Adopt, ListQuery, NewVolume, VolumeError, Volumes};
use crate::audit::{RequestMeta, record_change as audit};
use crate::auth::guard::AdminCaller;
use crate::auth::guard::Gate;
use crate::auth::guard::SignedIn;
use crate::http::client_addr::AddrConfig;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::extract::{ApiQuery, parse_json};
use crate::sessions::model::AccessMode;

/// What the volumes' handlers use (made from the router state by the composition root).
#[derive(Clone)]
pub struct VolumesState {
    pub volumes: Arc<Volumes>,
    pub audit: Arc<crate::audit::AuditLog>,
}

pub fn routes<S, D: Docs>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    VolumesState: FromRef<S>,
    Gate: FromRef<S>,
    AddrConfig: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(D: list_volumes, create_volume))
        .routes(routes!(D: show_volume, grow_volume, delete_volume))
        .routes(routes!(D: share_volume, unshare_volume))
        .routes(routes!(D: adopt_orphan))
        .routes(routes!(D: reclaim_orphan))
        .routes(routes!(D: reclaim_owner))
}

impl From<VolumeError> for ApiError {
    fn from(e: VolumeError) -> Self {
        match e {
            VolumeError::Invalid { field, message, kind } => ApiError::field(&["body", field], message, kind),
            VolumeError::NotFound(m) => ApiError::not_found(m),
            VolumeError::Conflict { code, message, details } => {
                ApiError::new(StatusCode::CONFLICT, code, message).with_details(details)
            }
            VolumeError::Store(e) => ApiError::from(e),
        }
    }
}

fn actor(caller: &SignedIn) -> Actor {
    Actor { name: caller.username.clone(), admin: caller.is_admin() }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// An admin's filter: one owner's volumes (a member always gets their own).
    owner: Option<String>,
    cluster_id: Option<String>,
    /// `true`: deleted volumes too (reclaim pending or reclaimed).
    deleted: Option<String>,
}

/// Volumes, newest first: an admin's of everyone (by owner, by cluster) with the orphan PVCs the
/// operators reported, a member's own.
#[utoipa::path(get, path = "/api/v1/volumes", tag = "volumes", params(ListParams),
    responses((status = 200, body = VolumeList), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn list_volumes(
    State(app): State<VolumesState>,
    caller: SignedIn,
    ApiQuery(p): ApiQuery<ListParams>,
) -> Result<axum::Json<VolumeList>, ApiError> {
    let deleted = match p.deleted.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::field(&["query", "deleted"], "must be true or false", "bool_parsing")),
    };
    let owner = p.owner.filter(|o| !o.is_empty());
    // A deleted account's volumes are listed under its name, so an unknown owner is an empty
    // list; a name no account could have had is a mistake, said as the usage route says it.
    if let Some(o) = &owner
        && crate::auth::accounts::Username::parse(o).is_err()
    {
        return Err(ApiError::field(
            &["query", "owner"],
            format!("{} is not a username: 1-64 characters from A-Z a-z 0-9 - _ . @", crate::http::text::echo(o)),
            "value_error",
        ));
    }
    let cluster_id = p.cluster_id.filter(|c| !c.is_empty());
    if let Some(c) = &cluster_id
        && crate::cluster_id::ClusterId::parse(c).is_err()
    {
        return Err(ApiError::field(
            &["query", "cluster_id"],
            format!("{} is not a cluster id (clu_ and a 26-character ULID, or clu_local)", crate::http::text::echo(c)),
            "value_error",
        ));
    }
    let q = ListQuery { owner, cluster_id, deleted };
    Ok(axum::Json(app.volumes.list(q, actor(&caller)).await?))
}

/// `POST /api/v1/volumes`. Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeCreate {
    /// 1–63 of `a-z 0-9 - _ .`, starting with a letter or digit; mounted at `/data/<name>` in the
    /// owner's sessions on the cluster. Unique per owner and cluster.
    #[schema(min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9._-]*$")]
    pub name: String,
    /// The one cluster it lives on.
    pub cluster_id: String,
    /// GiB, 1–1048576; counted against the owner's storage limit.
    #[schema(minimum = 1, maximum = 1048576)]
    pub size_gb: i64,
    /// RWO (default), RWX or ROX (mounted read-only).
    #[serde(default)]
    pub mode: Option<AccessMode>,
    /// Whose volume (admins only; default: the caller).
    #[serde(default)]
    pub owner: Option<String>,
}

const MAX_GB: i64 = 1 << 20;

fn check_size(size_gb: i64) -> Result<i64, VolumeError> {
    if (1..=MAX_GB).contains(&size_gb) {
        Ok(size_gb)
    } else {
        Err(VolumeError::Invalid {
            field: "size_gb",
            message: format!("must be a size in GiB between 1 and {MAX_GB}"),
            kind: "value_error",
        })
    }
}

fn check_name(name: &str) -> Result<String, VolumeError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(name.to_string())
    } else {
        Err(VolumeError::Invalid {
            field: "name",
            message: "must be 1–63 characters of a-z 0-9 . _ -, starting with a letter or digit".into(),
            kind: "value_error",
        })
    }
}

/// Add a named volume on one cluster (the PVC is made when a session first mounts it).
#[utoipa::path(post, path = "/api/v1/volumes", tag = "volumes", request_body = VolumeCreate,
    responses((status = 201, body = VolumeView), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "a member naming another owner"),
        (status = 404, body = ErrorBody, description = "no such cluster"),
        (status = 409, body = ErrorBody, description = "quota_exceeded (details: scope, limit_gb, allocated_gb, requested_gb), or conflict: the name is taken"),
        (status = 422, body = ErrorBody)))]
async fn create_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    meta: RequestMeta,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: VolumeCreate = parse_json(&body)?;
    let owner = match req.owner.as_deref().filter(|o| !o.is_empty()) {
        Some(o) if o != caller.username && !caller.is_admin() => {
            return Err(ApiError::forbidden("a member adds volumes of their own only"));
        }
        Some(o) => o.to_string(),
        None => caller.username.clone(),
    };
    let new = NewVolume {
        name: check_name(&req.name)?,
        owner,
        cluster_id: req.cluster_id.clone(),
        size_gb: check_size(req.size_gb)?,
        mode: req.mode.unwrap_or(AccessMode::ReadWriteOnce),
    };
    let details = serde_json::json!({ "name": new.name, "owner": new.owner, "cluster_id": new.cluster_id, "size_gb": new.size_gb });
    let outcome = app.volumes.create(new).await.map_err(ApiError::from);
    let target = outcome.as_ref().map(|v| v.id.clone()).unwrap_or_default();
    audit(&app.audit, &meta, &caller, "volume.create", &target, details, &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

/// One volume, with the sessions that mount it and what the last sync saw.
#[utoipa::path(get, path = "/api/v1/volumes/{id}", tag = "volumes", params(("id" = String, Path, description = "vol_<ULID>")),
    responses((status = 200, body = VolumeView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn show_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    Path(id): Path<String>,
) -> Result<axum::Json<VolumeView>, ApiError> {
    Ok(axum::Json(app.volumes.get(&id, actor(&caller)).await?))
}

/// `PATCH /api/v1/volumes/{id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeGrow {
    /// The new quota in GiB: never smaller than now, within the owner's storage limit.
    #[schema(minimum = 1, maximum = 1048576)]
    pub size_gb: i64,
}

/// Grow a volume (the cluster's next sync answers the quota; the operator grows the PVC).
#[utoipa::path(patch, path = "/api/v1/volumes/{id}", tag = "volumes", request_body = VolumeGrow,
    params(("id" = String, Path, description = "vol_<ULID>")),
    responses((status = 200, body = VolumeView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "volume_shrink_not_allowed (details: quota_gb, current_gb) or quota_exceeded (details: scope, limit_gb, allocated_gb, requested_gb)"),
        (status = 422, body = ErrorBody)))]
async fn grow_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<VolumeView>, ApiError> {
    let req: VolumeGrow = parse_json(&body)?;
    let size_gb = check_size(req.size_gb)?;
    let outcome = app.volumes.grow(&id, size_gb, actor(&caller)).await.map_err(ApiError::from);
    let was = outcome.as_ref().map(|(_, w)| *w).ok();
    let details = serde_json::json!({ "size_gb": size_gb, "was_gb": was });
    audit(&app.audit, &meta, &caller, "volume.grow", &id, details, &outcome).await;
    Ok(axum::Json(outcome?.0))
}

/// Delete a volume no live session mounts (409 `volume_mounted` naming them); the cluster's next
/// sync answers `reclaim` and the operator deletes the PVC and its data.
#[utoipa::path(delete, path = "/api/v1/volumes/{id}", tag = "volumes", params(("id" = String, Path, description = "vol_<ULID>")),
    responses((status = 200, body = VolumeView, description = "deleted: state reclaim_pending"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "volume_mounted: details.sessions[{id,name,phase}]")))]
async fn delete_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<axum::Json<VolumeView>, ApiError> {
    let outcome = app.volumes.delete(&id, actor(&caller)).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &caller, "volume.delete", &id, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// `PUT /api/v1/volumes/{id}/share`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeShare {
    /// The group whose members' sessions on the volume's cluster mount it read-only, at
    /// `/shared/<owner>/<name>`.
    pub group: String,
}

/// Share a named RWX or ROX volume read-only with a group (its owner or an admin). Sessions its
/// members start on the volume's cluster from then on mount it read-only; it stays the owner's
/// (only they grow or delete it), and a mounted share keeps it from being deleted.
#[utoipa::path(put, path = "/api/v1/volumes/{id}/share", tag = "volumes", request_body = VolumeShare,
    params(("id" = String, Path, description = "vol_<ULID>")),
    responses((status = 200, body = VolumeView), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such volume (or not the caller's), or no such group"),
        (status = 409, body = ErrorBody, description = "conflict: a home workspace, or an RWO volume (its claim attaches to one node)"),
        (status = 422, body = ErrorBody)))]
async fn share_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<VolumeView>, ApiError> {
    let req: VolumeShare = parse_json(&body)?;
    // The accounts' group rule: a name no account can be in has no members to share with.
    if crate::auth::accounts::check_group(&req.group).is_err() {
        return Err(ApiError::field(
            &["body", "group"],
            "must be a group's name: 1–64 characters, letters, digits and - _ . @",
            "value_error",
        ));
    }
    let details = serde_json::json!({ "group": req.group });
    let outcome = app.volumes.share(&id, Some(req.group), actor(&caller)).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &caller, "volume.share", &id, details, &outcome).await;
    Ok(axum::Json(outcome?))
}

/// Stop sharing a volume (sessions already running keep their mount until they end).
#[utoipa::path(delete, path = "/api/v1/volumes/{id}/share", tag = "volumes",
    params(("id" = String, Path, description = "vol_<ULID>")),
    responses((status = 200, body = VolumeView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn unshare_volume(
    State(app): State<VolumesState>,
    caller: SignedIn,
    meta: RequestMeta,
    Path(id): Path<String>,
) -> Result<axum::Json<VolumeView>, ApiError> {
    let outcome = app.volumes.share(&id, None, actor(&caller)).await.map_err(ApiError::from);
    audit(&app.audit, &meta, &caller, "volume.unshare", &id, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// `POST /api/v1/volumes/orphans/{cluster_id}/{name}/adopt`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrphanAdopt {
    /// The member (or admin) who owns it from now on.
    pub owner: String,
    /// The volume's name (mounted at `/data/<name>`); default: the PVC's name, when it fits the
    /// volume name rule.
    #[serde(default)]
    pub name: Option<String>,
    /// RWO (default), RWX or ROX: as the claim was made.
    #[serde(default)]
    pub mode: Option<AccessMode>,
}

fn admin_actor(a: &AdminCaller) -> String {
    a.username.clone()
}

/// Adopt an orphan PVC (admins): it becomes a named volume of `owner` on its cluster, its data
/// kept, sized as last reported, mounted in the owner's sessions there from then on.
#[utoipa::path(post, path = "/api/v1/volumes/orphans/{cluster_id}/{name}/adopt", tag = "volumes", request_body = OrphanAdopt,
    params(("cluster_id" = String, Path), ("name" = String, Path, description = "the PVC's name")),
    responses((status = 201, body = VolumeView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such orphan on that cluster (the message names the cluster that has one of that name)"),
        (status = 409, body = ErrorBody, description = "conflict: the owner has a volume of that name there"),
        (status = 422, body = ErrorBody, description = "no such account, or a name that breaks the rule")))]
async fn adopt_orphan(
    State(app): State<VolumesState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((cluster_id, pvc)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: OrphanAdopt = parse_json(&body)?;
    let name = check_name(req.name.as_deref().unwrap_or(&pvc))?;
    let adopt = Adopt {
        cluster_id: cluster_id.clone(),
        pvc: pvc.clone(),
        owner: req.owner.clone(),
        name,
        mode: req.mode.unwrap_or(AccessMode::ReadWriteOnce),
    };
    let details = serde_json::json!({ "cluster_id": cluster_id, "pvc": pvc, "owner": req.owner, "name": adopt.name });
    let outcome = app.volumes.adopt(adopt).await.map_err(ApiError::from);
    let target = outcome.as_ref().map(|v| v.id.clone()).unwrap_or_else(|_| format!("{cluster_id}/{pvc}"));
    audit(&app.audit, &meta, &admin, "volume.adopt", &crate::audit::truncate(target), details, &outcome).await;
    Ok((StatusCode::CREATED, axum::Json(outcome?)).into_response())
}

/// Reclaim an orphan PVC (admins): the cluster's next sync answers `reclaim` for it and the
/// operator deletes it and its data (unless a pod mounts it). Asking again changes nothing.
#[utoipa::path(post, path = "/api/v1/volumes/orphans/{cluster_id}/{name}/reclaim", tag = "volumes",
    params(("cluster_id" = String, Path), ("name" = String, Path, description = "the PVC's name")),
    responses((status = 200, body = OrphanView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no such orphan on that cluster")))]
async fn reclaim_orphan(
    State(app): State<VolumesState>,
    admin: AdminCaller,
    meta: RequestMeta,
    Path((cluster_id, pvc)): Path<(String, String)>,
) -> Result<axum::Json<OrphanView>, ApiError> {
    let by = admin_actor(&admin);
    let outcome = app.volumes.reclaim_orphan(&cluster_id, &pvc, &by).await.map_err(ApiError::from);
    let target = crate::audit::truncate(format!("{cluster_id}/{pvc}"));
    audit(&app.audit, &meta, &admin, "volume.orphan_reclaim", &target, serde_json::json!({}), &outcome).await;
    Ok(axum::Json(outcome?))
}

/// `POST /api/v1/volumes/reclaim`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnerReclaim {
    /// Whose volumes (typically an account just deleted).
    pub owner: String,
}

/// Reclaim every volume of one owner (admins; the console offers it when deleting an account,
/// whose volumes are otherwise kept): each no live session mounts is deleted (its cluster's next
/// sync answers `reclaim`); a mounted one is kept and named.
#[utoipa::path(post, path = "/api/v1/volumes/reclaim", tag = "volumes", request_body = OwnerReclaim,
    responses((status = 200, body = OwnerReclaimView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
async fn reclaim_owner(
    State(app): State<VolumesState>,
    admin: AdminCaller,
    meta: RequestMeta,
    body: Bytes,
) -> Result<axum::Json<OwnerReclaimView>, ApiError> {
    let req: OwnerReclaim = parse_json(&body)?;
    if req.owner.is_empty() {
        return Err(ApiError::field(&["body", "owner"], "must name an owner", "value_error"));
    }
    // The account may be gone already (that is when the console asks), but never a name no
    // account could have had.
    if crate::auth::accounts::Username::parse(&req.owner).is_err() {
        return Err(ApiError::field(
            &["body", "owner"],
            format!(
                "{} is not a username: 1-64 characters from A-Z a-z 0-9 - _ . @",
                crate::http::text::echo(&req.owner)
            ),
            "value_error",
        ));
    }
    let outcome = app.volumes.reclaim_owner(&req.owner).await.map_err(ApiError::from);
    let details = match &outcome {
        Ok(r) => serde_json::json!({
            "reclaimed": r.reclaimed.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
            "kept": r.kept.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        }),
        Err(_) => serde_json::json!({}),
    };
    audit(
        &app.audit,
        &meta,
        &admin,
        "volume.reclaim_owner",
        &crate::audit::truncate(req.owner.clone()),
        details,
        &outcome,
    )
    .await;
    Ok(axum::Json(outcome?))
}
