// Sign-in (issue 6): the server sets an HttpOnly session cookie; the console never holds the token.

import { ApiError, request } from "./api";

export interface Account {
  username: string;
  [k: string]: unknown;
}

export async function currentAccount(): Promise<Account | null> {
  try {
    const me = await request<Account & { user?: Account; account?: Account }>("GET", "/api/v1/auth/me", { quiet401: true });
    return me.user ?? me.account ?? me;
  } catch (e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) return null;
    throw e;
  }
}

export async function login(username: string, password: string): Promise<Account> {
  const res = await request<{ user?: Account; account?: Account; username?: string }>("POST", "/api/v1/auth/login", {
    body: { username, password },
    quiet401: true,
  });
  return res.user ?? res.account ?? { username: res.username ?? username };
}

export const logout = () => request<void>("POST", "/api/v1/auth/logout", { quiet401: true });
