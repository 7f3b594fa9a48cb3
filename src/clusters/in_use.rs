//! Why a cluster cannot be unregistered yet, in words a person can act on: its live sessions and
//! open GPU allocations by name, not only by id.

use std::sync::Arc;

use crate::store::WriteTxn;
use serde_json::{Value, json};

use crate::http::error::plural;
use crate::store::StoreError;

/// Reads, inside the unregister transaction, what still holds a cluster: its live sessions and
/// open GPU allocations (empty vectors: nothing does). The domains above clusters know what
/// "holds" means; the composition root hands `Clusters` their answer (`sessions::cluster_in_use`).
pub type InUseCheck =
    Arc<dyn Fn(&WriteTxn, &str) -> Result<(Vec<UsingSession>, Vec<OpenAllocation>), StoreError> + Send + Sync>;

#[derive(Debug, Clone, PartialEq)]
pub struct InUse {
    pub id: String,
    pub name: String,
    pub sessions: Vec<UsingSession>,
    pub allocations: Vec<OpenAllocation>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UsingSession {
    pub id: String,
    pub name: Option<String>,
    pub phase: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OpenAllocation {
    pub id: String,
    pub session_id: String,
    pub session_name: Option<String>,
    pub gpu_uuid: Option<String>,
    pub gpu_mem_mb: u64,
}

impl InUse {
    pub fn new(id: String, name: String, sessions: Vec<UsingSession>, allocations: Vec<OpenAllocation>) -> Self {
        Self { id, name, sessions, allocations }
    }

    /// "cluster "gpu-a" still has 1 live session (lab-1) and 1 open GPU allocation; …".
    pub fn message(&self) -> String {
        let names: Vec<&str> =
            self.sessions.iter().map(|s| s.name.as_deref().unwrap_or(s.id.as_str())).take(5).collect();
        let more = self.sessions.len().saturating_sub(names.len());
        let list = if names.is_empty() {
            String::new()
        } else if more > 0 {
            format!(" ({} and {more} more)", names.join(", "))
        } else {
            format!(" ({})", names.join(", "))
        };
        format!(
            "cluster \"{}\" still has {}{list} and {}; end them before unregistering",
            self.name,
            plural(self.sessions.len(), "live session", "live sessions"),
            plural(self.allocations.len(), "open GPU allocation", "open GPU allocations"),
        )
    }

    /// `sessions` and `allocations` keep their id lists (stable for scripts); `session_list` and
    /// `allocation_list` carry the names the console shows.
    pub fn details(&self) -> Value {
        json!({
            "cluster_id": self.id,
            "cluster_name": self.name,
            "sessions": self.sessions.iter().map(|s| &s.id).collect::<Vec<_>>(),
            "allocations": self.allocations.iter().map(|a| &a.id).collect::<Vec<_>>(),
            "session_list": self.sessions.iter().map(|s| json!({"id": s.id, "name": s.name, "phase": s.phase})).collect::<Vec<_>>(),
            "allocation_list": self.allocations.iter().map(|a| json!({
                "id": a.id,
                "session_id": a.session_id,
                "session_name": a.session_name,
                "gpu_uuid": a.gpu_uuid,
                "gpu_mem_mb": a.gpu_mem_mb,
            })).collect::<Vec<_>>(),
        })
    }
}
