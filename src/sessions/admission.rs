//! Fair sharing at the door of a create or resume, inside its transaction and before anything is
//! recorded or applied: the owner's resource policy (the policy room: 409 `quota_exceeded` in
//! upstream's shapes; its idle and runtime limits go into the session's shape, the offering's
//! values as upper bounds) and, for GPU sessions, the fit check (inventory's [`FitIndex`]: 409
//! `unserviceable` naming the largest free slice the owner's node pools allow and the models the
//! cluster reports).
//!
//! The queue: when the owner's effective policy allows `max_queued` > 0, a new GPU session that
//! does not fit now (but would fit an emptied card of its model) is queued instead of refused,
//! as upstream queues on a capacity shortage; so is one whose cluster already has sessions
//! waiting (served strictly in order). `max_concurrent` and the other limits refuse as before
//! (upstream counts a queued, pending session as active). Over `max_queued`: 409
//! `quota_exceeded` with upstream's `{limit, queued}`.
//!
//! Budgets: a GPU session of an owner whose (or whose group's) monthly GPU-hour budget is used
//! up is refused (409 `quota_exceeded`, `{resource: "gpu_hours", limit, used, request}`).

use std::sync::Arc;

use serde_json::json;

use super::model::{GpuMode, ResourceClass, SESSION_QUEUE, Shape, charge_of, queue_in_write};
use super::{SessionError, conflict};
use crate::clusters::model::ClusterRecord;
use crate::http::error::ErrorCode;
use crate::inventory::fit::{FitIndex, Unfit, Want};
use crate::inventory::gpu_booking::{self, Share};
use crate::store::{Store, WriteTxn};

/// The smaller of two limits where 0 means none.
fn tighter(a: i64, b: i64) -> i64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// What a new session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Record it and apply its CR now.
    Start,
    /// Record it as waiting in its cluster's queue (nothing applied); the reason it waits.
    Queue(&'static str),
}

/// Why a queued session waits: no schedulable card holds it now.
pub const NO_GPU_CAPACITY: &str = "no_gpu_capacity";
/// Why a queued session waits: others wait before it on its cluster.
pub const QUEUE_AHEAD: &str = "queue_ahead";

/// `owner`'s sessions waiting in any queue.
fn queued_of(txn: &WriteTxn, owner: &str) -> Result<i64, SessionError> {
    Ok(SESSION_QUEUE.list_in_write(txn)?.iter().filter(|(_, o)| o == owner).count() as i64)
}

