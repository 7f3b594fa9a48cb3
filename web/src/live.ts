// Live updates: one EventSource on /api/v1/events shared by the pages that show live state. The
// server sends `change` after commits (at most two a second); pages reload then, and poll only
// slowly as a fallback while the stream is up.

import { useEffect, useRef, useState } from "preact/hooks";

/** How often pages still reload while the event stream is up (a missed event heals by then). */
export const LIVE_FALLBACK_MS = 60_000;

const onChange = new Set<() => void>();
const onState = new Set<(up: boolean) => void>();
let source: EventSource | null = null;
let up = false;

function setUp(v: boolean) {
  up = v;
  onState.forEach((f) => f(v));
}

function open() {
  if (source || typeof EventSource === "undefined") return;
  source = new EventSource("/api/v1/events");
  source.addEventListener("hello", () => setUp(true));
  source.addEventListener("change", () => onChange.forEach((f) => f()));
  // The browser reconnects by itself; until then the pages poll at their usual pace.
  source.onerror = () => setUp(false);
}

function closeIfIdle() {
  if (onChange.size) return;
  source?.close();
  source = null;
  setUp(false);
}

/** Calls `reload` on every server-side change; true while the stream is connected. */
export function useLive(reload: () => void): boolean {
  const [connected, setConnected] = useState(up);
  const ref = useRef(reload);
  ref.current = reload;
  useEffect(() => {
    const f = () => ref.current();
    onChange.add(f);
    onState.add(setConnected);
    open();
    setConnected(up);
    return () => {
      onChange.delete(f);
      onState.delete(setConnected);
      closeIfIdle();
    };
  }, []);
  return connected;
}
