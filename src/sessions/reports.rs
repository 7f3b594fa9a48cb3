//! The operator's reports about sessions (contract §2.1, §2.10): `POST /internal/sessions/{id}/status`
//! (routed, parsed and applied here: the last report is kept and the state machine in
//! [`super::status`] applies it) and `POST /internal/metrics/session-samples` (the node agent's
//! usage samples, the latest per session kept).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use redb::WriteTransaction;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Sessions;
use super::model::{StatusReport, find_session, put_session};
use crate::App;
use crate::auth::guard::OperatorCaller;
use crate::clusters::ClusterId;
use crate::http::error::{ApiError, ErrorBody, FieldError};
use crate::http::extract::parse_json;
use crate::inventory::apply::{Refusal, live_cluster, outcome};
use crate::inventory::model::{Accepted, MAX_NODE_NAME, MAX_SAMPLES, Problems};
use crate::inventory::routes::{accepted, checked, refusal, scope};
use crate::store::{JsonTable, Outcome, StoreError};

/// `<session id>` -> the latest agent sample.
pub const SESSION_SAMPLES: JsonTable<SessionSampleRecord> = JsonTable::new("session_samples");
/// `<session id>` -> the latest status report of its operator.
pub const SESSION_REPORTS: JsonTable<StatusReport> = JsonTable::new("session_status_reports");

pub fn routes() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(session_samples)).routes(routes!(session_status))
}

/// One agent sample (§2.10).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AgentSample {
    /// The session's CR name.
    pub session: String,
    /// Unix seconds, fractional.
    pub at: f64,
    pub cpu_cores: f64,
    pub mem_bytes: i64,
}

/// `POST /internal/metrics/session-samples`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AgentReport {
    pub node: String,
    #[serde(default)]
    pub samples: Vec<AgentSample>,
}

impl AgentReport {
    pub fn check(&self) -> Result<(), Vec<FieldError>> {
        let mut p = Problems::default();
        p.node_name(&["node"], &self.node);
        if self.samples.len() > MAX_SAMPLES {
            p.push(&["samples"], format!("at most {MAX_SAMPLES} samples per batch"), "too_long");
        }
        for (i, s) in self.samples.iter().enumerate().take(MAX_SAMPLES) {
            let i = i.to_string();
            if !(s.cpu_cores >= 0.0 && s.cpu_cores.is_finite()) {
                p.push(&["samples", &i, "cpu_cores"], "must be greater than or equal to 0", "greater_than_equal");
            }
            p.non_negative(&["samples", &i, "mem_bytes"], Some(s.mem_bytes));
            p.text(&["samples", &i, "session"], Some(&s.session));
            if !s.at.is_finite() {
                p.push(&["samples", &i, "at"], "must be a number of seconds", "float_parsing");
            }
        }
        p.into_result()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSampleRecord {
    pub session_id: String,
    pub node: String,
    pub at: f64,
    pub cpu_cores: f64,
    pub mem_bytes: i64,
}

/// `{"accepted":n,"unknown":m}`: samples kept and samples for sessions not known here.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SamplesAccepted {
    pub accepted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<u64>,
}

/// What a status report did to a known session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusApplied {
    pub session_id: Option<String>,
    /// The session failed and its CR should be deleted (after the commit).
    pub delete_cr: bool,
    /// The report was stale (from before the last resume) and changed nothing.
    pub stale: bool,
}

/// `POST /internal/sessions/{id}/status`: the last report is kept, and the session state
/// machine (`sessions::status`) applies it.
pub fn record_status(
    txn: &WriteTransaction,
    cluster_id: &str,
    name: &str,
    r: &StatusReport,
    now: i64,
) -> Result<Outcome<Result<StatusApplied, Refusal>>, StoreError> {
    if live_cluster(txn, cluster_id)?.is_none() {
        return Ok(Outcome::Unchanged(Ok(StatusApplied::default())));
    }
    let Some(mut session) = find_session(txn, name)? else {
        return Ok(Outcome::Unchanged(Ok(StatusApplied::default())));
    };
    if session.cluster_id != cluster_id {
        return Ok(Outcome::Unchanged(Err(Refusal::OtherCluster { cluster_id: session.cluster_id })));
    }
    let mut wrote = false;
    if SESSION_REPORTS.get_in_write(txn, &session.id)?.as_ref() != Some(r) {
        SESSION_REPORTS.put(txn, &session.id, r)?;
        wrote = true;
    }
    let applied = super::status::apply(txn, &mut session, r, now)?;
    if applied.wrote {
        put_session(txn, &session)?;
        wrote = true;
    }
    Ok(outcome(
        wrote,
        Ok(StatusApplied { session_id: Some(session.id), delete_cr: applied.delete_cr, stale: applied.stale }),
    ))
}

