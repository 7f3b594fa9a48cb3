// The audit log (sign-in issue): GET /api/v1/audit?page&size&action&actor, newest first.

import { useState } from "preact/hooks";
import { get, isMissingRoute } from "../api";
import { ErrorBox } from "../components/Errors";
import { NotYet } from "../components/NotYet";
import { formatTime } from "../format";
import { usePoll } from "../hooks";
import { Pager } from "../components/Pager";

interface AuditEntry {
  at: string;
  actor: string;
  action: string;
  target?: string | null;
  result?: string;
  client_addr?: string | null;
  request_id?: string | null;
  user_agent?: string | null;
  details?: unknown;
}

/** Details as short `key: value` text (the full JSON is in the cell's title). */
export function detailText(d: unknown): string {
  if (d == null || (typeof d === "object" && !Array.isArray(d) && Object.keys(d as object).length === 0)) return "";
  if (typeof d !== "object" || Array.isArray(d)) return JSON.stringify(d);
  return Object.entries(d as Record<string, unknown>)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join("; ");
}
interface AuditPage {
  data: AuditEntry[];
  pagination?: { page: number; size: number; total: number; total_pages: number };
}

const SIZE = 50;

export function AuditPage() {
  const [action, setAction] = useState("");
  const [actor, setActor] = useState("");
  const [applied, setApplied] = useState({ action: "", actor: "" });
  const [page, setPage] = useState(1);
  const query = new URLSearchParams({ page: String(page), size: String(SIZE) });
  if (applied.action) query.set("action", applied.action);
  if (applied.actor) query.set("actor", applied.actor);
  const qs = query.toString();
  const polled = usePoll((signal) => get<AuditPage>(`/api/v1/audit?${qs}`, signal), 10000, [qs]);
  const p = polled.data?.pagination;

  if (isMissingRoute(polled.error))
    return (
      <section>
        <div class="toolbar">
          <h1>Audit log</h1>
        </div>
        <NotYet what="The audit log" issue="sign-in" />
      </section>
    );
  return (
    <section aria-labelledby="audit-title">
      <div class="toolbar">
        <h1 id="audit-title">Audit log</h1>
        <span class="grow" />
        <form
          class="filters"
          onSubmit={(e) => {
            e.preventDefault();
            setPage(1);
            setApplied({ action: action.trim(), actor: actor.trim() });
          }}
        >
          <input aria-label="Action" placeholder="action, e.g. cluster.register" value={action} onInput={(e) => setAction((e.target as HTMLInputElement).value)} />
          <input aria-label="Actor" placeholder="actor" value={actor} onInput={(e) => setActor((e.target as HTMLInputElement).value)} />
          <button type="submit">Filter</button>
        </form>
      </div>
      <ErrorBox error={polled.error} title="Cannot load the audit log" />
      {polled.loading && !polled.data && <p class="loading">Loading the audit log…</p>}
      {polled.data && polled.data.data.length === 0 && <p class="muted">No entries.</p>}
      {polled.data && polled.data.data.length > 0 && (
        <table class="audit">
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Actor</th>
              <th scope="col">Action</th>
              <th scope="col">Target</th>
              <th scope="col">Result</th>
              <th scope="col">Details</th>
              <th scope="col">Client</th>
              <th scope="col">Request</th>
            </tr>
          </thead>
          <tbody>
            {polled.data.data.map((a, i) => (
              <tr key={`${a.at}-${a.request_id ?? i}`}>
                <td>{formatTime(a.at)}</td>
                <td>{a.actor}</td>
                <td>
                  <code>{a.action}</code>
                </td>
                <td>{a.target ?? "—"}</td>
                <td class={a.result && a.result !== "ok" && a.result !== "success" ? "bad" : undefined}>{a.result ?? "—"}</td>
                <td class="details" title={a.details ? JSON.stringify(a.details, null, 2) : undefined}>
                  {detailText(a.details)}
                </td>
                <td title={a.user_agent ?? undefined}>{a.client_addr ?? "—"}</td>
                <td>
                  <code class="small">{a.request_id ?? ""}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {p && <Pager label="Audit pages" page={page} totalPages={p.total_pages} onPage={setPage} />}
    </section>
  );
}
