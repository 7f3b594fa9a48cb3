// The clusters API (issue 4) as the console uses it: types and calls, tolerant of fields that are
// optional or not yet present.

import { get, request } from "./api";

export type ClusterStatus = "pending" | "connected" | "degraded" | "unreachable" | string;
export type Role = "primary" | "standby";

export interface ProbeError {
  stage?: string;
  cause?: string;
  hint?: string;
}

export interface Check {
  name: string;
  ok: boolean;
  detail?: string;
}

export interface Cluster {
  id: string;
  name: string;
  role: Role | string;
  api_server: string;
  session_domain?: string | null;
  effective_session_domain?: string | null;
  /** host:port of the cluster's ingress controller that /proxy/ is relayed to. */
  session_ingress?: string | null;
  effective_session_ingress?: string | null;
  session_domain_effective?: string | null;
  status: ClusterStatus;
  last_error?: ProbeError | null;
  last_probe_error?: ProbeError | null;
  probe_error?: ProbeError | null;
  node_count?: number;
  gpu_count?: number;
  running_sessions?: number;
  heartbeat_at?: string | null;
  heartbeat_age_s?: number | null;
  registered_at?: string;
  checks?: Check[];
  /** The operator on this cluster (issue 14); absent from older servers. */
  operator?: OperatorConnection;
}

/** not_attached · attach_incomplete · connected (a callback within two heartbeats) · silent. */
export type OperatorState = "not_attached" | "attach_incomplete" | "connected" | "silent" | string;

export interface OperatorConnection {
  state: OperatorState;
  attached_at?: string | null;
  last_callback_age_s?: number | null;
  likely_causes?: string[];
  last_token_rejection?: { at: string; reason: string; counts?: Record<string, number> } | null;
  token?: { kid: string; issued_at: string; expires_at: string } | null;
  renewal_error?: string | null;
  renewal_error_at?: string | null;
  next_renewal_attempt_at?: string | null;
  /** The operator's Deployment, pods, log tail and Events as last read from the cluster (issue 30). */
  pod?: OperatorPods | null;
}

export interface OperatorContainer {
  name: string;
  image: string;
  ready: boolean;
  restarts: number;
  state: string;
  reason?: string | null;
  message?: string | null;
  last_termination?: { exit_code: number; reason?: string | null; message?: string | null } | null;
}

export interface OperatorPods {
  read_at: string;
  pods: { name: string; phase: string; unschedulable?: string | null; containers: OperatorContainer[] }[];
  pods_matching: number;
  pods_more?: boolean;
  log?: { pod: string; container: string; previous: boolean; lines: string[] } | null;
  log_error?: string | null;
  events: { type: string; reason: string; object: string; message: string; count: number }[];
  events_error?: string | null;
  diagnosis?: { cause: string; fix: string } | null;
  error?: string | null;
}

/** One object of an attach or detach answer. */
export interface ObjectResult {
  object: string;
  result: string;
  status?: number;
  reason?: string;
  message?: string;
}

export interface AttachReport {
  cluster_id: string;
  objects: ObjectResult[];
  changed: number;
  token?: { kid: string; expires_at: string } | null;
  profile?: { profile: string; reason: string; pull_policy: string } | null;
  labeled_nodes?: { node: string; applied: string[]; kept: string[] }[];
}

export const attachOperator = (id: string, force = false, labelNodes = false) => {
  const q = [force ? "force=true" : "", labelNodes ? "label_nodes=true" : ""].filter(Boolean).join("&");
  return request<AttachReport>("POST", `/api/v1/clusters/${encodeURIComponent(id)}/attach${q ? `?${q}` : ""}`);
};

/** What an admin who deploys by hand runs on a host with gshare and the cluster's kubeconfig. */
export function manualCommands(id: string) {
  return `gshare operator manifests --cluster-id ${id} \\\n` + `  | KUBECONFIG=<this cluster's kubeconfig> kubectl apply -f -`;
}

export interface Page<T> {
  data: T[];
  pagination?: { page: number; size: number; total: number; total_pages: number };
}

export interface Gpu {
  uuid: string;
  model?: string;
  memory_mb?: number;
  total_mem_mb?: number;
  vram_mb?: number;
  /** Booked by running sessions. */
  used_mem_mb?: number;
  used_cores?: number;
}

export interface ClusterNode {
  name: string;
  ready: boolean;
  schedulable?: boolean;
  cordoned?: boolean;
  decommissioning?: boolean;
  /** No report within the heartbeat window, or reported NotReady. */
  offline?: boolean;
  gpus?: Gpu[];
  last_seen?: string | null;
  last_seen_at?: string | null;
}

export interface ConnectionTest {
  cluster_id: string;
  status: ClusterStatus;
  checks: Check[];
  last_error?: ProbeError | null;
  latency_ms?: number;
  checked_at?: string;
}

export const effectiveDomain = (c: Cluster) => c.effective_session_domain ?? c.session_domain_effective ?? (c.session_domain || null);
export const probeError = (c: Cluster): ProbeError | null => c.last_error ?? c.last_probe_error ?? c.probe_error ?? null;
export const isCordoned = (n: ClusterNode) => n.cordoned ?? n.schedulable === false;
export const gpuMemMb = (g: Gpu) => g.memory_mb ?? g.total_mem_mb ?? g.vram_mb;

const PAGE_SIZE = 100;

/** Every cluster, following pagination (a fleet is hundreds at most). */
export async function listClusters(signal?: AbortSignal): Promise<Cluster[]> {
  const all: Cluster[] = [];
  for (let page = 1; page <= 100; page++) {
    const res = await get<Page<Cluster> | Cluster[]>(`/api/v1/clusters?page=${page}&size=${PAGE_SIZE}`, signal);
    if (Array.isArray(res)) return res;
    all.push(...res.data);
    const p = res.pagination;
    if (!p || page >= p.total_pages || res.data.length === 0) break;
  }
  return all;
}

export async function listNodes(id: string, signal?: AbortSignal): Promise<ClusterNode[]> {
  const res = await get<Page<ClusterNode> | ClusterNode[] | { nodes: ClusterNode[] }>(
    `/api/v1/clusters/${encodeURIComponent(id)}/nodes`,
    signal,
  );
  if (Array.isArray(res)) return res;
  if ("nodes" in res) return res.nodes;
  return res.data;
}

export const setCordon = (id: string, node: string, cordon: boolean) =>
  request<unknown>(
    "POST",
    `/api/v1/clusters/${encodeURIComponent(id)}/nodes/${encodeURIComponent(node)}/${cordon ? "cordon" : "uncordon"}`,
  );

export interface RegisterBody {
  name: string;
  role: Role;
  kubeconfig_b64: string;
  session_domain?: string;
  api_server?: string;
}

export const registerCluster = (body: RegisterBody, idempotencyKey: string) =>
  request<Cluster>("POST", "/api/v1/clusters", { body, headers: { "Idempotency-Key": idempotencyKey } });

export type ClusterPatch = Partial<Pick<Cluster, "name" | "role" | "api_server" | "session_domain" | "session_ingress">>;

export const patchCluster = (id: string, patch: ClusterPatch) =>
  request<Cluster>("PATCH", `/api/v1/clusters/${encodeURIComponent(id)}`, { body: patch });

export const testConnection = (id: string) => request<ConnectionTest>("POST", `/api/v1/clusters/${encodeURIComponent(id)}/connection-test`);

export const unregisterCluster = (id: string) => request<void>("DELETE", `/api/v1/clusters/${encodeURIComponent(id)}`);
