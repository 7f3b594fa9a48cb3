import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { LoginPage, waitText } from "./Login";
import { stubFetch } from "../test/fetch";

describe("LoginPage", () => {
  it("says how long a throttled sign-in must wait, once, and holds the button until then", async () => {
    stubFetch({
      "POST /api/v1/auth/login": () => ({
        status: 429,
        body: {
          error: {
            code: "rate_limited",
            message: "too many failed sign-ins: wait 5 minutes before trying again",
            details: { retry_after_s: 299, scope: "username" },
          },
        },
      }),
    });
    render(<LoginPage onSignedIn={() => {}} />);
    fireEvent.input(screen.getByLabelText("Password"), { target: { value: "the-right-one" } });
    fireEvent.click(screen.getByRole("button", { name: "Sign in" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("Wait 4 min 59 s before trying again");
    expect(alert.textContent).toContain("no password is checked, not even the right one");
    expect(alert.textContent?.match(/again/gi)?.length).toBe(1);
    await waitFor(() =>
      expect((screen.getByRole("button", { name: /Sign in \(in 4 min 5\d s\)/ }) as HTMLButtonElement).disabled).toBe(true),
    );
  });

  it("points at the initial-admin-password file only while the server says it is there", async () => {
    stubFetch({ "GET /api/v1/auth/options": () => ({ body: { initial_admin_password: true, methods: ["local"] } }) });
    const first = render(<LoginPage onSignedIn={() => {}} />);
    await waitFor(() => expect(document.body.textContent).toContain("initial-admin-password"));
    first.unmount();
    stubFetch({ "GET /api/v1/auth/options": () => ({ body: { initial_admin_password: false, methods: ["local"] } }) });
    render(<LoginPage onSignedIn={() => {}} />);
    await screen.findByText("Your lab's admin gives you your account, or a link to set its password.");
    expect(document.body.textContent).not.toContain("initial-admin-password");
  });

  it("offers the single sign-on button only when the server has an issuer, and says why a sign-on failed", async () => {
    stubFetch({
      "GET /api/v1/auth/options": () => ({
        body: {
          initial_admin_password: false,
          methods: ["local", "oidc"],
          oidc_label: "Sign in with Lab SSO",
          oidc_start: "/api/v1/auth/oidc/start",
        },
      }),
    });
    window.history.replaceState(null, "", "/?sso_error=account_disabled");
    const first = render(<LoginPage onSignedIn={() => {}} />);
    const button = await screen.findByRole("link", { name: "Sign in with Lab SSO" });
    expect(button.getAttribute("href")).toBe("/api/v1/auth/oidc/start");
    expect(screen.getByRole("alert").textContent).toContain("Ask an admin of the lab");
    first.unmount();
    window.history.replaceState(null, "", "/");
    stubFetch({ "GET /api/v1/auth/options": () => ({ body: { initial_admin_password: false, methods: ["local", "ldap"] } }) });
    render(<LoginPage onSignedIn={() => {}} />);
    await screen.findByText("Your lab's admin gives you your account, or a link to set its password.");
    expect(screen.queryByRole("link")).toBeNull();
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("formats waits", () => {
    expect(waitText(1)).toBe("1 s");
    expect(waitText(59.2)).toBe("1 min");
    expect(waitText(300)).toBe("5 min");
    expect(waitText(61)).toBe("1 min 1 s");
  });
});
