// The signed-in account: change the password (asked first while the initial one is still in use)
// and sign out everywhere; an admin also sees the other admins (add, remove), recent sign-ins and
// the snapshots (a member cannot read those: they stay off a member's page).

import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, get, type Schemas } from "../api";
import { login } from "../auth";
import { addAdmin, changePassword, listAdmins, MIN_PASSWORD, newPasswordProblem, removeAdmin, signOutEverywhere } from "../account";
import { ErrorBox } from "../components/Errors";
import { SnapshotsPanel } from "../components/SnapshotsPanel";
import { PolicyPanel } from "../components/PolicyPanel";
import { FieldError, invalidProps } from "../components/Field";
import { formatTime } from "../format";
import { onlyFieldErrors, serverFieldMessages } from "../form";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";

/** Change one's password; on success the console signs in again with it (older sessions end). */
export function PasswordForm(props: {
  username: string;
  initial?: boolean;
  member?: boolean;
  onChanged: () => void;
  /** The forced change (before the console opens): the way out is to sign out. */
  onSignOut?: () => void;
}) {
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [repeat, setRepeat] = useState("");
  const [checked, setChecked] = useState(false);
  const { busy: running, error, run } = useAction();
  const busy = running !== "";
  const [done, setDone] = useState(false);
  // The forced change opens on its first field: `autofocus` is honoured once per page load, and the
  // sign-in form used it already.
  const first = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (props.initial) first.current?.focus();
  }, [props.initial]);
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
      {/* The forced change is a page of its own (no console around it): its heading is the page's h1. */}
      {props.initial ? <h1 id="password-title">Choose your own password</h1> : <h2 id="password-title">Change your password</h2>}
      {props.initial && !props.member && props.username === "admin" && (
        <p>
          You signed in with the initial password from <code>initial-admin-password</code>. Choose a password of your own (at least{" "}
          {MIN_PASSWORD} characters); the file is deleted once you have.
        </p>
      )}
      {props.initial && !props.member && props.username !== "admin" && (
        <p>
          You signed in with the first password another admin chose for you. Choose a password of your own (at least {MIN_PASSWORD}{" "}
          characters) before you go on.
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
            ref={first}
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
          At least {MIN_PASSWORD} characters{props.initial ? "; not the one you signed in with" : "; not the initial password"}.
          {!props.initial && " Your other sign-ins end; this one continues."}
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
        {props.onSignOut && (
          <button type="button" onClick={props.onSignOut}>
            Sign out
          </button>
        )}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Changing…" : "Change password"}
        </button>
      </div>
    </form>
  );
}

function Admins(props: { me: string }) {
  // An admin added or removed elsewhere is an audit entry: the list follows the audit topic.
  const admins = useLivePoll((signal) => listAdmins(signal), ["audit"], { pollMs: 0 });
  const [added, setAdded] = useState("");
  /** The admin whose removal is being confirmed. */
  const [confirming, setConfirming] = useState("");
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
    setAdded("");
    adding.run(async () => {
      await addAdmin(name.trim(), password);
      setAdded(name.trim());
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
        setConfirming("");
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
              {a.username !== props.me && confirming !== a.username && (
                <button
                  type="button"
                  class="danger"
                  disabled={busy !== ""}
                  onClick={() => (setConfirming(a.username), removing.setError(null))}
                  aria-label={`Remove ${a.username}…`}
                >
                  Remove…
                </button>
              )}
              {confirming === a.username && (
                <ConfirmRemove
                  name={a.username}
                  busy={busy === a.username}
                  onKeep={() => setConfirming("")}
                  onRemove={() => remove(a.username)}
                />
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
          <p class="small muted help">They replace it with their own at their first sign-in.</p>
        </div>
        {!onlyFieldErrors(error, ["username", "password"]) && !(error instanceof ApiError && error.status === 409) && (
          <ErrorBox error={error} title="Not added" />
        )}
        {added && (
          <p class="ok" role="status">
            Added {added}. Give them the password you chose; they choose their own at their first sign-in.
          </p>
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

/** "Remove carol?" in place of the button: what goes, and a way back that has focus. */
function ConfirmRemove(props: { name: string; busy: boolean; onKeep: () => void; onRemove: () => void }) {
  const keep = useRef<HTMLButtonElement>(null);
  useEffect(() => keep.current?.focus(), []);
  return (
    <div class="confirm" role="group" aria-label={`Confirm removing ${props.name}`}>
      <p class="small">
        Remove the admin <strong>{props.name}</strong>? Their sign-ins end now and they can no longer sign in.
      </p>
      <div class="row">
        <button type="button" ref={keep} onClick={props.onKeep}>
          Keep {props.name}
        </button>
        <button type="button" class="danger" disabled={props.busy} onClick={props.onRemove}>
          {props.busy ? "Removing…" : `Remove ${props.name}`}
        </button>
      </div>
    </div>
  );
}

/** Sign out everywhere, asked first: it ends this sign-in too. */
function SignOutEverywhereButton(props: { onSignedOut: () => void }) {
  const { busy, error, run } = useAction();
  const [asking, setAsking] = useState(false);
  const keep = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) keep.current?.focus();
  }, [asking]);
  return (
    <>
      <ErrorBox error={error} title="Not signed out" />
      {!asking ? (
        <button type="button" class="danger" onClick={() => setAsking(true)}>
          Sign out everywhere…
        </button>
      ) : (
        <div class="confirm" role="group" aria-label="Confirm signing out everywhere">
          <p class="small">End every sign-in of yours, on every computer — this one too? You sign in again afterwards.</p>
          <div class="row">
            <button type="button" ref={keep} onClick={() => setAsking(false)}>
              Stay signed in
            </button>
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
              {busy ? "Signing out…" : "Sign out everywhere"}
            </button>
          </div>
        </div>
      )}
    </>
  );
}

function SignIns(props: { me: string; onSignedOut: () => void; reloadKey?: number }) {
  const q = new URLSearchParams({ action: "auth.login", actor: `admin:${props.me}`, size: "10", page: "1" }).toString();
  // A sign-in elsewhere is an audit entry: the list follows the audit topic.
  // A password change signs this console in again under a new token; its event stream may miss
  // that sign-in, so the page reloads the list then (reloadKey).
  const recent = useLivePoll((signal) => get<Schemas["AuditPage"]>(`/api/v1/audit?${q}`, signal), ["audit"], {
    pollMs: 0,
    deps: [q, props.reloadKey],
  });
  return (
    <section aria-labelledby="signins-title">
      <h2 id="signins-title">Recent sign-ins</h2>
      <ErrorBox error={recent.error} />
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
      <SignOutEverywhereButton onSignedOut={props.onSignedOut} />
    </section>
  );
}

/** A member's sign-out everywhere (their sign-in history is in the admins' audit log). */
function SignOutEverywhere(props: { onSignedOut: () => void }) {
  return (
    <section aria-labelledby="signout-title">
      <h2 id="signout-title">Sign-ins</h2>
      <p>Signed in on another computer and left it? This ends every sign-in of yours, this one too.</p>
      <SignOutEverywhereButton onSignedOut={props.onSignedOut} />
    </section>
  );
}

export function AccountPage(props: { username: string; member?: boolean; onSignedOut: () => void }) {
  // Bumped by a password change: the sign-ins list then shows the sign-in it made.
  const [changes, setChanges] = useState(0);
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
          <PasswordForm username={props.username} onChanged={() => setChanges((n) => n + 1)} />
        </div>
        <div class="card">
          <Admins me={props.username} />
        </div>
        <div class="card">
          <SignIns me={props.username} onSignedOut={props.onSignedOut} reloadKey={changes} />
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