/// What a GPU shape asks of one card.
fn want_of(shape: &Shape) -> Want<'_> {
    Want {
        model: shape.gpu_model.as_deref().filter(|m| !m.is_empty()),
        exclusive: shape.mode == Some(GpuMode::Exclusive),
        mem_mb: shape.gpu_mem_mb.unwrap_or(0).max(0) as u64,
        cores: shape.gpu_cores.unwrap_or(0).max(0) as u64,
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

    /// The fit check for `owner` on `cluster`: the cards that can hold `want` now on the nodes
    /// the owner's group's node pools allow (and the shared nodes when it has none or may spill).
    fn fit_now(
        &self,
        txn: &WriteTxn,
        owner: &str,
        cluster: &ClusterRecord,
        want: &Want<'_>,
    ) -> Result<Result<Vec<String>, Unfit>, SessionError> {
        let placement = crate::inventory::pools::placement_of(txn, &cluster.id, owner)?;
        Ok(self.fit.check_placed(&self.store, &cluster.id, want, &placement)?)
    }

    /// Whether a GPU session of `owner` shaped `shape` could ever run on `cluster` as it is now:
    /// it fits now, or a counted card of its model on a node its owner may use would hold it once
    /// emptied. `false` when every such card is gone: its nodes cordoned, offline, drained or
    /// removed, or moved into a pool its owner's group may not use (a queued session that can
    /// never start).
    pub fn could_ever_fit(
        &self,
        txn: &WriteTxn,
        owner: &str,
        cluster: &ClusterRecord,
        shape: &Shape,
    ) -> Result<bool, SessionError> {
        if shape.resource_class != ResourceClass::Gpu {
            return Ok(true);
        }
        Ok(match self.fit_now(txn, owner, cluster, &want_of(shape))? {
            Ok(_) => true,
            Err(unfit) => unfit.could_fit,
        })
    }

    /// Checks a new session (`resuming: None`; its idle and runtime limits are set in `shape`;
    /// it may be queued) or one that already counts against its owner (`Some(its shape)`: a
    /// resume, or a queued session at its turn; never queued: a refusal). A session paused
    /// holding its card skips the fit check with `fit: false`. `now`: for the budget's month.
    ///
    /// A GPU session the fit check admits to start has its slice held for it (`session_id`) on a
    /// card that can give it, in this transaction (`gpu_booking::hold`): until the operator
    /// reports the card it was bound to, the next check counts it as taken, so two creates
    /// racing for the last free slice cannot both pass.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &self,
        txn: &WriteTxn,
        session_id: &str,
        owner: &str,
        cluster: &ClusterRecord,
        shape: &mut Shape,
        resuming: Option<&Shape>,
        fit: bool,
        now: i64,
    ) -> Result<Verdict, SessionError> {
        let charge = charge_of(shape);
        let resumed = resuming.map(charge_of);
        let mut max_queued = 0;
        match crate::policy::admit_in(txn, owner, &charge, resumed.as_ref())? {
            Err(refusal) => return Err(conflict(ErrorCode::QuotaExceeded, refusal.message, refusal.details)),
            Ok(Some(p)) if resuming.is_none() => {
                if let Some(idle) = p.idle_timeout_sec {
                    shape.idle_timeout_sec = tighter(shape.idle_timeout_sec, idle);
                }
                if let Some(min) = p.max_runtime_min {
                    shape.max_runtime_sec = tighter(shape.max_runtime_sec, min.saturating_mul(60));
                }
                max_queued = p.max_queued.unwrap_or(0).max(0);
            }
            Ok(_) => {}
        }
        if shape.resource_class != ResourceClass::Gpu {
            return Ok(Verdict::Start);
        }
        if let Err(refusal) = crate::policy::budget::admit_in(txn, owner, now)? {
            return Err(conflict(ErrorCode::QuotaExceeded, refusal.message, refusal.details));
        }
        if !fit {
            return Ok(Verdict::Start);
        }
        let may_queue = |reason: &'static str| -> Result<Verdict, SessionError> {
            let queued = queued_of(txn, owner)?;
            if queued >= max_queued {
                return Err(conflict(
                    ErrorCode::QuotaExceeded,
                    format!(
                        "max_queued exceeded: {queued} session{} queued of at most {max_queued}; cluster {} has no room for it now",
                        if queued == 1 { "" } else { "s" },
                        cluster.name
                    ),
                    json!({ "limit": max_queued, "queued": queued }),
                ));
            }
            Ok(Verdict::Queue(reason))
        };
        let want = want_of(shape);
        // Strictly in order: with others waiting on this cluster, a new session waits behind them.
        let ahead = max_queued > 0 && !queue_in_write(txn, &cluster.id)?.is_empty();
        let unfit = match self.fit_now(txn, owner, cluster, &want)? {
            Ok(_) if ahead => return may_queue(QUEUE_AHEAD),
            Ok(cards) => {
                // Held on the first card this transaction confirms (the summary reads committed
                // rows; a batch's own earlier holds are only in this transaction).
                let share = if want.exclusive {
                    Share::Exclusive
                } else {
                    Share::Slice { mem_mb: want.mem_mb, cores: want.cores }
                };
                for uuid in &cards {
                    if gpu_booking::hold(txn, session_id, &cluster.id, uuid, share, now)? {
                        return Ok(Verdict::Start);
                    }
                }
                // The summary had not yet seen the commit just before this one (its generation is
                // published a moment after the commit): that commit took the cards. No room now,
                // but they would hold it once emptied.
                if max_queued > 0 {
                    return may_queue(NO_GPU_CAPACITY);
                }
                return Err(conflict(
                    ErrorCode::Unserviceable,
                    format!(
                        "no schedulable node of cluster {} can hold this slice now: the free ones were just set aside for other sessions",
                        cluster.name
                    ),
                    json!({ "cluster_id": cluster.id, "gpu_mem_mb": want.mem_mb, "gpu_cores": want.cores }),
                ));
            }
            Err(unfit) => unfit,
        };
        // No room now, but an emptied card of its model would hold it: it can wait for one.
        if max_queued > 0 && unfit.could_fit {
            return may_queue(if ahead { QUEUE_AHEAD } else { NO_GPU_CAPACITY });
        }
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
