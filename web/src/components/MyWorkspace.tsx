// "My workspace" on a member's page: their persistent volumes — the home workspace each cluster
// gives them at /workspace (made with their first session there) and any named volume — with
// its size, what the last report says is used, and which cluster holds it. A volume lives on one
// cluster: a session elsewhere gets another home there, which the note says before it happens.

import { getAccount } from "../account";
import { useAction } from "../hooks";
import { Advice } from "./Advice";
import { ErrorBox } from "./Errors";
import { useLivePoll } from "../live";
import { formatBytes, listVolumes, shareVolume, unshareVolume, type Volume } from "../volumes";

/** "3.2 GiB of 20 GiB (16%)"; "not reported yet" before the cluster's first volume report. */
export function usedText(v: Pick<Volume, "used_bytes" | "size_gb">): string {
  if (v.used_bytes == null) return "not reported yet";
  const pct = v.size_gb > 0 ? Math.round((v.used_bytes / (v.size_gb * 1024 ** 3)) * 100) : 0;
  return `${formatBytes(v.used_bytes)} of ${v.size_gb} GiB (${pct}%)`;
}

/** `me`: the signed-in member (a volume of someone else's is one shared with their group). */
export function MyWorkspace(props: { me?: string } = {}) {
  const polled = useLivePoll((signal) => listVolumes("", signal), ["sessions"]);
  const volumes = polled.data?.data ?? [];
  // Their group: an RWX or ROX volume of theirs can be shared with it, read-only.
  const account = useLivePoll((signal) => (props.me ? getAccount(signal) : Promise.resolve(null)), [], { pollMs: 0 });
  // (An account answer without a policy, from an older server, shares nothing.)
  const group = (account.data?.policy as { group?: string | null } | undefined)?.group ?? null;
  const sharing = useAction();
  const shareable = (v: Volume) => props.me != null && v.owner === props.me && v.kind === "named" && v.mode !== "RWO";
  const showShare = group != null && volumes.some(shareable);
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
                {showShare && (
                  <th scope="col">
                    <span class="sr-only">Sharing</span>
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {volumes.map((v) => (
                <tr key={v.id} data-volume={v.id}>
                  <td>
                    {v.kind === "home" ? "Home" : v.name}
                    {props.me && v.owner !== props.me && <div class="small muted">{v.owner}'s, shared read-only</div>}
                    {props.me && v.owner === props.me && v.shared_group && (
                      <div class="small muted">shared read-only with {v.shared_group}</div>
                    )}
                  </td>
                  <td>
                    <code>{props.me && v.owner !== props.me ? `/shared/${v.owner}/${v.name}` : v.mount_path}</code>
                  </td>
                  <td>{v.size_gb} GiB</td>
                  <td class={v.over_capacity ? "warn" : undefined}>{usedText(v)}</td>
                  <td>{v.cluster_name}</td>
                  {showShare && (
                    <td>
                      {shareable(v) && (
                        <button
                          type="button"
                          disabled={sharing.busy !== ""}
                          onClick={() =>
                            sharing.run(() => (v.shared_group ? unshareVolume(v.id) : shareVolume(v.id, group)), {
                              key: v.id,
                              onSuccess: () => polled.reload(),
                            })
                          }
                        >
                          {sharing.busy === v.id ? "Saving…" : v.shared_group ? `Stop sharing ${v.name}` : `Share ${v.name} with ${group}`}
                        </button>
                      )}
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <ErrorBox error={sharing.error} title="Sharing refused">
        <Advice error={sharing.error} member />
      </ErrorBox>
      {showShare && (
        <p class="small muted">
          A shared volume is mounted read-only at /shared/&lt;owner&gt;/&lt;name&gt; in the sessions your group starts on its cluster.
        </p>
      )}
      {volumes.length > 0 && (
        <p class="small muted">A volume lives on one cluster. A session on another cluster starts with a new, empty workspace there.</p>
      )}
    </section>
  );
}

/**
 * One cluster per volume, said before a session is created: whether the session's owner already has
 * a workspace where it will run. `cluster`: the chosen one (an admin's dialog); without it (a
 * member's start, placed by the server) the note names where their workspaces are.
 */
export function workspaceNote(
  volumes: Pick<Volume, "kind" | "state" | "cluster_id" | "cluster_name" | "size_gb" | "owner">[],
  owner: string | null,
  cluster?: { id: string; name: string },
): string {
  const homes = volumes.filter((v) => v.kind === "home" && v.state === "active" && (owner == null || v.owner === owner));
  const whose = owner == null ? "your" : `${owner}'s`;
  const Whose = owner == null ? "Your" : `${owner}'s`;
  const where = [...new Set(homes.map((h) => h.cluster_name))].join(", ");
  if (cluster) {
    const here = homes.find((h) => h.cluster_id === cluster.id);
    if (here) return `${Whose} workspace on ${cluster.name} (${here.size_gb} GiB) is mounted at /workspace.`;
    if (!homes.length) return `This first session makes ${whose} workspace on ${cluster.name}, mounted at /workspace.`;
    return `${Whose} workspace is on ${where}, not on ${cluster.name}: a volume lives on one cluster, so this session starts with a new, empty workspace on ${cluster.name}.`;
  }
  if (!homes.length) return "Your first session makes your workspace at /workspace on the cluster it runs on; files there outlive a pause.";
  return `Your workspace is on ${where}. A volume lives on one cluster: if this session is placed on another cluster, it starts there with a new, empty workspace (your files stay on ${where}).`;
}
