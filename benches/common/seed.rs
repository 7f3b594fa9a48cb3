//! Records written straight into the store for benches and fixtures, keyed exactly as the
//! operator's reports key them (`inventory::apply`): nodes `<cluster>/<node>`, GPUs
//! `<cluster>/<uuid>`. Shared by `benches/*.rs` (through `common`) and `examples/make-fixture.rs`
//! (through `#[path]`), so a seeded state looks like one the server built.

use gshare::inventory::model::{GPUS, GpuRecord, NODES, NodeRecord};
use gshare::store::StoreError;
use gshare::store::WriteTxn;

/// The card every seeded node carries.
pub const MODEL: &str = "NVIDIA A100-SXM4-80GB";
pub const CARD_MEM_MB: u64 = 81920;

/// A ready GPU node (64 CPUs, 512 GB) seen at `seen_at_ms`, with one idle fractional A100 per uuid.
pub fn node(
    txn: &WriteTxn,
    cluster_id: &str,
    name: &str,
    gpu_uuids: &[String],
    seen_at_ms: i64,
) -> Result<(), StoreError> {
    let rec = NodeRecord {
        cluster_id: cluster_id.into(),
        name: name.into(),
        ready: true,
        schedulable: true,
        cordoned: false,
        decommissioning: false,
        offline: false,
        role: Some("gpu".into()),
        cpu: Some(64.0),
        mem_gb: Some(512.0),
        disk_gb: Some(2000.0),
        lossless_capable: false,
        last_seen: Some(seen_at_ms),
        not_ready_since: None,
        gpu_count: gpu_uuids.len() as u64,
    };
    NODES.put(txn, &format!("{cluster_id}/{name}"), &rec)?;
    for uuid in gpu_uuids {
        let gpu = GpuRecord {
            cluster_id: cluster_id.into(),
            node: name.into(),
            uuid: uuid.clone(),
            model: MODEL.into(),
            mode: "fractional".into(),
            total_mem_mb: CARD_MEM_MB,
            used_mem_mb: 0,
            total_cores: 100,
            used_cores: 0,
            status: "ready".into(),
        };
        GPUS.put(txn, &format!("{cluster_id}/{uuid}"), &gpu)?;
    }
    Ok(())
}
