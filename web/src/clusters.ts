// The clusters API as the console uses it: the server's types (src/api/schema.d.ts) and calls.

import { get, request, type Schemas } from "./api";

export type ClusterStatus = Schemas["ClusterStatus"];
export type Role = Schemas["Role"];
export type ProbeError = Schemas["ProbeError"];
export type Check = Schemas["Check"];

/** A cluster as listed: the registry's fields and its operator's state. */
export type Cluster = Schemas["ClusterView"];
/** A cluster as GET answers it: the listing's fields, its checks and inventory, its operator. Registration
 *  and PATCH answer the same without `operator` (`ClusterDetailFields`). */
export type ClusterDetail = Schemas["ClusterDetail"];
/** The operator's state on a cluster (`operator` of the views above). */
export type OperatorConnection = Schemas["OperatorConnection"];

/** One object of an attach or detach answer. */
export type ObjectResult = Schemas["ObjectResult"];
export type AttachReport = Schemas["Report"];

export const attachOperator = (id: string, force = false, labelNodes = false, replace = false) => {
  const q = [force ? "force=true" : "", labelNodes ? "label_nodes=true" : "", replace ? "replace=true" : ""].filter(Boolean).join("&");
  return request<AttachReport>("POST", `/api/v1/clusters/${encodeURIComponent(id)}/attach${q ? `?${q}` : ""}`);
};

/** What an admin who deploys by hand runs on a host with gshare and the cluster's kubeconfig. */
export function manualCommands(id: string) {
  return `gshare operator manifests --cluster-id ${id} \\\n` + `  | KUBECONFIG=<this cluster's kubeconfig> kubectl apply -f -`;
}

export type Gpu = Schemas["GpuView"];
export type ClusterNode = Schemas["NodeView"];
export type ConnectionTest = Schemas["ConnectionTest"];

export const effectiveDomain = (c: Cluster) => c.effective_session_domain ?? null;

const PAGE_SIZE = 100;

/** Every cluster, following pagination (a fleet is hundreds at most). */
export async function listClusters(signal?: AbortSignal): Promise<Cluster[]> {
  const all: Cluster[] = [];
  for (let page = 1; page <= 100; page++) {
    const res = await get<Schemas["ClusterPage"]>(`/api/v1/clusters?page=${page}&size=${PAGE_SIZE}`, signal);
    all.push(...res.data);
    if (page >= res.pagination.total_pages || res.data.length === 0) break;
  }
  return all;
}

export const listNodes = (id: string, signal?: AbortSignal) =>
  get<ClusterNode[]>(`/api/v1/clusters/${encodeURIComponent(id)}/nodes`, signal);

export const setCordon = (id: string, node: string, cordon: boolean) =>
  request<ClusterNode>(
    "POST",
    `/api/v1/clusters/${encodeURIComponent(id)}/nodes/${encodeURIComponent(node)}/${cordon ? "cordon" : "uncordon"}`,
  );

export type DrainMode = Schemas["DrainMode"];
export type DrainReport = Schemas["DrainReport"];

/** Drain a node: cordon it, then move (or park) or end each session on it. */
export const drainNode = (id: string, node: string, mode: DrainMode, reason?: string) =>
  request<DrainReport>("POST", `/api/v1/clusters/${encodeURIComponent(id)}/nodes/${encodeURIComponent(node)}/drain`, {
    body: reason ? { mode, reason } : { mode },
  });

export type RegisterBody = Schemas["RegisterRequest"];

export const registerCluster = (body: RegisterBody, idempotencyKey: string) =>
  request<ClusterDetail>("POST", "/api/v1/clusters", { body, headers: { "Idempotency-Key": idempotencyKey } });

export type ClusterPatch = Schemas["PatchRequest"];

export const patchCluster = (id: string, patch: ClusterPatch) =>
  request<ClusterDetail>("PATCH", `/api/v1/clusters/${encodeURIComponent(id)}`, { body: patch });

export const testConnection = (id: string) => request<ConnectionTest>("POST", `/api/v1/clusters/${encodeURIComponent(id)}/connection-test`);

export const unregisterCluster = (id: string) => request<void>("DELETE", `/api/v1/clusters/${encodeURIComponent(id)}`);

/** What attach and sessions need of the server itself (`GET /api/v1/settings`). */
export type ServerSettings = Schemas["ServerSettings"];

export const getSettings = (signal?: AbortSignal) => get<ServerSettings>("/api/v1/settings", signal);

/** Where a setting is changed, in words: the server's own configuration file when it has one. */
export function configPlace(s: Pick<ServerSettings, "config_file"> | null | undefined): string {
  // `/dev/null`: started without a file on purpose (GSHARE_CONFIG=/dev/null); there is none to name.
  return s?.config_file && s.config_file !== "/dev/null" ? s.config_file : "the server's config.toml";
}

/** The last attach request's outcome on a cluster. */
export type AttachResult = Schemas["AttachResultView"];

/** Why attach cannot work yet, in the console's words (not the API's): each with what to do. */
export interface AttachBlocker {
  setting: "public_url" | "session_domain";
  text: string;
}

/**
 * What stops attach on this cluster, from the server's settings and the cluster's effective
 * session domain: attach would be refused for each (`setting_required`).
 */
export function attachBlockers(
  settings: ServerSettings | null | undefined,
  c: { name: string; effective_session_domain?: string | null },
): AttachBlocker[] {
  const out: AttachBlocker[] = [];
  if (settings?.public_url_problem) out.push({ setting: "public_url", text: publicUrlText(settings) });
  if (!c.effective_session_domain)
    out.push({
      setting: "session_domain",
      text: `${c.name} has no session domain: the operator needs the host its sessions are opened under.`,
    });
  return out;
}

/** The loopback public URL, in words: what to set where, and that the server must restart. */
export function publicUrlText(s: Pick<ServerSettings, "public_url" | "config_file"> | null | undefined): string {
  const url = s?.public_url ? `The server's public URL (${s.public_url})` : "The server's public URL";
  return (
    `${url} is not an address an operator inside a cluster can call back. Set public_url in ${configPlace(s)} ` +
    "(or GSHARE_PUBLIC_URL) to the address clusters reach this server at, e.g. https://gshare.example.com, then restart the server."
  );
}

/**
 * An attach failure in the console's words: a missing setting says where it is set here (the
 * API's message names PATCH and CLI flags); anything else keeps the server's message.
 */
export function attachFailureText(
  r: Pick<AttachResult, "code" | "message" | "setting">,
  settings?: ServerSettings | null,
  clusterName = "This cluster",
): string {
  if (r.code === "setting_required" && r.setting === "public_url") return publicUrlText(settings);
  if (r.code === "setting_required" && r.setting === "session_domain")
    return `${clusterName} has no session domain. Set it with Edit (or below), then attach again.`;
  return r.message ?? "attach failed";
}
