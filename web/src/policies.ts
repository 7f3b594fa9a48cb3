// Groups, resource policies and node pools as the console uses them (admins only): the server's
// types (src/api/schema.d.ts) and calls.

import { get, request, type Schemas } from "./api";

export type Group = Schemas["GroupView"];
export type Policy = Schemas["PolicyView"];
export type PolicyCreate = Schemas["PolicyCreate"];
export type Limits = Schemas["Limits"];
export type Scope = Schemas["Scope"];
export type NodePool = Schemas["NodePoolView"];
export type PoolCreate = Schemas["PoolCreate"];
export type PoolKind = Schemas["PoolKind"];
export type RuntimeAction = Schemas["RuntimeAction"];

const seg = encodeURIComponent;

export const listGroups = (signal?: AbortSignal) => get<Schemas["GroupList"]>("/api/v1/groups", signal);
export const createGroup = (body: Schemas["GroupCreate"]) => request<Group>("POST", "/api/v1/groups", { body });
export const deleteGroup = (name: string) => request<void>("DELETE", `/api/v1/groups/${seg(name)}`);
/** Puts an account in a group (`null`: in none). */
export const setUserGroup = (username: string, group: string | null) =>
  request<unknown>("PATCH", `/api/v1/users/${seg(username)}`, { body: { group } });

export const listPolicies = (signal?: AbortSignal) => get<Schemas["PolicyList"]>("/api/v1/resource-policies", signal);
export const createPolicy = (body: PolicyCreate) => request<Policy>("POST", "/api/v1/resource-policies", { body });
export const updatePolicy = (id: string, body: Schemas["PolicyPatch"]) =>
  request<Policy>("PATCH", `/api/v1/resource-policies/${seg(id)}`, { body });
export const deletePolicy = (id: string) => request<void>("DELETE", `/api/v1/resource-policies/${seg(id)}`);

export const listPools = (signal?: AbortSignal) => get<Schemas["PoolList"]>("/api/v1/node-pools", signal);
export const createPool = (body: PoolCreate) => request<NodePool>("POST", "/api/v1/node-pools", { body });
export const updatePool = (id: string, body: Schemas["PoolUpdate"]) =>
  request<NodePool>("PATCH", `/api/v1/node-pools/${seg(id)}`, { body });
export const deletePool = (id: string) => request<void>("DELETE", `/api/v1/node-pools/${seg(id)}`);

/** The numeric fields a policy sets, in the order the console shows them, with their units. */
export const POLICY_NUMBERS: {
  key: "max_concurrent" | "max_queued" | "max_runtime_min" | "idle_timeout_sec";
  label: string;
  unit: string;
}[] = [
  { key: "max_concurrent", label: "Live sessions", unit: "" },
  { key: "max_queued", label: "Queued sessions", unit: "" },
  { key: "max_runtime_min", label: "Runtime", unit: "min" },
  { key: "idle_timeout_sec", label: "Idle timeout", unit: "s" },
];
export const LIMIT_NUMBERS: {
  key: "cpu" | "mem_gb" | "gpu_mem_mb" | "gpu_cores" | "storage_gb" | "volume_gb";
  label: string;
  unit: string;
}[] = [
  { key: "cpu", label: "CPUs", unit: "" },
  { key: "mem_gb", label: "Memory", unit: "GiB" },
  { key: "gpu_mem_mb", label: "GPU memory", unit: "MiB" },
  { key: "gpu_cores", label: "GPU cores", unit: "%" },
  { key: "storage_gb", label: "Storage", unit: "GiB" },
  { key: "volume_gb", label: "Home volume", unit: "GiB" },
];

/** What reaching the runtime limit does, in words (`null`: inherited, or, effective, end). */
export const RUNTIME_ACTIONS: { value: RuntimeAction; label: string }[] = [
  { value: "end", label: "end the session" },
  { value: "pause", label: "pause the session" },
];

export function runtimeActionText(a: RuntimeAction | null | undefined, unset = "inherited"): string {
  return a == null ? unset : (RUNTIME_ACTIONS.find((x) => x.value === a)?.label ?? a);
}

/** A policy value as a cell: "inherited" when unset, "no limit" for 0 where 0 means that. */
export function valueText(v: number | boolean | null | undefined, unit = "", zero = "no limit"): string {
  if (v == null) return "inherited";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (v === 0) return zero;
  return unit ? `${v.toLocaleString("en")} ${unit}` : v.toLocaleString("en");
}

/** A number field's text as the API wants it: blank inherits (`null`); otherwise the number (NaN stays, for the server to refuse). */
export function numberOrNull(s: string): number | null {
  const t = s.trim();
  return t === "" ? null : Number(t);
}
