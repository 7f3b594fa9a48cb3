// The signed-in account: change the password (asked first while the initial one is still in use)
// and sign out everywhere; an admin also sees the other admins (add, remove), recent sign-ins and
// the snapshots (a member cannot read those: they stay off a member's page).

import { useState } from "preact/hooks";
import { ApiError, get, type Schemas } from "../api";
import { login } from "../auth";
import { addAdmin, changePassword, listAdmins, MIN_PASSWORD, newPasswordProblem, removeAdmin, signOutEverywhere } from "../account";
import { ErrorBox } from "../components/Errors";
import { SnapshotsPanel } from "../components/SnapshotsPanel";
import { PolicyPanel } from "../components/PolicyPanel";
import { FieldError, invalidProps } from "../components/Field";
import { formatTime } from "../format";
import { onlyFieldErrors, serverFieldMessages } from "../form";
import { useAction, usePoll } from "../hooks";
import { useLivePoll } from "../live";

/** Change one's password; on success the console signs in again with it (older sessions end). */
export function PasswordForm(props: { username: string; initial?: boolean; member?: boolean; onChanged: () => void }) {
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [repeat, setRepeat] = useState("");
  const [checked, setChecked] = useState(false);
  const { busy: running, error, run } = useAction();
  const busy = running !== "";
  const [done, setDone] = useState(false);
  const local: Record<string, string> = checked
    ? {
        current_password: current ? "" : "Required.",
        new_password: newPasswordProblem(next, current),
        repeat: next && repeat !== next ? "Does not match the new password." : "",
      }
    : {};
  const server = serverFieldMessages(error);
  const msg = (k: string) => local[k] || server[k] || "";

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setChecked(true);
    setDone(false);
    const problems = [current ? "" : "x", newPasswordProblem(next, current), next && repeat !== next ? "x" : ""];
    if (problems.some(Boolean)) return;
    run(async () => {
      await changePassword(current, next);
      // The change ended every older session, this one too: sign in again with the new password.
      await login(props.username, next);
      setCurrent("");
      setNext("");
      setRepeat("");
      setChecked(false);
      setDone(true);
      props.onChanged();
    });
  };

  return (
    <form class="form password-form" onSubmit={submit} noValidate aria-labelledby="password-title">
      <h2 id="password-title">{props.initial ? "Choose your own password" : "Change your password"}</h2>
      {props.initial && !props.member && (
        <p>
          You signed in with the initial password from <code>initial-admin-password</code>. Choose a password of your own (at least{" "}
          {MIN_PASSWORD} characters); the file is deleted once you have.
        </p>
      )}
      {props.initial && props.member && (
        <p>
          You signed in with the first password your lab's admin gave you. Choose a password of your own (at least {MIN_PASSWORD}{" "}
          characters) before you start a session.
        </p>
      )}
      <div class="field">
        <label>
          Current password
          <input
            type="password"
            name="current_password"
            autocomplete="current-password"
            value={current}
            autoFocus={props.initial}
            onInput={(e) => setCurrent((e.target as HTMLInputElement).value)}
            {...invalidProps("pw-current", msg("current_password"))}
          />
        </label>
        <FieldError id="pw-current-error" message={msg("current_password")} />
      </div>
      <div class="field">
        <label>
          New password
          <input
            type="password"
            name="new_password"
            autocomplete="new-password"
            value={next}
            onInput={(e) => setNext((e.target as HTMLInputElement).value)}
            {...invalidProps("pw-new", msg("new_password"), "pw-new-help")}
          />
        </label>
        <FieldError id="pw-new-error" message={msg("new_password")} />
        <p class="small muted help" id="pw-new-help">
          At least {MIN_PASSWORD} characters; not the initial password. Your other sessions are signed out.
        </p>
      </div>
      <div class="field">
        <label>
          New password again
          <input
            type="password"
            name="repeat"
            autocomplete="new-password"
            value={repeat}
            onInput={(e) => setRepeat((e.target as HTMLInputElement).value)}
            {...invalidProps("pw-repeat", msg("repeat"))}
          />
        </label>
        <FieldError id="pw-repeat-error" message={msg("repeat")} />
      </div>
      {!onlyFieldErrors(error, ["current_password", "new_password"]) && <ErrorBox error={error} title="Not changed" />}
      {done && (
        <p class="ok" role="status">
          Password changed; other sessions were signed out.
        </p>
      )}
      <div class="dialog-foot">
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Changing…" : "Change password"}
        </button>
      </div>
    </form>
  );
}

