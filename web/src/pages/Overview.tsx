// The Overview: one picture of the fleet. Every GPU card is a cell on a canvas, grouped by node
// (an empty cell between nodes) and cluster (a heading band), coloured by memory booked/total and
// marked when its node is cordoned, offline or its card in error. Hover or keyboard focus shows
// the card, its sessions and booked slices; a click or Enter opens the node on the clusters page.
// Totals and small time series (from the server's ring buffer) sit above; a per-cluster table
// below says the same in text.

import type { JSX } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ErrorBox } from "../components/Errors";
import { formatMib, plural } from "../format";
import { useLivePoll } from "../live";
import {
  CORDON_COLOUR,
  DOWN_COLOUR,
  ERROR_COLOUR,
  FILL_STEPS,
  HEADING_ROWS,
  MARK_CORDONED,
  MARK_DOWN,
  MARK_ERROR,
  MARK_SESSIONS,
  NOT_REPORTED_COLOUR,
  NODE_CORDONED,
  NODE_DECOMMISSIONING,
  NODE_NOT_READY,
  NODE_OFFLINE,
  cardAt,
  getNodeDetail,
  getOverview,
  layout,
  move,
  type ClusterCells,
  type Layout,
  type NodeDetail,
  type Overview,
  type Series,
} from "../overview";
import { navigate } from "../router";

/** Without the event stream: how often the page reloads (the series gain a sample every 5 s). */
const POLL_MS = 10_000;
/** Grid pitch in CSS pixels (cell + 1 px gap), by available width. */
const pitchFor = (width: number) => (width < 600 ? 8 : 10);

function nodeFlags(f: number): string[] {
  const out: string[] = [];
  if (f & NODE_CORDONED) out.push("cordoned");
  if (f & NODE_DECOMMISSIONING) out.push("decommissioning");
  if (f & NODE_OFFLINE) out.push("offline");
  if (f & NODE_NOT_READY) out.push("not ready");
  return out;
}

/** What a card is, in words (the tooltip's first lines and the screen reader's announcement). */
function describe(clusters: ClusterCells[], l: Layout, i: number) {
  const c = clusters[l.cluster[i]];
  const n = c.nodes[l.node[i]];
  const s = l.slot[i];
  const [mem, booked, flags, sessions] = n.cards.slice(s * 4, s * 4 + 4);
  const model = n.models[flags >> 1] ?? "GPU";
  const marks = [...nodeFlags(n.flags), ...(flags & 1 ? ["card not ready"] : [])];
  const pct = mem > 0 ? Math.round((booked / mem) * 100) : 0;
  return {
    cluster: c,
    node: n,
    slot: s,
    model,
    mem,
    booked,
    sessions,
    marks,
    text: `${c.name} / ${n.name}, card ${s + 1} of ${n.cards.length / 4}: ${model}, ${formatMib(booked)} of ${formatMib(mem)} booked (${pct}%), ${plural(sessions, "session")}${marks.length ? `; ${marks.join(", ")}` : ""}`,
  };
}

