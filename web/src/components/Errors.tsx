// How failures look: the server's message, and for probe failures the stage, cause, hint and checks.

import type { ComponentChildren } from "preact";
import { ApiError, type Schemas } from "../api";
import type { Check } from "../clusters";

/** A stage the probe never reached (an earlier one failed): neither passed nor failed. */
export const notRun = (c: Check) => !c.ok && c.detail === "not run";

export function Checks(props: { checks: Check[] }) {
  if (!props.checks.length) return null;
  return (
    <ul class="checks">
      {props.checks.map((c) => {
        const state = c.ok ? "ok" : notRun(c) ? "skipped" : "bad";
        return (
          <li key={c.name} class={state}>
            <span class="mark" aria-hidden="true">
              {state === "ok" ? "✓" : state === "skipped" ? "–" : "✗"}
            </span>
            <span class="check-name">{c.name}</span>
            {c.detail && state !== "skipped" && <span class="check-detail">{c.detail}</span>}
            {state === "skipped" && (
              <span class="check-detail" aria-hidden="true">
                not run
              </span>
            )}
            <span class="sr-only">{state === "ok" ? "passed" : state === "skipped" ? "not run" : "failed"}</span>
          </li>
        );
      })}
    </ul>
  );
}

function ProbeFailure(props: { error: ApiError }) {
  const d = props.error.details as { stage?: string; cause?: string; hint?: string; checks?: Check[] };
  return (
    <div class="error probe" role="alert">
      <strong>
        Probe failed
        {d.stage ? (
          <>
            {" "}
            at stage <code class="stage">{d.stage}</code>
          </>
        ) : null}
      </strong>
      <p class="cause">{d.cause ?? props.error.message}</p>
      {d.hint && <p class="hint">Hint: {d.hint}</p>}
      {d.checks && <Checks checks={d.checks} />}
    </div>
  );
}

function fieldErrors(e: ApiError): string[] {
  const errs = (e.details as { errors?: Partial<Schemas["FieldError"]>[] }).errors;
  if (!Array.isArray(errs)) return [];
  return errs.map((x) => `${(x.loc ?? []).filter((l) => l !== "body").join(".")}: ${x.msg ?? ""}`);
}

/** Any error as a readable block; `null` renders nothing. `children` (advice) goes inside it. */
export function ErrorBox(props: { error: unknown; title?: string; children?: ComponentChildren }) {
  const e = props.error;
  if (!e) return null;
  if (e instanceof ApiError && e.code === "probe_failed") return <ProbeFailure error={e} />;
  const message = e instanceof Error ? e.message : typeof e === "string" ? e : JSON.stringify(e);
  const fields = e instanceof ApiError ? fieldErrors(e) : [];
  return (
    <div class="error" role="alert">
      {props.title && <strong>{props.title}: </strong>}
      {message}
      {fields.length > 1 && (
        <ul>
          {fields.map((f) => (
            <li key={f}>{f}</li>
          ))}
        </ul>
      )}
      {e instanceof ApiError && e.requestId && <span class="reqid"> (request {e.requestId})</span>}
      {props.children}
    </div>
  );
}
