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

/** The server's cap, in UTF-8 bytes. */
export const MAX_PASSWORD_BYTES = 1024;
/** Different characters a new password has at least (as the server asks). */
export const MIN_DISTINCT = 5;

/** The server's "too easy to guess" rules (auth::accounts::check_new_password), in words ("" when fine). */
export function weakPasswordProblem(p: string): string {
  const chars = [...p];
  if (new TextEncoder().encode(p).length > MAX_PASSWORD_BYTES) return `At most ${MAX_PASSWORD_BYTES} bytes.`;
  if (!p.trim()) return "Too easy to guess: it is blank.";
  // eslint-disable-next-line no-control-regex -- control characters are what is refused
  if (/[\u0000-\u001f\u007f-\u009f]/.test(p)) return "Too easy to guess: it has control characters.";
  if (new Set(chars).size < MIN_DISTINCT) return "Too easy to guess: it repeats too few different characters; a few words make a good one.";
  const code = chars.map((c) => c.codePointAt(0) ?? 0);
  const digit = (c: string) => c >= "0" && c <= "9";
  const run = (d: number) =>
    code.slice(1).every((b, i) => {
      const a = code[i];
      return b - a === d || (digit(chars[i]) && digit(chars[i + 1]) && (((b - a) % 10) + 10) % 10 === ((d % 10) + 10) % 10);
    });
  if (run(1) || run(-1)) return "Too easy to guess: it is one run of consecutive characters; a few words make a good one.";
  return "";
}

/** What is wrong with a new password before it is sent ("" when nothing). */
export function newPasswordProblem(next: string, current: string): string {
  if (!next) return "Required.";
  if ([...next].length < MIN_PASSWORD)
    return `At least ${MIN_PASSWORD} characters (this one has ${[...next].length}); a few words make a good one.`;
  if (current && next === current) return "Must differ from the current password.";
  return weakPasswordProblem(next);
}

/** Sets the password of the account an invite link was made for; answers whose it is. */
export const acceptInvite = (token: string, password: string) =>
  request<Schemas["InviteAccepted"]>("POST", "/api/v1/auth/invite", { body: { token, password }, quiet401: true });
