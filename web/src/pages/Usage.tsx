// GPU time from the usage ledger (GET /api/v1/usage): per user (and the group they were in) or per
// group, by UTC day or month, in GPU-memory GiB-hours, slice-hours and CPU-hours. Members get
// "My usage" (their own; the server answers only theirs); admins the whole lab, with user and
// group filters. The same query downloads as CSV.

import { useState } from "preact/hooks";
import { get, type Schemas } from "../api";
import { ListPage } from "../components/ListPage";
import { usePoll } from "../hooks";

export type UsageReport = Schemas["UsageReport"];
export type UsageRow = Schemas["UsageRow"];

export interface UsageQuery {
  from: string;
  to: string;
  granularity: "day" | "month";
  by: "user" | "group";
  user: string;
  group: string;
}

/** The query string of `q` (empty fields left out), `format=csv` for the download. */
export function usageQuery(q: UsageQuery, csv = false): string {
  const p = new URLSearchParams();
  for (const k of ["from", "to", "granularity", "by", "user", "group"] as const) {
    const v = q[k].trim();
    if (v) p.set(k, v);
  }
  if (csv) p.set("format", "csv");
  return p.toString();
}

/** Hours with at most two decimals (`0` for none, `<0.01` for a trace). */
export function formatHours(h: number): string {
  if (h === 0) return "0";
  if (h < 0.01) return "<0.01";
  return h.toLocaleString("en", { maximumFractionDigits: 2 });
}

/** The first day of this month and today, UTC (the server's default range). */
export function thisMonth(now = new Date()): { from: string; to: string } {
  const today = now.toISOString().slice(0, 10);
  return { from: `${today.slice(0, 7)}-01`, to: today };
}

export function UsagePage(props: { admin: boolean }) {
  const month = thisMonth();
  const empty: UsageQuery = { ...month, granularity: "day", by: "user", user: "", group: "" };
  const [form, setForm] = useState<UsageQuery>(empty);
  const [applied, setApplied] = useState<UsageQuery>(empty);
  const qs = usageQuery(applied);
  const polled = usePoll((signal) => get<UsageReport>(`/api/v1/usage?${qs}`, signal), 60_000, [qs]);
  const rows = polled.data?.data ?? [];
  const totals = polled.data?.totals;
  const set = (k: keyof UsageQuery) => (e: Event) => setForm({ ...form, [k]: (e.target as HTMLInputElement).value });
  const byGroup = applied.by === "group";
  const title = props.admin ? "Usage" : "My usage";
  return (
    <ListPage
      id="usage"
      title={title}
      noun="usage"
      polled={polled}
      refreshError="Cannot load usage"
      summary={
        totals && (
          <span class="muted">
            {formatHours(totals.gpu_mem_gib_hours)} GiB·h GPU memory, {formatHours(totals.slice_hours)} slice·h,{" "}
            {formatHours(totals.cpu_hours)} CPU·h ({polled.data?.from} to {polled.data?.to}, UTC)
          </span>
        )
      }
      tools={
        <form
          class="filters"
          aria-label="Usage filters"
          onSubmit={(e) => {
            e.preventDefault();
            setApplied(form);
          }}
        >
          <label>
            From <input type="date" value={form.from} onInput={set("from")} />
          </label>
          <label>
            To <input type="date" value={form.to} onInput={set("to")} />
          </label>
          <label>
            By{" "}
            <select aria-label="Granularity" value={form.granularity} onChange={set("granularity")}>
              <option value="day">day</option>
              <option value="month">month</option>
            </select>
          </label>
          {props.admin && (
            <>
              <label>
                Rows{" "}
                <select aria-label="Rows" value={form.by} onChange={set("by")}>
                  <option value="user">per user</option>
                  <option value="group">per group</option>
                </select>
              </label>
              <input aria-label="User" placeholder="user" value={form.user} onInput={set("user")} />
              <input aria-label="Group" placeholder="group" value={form.group} onInput={set("group")} />
            </>
          )}
          <button type="submit">Show</button>
          <a href={`/api/v1/usage?${usageQuery(applied, true)}`} download="usage.csv">
            Download CSV
          </a>
        </form>
      }
      isEmpty={rows.length === 0}
      empty={<p class="muted">No GPU time in this range: no session ran.</p>}
      showTable={rows.length > 0}
      regionLabel="Usage rows"
    >
      <table class="usage">
        <thead>
          <tr>
            <th scope="col">{applied.granularity === "month" ? "Month" : "Day"}</th>
            {!byGroup && <th scope="col">User</th>}
            <th scope="col">Group</th>
            <th scope="col" class="num">
              Running h
            </th>
            <th scope="col" class="num">
              GPU memory GiB·h
            </th>
            <th scope="col" class="num">
              Slice·h
            </th>
            <th scope="col" class="num">
              CPU·h
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r: UsageRow) => (
            <tr key={`${r.period}/${r.user ?? ""}/${r.group ?? ""}`}>
              <td>{r.period}</td>
              {!byGroup && <td>{r.user}</td>}
              <td>{r.group ?? "—"}</td>
              <td class="num">{formatHours(r.running_hours)}</td>
              <td class="num">{formatHours(r.gpu_mem_gib_hours)}</td>
              <td class="num">{formatHours(r.slice_hours)}</td>
              <td class="num">{formatHours(r.cpu_hours)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
