import { act, render, waitFor } from "@testing-library/preact";
import { RouteAnnouncer, pageTitle } from "./RouteAnnouncer";
import { navigate, usePath } from "../router";

function Shell() {
  const path = usePath();
  return (
    <div>
      <a href="/x">Skip to content</a>
      <RouteAnnouncer path={path} />
      <main>
        <h1>{path === "/sessions" ? "Sessions" : "Overview"}</h1>
      </main>
    </div>
  );
}

describe("RouteAnnouncer", () => {
  beforeEach(() => history.replaceState(null, "", "/overview"));

  it("titles the tab by the page's h1; on a route change focus goes to the h1 and the page is announced", async () => {
    const { container } = render(<Shell />);
    await waitFor(() => expect(document.title).toBe("Overview — gShare Edge"));
    // The first load keeps focus where the browser put it.
    expect(document.activeElement).toBe(document.body);
    act(() => navigate("/sessions"));
    await waitFor(() => expect(document.title).toBe("Sessions — gShare Edge"));
    const h1 = container.querySelector("h1")!;
    await waitFor(() => expect(document.activeElement).toBe(h1));
    expect(h1.getAttribute("tabindex")).toBe("-1");
    expect(container.querySelector('[aria-live="polite"]')!.textContent).toBe("Sessions page");
  });

  it("falls back to the brand alone", () => {
    expect(pageTitle("")).toBe("gShare Edge");
    expect(pageTitle(" Audit log ")).toBe("Audit log — gShare Edge");
  });
});
