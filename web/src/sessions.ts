// The sessions API as the console uses it: the server's types (src/api/schema.d.ts) and calls.

import { get, request, type Schemas } from "./api";

export type Phase = Schemas["Phase"];
/** Every phase, in life order (the filter's choices); the compiler says when the server has another. */
const PHASE_ORDER: Record<Phase, number> = { pending: 0, preparing: 1, running: 2, paused: 3, terminating: 4, terminated: 5, error: 6 };
export const PHASES = (Object.keys(PHASE_ORDER) as Phase[]).sort((a, b) => PHASE_ORDER[a] - PHASE_ORDER[b]);
/** What a session's `actions` lists. */
export type SessionAction = Schemas["SessionAction"];
/** The document says only `string` for `ConnectRequest.kind`: these are the kinds the server takes. */
export type ConnectKind = "code" | "lab" | "terminal";
export const CONNECT_KINDS: ConnectKind[] = ["code", "lab", "terminal"];

export type Session = Schemas["SessionView"];

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

export const listSessions = (qs: string, signal?: AbortSignal) => get<Schemas["SessionPage"]>(`/api/v1/sessions?${qs}`, signal);

export type NewSessionBody = Schemas["CreateSession"];

const path = (id: string) => `/api/v1/sessions/${encodeURIComponent(id)}`;

export const createSession = (body: NewSessionBody, idempotencyKey: string) =>
  request<Session>("POST", "/api/v1/sessions", { body, headers: { "Idempotency-Key": idempotencyKey } });

export const pauseSession = (id: string) => request<Session>("POST", `${path(id)}/pause`);
export const resumeSession = (id: string) => request<Session>("POST", `${path(id)}/resume`);
export const deleteSession = (id: string, force = false) => request<Session>("DELETE", force ? `${path(id)}?force=true` : path(id));

export type Connection = Schemas["Connection"];

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
  budget_exhausted: "GPU-hour budget used up",
  offering_inactive: "left the queue: its offering was deactivated",
  account_disabled: "left the queue: its owner was disabled",
  node_offline: "its node went offline",
  pod_lost: "its pod stopped reporting",
  drained: "its node was drained",
  unserviceable: "left the queue: no node it may use can hold it",
};
export const reasonText = (r: string) => REASONS[r] ?? r.replace(/_/g, " ");

const QUEUE_REASONS: Record<string, string> = {
  no_gpu_capacity: "no card is free for it now",
  queue_ahead: "others wait before it",
  quota_exceeded: "held by its owner's limits",
  operator_not_connected: "the cluster's operator is not connected",
  unserviceable: "no node it may use can hold it now; passed over, it leaves the queue if none comes back",
};

/** A waiting session's place in its cluster's queue and why it waits; null when it does not wait. */
export function queuedText(s: Pick<Session, "queue_position" | "queued_reason">): string | null {
  if (s.queue_position == null) return null;
  const why = s.queued_reason ? (QUEUE_REASONS[s.queued_reason] ?? s.queued_reason.replace(/_/g, " ")) : null;
  return `Queued: number ${s.queue_position} in line${why ? ` (${why})` : ""}; it starts when its cluster has room`;
}
