// The fleet picture's API (GET /api/v1/overview, src/overview.rs) and its layout on a grid: every
// card a cell, nodes side by side with one empty cell between them, each cluster under a
// heading band. The layout is typed arrays so that 40,000 cards lay out, draw and hit-test cheaply.

import { get, type Schemas } from "./api";

export type Totals = Schemas["Totals"];
/**
 * A node on the grid. `flags`: 1 cordoned, 2 offline, 4 not ready, 8 decommissioning. `cards`:
 * four numbers per card: memory MiB, booked MiB, flags (bit 0 not ready, bits 1.. model index), live sessions.
 */
export type NodeCells = Schemas["NodeCells"];
export type ClusterCells = Schemas["ClusterCells"];
export type Series = Schemas["Series"];
export type Overview = Schemas["OverviewAnswer"];
export type CardSession = Schemas["CardSession"];
export type CardDetail = Schemas["CardDetail"];
export type NodeDetail = Schemas["NodeDetail"];

export const NODE_CORDONED = 1;
export const NODE_OFFLINE = 2;
export const NODE_NOT_READY = 4;
export const NODE_DECOMMISSIONING = 8;
export const CARD_ERROR = 1;

export const getOverview = (signal?: AbortSignal) => get<Overview>("/api/v1/overview", signal);
export const getNodeDetail = (clusterId: string, node: string, signal?: AbortSignal) =>
  get<NodeDetail>(`/api/v1/overview/nodes/${encodeURIComponent(clusterId)}/${encodeURIComponent(node)}`, signal);

/** Rows a cluster's heading takes on the grid. */
export const HEADING_ROWS = 3;

/** Where every card sits on a grid `cols` cells wide, and what each grid cell holds. */
export interface Layout {
  cols: number;
  rows: number;
  count: number;
  /** Per card: grid column and row. */
  col: Uint16Array;
  row: Uint32Array;
  /** Per card: index of its cluster, of its node within the cluster, of the card in the node. */
  cluster: Uint32Array;
  node: Uint32Array;
  slot: Uint16Array;
  /** Per card: booked fraction 0..1; -1 for a card with no memory reported. */
  fill: Float32Array;
  /** Per card: bit 0 error, bit 1 offline/not ready, bit 2 cordoned, bit 3 has sessions. */
  mark: Uint8Array;
  /** Grid cell -> card index + 1 (0: empty). */
  grid: Int32Array;
  /** Per cluster: the grid row of its heading. */
  headingRow: number[];
}

export const MARK_ERROR = 1;
export const MARK_DOWN = 2;
export const MARK_CORDONED = 4;
export const MARK_SESSIONS = 8;

export function layout(clusters: ClusterCells[], cols: number): Layout {
  cols = Math.max(4, Math.floor(cols));
  let count = 0;
  for (const c of clusters) for (const n of c.nodes) count += n.cards.length / 4;
  const col = new Uint16Array(count);
  const row = new Uint32Array(count);
  const cluster = new Uint32Array(count);
  const node = new Uint32Array(count);
  const slot = new Uint16Array(count);
  const fill = new Float32Array(count);
  const mark = new Uint8Array(count);
  const headingRow: number[] = [];
  let r = 0;
  let i = 0;
  clusters.forEach((c, ci) => {
    headingRow.push(r);
    r += HEADING_ROWS;
    let x = 0;
    let used = false;
    c.nodes.forEach((n, ni) => {
      const k = n.cards.length / 4;
      if (!k) return;
      // A node that does not fit on what is left of the row starts a new one (a node wider
      // than the grid wraps inside itself).
      if (used && x + k > cols) {
        r++;
        x = 0;
      }
      const down = n.flags & (NODE_OFFLINE | NODE_NOT_READY) ? MARK_DOWN : 0;
      const cordoned = n.flags & (NODE_CORDONED | NODE_DECOMMISSIONING) ? MARK_CORDONED : 0;
      for (let s = 0; s < k; s++) {
        if (x >= cols) {
          r++;
          x = 0;
        }
        const mem = n.cards[s * 4];
        const booked = n.cards[s * 4 + 1];
        col[i] = x;
        row[i] = r;
        cluster[i] = ci;
        node[i] = ni;
        slot[i] = s;
        fill[i] = mem > 0 ? Math.min(1, booked / mem) : -1;
        mark[i] = (n.cards[s * 4 + 2] & CARD_ERROR ? MARK_ERROR : 0) | down | cordoned | (n.cards[s * 4 + 3] > 0 ? MARK_SESSIONS : 0);
        x++;
        i++;
      }
      used = true;
      x++; // one empty cell between nodes
    });
    r += used ? 1 : 0;
  });
  const rows = r;
  const grid = new Int32Array(rows * cols);
  for (let j = 0; j < count; j++) grid[row[j] * cols + col[j]] = j + 1;
  return { cols, rows, count, col, row, cluster, node, slot, fill, mark, grid, headingRow };
}

