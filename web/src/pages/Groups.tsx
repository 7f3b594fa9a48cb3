// Groups & policies (admins only): the lab's groups with their members (a member is put in a
// group here or on the Users page), the resource policies at global, group and user scope with
// every field (blank: inherited from the wider scope), and the node pools reserved for groups,
// each with its nodes and how many of its cards are in use.

import { useState } from "preact/hooks";
import { Advice } from "../components/Advice";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { Field, invalidProps } from "../components/Field";
import { listClusters, listNodes } from "../clusters";
import { serverFieldMessages } from "../form";
import { plural } from "../format";
import { usePoll, useAction } from "../hooks";
import {
  LIMIT_NUMBERS,
  POLICY_NUMBERS,
  createGroup,
  createPolicy,
  createPool,
  deleteGroup,
  deletePolicy,
  deletePool,
  listGroups,
  listPolicies,
  listPools,
  numberOrNull,
  setUserGroup,
  updatePolicy,
  valueText,
  RUNTIME_ACTIONS,
  runtimeActionText,
  type RuntimeAction,
  type Group,
  type NodePool,
  type Policy,
  type PoolKind,
  type Scope,
} from "../policies";

function GroupDialog(props: { onClose: () => void; onDone: () => void }) {
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const { busy, error, run } = useAction();
  const fields = serverFieldMessages(error);
  return (
    <Dialog title="New group" onClose={props.onClose}>
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          run(() => createGroup({ name: name.trim(), description: description.trim() || null }), {
            onSuccess: () => {
              props.onDone();
              props.onClose();
            },
          });
        }}
      >
        <Field id="group-name" label="Name" error={fields.name}>
          <input
            id="group-name"
            required
            autoFocus
            autocomplete="off"
            value={name}
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
            {...invalidProps("group-name", fields.name)}
          />
        </Field>
        <Field id="group-description" label="Description (optional)" error={fields.description}>
          <input
            id="group-description"
            autocomplete="off"
            value={description}
            onInput={(e) => setDescription((e.target as HTMLInputElement).value)}
            {...invalidProps("group-description", fields.description)}
          />
        </Field>
        {Object.keys(fields).length === 0 && (
          <ErrorBox error={error} title="Not created">
            <Advice error={error} />
          </ErrorBox>
        )}
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Creating…" : "Create group"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

function MemberDialog(props: { group: string; onClose: () => void; onDone: () => void }) {
  const [user, setUser] = useState("");
  const { busy, error, run } = useAction();
  return (
    <Dialog title={`Add a member to ${props.group}`} onClose={props.onClose}>
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          run(() => setUserGroup(user.trim(), props.group), {
            onSuccess: () => {
              props.onDone();
              props.onClose();
            },
          });
        }}
      >
        <p>A user is in one group: adding them here takes them out of the group they are in.</p>
        <Field id="member-user" label="Username">
          <input
            id="member-user"
            required
            autoFocus
            autocomplete="off"
            value={user}
            onInput={(e) => setUser((e.target as HTMLInputElement).value)}
          />
        </Field>
        <ErrorBox error={error} title="Not added">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Adding…" : "Add member"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

