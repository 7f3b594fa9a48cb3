//! Sessions: the records other domains need before the sessions issue lands — what runs where —
//! so that unregistering a cluster can refuse while sessions or GPU allocations are live.
//! The state machine, CR apply/delete, forward-auth and the /proxy relay arrive with that issue.

use serde::{Deserialize, Serialize};

use crate::store::JsonTable;

/// `ses_…` -> session.
pub const SESSIONS: JsonTable<SessionRecord> = JsonTable::new("sessions");
/// `alc_…` -> GPU allocation.
pub const ALLOCATIONS: JsonTable<AllocationRecord> = JsonTable::new("allocations");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: String,
    pub cluster_id: String,
    /// Kept so history shows the cluster after it is unregistered.
    pub cluster_name: String,
    pub owner: String,
    /// Lower-case phase: pending, preparing, running, paused, terminated, error, …
    pub phase: String,
    pub created_at: i64,
    #[serde(default)]
    pub last_report_at: Option<i64>,
}

impl SessionRecord {
    /// Live sessions hold cluster resources; terminated and errored ones are history.
    pub fn is_live(&self) -> bool {
        !matches!(self.phase.as_str(), "terminated" | "error" | "deleted")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllocationRecord {
    pub id: String,
    pub cluster_id: String,
    pub session_id: String,
    pub gpu_uuid: Option<String>,
    pub created_at: i64,
    pub released_at: Option<i64>,
}

impl AllocationRecord {
    pub fn is_open(&self) -> bool {
        self.released_at.is_none()
    }
}
