//! Fair sharing at the door of a create or resume, inside its transaction and before anything is
//! recorded or applied: the owner's resource policy (the policy room: 409 `quota_exceeded` in
//! upstream's shapes; its idle and runtime limits go into the session's shape, the offering's
//! values as upper bounds) and, for GPU sessions, the fit check (inventory's [`FitIndex`]: 409
//! `unserviceable` naming the largest free slice the owner's node pools allow and the models the
//! cluster reports).

use std::sync::Arc;

use serde_json::json;

use super::model::{GpuMode, ResourceClass, Shape, charge_of};
use super::{SessionError, conflict};
use crate::clusters::model::ClusterRecord;
use crate::http::error::ErrorCode;
use crate::inventory::fit::{FitIndex, Want};
use crate::store::{Store, WriteTxn};

/// The smaller of two limits where 0 means none.
fn tighter(a: i64, b: i64) -> i64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

#[derive(Debug, Clone)]
pub struct Admission {
    store: Store,
    fit: Arc<FitIndex>,
}

impl Admission {
    pub fn new(store: Store) -> Self {
        Self { store, fit: Arc::default() }
    }

    /// Checks a new session (`resuming: None`; its idle and runtime limits are set in `shape`)
    /// or the resume of one that already counts against its owner (`Some(its shape)`; a
    /// session paused holding its card skips the fit check with `fit: false`).
    pub fn check(
        &self,
        txn: &WriteTxn,
        owner: &str,
        cluster: &ClusterRecord,
        shape: &mut Shape,
        resuming: Option<&Shape>,
        fit: bool,
    ) -> Result<(), SessionError> {
        let charge = charge_of(shape);
        let resumed = resuming.map(charge_of);
        match crate::policy::admit_in(txn, owner, &charge, resumed.as_ref())? {
            Err(refusal) => return Err(conflict(ErrorCode::QuotaExceeded, refusal.message, refusal.details)),
            Ok(Some(p)) if resuming.is_none() => {
                if let Some(idle) = p.idle_timeout_sec {
                    shape.idle_timeout_sec = tighter(shape.idle_timeout_sec, idle);
                }
                if let Some(min) = p.max_runtime_min {
                    shape.max_runtime_sec = tighter(shape.max_runtime_sec, min.saturating_mul(60));
                }
            }
            Ok(_) => {}
        }
        if shape.resource_class != ResourceClass::Gpu || !fit {
            return Ok(());
        }
        let want = Want {
            model: shape.gpu_model.as_deref().filter(|m| !m.is_empty()),
            exclusive: shape.mode == Some(GpuMode::Exclusive),
            mem_mb: shape.gpu_mem_mb.unwrap_or(0).max(0) as u64,
            cores: shape.gpu_cores.unwrap_or(0).max(0) as u64,
        };
        // Its group's node pools (and the shared nodes when it has none or may spill).
        let placement = crate::inventory::pools::placement_of(txn, &cluster.id, owner)?;
        let Err(unfit) = self.fit.check_placed(&self.store, &cluster.id, &want, &placement)? else { return Ok(()) };
        let asked = if want.exclusive {
            "a whole card".to_string()
        } else {
            format!("a {} MiB / {} % slice", want.mem_mb, want.cores)
        };
        let of = want.model.map(|m| format!(" of {m}")).unwrap_or_default();
        let largest = match &unfit.largest_free {
            Some((mem, cores, model)) => format!("the largest free slice is {mem} MiB / {cores} % ({model})"),
            None if unfit.reported_models.is_empty() => "the cluster reports no ready GPU".into(),
            None => {
                format!("no card is free on a schedulable node (reported models: {})", unfit.reported_models.join(", "))
            }
        };
        Err(conflict(
            ErrorCode::Unserviceable,
            format!("no schedulable node of cluster {} can hold {asked}{of} now; {largest}", cluster.name),
            json!({
                "cluster_id": cluster.id,
                "mode": shape.mode,
                "gpu_model": want.model,
                "gpu_mem_mb": want.mem_mb,
                "gpu_cores": want.cores,
                "largest_free": unfit.largest_free.as_ref().map(|(mem, cores, model)| json!({
                    "gpu_mem_mb": mem, "gpu_cores": cores, "gpu_model": model,
                })),
                "reported_models": unfit.reported_models,
                "schedulable_cards": unfit.schedulable_cards,
            }),
        ))
    }
}