/** Sizes a canvas to the layout (CSS pixels × device pixels); its context, ready to draw in CSS pixels. */
function prepare(canvas: HTMLCanvasElement, l: Layout, pitch: number) {
  const dpr = Math.min(2, window.devicePixelRatio || 1);
  const w = l.cols * pitch;
  const h = l.rows * pitch;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`;
    canvas.style.height = `${h}px`;
  }
  const g = canvas.getContext("2d");
  if (!g) return null;
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}

/** "#rrggbb" as a little-endian RGBA pixel (what a Uint32Array over ImageData holds). */
const pixel = (hex: string) => {
  const n = parseInt(hex.slice(1), 16);
  return (0xff << 24) | ((n & 0xff) << 16) | (n & 0xff00) | ((n >> 16) & 0xff);
};
const FILL_PX = FILL_STEPS.map(pixel);
const [UNREPORTED_PX, DOWN_PX, ERROR_PX, CORDON_PX, WHITE_PX] = [
  NOT_REPORTED_COLOUR,
  DOWN_COLOUR,
  ERROR_COLOUR,
  CORDON_COLOUR,
  "#ffffff",
].map(pixel);

/**
 * The cells, written straight into the canvas's pixels (one putImageData instead of 40,000
 * fillRect calls: what keeps 40,000 cards well inside the budget on a software-rendered canvas).
 */
function draw(canvas: HTMLCanvasElement, l: Layout, clusters: ClusterCells[], pitch: number) {
  const c = prepare(canvas, l, pitch);
  if (!c) return;
  const { g, w } = c;
  const W = canvas.width;
  const H = canvas.height;
  if (W > 0 && H > 0 && l.count > 0) {
    const dpr = W / w;
    const img = g.createImageData(W, H);
    const px = new Uint32Array(img.data.buffer);
    const size = Math.max(1, Math.round((pitch - 1) * dpr));
    const bar = Math.max(2, Math.round(size / 3));
    const dot = Math.max(2, Math.round(2 * dpr));
    const steps = FILL_STEPS.length - 1;
    const rect = (x0: number, y0: number, wd: number, ht: number, colour: number) => {
      for (let y = y0; y < y0 + ht && y < H; y++) px.fill(colour, y * W + x0, y * W + Math.min(W, x0 + wd));
    };
    for (let i = 0; i < l.count; i++) {
      const m = l.mark[i];
      const f = l.fill[i];
      const x0 = Math.round(l.col[i] * pitch * dpr);
      const y0 = Math.round(l.row[i] * pitch * dpr);
      if (f < 0 && !(m & (MARK_ERROR | MARK_DOWN))) {
        // No memory reported: an outline (the page shows through), unlike any filled card.
        const b = Math.max(1, Math.round(dpr));
        rect(x0, y0, size, b, UNREPORTED_PX);
        rect(x0, y0 + size - b, size, b, UNREPORTED_PX);
        rect(x0, y0, b, size, UNREPORTED_PX);
        rect(x0 + size - b, y0, b, size, UNREPORTED_PX);
      } else {
        const colour = m & MARK_ERROR ? ERROR_PX : m & MARK_DOWN ? DOWN_PX : FILL_PX[Math.round(f * steps)];
        rect(x0, y0, size, size, colour);
      }
      // Cordoned: an amber bar along the bottom; sessions on the card: a white dot.
      if (m & MARK_CORDONED) rect(x0, y0 + size - bar, size, bar, CORDON_PX);
      else if (m & MARK_SESSIONS && size >= 7) rect(x0 + ((size - dot) >> 1), y0 + ((size - dot) >> 1), dot, dot, WHITE_PX);
    }
    g.putImageData(img, 0, 0);
  }
  // Cluster headings.
  g.fillStyle = "#1f2328";
  g.font = `600 ${Math.min(13, pitch * 1.4)}px system-ui, sans-serif`;
  g.textBaseline = "middle";
  clusters.forEach((c, ci) => {
    const y = l.headingRow[ci] * pitch + (HEADING_ROWS * pitch) / 2;
    const cards = c.nodes.reduce((n, x) => n + x.cards.length / 4, 0);
    g.fillText(`${c.name} · ${c.status} · ${plural(c.nodes.length, "node")} · ${plural(cards, "card")}`, 0, y, w);
  });
}

function Sparkline(props: { label: string; values: number[]; t: number[]; format: (v: number) => string }) {
  const { values } = props;
  const W = 160;
  const H = 36;
  const last = values.length ? values[values.length - 1] : null;
  const max = Math.max(1, ...values);
  const points = values
    .map((v, i) => `${values.length > 1 ? ((i / (values.length - 1)) * W).toFixed(1) : W},${(H - 2 - (v / max) * (H - 4)).toFixed(1)}`)
    .join(" ");
  const minutes = props.t.length > 1 ? Math.round((props.t[props.t.length - 1] - props.t[0]) / 60000) : 0;
  const summary = `${props.label}: ${last == null ? "no samples yet" : `${props.format(last)} now`}${values.length > 1 ? `, peak ${props.format(Math.max(...values))} over the last ${plural(Math.max(1, minutes), "minute")}` : ""}`;
  return (
    <figure class="spark">
      <figcaption>
        <span class="spark-label">{props.label}</span>
        <strong class="spark-value">{last == null ? "—" : props.format(last)}</strong>
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} width={W} height={H} role="img" aria-label={summary}>
        <line x1="0" y1={H - 1} x2={W} y2={H - 1} class="spark-axis" />
        {values.length > 0 && <polyline points={points} class="spark-line" />}
      </svg>
    </figure>
  );
}

function Totals(props: { data: Overview }) {
  const t = props.data.totals;
  const pct = t.gpu_mem_total_mb ? Math.round((t.gpu_mem_booked_mb / t.gpu_mem_total_mb) * 100) : 0;
  const items: [string, string][] = [
    ["Clusters", String(t.clusters)],
    [
      "Nodes",
      `${t.nodes}${t.nodes_cordoned ? ` · ${t.nodes_cordoned} cordoned` : ""}${t.nodes_offline ? ` · ${t.nodes_offline} offline` : ""}`,
    ],
    ["GPU cards", `${t.gpus} · ${t.gpus_busy} in use${t.gpus_error ? ` · ${t.gpus_error} in error` : ""}`],
    ["GPU memory booked", `${formatMib(t.gpu_mem_booked_mb)} of ${formatMib(t.gpu_mem_total_mb)} (${pct}%)`],
    ["Sessions", `${t.sessions_running} running · ${t.sessions_live} live`],
  ];
  return (
    <dl class="totals">
      {items.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

function Trends(props: { series: Series }) {
  const s = props.series;
  return (
    <div class="trends">
      <Sparkline label="Sessions running" values={s.sessions_running} t={s.t} format={(v) => String(v)} />
      <Sparkline label="GPU memory booked" values={s.gpu_mem_booked_mb} t={s.t} format={formatMib} />
      <Sparkline label="Callbacks/s" values={s.callbacks_per_s} t={s.t} format={(v) => (v >= 10 ? v.toFixed(0) : v.toFixed(1))} />
    </div>
  );
}

/** What the map's colours and marks mean (every swatch ≥ 3:1 against the page). */
export function Legend() {
  const swatch = (bg: string, extra: JSX.CSSProperties = {}) => (
    <span class="swatch" aria-hidden="true" style={{ background: bg, ...extra }} />
  );
  return (
    <ul class="legend" aria-label="Legend">
      <li>{swatch(FILL_STEPS[0])} free</li>
      <li>
        {swatch(`linear-gradient(90deg, ${FILL_STEPS[0]}, ${FILL_STEPS[FILL_STEPS.length - 1]})`, { width: "48px" })} memory booked: none →
        all
      </li>
      <li>{swatch(`radial-gradient(circle, #fff 0 2px, ${FILL_STEPS[0]} 2.5px)`)} sessions on the card</li>
      <li>{swatch(FILL_STEPS[6], { boxShadow: `inset 0 -3px 0 ${CORDON_COLOUR}` })} cordoned node</li>
      <li>{swatch(DOWN_COLOUR)} node offline or not ready</li>
      <li>{swatch(ERROR_COLOUR)} card in error</li>
      <li>{swatch("transparent", { border: `1px solid ${NOT_REPORTED_COLOUR}` })} memory not reported</li>
    </ul>
  );
}

