// The two hooks every page is built from: `usePoll` (load, keep the last data, reload on a timer)
// and `useAction` (run one change at a time, say it is busy, keep its failure, give focus back).

import { useCallback, useEffect, useRef, useState } from "preact/hooks";

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
  useEffect(
    () => {
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
        if (!ctl.signal.aborted && intervalMs > 0) timer = setTimeout(() => void run(), document.hidden ? intervalMs * 4 : intervalMs);
      };
      void run();
      return () => {
        ctl.abort();
        clearTimeout(timer);
      };
    },
    // `deps` are the caller's: what `load` reads, as a list (the query string, an id).
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [tick, intervalMs, ...deps],
  );
  // Any render's reload bumps the same state: one stable function, so memoized rows keep still.
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

export interface RunOptions<T> {
  /** Which run this is, as `busy` says it ("busy" when not given). */
  key?: string;
  /**
   * What follows success, in the same turn as the answer (no later than an inline `await`
   * would run it); throwing from it counts as the run's failure.
   */
  onSuccess?: (value: T) => void;
}

export interface Action {
  /** The key of the run in progress ("" when none): which button says "Saving…". */
  busy: string;
  /** The last run's failure, until the next run starts (or `setError`). */
  error: unknown;
  setError: (e: unknown) => void;
  /**
   * Runs `call` unless a run is in progress (then nothing happens). `call` is made at once, so
   * what it does before its first `await` still counts as part of the click (a popup window,
   * say). Never rejects: a failure lands in `error`.
   */
  run: <T>(call: () => Promise<T>, opts?: RunOptions<T>) => void;
}

const FOCUSABLE = "button:not([disabled]), input:not([disabled]), select:not([disabled]), textarea:not([disabled]), a[href]";

/**
 * Where focus goes back after a run: the control that started it, once it is enabled again; if it
 * stays disabled (the row now allows other actions), the first enabled control of its row, list
 * item, form or dialog. Only when focus was lost (on the body), never taken from where the user
 * or the page (a dialog closing, a confirmation opening) has put it since.
 */
function giveFocusBack(el: HTMLElement | null) {
  const active = document.activeElement;
  if (!el || (active && active !== document.body && active !== el)) return;
  if (el.isConnected && el.matches(FOCUSABLE)) {
    if (active !== el) el.focus();
    return;
  }
  focusInScope(el);
}

const SCOPE = "tr, li, form, [role=dialog]";
const focusInScope = (el: HTMLElement) =>
  (el.isConnected ? el.closest<HTMLElement>(SCOPE) : null)?.querySelector<HTMLElement>(FOCUSABLE)?.focus();

/**
 * A run's outcome often disables its own button a moment later (the list reloads and the session
 * no longer allows Pause): while the control keeps focus, its being disabled moves focus on to the
 * first enabled control of its row, not to the body. Ends when the control loses focus; returns a
 * stop function.
 */
function keepFocusNear(el: HTMLElement): () => void {
  const watch = new MutationObserver(() => {
    // Before the browser's own focus fix-up (at the next rendering), the control still has focus.
    if (el.matches(":disabled") && document.activeElement === el) {
      stop();
      focusInScope(el);
    }
  });
  const stop = () => {
    watch.disconnect();
    el.removeEventListener("blur", stop);
  };
  watch.observe(el, { attributes: true, attributeFilter: ["disabled"] });
  el.addEventListener("blur", stop);
  return stop;
}

/** One change at a time with its busy state and error: what each button's try/catch used to be. */
export function useAction(): Action {
  const [busy, setBusy] = useState("");
  const [error, setError] = useState<unknown>(null);
  const running = useRef(false);
  const mounted = useRef(true);
  const started = useRef<HTMLElement | null>(null);
  const stopKeeping = useRef(() => {});
  useEffect(
    () => () => {
      mounted.current = false;
      stopKeeping.current();
    },
    [],
  );
  // After the render that re-enabled the controls, not before: a disabled button cannot take focus.
  useEffect(() => {
    if (busy) return;
    const el = started.current;
    started.current = null;
    giveFocusBack(el);
    if (el && document.activeElement === el) stopKeeping.current = keepFocusNear(el);
  }, [busy]);
  const run = useCallback(<T>(call: () => Promise<T>, { key = "busy", onSuccess }: RunOptions<T> = {}) => {
    if (running.current) return;
    running.current = true;
    stopKeeping.current();
    started.current =
      document.activeElement instanceof HTMLElement && document.activeElement !== document.body ? document.activeElement : null;
    setBusy(key);
    setError(null);
    let p: Promise<T>;
    try {
      p = call();
    } catch (e) {
      p = Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    // The error and the end of busy in one render: the message never shows beside a button
    // that still says it is working.
    const done = (failed: boolean, e?: unknown) => {
      running.current = false;
      if (!mounted.current) return;
      if (failed) setError(e);
      setBusy("");
    };
    p.then(
      (value) => {
        try {
          onSuccess?.(value);
        } catch (e) {
          return done(true, e);
        }
        done(false);
      },
      (e: unknown) => done(true, e),
    );
  }, []);
  return { busy, error, setError, run };
}
