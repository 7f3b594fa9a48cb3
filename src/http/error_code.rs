//! Every `error.code` the server answers with, in one place. The strings are a contract: the
//! operator and the console branch on them, so a variant's name on the wire never changes (the
//! test below pins each one). A new code is a new variant here; the OpenAPI document lists them
//! all as the `ErrorCode` schema of the error envelope.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The stable, machine-readable reason of an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    // ----- the request itself (any route) -----
    /// 400: the request cannot be read (query string, header, path).
    BadRequest,
    /// 400: the body is not JSON.
    InvalidJson,
    /// 422: `details.errors[{loc,msg,type}]` names each field.
    ValidationFailed,
    /// 413: the body exceeds the route's limit.
    PayloadTooLarge,
    /// 408: the body arrived too slowly or too late.
    BodyTimeout,
    /// 408: the request took too long.
    Timeout,
    /// 431: the headers exceed 64 KiB.
    HeadersTooLarge,
    /// 415: not the content type the route reads.
    UnsupportedMediaType,
    /// 405: the route does not answer this method.
    MethodNotAllowed,
    /// 404: no such route or object.
    NotFound,
    /// 409: the change clashes with what exists.
    Conflict,
    /// 422: the `Idempotency-Key` was used with another body.
    IdempotencyKeyReused,
    /// 429: too many attempts; `Retry-After` says when to try again.
    RateLimited,
    /// 429: too many unauthenticated requests sending bodies from one address.
    TooManyRequests,
    /// 503: every connection slot or body buffer is taken; retry shortly.
    ServerBusy,
    /// 503: the server cannot serve this now (store or keys not usable).
    Unavailable,
    /// 500: the server log has details under the request id.
    Internal,
    /// 507: the filesystem of the state file is full; writes are refused until space is freed
    /// (`details`: `data_dir`, `avail_bytes`). Reads go on.
    StorageFull,

    // ----- who is asking -----
    /// 401: no token or console session, or an invalid or ended one.
    Unauthenticated,
    /// 403: the caller may not do this.
    Forbidden,
    /// 403: the caller's role may not call this route (a member on an admin route).
    ForbiddenRole,
    /// 403: an admin set this account's password (a first password, a reset): until its owner
    /// changes it (`POST /api/v1/account/password`), the account reads itself, changes the
    /// password and signs out, nothing else.
    PasswordChangeRequired,
    /// 401: wrong username or password.
    InvalidCredentials,
    /// 403: the right password for a disabled account.
    AccountDisabled,
    /// 403: a console-cookie change without the session's `X-CSRF-Token`.
    CsrfFailed,
    /// 403: sign-in or sign-out sent from another site's page.
    CrossOrigin,
    /// 410: the invite link was used already.
    InviteUsed,
    /// 410: the invite link is older than 72 hours.
    InviteExpired,
    /// 410: the invite's account, or the admin who sent it, was deleted since.
    InviteRevoked,
    /// 421: this host does not serve the route (a session domain, or another session's).
    WrongHost,

    // ----- clusters -----
    /// 422: registration's probe failed (`details`: stage, cause, hint, checks, missing).
    ProbeFailed,
    /// 409: the cluster still has live sessions or allocations.
    ClusterInUse,
    /// 422: the kubeconfig reaches another cluster than the registered one.
    KubeconfigOtherCluster,
    /// 409: no connected cluster can take a session.
    NoCluster,
    /// 409: the cluster cannot take sessions now (`details.status`).
    ClusterUnavailable,
    /// 502: the cluster did not answer.
    ClusterUnreachable,
    /// 502: the cluster refused to apply a session's GShareSession.
    ClusterApplyFailed,

    // ----- the operator on a cluster -----
    /// 422: a server setting the action needs is not set (`details.setting`).
    SettingRequired,
    /// 422: the cluster's credentials lack rights attach needs (`details.denied`).
    ClusterForbidden,
    /// 409: an object attach would create was installed by someone else.
    OperatorExists,
    /// 409: objects still hold a finalizer after detach waited.
    FinalizersPending,
    /// 409: the cluster's CRDs differ from the shipped ones.
    CrdConflict,
    /// 504: attach ran out of `operator_attach_timeout`.
    AttachDeadline,
    /// 502: the cluster refused an object.
    ClusterRefused,
    /// 409: the operator is not attached to this cluster.
    NotAttached,
    /// 409: the cluster's operator has not called back recently.
    OperatorNotConnected,

    // ----- inventory -----
    /// 409: the node is being decommissioned.
    NodeDecommissioning,
    /// 409: the node still runs sessions.
    NodeInUse,

    // ----- sessions -----
    /// 409: the offering is named by sessions; deactivate it instead.
    OfferingInUse,
    /// 409: the offering is inactive.
    OfferingInactive,
    /// 409: the session's phase does not allow the action (`details.allowed`).
    SessionConflict,
    /// 409: only a running session can be opened.
    SessionNotRunning,
    /// 409: no session domain is set for the cluster or the server.
    NoSessionDomain,
    /// 404: this server does not relay `/proxy/` for the session's cluster.
    NoSessionIngress,
    /// 429: the session has as many WebSockets open as it may.
    TooManyTunnels,
    /// 502: the session ingress did not answer.
    IngressUnreachable,
    /// 502: the relay could not pass the request or its answer on.
    RelayFailed,

    // ----- fair sharing -----
    /// 409: the owner's resource policy refuses it (`details`: `{limit, active}` or
    /// `{resource, limit, used, request}`, upstream's shapes; for volumes: scope, limit_gb,
    /// allocated_gb, requested_gb).
    QuotaExceeded,
    /// 409: no schedulable node of the cluster can hold the slice now (`details` name the largest
    /// free slice and the GPU models the fleet reports).
    Unserviceable,
    /// 409: the group still has members or a policy.
    GroupInUse,

    // ----- snapshots -----
    /// 507: the snapshot could not be written.
    SnapshotFailed,

    // ----- volumes -----
    /// 409: a volume only grows (`details`: quota_gb, current_gb).
    VolumeShrinkNotAllowed,
    /// 409: a live session mounts the volume (`details.sessions[{id,name,phase}]`).
    VolumeMounted,
}

