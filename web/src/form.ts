// Field-level validation shared by the dialogs: what the console checks before sending, and the
// server's 422 `details.errors[{loc,msg,type}]` turned into one message per field, in words.

import { ApiError, type Schemas } from "./api";

export type FieldMessages = Record<string, string>;

/** A host name only: no scheme, path, port or spaces ("" when fine). */
export function hostnameProblem(v: string): string {
  const s = v.trim();
  if (!s) return "";
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) return "Just the host name, without https:// — e.g. sessions.example.com.";
  if (s.includes("/")) return "Just the host name, without a path — e.g. sessions.example.com.";
  if (/\s/.test(s)) return "A host name has no spaces — e.g. sessions.example.com.";
  if (s.includes(":")) return "Just the host name, without a port — e.g. sessions.example.com.";
  if (!/^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i.test(s))
    return "Letters, digits, dots and hyphens only — e.g. sessions.example.com.";
  return "";
}

/**
 * An API server URL ("" when fine or empty): what the server accepts at registration and on edit
 * alike (kubeconfig::parse_server: http or https with a host), so Register and Edit agree.
 */
export function apiServerProblem(v: string): string {
  const s = v.trim();
  if (!s) return "";
  if (/\s/.test(s)) return "An address has no spaces — e.g. https://10.0.0.5:6443.";
  if (!/^https?:\/\/[^/:]+/i.test(s)) return "Give the API server's address with https:// (or http://) — e.g. https://10.0.0.5:6443.";
  return "";
}

/** An image reference ("" when fine). */
export function imageProblem(v: string): string {
  const s = v.trim();
  if (!s) return "Required: the container image sessions run, e.g. ghcr.io/org/lab:1.0.";
  if (/\s/.test(s)) return "An image reference has no spaces — e.g. ghcr.io/org/lab:1.0.";
  if (s.length > 512) return "At most 512 characters.";
  return "";
}

const HUMAN: Record<string, string> = {
  missing: "Required.",
};

/** The server's field errors by field name (the first path element after "body"). */
export function serverFieldMessages(e: unknown): FieldMessages {
  const out: FieldMessages = {};
  if (!(e instanceof ApiError)) return out;
  // `validation_failed`'s details (`FieldError`s); other codes have none.
  const errs = (e.details as { errors?: Partial<Schemas["FieldError"]>[] }).errors;
  if (!Array.isArray(errs)) return out;
  for (const x of errs) {
    const field = (x.loc ?? []).filter((l) => l !== "body" && l !== "query")[0] ?? "";
    if (!field || out[field]) continue;
    const msg = HUMAN[x.type ?? ""] ?? sentence(x.msg ?? "");
    out[field] = msg;
  }
  return out;
}

/** "must be between 1 and 5" → "Must be between 1 and 5." */
export function sentence(s: string): string {
  const t = s.replace(/`/g, "").trim();
  if (!t) return "Not accepted.";
  return t[0].toUpperCase() + t.slice(1) + (/[.!?]$/.test(t) ? "" : ".");
}

/** Whether an error is only about fields the form shows next to them. */
export function onlyFieldErrors(e: unknown, shown: string[]): boolean {
  const m = serverFieldMessages(e);
  const keys = Object.keys(m);
  return keys.length > 0 && keys.every((k) => shown.includes(k));
}
