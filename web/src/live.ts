// Live updates: one EventSource on /api/v1/events shared by the pages that show live state. The
// server sends one event per topic whose data changed (at most a burst every 500 ms); a page
// reloads only on its own topics, and polls only slowly as a fallback while the stream is up.

import { useEffect, useRef, useState } from "preact/hooks";
import { usePoll, type Polled } from "./hooks";

/** How often pages still reload while the event stream is up (a missed event heals by then). */
export const LIVE_FALLBACK_MS = 60_000;

/** The server's event topics (src/events.rs `Topic`). */
export const TOPICS = ["clusters", "sessions", "offerings", "inventory", "overview", "audit", "notifications"] as const;
export type Topic = (typeof TOPICS)[number];

interface Listener {
  topics: readonly Topic[];
  f: () => void;
}

const listeners = new Set<Listener>();
const onState = new Set<(up: boolean) => void>();
let source: EventSource | null = null;
let up = false;

function setUp(v: boolean) {
  up = v;
  onState.forEach((f) => f(v));
}

/** Calls every listener that watches `topic` (exported for tests). */
export function dispatch(topic: Topic) {
  listeners.forEach((l) => l.topics.includes(topic) && l.f());
}

function open() {
  if (source || typeof EventSource === "undefined") return;
  source = new EventSource("/api/v1/events");
  source.addEventListener("hello", () => setUp(true));
  for (const t of TOPICS) source.addEventListener(t, () => dispatch(t));
  // The browser reconnects by itself; until then the pages poll at their usual pace.
  source.onerror = () => setUp(false);
}

function closeIfIdle() {
  if (listeners.size) return;
  source?.close();
  source = null;
  setUp(false);
}

/** Calls `reload` when the server says one of `topics` changed; true while the stream is connected. */
export function useLive(reload: () => void, topics: readonly Topic[]): boolean {
  const [connected, setConnected] = useState(up);
  const ref = useRef(reload);
  ref.current = reload;
  const key = topics.join(",");
  useEffect(() => {
    const l: Listener = { topics: key.split(",") as Topic[], f: () => ref.current() };
    listeners.add(l);
    onState.add(setConnected);
    open();
    setConnected(up);
    return () => {
      listeners.delete(l);
      onState.delete(setConnected);
      closeIfIdle();
    };
  }, [key]);
  return connected;
}

/** How often a page reloads without the event stream (the stream down, or never up). */
export const POLL_MS = 5000;

export interface LivePollOptions {
  /** Reload interval while the stream is down; 0 loads once (and on events). */
  pollMs?: number;
  /** Reload interval while it is up: a missed event heals by then. */
  liveMs?: number;
  /** What `load` reads besides the topics (a query string, an id): a change reloads. */
  deps?: unknown[];
}

/**
 * `usePoll` on the server's live-update topics: reloads when one of `topics` changed, and polls
 * only slowly while the stream is connected (at `pollMs` while it is not).
 */
export function useLivePoll<T>(
  load: (signal: AbortSignal) => Promise<T>,
  topics: readonly Topic[],
  { pollMs = POLL_MS, liveMs = LIVE_FALLBACK_MS, deps = [] }: LivePollOptions = {},
): Polled<T> & { live: boolean } {
  const reloadRef = useRef(() => {});
  const live = useLive(() => reloadRef.current(), topics);
  const polled = usePoll(load, pollMs > 0 && live ? liveMs : pollMs, deps);
  reloadRef.current = polled.reload;
  return { ...polled, live };
}
