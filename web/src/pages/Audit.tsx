// The audit log (sign-in issue): GET /api/v1/audit?page&size&action&actor, newest first. The
// filters match part of an action or actor, ignoring case (`cluster`, `admin`); `cluster.*` is a prefix.

import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ID_RE, nameOf, type Named } from "../names";
import { get, type Schemas } from "../api";
import { ListPage } from "../components/ListPage";
import { Pager } from "../components/Pager";
import { formatTime } from "../format";
import { useLivePoll } from "../live";

type AuditEntry = Schemas["AuditRecord"];

/** Details as short `key: value` text (tests and the title attribute). */
export function detailText(d: unknown): string {
  if (d == null || (typeof d === "object" && !Array.isArray(d) && Object.keys(d).length === 0)) return "";
  if (typeof d !== "object" || Array.isArray(d)) return JSON.stringify(d);
  return Object.entries(d as Record<string, unknown>)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join("; ");
}

/** An id shown by its name with a link (the id itself in the title); unknown ids stay as they are. */
export function IdRef(props: { id: string; names: Record<string, Named | null>; recorded?: Record<string, string> }) {
  // "clu_…/gpu-node-0" (a node action): the cluster by name, then the rest.
  const slash = props.id.indexOf("/");
  if (slash > 0 && ID_RE.test(props.id.slice(0, slash)))
    return (
      <>
        <IdRef id={props.id.slice(0, slash)} names={props.names} recorded={props.recorded} />
        {props.id.slice(slash)}
      </>
    );
  const n = props.names[props.id];
  if (!ID_RE.test(props.id)) return <>{props.id}</>;
  // Gone since (an unregistered cluster): the name the log itself recorded, without a link.
  const was = props.recorded?.[props.id];
  if (!n && was) return <span title={`${props.id} (no longer registered)`}>{was}</span>;
  if (!n) return <code class="small">{props.id}</code>;
  return (
    <a href={n.href} title={props.id}>
      {n.name}
    </a>
  );
}

/** A detail whose key says it is a time (`expires_at`, `since`, …). */
const TIME_KEY = /(^|_)(at|since|until|expires|exp|iat|nbf)$/;

/**
 * A time in the details as a date: epoch seconds or milliseconds, or an RFC 3339 string, under a
 * key that names a time. Null when it is not one (the value is then shown as it is).
 */
export function detailTime(key: string, v: unknown): string | null {
  if (!TIME_KEY.test(key)) return null;
  let ms: number | null = null;
  if (typeof v === "number" && Number.isFinite(v)) ms = v > 1e12 ? v : v > 1e8 ? v * 1000 : null;
  else if (typeof v === "string" && /^\d{4}-\d{2}-\d{2}T/.test(v)) ms = Date.parse(v);
  if (ms == null || Number.isNaN(ms)) return null;
  return formatTime(new Date(ms).toISOString());
}

function DetailValue(props: { k: string; v: unknown; names: Record<string, Named | null> }) {
  const { k, v } = props;
  const time = detailTime(k, v);
  if (time) return <time title={String(v)}>{time}</time>;
  if (typeof v === "string") return <IdRef id={v} names={props.names} />;
  if (Array.isArray(v)) return <>{v.map(String).join(", ")}</>;
  return <>{JSON.stringify(v)}</>;
}

function Details(props: { details: unknown; names: Record<string, Named | null> }) {
  const d = props.details;
  if (d == null || typeof d !== "object" || Array.isArray(d)) return d == null ? null : <>{JSON.stringify(d)}</>;
  const entries = Object.entries(d as Record<string, unknown>);
  if (!entries.length) return null;
  return (
    <dl>
      {entries.map(([k, v]) => (
        <Fragment key={k}>
          <dt>{k.replace(/_/g, " ")}</dt>
          <dd>
            <DetailValue k={k} v={v} names={props.names} />
          </dd>
        </Fragment>
      ))}
    </dl>
  );
}

/** Names the log recorded for its targets (`details.name` of an entry about that id). */
export function recordedNames(entries: AuditEntry[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of entries ?? []) {
    const name = (a.details as { name?: unknown } | null | undefined)?.name;
    if (a.target && ID_RE.test(a.target) && typeof name === "string") out[a.target] = name;
  }
  return out;
}

/** Names for every id an audit page mentions (targets and string details). */
function useNames(entries: AuditEntry[] | undefined): Record<string, Named | null> {
  const [names, setNames] = useState<Record<string, Named | null>>({});
  useEffect(() => {
    if (!entries) return;
    const ids = new Set<string>();
    for (const a of entries) {
      const t = a.target?.split("/")[0];
      if (t && ID_RE.test(t)) ids.add(t);
      if (a.details && typeof a.details === "object")
        for (const v of Object.values(a.details)) if (typeof v === "string" && ID_RE.test(v)) ids.add(v);
    }
    let live = true;
    for (const id of ids)
      if (!(id in names))
        void nameOf(id).then((n) => {
          if (live) setNames((m) => (id in m ? m : { ...m, [id]: n }));
        });
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [entries]);
  return names;
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
  const polled = useLivePoll((signal) => get<Schemas["AuditPage"]>(`/api/v1/audit?${qs}`, signal), ["audit"], {
    pollMs: 10000,
    deps: [qs],
  });
  const p = polled.data?.pagination;
  const names = useNames(polled.data?.data);
  const recorded = recordedNames(polled.data?.data);
  const entries = polled.data?.data ?? [];

  return (
    <ListPage
      id="audit"
      title="Audit log"
      noun="the audit log"
      polled={polled}
      refreshError="Cannot load the audit log"
      tools={
        <form
          class="filters"
          onSubmit={(e) => {
            e.preventDefault();
            setPage(1);
            setApplied({ action: action.trim(), actor: actor.trim() });
          }}
        >
          <input
            aria-label="Action"
            placeholder="action, e.g. cluster"
            value={action}
            onInput={(e) => setAction((e.target as HTMLInputElement).value)}
          />
          <input
            aria-label="Actor"
            placeholder="actor, e.g. admin"
            value={actor}
            onInput={(e) => setActor((e.target as HTMLInputElement).value)}
          />
          <button type="submit">Filter</button>
        </form>
      }
      isEmpty={entries.length === 0}
      empty={<p class="muted">No entries.</p>}
      showTable={entries.length > 0}
      regionLabel="Audit entries"
      after={p && <Pager label="Audit pages" page={page} totalPages={p.total_pages} onPage={setPage} />}
    >
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
          {entries.map((a, i) => (
            <tr key={`${a.at}-${a.request_id ?? i}`}>
              <td>{formatTime(a.at)}</td>
              <td>{a.actor}</td>
              <td>
                <code>{a.action}</code>
              </td>
              <td class="target">{a.target ? <IdRef id={a.target} names={names} recorded={recorded} /> : "—"}</td>
              <td class={a.result !== "success" ? "bad" : undefined}>{a.result}</td>
              <td class="details">
                <Details details={a.details} names={names} />
              </td>
              <td title={a.user_agent ?? undefined}>{a.client_addr ?? "—"}</td>
              <td>
                <code class="small">{a.request_id ?? ""}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
