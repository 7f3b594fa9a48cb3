import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { App } from "./app";
import { cluster, offering, overview, page, stubFetch } from "./test/fetch";

describe("App", () => {
  beforeEach(() => history.replaceState(null, "", "/"));

  it("signs in, shows the account, and signs out", async () => {
    let signedIn = false;
    const calls = stubFetch({
      "GET /api/v1/auth/me": () =>
        signedIn
          ? { body: { username: "admin", auth: "cookie", csrf_token: "c1" } }
          : { status: 401, body: { error: { code: "unauthenticated", message: "no", details: {} } } },
      "POST /api/v1/auth/login": (c) => {
        const b = c.body as { username: string; password: string };
        if (b.password !== "pw")
          return { status: 401, body: { error: { code: "invalid_credentials", message: "wrong username or password", details: {} } } };
        signedIn = true;
        return { body: { username: "admin", csrf_token: "c1", access_token: "t", token_type: "Bearer", expires_in: 3600, expires_at: "" } };
      },
      "POST /api/v1/auth/logout": () => ({ status: 204 }),
      "GET /api/v1/clusters": () => ({ body: page([cluster()]) }),
      "GET /api/v1/overview": () => ({ body: overview() }),
    });
    render(<App />);
    const password = await screen.findByLabelText("Password");
    fireEvent.input(password, { target: { value: "nope" } });
    fireEvent.click(screen.getByRole("button", { name: "Sign in" }));
    await screen.findByText("Wrong username or password.");
    fireEvent.input(password, { target: { value: "pw" } });
    fireEvent.click(screen.getByRole("button", { name: "Sign in" }));
    // A cluster exists: the overview is the first page.
    await screen.findByRole("heading", { name: "Overview" });
    expect(location.pathname).toBe("/overview");
    expect(screen.getByText("admin")).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Sign out" }));
    await screen.findByLabelText("Password");
    const logout = calls.find((c) => c.path === "/api/v1/auth/logout");
    expect(logout?.headers["X-CSRF-Token"]).toBe("c1");
  });

  it("lands on the clusters page while no cluster is registered", async () => {
    stubFetch({
      "GET /api/v1/auth/me": () => ({ body: { username: "admin" } }),
      "GET /api/v1/clusters": () => ({ body: page([]) }),
    });
    render(<App />);
    await screen.findByText("No cluster is registered yet.");
    expect(location.pathname).toBe("/clusters");
  });

  it("says what the server answered when a page's list cannot load (no guess that its API is missing)", async () => {
    history.replaceState(null, "", "/sessions");
    stubFetch({ "GET /api/v1/auth/me": () => ({ body: { username: "admin" } }) });
    render(<App />);
    await waitFor(() => expect(screen.getByRole("alert").textContent).toContain("Cannot load sessions: no such route"));
    expect(document.body.textContent).not.toContain("arrives with");
  });

  it("has Sessions and Offerings in the navigation", async () => {
    history.replaceState(null, "", "/offerings");
    stubFetch({
      "GET /api/v1/auth/me": () => ({ body: { username: "admin" } }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/clusters": () => ({ body: page([cluster()]) }),
    });
    render(<App />);
    await screen.findByRole("heading", { name: "Offerings" });
    await screen.findByText("A100 20 GB slice");
    expect(screen.getByRole("link", { name: "Offerings" }).getAttribute("aria-current")).toBe("page");
    fireEvent.click(screen.getByRole("link", { name: "Sessions" }));
    await screen.findByRole("heading", { name: "Sessions" });
    expect(location.pathname).toBe("/sessions");
    await screen.findByText("No live sessions.");
  });

  describe("a member", () => {
    const me = () => ({ body: { username: "alice", auth: "cookie", csrf_token: "c1", role: "member", account: true, expires_at: "" } });
    const sessionsAndOfferings = {
      "GET /api/v1/sessions": () => ({ body: page([]) }),
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "GET /api/v1/account": () => ({ body: { username: "alice", must_change_password: false } }),
    };
    const adminCalls = (calls: { path: string }[]) =>
      calls.filter((c) => !/^\/api\/v1\/(sessions|offerings|volumes|account|auth|notifications)\b/.test(c.path));

    it("lands on My sessions with no admin navigation and never reads an admin route", async () => {
      const calls = stubFetch({ "GET /api/v1/auth/me": me, ...sessionsAndOfferings });
      render(<App />);
      await screen.findByRole("heading", { name: "My sessions" });
      expect(location.pathname).toBe("/my");
      const nav = screen.getByRole("navigation", { name: "Console" });
      expect(Array.from(nav.querySelectorAll("a")).map((a) => a.textContent)).toEqual(["My sessions", "My usage"]);
      for (const admin of ["Overview", "Clusters", "Sessions", "Offerings", "Audit"])
        expect(screen.queryByRole("link", { name: admin })).toBeNull();
      await screen.findByRole("heading", { name: "A100 20 GB slice" });
      expect(adminCalls(calls)).toEqual([]);
    });

    it("gets a clear page, not a 403, at an admin page's address, and fetches nothing for it", async () => {
      for (const path of ["/clusters", "/sessions", "/overview", "/audit", "/offerings/off_1"]) {
        history.replaceState(null, "", path);
        const calls = stubFetch({ "GET /api/v1/auth/me": me, ...sessionsAndOfferings });
        const { unmount } = render(<App />);
        await screen.findByRole("heading", { name: "Not available to members" });
        expect(location.pathname).toBe(path);
        expect(within(screen.getByRole("main")).getByRole("link", { name: "My sessions" }).getAttribute("href")).toBe("/my");
        expect(adminCalls(calls)).toEqual([]);
        expect(document.body.textContent).not.toMatch(/forbidden|403/i);
        unmount();
      }
    });

    it("reaches the account page (password, sign out everywhere) without the admins' panels", async () => {
      history.replaceState(null, "", "/account");
      const calls = stubFetch({ "GET /api/v1/auth/me": me, ...sessionsAndOfferings });
      render(<App />);
      await screen.findByRole("heading", { name: "Change your password" });
      expect(screen.getByRole("button", { name: "Sign out everywhere…" })).toBeTruthy();
      expect(screen.queryByRole("heading", { name: "Admins" })).toBeNull();
      expect(screen.queryByRole("heading", { name: "Recent sign-ins" })).toBeNull();
      expect(screen.getByRole("link", { name: "alice" }).getAttribute("aria-current")).toBe("page");
      expect(adminCalls(calls)).toEqual([]);
    });

    it("is asked for a password of their own first while must_change_password is set", async () => {
      stubFetch({
        "GET /api/v1/auth/me": me,
        ...sessionsAndOfferings,
        "GET /api/v1/account": () => ({ body: { username: "alice", must_change_password: true } }),
      });
      render(<App />);
      await screen.findByRole("heading", { name: "Choose your own password" });
      expect(document.body.textContent).toContain("the first password your lab's admin gave you");
      expect(document.body.textContent).not.toContain("initial-admin-password");
      expect(screen.queryByRole("navigation")).toBeNull();
    });
  });
});
