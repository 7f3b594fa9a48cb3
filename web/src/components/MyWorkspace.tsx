// "My workspace" on a member's page: their persistent volumes — the home workspace each cluster
// gives them at /workspace (made with their first session there) and any named volume — with
// its size, what the last report says is used, and which cluster holds it. A volume lives on one
// cluster: a session elsewhere gets another home there, which the note says before it happens.

import { ErrorBox } from "./Errors";
import { useLivePoll } from "../live";
import { formatBytes, listVolumes, type Volume } from "../volumes";

/** "3.2 GiB of 20 GiB (16%)"; "not reported yet" before the cluster's first volume report. */
export function usedText(v: Pick<Volume, "used_bytes" | "size_gb">): string {
  if (v.used_bytes == null) return "not reported yet";
  const pct = v.size_gb > 0 ? Math.round((v.used_bytes / (v.size_gb * 1024 ** 3)) * 100) : 0;
  return `${formatBytes(v.used_bytes)} of ${v.size_gb} GiB (${pct}%)`;
}

export function MyWorkspace() {
  const polled = useLivePoll((signal) => listVolumes("", signal), ["sessions"]);
  const volumes = polled.data?.data ?? [];
  return (
    <section aria-labelledby="workspace-title" class="workspace">
      <h2 id="workspace-title">My workspace</h2>
      <ErrorBox error={polled.error} title="Cannot load your volumes" />
      {polled.loading && !polled.data && <p class="loading">Loading your volumes…</p>}
      {polled.data && volumes.length === 0 && (
        <p class="empty">Your first session on a cluster makes your workspace there: files under /workspace outlive a pause.</p>
      )}
      {volumes.length > 0 && (
        <div class="table-wrap" role="region" aria-label="Your volumes, scrolls sideways" tabIndex={0}>
          <table aria-label="Your volumes">
            <thead>
              <tr>
                <th scope="col">Volume</th>
                <th scope="col">Mounted at</th>
                <th scope="col">Size</th>
                <th scope="col">Used</th>
                <th scope="col">Cluster</th>
              </tr>
            </thead>
            <tbody>
              {volumes.map((v) => (
                <tr key={v.id} data-volume={v.id}>
                  <td>{v.kind === "home" ? "Home" : v.name}</td>
                  <td>
                    <code>{v.mount_path}</code>
                  </td>
                  <td>{v.size_gb} GiB</td>
                  <td class={v.over_capacity ? "warn" : undefined}>{usedText(v)}</td>
                  <td>{v.cluster_name}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {volumes.length > 0 && (
        <p class="small muted">A volume lives on one cluster. A session on another cluster starts with a new, empty workspace there.</p>
      )}
    </section>
  );
}