/** The card at a grid cell, or -1. */
export function cardAt(l: Layout, c: number, r: number): number {
  if (c < 0 || r < 0 || c >= l.cols || r >= l.rows) return -1;
  return l.grid[r * l.cols + c] - 1;
}

/** The card reached from `i` by an arrow key (or Home/End); `i` itself when there is none. */
export function move(l: Layout, i: number, key: string): number {
  if (!l.count) return -1;
  if (key === "Home") return 0;
  if (key === "End") return l.count - 1;
  if (i < 0) return 0;
  switch (key) {
    case "ArrowRight":
      return Math.min(l.count - 1, i + 1);
    case "ArrowLeft":
      return Math.max(0, i - 1);
    case "ArrowDown":
    case "ArrowUp": {
      const step = key === "ArrowDown" ? 1 : -1;
      // The nearest card in the next row that has any (heading bands and gaps are skipped).
      for (let r = l.row[i] + step; r >= 0 && r < l.rows; r += step) {
        for (let d = 0; d < l.cols; d++) {
          for (const c of [l.col[i] - d, l.col[i] + d]) {
            const j = cardAt(l, c, r);
            if (j >= 0) return j;
          }
        }
      }
      return i;
    }
    default:
      return i;
  }
}

/** The booked share as a colour: mid (free) to dark blue (full); for no memory reported, the colour
 *  of the outline such a cell is drawn as. */
export function fillColour(f: number): string {
  if (f < 0) return NOT_REPORTED_COLOUR;
  const steps = FILL_STEPS.length - 1;
  return FILL_STEPS[Math.round(f * steps)];
}

/**
 * Eleven shades from free to fully booked. Even the free one stands out from the page at ≥ 3:1
 * (WCAG 1.4.11, non-text contrast: an idle fleet must not look empty); `Overview.test.tsx`
 * computes the ratios against the page colour in styles.css.
 */
export const FILL_STEPS = [
  "#5b8bc4",
  "#5380b7",
  "#4a75a9",
  "#426b9c",
  "#3a608e",
  "#325581",
  "#294a73",
  "#213f66",
  "#193558",
  "#102a4b",
  "#081f3d",
];
export const ERROR_COLOUR = "#cf222e";
export const DOWN_COLOUR = "#6e7781";
export const CORDON_COLOUR = "#a97500";
/** A card with no memory reported: an outline in this colour around the page's own colour. */
export const NOT_REPORTED_COLOUR = "#57606a";

/** WCAG relative luminance of "#rrggbb". */
export function luminance(hex: string): number {
  const n = parseInt(hex.slice(1), 16);
  const lin = (c: number) => {
    const v = c / 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * lin(n >> 16) + 0.7152 * lin((n >> 8) & 0xff) + 0.0722 * lin(n & 0xff);
}

/** WCAG contrast ratio of two "#rrggbb" colours (1 … 21). */
export function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}
