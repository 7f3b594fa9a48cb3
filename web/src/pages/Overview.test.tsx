import { act, fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { FleetMap, Legend, OverviewPage } from "./Overview";
import { CORDON_COLOUR, DOWN_COLOUR, ERROR_COLOUR, FILL_STEPS, NOT_REPORTED_COLOUR, cardAt, contrast, layout, move } from "../overview";
import css from "../styles.css?raw";
import { overview, stubFetch } from "../test/fetch";

const nodeDetail = {
  cluster_id: "clu_01JAAAAAAAAAAAAAAAAAAAAAAA",
  cluster_name: "gpu-a",
  node: "gpu-node-0",
  flags: 0,
  cards: [
    {
      uuid: "GPU-aaaa",
      model: "NVIDIA A100",
      mode: "fractional",
      memory_mb: 81920,
      booked_mem_mb: 20480,
      total_cores: 100,
      booked_cores: 30,
      status: "ready",
      sessions: [
        {
          id: "ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
          name: "notebook-a",
          owner: "alice",
          phase: "running",
          allocation_id: "alc_1",
          booked_mem_mb: 20480,
          booked_cores: 30,
          booked_at: new Date().toISOString(),
        },
      ],
    },
  ],
};

describe("overview layout", () => {
  it("puts nodes side by side with a gap, clusters under a heading, and finds cards by cell", () => {
    const data = overview();
    const l = layout(data.clusters, 20);
    expect(l.count).toBe(8);
    // Heading rows 0..2, then node 0 at columns 0..3, a gap, node 1 at 5..8.
    expect([l.col[0], l.row[0]]).toEqual([0, 3]);
    expect([l.col[4], l.row[4]]).toEqual([5, 3]);
    expect(cardAt(l, 4, 3)).toBe(-1);
    expect(cardAt(l, 5, 3)).toBe(4);
    expect(l.fill[0]).toBeCloseTo(0.25);
    // Marks: node 1 cordoned (bit 2), its second card in error (bit 0), card 0 has a session (bit 3).
    expect(l.mark[4] & 4).toBe(4);
    expect(l.mark[5] & 1).toBe(1);
    expect(l.mark[0] & 8).toBe(8);
    // A narrow grid wraps node 1 to the next row.
    const narrow = layout(data.clusters, 6);
    expect([narrow.col[4], narrow.row[4]]).toEqual([0, 4]);
    expect(move(narrow, 0, "ArrowDown")).toBe(4);
    expect(move(narrow, 4, "ArrowUp")).toBe(0);
    expect(move(narrow, 7, "ArrowRight")).toBe(7);
    expect(move(narrow, 3, "End")).toBe(7);
  });

  it("lays out 40,000 cards quickly enough to stay out of the way", () => {
    const nodes = Array.from({ length: 5000 }, (_, i) => ({
      name: `n-${i}`,
      flags: 0,
      models: ["A100"],
      cards: Array.from({ length: 32 }, (_, k) => (k % 4 === 0 ? 81920 : 0)),
    }));
    const l = layout([{ id: "clu_x", name: "big", status: "connected", nodes, pools: [] }], 140);
    expect(l.count).toBe(40000);
    expect(cardAt(l, l.col[39999], l.row[39999])).toBe(39999);
  });
});

describe("OverviewPage", () => {
  beforeEach(() => history.replaceState(null, "", "/overview"));

  it("shows totals, trends, the card map and the clusters in numbers", async () => {
    stubFetch({ "GET /api/v1/overview": () => ({ body: overview() }) });
    const { container } = render(<OverviewPage />);
    await screen.findByRole("heading", { name: "Overview" });
    await screen.findByText("160 GiB of 640 GiB", { exact: false }).catch(() => null);
    const totals = container.querySelector("dl.totals")!.textContent!;
    expect(totals).toContain("1 cordoned");
    expect(totals).toContain("1 in error");
    expect(totals).toContain("20 GiB of 640 GiB (3%)");
    expect(totals).toContain("1 running · 2 live");
    expect(screen.getByRole("img", { name: /Sessions running: 1 now/ })).toBeTruthy();
    expect(screen.getByRole("img", { name: /Callbacks\/s: 1\.2 now/ })).toBeTruthy();
    const map = await screen.findByRole("application", { name: /GPU cards of 1 cluster, 8 cards/ });
    expect(map.getAttribute("data-cards")).toBe("8");
    const row = container.querySelector('[data-overview-cluster="clu_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    expect(row.textContent).toContain("1 cordoned");
    expect(row.textContent).toContain("1 card in error");
    // Node pools: each pool's use and who it is reserved for.
    const pools = screen.getByRole("region", { name: "Node pools in use" });
    const pool = within(pools).getByRole("row", { name: /vision-a100/ });
    expect(pool.textContent).toContain("vision");
    expect(pool.textContent).toContain("1 / 4");
  });

  it("is usable from the keyboard: arrows move between cards, the card and its sessions are told, Enter opens the node", async () => {
    const calls = stubFetch({
      "GET /api/v1/overview": () => ({ body: overview() }),
      "GET /api/v1/overview/nodes/*": () => ({ body: nodeDetail }),
    });
    render(<OverviewPage />);
    const map = await screen.findByRole("application");
    await waitFor(() => expect(map.getAttribute("data-cards")).toBe("8"));
    act(() => map.focus());
    fireEvent.focus(map);
    await waitFor(() =>
      expect(document.getElementById("fleet-focus")!.textContent).toContain(
        "gpu-a / gpu-node-0, card 1 of 4: NVIDIA A100, 20 GiB of 80 GiB booked (25%), 1 session",
      ),
    );
    // The tooltip gets the node's sessions and slices.
    const tip = await screen.findByRole("status");
    await within(tip).findByText(/notebook-a/);
    expect(tip.textContent).toContain("slice 20 GiB, 30% cores");
    expect(calls.some((c) => c.path === "/api/v1/overview/nodes/clu_01JAAAAAAAAAAAAAAAAAAAAAAA/gpu-node-0")).toBe(true);
    fireEvent.keyDown(map, { key: "ArrowRight" });
    fireEvent.keyDown(map, { key: "ArrowRight" });
    fireEvent.keyDown(map, { key: "ArrowRight" });
    fireEvent.keyDown(map, { key: "ArrowRight" });
    fireEvent.keyDown(map, { key: "ArrowRight" });
    await waitFor(() =>
      expect(document.getElementById("fleet-focus")!.textContent).toContain(
        "gpu-node-1, card 2 of 4: NVIDIA A100, 0 MiB of 80 GiB booked (0%), 0 sessions; cordoned, card not ready",
      ),
    );
    fireEvent.keyDown(map, { key: "Enter" });
    expect(location.pathname).toBe("/clusters");
    expect(location.hash).toBe("#clu_01JAAAAAAAAAAAAAAAAAAAAAAA/gpu-node-1");
  });

  it("keeps the shown card's sessions across a live update (the node's detail is fetched again)", async () => {
    const calls = stubFetch({ "GET /api/v1/overview/nodes/*": () => ({ body: nodeDetail }) });
    const detailCalls = () => calls.filter((c) => c.path.startsWith("/api/v1/overview/nodes/")).length;
    const { rerender } = render(<FleetMap clusters={overview().clusters} />);
    const map = await screen.findByRole("application");
    act(() => map.focus());
    fireEvent.focus(map);
    await within(await screen.findByRole("status")).findByText(/notebook-a/);
    expect(detailCalls()).toBe(1);
    // New data (a heartbeat, a report): the old detail is dropped, the shown node's comes back.
    rerender(<FleetMap clusters={overview().clusters} />);
    await waitFor(() => expect(detailCalls()).toBe(2));
    await within(await screen.findByRole("status")).findByText(/notebook-a/);
  });

  it("says so when no card is known yet", async () => {
    const empty = overview({ clusters: [{ id: "clu_x", name: "gpu-a", status: "pending", nodes: [], pools: [] }] });
    (empty.totals as { gpus: number }).gpus = 0;
    stubFetch({ "GET /api/v1/overview": () => ({ body: empty }) });
    render(<OverviewPage />);
    await screen.findByText(/No GPU card is known yet/);
    expect(screen.queryByRole("application")).toBeNull();
  });
});

describe("overview live updates", () => {
  class FakeEventSource {
    static last: FakeEventSource | null = null;
    listeners: Record<string, (() => void)[]> = {};
    onerror: (() => void) | null = null;
    constructor(public url: string) {
      FakeEventSource.last = this;
    }
    addEventListener(kind: string, f: () => void) {
      (this.listeners[kind] ??= []).push(f);
    }
    emit(kind: string) {
      (this.listeners[kind] ?? []).forEach((f) => f());
    }
    close() {}
  }

  it("refetches on the overview topic only", async () => {
    vi.stubGlobal("EventSource", FakeEventSource);
    const calls = stubFetch({ "GET /api/v1/overview": () => ({ body: overview() }) });
    const { unmount } = render(<OverviewPage />);
    await screen.findByRole("application");
    const es = FakeEventSource.last!;
    es.emit("hello");
    const fetched = () => calls.filter((c) => c.path === "/api/v1/overview").length;
    // The stream is up: the page settles on the slow fallback poll (one reload as it switches).
    await waitFor(() => expect(fetched()).toBe(2));
    const before = fetched();
    for (const other of ["audit", "offerings"]) es.emit(other);
    await new Promise((r) => setTimeout(r, 20));
    expect(fetched()).toBe(before);
    es.emit("overview");
    await waitFor(() => expect(fetched()).toBe(before + 1));
    unmount();
    vi.unstubAllGlobals();
  });

  it("a tap shows the card first (touch has no hover); a second tap on it, or its button, opens the node", async () => {
    history.replaceState(null, "", "/overview");
    stubFetch({ "GET /api/v1/overview/nodes/*": () => ({ body: nodeDetail }) });
    render(<FleetMap clusters={overview().clusters} />);
    const map = await screen.findByRole("application");
    await waitFor(() => expect(map.getAttribute("data-cards")).toBe("8"));
    // Card 1 of gpu-node-0: column 0, row 3 (under the heading band), pitch 10 px.
    const at = { clientX: 3, clientY: 33 };
    fireEvent.pointerDown(map, { ...at, pointerType: "touch" });
    fireEvent.click(map, at);
    expect(location.pathname).toBe("/overview");
    const tip = await screen.findByRole("status");
    expect(tip.textContent).toContain("Card 1 of 4");
    const button = within(tip).getByRole("button", { name: "Open node gpu-node-0" });
    // Tapped again: the node opens.
    fireEvent.pointerDown(map, { ...at, pointerType: "touch" });
    fireEvent.click(map, at);
    expect(location.pathname).toBe("/clusters");
    expect(location.hash).toBe("#clu_01JAAAAAAAAAAAAAAAAAAAAAAA/gpu-node-0");
    history.replaceState(null, "", "/overview");
    fireEvent.click(button);
    expect(location.pathname).toBe("/clusters");
  });

  it("a mouse click still opens the node at once", async () => {
    history.replaceState(null, "", "/overview");
    render(<FleetMap clusters={overview().clusters} />);
    const map = await screen.findByRole("application");
    await waitFor(() => expect(map.getAttribute("data-cards")).toBe("8"));
    fireEvent.pointerDown(map, { clientX: 3, clientY: 33, pointerType: "mouse" });
    fireEvent.click(map, { clientX: 3, clientY: 33 });
    expect(location.pathname).toBe("/clusters");
  });
});

describe("the map's colours (WCAG 1.4.11: non-text contrast ≥ 3:1 against the page)", () => {
  const page = /--bg:\s*(#[0-9a-f]{6})/i.exec(css)?.[1];
  it("every card state stands out from the page; the free card and an unreported one too", () => {
    expect(page).toMatch(/^#[0-9a-f]{6}$/i);
    for (const [what, colour] of [
      ["free", FILL_STEPS[0]],
      ["fully booked", FILL_STEPS[FILL_STEPS.length - 1]],
      ["memory not reported (outline)", NOT_REPORTED_COLOUR],
      ["node down", DOWN_COLOUR],
      ["card in error", ERROR_COLOUR],
      ["cordoned bar", CORDON_COLOUR],
    ] as const)
      expect({ what, ratio: +contrast(colour, page!).toFixed(2) }).toEqual({ what, ratio: expect.toSatisfy((r: number) => r >= 3) });
    // The white dot marking sessions shows on a free card.
    expect(contrast("#ffffff", FILL_STEPS[0])).toBeGreaterThanOrEqual(3);
    // The ratio itself is WCAG's: black on white is 21:1.
    expect(contrast("#000000", "#ffffff")).toBeCloseTo(21, 5);
  });

  it("has a legend that names each state, free and not reported included", () => {
    render(<Legend />);
    const legend = screen.getByRole("list", { name: "Legend" });
    for (const text of [
      "free",
      "memory booked",
      "sessions on the card",
      "cordoned node",
      "node offline",
      "card in error",
      "memory not reported",
    ])
      expect(legend.textContent).toContain(text);
  });
});
