import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { App } from "../app";
import { AccountPage } from "./Account";
import { stubFetch } from "../test/fetch";
import { stubEventSource } from "../test/events";

const err = (status: number, code: string, message: string, details: Record<string, unknown> = {}) => ({
  status,
  body: { error: { code, message, details } },
});
const said = (input: HTMLElement) =>
  document.getElementById((input.getAttribute("aria-describedby") ?? "").split(" ")[0])?.textContent ?? "";

describe("first sign-in with the initial password", () => {
  beforeEach(() => history.replaceState(null, "", "/"));

  it("asks for a new password before anything else; refusals land next to their field; then signs in again", async () => {
    let changed = false;
    const calls = stubFetch({
      "GET /api/v1/auth/me": () => ({ body: { username: "admin", auth: "cookie", csrf_token: "c1" } }),
      "GET /api/v1/account": () => ({ body: { username: "admin", must_change_password: !changed } }),
      "POST /api/v1/account/password": (c) => {
        const b = c.body as { current_password: string; new_password: string };
        if (b.new_password === "the-initial-password")
          return err(422, "validation_failed", "new_password: must not be the initial password", {
            errors: [
              { loc: ["body", "new_password"], msg: "must not be the initial password from initial-admin-password", type: "value_error" },
            ],
          });
        changed = true;
        return { status: 204 };
      },
      "POST /api/v1/auth/login": () => ({ body: { username: "admin", csrf_token: "c2" } }),
      "GET /api/v1/clusters": () => ({ body: { data: [], pagination: { page: 1, size: 100, total: 0, total_pages: 1 } } }),
    });
    render(<App />);
    await screen.findByRole("heading", { name: "Choose your own password" });
    expect(screen.queryByRole("navigation")).toBeNull();
    const current = screen.getByLabelText("Current password");
    const next = screen.getByLabelText("New password");
    const repeat = screen.getByLabelText("New password again");
    // Too short and not repeated: said next to each field, nothing sent.
    fireEvent.input(current, { target: { value: "the-initial-password" } });
    fireEvent.input(next, { target: { value: "short" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await waitFor(() => expect(said(next)).toBe("At least 12 characters (this one has 5); a few words make a good one."));
    expect(next.getAttribute("aria-invalid")).toBe("true");
    // The same as the current one.
    fireEvent.input(next, { target: { value: "the-initial-password" } });
    fireEvent.input(repeat, { target: { value: "the-initial-password" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await waitFor(() => expect(said(next)).toBe("Must differ from the current password."));
    expect(calls.filter((c) => c.method === "POST")).toEqual([]);
    // The server refuses the initial password (typed as current by mistake elsewhere): next to the field.
    fireEvent.input(current, { target: { value: "something-else-entirely" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await waitFor(() => expect(said(next)).toBe("Must not be the initial password from initial-admin-password."));
    // A good one: changed, signed in again with it, and the console opens.
    fireEvent.input(next, { target: { value: "a long passphrase of mine" } });
    fireEvent.input(repeat, { target: { value: "a long passphrase of mine" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await screen.findByRole("navigation");
    const login = calls.find((c) => c.path === "/api/v1/auth/login");
    expect(login?.body).toEqual({ username: "admin", password: "a long passphrase of mine" });
  });
});

describe("AccountPage", () => {
  it("adds and removes admins, each refusal next to its field, and refuses to remove oneself by offering no button", async () => {
    let admins = [
      { username: "admin", created_at: "2026-01-01T00:00:00Z", password_changed_at: "2026-01-01T00:00:00Z" },
      { username: "bob", created_at: "2026-01-01T00:00:00Z", password_changed_at: "2026-01-01T00:00:00Z" },
    ];
    const calls = stubFetch({
      "GET /api/v1/admins": () => ({ body: { data: admins } }),
      "GET /api/v1/audit": () => ({ body: { data: [{ at: "2026-01-01T00:00:00Z", client_addr: "192.0.2.1", user_agent: "Chromium" }] } }),
      "POST /api/v1/admins": (c) => {
        const b = c.body as { username: string };
        if (b.username === "bob") return err(409, "conflict", "an admin named bob already exists", { username: "bob" });
        admins = [...admins, { username: b.username, created_at: "", password_changed_at: "" }];
        return { status: 201, body: admins[admins.length - 1] };
      },
      "DELETE /api/v1/admins/bob": () => {
        admins = admins.filter((a) => a.username !== "bob");
        return { status: 204 };
      },
    });
    render(<AccountPage username="admin" onSignedOut={() => {}} />);
    await screen.findByText("bob");
    expect(screen.queryByRole("button", { name: "Remove admin" })).toBeNull();
    await screen.findByText(/from 192\.0\.2\.1/);
    const form = screen.getByRole("form", { name: "Add an admin" });
    const name = within(form).getByLabelText("New admin's username");
    const pw = within(form).getByLabelText("Their first password");
    fireEvent.input(name, { target: { value: "carol smith" } });
    fireEvent.input(pw, { target: { value: "short" } });
    fireEvent.click(within(form).getByRole("button", { name: "Add admin" }));
    await waitFor(() => expect(said(name)).toBe("1–64 characters: letters, digits and - _ . @ only."));
    expect(said(pw)).toMatch(/^At least 12 characters/);
    fireEvent.input(name, { target: { value: "bob" } });
    fireEvent.input(pw, { target: { value: "twelve chars+" } });
    fireEvent.click(within(form).getByRole("button", { name: "Add admin" }));
    await waitFor(() => expect(said(name)).toBe("An admin named bob already exists."));
    fireEvent.input(name, { target: { value: "carol" } });
    fireEvent.click(within(form).getByRole("button", { name: "Add admin" }));
    await screen.findByText("carol");
    // Added, and said so: who signs in how.
    expect(screen.getByRole("status").textContent).toContain("Added carol");
    // Removing asks first, with the way back focused; nothing is sent until confirmed.
    fireEvent.click(screen.getByRole("button", { name: "Remove bob…" }));
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("button", { name: "Keep bob" })));
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    fireEvent.click(screen.getByRole("button", { name: "Remove bob" }));
    await waitFor(() => expect(screen.queryByText("bob")).toBeNull());
    expect(calls.filter((c) => c.method !== "GET").map((c) => `${c.method} ${c.path}`)).toEqual([
      "POST /api/v1/admins",
      "POST /api/v1/admins",
      "DELETE /api/v1/admins/bob",
    ]);
  });
});

describe("AccountPage: what the second walk found", () => {
  it("signs out everywhere only after asking, and the question says this sign-in ends too", async () => {
    const calls = stubFetch({
      "GET /api/v1/admins": () => ({ body: { data: [] } }),
      "GET /api/v1/audit": () => ({ body: { data: [] } }),
      "POST /api/v1/account/sign-out-everywhere": () => ({ status: 204 }),
    });
    const out = vi.fn();
    render(<AccountPage username="admin" onSignedOut={out} />);
    fireEvent.click(await screen.findByRole("button", { name: "Sign out everywhere…" }));
    const group = screen.getByRole("group", { name: "Confirm signing out everywhere" });
    expect(group.textContent).toContain("this one too");
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("button", { name: "Stay signed in" })));
    expect(calls.some((c) => c.method === "POST")).toBe(false);
    fireEvent.click(within(group).getByRole("button", { name: "Sign out everywhere" }));
    await waitFor(() => expect(out).toHaveBeenCalled());
  });

  it("the admin list follows admins added elsewhere (the audit topic), without a reload", async () => {
    const source = stubEventSource();
    let admins = [{ username: "admin", created_at: "", password_changed_at: "2026-01-01T00:00:00Z" }];
    stubFetch({
      "GET /api/v1/admins": () => ({ body: { data: admins } }),
      "GET /api/v1/audit": () => ({ body: { data: [] } }),
    });
    render(<AccountPage username="admin" onSignedOut={() => {}} />);
    await screen.findByText("admin");
    admins = [...admins, { username: "dana", created_at: "", password_changed_at: "2026-01-01T00:00:00Z" }];
    source().emit("audit");
    await screen.findByText("dana");
    vi.unstubAllGlobals();
  });

  it("lists the sign-in a password change made", async () => {
    let signins = [{ at: "2026-01-01T00:00:00Z", client_addr: "192.0.2.1" }];
    stubFetch({
      "GET /api/v1/admins": () => ({ body: { data: [] } }),
      "GET /api/v1/audit": () => ({ body: { data: signins } }),
      "POST /api/v1/account/password": () => {
        signins = [{ at: "2026-01-02T00:00:00Z", client_addr: "192.0.2.77" }, ...signins];
        return { status: 204 };
      },
      "POST /api/v1/auth/login": () => ({ body: { username: "admin", csrf_token: "c2" } }),
    });
    render(<AccountPage username="admin" onSignedOut={() => {}} />);
    await screen.findByText(/from 192\.0\.2\.1/);
    fireEvent.input(screen.getByLabelText("Current password"), { target: { value: "the old passphrase" } });
    fireEvent.input(screen.getByLabelText("New password"), { target: { value: "a long passphrase of mine" } });
    fireEvent.input(screen.getByLabelText("New password again"), { target: { value: "a long passphrase of mine" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await screen.findByText(/from 192\.0\.2\.77/);
  });
});

describe("sign-in and the forced change: what the second walk found", () => {
  beforeEach(() => history.replaceState(null, "", "/"));

  it("the forced change is a titled page with an h1, its first field focused, a way out, and a confirmation after", async () => {
    let changed = false;
    const calls = stubFetch({
      "GET /api/v1/auth/me": () => ({ body: { username: "carol", auth: "cookie", csrf_token: "c1", role: "admin" } }),
      "GET /api/v1/account": () => ({ body: { username: "carol", must_change_password: !changed } }),
      "POST /api/v1/account/password": () => ((changed = true), { status: 204 }),
      "POST /api/v1/auth/login": () => ({ body: { username: "carol", csrf_token: "c2" } }),
      "POST /api/v1/auth/logout": () => ({ status: 204 }),
      "GET /api/v1/clusters": () => ({ body: { data: [], pagination: { page: 1, size: 100, total: 0, total_pages: 1 } } }),
      "GET /api/v1/settings": () => ({ body: { public_url: "https://g.example", session_url_scheme: "https" } }),
    });
    render(<App />);
    const h1 = await screen.findByRole("heading", { level: 1, name: "Choose your own password" });
    expect(h1).toBeTruthy();
    await waitFor(() => expect(document.title).toBe("Choose your own password — gShare Edge"));
    await waitFor(() => expect(document.activeElement).toBe(screen.getByLabelText("Current password")));
    // Another admin chose carol's first password: not the initial-admin-password story, and no
    // "other sessions are signed out" for someone who has none.
    expect(document.body.textContent).toContain("another admin chose for you");
    expect(document.body.textContent).not.toContain("initial-admin-password");
    expect(document.body.textContent).not.toContain("other sessions");
    expect(screen.getByRole("button", { name: "Sign out" })).toBeTruthy();
    fireEvent.input(screen.getByLabelText("Current password"), { target: { value: "carol's first passphrase" } });
    fireEvent.input(screen.getByLabelText("New password"), { target: { value: "a long passphrase of mine" } });
    fireEvent.input(screen.getByLabelText("New password again"), { target: { value: "a long passphrase of mine" } });
    fireEvent.click(screen.getByRole("button", { name: "Change password" }));
    await screen.findByText("Your password is changed; you are signed in with it.");
    expect(calls.some((c) => c.path === "/api/v1/auth/logout")).toBe(false);
  });

  it("the forced change can be left by signing out", async () => {
    const calls = stubFetch({
      "GET /api/v1/auth/me": () => ({ body: { username: "admin", auth: "cookie", csrf_token: "c1", role: "admin" } }),
      "GET /api/v1/account": () => ({ body: { username: "admin", must_change_password: true } }),
      "POST /api/v1/auth/logout": () => ({ status: 204 }),
    });
    render(<App />);
    fireEvent.click(await screen.findByRole("button", { name: "Sign out" }));
    await screen.findByRole("button", { name: "Sign in" });
    expect(calls.some((c) => c.path === "/api/v1/auth/logout")).toBe(true);
    await waitFor(() => expect(document.title).toBe("Sign in — gShare Edge"));
  });
});