/// `POST /internal/metrics/session-samples`: keeps the latest sample per session of this
/// cluster; samples for unknown sessions (or another cluster's) are counted and dropped.
pub fn record_samples(
    txn: &WriteTransaction,
    cluster_id: &str,
    r: &AgentReport,
) -> Result<Outcome<SamplesAccepted>, StoreError> {
    if r.samples.is_empty() {
        return Ok(Outcome::Unchanged(SamplesAccepted { accepted: 0, unknown: None }));
    }
    let live = live_cluster(txn, cluster_id)?.is_some();
    let mut latest: std::collections::BTreeMap<String, &AgentSample> = Default::default();
    let mut unknown = 0;
    let mut accepted = 0;
    let mut resolved: std::collections::HashMap<&str, Option<String>> = Default::default();
    for s in &r.samples {
        let id = match resolved.get(s.session.as_str()) {
            Some(id) => id.clone(),
            None => {
                let id = if live {
                    find_session(txn, &s.session)?.filter(|x| x.cluster_id == cluster_id && x.is_live()).map(|x| x.id)
                } else {
                    None
                };
                resolved.insert(&s.session, id.clone());
                id
            }
        };
        match id {
            Some(id) => {
                accepted += 1;
                let e = latest.entry(id).or_insert(s);
                if s.at >= e.at {
                    *e = s;
                }
            }
            None => unknown += 1,
        }
    }
    let wrote = !latest.is_empty();
    for (id, s) in latest {
        let rec = SessionSampleRecord {
            session_id: id.clone(),
            node: r.node.clone(),
            at: s.at,
            cpu_cores: s.cpu_cores,
            mem_bytes: s.mem_bytes,
        };
        SESSION_SAMPLES.put(txn, &id, &rec)?;
    }
    Ok(outcome(wrote, SamplesAccepted { accepted, unknown: Some(unknown) }))
}

impl Sessions {
    pub async fn session_status(
        &self,
        cluster: &ClusterId,
        name: String,
        r: StatusReport,
    ) -> Result<Result<StatusApplied, Refusal>, StoreError> {
        let now = self.clock.now_ms();
        let id = cluster.to_string();
        self.store.write_batched(move |txn| record_status(txn, &id, &name, &r, now)).await
    }

    pub async fn session_samples(&self, cluster: &ClusterId, r: AgentReport) -> Result<SamplesAccepted, StoreError> {
        let id = cluster.to_string();
        self.store.write_batched(move |txn| record_samples(txn, &id, &r)).await
    }
}

/// The two `/internal` POST bodies of this module as their handlers read them (see
/// `inventory::routes::intake`); public for the fuzz targets.
pub mod intake {
    use super::*;

    pub fn session_samples(body: &[u8]) -> Result<AgentReport, ApiError> {
        let r: AgentReport = parse_json(body)?;
        checked(r.check())?;
        Ok(r)
    }

    /// `POST /internal/sessions/{id}/status`: the path's CR name and the report.
    pub fn session_status(id: &str, body: &[u8]) -> Result<StatusReport, ApiError> {
        let r: StatusReport = parse_json(body)?;
        let mut p = Problems::default();
        if id.len() > MAX_NODE_NAME {
            p.node_name(&["id"], id);
        }
        checked(r.check().and(p.into_result()))?;
        Ok(r)
    }
}

/// The node agent's session samples; the latest per session is kept.
#[utoipa::path(post, path = "/internal/metrics/session-samples", tag = "internal",
    request_body = AgentReport,
    responses((status = 200, body = SamplesAccepted), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn session_samples(
    State(app): State<Arc<App>>,
    caller: OperatorCaller,
    body: Bytes,
) -> Result<Json<SamplesAccepted>, ApiError> {
    let r = intake::session_samples(&body)?;
    Ok(Json(app.sessions.session_samples(&caller.cluster_id, r).await?))
}

/// A session's phase report; `{id}` is the CR name (or the session id).
#[utoipa::path(post, path = "/internal/sessions/{id}/status", tag = "internal",
    params(("id" = String, Path, description = "the GShareSession CR name, e.g. ses-01j…")),
    request_body = StatusReport,
    responses(
        (status = 202, body = Accepted, description = "recorded; an unknown session is a no-op"),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "cluster_id or the session belongs to another cluster"),
        (status = 422, body = ErrorBody),
    ))]
async fn session_status(
    State(app): State<Arc<App>>,
    caller: OperatorCaller,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let r = intake::session_status(&id, &body)?;
    scope(&caller, r.cluster_id.as_deref())?;
    let applied =
        app.sessions.session_status(&caller.cluster_id, id, r).await?.map_err(|e| refusal(Some(&caller), e))?;
    if applied.delete_cr
        && let Some(sid) = applied.session_id
    {
        // Upstream deletes the CR of a failed session; the report is answered first.
        let sessions = app.sessions.clone();
        tokio::spawn(async move { sessions.delete_failed_cr(&sid).await });
    }
    Ok(accepted())
}
