//! Each `/internal` POST body as its handler reads it: JSON (400 `invalid_json`, 422 for the
//! shape), then the field checks (422), before any cluster scope or store access. Public so the
//! fuzz targets (`fuzz/`, `crate::fuzzing`) feed them arbitrary bytes.

use serde::de::DeserializeOwned;

use super::wire::*;
use crate::http::error::{ApiError, FieldError};
use crate::http::extract::parse_json;

fn checked(r: Result<(), Vec<FieldError>>) -> Result<(), ApiError> {
    r.map_err(ApiError::validation)
}

/// A JSON object: an empty body is 422 (`loc ["body"]`, as every other callback answers it);
/// anything but an object is 422; `{}` takes every field's default.
fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let v: serde_json::Value = parse_json(body)?;
    if !v.is_object() {
        return Err(ApiError::field(&["body"], "must be a JSON object", "dict_type"));
    }
    parse_json(body)
}

pub fn node_report(body: &[u8]) -> Result<NodeReport, ApiError> {
    let r: NodeReport = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

pub fn gpu_report(body: &[u8]) -> Result<GpuReport, ApiError> {
    let r: GpuReport = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

pub fn drift(body: &[u8]) -> Result<DriftReport, ApiError> {
    // Any uuid shape upstream accepts (old MIG ids contain '/'); the handler bounds lengths.
    parse_object(body)
}

/// The hostname to forget; `None` when none was sent (answered `accepted:false`).
pub fn decommissioned(body: &[u8]) -> Result<Option<String>, ApiError> {
    let r: Decommissioned = parse_object(body)?;
    let hostname = r.hostname.unwrap_or_default().trim().to_string();
    // Any other name is answered 202 by the handler (no node of that name is being
    // decommissioned), never a final 422.
    Ok((!hostname.is_empty()).then_some(hostname))
}

pub fn health_event(body: &[u8]) -> Result<HealthEvent, ApiError> {
    let r: HealthEvent = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

pub fn operator_audit(body: &[u8]) -> Result<OperatorAudit, ApiError> {
    let r: OperatorAudit = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

pub fn volume_sync(body: &[u8]) -> Result<VolumeSync, ApiError> {
    let r: VolumeSync = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

pub fn session_samples(body: &[u8]) -> Result<AgentReport, ApiError> {
    let r: AgentReport = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}

/// `POST /internal/sessions/{id}/status`: the path's CR name and the report.
pub fn session_status(id: &str, body: &[u8]) -> Result<StatusReport, ApiError> {
    // An over-long CR name is an unknown session (202 no-op, as upstream): the handler decides.
    let _ = id;
    let r: StatusReport = parse_json(body)?;
    checked(r.check())?;
    Ok(r)
}
