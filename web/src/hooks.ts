import { useEffect, useRef, useState } from "preact/hooks";

/** Re-renders every `ms` milliseconds (live ages). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

export interface Polled<T> {
  data?: T;
  error: unknown;
  loading: boolean;
  /** Browser time of the last successful load. */
  loadedAt: number;
  reload: () => void;
}

/**
 * Loads now and every `intervalMs` while the tab is visible; keeps showing the last data when a
 * refresh fails (the error is reported beside it).
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, intervalMs: number, deps: unknown[] = []): Polled<T> {
  const [state, setState] = useState<{ data?: T; error: unknown; loading: boolean; loadedAt: number }>({
    error: undefined,
    loading: true,
    loadedAt: 0,
  });
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const data = await loadRef.current(ctl.signal);
        if (!ctl.signal.aborted) setState({ data, error: undefined, loading: false, loadedAt: Date.now() });
      } catch (error) {
        if (ctl.signal.aborted) return;
        setState((s) => ({ ...s, error, loading: false }));
      }
      if (!ctl.signal.aborted && intervalMs > 0) timer = setTimeout(run, document.hidden ? intervalMs * 4 : intervalMs);
    };
    run();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [tick, intervalMs, ...deps]);
  return { ...state, reload: () => setTick((t) => t + 1) };
}
