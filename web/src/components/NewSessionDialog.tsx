// Start a session: an active offering (its shape shown), optionally a cluster (default: the server
// picks a connected one), a name, an owner and an image override. Server errors stay in the dialog.
// A cluster whose operator is not connected is marked, and choosing it says why: the server refuses
// a session there (409 operator_not_connected), which would otherwise stay pending for ever.

import { useRef, useState } from "preact/hooks";
import { ApiError, newIdempotencyKey } from "../api";
import { listClusters, type Cluster } from "../clusters";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { gpuShape, idleText, listOfferings, maxRuntimeText, resourcesShape } from "../offerings";
import { createSession, type NewSessionBody, type Session } from "../sessions";
import { listVolumes } from "../volumes";
import { Advice } from "./Advice";
import { workspaceNote } from "./MyWorkspace";
import { Dialog } from "./Dialog";
import { ErrorBox } from "./Errors";

/** Why a session cannot run on this cluster now, or null: the cluster or its operator. */
export function clusterUnfit(c: Cluster): string | null {
  if (c.status !== "connected") return c.status;
  const state = c.operator?.state;
  if (state && state !== "connected") return `operator ${state.replace(/_/g, " ")}`;
  return null;
}

export function NewSessionDialog(props: { onClose: () => void; onCreated: (s: Session) => void; onChanged: () => void }) {
  // Loaded once, again when offerings or clusters change while the dialog is open.
  const offerings = useLivePoll((signal) => listOfferings({ activeOnly: true }, signal), ["offerings"], { pollMs: 0 });
  const clusters = useLivePoll((signal) => listClusters(signal), ["clusters"], { pollMs: 0 });
  const [offeringId, setOfferingId] = useState("");
  const [clusterId, setClusterId] = useState("");
  const [name, setName] = useState("");
  const [owner, setOwner] = useState("");
  const [image, setImage] = useState("");
  const { busy: running, error, setError, run } = useAction();
  const busy = running !== "";
  // One key per distinct body: a retry of the same request replays, an edited form is a new request.
  const attempt = useRef<{ body: string; key: string } | null>(null);

  const active = (offerings.data ?? []).filter((o) => o.status === "active");
  // With a single active offering there is nothing to choose.
  const chosen = offeringId || (active.length === 1 ? active[0].id : "");
  const offering = active.find((o) => o.id === chosen);
  const picked = (clusters.data ?? []).find((c) => c.id === clusterId);
  // The owner's volumes there: a cluster without their workspace makes a new, empty one (said before).
  const ownerName = owner.trim();
  const theirs = useLivePoll(
    (signal) =>
      clusterId && ownerName
        ? listVolumes(new URLSearchParams({ owner: ownerName, cluster_id: clusterId }).toString(), signal)
        : Promise.resolve(null),
    [],
    { pollMs: 0, deps: [clusterId, ownerName] },
  );
  const pickedOperator =
    picked?.status === "connected" && picked.operator && picked.operator.state !== "connected" ? picked.operator : null;

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy) return;
    if (!chosen) {
      setError(new Error("choose an offering"));
      return;
    }
    const body: NewSessionBody = { offering_id: chosen };
    if (clusterId) body.cluster_id = clusterId;
    if (name.trim()) body.name = name.trim();
    if (owner.trim()) body.owner = owner.trim();
    if (image.trim()) body.image = image.trim();
    const json = JSON.stringify(body);
    if (attempt.current?.body !== json) attempt.current = { body: json, key: newIdempotencyKey() };
    const key = attempt.current.key;
    run(async () => {
      try {
        const s = await createSession(body, key);
        props.onCreated(s);
        props.onClose();
      } catch (err) {
        // A failed apply is still recorded (phase error): show it in the list behind the dialog.
        if (err instanceof ApiError && err.code === "cluster_apply_failed") props.onChanged();
        throw err;
      }
    });
  };

  return (
    <Dialog title="New session" onClose={props.onClose} wide>
      <form class="dialog-body form" onSubmit={submit}>
        <label>
          Offering
          <select
            name="offering_id"
            aria-label="Offering"
            value={chosen}
            required
            autoFocus
            onChange={(e) => setOfferingId((e.target as HTMLSelectElement).value)}
          >
            {active.length !== 1 && (
              <option value="" disabled>
                {offerings.loading && !offerings.data ? "Loading offerings…" : "Choose an offering"}
              </option>
            )}
            {active.map((o) => (
              <option key={o.id} value={o.id}>
                {o.name}
              </option>
            ))}
          </select>
        </label>
        <ErrorBox error={offerings.error} title="Cannot load offerings" />
        {offerings.data && active.length === 0 && (
          <p class="warning small" role="note">
            No active offering: create or activate one on the <a href="/offerings">Offerings page</a>.
          </p>
        )}
        {offering && (
          <dl class="shape" aria-label="Shape of the chosen offering">
            <dt>{offering.resource_class === "gpu" ? "GPU" : "Class"}</dt>
            <dd>{gpuShape(offering)}</dd>
            <dt>Resources</dt>
            <dd>{resourcesShape(offering)}</dd>
            <dt>Image</dt>
            <dd>
              <code>{offering.image}</code>
            </dd>
            <dt>Idle timeout / max runtime</dt>
            <dd>
              {idleText(offering.idle_timeout_sec)} / {maxRuntimeText(offering.max_runtime_sec)}
            </dd>
          </dl>
        )}
        <label>
          Cluster <span class="muted">(optional)</span>
          <select
            name="cluster_id"
            aria-label="Cluster"
            value={clusterId}
            onChange={(e) => setClusterId((e.target as HTMLSelectElement).value)}
          >
            <option value="">Any connected cluster</option>
            {(clusters.data ?? []).map((c) => {
              const unfit = clusterUnfit(c);
              return (
                <option key={c.id} value={c.id}>
                  {unfit ? `${c.name} (${unfit})` : c.name}
                </option>
              );
            })}
          </select>
        </label>
        {picked && pickedOperator && (
          <p class="warning small" role="note">
            The operator of {picked.name} is {pickedOperator.state.replace(/_/g, " ")}
            {pickedOperator.last_callback_age_s != null ? ` (last callback ${pickedOperator.last_callback_age_s} s ago)` : ""}: a session
            there would never start, so the server refuses it. Attach the operator or see why it is silent on the{" "}
            <a href="/clusters">Clusters page</a>.
          </p>
        )}
        {clusters.error != null && <p class="small muted">Cannot list clusters; the server will pick a connected one.</p>}
        {picked && ownerName && theirs.data && (
          <p class="small workspace-note" role="note">
            {workspaceNote(theirs.data.data, ownerName, picked)}
          </p>
        )}
        <label>
          Name <span class="muted">(optional)</span>
          <input
            name="name"
            maxLength={80}
            autocomplete="off"
            value={name}
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          Owner <span class="muted">(optional)</span>
          <input
            name="owner"
            autocomplete="off"
            placeholder="you, the signed-in admin"
            value={owner}
            onInput={(e) => setOwner((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          Image override <span class="muted">(optional)</span>
          <input
            name="image"
            autocomplete="off"
            spellcheck={false}
            placeholder={offering?.image ?? "the offering's image"}
            value={image}
            onInput={(e) => setImage((e.target as HTMLInputElement).value)}
          />
        </label>
        <ErrorBox error={error} title="Cannot start the session">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy || !chosen}>
            {busy ? "Starting…" : "Start session"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}
