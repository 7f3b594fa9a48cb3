import { render, screen, waitFor } from "@testing-library/preact";
import { AuditPage } from "./pages/Audit";
import { OfferingsPage } from "./pages/Offerings";
import { stubEventSource } from "./test/events";
import { offering, page, stubFetch } from "./test/fetch";

afterEach(() => vi.unstubAllGlobals());

const count = (calls: { path: string }[], path: string) => calls.filter((c) => c.path.split("?")[0] === path).length;

describe("every list page is on its live-update topics", () => {
  it("Offerings reload when offerings or sessions change, not on other topics", async () => {
    const source = stubEventSource();
    let name = "A100 20 GB slice";
    const calls = stubFetch({ "GET /api/v1/offerings": () => ({ body: { data: [offering({ name })] } }) });
    const { unmount } = render(<OfferingsPage />);
    await screen.findByText(name);
    const es = source();
    es.emit("hello");
    // Connected: the page switches to the slow fallback (one reload as it does).
    await waitFor(() => expect(count(calls, "/api/v1/offerings")).toBe(2));
    for (const other of ["clusters", "audit", "inventory", "overview"]) es.emit(other);
    name = "renamed slice";
    es.emit("offerings");
    await screen.findByText("renamed slice");
    expect(count(calls, "/api/v1/offerings")).toBe(3);
    // A session started or ended changes an offering's live-session count.
    es.emit("sessions");
    await waitFor(() => expect(count(calls, "/api/v1/offerings")).toBe(4));
    unmount();
    expect(es.closed).toBe(true);
  });

  it("the audit log reloads when an entry is written", async () => {
    const source = stubEventSource();
    const entry = (action: string) => ({ id: action, at: new Date().toISOString(), actor: "admin:admin", action, result: "success" });
    let entries = [entry("auth.login")];
    const calls = stubFetch({ "GET /api/v1/audit": () => ({ body: page(entries) }) });
    render(<AuditPage />);
    await screen.findByText("auth.login");
    const es = source();
    es.emit("hello");
    await waitFor(() => expect(count(calls, "/api/v1/audit")).toBe(2));
    for (const other of ["clusters", "sessions", "offerings", "inventory", "overview"]) es.emit(other);
    entries = [entry("cluster.register"), ...entries];
    es.emit("audit");
    await screen.findByText("cluster.register");
    expect(count(calls, "/api/v1/audit")).toBe(3);
  });
});
