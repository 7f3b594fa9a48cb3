// The sessions API (sessions issue) as the console uses it: types and calls.

import { get, request } from "./api";
import type { Page } from "./clusters";

export type Phase = "pending" | "preparing" | "running" | "paused" | "terminating" | "terminated" | "error";
export const PHASES: Phase[] = ["pending", "preparing", "running", "paused", "terminating", "terminated", "error"];
export type SessionAction = "pause" | "resume" | "delete" | "connect";
export type ConnectKind = "code" | "lab" | "terminal";
export const CONNECT_KINDS: ConnectKind[] = ["code", "lab", "terminal"];

export interface Session {
  id: string;
  cr_name: string;
  name: string | null;
  cluster_id: string;
  cluster_name: string;
  offering_id: string;
  offering_name: string;
  owner: string;
  resource_class: "gpu" | "cpu" | string;
  image: string;
  mode: string | null;
  gpu_mem_mb: number | null;
  gpu_cores: number | null;
  phase: Phase | string;
  reason: string | null;
  message: string | null;
  bound_gpu_uuid: string | null;
  node_name: string | null;
  created_at: string;
  started_at: string | null;
  phase_changed_at: string;
  ended_at: string | null;
  last_report_at: string | null;
  live: boolean;
  /** What the server allows right now; buttons follow this, not the phase. */
  actions: (SessionAction | string)[];
}

export interface SessionFilter {
  cluster_id?: string;
  phase?: string;
  owner?: string;
  live?: boolean;
  page: number;
  size: number;
}

export function sessionsQuery(f: SessionFilter): string {
  const q = new URLSearchParams({ page: String(f.page), size: String(f.size) });
  if (f.cluster_id) q.set("cluster_id", f.cluster_id);
  if (f.phase) q.set("phase", f.phase);
  if (f.owner) q.set("owner", f.owner);
  if (f.live !== undefined) q.set("live", String(f.live));
  return q.toString();
}

export const listSessions = (qs: string, signal?: AbortSignal) => get<Page<Session>>(`/api/v1/sessions?${qs}`, signal);

export interface NewSessionBody {
  offering_id: string;
  cluster_id?: string;
  name?: string;
  owner?: string;
  image?: string;
}

const path = (id: string) => `/api/v1/sessions/${encodeURIComponent(id)}`;

export const createSession = (body: NewSessionBody, idempotencyKey: string) =>
  request<Session>("POST", "/api/v1/sessions", { body, headers: { "Idempotency-Key": idempotencyKey } });

export const pauseSession = (id: string) => request<Session>("POST", `${path(id)}/pause`);
export const resumeSession = (id: string) => request<Session>("POST", `${path(id)}/resume`);
export const deleteSession = (id: string, force = false) => request<Session>("DELETE", force ? `${path(id)}?force=true` : path(id));

export interface Connection {
  url: string;
  token: string;
  expires_at: string;
}

export const connectSession = (id: string, kind: ConnectKind) => request<Connection>("POST", `${path(id)}/connect`, { body: { kind } });

/** How a row names a session: its name, else its id. */
export const sessionLabel = (s: Pick<Session, "id" | "name">) => s.name || s.id;

const REASONS: Record<string, string> = {
  idle: "idle timeout",
  max_runtime: "max runtime reached",
  disk_exceeded: "disk quota exceeded",
  user_stopped: "stopped by a user",
  deleted: "deleted",
  apply_failed: "apply to the cluster failed",
  crash_loop: "crash loop",
  evicted: "evicted",
};
export const reasonText = (r: string) => REASONS[r] ?? r.replace(/_/g, " ");
