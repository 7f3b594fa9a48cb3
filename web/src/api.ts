// The console's one way to reach the server: same-origin fetch with the session cookie, JSON in and
// out, and every failure turned into an ApiError carrying the server's {"error":{code,message,details}}.

import type { components } from "./api/schema";

/**
 * The server's types, generated from its OpenAPI document (`src/api/openapi.json`, a snapshot the
 * Rust tests hold to the served one) into `src/api/schema.d.ts`; `npm run api:update` renews both.
 */
export type Schemas = components["schemas"];

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
    public details: Record<string, unknown> = {},
    public requestId = "",
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** Called on any 401 so the app can drop back to the sign-in page. */
let onUnauthenticated: () => void = () => {};
export function setUnauthenticatedHandler(f: () => void) {
  onUnauthenticated = f;
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** The session's CSRF token as the server handed it over (login and /auth/me answers). */
let csrfToken = "";
export function setCsrfToken(token: string | null | undefined) {
  csrfToken = token ?? "";
}

/**
 * CSRF protection for cookie-authenticated state-changing requests, in one place: the server
 * wants the session's token echoed in `X-CSRF-Token`; it is also readable from the
 * double-submit cookie `gshare_csrf`, which wins because it follows the current session.
 */
export function csrfHeaders(method: string, cookie = typeof document === "undefined" ? "" : document.cookie): Record<string, string> {
  if (SAFE_METHODS.has(method.toUpperCase())) return {};
  let token = csrfToken;
  for (const part of cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    // `__Host-gshare_csrf` under TLS.
    if ((k === "gshare_csrf" || k === "__Host-gshare_csrf") && v.length) token = decodeURIComponent(v.join("="));
  }
  return token ? { "X-CSRF-Token": token } : {};
}

export interface RequestOptions {
  body?: unknown;
  /** A body sent as it is, with its content type (a CSV import), instead of `body` as JSON. */
  raw?: { contentType: string; text: string };
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Don't call the unauthenticated handler on 401 (the sign-in request itself). */
  quiet401?: boolean;
}

export async function request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json", ...csrfHeaders(method), ...opts.headers };
  let body: string | undefined;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.body);
  } else if (opts.raw) {
    headers["Content-Type"] = opts.raw.contentType;
    body = opts.raw.text;
  }
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body, credentials: "same-origin", signal: opts.signal });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError(0, "network", "cannot reach the server; check that gshare is running");
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: unknown = undefined;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  if (!res.ok) {
    // The server's envelope (`ErrorBody`); anything else (a proxy's page) gets the status as its code.
    const err = (json as { error?: Partial<Schemas["ErrorDetail"]> } | undefined)?.error;
    if (res.status === 401 && !opts.quiet401) onUnauthenticated();
    throw new ApiError(
      res.status,
      err?.code ?? `http_${res.status}`,
      err?.message ?? `${res.status} ${res.statusText || "request failed"}`,
      err?.details ?? {},
      err?.request_id ?? res.headers.get("x-request-id") ?? "",
    );
  }
  return json as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => request<T>("GET", path, { signal });

/** A random key for Idempotency-Key; crypto.randomUUID needs a secure context, this does not. */
export function newIdempotencyKey(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Base64 of a string's UTF-8 bytes (btoa alone only takes Latin-1). */
export function base64Utf8(s: string): string {
  const bytes = new TextEncoder().encode(s);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}
