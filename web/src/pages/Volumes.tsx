// Volumes (admins only): every member's persistent volumes, grouped by owner or by cluster, with
// their size, what the last sync reported (used, mounted, storage class) and where each stands (a
// reclaim the cluster's operator has not picked up is said to be stalled); and the orphans, PVCs
// the operators reported that no volume explains, each to adopt (a named volume of a chosen
// member, its data kept) or to reclaim (the next sync has the operator delete it).

import { Fragment } from "preact";
import { useState } from "preact/hooks";
import { Advice } from "../components/Advice";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { Field, invalidProps } from "../components/Field";
import { ListPage } from "../components/ListPage";
import { serverFieldMessages } from "../form";
import { formatTime, plural } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { usedText } from "../components/MyWorkspace";
import { adoptOrphan, formatBytes, listVolumes, reclaimOrphan, stateText, type Orphan, type Volume } from "../volumes";

export type View = "user" | "cluster" | "orphans";

/** Volumes in groups (by owner or by cluster name), each group's volumes by name. */
export function groupVolumes(volumes: Volume[], by: "user" | "cluster"): { key: string; label: string; volumes: Volume[] }[] {
  const groups = new Map<string, { key: string; label: string; volumes: Volume[] }>();
  for (const v of volumes) {
    const key = by === "user" ? v.owner : v.cluster_id;
    const label = by === "user" ? v.owner : v.cluster_name;
    if (!groups.has(key)) groups.set(key, { key, label, volumes: [] });
    groups.get(key)!.volumes.push(v);
  }
  const name = (v: Volume) => (v.kind === "home" ? "" : v.name);
  return [...groups.values()]
    .sort((a, b) => a.label.localeCompare(b.label))
    .map((g) => ({ ...g, volumes: g.volumes.sort((a, b) => name(a).localeCompare(name(b)) || a.id.localeCompare(b.id)) }));
}

/** The query the list is asked with (the server filters by owner and cluster). */
export function volumesQuery(f: { owner?: string; cluster_id?: string; deleted?: boolean }): string {
  const q = new URLSearchParams();
  if (f.owner) q.set("owner", f.owner);
  if (f.cluster_id) q.set("cluster_id", f.cluster_id);
  if (f.deleted) q.set("deleted", "true");
  return q.toString();
}

const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;

function AdoptDialog(props: { orphan: Orphan; clusterName: string; onClose: () => void; onDone: () => void }) {
  const o = props.orphan;
  const [owner, setOwner] = useState("");
  const [name, setName] = useState(NAME_RE.test(o.name) ? o.name : "");
  const [mode, setMode] = useState<"RWO" | "RWX" | "ROX">("RWO");
  const { busy, error, run } = useAction();
  const fields = serverFieldMessages(error);
  const ownerError = fields.owner;
  const nameError = fields.name;
  return (
    <Dialog title="Adopt orphan volume" onClose={props.onClose}>
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          run(() => adoptOrphan(o, { owner: owner.trim(), name: name.trim() || null, mode }), {
            onSuccess: () => {
              props.onDone();
              props.onClose();
            },
          });
        }}
      >
        <p>
          PVC <code>{o.name}</code> on {props.clusterName} ({o.capacity_gb} GiB, {formatBytes(o.used_bytes)} used) becomes a named volume of
          the member you choose, its data kept. It is mounted at /data/&lt;name&gt; in their sessions on {props.clusterName} from then on.
        </p>
        <Field id="adopt-owner" label="Owner" error={ownerError}>
          <input
            id="adopt-owner"
            required
            autoFocus
            autocomplete="off"
            value={owner}
            onInput={(e) => setOwner((e.target as HTMLInputElement).value)}
            {...invalidProps("adopt-owner", ownerError)}
          />
        </Field>
        <Field id="adopt-name" label="Volume name" error={nameError}>
          <input
            id="adopt-name"
            required
            autocomplete="off"
            value={name}
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
            {...invalidProps("adopt-name", nameError)}
          />
        </Field>
        <Field id="adopt-mode" label="Access mode (as the claim was made)">
          <select id="adopt-mode" value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value as typeof mode)}>
            <option value="RWO">RWO: one node</option>
            <option value="RWX">RWX: many nodes</option>
            <option value="ROX">ROX: read-only</option>
          </select>
        </Field>
        {Object.keys(fields).length === 0 && (
          <ErrorBox error={error} title="Adoption refused">
            <Advice error={error} />
          </ErrorBox>
        )}
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Adopting…" : "Adopt"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

