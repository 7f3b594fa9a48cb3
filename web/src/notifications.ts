// The signed-in user's own notifications (`/api/v1/notifications`): what happened to their
// sessions (idle, runtime limit, an admin's pause or end, a drain, a lost node or pod).

import { get, request, type Schemas } from "./api";

export type Notification = Schemas["NotificationView"];
export type NotificationPage = Schemas["NotificationPage"];

export const listNotifications = (opts: { unread?: boolean; limit?: number } = {}, signal?: AbortSignal) => {
  const q = new URLSearchParams();
  if (opts.unread) q.set("unread", "true");
  if (opts.limit) q.set("limit", String(opts.limit));
  const qs = q.toString();
  return get<NotificationPage>(`/api/v1/notifications${qs ? `?${qs}` : ""}`, signal);
};

export const markRead = (id: number) => request<Notification>("POST", `/api/v1/notifications/${id}/read`);

export const markAllRead = () => request<Schemas["MarkedAll"]>("POST", "/api/v1/notifications/read");

/** What a notification's kind says, in a few words. */
export const KIND_LABELS: Record<Notification["kind"], string> = {
  idle_warning: "Idle warning",
  idle_paused: "Paused when idle",
  runtime_warning: "Runtime limit soon",
  runtime_ended: "Runtime limit reached",
  runtime_paused: "Paused at runtime limit",
  admin_paused: "Paused by an admin",
  admin_ended: "Ended by an admin",
  drained: "Node drained",
  node_lost: "Node lost",
  pod_lost: "Session lost",
  budget_warning: "Budget at 80 %",
  budget_exhausted: "Budget used up",
  queued_started: "Queued session started",
  queue_dropped: "Left the queue",
};
