import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { UsersPage, usersQuery } from "./Users";
import { choose } from "../test/dom";
import { stubFetch } from "../test/fetch";

const user = (over: Record<string, unknown> = {}) => ({
  username: "alice",
  role: "member",
  group: "vision",
  disabled: false,
  must_change_password: false,
  created_at: "2026-12-01T09:00:00.000Z",
  password_changed_at: "2026-12-01T09:00:00.000Z",
  ...over,
});
const list = (data: unknown[], total = data.length) => ({
  body: { data, pagination: { page: 1, size: 50, total, total_pages: Math.max(1, Math.ceil(total / 50)) } },
});
const err = (status: number, code: string, message: string, details: Record<string, unknown> = {}) => ({
  status,
  body: { error: { code, message, details, request_id: "req_1" } },
});

describe("UsersPage", () => {
  it("lists users with role, group and state, and filters through the query", async () => {
    const calls = stubFetch({
      "GET /api/v1/users": () =>
        list([user(), user({ username: "bob", role: "admin", group: null, disabled: true, must_change_password: true })]),
    });
    const { container } = render(<UsersPage />);
    await screen.findByText("bob");
    const headers = Array.from(container.querySelectorAll("thead th")).map((th) => th.textContent);
    expect(headers).toEqual(["User", "Role", "Group", "State", "Created", "Actions"]);
    const bob = container.querySelector('[data-username="bob"]') as HTMLElement;
    expect(within(bob).getByText("disabled")).toBeTruthy();
    expect(within(bob).getByText("password to change")).toBeTruthy();
    expect(within(bob).getByRole("button", { name: "Enable bob" })).toBeTruthy();
    expect(within(bob).getByRole("button", { name: "Demote bob" })).toBeTruthy();
    expect(screen.getByText("2 users")).toBeTruthy();
    choose(screen.getByLabelText("Filter by role"), "admin");
    await waitFor(() => expect(calls.some((c) => c.path === "/api/v1/users?role=admin&page=1&size=50")).toBe(true));
    const exp = screen.getByText("Export CSV") as HTMLAnchorElement;
    expect(exp.getAttribute("href")).toBe("/api/v1/users?role=admin&format=csv");
  });

  it("creates a user and shows the generated first password once, with a copy button", async () => {
    const calls = stubFetch({
      "GET /api/v1/users": () => list([]),
      "POST /api/v1/users": (c) => {
        const b = c.body as { username: string };
        if (b.username === "bad name")
          return err(422, "validation_failed", "username: must be…", {
            errors: [{ loc: ["body", "username"], msg: "must be 1–64 characters", type: "value_error" }],
          });
        return { status: 201, body: { user: user({ username: b.username, must_change_password: true }), password: "Gen3ratedPassw0rd" } };
      },
    });
    render(<UsersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New user" }));
    const dialog = screen.getByRole("dialog", { name: "New user" });
    const name = within(dialog).getByLabelText("Username");
    fireEvent.input(name, { target: { value: "bad name" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create user" }));
    await within(dialog).findByText("Must be 1–64 characters.");
    expect(name.getAttribute("aria-invalid")).toBe("true");
    fireEvent.input(name, { target: { value: "carol" } });
    fireEvent.input(within(dialog).getByLabelText("Group (optional)"), { target: { value: "nlp" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create user" }));
    const done = await screen.findByRole("dialog", { name: "User created" });
    expect(within(done).getByText("Gen3ratedPassw0rd")).toBeTruthy();
    expect(within(done).getByRole("button", { name: "Copy first password: Gen3ratedPassw0rd" })).toBeTruthy();
    const post = calls.filter((c) => c.method === "POST").pop();
    expect(post?.body).toEqual({ username: "carol", role: "member", group: "nlp", password: null, invite: false });
  });

  it("creates a user with an invite link instead of a password when asked", async () => {
    const calls = stubFetch({
      "GET /api/v1/users": () => list([]),
      "POST /api/v1/users": () => ({
        status: 201,
        body: {
          user: user({ username: "dora", must_change_password: true }),
          invite: { username: "dora", token: "inv_abc", url: "http://lab.test/invite#inv_abc", expires_at: "2026-12-04T09:00:00.000Z" },
        },
      }),
    });
    render(<UsersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New user" }));
    const dialog = screen.getByRole("dialog", { name: "New user" });
    fireEvent.input(within(dialog).getByLabelText("Username"), { target: { value: "dora" } });
    fireEvent.click(within(dialog).getByLabelText(/invite link instead of a password/));
    fireEvent.click(within(dialog).getByRole("button", { name: "Create user" }));
    const done = await screen.findByRole("dialog", { name: "User created" });
    expect(within(done).getByText("http://lab.test/invite#inv_abc")).toBeTruthy();
    expect(within(done).queryByText(/first password/)).toBeNull();
    const post = calls.filter((c) => c.method === "POST").pop();
    expect(post?.body).toEqual({ username: "dora", role: "member", group: null, password: null, invite: true });
  });

  it("offers no disable, role change or delete on the signed-in admin's own row", async () => {
    stubFetch({
      "GET /api/v1/users": () => list([user({ username: "root", role: "admin", group: null }), user()]),
    });
    const { container } = render(<UsersPage me="root" />);
    await screen.findByText("root");
    const mine = container.querySelector('[data-username="root"]') as HTMLElement;
    expect(within(mine).getByText("(you)")).toBeTruthy();
    for (const name of ["Disable root", "Demote root", "Delete root"]) expect(within(mine).queryByRole("button", { name })).toBeNull();
    expect(within(mine).getByRole("button", { name: "Reset root's password" })).toBeTruthy();
    const alice = container.querySelector('[data-username="alice"]') as HTMLElement;
    for (const name of ["Disable alice", "Promote alice", "Delete alice"]) expect(within(alice).getByRole("button", { name })).toBeTruthy();
  });

  it("imports CSV: a refused file shows each row's problem, an accepted one each password", async () => {
    let accept = false;
    const calls = stubFetch({
      "GET /api/v1/users": () => list([]),
      "POST /api/v1/users/bulk": () =>
        accept
          ? {
              status: 201,
              body: {
                created: 1,
                results: [{ row: 1, username: "kim", status: "created", role: "member", group: null, password: "KimsFirst" }],
              },
            }
          : err(422, "validation_failed", "1 of 2 rows have problems; nothing was created", {
              results: [
                { row: 1, username: "kim", status: "ok" },
                { row: 2, username: "Kim", status: "error", errors: ["username `Kim` differs only in case from `kim` on row 1"] },
              ],
            }),
    });
    render(<UsersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Import" }));
    const dialog = screen.getByRole("dialog", { name: "Import users" });
    fireEvent.input(within(dialog).getByLabelText("CSV"), { target: { value: "username\nkim\nKim\n" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Import" }));
    await within(dialog).findByText("username `Kim` differs only in case from `kim` on row 1");
    expect(within(dialog).getByRole("alert").textContent).toContain("Nothing was imported: 1 of 2 rows have problems; nothing was created");
    const sent = calls.find((c) => c.path === "/api/v1/users/bulk");
    expect(sent?.headers["Content-Type"]).toBe("text/csv");
    expect(sent?.body).toBe("username\nkim\nKim\n");
    accept = true;
    fireEvent.input(within(dialog).getByLabelText("CSV"), { target: { value: "username\nkim\n" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Import" }));
    await within(dialog).findByText("KimsFirst");
    expect(within(dialog).getByRole("status").textContent).toContain("1 user created");
    expect(within(dialog).getByRole("button", { name: "Copy kim's password: KimsFirst" })).toBeTruthy();
  });

  it("resets a password, makes an invite link, disables and deletes after a confirmation", async () => {
    const calls = stubFetch({
      "GET /api/v1/users": () => list([user()]),
      "POST /api/v1/users/alice/password": () => ({ body: { username: "alice", password: "NewOne123456" } }),
      "POST /api/v1/users/alice/invite": () => ({
        status: 201,
        body: { username: "alice", token: "inv_x", url: "https://lab.example/invite#inv_x", expires_at: "2026-12-05T09:00:00.000Z" },
      }),
      "PATCH /api/v1/users/alice": (c) => ({ body: user(c.body as Record<string, unknown>) }),
      "DELETE /api/v1/users/alice": () => ({ status: 204 }),
    });
    render(<UsersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Reset alice's password" }));
    let dialog = screen.getByRole("dialog", { name: "Reset password" });
    fireEvent.click(within(dialog).getByRole("button", { name: "Reset password" }));
    await within(dialog).findByText("NewOne123456");
    fireEvent.click(within(dialog).getByRole("button", { name: "Done" }));

    fireEvent.click(screen.getByRole("button", { name: "Invite link for alice" }));
    dialog = screen.getByRole("dialog", { name: "Invite link" });
    fireEvent.click(within(dialog).getByRole("button", { name: "Make link" }));
    await within(dialog).findByText("https://lab.example/invite#inv_x");
    fireEvent.click(within(dialog).getByRole("button", { name: "Done" }));

    fireEvent.click(screen.getByRole("button", { name: "Disable alice" }));
    await waitFor(() => expect(calls.some((c) => c.method === "PATCH" && JSON.stringify(c.body) === '{"disabled":true}')).toBe(true));

    fireEvent.click(screen.getByRole("button", { name: "Delete alice" }));
    dialog = screen.getByRole("dialog", { name: "Delete user" });
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete alice" }));
    await waitFor(() => expect(calls.some((c) => c.method === "DELETE" && c.path === "/api/v1/users/alice")).toBe(true));
  });

  it("deleting a user keeps their volumes by default, listed; reclaiming them is a choice and names what a session keeps", async () => {
    const volume = (over: Record<string, unknown>) => ({
      id: "vol_1",
      name: "home",
      kind: "home",
      owner: "alice",
      cluster_id: "clu_a",
      cluster_name: "gpu-a",
      size_gb: 20,
      mounted_by: [],
      ...over,
    });
    const vols = [
      volume({}),
      volume({ id: "vol_2", name: "datasets", kind: "named", size_gb: 30, mounted_by: [{ id: "ses_1", name: null, phase: "running" }] }),
    ];
    const calls = stubFetch({
      "GET /api/v1/users": () => list([user()]),
      "GET /api/v1/volumes": () => ({ body: { data: vols, orphans: [] } }),
      "DELETE /api/v1/users/alice": () => ({ status: 204 }),
      "POST /api/v1/volumes/reclaim": () => ({ body: { reclaimed: [vols[0]], kept: [vols[1]] } }),
    });
    render(<UsersPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete alice" }));
    let dialog = screen.getByRole("dialog", { name: "Delete user" });
    await within(dialog).findByText(/datasets on gpu-a, 30 GiB/);
    expect(calls.some((c) => c.path === "/api/v1/volumes?owner=alice")).toBe(true);
    expect(within(dialog).getByText(/Their 2 volumes \(50 GiB\)/)).toBeTruthy();
    expect((within(dialog).getByLabelText(/Keep them/) as HTMLInputElement).checked).toBe(true);
    // Kept: only the account goes.
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete alice" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.some((c) => c.path === "/api/v1/volumes/reclaim")).toBe(false);
    // Reclaimed: asked after the delete; the mounted one is named as kept.
    fireEvent.click(screen.getByRole("button", { name: "Delete alice" }));
    dialog = screen.getByRole("dialog", { name: "Delete user" });
    await within(dialog).findByText(/datasets on gpu-a/);
    fireEvent.click(within(dialog).getByLabelText(/Reclaim them/));
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete alice" }));
    await within(dialog).findByText(/1 volume a running session mounts was kept: datasets on gpu-a/);
    const reclaim = calls.find((c) => c.path === "/api/v1/volumes/reclaim")!;
    expect(reclaim.body).toEqual({ owner: "alice" });
  });

  it("builds its query without empty filters", () => {
    expect(usersQuery({})).toBe("");
    expect(usersQuery({ role: "", q: "al", page: 2, size: 50 })).toBe("?q=al&page=2&size=50");
  });
});
