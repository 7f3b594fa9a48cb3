//! Writes the upgrade fixtures under `tests/fixtures/`: a small state file and a snapshot of it,
//! as this build writes them (its schema version is in the names). Run once per schema change:
//!
//! ```text
//! cargo run --example make-fixture
//! ```
//!
//! and commit the new files; older fixtures stay, so every earlier schema keeps being opened and
//! migrated by `tests/it/snapshot.rs` (`every_fixture_opens_and_migrates`).

use std::path::Path;

use gshare::audit::{self, AuditEntry, AuditResult};
use gshare::clock::Clock;
use gshare::clusters::model::{CLUSTERS, ClusterRecord, Role};
use gshare::sessions::model::{OFFERINGS, OfferingRecord, OfferingStatus, Phase, ResourceClass, SessionRecord, Shape};
use gshare::store::{Store, schema_of};

#[path = "../benches/common/seed.rs"]
mod seed;

/// 2025-12-01T00:00:00Z: fixed, so regenerating changes only what the schema changed.
const T0: i64 = 1_764_547_200_000;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::create_dir_all(&out)?;
    let work = tempfile::tempdir()?;
    let state = work.path().join("gshare.redb");
    let store = Store::open(&state, gshare::MIGRATIONS)?;
    gshare::auth::accounts::ensure_initial_admin(&store, work.path(), T0).await?;
    let clock = Clock::system();
    store
        .write(move |txn| {
            let cid = "clu_01KB0000000000000000000000";
            let c = ClusterRecord::new(
                cid,
                "lab-a".into(),
                Role::Primary,
                "https://10.0.0.1:6443".into(),
                format!("{cid}/kubeconfig"),
                T0,
            );
            CLUSTERS.put(txn, cid, &c)?;
            let counts = gshare::clusters::model::ClusterCounts { node_count: 2, ..Default::default() };
            gshare::inventory::model::CLUSTER_COUNTS.put(txn, cid, &counts)?;
            for (n, node) in ["gpu-node-1", "gpu-node-2"].iter().enumerate() {
                let uuids: Vec<String> =
                    (0..2).map(|g| format!("GPU-0000000{n}-000{g}-0000-0000-000000000000")).collect();
                seed::node(txn, cid, node, &uuids, T0)?;
            }
            let shape = Shape {
                resource_class: ResourceClass::Gpu,
                image: "ghcr.io/lab/jupyter:4".into(),
                gpu_model: Some("A100".into()),
                gpu_mem_mb: Some(20480),
                gpu_cores: Some(30),
                ..Shape::default()
            };
            let off = OfferingRecord {
                id: "off_01KB0000000000000000000000".into(),
                name: "a100-slice".into(),
                shape: shape.clone(),
                status: OfferingStatus::Active,
                created_at: T0,
                visible_to: None,
            };
            OFFERINGS.put(txn, &off.id, &off)?;
            for (i, phase) in [Phase::Running, Phase::Terminated].into_iter().enumerate() {
                let mut s = SessionRecord::new(&format!("ses_01KB000000000000000000000{i}"), cid, "lab-a", "alice", T0);
                s.offering_id = off.id.clone();
                s.offering_name = off.name.clone();
                s.shape = shape.clone();
                s.set_phase(phase, T0 + 1000);
                gshare::sessions::model::put_session(txn, &s)?;
            }
            audit::record_in(txn, &clock, AuditEntry::system("cli", "fixture.create", AuditResult::Success))?;
            Ok(())
        })
        .await?;
    let snapshot = store.read({
        let config = gshare::config::Config::for_data_dir(work.path(), &[])?;
        move |txn| Ok(gshare::snapshot::build(txn, &config, T0, "fixture", None))
    });
    let snapshot = snapshot.await??;
    drop(store);
    // Compact so the committed file is small.
    let mut db = redb::Database::open(&state)?;
    while db.compact()? {}
    drop(db);
    let version = env!("CARGO_PKG_VERSION");
    let schema = schema_of(gshare::MIGRATIONS);
    let name = format!("state-{version}-schema{schema}.redb");
    std::fs::copy(&state, out.join(&name))?;
    std::fs::write(out.join(format!("snapshot-{version}-schema{schema}.gshare-snapshot")), snapshot)?;
    println!("wrote tests/fixtures/{name} ({} bytes) and its snapshot", std::fs::metadata(out.join(&name))?.len());
    Ok(())
}
