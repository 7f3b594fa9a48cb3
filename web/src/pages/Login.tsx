import { useState } from "preact/hooks";
import { ApiError } from "../api";
import { login, type Account } from "../auth";
import { ErrorBox } from "../components/Errors";

export function LoginPage(props: { onSignedIn: (a: Account) => void }) {
  const [username, setUsername] = useState("admin");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      props.onSignedIn(await login(username, password));
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) setError(new Error("Wrong username or password."));
      else if (err instanceof ApiError && err.status === 429) setError(new Error(`${err.message} Try again later.`));
      else setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="login">
      <form class="card" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title">gShare Edge</h1>
        <p class="muted">Sign in to the console.</p>
        <label>
          Username
          <input name="username" autocomplete="username" required value={username} onInput={(e) => setUsername((e.target as HTMLInputElement).value)} />
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
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        <p class="small muted">
          First start wrote the password of <code>admin</code> to <code>&lt;data_dir&gt;/initial-admin-password</code>.
        </p>
      </form>
    </main>
  );
}
