// The offerings API as the console uses it: what a session can be started as.

import { get, request, type Schemas } from "./api";
import { formatDuration, formatMib } from "./format";

export type ResourceClass = Schemas["ResourceClass"];
export type GpuMode = Schemas["GpuMode"];
export type Offering = Schemas["OfferingView"];
/** A create or a patch: what OfferingDialog sends (the class only on create, the status only on patch). */
export type OfferingBody = Partial<Schemas["OfferingCreate"]> & Schemas["OfferingPatch"];

export async function listOfferings(opts: { activeOnly?: boolean } = {}, signal?: AbortSignal): Promise<Offering[]> {
  const res = await get<Schemas["OfferingList"]>(`/api/v1/offerings${opts.activeOnly ? "?status=active" : ""}`, signal);
  return res.data;
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
