// Accounts in the running server: one's own password, the admin list, sign-out everywhere.

import { get, request, type Schemas } from "./api";

export type AccountView = Schemas["AccountView"];
export type AdminSummary = Schemas["AccountSummary"];

export const MIN_PASSWORD = 12;

/** `quiet401`: asked alongside /auth/me before anyone is known to be signed in. */
export const getAccount = (signal?: AbortSignal) => request<AccountView>("GET", "/api/v1/account", { signal, quiet401: true });

export const changePassword = (current_password: string, new_password: string) =>
  request<void>("POST", "/api/v1/account/password", { body: { current_password, new_password } });

export const signOutEverywhere = () => request<void>("POST", "/api/v1/account/sign-out-everywhere");

export const listAdmins = (signal?: AbortSignal) => get<Schemas["AdminList"]>("/api/v1/admins", signal).then((r) => r.data);

export const addAdmin = (username: string, password: string) =>
  request<AdminSummary>("POST", "/api/v1/admins", { body: { username, password } });

export const removeAdmin = (username: string) => request<void>("DELETE", `/api/v1/admins/${encodeURIComponent(username)}`);

/** What is wrong with a new password before it is sent ("" when nothing). */
export function newPasswordProblem(next: string, current: string): string {
  if (!next) return "Required.";
  if ([...next].length < MIN_PASSWORD)
    return `At least ${MIN_PASSWORD} characters (this one has ${[...next].length}); a few words make a good one.`;
  if (current && next === current) return "Must differ from the current password.";
  return "";
}
