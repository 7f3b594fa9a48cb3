// The volumes API as the console uses it: the server's types (src/api/schema.d.ts) and calls.

import { get, request, type Schemas } from "./api";

export type Volume = Schemas["VolumeView"];
export type VolumeList = Schemas["VolumeList"];
export type Orphan = Schemas["OrphanView"];
export type OwnerReclaim = Schemas["OwnerReclaimView"];

/** The caller's volumes (an admin's: everyone's, with `owner`/`cluster_id` filters). */
export const listVolumes = (qs: string, signal?: AbortSignal) => get<VolumeList>(`/api/v1/volumes${qs ? `?${qs}` : ""}`, signal);

const orphanPath = (o: Pick<Orphan, "cluster_id" | "name">, action: string) =>
  `/api/v1/volumes/orphans/${encodeURIComponent(o.cluster_id)}/${encodeURIComponent(o.name)}/${action}`;

/** An admin makes an orphan PVC a named volume of `owner` (its data kept). */
export const adoptOrphan = (o: Orphan, body: Schemas["OrphanAdopt"]) => request<Volume>("POST", orphanPath(o, "adopt"), { body });
/** An admin has the cluster's operator delete an orphan PVC at its next sync. */
export const reclaimOrphan = (o: Orphan) => request<Orphan>("POST", orphanPath(o, "reclaim"));
/** An admin reclaims every volume of an owner no live session mounts (a deleted account's). */
export const reclaimOwner = (owner: string) => request<OwnerReclaim>("POST", "/api/v1/volumes/reclaim", { body: { owner } });
export const deleteVolume = (id: string) => request<Volume>("DELETE", `/api/v1/volumes/${encodeURIComponent(id)}`);
export const shareVolume = (id: string, group: string) =>
  request<Volume>("PUT", `/api/v1/volumes/${encodeURIComponent(id)}/share`, { body: { group } });
export const unshareVolume = (id: string) => request<Volume>("DELETE", `/api/v1/volumes/${encodeURIComponent(id)}/share`);

/** Bytes as "1.5 GiB" / "300 MiB" / "12 KiB"; "—" when unknown. */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${+v.toFixed(1)} ${units[i]}`;
}

/** Where a volume stands, in words (a stalled reclaim says why). */
export function stateText(v: Pick<Volume, "state" | "reclaim_stalled" | "reclaim_answered_at" | "mounted">): string {
  if (v.state === "active") return "active";
  if (v.state === "reclaimed") return "reclaimed";
  if (v.reclaim_stalled) return "reclaim stalled: its cluster has not synced volumes since it was deleted";
  if (v.reclaim_answered_at && v.mounted) return "reclaim pending: the operator deletes it once no pod mounts it";
  return "reclaim pending";
}
