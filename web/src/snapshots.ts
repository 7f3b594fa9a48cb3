// State snapshots (issue 17): the schedule and last result, the files in snapshot_dir, and
// "snapshot now".

import { get, request } from "./api";

export interface SnapshotInfo {
  name: string;
  path: string;
  size_bytes: number;
  created_at: string;
  reason: string;
  schema_version: number;
  binary_version: string;
  sha256: string;
  secrets_included: boolean;
}

export interface SnapshotStatus {
  last_success_at?: string | null;
  last_file?: string | null;
  last_size_bytes?: number | null;
  last_error?: string | null;
  failures: number;
}

export interface SnapshotSchedule {
  interval_s: number;
  keep: number;
  dir: string;
  next_at?: string | null;
  status: SnapshotStatus;
}

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
