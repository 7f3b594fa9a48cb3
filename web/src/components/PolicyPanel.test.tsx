import { render, screen } from "@testing-library/preact";
import { PolicyPanel, usedOf } from "./PolicyPanel";
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
};

describe("My limits", () => {
  it("shows the effective policy beside current use", async () => {
    stubFetch({ "GET /api/v1/resource-policies/effective": () => ({ body: effective }) });
    render(<PolicyPanel />);
    expect(await screen.findByText("1 of 1 live")).toBeTruthy();
    expect(screen.getByText("20480 / 98304 MiB")).toBeTruthy();
    expect(screen.getByText("30 / 100 %")).toBeTruthy();
    expect(screen.getByText("vision")).toBeTruthy();
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
