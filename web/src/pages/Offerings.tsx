// Offerings: what sessions can be started as. List, create, edit (incl. activate / deactivate) and
// delete; an offering that sessions still use cannot be deleted, only deactivated.

import { useState } from "preact/hooks";
import { ApiError } from "../api";
import { Advice } from "../components/Advice";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { ListPage } from "../components/ListPage";
import { OfferingDialog } from "../components/OfferingDialog";
import { plural } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { useHashTarget } from "../router";
import {
  deleteOffering,
  gpuShape,
  idleText,
  listOfferings,
  maxRuntimeText,
  patchOffering,
  resourcesShape,
  type Offering,
} from "../offerings";

/** Without the event stream. */
const POLL_MS = 10000;

function DeleteOfferingDialog(props: { offering: Offering; onClose: () => void; onChanged: () => void }) {
  const o = props.offering;
  const { busy, error, run: start } = useAction();
  const inUse = error instanceof ApiError && error.code === "offering_in_use";

  const run = (what: "delete" | "deactivate") =>
    start(
      async () => {
        if (what === "delete") await deleteOffering(o.id);
        else await patchOffering(o.id, { status: "inactive" });
        props.onChanged();
        props.onClose();
      },
      { key: what },
    );

  return (
    <Dialog title="Delete offering" onClose={props.onClose}>
      <div class="dialog-body">
        <p>
          Delete offering <strong>{o.name}</strong> <code>{o.id}</code>? No new session can be started from it. Deleting is refused while
          sessions use it.
        </p>
        {inUse ? (
          // The server's message and the advice say the same: once, in the console's words.
          <div class="error" role="alert">
            <strong>Refused: the offering is in use.</strong>
            <Advice error={error} />
          </div>
        ) : (
          <ErrorBox error={error} title="Delete failed">
            <Advice error={error} />
          </ErrorBox>
        )}
        <footer class="dialog-foot">
          <button type="button" autoFocus onClick={props.onClose}>
            Keep it
          </button>
          {inUse && o.status === "active" && (
            <button type="button" class="primary" disabled={busy !== ""} onClick={() => run("deactivate")}>
              {busy === "deactivate" ? "Deactivating…" : "Deactivate instead"}
            </button>
          )}
          <button type="button" class="danger" disabled={busy !== ""} onClick={() => run("delete")}>
            {busy === "delete" ? "Deleting…" : "Delete offering"}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

export function OfferingsPage() {
  // An offering's live-session count moves with the sessions.
  const polled = useLivePoll((signal) => listOfferings({}, signal), ["offerings", "sessions"], { pollMs: POLL_MS });
  useHashTarget("offering-id", polled.data);
  const [dialog, setDialog] = useState<{ kind: "new" } | { kind: "edit" | "delete"; offering: Offering } | null>(null);

  const offerings = polled.data ?? [];
  const active = offerings.filter((o) => o.status === "active").length;
  return (
    <ListPage
      id="offerings"
      title="Offerings"
      noun="offerings"
      polled={polled}
      summary={
        <span class="muted summary">
          {plural(offerings.length, "offering")} · {active} active
        </span>
      }
      tools={
        <button type="button" class="primary" onClick={() => setDialog({ kind: "new" })}>
          New offering
        </button>
      }
      isEmpty={offerings.length === 0}
      empty={
        <div class="empty">
          <p>No offering yet: sessions are started from one.</p>
          <button type="button" class="primary" onClick={() => setDialog({ kind: "new" })}>
            Create the first offering
          </button>
        </div>
      }
      showTable={offerings.length > 0}
      regionLabel="Offering list"
      after={
        <>
          {dialog?.kind === "new" && <OfferingDialog onClose={() => setDialog(null)} onSaved={() => polled.reload()} />}
          {dialog?.kind === "edit" && (
            <OfferingDialog offering={dialog.offering} onClose={() => setDialog(null)} onSaved={() => polled.reload()} />
          )}
          {dialog?.kind === "delete" && (
            <DeleteOfferingDialog offering={dialog.offering} onClose={() => setDialog(null)} onChanged={() => polled.reload()} />
          )}
        </>
      }
    >
      <table class="offerings">
        <thead>
          <tr>
            <th scope="col">Offering</th>
            <th scope="col">Class</th>
            <th scope="col">Shape</th>
            <th scope="col">Image</th>
            <th scope="col">Idle / max runtime</th>
            <th scope="col">Status</th>
            <th scope="col" class="num">
              Live sessions
            </th>
            <th scope="col">
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {offerings.map((o) => (
            <tr key={o.id} class="offering-row" data-offering-id={o.id}>
              <td>
                <span class="offering-name">{o.name}</span>
                <div class="idline flush">
                  <code class="offering-id">{o.id}</code> <CopyButton text={o.id} label="Copy id" />
                </div>
              </td>
              <td>{o.resource_class}</td>
              <td>
                {o.resource_class === "gpu" && <div>{gpuShape(o)}</div>}
                <div class={o.resource_class === "gpu" ? "small muted" : undefined}>{resourcesShape(o)}</div>
              </td>
              <td>
                <code class="image">{o.image}</code>
              </td>
              <td>
                {idleText(o.idle_timeout_sec)} / {maxRuntimeText(o.max_runtime_sec)}
              </td>
              <td>
                <span class={`badge offering-${o.status}`}>{o.status}</span>
              </td>
              <td class="num">{o.sessions}</td>
              <td class="actions">
                <button type="button" aria-label={`Edit ${o.name}`} onClick={() => setDialog({ kind: "edit", offering: o })}>
                  Edit
                </button>{" "}
                <button
                  type="button"
                  class="danger"
                  aria-label={`Delete ${o.name}`}
                  onClick={() => setDialog({ kind: "delete", offering: o })}
                >
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </ListPage>
  );
}
