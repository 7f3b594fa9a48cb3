// An invite link (`/invite#inv_…`, made by an admin on the Users page): no sign-in needed. The
// owner chooses their password here; the console then signs them in with it. The token is in the
// fragment, so it never reaches a server log or a Referer; it is dropped from the address bar once
// read (it is a credential until used).

import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { ApiError } from "../api";
import { login, type Account } from "../auth";
import { acceptInvite, MIN_PASSWORD, newPasswordProblem } from "../account";
import { ErrorBox } from "../components/Errors";
import { FieldError, invalidProps } from "../components/Field";
import { serverFieldMessages } from "../form";
import { useAction } from "../hooks";

/** The token an invite address carries (`#inv_…`), or "". */
export function inviteToken(hash: string): string {
  const t = decodeURIComponent(hash.replace(/^#/, "")).trim();
  return /^inv_[A-Za-z0-9_-]{1,124}$/.test(t) ? t : "";
}

/** Why a link cannot be used, in words; null when the error is not about the link. */
export function deadLink(e: unknown): { title: string; text: string } | null {
  if (!(e instanceof ApiError)) return null;
  const ask = "Ask your lab's admin for a new link.";
  if (e.status === 404)
    return {
      title: "This invite link does not work",
      text: `It is not known: a newer link replaced it, or the account was deleted. ${ask}`,
    };
  if (e.code === "invite_used")
    return {
      title: "This invite link was used already",
      text: `Each link sets a password once. If you set yours with it, sign in. If not, ${ask.toLowerCase()}`,
    };
  if (e.code === "invite_expired") return { title: "This invite link has expired", text: `Links work for 72 hours. ${ask}` };
  if (e.code === "invite_revoked") {
    const reason = (e.details as { reason?: unknown }).reason;
    return reason === "inviter_deleted"
      ? {
          title: "This invite link no longer works",
          text: "The admin who made it no longer has an account. Ask another admin of your lab for a new link.",
        }
      : { title: "This invite link no longer works", text: `The account it was made for was deleted. ${ask}` };
  }
  return null;
}

export function InvitePage(props: { onSignedIn: (a: Account) => Promise<void> | void }) {
  // Read once: the address bar then shows /invite only (a reload needs the link again).
  const [token] = useState(() => {
    const t = inviteToken(location.hash);
    if (location.hash) history.replaceState(history.state, "", location.pathname + location.search);
    return t;
  });
  const [password, setPassword] = useState("");
  const [repeat, setRepeat] = useState("");
  const [checked, setChecked] = useState(false);
  const { busy: running, error, run } = useAction();
  const busy = running !== "";
  /** Set, but the sign-in after it failed: the sign-in page is the way on. */
  const [setFor, setSetFor] = useState<string | null>(null);
  const local: Record<string, string> = checked
    ? { password: newPasswordProblem(password, ""), repeat: password && repeat !== password ? "Does not match the password." : "" }
    : {};
  const server = serverFieldMessages(error);
  const msg = (k: string) => local[k] || server[k] || "";
  const dead = deadLink(error);

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    setChecked(true);
    if (newPasswordProblem(password, "") || repeat !== password) return;
    run(async () => {
      const { username } = await acceptInvite(token, password);
      let account: Account;
      try {
        account = await login(username, password);
      } catch (err) {
        setSetFor(username);
        throw err;
      }
      await props.onSignedIn(account);
    });
  };

  const shell = (body: ComponentChildren) => (
    <main class="login">
      <div class="card wide invite">{body}</div>
    </main>
  );
  if (!token)
    return shell(
      <>
        <h1>No invite link here</h1>
        <p>
          This address holds no invite link. Open the whole link your lab's admin sent you (it ends in <code>#inv_…</code>), or{" "}
          <a href="/login">sign in</a> if you have a password.
        </p>
      </>,
    );
  if (dead)
    return shell(
      <section role="alert" aria-labelledby="invite-dead">
        <h1 id="invite-dead">{dead.title}</h1>
        <p>{dead.text}</p>
        <p>
          <a href="/login">Go to sign in</a>
        </p>
      </section>,
    );
  if (setFor)
    return shell(
      <>
        <h1>Your password is set</h1>
        <p>
          Sign in as <code>{setFor}</code> with it.
        </p>
        <ErrorBox error={error} title="Not signed in" />
        <p>
          <a href="/login">Go to sign in</a>
        </p>
      </>,
    );
  return (
    <main class="login">
      <form class="card wide invite form" onSubmit={submit} noValidate aria-labelledby="invite-title">
        <h1 id="invite-title">Choose your password</h1>
        <p>
          Your lab's admin invited you to gShare Edge. Choose a password of at least {MIN_PASSWORD} characters — a few words make a good
          one. You are signed in once it is set.
        </p>
        <div class="field">
          <label>
            Password
            <input
              type="password"
              name="password"
              autocomplete="new-password"
              autoFocus
              value={password}
              onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
              {...invalidProps("invite-pw", msg("password"), "invite-pw-help")}
            />
          </label>
          <FieldError id="invite-pw-error" message={msg("password")} />
          <p class="small muted help" id="invite-pw-help">
            At least {MIN_PASSWORD} characters, not one repeated or consecutive run (<code>aaaa…</code>, <code>1234…</code>).
          </p>
        </div>
        <div class="field">
          <label>
            Password again
            <input
              type="password"
              name="repeat"
              autocomplete="new-password"
              value={repeat}
              onInput={(e) => setRepeat((e.target as HTMLInputElement).value)}
              {...invalidProps("invite-repeat", msg("repeat"))}
            />
          </label>
          <FieldError id="invite-repeat-error" message={msg("repeat")} />
        </div>
        {!server.password && (
          <ErrorBox
            error={
              error instanceof ApiError && error.status === 429
                ? new Error("The server is busy signing others in. Try again in a moment.")
                : error
            }
            title="Password not set"
          />
        )}
        <div class="dialog-foot">
          <button type="submit" class="primary" disabled={busy}>
            {busy ? "Setting…" : "Set password and sign in"}
          </button>
        </div>
      </form>
    </main>
  );
}
