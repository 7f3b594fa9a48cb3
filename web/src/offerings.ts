// The offerings API (sessions issue) as the console uses it: what a session can be started as.

import { get, request } from "./api";
import { formatDuration, formatMib } from "./format";

export type ResourceClass = "gpu" | "cpu";
export type GpuMode = "fractional" | "exclusive";

export interface Offering {
  id: string;
  name: string;
  resource_class: ResourceClass | string;
  image: string;
  mode: GpuMode | string | null;
  gpu_model: string | null;
  gpu_mem_mb: number | null;
  gpu_cores: number | null;
  cpu: number;
  mem_gb: number;
  disk_gb: number;
  idle_timeout_sec: number;
  max_runtime_sec: number;
  status: "active" | "inactive" | string;
  created_at: string;
  /** Live sessions using it. */
  sessions: number;
}

export interface OfferingBody {
  name?: string;
  resource_class?: ResourceClass;
  image?: string;
  mode?: GpuMode | null;
  gpu_model?: string | null;
  gpu_mem_mb?: number | null;
  gpu_cores?: number | null;
  cpu?: number | null;
  mem_gb?: number | null;
  disk_gb?: number | null;
  idle_timeout_sec?: number | null;
  max_runtime_sec?: number | null;
  status?: "active" | "inactive";
}

export async function listOfferings(opts: { activeOnly?: boolean } = {}, signal?: AbortSignal): Promise<Offering[]> {
  const res = await get<{ data: Offering[] } | Offering[]>(`/api/v1/offerings${opts.activeOnly ? "?status=active" : ""}`, signal);
  return Array.isArray(res) ? res : res.data;
}

export const createOffering = (body: OfferingBody) => request<Offering>("POST", "/api/v1/offerings", { body });

export const patchOffering = (id: string, patch: OfferingBody) =>
  request<Offering>("PATCH", `/api/v1/offerings/${encodeURIComponent(id)}`, { body: patch });

export const deleteOffering = (id: string) => request<void>("DELETE", `/api/v1/offerings/${encodeURIComponent(id)}`);

type Shape = Pick<Offering, "resource_class" | "mode" | "gpu_model" | "gpu_mem_mb" | "gpu_cores">;

/** "NVIDIA A100 · 20 GiB · 30% cores · fractional"; "CPU only" for a CPU offering. */
export function gpuShape(o: Shape): string {
  if (o.resource_class !== "gpu") return "CPU only";
  const parts = [o.gpu_model || "any GPU"];
  if (o.gpu_mem_mb != null) parts.push(formatMib(o.gpu_mem_mb));
  if (o.gpu_cores != null) parts.push(`${o.gpu_cores}% cores`);
  if (o.mode) parts.push(o.mode);
  return parts.join(" · ");
}

/** "4 CPU · 16 GB memory · 50 GB disk". */
export const resourcesShape = (o: Pick<Offering, "cpu" | "mem_gb" | "disk_gb">) =>
  `${o.cpu ?? "—"} CPU · ${o.mem_gb ?? "—"} GB memory · ${o.disk_gb ?? "—"} GB disk`;

export const idleText = (s: number) => formatDuration(s, "never");
export const maxRuntimeText = (s: number) => formatDuration(s, "no cap");
