// The console shell: who is signed in, the header with navigation and sign-out, and the pages.
// An admin gets every page; a member only My sessions and their account: an admin
// page's address shows "not available to members" and fetches nothing.

import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { setUnauthenticatedHandler } from "./api";
import { currentAccount, isMember, logout, type Account } from "./auth";
import { ErrorBox } from "./components/Errors";
import { pageTitle, RouteAnnouncer } from "./components/RouteAnnouncer";
import { getAccount } from "./account";
import { get } from "./api";
import { AccountPage, PasswordForm } from "./pages/Account";
import { AuditPage } from "./pages/Audit";
import { GroupsPage } from "./pages/Groups";
import { ClustersPage } from "./pages/Clusters";
import { InvitePage } from "./pages/Invite";
import { LoginPage } from "./pages/Login";
import { MySessionsPage } from "./pages/MySessions";
import { NotificationsLink, NotificationsPage } from "./pages/Notifications";
import { OfferingsPage } from "./pages/Offerings";
import { OverviewPage } from "./pages/Overview";
import { SessionsPage } from "./pages/Sessions";
import { UsagePage } from "./pages/Usage";
import { UsersPage } from "./pages/Users";
import { VolumesPage } from "./pages/Volumes";
import { navigate, onLinkClick, usePath } from "./router";

const PAGES: { path: string; label: string; render: (me: string) => JSX.Element }[] = [
  { path: "/overview", label: "Overview", render: () => <OverviewPage /> },
  { path: "/clusters", label: "Clusters", render: () => <ClustersPage /> },
  { path: "/sessions", label: "Sessions", render: () => <SessionsPage /> },
  { path: "/offerings", label: "Offerings", render: () => <OfferingsPage /> },
  { path: "/volumes", label: "Volumes", render: () => <VolumesPage /> },
  { path: "/audit", label: "Audit", render: () => <AuditPage /> },
  { path: "/usage", label: "Usage", render: () => <UsagePage admin /> },
  // Admins only: the lab's accounts.
  { path: "/users", label: "Users", render: (me) => <UsersPage me={me} /> },
  { path: "/groups", label: "Groups", render: () => <GroupsPage /> },
];

/** Where a member lands: their own sessions. */
export const MEMBER_HOME = "/my";

type SignIn =
  { state: "checking" } | { state: "out" } | { state: "in"; account: Account; mustChange?: boolean } | { state: "error"; error: unknown };