/** The card under the pointer or focus: what the page knows now, plus the node's detail once fetched. */
function CardTip(props: {
  clusters: ClusterCells[];
  l: Layout;
  i: number;
  pitch: number;
  detail?: NodeDetail | "loading" | "error";
  pinned: boolean;
  /** Shown by a tap (touch): the tip takes taps and offers the node instead of a click hint. */
  onOpen?: () => void;
}) {
  const d = describe(props.clusters, props.l, props.i);
  const card = typeof props.detail === "object" ? props.detail.cards[d.slot] : undefined;
  const left = Math.min(props.l.col[props.i] * props.pitch + 16, Math.max(0, props.l.cols * props.pitch - 300));
  const top = (props.l.row[props.i] + 1) * props.pitch + 6;
  return (
    <div
      class={props.onOpen ? "card-tip tapped" : "card-tip"}
      style={{ left: `${left}px`, top: `${top}px` }}
      role="status"
      aria-live={props.pinned ? "polite" : "off"}
    >
      <div class="tip-head">
        <strong>{d.node.name}</strong> <span class="muted">in {d.cluster.name}</span>
      </div>
      <div>
        Card {d.slot + 1} of {d.node.cards.length / 4}: {d.model}
      </div>
      <div>
        {formatMib(d.booked)} of {formatMib(d.mem)} booked · {plural(d.sessions, "session")}
      </div>
      {d.marks.length > 0 && <div class="tip-marks">{d.marks.join(" · ")}</div>}
      {card && <code class="small">{card.uuid}</code>}
      {card && card.sessions.length > 0 && (
        <ul class="tip-sessions">
          {card.sessions.map((s) => (
            <li key={s.id}>
              {s.name ?? s.id}{" "}
              <span class="muted">
                ({s.owner}, {s.phase})
              </span>
              {s.allocation_id ? ` · slice ${formatMib(s.booked_mem_mb)}, ${s.booked_cores}% cores` : " · nothing booked"}
            </li>
          ))}
        </ul>
      )}
      {props.detail === "loading" && d.sessions > 0 && <div class="muted">Loading sessions…</div>}
      {props.detail === "error" && <div class="muted">Sessions could not be loaded.</div>}
      {props.onOpen ? (
        <div class="tip-open">
          <button type="button" onClick={props.onOpen}>
            Open node {d.node.name}
          </button>{" "}
          <span class="muted small">or tap the card again</span>
        </div>
      ) : (
        <div class="muted small">Click or Enter: open the node</div>
      )}
    </div>
  );
}

