import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { InvitePage, inviteToken } from "./Invite";
import { weakPasswordProblem } from "../account";
import { stubFetch } from "../test/fetch";

const TOKEN = "inv_Q2xhc3NMaXN0LVRva2VuLTAxMjM0NTY3";

function open(hash = `#${TOKEN}`) {
  history.replaceState(null, "", `/invite${hash}`);
}

function fill(password: string, repeat = password) {
  fireEvent.input(screen.getByLabelText("Password"), { target: { value: password } });
  fireEvent.input(screen.getByLabelText("Password again"), { target: { value: repeat } });
  fireEvent.click(screen.getByRole("button", { name: "Set password and sign in" }));
}

const gone = (code: string, reason: string) => () => ({
  status: code === "not_found" ? 404 : 410,
  body: { error: { code, message: `invite link: ${reason}`, details: { reason } } },
});

describe("InvitePage", () => {
  afterEach(() => vi.restoreAllMocks());

  it("sets the password with the link's token, then signs in as the account the server names", async () => {
    const calls = stubFetch({
      "POST /api/v1/auth/invite": () => ({ body: { username: "ivy" } }),
      "POST /api/v1/auth/login": () => ({
        body: { username: "ivy", role: "member", csrf_token: "c", expires_at: "2030-01-01T00:00:00Z", must_change_password: false },
      }),
    });
    open();
    const signedIn = vi.fn();
    render(<InvitePage onSignedIn={signedIn} />);
    // The token is read, then dropped from the address bar.
    expect(location.pathname + location.hash).toBe("/invite");
    fill("ivy's own passphrase");
    await waitFor(() => expect(signedIn).toHaveBeenCalledTimes(1));
    expect(signedIn.mock.calls[0][0]).toMatchObject({ username: "ivy", role: "member" });
    const sent = calls.filter((c) => c.method === "POST").map((c) => [c.path, c.body]);
    expect(sent).toEqual([
      ["/api/v1/auth/invite", { token: TOKEN, password: "ivy's own passphrase" }],
      ["/api/v1/auth/login", { username: "ivy", password: "ivy's own passphrase" }],
    ]);
  });

  it("checks the server's rules before sending, and shows the server's 422 message on the field", async () => {
    const calls = stubFetch({
      "POST /api/v1/auth/invite": () => ({
        status: 422,
        body: {
          error: {
            code: "validation_failed",
            message: "request validation failed",
            details: { errors: [{ loc: ["body", "password"], msg: "is too easy to guess: it is on the server's list", type: "weak" }] },
          },
        },
      }),
    });
    open();
    render(<InvitePage onSignedIn={() => {}} />);
    fill("short");
    expect(screen.getByText(/At least 12 characters \(this one has 5\)/)).toBeTruthy();
    fill("aaaaaaaaaaaaaa");
    expect(screen.getByText(/repeats too few different characters/)).toBeTruthy();
    fill("abcdefghijklmnop");
    expect(screen.getByText(/one run of consecutive characters/)).toBeTruthy();
    fill("a fine long passphrase", "a fine long passphrasE");
    expect(screen.getByText("Does not match the password.")).toBeTruthy();
    expect(calls.filter((c) => c.method === "POST")).toHaveLength(0);
    fill("a fine long passphrase");
    expect(await screen.findByText("Is too easy to guess: it is on the server's list.")).toBeTruthy();
    expect(screen.getByLabelText("Password").getAttribute("aria-invalid")).toBe("true");
    // The form stays: the link is not used up by a refused password.
    expect(screen.getByRole("button", { name: "Set password and sign in" })).toBeTruthy();
  });

  it.each([
    ["invite_used", "used", "This invite link was used already", /If you set yours with it, sign in/],
    ["invite_expired", "expired", "This invite link has expired", /72 hours/],
    ["invite_revoked", "inviter_deleted", "This invite link no longer works", /admin who made it no longer has an account/],
    ["invite_revoked", "account_deleted", "This invite link no longer works", /account it was made for was deleted/],
    ["not_found", "unknown", "This invite link does not work", /newer link replaced it/],
  ])("explains a dead link (%s, %s) and offers sign-in", async (code, reason, title, text) => {
    stubFetch({ "POST /api/v1/auth/invite": gone(code, reason) });
    open();
    render(<InvitePage onSignedIn={() => {}} />);
    fill("a fine long passphrase");
    const alert = await screen.findByRole("alert");
    expect(alert.querySelector("h1")?.textContent).toBe(title);
    expect(alert.textContent).toMatch(text);
    expect(screen.getByRole("link", { name: "Go to sign in" }).getAttribute("href")).toBe("/login");
    expect(screen.queryByLabelText("Password")).toBeNull();
  });

  it("says so when the address holds no link, and sends nothing", () => {
    const calls = stubFetch({});
    open("");
    render(<InvitePage onSignedIn={() => {}} />);
    expect(screen.getByRole("heading", { name: "No invite link here" })).toBeTruthy();
    expect(calls).toHaveLength(0);
    expect(inviteToken("#inv_abc")).toBe("inv_abc");
    expect(inviteToken("#ses_abc")).toBe("");
    expect(inviteToken("#inv_a b")).toBe("");
  });

  it("mirrors the server's weak-password rules", () => {
    expect(weakPasswordProblem("correct horse battery")).toBe("");
    expect(weakPasswordProblem("            ")).toMatch(/blank/);
    expect(weakPasswordProblem("abcdefghijkl")).toMatch(/consecutive/);
    expect(weakPasswordProblem("lkjihgfedcba")).toMatch(/consecutive/);
    expect(weakPasswordProblem("789012345678")).toMatch(/consecutive/);
    expect(weakPasswordProblem("abababababab")).toMatch(/too few/);
    expect(weakPasswordProblem("a fine long\u0007phrase")).toMatch(/control/);
  });
});