/** Asks before deleting; a refusal (a group still in use, say) shows here with what holds it. */
function ConfirmDelete(props: { title: string; what: string; onClose: () => void; action: () => Promise<unknown>; onDone: () => void }) {
  const { busy, error, run } = useAction();
  return (
    <Dialog title={props.title} onClose={props.onClose}>
      <div class="dialog-body">
        <p>Delete {props.what}?</p>
        <ErrorBox error={error} title="Not deleted">
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
              run(props.action, {
                onSuccess: () => {
                  props.onDone();
                  props.onClose();
                },
              })
            }
          >
            {busy ? "Deleting…" : "Delete"}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

type Flag = "" | "yes" | "no";
const flagOf = (v: boolean | null | undefined): Flag => (v == null ? "" : v ? "yes" : "no");
const flagValue = (f: Flag) => (f === "" ? null : f === "yes");

function PolicyDialog(props: { policy?: Policy; groups: Group[]; onClose: () => void; onDone: () => void }) {
  const p = props.policy;
  const [scope, setScope] = useState<Scope>(p?.scope ?? "group");
  const [subject, setSubject] = useState(p?.scope_id ?? "");
  const init: Record<string, string> = {};
  for (const f of POLICY_NUMBERS) init[f.key] = p?.[f.key] == null ? "" : String(p[f.key]);
  for (const f of LIMIT_NUMBERS) init[f.key] = p?.limits[f.key] == null ? "" : String(p.limits[f.key]);
  init.gpu_hours_month = p?.gpu_hours_month == null ? "" : String(p.gpu_hours_month);
  const [numbers, setNumbers] = useState(init);
  const [sharedPool, setSharedPool] = useState<Flag>(flagOf(p?.limits.shared_pool));
  const [privileged, setPrivileged] = useState<Flag>(flagOf(p?.limits.allow_privileged));
  const [runtimeAction, setRuntimeAction] = useState<RuntimeAction | "">(p?.max_runtime_action ?? "");
  const { busy, error, run } = useAction();
  const fields = serverFieldMessages(error);
  const n = (k: string) => numberOrNull(numbers[k] ?? "");
  const limits = {
    cpu: n("cpu"),
    mem_gb: n("mem_gb"),
    gpu_mem_mb: n("gpu_mem_mb"),
    gpu_cores: n("gpu_cores"),
    storage_gb: n("storage_gb"),
    volume_gb: n("volume_gb"),
    shared_pool: flagValue(sharedPool),
    allow_privileged: flagValue(privileged),
  };
  const numberField = (key: string, label: string, unit: string) => {
    const id = `policy-${key}`;
    return (
      <Field key={key} id={id} label={`${label}${unit ? ` (${unit})` : ""}`} error={fields[key]}>
        <input
          id={id}
          inputMode="numeric"
          placeholder="inherited"
          value={numbers[key]}
          onInput={(e) => setNumbers({ ...numbers, [key]: (e.target as HTMLInputElement).value })}
          {...invalidProps(id, fields[key])}
        />
      </Field>
    );
  };
  return (
    <Dialog
      title={p ? `Edit the ${p.scope} policy${p.scope === "global" ? "" : ` of ${p.scope_id}`}` : "New policy"}
      onClose={props.onClose}
      wide
    >
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          const body = {
            max_concurrent: n("max_concurrent"),
            max_queued: n("max_queued"),
            max_runtime_min: n("max_runtime_min"),
            max_runtime_action: runtimeAction === "" ? null : runtimeAction,
            idle_timeout_sec: n("idle_timeout_sec"),
            limits,
            // The budget is not inherited, and the global scope has none.
            gpu_hours_month: (p?.scope ?? scope) === "global" ? null : n("gpu_hours_month"),
          };
          run(
            () => (p ? updatePolicy(p.id, body) : createPolicy({ ...body, scope, scope_id: scope === "global" ? null : subject.trim() })),
            {
              onSuccess: () => {
                props.onDone();
                props.onClose();
              },
            },
          );
        }}
      >
        {!p && (
          <div class="form-row">
            <Field id="policy-scope" label="Scope" error={fields.scope}>
              <select id="policy-scope" value={scope} onChange={(e) => setScope((e.target as HTMLSelectElement).value as Scope)}>
                <option value="global">Global</option>
                <option value="group">Group</option>
                <option value="user">User</option>
              </select>
            </Field>
            {scope === "group" && (
              <Field id="policy-subject" label="Group" error={fields.scope_id}>
                <select id="policy-subject" required value={subject} onChange={(e) => setSubject((e.target as HTMLSelectElement).value)}>
                  <option value="">Choose…</option>
                  {props.groups
                    .filter((g) => g.created_at != null)
                    .map((g) => (
                      <option key={g.name} value={g.name}>
                        {g.name}
                      </option>
                    ))}
                </select>
              </Field>
            )}
            {scope === "user" && (
              <Field id="policy-subject" label="Username" error={fields.scope_id}>
                <input
                  id="policy-subject"
                  required
                  autocomplete="off"
                  value={subject}
                  onInput={(e) => setSubject((e.target as HTMLInputElement).value)}
                  {...invalidProps("policy-subject", fields.scope_id)}
                />
              </Field>
            )}
          </div>
        )}
        <p class="hint">Leave a field blank to inherit it (user → group → global); 0 means no limit (for session counts: none allowed).</p>
        <div class="form-grid">
          {POLICY_NUMBERS.map((f) => numberField(f.key, f.label, f.unit))}
          {LIMIT_NUMBERS.map((f) => numberField(f.key, f.label, f.unit))}
          {(p?.scope ?? scope) !== "global" && numberField("gpu_hours_month", "GPU-hour budget", "per month")}
          <Field id="policy-runtime-action" label="At the runtime limit" error={fields.max_runtime_action}>
            <select
              id="policy-runtime-action"
              value={runtimeAction}
              onChange={(e) => setRuntimeAction((e.target as HTMLSelectElement).value as RuntimeAction | "")}
            >
              <option value="">inherited</option>
              {RUNTIME_ACTIONS.map((a) => (
                <option key={a.value} value={a.value}>
                  {a.label}
                </option>
              ))}
            </select>
          </Field>
          <Field id="policy-shared-pool" label="Spill onto shared nodes">
            <select
              id="policy-shared-pool"
              value={sharedPool}
              onChange={(e) => setSharedPool((e.target as HTMLSelectElement).value as Flag)}
            >
              <option value="">inherited</option>
              <option value="yes">yes</option>
              <option value="no">no</option>
            </select>
          </Field>
          <Field id="policy-privileged" label="Privileged sessions">
            <select
              id="policy-privileged"
              value={privileged}
              onChange={(e) => setPrivileged((e.target as HTMLSelectElement).value as Flag)}
            >
              <option value="">inherited</option>
              <option value="yes">yes</option>
              <option value="no">no</option>
            </select>
          </Field>
        </div>
        {Object.keys(fields).length === 0 && (
          <ErrorBox error={error} title="Not saved">
            <Advice error={error} />
          </ErrorBox>
        )}
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Saving…" : p ? "Save policy" : "Create policy"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

function PoolDialog(props: { groups: Group[]; onClose: () => void; onDone: () => void }) {
  const clusters = usePoll((signal) => listClusters(signal), 0);
  const [clusterId, setClusterId] = useState("");
  const cluster = clusterId || clusters.data?.[0]?.id || "";
  const nodes = usePoll((signal) => (cluster ? listNodes(cluster, signal) : Promise.resolve([])), 0, [cluster]);
  const [name, setName] = useState("");
  const [kind, setKind] = useState<PoolKind>("dedicated");
  const [picked, setPicked] = useState<string[]>([]);
  const [groups, setGroups] = useState<string[]>([]);
  const { busy, error, run } = useAction();
  const fields = serverFieldMessages(error);
  const toggle = (list: string[], v: string, on: boolean) => (on ? [...list, v] : list.filter((x) => x !== v));
  return (
    <Dialog title="New node pool" onClose={props.onClose} wide>
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          run(() => createPool({ cluster_id: cluster, name: name.trim(), kind, nodes: picked, groups }), {
            onSuccess: () => {
              props.onDone();
              props.onClose();
            },
          });
        }}
      >
        <div class="form-row">
          <Field id="pool-name" label="Name" error={fields.name}>
            <input
              id="pool-name"
              required
              autoFocus
              autocomplete="off"
              value={name}
              onInput={(e) => setName((e.target as HTMLInputElement).value)}
              {...invalidProps("pool-name", fields.name)}
            />
          </Field>
          <Field id="pool-cluster" label="Cluster" error={fields.cluster_id}>
            <select
              id="pool-cluster"
              value={cluster}
              onChange={(e) => {
                setClusterId((e.target as HTMLSelectElement).value);
                setPicked([]);
              }}
            >
              {(clusters.data ?? []).map((c) => (
                <option key={c.id} value={c.id}>
                  {c.name}
                </option>
              ))}
            </select>
          </Field>
          <Field id="pool-kind" label="Kind">
            <select id="pool-kind" value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value as PoolKind)}>
              <option value="dedicated">Dedicated: only its groups</option>
              <option value="shared">Shared: everyone</option>
            </select>
          </Field>
        </div>
        <fieldset class="choices">
          <legend>Nodes</legend>
          {nodes.loading && !nodes.data && <p class="loading">Loading nodes…</p>}
          {nodes.data?.length === 0 && <p class="muted">This cluster reports no node yet.</p>}
          {(nodes.data ?? []).map((nd) => (
            <label class="check" key={nd.name}>
              <input
                type="checkbox"
                checked={picked.includes(nd.name)}
                disabled={nd.pool_id != null}
                onChange={(e) => setPicked(toggle(picked, nd.name, (e.target as HTMLInputElement).checked))}
              />{" "}
              {nd.name}
              {nd.pool_name && <span class="muted small"> (in {nd.pool_name})</span>}
            </label>
          ))}
        </fieldset>
        <fieldset class="choices">
          <legend>Reserved for</legend>
          {props.groups.filter((g) => g.created_at != null).length === 0 && <p class="muted">No group yet: create one first.</p>}
          {props.groups
            .filter((g) => g.created_at != null)
            .map((g) => (
              <label class="check" key={g.name}>
                <input
                  type="checkbox"
                  checked={groups.includes(g.name)}
                  onChange={(e) => setGroups(toggle(groups, g.name, (e.target as HTMLInputElement).checked))}
                />{" "}
                {g.name}
              </label>
            ))}
        </fieldset>
        <ErrorBox error={error} title="Not created">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== "" || !cluster}>
            {busy ? "Creating…" : "Create pool"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

type Open =
  | { kind: "group" }
  | { kind: "member"; group: string }
  | { kind: "policy"; policy?: Policy }
  | { kind: "pool" }
  | { kind: "delete"; title: string; what: string; action: () => Promise<unknown> };

const SCOPE_ORDER: Scope[] = ["global", "group", "user"];

export function GroupsPage() {
  const groups = usePoll((signal) => listGroups(signal), 15000);
  const policies = usePoll((signal) => listPolicies(signal), 15000);
  const pools = usePoll((signal) => listPools(signal), 15000);
  const [open, setOpen] = useState<Open | null>(null);
  const reload = () => {
    groups.reload();
    policies.reload();
    pools.reload();
  };
  const allGroups = groups.data?.data ?? [];
  const allPolicies = policies.data?.data ?? [];
  const allPools = pools.data?.data ?? [];
  const close = () => setOpen(null);
  return (
    <section aria-labelledby="groups-title" class="groups-page">
      <div class="toolbar">
        <h1 id="groups-title">Groups &amp; policies</h1>
        {groups.data && (
          <span class="muted summary">
            {plural(allGroups.length, "group")} · {plural(allPolicies.length, "policy", "policies")} ·{" "}
            {plural(allPools.length, "node pool")}
          </span>
        )}
      </div>
      <ErrorBox error={groups.error ?? policies.error ?? pools.error} title="Cannot load groups and policies" />

      <div class="toolbar">
        <h2 id="groups-list">Groups</h2>
        <span class="grow" />
        <button type="button" class="primary" onClick={() => setOpen({ kind: "group" })}>
          New group…
        </button>
      </div>
      {groups.loading && !groups.data && <p class="loading">Loading groups…</p>}
      {groups.data && allGroups.length === 0 && (
        <p class="muted">No group yet. A user is in one group; its policy and node pools apply to them.</p>
      )}
      {allGroups.length > 0 && (
        <div class="table-wrap" role="region" aria-labelledby="groups-list" tabIndex={0}>
          <table class="groups-table">
            <thead>
              <tr>
                <th scope="col">Group</th>
                <th scope="col">Members</th>
                <th scope="col">Policy</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {allGroups.map((g) => (
                <tr key={g.name} data-group={g.name}>
                  <th scope="row">
                    {g.name}
                    {g.description && <div class="muted small">{g.description}</div>}
                    {g.created_at == null && <div class="muted small">named by accounts only</div>}
                  </th>
                  <td>{g.members.length ? g.members.join(", ") : <span class="muted">none</span>}</td>
                  <td>{g.policy_id ? "own policy" : <span class="muted">global only</span>}</td>
                  <td class="actions">
                    {g.created_at != null && (
                      <>
                        <button
                          type="button"
                          aria-label={`Add member to ${g.name}`}
                          onClick={() => setOpen({ kind: "member", group: g.name })}
                        >
                          Add member…
                        </button>{" "}
                        <button
                          type="button"
                          class="danger"
                          aria-label={`Delete group ${g.name}`}
                          onClick={() =>
                            setOpen({ kind: "delete", title: "Delete group", what: `group ${g.name}`, action: () => deleteGroup(g.name) })
                          }
                        >
                          Delete…
                        </button>
                      </>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      <div class="toolbar">
        <h2 id="policies-list">Resource policies</h2>
        <span class="grow" />
        <button type="button" class="primary" onClick={() => setOpen({ kind: "policy" })}>
          New policy…
        </button>
      </div>
      <p class="hint">Merged per field, user → group → global. Blank cells are inherited.</p>
      {policies.loading && !policies.data && <p class="loading">Loading policies…</p>}
      {policies.data && allPolicies.length === 0 && <p class="muted">No policy: nothing is limited.</p>}
      {allPolicies.length > 0 && (
        <div class="table-wrap" role="region" aria-labelledby="policies-list" tabIndex={0}>
          <table class="policies-table">
            <thead>
              <tr>
                <th scope="col">Scope</th>
                {POLICY_NUMBERS.map((f) => (
                  <th scope="col" class="num" key={f.key}>
                    {f.label}
                  </th>
                ))}
                {LIMIT_NUMBERS.map((f) => (
                  <th scope="col" class="num" key={f.key}>
                    {f.label}
                  </th>
                ))}
                <th scope="col" class="num">
                  GPU-h / month
                </th>
                <th scope="col">At runtime limit</th>
                <th scope="col">Spill</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {[...allPolicies]
                .sort((a, b) => SCOPE_ORDER.indexOf(a.scope) - SCOPE_ORDER.indexOf(b.scope) || a.scope_id.localeCompare(b.scope_id))
                .map((p) => {
                  const label = p.scope === "global" ? "Global" : `${p.scope} ${p.scope_id}`;
                  return (
                    <tr key={p.id} data-policy={`${p.scope}:${p.scope_id}`}>
                      <th scope="row">{label}</th>
                      {POLICY_NUMBERS.map((f) => (
                        <td class="num" key={f.key}>
                          {valueText(
                            p[f.key],
                            f.unit,
                            f.key === "max_concurrent" || f.key === "max_queued"
                              ? "none"
                              : f.key === "idle_timeout_sec"
                                ? "never"
                                : "no limit",
                          )}
                        </td>
                      ))}
                      {LIMIT_NUMBERS.map((f) => (
                        <td class="num" key={f.key}>
                          {valueText(p.limits[f.key], f.unit)}
                        </td>
                      ))}
                      <td class="num">
                        {p.gpu_hours_month ? p.gpu_hours_month.toLocaleString("en") : <span class="muted">no budget</span>}
                      </td>
                      <td>{runtimeActionText(p.max_runtime_action)}</td>
                      <td>{valueText(p.limits.shared_pool)}</td>
                      <td class="actions">
                        <button type="button" aria-label={`Edit ${label} policy`} onClick={() => setOpen({ kind: "policy", policy: p })}>
                          Edit…
                        </button>{" "}
                        <button
                          type="button"
                          class="danger"
                          aria-label={`Delete ${label} policy`}
                          onClick={() =>
                            setOpen({
                              kind: "delete",
                              title: "Delete policy",
                              what: `the ${label} policy`,
                              action: () => deletePolicy(p.id),
                            })
                          }
                        >
                          Delete…
                        </button>
                      </td>
                    </tr>
                  );
                })}
            </tbody>
          </table>
        </div>
      )}

      <div class="toolbar">
        <h2 id="pools-list">Node pools</h2>
        <span class="grow" />
        <button type="button" class="primary" onClick={() => setOpen({ kind: "pool" })}>
          New node pool…
        </button>
      </div>
      <p class="hint">
        A dedicated pool's nodes take only its groups' sessions; those groups stay on it unless their policy lets them spill onto shared
        nodes.
      </p>
      {pools.loading && !pools.data && <p class="loading">Loading node pools…</p>}
      {pools.data && allPools.length === 0 && <p class="muted">No node pool: every node is shared.</p>}
      {allPools.length > 0 && (
        <div class="table-wrap" role="region" aria-labelledby="pools-list" tabIndex={0}>
          <table class="pools-table">
            <thead>
              <tr>
                <th scope="col">Pool</th>
                <th scope="col">Cluster</th>
                <th scope="col">Reserved for</th>
                <th scope="col">Nodes</th>
                <th scope="col" class="num">
                  GPUs used
                </th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {allPools.map((p: NodePool) => (
                <tr key={p.id} data-pool={p.name}>
                  <th scope="row">
                    {p.name}
                    <div class="muted small">{p.kind}</div>
                  </th>
                  <td>{p.cluster_name ?? p.cluster_id}</td>
                  <td>
                    {p.kind === "shared" ? <span class="muted">everyone</span> : p.groups.join(", ") || <span class="muted">no group</span>}
                  </td>
                  <td>
                    {p.nodes.length ? (
                      p.nodes.map((n) => n.hostname + (n.status === "ready" ? "" : ` (${n.status})`)).join(", ")
                    ) : (
                      <span class="muted">none</span>
                    )}
                  </td>
                  <td class="num">
                    {p.gpus_used} / {p.gpus_total}
                  </td>
                  <td class="actions">
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete node pool ${p.name}`}
                      onClick={() =>
                        setOpen({
                          kind: "delete",
                          title: "Delete node pool",
                          what: `node pool ${p.name} (its nodes become shared)`,
                          action: () => deletePool(p.id),
                        })
                      }
                    >
                      Delete…
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      {open?.kind === "group" && <GroupDialog onClose={close} onDone={reload} />}
      {open?.kind === "member" && <MemberDialog group={open.group} onClose={close} onDone={reload} />}
      {open?.kind === "policy" && <PolicyDialog policy={open.policy} groups={allGroups} onClose={close} onDone={reload} />}
      {open?.kind === "pool" && <PoolDialog groups={allGroups} onClose={close} onDone={reload} />}
      {open?.kind === "delete" && (
        <ConfirmDelete title={open.title} what={open.what} action={open.action} onClose={close} onDone={reload} />
      )}
    </section>
  );
}
