// One shared one-second ticker, so 200 live heartbeat ages cost one timer, and only the cells that
// show an age re-render each second.

import { useEffect, useState } from "preact/hooks";

const subscribers = new Set<(now: number) => void>();
let timer: ReturnType<typeof setInterval> | undefined;

function subscribe(f: (now: number) => void) {
  subscribers.add(f);
  if (!timer) timer = setInterval(() => subscribers.forEach((s) => s(Date.now())), 1000);
  return () => {
    subscribers.delete(f);
    if (!subscribers.size && timer) {
      clearInterval(timer);
      timer = undefined;
    }
  };
}

export function useTick(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => subscribe(setNow), []);
  return now;
}
