import { render, screen } from "@testing-library/preact";
import { PolicyPanel, budgetNote, usedOf } from "./PolicyPanel";
import { stubFetch } from "../test/fetch";

const effective = {
  user: "ann",
  group: "vision",
  has_policy: true,
  max_concurrent: 1,
  max_queued: 2,
  max_runtime_min: 720,
  idle_timeout_sec: 3600,
  limits: {
    cpu: 24,
    mem_gb: 256,
    gpu_mem_mb: 98304,
    gpu_cores: 100,
    storage_gb: 500,
    volume_gb: null,
    shared_pool: null,
    allow_privileged: null,
  },
  sources: { max_concurrent: "global" },
  used: { active: 1, cpu: 4, mem_gb: 16, gpu_mem_mb: 20480, gpu_cores: 30, storage_gb: 10 },
  remaining: { sessions: 0, cpu: 20, mem_gb: 240, gpu_mem_mb: 77824, gpu_cores: 70, storage_gb: 490 },
  budgets: [] as unknown[],
};

const budget = {
  scope: "group",
  subject: "vision",
  month: "2026-12",
  limit_gpu_hours: 10,
  used_gpu_hours: 8.5,
  percent: 85,
  warned_at: "2026-12-03T08:00:00.000Z",
  exhausted_at: null as string | null,
  pauses_at: null as string | null,
};

describe("My limits", () => {
  it("shows the effective policy beside current use", async () => {
    stubFetch({ "GET /api/v1/resource-policies/effective": () => ({ body: effective }) });
    render(<PolicyPanel />);
    expect(await screen.findByText("1 of 1 live")).toBeTruthy();
    expect(screen.getByText("20480 / 98304 MiB")).toBeTruthy();
    expect(screen.getByText("30 / 100 %")).toBeTruthy();
    expect(screen.getByText("vision")).toBeTruthy();
    // Unset at every scope: the limit ends the session.
    expect(screen.getByText("ended")).toBeTruthy();
  });

  it("says a session is paused at its runtime limit when the policy says so", async () => {
    stubFetch({
      "GET /api/v1/resource-policies/effective": () => ({ body: { ...effective, max_runtime_action: "pause" } }),
    });
    render(<PolicyPanel />);
    expect(await screen.findByText("paused (resume it for a new run)")).toBeTruthy();
  });

  it("shows the queue allowance and each GPU-hour budget with its state", async () => {
    stubFetch({ "GET /api/v1/resource-policies/effective": () => ({ body: { ...effective, budgets: [budget] } }) });
    render(<PolicyPanel />);
    expect(await screen.findByText("up to 2 may wait for room")).toBeTruthy();
    expect(screen.getByText("Group vision")).toBeTruthy();
    expect(screen.getByText(/8.5 of 10 GPU-hours \(85 %\) in 2026-12/)).toBeTruthy();
    expect(screen.getByText("Over 80 % used.")).toBeTruthy();
    expect(document.querySelector('meter[aria-label="group budget used"]')?.getAttribute("value")).toBe("85");
  });

  it("says when a used-up budget pauses running sessions", () => {
    const b = {
      ...budget,
      used_gpu_hours: 10,
      percent: 100,
      exhausted_at: "2026-12-03T10:00:00.000Z",
      pauses_at: "2026-12-03T10:10:00.000Z",
    };
    expect(budgetNote(b as never)).toMatch(/^Used up: new GPU sessions are refused; running ones pause at /);
    expect(budgetNote({ ...budget, warned_at: null } as never)).toBeNull();
  });

  it("says so when no policy applies", async () => {
    stubFetch({ "GET /api/v1/resource-policies/effective": () => ({ body: { ...effective, has_policy: false } }) });
    render(<PolicyPanel />);
    expect(await screen.findByText(/nothing is limited/)).toBeTruthy();
  });

  it("reads 0 and absent limits as none", () => {
    expect(usedOf(3, 0, "vCPU")).toBe("3 vCPU (no limit)");
    expect(usedOf(3, null)).toBe("3 (no limit)");
    expect(usedOf(3, 8, "GiB")).toBe("3 / 8 GiB");
  });
});
