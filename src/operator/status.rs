//! Whether a cluster's operator is there and talking: the `operator` part of a cluster's view.

use serde::Serialize;
use utoipa::ToSchema;

use super::model::{AttachResult, Attachment};
use super::{CALLBACK_INTERVAL, Operator, Rejection, TokenView};
use crate::clock::rfc3339_ms;
use crate::clusters::model::ClusterView;

/// `not_attached`: registered only. `attach_incomplete`: the last attach stopped part-way.
/// `connected`: a callback within two heartbeat intervals. `silent`: attached, no recent callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperatorState {
    NotAttached,
    AttachIncomplete,
    Connected,
    Silent,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OperatorConnection {
    pub state: OperatorState,
    pub attached_at: Option<String>,
    /// Age of the last operator callback, seconds.
    pub last_callback_age_s: Option<i64>,
    /// Why a silent operator may be silent, most likely first.
    pub likely_causes: Vec<String>,
    /// The last `/internal/*` token refused that claimed this cluster.
    pub last_token_rejection: Option<Rejection>,
    /// The token gShare last wrote into the cluster's Secret.
    pub token: Option<TokenView>,
    /// Last failed renewal of that token, and when the next attempt is due.
    pub renewal_error: Option<String>,
    pub renewal_error_at: Option<String>,
    pub next_renewal_attempt_at: Option<String>,
    /// The image and control-plane URL the operator was deployed with.
    pub image: Option<String>,
    pub control_plane_url: Option<String>,
    /// The operator's Deployment, pods, log tail and Events as last read from the cluster
    /// (while it is silent, at most every 30 s, and on every connection test).
    pub pod: Option<super::pod::OperatorPods>,
    /// How the last attach request ended (kept until the next one, or a detach).
    pub last_attach: Option<AttachResultView>,
}

/// The last attach request's outcome, as a cluster's view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct AttachResultView {
    /// RFC 3339.
    pub at: String,
    pub ok: bool,
    /// The refusal's error code, e.g. `setting_required`, `cluster_forbidden`, `cluster_unreachable`.
    pub code: Option<String>,
    pub message: Option<String>,
    /// For `setting_required`: `public_url` or `session_domain`.
    pub setting: Option<String>,
}

impl From<&AttachResult> for AttachResultView {
    fn from(r: &AttachResult) -> Self {
        Self {
            at: rfc3339_ms(r.at_ms),
            ok: r.ok,
            code: r.code.clone(),
            message: r.message.clone(),
            setting: r.setting.clone(),
        }
    }
}

impl Operator {
    /// The operator's state for a cluster, from its attachment, its last callback and refused tokens.
    pub fn connection(
        &self,
        view: &ClusterView,
        attachment: Option<&Attachment>,
        last_attach: Option<&AttachResult>,
    ) -> OperatorConnection {
        let now = self.clock.now_ms();
        let age = view.heartbeat_age_s;
        let fresh = age.is_some_and(|a| a <= 2 * CALLBACK_INTERVAL.as_secs() as i64);
        let rejection = self.last_rejection(&view.id);
        let state = match attachment {
            // A hand-deployed operator that calls back counts as connected too.
            _ if fresh => OperatorState::Connected,
            None => OperatorState::NotAttached,
            Some(a) if !a.complete => OperatorState::AttachIncomplete,
            Some(_) => OperatorState::Silent,
        };
        let pods = attachment.and_then(|_| self.last_pods(&view.id));
        let mut causes = Vec::new();
        if state != OperatorState::Connected
            && let Some(d) = pods.as_ref().and_then(|p| p.diagnosis.as_ref())
        {
            causes.push(format!("{} — {}", d.cause, d.fix));
        }
        if state == OperatorState::Silent {
            if let Some(r) = &rejection {
                causes.push(format!("its token was rejected ({}) at {}", r.reason.replace('_', " "), r.at));
            }
            if let Some(t) = attachment.and_then(|a| a.token.as_ref())
                && t.expires_at * 1000 <= now
            {
                causes.push(format!("its token expired at {}", rfc3339_ms(t.expires_at * 1000)));
            }
            let url = attachment.map(|a| a.control_plane_url.as_str()).unwrap_or_default();
            causes.push(
                "the operator pod is not running: image pull or crash (kubectl -n gshare-system get pods; \
                 kubectl -n gshare-system logs deploy/gshare-operator)"
                    .to_string(),
            );
            causes.push(format!("the cluster cannot reach SOT_ENDPOINT {url} (firewall, DNS, TLS)"));
            if rejection.is_none() {
                causes.push("its token is expired or was signed by a pruned key".to_string());
            }
        }
        OperatorConnection {
            state,
            attached_at: attachment.and_then(|a| a.attached_at).map(rfc3339_ms),
            last_callback_age_s: age,
            likely_causes: causes,
            last_token_rejection: rejection,
            token: attachment.and_then(|a| a.token.as_ref()).map(TokenView::from),
            renewal_error: attachment.and_then(|a| a.rotation.last_error.clone()),
            renewal_error_at: attachment.and_then(|a| a.rotation.last_error_at).map(rfc3339_ms),
            next_renewal_attempt_at: attachment.and_then(|a| a.rotation.next_attempt_at).map(rfc3339_ms),
            image: attachment.map(|a| a.image.clone()),
            control_plane_url: attachment.map(|a| a.control_plane_url.clone()),
            pod: pods,
            last_attach: last_attach.map(AttachResultView::from),
        }
    }

    /// The operator's state on each of these clusters, in their order. A store that cannot be
    /// read is the caller's error to answer (a view without its operator part would read as
    /// "not attached").
    pub async fn connections(
        &self,
        views: &[ClusterView],
    ) -> Result<Vec<OperatorConnection>, crate::store::StoreError> {
        let (all, results) = self
            .store
            .read(|txn| Ok((super::model::ATTACHMENTS.list(txn)?, super::model::ATTACH_RESULTS.list(txn)?)))
            .await?;
        let by_id: std::collections::HashMap<&str, &Attachment> = all.iter().map(|(k, a)| (k.as_str(), a)).collect();
        let last: std::collections::HashMap<&str, &AttachResult> =
            results.iter().map(|(k, r)| (k.as_str(), r)).collect();
        Ok(views
            .iter()
            .map(|v| self.connection(v, by_id.get(v.id.as_str()).copied(), last.get(v.id.as_str()).copied()))
            .collect())
    }
}
