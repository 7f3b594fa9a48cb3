// Sign-in: the server sets an HttpOnly session cookie; the console never holds the
// access token, only the session's CSRF token to echo on changes.

import { ApiError, request, setCsrfToken, type Schemas } from "./api";

/** Who is signed in: `/auth/me`'s answer, or what sign-in says of it. */
export type Account = Pick<Schemas["Me"], "username" | "auth" | "expires_at"> & { role?: Schemas["UserRole"] };

/** A member sees their own sessions and account; anything else (an admin, an older server) the whole console. */
export const isMember = (a: Pick<Account, "role">) => a.role === "member";

export async function currentAccount(): Promise<Account | null> {
  try {
    const me = await request<Schemas["Me"]>("GET", "/api/v1/auth/me", { quiet401: true });
    setCsrfToken(me.csrf_token);
    return me;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return null;
    throw e;
  }
}

export async function login(username: string, password: string): Promise<Account> {
  const body: Schemas["LoginRequest"] = { username, password };
  const res = await request<Schemas["LoginResponse"]>("POST", "/api/v1/auth/login", { body, quiet401: true });
  setCsrfToken(res.csrf_token);
  return { username: res.username, expires_at: res.expires_at, auth: "cookie", role: res.role };
}

export async function logout() {
  try {
    await request<void>("POST", "/api/v1/auth/logout", { quiet401: true });
  } finally {
    setCsrfToken("");
  }
}
