// A fetch stub for component tests: routes "METHOD /path" to handlers and records every call.

import { vi } from "vitest";

export interface Call {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
}
type Handler = (call: Call) => { status?: number; body?: unknown } | Promise<{ status?: number; body?: unknown }>;

/** JSON bodies parsed; any other (a CSV upload) as its text. */
function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export function stubFetch(routes: Record<string, Handler>) {
  const calls: Call[] = [];
  const fetch = vi.fn(async (input: string, init: RequestInit = {}) => {
    const method = (init.method ?? "GET").toUpperCase();
    const url = new URL(input, "http://console.test");
    const call: Call = {
      method,
      path: url.pathname + url.search,
      headers: (init.headers ?? {}) as Record<string, string>,
      body: init.body ? parseBody(init.body as string) : undefined,
    };
    calls.push(call);
    const key = Object.keys(routes).find((k) => {
      const [m, p] = k.split(" ");
      return m === method && (p === url.pathname || (p.endsWith("*") && url.pathname.startsWith(p.slice(0, -1))));
    });
    const res = key
      ? await routes[key](call)
      : { status: 404, body: { error: { code: "not_found", message: "no such route", details: {} } } };
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

export const offering = (over: Record<string, unknown> = {}) => ({
  id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA",
  name: "A100 20 GB slice",
  resource_class: "gpu",
  image: "registry.example/notebook:1.2",
  mode: "fractional",
  gpu_model: "NVIDIA A100",
  gpu_mem_mb: 20480,
  gpu_cores: 30,
  cpu: 4,
  mem_gb: 16,
  disk_gb: 50,
  idle_timeout_sec: 1800,
  max_runtime_sec: 0,
  status: "active",
  created_at: new Date().toISOString(),
  sessions: 2,
  ...over,
});

export const session = (over: Record<string, unknown> = {}) => ({
  id: "ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cr_name: "ses-01jaaaaaaaaaaaaaaaaaaaaaaa",
  name: "notebook-a",
  cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cluster_name: "gpu-a",
  offering_id: "off_01JAAAAAAAAAAAAAAAAAAAAAAA",
  offering_name: "A100 20 GB slice",
  owner: "alice",
  resource_class: "gpu",
  image: "registry.example/notebook:1.2",
  mode: "fractional",
  gpu_mem_mb: 20480,
  gpu_cores: 30,
  phase: "running",
  reason: null,
  message: null,
  bound_gpu_uuid: "GPU-3f2a9c1e-0000-1111-2222-333344445555",
  node_name: "gpu-node-0",
  created_at: new Date(Date.now() - 125_000).toISOString(),
  started_at: new Date(Date.now() - 100_000).toISOString(),
  phase_changed_at: new Date(Date.now() - 100_000).toISOString(),
  ended_at: null,
  last_report_at: new Date().toISOString(),
  live: true,
  actions: ["pause", "delete", "connect"],
  ...over,
});

/** An overview answer: gpu-a with two nodes of 4 cards (the second cordoned, one card in error). */
export const overview = (over: Record<string, unknown> = {}) => ({
  generated_at: new Date().toISOString(),
  totals: {
    clusters: 1,
    nodes: 2,
    gpus: 8,
    gpu_mem_total_mb: 8 * 81920,
    gpu_mem_booked_mb: 20480,
    gpus_busy: 1,
    gpus_error: 1,
    nodes_cordoned: 1,
    nodes_offline: 0,
    sessions_live: 2,
    sessions_running: 1,
  },
  clusters: [
    {
      id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
      name: "gpu-a",
      status: "connected",
      nodes: [
        {
          name: "gpu-node-0",
          flags: 0,
          models: ["NVIDIA A100"],
          cards: [81920, 20480, 0, 1, 81920, 0, 0, 0, 81920, 0, 0, 0, 81920, 0, 0, 0],
        },
        { name: "gpu-node-1", flags: 1, models: ["NVIDIA A100"], cards: [81920, 0, 0, 0, 81920, 0, 1, 0, 81920, 0, 0, 0, 81920, 0, 0, 0] },
      ],
      pools: [
        {
          id: "npl_01JAAAAAAAAAAAAAAAAAAAAAAA",
          name: "vision-a100",
          kind: "dedicated" as const,
          groups: ["vision"],
          nodes: 1,
          gpus_total: 4,
          gpus_used: 1,
        },
      ],
    },
  ],
  series: {
    interval_s: 5,
    t: [Date.now() - 10000, Date.now() - 5000, Date.now()],
    sessions_running: [0, 1, 1],
    gpu_mem_booked_mb: [0, 20480, 20480],
    callbacks_per_s: [0, 2.5, 1.2],
  },
  ...over,
});