export function App() {
  const path = usePath();
  const [auth, setAuth] = useState<SignIn>({ state: "checking" });
  /** Said on the first page after the forced password change (gone on the next page). */
  const [notice, setNotice] = useState("");
  const noticePage = useRef("");
  useEffect(() => {
    // "/" and "/login" are not pages: the first page is where they lead.
    if (!notice || path === "/" || path === "/login") return;
    if (!noticePage.current) noticePage.current = path;
    else if (noticePage.current !== path) {
      noticePage.current = "";
      setNotice("");
    }
  }, [notice, path]);
  // The pages outside the console's shell (sign-in, the forced change) have titles of their own.
  const outside = auth.state === "out" ? "Sign in" : auth.state === "in" && auth.mustChange ? "Choose your own password" : null;
  useEffect(() => {
    if (outside) document.title = pageTitle(outside);
  }, [outside]);

  /** Signed in: still on the initial password? Then a new one is asked for first. */
  const signedIn = async (account: Account, known = getAccount()) => {
    let mustChange = false;
    try {
      mustChange = (await known).must_change_password;
    } catch {
      // Not known (the account could not be read): the console does not insist.
    }
    setAuth({ state: "in", account, mustChange });
  };
  const check = () => {
    // Both at once: a page load waits for one round trip, not two.
    const known = getAccount();
    known.catch(() => {});
    void currentAccount().then(
      (account) => (account ? signedIn(account, known) : setAuth({ state: "out" })),
      (error) => setAuth({ state: "error", error }),
    );
  };
  useEffect(() => {
    setUnauthenticatedHandler(() => setAuth({ state: "out" }));
    check();
    // eslint-disable-next-line react-hooks/exhaustive-deps -- once, when the console opens
  }, []);

  // The first page after sign-in: the overview once a cluster exists, else the clusters page
  // (where the first one is registered).
  const member = auth.state === "in" && isMember(auth.account);
  useEffect(() => {
    if (auth.state !== "in" || (path !== "/" && path !== "/login")) return;
    // A member's first page is always their sessions (the clusters are not theirs to read).
    if (member) {
      navigate(MEMBER_HOME, true);
      return;
    }
    let gone = false;
    get<{ pagination?: { total?: number } }>("/api/v1/clusters?page=1&size=1").then(
      (p) => !gone && navigate((p.pagination?.total ?? 0) > 0 ? "/overview" : "/clusters", true),
      () => !gone && navigate("/clusters", true),
    );
    return () => {
      gone = true;
    };
  }, [auth.state, member, path]);

  // An invite link needs no sign-in (and replaces whoever is signed in in this browser once used).
  if (path === "/invite")
    return (
      <InvitePage
        onSignedIn={async (a) => {
          await signedIn(a);
          navigate("/", true);
        }}
      />
    );
  if (auth.state === "checking") return <p class="loading center">Loading…</p>;
  if (auth.state === "error")
    return (
      <main class="login">
        <div class="card">
          <ErrorBox error={auth.error} title="Cannot reach the server" />
          <button type="button" onClick={check}>
            Retry
          </button>
        </div>
      </main>
    );
  if (auth.state === "out") return <LoginPage onSignedIn={(a) => void signedIn(a)} />;
  if (auth.mustChange)
    return (
      <main class="login">
        <div class="card wide">
          <PasswordForm
            username={auth.account.username}
            initial
            member={member}
            onChanged={() => {
              setNotice("Your password is changed; you are signed in with it.");
              setAuth({ ...auth, mustChange: false });
            }}
            onSignOut={() => {
              const out = () => {
                setAuth({ state: "out" });
                navigate("/login", true);
              };
              void logout().then(out, out);
            }}
          />
        </div>
      </main>
    );
  const signOut = () => {
    setAuth({ state: "out" });
    navigate("/login", true);
  };

  const account = {
    path: "/account",
    label: "Account",
    render: () => <AccountPage username={auth.account.username} member={member} onSignedOut={signOut} />,
  };
  const notifications = { path: "/notifications", label: "Notifications", render: () => <NotificationsPage /> };
  const mine = { path: MEMBER_HOME, label: "My sessions", render: () => <MySessionsPage username={auth.account.username} /> };
  const myUsage = { path: "/usage", label: "My usage", render: () => <UsagePage admin={false} /> };
  const nav = member ? [mine, myUsage] : PAGES;
  const adminPage = PAGES.find((p) => path === p.path || path.startsWith(`${p.path}/`));
  const page =
    path === "/account"
      ? account
      : path === "/notifications"
        ? notifications
        : nav.find((p) => path === p.path || path.startsWith(`${p.path}/`));
  const home = member ? MEMBER_HOME : "/clusters";
  return (
    <div class="shell" onClick={onLinkClick}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <RouteAnnouncer path={path} />
      <header class="top">
        <span class="brand">gShare Edge</span>
        <nav aria-label="Console">
          {nav.map((p) => (
            <a key={p.path} href={p.path} aria-current={page === p ? "page" : undefined}>
              {p.label}
            </a>
          ))}
        </nav>
        <span class="grow" />
        <NotificationsLink current={path === "/notifications"} />
        <a
          class="account"
          href="/account"
          aria-current={path === "/account" ? "page" : undefined}
          title={member ? "Your account: password, sign-ins" : "Your account: password, admins, sign-ins"}
        >
          {auth.account.username}
        </a>
        <button
          type="button"
          onClick={() =>
            // Signed out here either way: a session the server could not end expires by itself.
            void logout().then(signOut, signOut)
          }
        >
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {notice && (
          <p class="ok notice" role="status">
            {notice}
          </p>
        )}
        {page ? (
          page.render(auth.account.username)
        ) : member && adminPage ? (
          <section aria-labelledby="na-title" class="not-available">
            <h1 id="na-title">Not available to members</h1>
            <p>
              {adminPage.label} (<code>{path}</code>) is a page for the lab's admins. Your sessions and the offerings you can start are on{" "}
              <a href={MEMBER_HOME}>My sessions</a>.
            </p>
          </section>
        ) : (
          <section>
            <h1>Not found</h1>
            <p>
              No console page at <code>{path}</code>. <a href={home}>{member ? "Go to My sessions" : "Go to clusters"}</a>.
            </p>
          </section>
        )}
      </main>
    </div>
  );
}
