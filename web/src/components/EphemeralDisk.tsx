// A live session's scratch (ephemeral) disk use, from the cluster's last volume sync. Near its
// limit it warns: past the limit the kubelet evicts the pod, and files outside /workspace go
// with it.

import type { Schemas } from "../api";
import { formatBytes } from "../volumes";

type Disk = Schemas["EphemeralDisk"];

/** "19 GiB of 20 GiB (95%)"; "19 GiB" without a limit. */
export function diskText(d: Disk): string {
  return d.used_pct == null ? formatBytes(d.used_bytes) : `${formatBytes(d.used_bytes)} of ${formatBytes(d.limit_bytes)} (${d.used_pct}%)`;
}

/** `compact`: only when near its limit (a table row); otherwise always (a session's card). */
export function EphemeralDisk(props: { disk: Disk | null | undefined; compact?: boolean }) {
  const d = props.disk;
  if (!d || (props.compact && !d.near_limit)) return null;
  if (d.near_limit)
    return (
      <p class="warning small ephemeral-disk" role="note">
        Scratch disk nearly full: {diskText(d)}. Past its limit the session's pod is evicted and files outside /workspace are lost; move
        them to /workspace or delete some.
      </p>
    );
  return <p class="small muted ephemeral-disk">Scratch disk: {diskText(d)}</p>;
}
