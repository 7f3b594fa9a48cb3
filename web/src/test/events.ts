// A stand-in for the browser's EventSource: the test says which topic the server announced.

import { vi } from "vitest";

export class FakeEventSource {
  static last: FakeEventSource | null = null;
  listeners: Record<string, (() => void)[]> = {};
  onerror: (() => void) | null = null;
  closed = false;
  constructor(public url: string) {
    FakeEventSource.last = this;
  }
  addEventListener(kind: string, f: () => void) {
    (this.listeners[kind] ??= []).push(f);
  }
  emit(kind: string) {
    (this.listeners[kind] ?? []).forEach((f) => f());
  }
  close() {
    this.closed = true;
  }
}

/** Installs the fake; returns the source the console opened once a page has mounted. */
export function stubEventSource() {
  FakeEventSource.last = null;
  vi.stubGlobal("EventSource", FakeEventSource);
  return () => {
    const es = FakeEventSource.last;
    if (!es) throw new Error("no EventSource was opened");
    return es;
  };
}