export function FleetMap(props: { clusters: ClusterCells[] }) {
  const { clusters } = props;
  const wrap = useRef<HTMLDivElement>(null);
  const canvas = useRef<HTMLCanvasElement>(null);
  const [width, setWidth] = useState(0);
  const [focus, setFocus] = useState(-1);
  const [hover, setHover] = useState(-1);
  // The card a tap chose (touch has no hover: the first tap shows the card, a second opens it).
  const [tapped, setTapped] = useState(-1);
  const pointer = useRef("mouse");
  const [details, setDetails] = useState<Record<string, NodeDetail | "loading" | "error">>({});
  const [epoch, setEpoch] = useState(0);
  useEffect(() => {
    const el = wrap.current;
    if (!el) return;
    // (A DOM without layout, as in component tests, reports 0: a default width then.)
    const measure = () => setWidth(el.clientWidth || 800);
    measure();
    if (typeof ResizeObserver === "undefined") return;
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const pitch = pitchFor(width);
  // Laid out once the width is known (the first render only measures).
  const l = useMemo(() => layout(width ? clusters : [], Math.max(8, Math.floor((width || 800) / pitch))), [clusters, width, pitch]);
  // New data may have fewer cards: keep the focus in range.
  const shown = hover >= 0 ? hover : focus;
  const at = shown < l.count ? shown : -1;
  useEffect(() => {
    if (canvas.current) draw(canvas.current, l, clusters, pitch);
  }, [l, clusters, pitch]);
  // The focus ring is an element over the map: moving it redraws nothing of the 40,000 cells.
  const ring = focus >= 0 && focus < l.count ? focus : -1;

  // The node's detail (sessions and slices on each card), fetched once per node while shown.
  const key = at >= 0 ? `${clusters[l.cluster[at]].id}/${clusters[l.cluster[at]].nodes[l.node[at]].name}` : "";
  useEffect(() => {
    if (!key || details[key]) return;
    const ctl = new AbortController();
    const t = setTimeout(() => {
      setDetails((d) => ({ ...d, [key]: "loading" }));
      const [cid, ...rest] = key.split("/");
      getNodeDetail(cid, rest.join("/"), ctl.signal).then(
        (nd) => setDetails((d) => ({ ...d, [key]: nd })),
        (e) => (e as Error).name !== "AbortError" && setDetails((d) => ({ ...d, [key]: "error" })),
      );
    }, 120);
    return () => {
      clearTimeout(t);
      ctl.abort();
    };
    // `epoch` is a dependency: when new data clears the details, the shown node's is fetched again
    // (with `key` alone, a tip open across a live update stayed without its sessions).
  }, [key, epoch]); // eslint-disable-line react-hooks/exhaustive-deps
  // Data changed: details may be stale.
  useEffect(() => {
    setDetails({});
    setEpoch((e) => e + 1);
  }, [clusters]);

  const cardFromEvent = (e: MouseEvent) => {
    const r = (e.currentTarget as HTMLElement).getBoundingClientRect();
    const c = Math.floor((e.clientX - r.left) / pitch);
    const row = Math.floor((e.clientY - r.top) / pitch);
    // The 1 px gap right/below a cell belongs to it: no flicker between cells.
    return cardAt(l, c, row);
  };
  const open = useCallback(
    (i: number) => {
      if (i < 0) return;
      const c = clusters[l.cluster[i]];
      navigate(`/clusters#${c.id}/${encodeURIComponent(c.nodes[l.node[i]].name)}`);
    },
    [clusters, l],
  );
  const onKey = (e: KeyboardEvent) => {
    if (e.key === "Enter" || e.key === " ") {
      if (focus >= 0) {
        e.preventDefault();
        open(focus);
      }
      return;
    }
    if (e.key === "Escape") {
      setHover(-1);
      setTapped(-1);
      return;
    }
    const next = move(l, focus, e.key);
    if (next !== focus || (focus < 0 && next >= 0)) {
      e.preventDefault();
      setHover(-1);
      setTapped(-1);
      setFocus(next);
      // Keep the focused cell in view.
      const el = canvas.current;
      if (el && next >= 0) {
        const r = el.getBoundingClientRect();
        const y = r.top + l.row[next] * pitch;
        if (y < 60 || y > innerHeight - 40) scrollBy({ top: y - innerHeight / 2 });
      }
    } else if (e.key.startsWith("Arrow")) e.preventDefault();
  };
  const announce = focus >= 0 && focus < l.count ? describe(clusters, l, focus).text : "";

  return (
    <div class="fleet" ref={wrap}>
      <canvas
        ref={canvas}
        class="fleet-map"
        tabIndex={0}
        role="application"
        aria-roledescription="GPU card map"
        aria-label={`GPU cards of ${plural(clusters.length, "cluster")}, ${plural(l.count, "card")}. Arrow keys move between cards, Enter opens the card's node.`}
        aria-describedby="fleet-focus"
        data-cards={l.count}
        onPointerDown={(e) => (pointer.current = e.pointerType || "mouse")}
        onMouseMove={(e) => pointer.current === "mouse" && setHover(cardFromEvent(e))}
        onMouseLeave={() => setHover(-1)}
        onClick={(e) => {
          const i = cardFromEvent(e);
          if (pointer.current !== "mouse") {
            // A tap: show the card first; the same card tapped again opens its node.
            if (i >= 0 && i === tapped) open(i);
            else {
              setHover(-1);
              setTapped(i);
              if (i >= 0) setFocus(i);
            }
            return;
          }
          if (i >= 0) open(i);
        }}
        onKeyDown={onKey}
        onFocus={() => focus < 0 && l.count && setFocus(0)}
        style={{ cursor: hover >= 0 ? "pointer" : "default" }}
      />
      {ring >= 0 && (
        <div
          class="fleet-ring"
          aria-hidden="true"
          style={{
            left: `${l.col[ring] * pitch - 2}px`,
            top: `${l.row[ring] * pitch - 2}px`,
            width: `${pitch + 2}px`,
            height: `${pitch + 2}px`,
          }}
        />
      )}
      <p id="fleet-focus" class="sr-only" aria-live="polite">
        {announce}
      </p>
      {at >= 0 && (
        <CardTip
          clusters={clusters}
          l={l}
          i={at}
          pitch={pitch}
          detail={details[key]}
          pinned={hover < 0}
          onOpen={tapped >= 0 && tapped === at ? () => open(at) : undefined}
        />
      )}
    </div>
  );
}

function ClusterTable(props: { clusters: ClusterCells[] }) {
  const rows = props.clusters.map((c) => {
    let cards = 0;
    let mem = 0;
    let booked = 0;
    let errors = 0;
    let cordoned = 0;
    let offline = 0;
    for (const n of c.nodes) {
      if (n.flags & NODE_CORDONED) cordoned++;
      if (n.flags & NODE_OFFLINE) offline++;
      for (let i = 0; i < n.cards.length; i += 4) {
        cards++;
        mem += n.cards[i];
        booked += n.cards[i + 1];
        if (n.cards[i + 2] & 1) errors++;
      }
    }
    return { c, cards, mem, booked, errors, cordoned, offline };
  });
  return (
    <div class="table-wrap" role="region" aria-label="Clusters in numbers" tabIndex={0}>
      <table class="overview-table">
        <thead>
          <tr>
            <th scope="col">Cluster</th>
            <th scope="col">State</th>
            <th scope="col" class="num">
              Nodes
            </th>
            <th scope="col" class="num">
              Cards
            </th>
            <th scope="col" class="num">
              Memory booked
            </th>
            <th scope="col">Marks</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.c.id} data-overview-cluster={r.c.id}>
              <td>
                <a href={`/clusters#${r.c.id}`}>{r.c.name}</a>
              </td>
              <td>
                <span class={`badge status-${r.c.status}`}>{r.c.status}</span>
              </td>
              <td class="num">{r.c.nodes.length}</td>
              <td class="num">{r.cards}</td>
              <td class="num">
                {formatMib(r.booked)} / {formatMib(r.mem)}
              </td>
              <td>
                {[
                  r.cordoned && `${r.cordoned} cordoned`,
                  r.offline && `${r.offline} offline`,
                  r.errors && plural(r.errors, "card") + " in error",
                ]
                  .filter(Boolean)
                  .join(" · ") || <span class="muted">none</span>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** Node pools and their use: cards busy of the pool's cards, per pool (none: the table is left out). */
export function PoolTable(props: { clusters: ClusterCells[] }) {
  const rows = props.clusters.flatMap((c) => (c.pools ?? []).map((p) => ({ c, p })));
  if (!rows.length) return null;
  return (
    <>
      <h2 class="fleet-title">Node pools</h2>
      <div class="table-wrap" role="region" aria-label="Node pools in use" tabIndex={0}>
        <table class="overview-table">
          <thead>
            <tr>
              <th scope="col">Pool</th>
              <th scope="col">Cluster</th>
              <th scope="col">Reserved for</th>
              <th scope="col" class="num">
                Nodes
              </th>
              <th scope="col" class="num">
                GPUs used
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map(({ c, p }) => (
              <tr key={p.id} data-overview-pool={p.name}>
                <th scope="row">{p.name}</th>
                <td>{c.name}</td>
                <td>
                  {p.kind === "shared" ? (
                    <span class="muted">everyone (shared)</span>
                  ) : (
                    p.groups.join(", ") || <span class="muted">no group</span>
                  )}
                </td>
                <td class="num">{p.nodes}</td>
                <td class="num">
                  {p.gpus_used} / {p.gpus_total}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

export function OverviewPage() {
  // The series gain a sample every few seconds whatever happens: the page still refreshes
  // them now and then while events only say when the fleet changed.
  const polled = useLivePoll((signal) => getOverview(signal), ["overview"], { pollMs: POLL_MS, liveMs: 30_000 });
  const data = polled.data;
  return (
    <section aria-labelledby="overview-title" class="overview">
      <div class="toolbar">
        <h1 id="overview-title">Overview</h1>
        {data && (
          <span class="muted summary">
            {plural(data.totals.clusters, "cluster")} · {plural(data.totals.nodes, "node")} · {plural(data.totals.gpus, "GPU card")}
          </span>
        )}
      </div>
      {polled.error != null && (
        <ErrorBox error={polled.error} title={data ? "Refresh failed; showing the last data" : "Cannot load the overview"} />
      )}
      {polled.loading && !data && (
        <p class="loading" aria-live="polite">
          Loading the fleet…
        </p>
      )}
      {data && (
        <>
          <div class="overview-head">
            <Totals data={data} />
            <Trends series={data.series} />
          </div>
          {data.totals.gpus === 0 ? (
            <div class="empty">
              <p>No GPU card is known yet: cards appear when a cluster's nodes are probed or its operator reports them.</p>
              <a href="/clusters">Go to clusters</a>
            </div>
          ) : (
            <>
              <h2 class="fleet-title">Every GPU card</h2>
              <Legend />
              <FleetMap clusters={data.clusters} />
            </>
          )}
          <h2 class="fleet-title">By cluster</h2>
          <ClusterTable clusters={data.clusters} />
          <PoolTable clusters={data.clusters} />
        </>
      )}
    </section>
  );
}