impl ErrorCode {
    /// The code as it appears on the wire (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::InvalidJson => "invalid_json",
            Self::ValidationFailed => "validation_failed",
            Self::PayloadTooLarge => "payload_too_large",
            Self::BodyTimeout => "body_timeout",
            Self::Timeout => "timeout",
            Self::HeadersTooLarge => "headers_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::RateLimited => "rate_limited",
            Self::InviteUsed => "invite_used",
            Self::InviteExpired => "invite_expired",
            Self::InviteRevoked => "invite_revoked",
            Self::TooManyRequests => "too_many_requests",
            Self::ServerBusy => "server_busy",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
            Self::StorageFull => "storage_full",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::ForbiddenRole => "forbidden_role",
            Self::PasswordChangeRequired => "password_change_required",
            Self::AccountDisabled => "account_disabled",
            Self::InvalidCredentials => "invalid_credentials",
            Self::CsrfFailed => "csrf_failed",
            Self::CrossOrigin => "cross_origin",
            Self::WrongHost => "wrong_host",
            Self::ProbeFailed => "probe_failed",
            Self::ClusterInUse => "cluster_in_use",
            Self::KubeconfigOtherCluster => "kubeconfig_other_cluster",
            Self::NoCluster => "no_cluster",
            Self::ClusterUnavailable => "cluster_unavailable",
            Self::ClusterUnreachable => "cluster_unreachable",
            Self::ClusterApplyFailed => "cluster_apply_failed",
            Self::SettingRequired => "setting_required",
            Self::ClusterForbidden => "cluster_forbidden",
            Self::OperatorExists => "operator_exists",
            Self::FinalizersPending => "finalizers_pending",
            Self::CrdConflict => "crd_conflict",
            Self::AttachDeadline => "attach_deadline",
            Self::ClusterRefused => "cluster_refused",
            Self::NotAttached => "not_attached",
            Self::OperatorNotConnected => "operator_not_connected",
            Self::NodeDecommissioning => "node_decommissioning",
            Self::NodeInUse => "node_in_use",
            Self::OfferingInUse => "offering_in_use",
            Self::OfferingInactive => "offering_inactive",
            Self::SessionConflict => "session_conflict",
            Self::QuotaExceeded => "quota_exceeded",
            Self::Unserviceable => "unserviceable",
            Self::GroupInUse => "group_in_use",
            Self::SessionNotRunning => "session_not_running",
            Self::NoSessionDomain => "no_session_domain",
            Self::NoSessionIngress => "no_session_ingress",
            Self::TooManyTunnels => "too_many_tunnels",
            Self::IngressUnreachable => "ingress_unreachable",
            Self::RelayFailed => "relay_failed",
            Self::SnapshotFailed => "snapshot_failed",
            Self::VolumeShrinkNotAllowed => "volume_shrink_not_allowed",
            Self::VolumeMounted => "volume_mounted",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire strings, written out once more by hand: changing one breaks the operator or the
    /// console, so it must fail here first.
    const PINNED: &[(ErrorCode, &str)] = &[
        (ErrorCode::BadRequest, "bad_request"),
        (ErrorCode::InvalidJson, "invalid_json"),
        (ErrorCode::ValidationFailed, "validation_failed"),
        (ErrorCode::PayloadTooLarge, "payload_too_large"),
        (ErrorCode::BodyTimeout, "body_timeout"),
        (ErrorCode::Timeout, "timeout"),
        (ErrorCode::HeadersTooLarge, "headers_too_large"),
        (ErrorCode::UnsupportedMediaType, "unsupported_media_type"),
        (ErrorCode::MethodNotAllowed, "method_not_allowed"),
        (ErrorCode::NotFound, "not_found"),
        (ErrorCode::Conflict, "conflict"),
        (ErrorCode::IdempotencyKeyReused, "idempotency_key_reused"),
        (ErrorCode::RateLimited, "rate_limited"),
        (ErrorCode::InviteUsed, "invite_used"),
        (ErrorCode::InviteExpired, "invite_expired"),
        (ErrorCode::InviteRevoked, "invite_revoked"),
        (ErrorCode::TooManyRequests, "too_many_requests"),
        (ErrorCode::ServerBusy, "server_busy"),
        (ErrorCode::Unavailable, "unavailable"),
        (ErrorCode::Internal, "internal"),
        (ErrorCode::StorageFull, "storage_full"),
        (ErrorCode::Unauthenticated, "unauthenticated"),
        (ErrorCode::Forbidden, "forbidden"),
        (ErrorCode::ForbiddenRole, "forbidden_role"),
        (ErrorCode::PasswordChangeRequired, "password_change_required"),
        (ErrorCode::AccountDisabled, "account_disabled"),
        (ErrorCode::InvalidCredentials, "invalid_credentials"),
        (ErrorCode::CsrfFailed, "csrf_failed"),
        (ErrorCode::CrossOrigin, "cross_origin"),
        (ErrorCode::WrongHost, "wrong_host"),
        (ErrorCode::ProbeFailed, "probe_failed"),
        (ErrorCode::ClusterInUse, "cluster_in_use"),
        (ErrorCode::KubeconfigOtherCluster, "kubeconfig_other_cluster"),
        (ErrorCode::NoCluster, "no_cluster"),
        (ErrorCode::ClusterUnavailable, "cluster_unavailable"),
        (ErrorCode::ClusterUnreachable, "cluster_unreachable"),
        (ErrorCode::ClusterApplyFailed, "cluster_apply_failed"),
        (ErrorCode::SettingRequired, "setting_required"),
        (ErrorCode::ClusterForbidden, "cluster_forbidden"),
        (ErrorCode::OperatorExists, "operator_exists"),
        (ErrorCode::FinalizersPending, "finalizers_pending"),
        (ErrorCode::CrdConflict, "crd_conflict"),
        (ErrorCode::AttachDeadline, "attach_deadline"),
        (ErrorCode::ClusterRefused, "cluster_refused"),
        (ErrorCode::NotAttached, "not_attached"),
        (ErrorCode::OperatorNotConnected, "operator_not_connected"),
        (ErrorCode::NodeDecommissioning, "node_decommissioning"),
        (ErrorCode::NodeInUse, "node_in_use"),
        (ErrorCode::OfferingInUse, "offering_in_use"),
        (ErrorCode::OfferingInactive, "offering_inactive"),
        (ErrorCode::SessionConflict, "session_conflict"),
        (ErrorCode::QuotaExceeded, "quota_exceeded"),
        (ErrorCode::Unserviceable, "unserviceable"),
        (ErrorCode::GroupInUse, "group_in_use"),
        (ErrorCode::SessionNotRunning, "session_not_running"),
        (ErrorCode::NoSessionDomain, "no_session_domain"),
        (ErrorCode::NoSessionIngress, "no_session_ingress"),
        (ErrorCode::TooManyTunnels, "too_many_tunnels"),
        (ErrorCode::IngressUnreachable, "ingress_unreachable"),
        (ErrorCode::RelayFailed, "relay_failed"),
        (ErrorCode::SnapshotFailed, "snapshot_failed"),
        (ErrorCode::VolumeShrinkNotAllowed, "volume_shrink_not_allowed"),
        (ErrorCode::VolumeMounted, "volume_mounted"),
    ];

