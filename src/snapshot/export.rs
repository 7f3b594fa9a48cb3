//! `gshare export --format json`: the state as JSON lines, one `{"kind": ..., "record": ...}` per
//! line, in this order: `cluster`, `node`, `gpu`, `offering`, `session`, `audit`. `record` is the
//! stored record as the API shows it (see the README's "Export" section for the fields and how
//! they map to upstream gShare's tables). Secrets never appear: kubeconfigs and keys live outside
//! the state file.

use std::io::Write;

use super::format::{self, FormatError};

/// `(kind, table)` in output order.
pub const KINDS: [(&str, &str); 6] = [
    ("cluster", "clusters"),
    ("node", "nodes"),
    ("gpu", "gpu_devices"),
    ("offering", "offerings"),
    ("session", "sessions"),
    ("audit", "audit_log"),
];

/// Writes the export of a state section; returns the count per kind.
pub fn write_json_lines(state: &[u8], out: &mut impl Write) -> Result<Vec<(&'static str, u64)>, FormatError> {
    let mut counts = Vec::new();
    for (kind, table) in KINDS {
        let mut n = 0;
        for (key, value) in format::entries(state, table)? {
            let record: serde_json::Value = serde_json::from_slice(value)
                .map_err(|e| FormatError::BadState(format!("{table}/{key} is not JSON: {e}")))?;
            let line = serde_json::json!({ "kind": kind, "record": record });
            serde_json::to_writer(&mut *out, &line).map_err(|e| FormatError::Store(e.to_string()))?;
            out.write_all(b"\n").map_err(|e| FormatError::Store(e.to_string()))?;
            n += 1;
        }
        counts.push((kind, n));
    }
    out.flush().map_err(|e| FormatError::Store(e.to_string()))?;
    Ok(counts)
}
