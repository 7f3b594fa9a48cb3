// Sessions: the API comes with the sessions issue. Until the server has it, say so.

import { get, isMissingRoute } from "../api";
import { ErrorBox } from "../components/Errors";
import { NotYet } from "../components/NotYet";
import { formatAge, secondsSince } from "../format";
import { usePoll } from "../hooks";

interface Session {
  id: string;
  cluster_id?: string;
  cluster_name?: string;
  owner?: string;
  phase?: string;
  created_at?: string;
  urls?: Record<string, string>;
}

export function SessionsPage() {
  const polled = usePoll((signal) => get<{ data: Session[] }>("/api/v1/sessions", signal), 5000);
  return (
    <section aria-labelledby="sessions-title">
      <div class="toolbar">
        <h1 id="sessions-title">Sessions</h1>
      </div>
      {isMissingRoute(polled.error) ? (
        <NotYet what="The sessions list" issue="sessions" />
      ) : (
        <>
          <ErrorBox error={polled.error} title="Cannot load sessions" />
          {polled.loading && !polled.data && <p class="loading">Loading sessions…</p>}
          {polled.data && polled.data.data.length === 0 && <p class="muted">No sessions.</p>}
          {polled.data && polled.data.data.length > 0 && (
            <table>
              <thead>
                <tr>
                  <th scope="col">Session</th>
                  <th scope="col">Cluster</th>
                  <th scope="col">Owner</th>
                  <th scope="col">Phase</th>
                  <th scope="col">Age</th>
                  <th scope="col">Open</th>
                </tr>
              </thead>
              <tbody>
                {polled.data.data.map((s) => (
                  <tr key={s.id}>
                    <td>
                      <code>{s.id}</code>
                    </td>
                    <td>{s.cluster_name ?? s.cluster_id ?? "—"}</td>
                    <td>{s.owner ?? "—"}</td>
                    <td>{s.phase ?? "—"}</td>
                    <td>{formatAge(secondsSince(s.created_at))}</td>
                    <td>
                      {Object.entries(s.urls ?? {}).map(([k, u]) => (
                        <a key={k} href={u} target="_blank" rel="noopener noreferrer" class="link-chip">
                          {k}
                        </a>
                      ))}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </section>
  );
}