    #[test]
    fn every_wire_string_is_pinned() {
        for &(code, wire) in PINNED {
            assert_eq!(code.as_str(), wire);
            assert_eq!(code.to_string(), wire);
            assert_eq!(serde_json::to_value(code).unwrap(), wire, "serde name of {code:?}");
            assert_eq!(serde_json::from_value::<ErrorCode>(wire.into()).unwrap(), code);
        }
        // The schema lists every variant (the derive walks them all), so a variant missing from
        // PINNED, or pinned twice, shows here.
        let schema = serde_json::to_value(<ErrorCode as utoipa::PartialSchema>::schema()).unwrap();
        let mut listed: Vec<&str> = schema["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let mut pinned: Vec<&str> = PINNED.iter().map(|(_, s)| *s).collect();
        listed.sort_unstable();
        pinned.sort_unstable();
        assert_eq!(listed, pinned);
    }

    #[test]
    fn the_openapi_document_lists_every_code_on_the_envelope() {
        let doc = crate::http::api_document();
        let mut doc = serde_json::to_value(&doc).unwrap();
        crate::http::docs::add_shared_answers(&mut doc);
        let mut listed: Vec<&str> = doc
            .pointer("/components/schemas/ErrorCode/enum")
            .and_then(|v| v.as_array())
            .expect("an ErrorCode schema")
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        listed.sort_unstable();
        let mut pinned: Vec<&str> = PINNED.iter().map(|(_, s)| *s).collect();
        pinned.sort_unstable();
        assert_eq!(listed, pinned);
        let code = &doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"];
        assert!(code.to_string().contains("#/components/schemas/ErrorCode"), "{code}");
        let html = crate::http::docs::reference_html(&doc);
        assert!(html.contains("<code>csrf_failed</code>") && html.contains("<code>node_in_use</code>"));
    }
}
