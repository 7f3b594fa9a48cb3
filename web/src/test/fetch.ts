// A fetch stub for component tests: routes "METHOD /path" to handlers and records every call.

import { vi } from "vitest";

export interface Call {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
}
type Handler = (call: Call) => { status?: number; body?: unknown } | Promise<{ status?: number; body?: unknown }>;

export function stubFetch(routes: Record<string, Handler>) {
  const calls: Call[] = [];
  const fetch = vi.fn(async (input: string, init: RequestInit = {}) => {
    const method = (init.method ?? "GET").toUpperCase();
    const url = new URL(input, "http://console.test");
    const call: Call = {
      method,
      path: url.pathname + url.search,
      headers: (init.headers ?? {}) as Record<string, string>,
      body: init.body ? JSON.parse(init.body as string) : undefined,
    };
    calls.push(call);
    const key = Object.keys(routes).find((k) => {
      const [m, p] = k.split(" ");
      return m === method && (p === url.pathname || (p.endsWith("*") && url.pathname.startsWith(p.slice(0, -1))));
    });
    const res = key ? await routes[key](call) : { status: 404, body: { error: { code: "not_found", message: "no such route", details: {} } } };
    const status = res.status ?? 200;
    return new Response(status === 204 || res.body === undefined ? null : JSON.stringify(res.body), {
      status,
      headers: { "content-type": "application/json" },
    });
  });
  vi.stubGlobal("fetch", fetch);
  return calls;
}

export const cluster = (over: Record<string, unknown> = {}) => ({
  id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
  name: "gpu-a",
  role: "primary",
  api_server: "https://10.0.0.1:6443",
  session_domain: "sessions.a.example",
  effective_session_domain: "sessions.a.example",
  status: "connected",
  last_error: null,
  node_count: 4,
  gpu_count: 32,
  running_sessions: 3,
  heartbeat_at: new Date().toISOString(),
  heartbeat_age_s: 12,
  registered_at: new Date().toISOString(),
  ...over,
});

export const page = (data: unknown[]) => ({ data, pagination: { page: 1, size: 100, total: data.length, total_pages: 1 } });
