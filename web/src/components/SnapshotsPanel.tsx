// State snapshots on the Account page: when the last one was taken and how it went, the schedule,
// the files kept, and a "Snapshot now" button (POST /api/v1/snapshots).

import { useState } from "preact/hooks";
import { formatDuration, formatTime } from "../format";
import { useAction, usePoll } from "../hooks";
import { formatBytes, getSnapshotSchedule, listSnapshots, takeSnapshot, type SnapshotInfo } from "../snapshots";
import { ErrorBox } from "./Errors";

export function SnapshotsPanel() {
  const schedule = usePoll((signal) => getSnapshotSchedule(signal), 60_000);
  const files = usePoll((signal) => listSnapshots(signal), 60_000);
  const { busy, error, run } = useAction();
  const [taken, setTaken] = useState<SnapshotInfo | null>(null);
  const s = schedule.data;
  const st = s?.status;
  const list = (files.data ?? []).slice().reverse();
  return (
    <section aria-labelledby="snapshots-title" class="snapshots">
      <h2 id="snapshots-title">State snapshots</h2>
      <ErrorBox error={schedule.error ?? files.error} title="Cannot load the snapshot status" />
      {s && st && (
        <dl class="facts">
          <div>
            <dt>Last snapshot</dt>
            <dd>
              {st.last_success_at ? (
                <>
                  <span class="badge status-connected">saved</span> {formatTime(st.last_success_at)} · {formatBytes(st.last_size_bytes)}
                </>
              ) : (
                <span class="muted">none yet</span>
              )}
            </dd>
          </div>
          {st.last_error && (
            <div>
              <dt>Last attempt</dt>
              <dd class="bad" role="alert">
                <span class="badge status-unreachable">failed</span> {st.last_error}
              </dd>
            </div>
          )}
          <div>
            <dt>Schedule</dt>
            <dd>
              {s.interval_s > 0 ? `every ${formatDuration(s.interval_s)}, keeping ${s.keep}` : "off (snapshot_interval = 0)"}
              {s.next_at && <span class="muted"> · next {formatTime(s.next_at)}</span>}
            </dd>
          </div>
          <div>
            <dt>Directory</dt>
            <dd>
              <code class="wrap">{s.dir}</code>
            </dd>
          </div>
          {st.failures > 0 && (
            <div>
              <dt>Failures since start</dt>
              <dd>{st.failures}</dd>
            </div>
          )}
        </dl>
      )}
      <div class="row-actions">
        <button
          type="button"
          class="primary"
          disabled={busy !== ""}
          onClick={() =>
            run(async () => {
              setTaken(null);
              try {
                setTaken(await takeSnapshot());
                files.reload();
              } finally {
                // Its last result shows either way.
                schedule.reload();
              }
            })
          }
        >
          {busy !== "" ? "Taking a snapshot…" : "Snapshot now"}
        </button>
        {taken && (
          <span role="status" class="ok">
            Saved {taken.name} ({formatBytes(taken.size_bytes)})
          </span>
        )}
      </div>
      <ErrorBox error={error} title="The snapshot failed; older snapshots are kept" />
      {files.data && list.length === 0 && <p class="muted">No snapshot in the directory yet.</p>}
      {list.length > 0 && (
        <ul class="snapshot-list" aria-label="Snapshots, newest first" tabIndex={0}>
          {list.map((f) => (
            <li key={f.name}>
              <code class="wrap">{f.name}</code>
              <span class="small muted">
                {" "}
                {formatTime(f.created_at)} · {formatBytes(f.size_bytes)} · {f.reason}
                {f.secrets_included ? " · with secrets" : ""}
              </span>
            </li>
          ))}
        </ul>
      )}
      <p class="small muted">
        Restore with <code>gshare snapshot restore FILE</code> while the server is stopped.
      </p>
    </section>
  );
}
