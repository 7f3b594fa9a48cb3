import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { AuditPage, detailTime } from "./Audit";
import { page, stubFetch } from "../test/fetch";
import { formatTime } from "../format";

const entry = (over: Record<string, unknown> = {}) => ({
  id: "01JAAAAAAAAAAAAAAAAAAAAAAA",
  at: new Date().toISOString(),
  actor: "admin:admin",
  action: "cluster.operator_token",
  target: "gpu-a",
  result: "success",
  details: { kid: "k1", expires_at: 1796757634, ttl_s: 3600 },
  client_addr: "127.0.0.1",
  user_agent: "test",
  request_id: "req_1",
  ...over,
});

describe("AuditPage", () => {
  it("shows times in the details as dates, not raw epochs", async () => {
    stubFetch({ "GET /api/v1/audit": () => ({ body: page([entry()]) }) });
    const { container } = render(<AuditPage />);
    await screen.findByText("cluster.operator_token");
    const details = container.querySelector("td.details")!;
    expect(details.textContent).not.toContain("1796757634");
    const date = formatTime(new Date(1796757634 * 1000).toISOString());
    expect(details.querySelector("time")?.textContent).toBe(date);
    expect(details.querySelector("time")?.getAttribute("title")).toBe("1796757634");
    // Other numbers stay numbers.
    expect(details.textContent).toContain("3600");
  });

  it("reads epoch seconds, milliseconds and RFC 3339 under time keys only", () => {
    const iso = "2026-12-02T10:00:00.000Z";
    expect(detailTime("expires_at", Date.parse(iso) / 1000)).toBe(formatTime(iso));
    expect(detailTime("since", Date.parse(iso))).toBe(formatTime(iso));
    expect(detailTime("booked_at", iso)).toBe(formatTime(iso));
    expect(detailTime("ttl_s", 3600)).toBeNull();
    expect(detailTime("count", 1796757634)).toBeNull();
    expect(detailTime("expires_at", "soon")).toBeNull();
  });

  it("sends the filters as typed (the server matches part of an action or actor)", async () => {
    const calls = stubFetch({ "GET /api/v1/audit": () => ({ body: page([entry()]) }) });
    render(<AuditPage />);
    await screen.findByText("cluster.operator_token");
    fireEvent.input(screen.getByLabelText("Action"), { target: { value: " cluster " } });
    fireEvent.input(screen.getByLabelText("Actor"), { target: { value: "admin" } });
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    await waitFor(() => {
      const q = new URL(calls.at(-1)!.path, "http://x").searchParams;
      expect([q.get("action"), q.get("actor"), q.get("page")]).toEqual(["cluster", "admin", "1"]);
    });
  });
});