function Admins(props: { me: string }) {
  const admins = usePoll((signal) => listAdmins(signal), 0);
  const [name, setName] = useState("");
  const [password, setPassword] = useState("");
  const [checked, setChecked] = useState(false);
  const adding = useAction();
  const removing = useAction();
  // The button of the admin being removed says so; every other change waits.
  const busy = adding.busy ? "add" : removing.busy;
  const error = adding.error;
  const removeError = removing.error;
  const local: Record<string, string> = checked
    ? {
        username: !name.trim()
          ? "Required."
          : /^[A-Za-z0-9._@-]{1,64}$/.test(name.trim())
            ? ""
            : "1–64 characters: letters, digits and - _ . @ only.",
        password: newPasswordProblem(password, ""),
      }
    : {};
  const server = serverFieldMessages(error);
  if (error instanceof ApiError && error.status === 409) server.username = `${error.message[0].toUpperCase()}${error.message.slice(1)}.`;
  const msg = (k: string) => local[k] || server[k] || "";

  const add = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setChecked(true);
    const bad = !/^[A-Za-z0-9._@-]{1,64}$/.test(name.trim()) || newPasswordProblem(password, "");
    if (bad) return;
    adding.run(async () => {
      await addAdmin(name.trim(), password);
      setName("");
      setPassword("");
      setChecked(false);
      admins.reload();
    });
  };
  const remove = (u: string) =>
    removing.run(
      async () => {
        await removeAdmin(u);
        admins.reload();
      },
      { key: u },
    );

  return (
    <section aria-labelledby="admins-title">
      <h2 id="admins-title">Admins</h2>
      <ErrorBox error={admins.error} title="Cannot load the admins" />
      <ErrorBox error={removeError} title="Not removed" />
      {admins.data && (
        <ul class="admins">
          {admins.data.map((a) => (
            <li key={a.username}>
              <strong>{a.username}</strong>
              {a.username === props.me && <span class="muted"> (you)</span>}
              <span class="small muted"> · password set {formatTime(a.password_changed_at)}</span>
              {a.username !== props.me && (
                <button
                  type="button"
                  class="danger"
                  disabled={busy !== ""}
                  onClick={() => remove(a.username)}
                  aria-label={`Remove ${a.username}`}
                >
                  {busy === a.username ? "Removing…" : "Remove"}
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      <form class="form add-admin" onSubmit={add} noValidate aria-label="Add an admin">
        <div class="field">
          <label>
            New admin's username
            <input
              name="username"
              autocomplete="off"
              value={name}
              onInput={(e) => setName((e.target as HTMLInputElement).value)}
              {...invalidProps("adm-name", msg("username"))}
            />
          </label>
          <FieldError id="adm-name-error" message={msg("username")} />
        </div>
        <div class="field">
          <label>
            Their first password
            <input
              type="password"
              name="password"
              autocomplete="new-password"
              value={password}
              onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
              {...invalidProps("adm-pw", msg("password"))}
            />
          </label>
          <FieldError id="adm-pw-error" message={msg("password")} />
        </div>
        {!onlyFieldErrors(error, ["username", "password"]) && !(error instanceof ApiError && error.status === 409) && (
          <ErrorBox error={error} title="Not added" />
        )}
        <div class="dialog-foot">
          <button type="submit" disabled={busy !== ""}>
            {busy === "add" ? "Adding…" : "Add admin"}
          </button>
        </div>
      </form>
    </section>
  );
}

function SignIns(props: { me: string; onSignedOut: () => void }) {
  const q = new URLSearchParams({ action: "auth.login", actor: `admin:${props.me}`, size: "10", page: "1" }).toString();
  // A sign-in elsewhere is an audit entry: the list follows the audit topic.
  const recent = useLivePoll((signal) => get<Schemas["AuditPage"]>(`/api/v1/audit?${q}`, signal), ["audit"], { pollMs: 0, deps: [q] });
  const { error, run } = useAction();
  return (
    <section aria-labelledby="signins-title">
      <h2 id="signins-title">Recent sign-ins</h2>
      <ErrorBox error={recent.error ?? error} />
      {recent.data && (
        <ul class="signins">
          {recent.data.data.map((s, i) => (
            <li key={`${s.at}-${i}`}>
              {formatTime(s.at)} <span class="muted">from {s.client_addr ?? "?"}</span>
              {s.user_agent && <span class="small muted"> · {s.user_agent.slice(0, 80)}</span>}
            </li>
          ))}
        </ul>
      )}
      <button
        type="button"
        class="danger"
        onClick={() =>
          run(async () => {
            await signOutEverywhere();
            props.onSignedOut();
          })
        }
      >
        Sign out everywhere
      </button>
    </section>
  );
}

/** A member's sign-out everywhere (their sign-in history is in the admins' audit log). */
function SignOutEverywhere(props: { onSignedOut: () => void }) {
  const { busy, error, run } = useAction();
  return (
    <section aria-labelledby="signout-title">
      <h2 id="signout-title">Sign-ins</h2>
      <p>Signed in on another computer and left it? This ends every sign-in of yours, this one too.</p>
      <ErrorBox error={error} title="Not signed out" />
      <button
        type="button"
        class="danger"
        disabled={busy !== ""}
        onClick={() =>
          run(async () => {
            await signOutEverywhere();
            props.onSignedOut();
          })
        }
      >
        Sign out everywhere
      </button>
    </section>
  );
}

export function AccountPage(props: { username: string; member?: boolean; onSignedOut: () => void }) {
  if (props.member)
    return (
      <section aria-labelledby="account-title" class="account-page">
        <div class="toolbar">
          <h1 id="account-title">Account</h1>
          <span class="muted summary">signed in as {props.username}</span>
        </div>
        <div class="card-grid">
          <div class="card">
            <PasswordForm username={props.username} member onChanged={() => {}} />
          </div>
          <div class="card">
            <SignOutEverywhere onSignedOut={props.onSignedOut} />
          </div>
          <div class="card">
            <PolicyPanel />
          </div>
        </div>
      </section>
    );

  return (
    <section aria-labelledby="account-title" class="account-page">
      <div class="toolbar">
        <h1 id="account-title">Account</h1>
        <span class="muted summary">signed in as {props.username}</span>
      </div>
      <div class="card-grid">
        <div class="card">
          <PasswordForm username={props.username} onChanged={() => {}} />
        </div>
        <div class="card">
          <Admins me={props.username} />
        </div>
        <div class="card">
          <SignIns me={props.username} onSignedOut={props.onSignedOut} />
        </div>
        <div class="card">
          <PolicyPanel />
        </div>
        <div class="card">
          <SnapshotsPanel />
        </div>
      </div>
    </section>
  );
}
