// "My limits" on the Account page: the resource policy that applies to the signed-in account
// (GET /api/v1/resource-policies/effective: merged user → group → global) and what its live
// sessions hold now, so nobody learns a limit from a refusal.

import { get, type Schemas } from "../api";
import { formatDuration, formatTime } from "../format";
import { usePoll } from "../hooks";
import { ErrorBox } from "./Errors";

export type EffectivePolicy = Schemas["EffectiveView"];

export const getEffectivePolicy = (signal?: AbortSignal) => get<EffectivePolicy>("/api/v1/resource-policies/effective", signal);

/** `used / limit unit`, or `used (no limit)` when the limit is absent or 0. */
export function usedOf(used: number, limit: number | null | undefined, unit = ""): string {
  const u = unit ? ` ${unit}` : "";
  return limit && limit > 0 ? `${used} / ${limit}${u}` : `${used}${u} (no limit)`;
}

export function PolicyPanel() {
  const p = usePoll((signal) => getEffectivePolicy(signal), 30_000);
  const e = p.data;
  return (
    <section aria-labelledby="policy-title" class="policy">
      <h2 id="policy-title">My limits</h2>
      <ErrorBox error={p.error} title="Cannot load your limits" />
      {e && !e.has_policy && <p class="muted">No resource policy applies: nothing is limited.</p>}
      {e && e.has_policy && (
        <dl class="facts">
          <div>
            <dt>Sessions</dt>
            <dd>{e.max_concurrent == null ? `${e.used.active} (no limit)` : `${e.used.active} of ${e.max_concurrent} live`}</dd>
          </div>
          <div>
            <dt>GPU memory</dt>
            <dd>{usedOf(e.used.gpu_mem_mb, e.limits.gpu_mem_mb, "MiB")}</dd>
          </div>
          <div>
            <dt>GPU cores</dt>
            <dd>{usedOf(e.used.gpu_cores, e.limits.gpu_cores, "%")}</dd>
          </div>
          <div>
            <dt>CPU</dt>
            <dd>{usedOf(e.used.cpu, e.limits.cpu, "vCPU")}</dd>
          </div>
          <div>
            <dt>Memory</dt>
            <dd>{usedOf(e.used.mem_gb, e.limits.mem_gb, "GiB")}</dd>
          </div>
          <div>
            <dt>Disk</dt>
            <dd>{usedOf(e.used.storage_gb, e.limits.storage_gb, "GiB")}</dd>
          </div>
          <div>
            <dt>Longest run</dt>
            <dd>{e.max_runtime_min ? formatDuration(e.max_runtime_min * 60) : "no limit"}</dd>
          </div>
          {e.max_runtime_min ? (
            <div>
              <dt>At the runtime limit</dt>
              <dd>{e.max_runtime_action === "pause" ? "paused (resume it for a new run)" : "ended"}</dd>
            </div>
          ) : null}
          <div>
            <dt>Paused when idle after</dt>
            <dd>{e.idle_timeout_sec ? formatDuration(e.idle_timeout_sec) : "never"}</dd>
          </div>
          <div>
            <dt>Queued sessions</dt>
            <dd>{e.max_queued ? `up to ${e.max_queued} may wait for room` : "none: a session that does not fit is refused"}</dd>
          </div>
          {e.group && (
            <div>
              <dt>Group</dt>
              <dd>{e.group}</dd>
            </div>
          )}
        </dl>
      )}
      {e && e.budgets.length > 0 && <Budgets budgets={e.budgets} />}
    </section>
  );
}

export type BudgetView = Schemas["BudgetView"];

/** What a budget's state says: warned, used up (and when running sessions pause), or nothing. */
export function budgetNote(b: BudgetView): string | null {
  if (b.exhausted_at) {
    return `Used up: new GPU sessions are refused; running ones pause${b.pauses_at ? ` at ${formatTime(b.pauses_at)}` : ""}.`;
  }
  if (b.warned_at) return "Over 80 % used.";
  return null;
}

function Budgets(props: { budgets: BudgetView[] }) {
  return (
    <>
      <h3>GPU-hour budgets this month</h3>
      <dl class="facts">
        {props.budgets.map((b) => (
          <div key={`${b.scope}:${b.subject}`}>
            <dt>{b.scope === "group" ? `Group ${b.subject}` : "Mine"}</dt>
            <dd>
              <meter min={0} max={100} value={Math.min(b.percent, 100)} aria-label={`${b.scope} budget used`} />{" "}
              {`${b.used_gpu_hours} of ${b.limit_gpu_hours} GPU-hours (${b.percent} %) in ${b.month}`}
              {budgetNote(b) && <div class={b.exhausted_at ? "small bad" : "small warning"}>{budgetNote(b)}</div>}
            </dd>
          </div>
        ))}
      </dl>
    </>
  );
}
