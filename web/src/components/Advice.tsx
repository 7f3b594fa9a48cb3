// What to do about the sessions and offerings API's conflicts: one line of advice per error code,
// shown inside the ErrorBox that carries the server's message.

import { ApiError } from "../api";
import { plural } from "../format";

/** What a member can do about the codes whose admin advice points at admin pages. */
const MEMBER_ADVICE: Record<string, string> = {
  no_session_domain: "Where sessions are reached is not set up yet; tell your lab's admin.",
  cluster_unavailable: "The GPU cluster cannot take sessions right now; try again later, or tell your lab's admin.",
  operator_not_connected: "The GPU cluster cannot take sessions right now; try again later, or tell your lab's admin.",
  no_cluster: "No GPU cluster can take a session right now; try again later, or tell your lab's admin.",
  offering_inactive: "This offering was just closed; pick another from the catalogue.",
  cluster_apply_failed: "The cluster refused the session; it is listed with phase error. Tell your lab's admin if it happens again.",
};

/** `member`: advice for a member, who cannot open the admin pages the admin's advice points at. */
export function Advice(props: { error: unknown; member?: boolean }) {
  const e = props.error;
  if (!(e instanceof ApiError)) return null;
  const d = e.details;
  const str = (k: string) => (typeof d[k] === "string" || typeof d[k] === "number" ? String(d[k]) : "");
  if (props.member && MEMBER_ADVICE[e.code]) return <p class="hint">{MEMBER_ADVICE[e.code]}</p>;
  switch (e.code) {
    case "no_session_domain":
      return (
        <p class="hint">
          Set this cluster's session domain on the <a href="/clusters">Clusters page</a> (Edit → Session domain), then connect again.
        </p>
      );
    case "session_not_running":
      return <p class="hint">Only a running session can be opened; resume it or wait until it is running.</p>;
    case "session_conflict":
      return (
        <p class="hint">
          The session is {str("phase") || "in another phase"} now
          {Array.isArray(d.allowed) ? `; allowed: ${d.allowed.length ? d.allowed.join(", ") : "nothing"}` : ""}. The list has been
          refreshed.
        </p>
      );
    case "cluster_apply_failed":
      return (
        <p class="hint">
          {str("cause") && (
            <>
              Cause: <span class="cause">{str("cause")}</span>.{" "}
            </>
          )}
          The session is recorded with phase error; see the list.
        </p>
      );
    case "cluster_unavailable":
      return (
        <p class="hint">
          Cluster {str("cluster_id") && <code>{str("cluster_id")}</code>} is {str("status") || "not connected"}: pick another cluster, or
          let the server pick any connected one.
        </p>
      );
    case "operator_not_connected":
      return (
        <p class="hint">
          The operator of cluster {str("cluster_id") && <code>{str("cluster_id")}</code>} is{" "}
          {(str("operator_state") || "not connected").replace(/_/g, " ")}, so nothing would run the session: attach it or see why it is
          silent on the <a href="/clusters">Clusters page</a>, or pick another cluster.
        </p>
      );
    case "no_cluster":
      return (
        <p class="hint">
          No connected cluster can take it; check the <a href="/clusters">Clusters page</a>.
        </p>
      );
    case "offering_inactive":
      return (
        <p class="hint">
          The offering is inactive: pick another, or activate it on the <a href="/offerings">Offerings page</a>.
        </p>
      );
    case "offering_in_use":
      return (
        <p class="hint">
          {str("sessions")
            ? `${plural(Number(str("sessions")), "session was", "sessions were")} created from it (ended ones count: their history names it). `
            : ""}
          Deactivate it instead: its sessions keep it, and no new session can pick it.
        </p>
      );
    default:
      // A cluster call that failed (502s) says why and, sometimes, what to do.
      return str("cause") || str("hint") ? (
        <p class="hint">
          {str("cause") && (
            <>
              Cause: <span class="cause">{str("cause")}</span>.{" "}
            </>
          )}
          {str("hint") && <>Hint: {str("hint")}</>}
        </p>
      ) : null;
  }
}