function ReclaimDialog(props: { orphan: Orphan; clusterName: string; onClose: () => void; onDone: () => void }) {
  const o = props.orphan;
  const { busy, error, run } = useAction();
  return (
    <Dialog title="Reclaim orphan volume" onClose={props.onClose}>
      <div class="dialog-body">
        <p>
          Reclaim PVC <code>{o.name}</code> on {props.clusterName}? At its next volume sync the cluster's operator deletes the claim and its{" "}
          {o.capacity_gb} GiB of data{o.mounted ? " once no pod mounts it (a pod mounts it now)" : ""}. This cannot be undone.
        </p>
        <ErrorBox error={error} title="Reclaim refused">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" autoFocus onClick={props.onClose}>
            Keep it
          </button>
          <button
            type="button"
            class="danger"
            disabled={busy !== ""}
            onClick={() =>
              run(() => reclaimOrphan(o), {
                onSuccess: () => {
                  props.onDone();
                  props.onClose();
                },
              })
            }
          >
            {busy ? "Reclaiming…" : `Reclaim ${o.name}`}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

function VolumeRow(props: { v: Volume }) {
  const v = props.v;
  const stalled = v.reclaim_stalled;
  return (
    <tr data-volume={v.id} class={stalled ? "volume-stalled" : undefined}>
      <th scope="row">
        {v.kind === "home" ? "Home" : v.name}
        <div class="muted small">
          <code>{v.mount_path}</code>
          {v.shared_group && <> · shared read-only with {v.shared_group}</>}
        </div>
      </th>
      <td>{v.owner}</td>
      <td>{v.cluster_name}</td>
      <td>
        {v.size_gb} GiB
        {v.mode !== "RWO" && <span class="muted small"> {v.mode}</span>}
      </td>
      <td class={v.over_capacity ? "warning" : undefined}>{usedText(v)}</td>
      <td>{v.pvc == null ? <span class="muted">not reported yet</span> : v.mounted ? "yes" : "no"}</td>
      <td>{v.storage_class ?? <span class="muted">—</span>}</td>
      <td class={stalled ? "warning" : undefined}>
        {stateText(v)}
        {v.deleted_at && <div class="muted small">deleted {formatTime(v.deleted_at)}</div>}
      </td>
    </tr>
  );
}

export function VolumesPage() {
  const [view, setView] = useState<View>("user");
  const [owner, setOwner] = useState("");
  const [clusterId, setClusterId] = useState("");
  const [deleted, setDeleted] = useState(false);
  const [dialog, setDialog] = useState<{ kind: "adopt" | "reclaim"; orphan: Orphan } | null>(null);
  const qs = volumesQuery({ owner: view === "orphans" ? "" : owner.trim(), cluster_id: clusterId, deleted });
  const polled = useLivePoll((signal) => listVolumes(qs, signal), ["sessions"], { deps: [qs], pollMs: 15000 });
  const volumes = polled.data?.data ?? [];
  const orphans = polled.data?.orphans ?? [];
  // Cluster names from what is listed (an orphan's cluster by a volume's, else its id).
  const clusterNames = new Map<string, string>();
  for (const v of volumes) clusterNames.set(v.cluster_id, v.cluster_name);
  const clusterOf = (id: string) => clusterNames.get(id) ?? id;
  const clusterIds = [...new Set([...volumes.map((v) => v.cluster_id), ...orphans.map((o) => o.cluster_id), clusterId].filter(Boolean))];
  const stalled = volumes.filter((v) => v.reclaim_stalled).length;
  const rows = view === "orphans" ? orphans.length : volumes.length;
  const filtered = owner.trim() !== "" || clusterId !== "";
  return (
    <ListPage
      id="volumes"
      title="Volumes"
      noun="volumes"
      polled={polled}
      summary={
        <span class="muted summary">
          {plural(volumes.length, "volume")} · {plural(orphans.length, "orphan")}
          {stalled > 0 && <span class="warning"> · {plural(stalled, "stalled reclaim")}</span>}
        </span>
      }
      tools={
        <div class="filters">
          <select aria-label="Show" value={view} onChange={(e) => setView((e.target as HTMLSelectElement).value as View)}>
            <option value="user">By user</option>
            <option value="cluster">By cluster</option>
            <option value="orphans">Orphans</option>
          </select>
          {view !== "orphans" && (
            <input
              type="search"
              aria-label="Owner"
              placeholder="Owner"
              value={owner}
              onInput={(e) => setOwner((e.target as HTMLInputElement).value)}
            />
          )}
          <select aria-label="Cluster" value={clusterId} onChange={(e) => setClusterId((e.target as HTMLSelectElement).value)}>
            <option value="">All clusters</option>
            {clusterIds.map((id) => (
              <option key={id} value={id}>
                {clusterOf(id)}
              </option>
            ))}
          </select>
          {view !== "orphans" && (
            <label class="check">
              <input type="checkbox" checked={deleted} onChange={(e) => setDeleted((e.target as HTMLInputElement).checked)} /> Deleted too
            </label>
          )}
        </div>
      }
      isEmpty={rows === 0}
      empty={
        <div class="empty">
          {view === "orphans" ? (
            <p>No orphan: every PVC the operators report is a volume here.</p>
          ) : filtered ? (
            <p>No volume matches these filters.</p>
          ) : (
            <p>No volume yet. A member's first session on a cluster makes their home workspace there.</p>
          )}
        </div>
      }
      showTable={rows > 0}
      regionLabel={view === "orphans" ? "Orphan volumes, scrolls sideways" : "Volumes, scrolls sideways"}
      after={
        <>
          {dialog?.kind === "adopt" && (
            <AdoptDialog
              orphan={dialog.orphan}
              clusterName={clusterOf(dialog.orphan.cluster_id)}
              onClose={() => setDialog(null)}
              onDone={() => polled.reload()}
            />
          )}
          {dialog?.kind === "reclaim" && (
            <ReclaimDialog
              orphan={dialog.orphan}
              clusterName={clusterOf(dialog.orphan.cluster_id)}
              onClose={() => setDialog(null)}
              onDone={() => polled.reload()}
            />
          )}
        </>
      }
    >
      {view === "orphans" ? (
        <table class="volumes orphans" aria-label="Orphan volumes">
          <thead>
            <tr>
              <th scope="col">PVC</th>
              <th scope="col">Cluster</th>
              <th scope="col">Capacity</th>
              <th scope="col">Used</th>
              <th scope="col">Mounted</th>
              <th scope="col">Storage class</th>
              <th scope="col">First seen</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {orphans.map((o) => (
              <tr key={`${o.cluster_id}/${o.name}`} data-orphan={o.name}>
                <th scope="row">
                  <code>{o.name}</code>
                  {o.volume_id && <div class="muted small">annotated {o.volume_id}</div>}
                </th>
                <td>{clusterOf(o.cluster_id)}</td>
                <td>{o.capacity_gb} GiB</td>
                <td>{formatBytes(o.used_bytes)}</td>
                <td>{o.mounted ? "yes" : "no"}</td>
                <td>{o.storage_class ?? <span class="muted">—</span>}</td>
                <td>{formatTime(o.first_seen)}</td>
                <td class="actions">
                  {o.reclaim_requested_at ? (
                    <span class="warning">
                      reclaim asked {formatTime(o.reclaim_requested_at)}
                      {o.reclaim_requested_by ? ` by ${o.reclaim_requested_by}` : ""}
                    </span>
                  ) : (
                    <>
                      <button type="button" aria-label={`Adopt ${o.name}`} onClick={() => setDialog({ kind: "adopt", orphan: o })}>
                        Adopt…
                      </button>{" "}
                      <button
                        type="button"
                        class="danger"
                        aria-label={`Reclaim ${o.name}`}
                        onClick={() => setDialog({ kind: "reclaim", orphan: o })}
                      >
                        Reclaim…
                      </button>
                    </>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <table class="volumes" aria-label="Volumes">
          <thead>
            <tr>
              <th scope="col">Volume</th>
              <th scope="col">Owner</th>
              <th scope="col">Cluster</th>
              <th scope="col">Size</th>
              <th scope="col">Used</th>
              <th scope="col">Mounted</th>
              <th scope="col">Storage class</th>
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {groupVolumes(volumes, view).map((g) => (
              <Fragment key={g.key}>
                <tr class="group-row">
                  <th scope="colgroup" colSpan={8}>
                    {g.label}{" "}
                    <span class="muted small">
                      {plural(g.volumes.length, "volume")},{" "}
                      {g.volumes.filter((v) => v.state === "active").reduce((n, v) => n + v.size_gb, 0)} GiB
                    </span>
                  </th>
                </tr>
                {g.volumes.map((v) => (
                  <VolumeRow key={v.id} v={v} />
                ))}
              </Fragment>
            ))}
          </tbody>
        </table>
      )}
    </ListPage>
  );
}
