import { useEffect, useState } from "preact/hooks";
import { ApiError, request, type Schemas } from "../api";
import { login, type Account } from "../auth";
import { ErrorBox } from "../components/Errors";
import { useAction } from "../hooks";

/** "45 s", "4 min 59 s". */
export function waitText(s: number): string {
  const n = Math.max(0, Math.ceil(s));
  return n < 60 ? `${n} s` : `${Math.floor(n / 60)} min${n % 60 ? ` ${n % 60} s` : ""}`;
}

/** The wait a 429 asks for, from details.retry_after_s (the server also sends Retry-After). */
export function retryAfterS(e: unknown): number | null {
  if (!(e instanceof ApiError) || e.status !== 429) return null;
  const v = Number((e.details as { retry_after_s?: unknown }).retry_after_s);
  return Number.isFinite(v) && v > 0 ? v : null;
}

/** What the sign-on callback's refusal (`?sso_error=<code>`, set by the server) means to the user. */
export function ssoErrorText(code: string): string {
  switch (code) {
    case "bad_request":
      return "That single sign-on expired or was already used. Start it again.";
    case "invalid_credentials":
      return "The lab's sign-on service did not sign you in.";
    case "account_disabled":
      return "Your account may not use gShare (no group of yours is allowed, or it is disabled). Ask an admin of the lab.";
    case "conflict":
      return "Your sign-on name belongs to another account here. Ask an admin of the lab.";
    case "unavailable":
      return "The lab's sign-on service did not answer. Try again later, or sign in with a password.";
    default:
      return "Single sign-on did not work. Try again, or ask an admin of the lab.";
  }
}

export function LoginPage(props: { onSignedIn: (a: Account) => void }) {
  const [username, setUsername] = useState("admin");
  /** Whether the first admin's password file is still there: the hint says where it is only then. */
  const [initialFile, setInitialFile] = useState(false);
  /** The single sign-on button, when the server has an OpenID Connect issuer. */
  const [sso, setSso] = useState<{ label: string; start: string } | null>(null);
  /** The sign-on callback's refusal, passed back in the address. */
  const [ssoError] = useState(() => new URLSearchParams(window.location.search).get("sso_error"));
  useEffect(() => {
    const ctl = new AbortController();
    request<Schemas["SignInOptions"]>("GET", "/api/v1/auth/options", { signal: ctl.signal, quiet401: true })
      .then((o) => {
        setInitialFile(o.initial_admin_password);
        setSso(o.methods.includes("oidc") && o.oidc_start ? { label: o.oidc_label ?? "Single sign-on", start: o.oidc_start } : null);
      })
      .catch(() => setInitialFile(false));
    return () => ctl.abort();
  }, []);
  const [password, setPassword] = useState("");
  const { busy: running, error, setError, run } = useAction();
  const busy = running !== "";
  /** Browser time until which the server refuses sign-ins (throttled), or 0. */
  const [until, setUntil] = useState(0);
  const [asked, setAsked] = useState(0);
  /** A hold on one username (not on this address) ends when another username is typed. */
  const [heldFor, setHeldFor] = useState<string | null>(null);
  useEffect(() => {
    if (heldFor !== null && username !== heldFor) setUntil(0);
  }, [username, heldFor]);
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!until) return;
    const t = setInterval(() => {
      setNow(Date.now());
      if (Date.now() >= until) {
        setUntil(0);
        setError(null);
      }
    }, 1000);
    return () => clearInterval(t);
  }, [until, setError]);
  const waiting = until > now ? (until - now) / 1000 : 0;
  const submit = (e: Event) => {
    e.preventDefault();
    if (waiting > 0) return;
    run(async () => {
      try {
        props.onSignedIn(await login(username, password));
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) throw new Error("Wrong username or password.", { cause: err });
        const wait = retryAfterS(err);
        if (err instanceof ApiError && wait) {
          // Said by the countdown below, not as an error.
          setNow(Date.now());
          setUntil(Date.now() + wait * 1000);
          setAsked(wait);
          setHeldFor((err.details as { scope?: unknown }).scope === "username" ? username : null);
          return;
        }
        if (err instanceof ApiError && err.status === 429)
          throw new Error("Too many failed sign-ins. Wait a few minutes before trying again.", { cause: err });
        throw err;
      }
    });
  };
  return (
    <main class="login">
      <form class="card" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title">gShare Edge</h1>
        <p class="muted">Sign in to the console.</p>
        {ssoError && (
          <div class="error" role="alert">
            {ssoErrorText(ssoError)}
          </div>
        )}
        {sso && (
          <>
            <a class="button primary sso" href={sso.start}>
              {sso.label}
            </a>
            <p class="small muted sso-or">or with a username and password:</p>
          </>
        )}
        <label>
          Username
          <input
            name="username"
            autocomplete="username"
            required
            value={username}
            onInput={(e) => setUsername((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          Password
          <input
            name="password"
            type="password"
            autocomplete="current-password"
            required
            autoFocus
            value={password}
            onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
          />
        </label>
        <ErrorBox error={error} />
        {waiting > 0 && (
          <div class="error throttled" role="alert">
            Too many failed sign-ins. Wait <span class="retry-wait">{waitText(asked)}</span> before trying again — until then no password is
            checked, not even the right one.
          </div>
        )}
        <button type="submit" class="primary" disabled={busy || waiting > 0}>
          {busy ? "Signing in…" : waiting > 0 ? `Sign in (in ${waitText(waiting)})` : "Sign in"}
        </button>
        {initialFile ? (
          <p class="small muted">
            A new server's first admin is <code>admin</code>: its first start writes the password to{" "}
            <code>&lt;data_dir&gt;/initial-admin-password</code>, and the file is deleted once <code>admin</code> has chosen their own.
            Other accounts get their password from an admin.
          </p>
        ) : (
          <p class="small muted">Your lab's admin gives you your account, or a link to set its password.</p>
        )}
      </form>
    </main>
  );
}
