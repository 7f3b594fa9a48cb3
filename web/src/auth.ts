// Sign-in (issue 6): the server sets an HttpOnly session cookie; the console never holds the
// access token, only the session's CSRF token to echo on changes.

import { ApiError, request, setCsrfToken } from "./api";

export interface Account {
  username: string;
  /** "cookie" or "bearer" */
  auth?: string;
  expires_at?: string;
  csrf_token?: string;
}

export async function currentAccount(): Promise<Account | null> {
  try {
    const me = await request<Account>("GET", "/api/v1/auth/me", { quiet401: true });
    setCsrfToken(me.csrf_token);
    return me;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return null;
    throw e;
  }
}

export async function login(username: string, password: string): Promise<Account> {
  const res = await request<Account>("POST", "/api/v1/auth/login", { body: { username, password }, quiet401: true });
  setCsrfToken(res.csrf_token);
  return { username: res.username ?? username, expires_at: res.expires_at, auth: "cookie" };
}

export async function logout() {
  try {
    await request<void>("POST", "/api/v1/auth/logout", { quiet401: true });
  } finally {
    setCsrfToken("");
  }
}
