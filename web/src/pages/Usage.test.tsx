import { fireEvent, render, screen, within } from "@testing-library/preact";
import { formatHours, thisMonth, UsagePage, usageQuery } from "./Usage";
import { stubFetch } from "../test/fetch";

const row = (period: string, user: string | null, group: string | null, h: number) => ({
  period,
  user,
  group,
  running_hours: h,
  gpu_mem_gib_hours: h * 20,
  slice_hours: h,
  cpu_hours: h * 4,
});

const report = (data: ReturnType<typeof row>[], by = "user") => ({
  from: "2026-01-31",
  to: "2026-02-01",
  granularity: "day",
  by,
  data,
  totals: row(
    "2026-01-31..2026-02-01",
    null,
    null,
    data.reduce((s, r) => s + r.running_hours, 0),
  ),
});

describe("Usage", () => {
  it("shows a member's own rows with totals and no lab-wide filters", async () => {
    const calls = stubFetch({
      "GET /api/v1/usage": () => ({ body: report([row("2026-01-31", "ann", "vision", 1), row("2026-02-01", "ann", "vision", 2)]) }),
    });
    render(<UsagePage admin={false} />);
    await screen.findByRole("heading", { name: "My usage" });
    const table = await screen.findByRole("table");
    expect(within(table).getByText("2026-01-31")).toBeTruthy();
    expect(within(table).getByText("40")).toBeTruthy(); // 2 h × 20 GiB
    expect(screen.getByText(/60 GiB·h GPU memory, 3 slice·h, 12 CPU·h/)).toBeTruthy();
    expect(screen.queryByLabelText("User")).toBeNull();
    expect(calls[0].path).toMatch(/^\/api\/v1\/usage\?from=\d{4}-\d{2}-01&to=\d{4}-\d{2}-\d{2}&granularity=day&by=user$/);
    // The download is the same query as CSV.
    const link = screen.getByRole("link", { name: "Download CSV" });
    expect(link.getAttribute("href")).toContain("format=csv");
  });

  it("lets an admin filter by group and shows rows per group", async () => {
    const calls = stubFetch({
      "GET /api/v1/usage": (req) => ({
        body: req.path.includes("by=group")
          ? report([row("2026-02", null, "vision", 3)], "group")
          : report([row("2026-02-01", "ann", "vision", 2)]),
      }),
    });
    render(<UsagePage admin />);
    await screen.findByRole("heading", { name: "Usage" });
    await screen.findByText("ann");
    fireEvent.change(screen.getByLabelText("Rows"), { target: { value: "group" } });
    fireEvent.input(screen.getByLabelText("Group"), { target: { value: "vision" } });
    fireEvent.submit(screen.getByRole("form", { name: "Usage filters" }));
    await screen.findByText("2026-02");
    expect(screen.queryByRole("columnheader", { name: "User" })).toBeNull();
    expect(calls.at(-1)?.path).toContain("by=group&group=vision");
  });

  it("says so when nothing ran", async () => {
    stubFetch({ "GET /api/v1/usage": () => ({ body: report([]) }) });
    render(<UsagePage admin />);
    expect(await screen.findByText(/no session ran/)).toBeTruthy();
  });

  it("shows the server's refusal of a bad range in words", async () => {
    stubFetch({
      "GET /api/v1/usage": () => ({
        status: 422,
        body: { error: { code: "validation_failed", message: "query.from: 2026-03-02 is after to (2026-03-01)", details: {} } },
      }),
    });
    render(<UsagePage admin />);
    expect(await screen.findByText(/is after to/)).toBeTruthy();
  });

  it("formats hours and builds queries", () => {
    expect(formatHours(0)).toBe("0");
    expect(formatHours(0.001)).toBe("<0.01");
    expect(formatHours(1234.567)).toBe("1,234.57");
    expect(usageQuery({ from: "2026-01-01", to: "", granularity: "month", by: "user", user: " ann ", group: "" }, true)).toBe(
      "from=2026-01-01&granularity=month&by=user&user=ann&format=csv",
    );
    expect(thisMonth(new Date("2026-03-04T23:00:00Z"))).toEqual({ from: "2026-03-01", to: "2026-03-04" });
  });
});
