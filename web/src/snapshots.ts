// State snapshots: the schedule and last result, the files in snapshot_dir, and
// "snapshot now".

import { get, request, type Schemas } from "./api";

export type SnapshotInfo = Schemas["SnapshotInfo"];
export type SnapshotStatus = Schemas["SnapshotStatus"];
export type SnapshotSchedule = Schemas["SnapshotSchedule"];

export const getSnapshotSchedule = (signal?: AbortSignal) => get<SnapshotSchedule>("/api/v1/snapshots/status", signal);
export const listSnapshots = (signal?: AbortSignal) => get<SnapshotInfo[]>("/api/v1/snapshots", signal);
export const takeSnapshot = () => request<SnapshotInfo>("POST", "/api/v1/snapshots", { body: { reason: "console" } });

/** Bytes as "812 B", "3.4 KiB", "12.0 MiB". */
export function formatBytes(n: number | null | undefined): string {
  if (n == null) return "—";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}
