//! What the store keeps about an operator attached to a cluster.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::JsonTable;

/// `clu_…` -> what attach put on that cluster and the token it holds.
pub const ATTACHMENTS: JsonTable<Attachment> = JsonTable::new("operator_attachments");

/// `clu_…` -> CRDs attach created that a completed detach kept (custom resources of them
/// remained in other namespaces). The next attach counts them as its own again, and a later
/// detach removes them once nothing holds them.
pub const LEFTOVERS: JsonTable<Leftovers> = JsonTable::new("operator_leftovers");

/// `clu_…` -> how the last attach through the API ended: the cluster's row says it after the
/// dialog that showed it is closed (a refusal otherwise read as plain "not attached").
pub const ATTACH_RESULTS: JsonTable<AttachResult> = JsonTable::new("operator_attach_results");

/// The outcome of one attach request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachResult {
    /// Unix ms.
    pub at_ms: i64,
    pub ok: bool,
    /// The refusal's error code (`setting_required`, `cluster_forbidden`, …) and message.
    pub code: Option<String>,
    pub message: Option<String>,
    /// For `setting_required`: which setting (`public_url`, `session_domain`).
    pub setting: Option<String>,
}

/// What a completed detach left on a cluster, still gShare's to remove.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Leftovers {
    pub cluster_id: String,
    /// Unix ms of the detach that kept them.
    pub since: i64,
    pub objects: Vec<AppliedObject>,
}

/// One object attach applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    /// Attach created it (it was not there before): detach removes only these.
    pub created: bool,
}

/// The operator token a cluster's Secret holds, as last written by gShare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub kid: String,
    /// Unix seconds.
    pub issued_at: i64,
    /// Unix seconds.
    pub expires_at: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotation {
    /// Consecutive failed renewals.
    pub failures: u32,
    pub last_error: Option<String>,
    /// Unix ms.
    pub last_error_at: Option<i64>,
    /// Unix ms: no renewal attempt before this (backoff after a failure).
    pub next_attempt_at: Option<i64>,
    /// Unix ms of the last successful renewal.
    pub last_renewed_at: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attachment {
    pub cluster_id: String,
    /// Unix ms of the first complete attach (`None` while no attach has completed).
    pub attached_at: Option<i64>,
    /// Unix ms of the last attach attempt.
    pub last_attempt_at: i64,
    /// The last attempt applied every object.
    pub complete: bool,
    pub objects: Vec<AppliedObject>,
    pub image: String,
    pub control_plane_url: String,
    pub session_domain: String,
    pub token: Option<TokenInfo>,
    #[serde(default)]
    pub rotation: Rotation,
}
