// The volumes API as the console uses it: the server's types (src/api/schema.d.ts) and calls.

import { get, type Schemas } from "./api";

export type Volume = Schemas["VolumeView"];
export type VolumeList = Schemas["VolumeList"];

/** The caller's volumes (an admin's: everyone's, with `owner`/`cluster_id` filters). */
export const listVolumes = (qs: string, signal?: AbortSignal) => get<VolumeList>(`/api/v1/volumes${qs ? `?${qs}` : ""}`, signal);

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
