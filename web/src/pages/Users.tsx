// Users (admins only): the lab's accounts. List with filters and pages; create one (a generated
// first password shown once, with a copy button), import many from CSV (pasted or a file, a
// result per row, all or nothing), reset a password, make an invite link, disable / enable,
// promote / demote, delete (with a confirmation), and export the list as CSV.

import { useState } from "preact/hooks";
import { request, type Schemas } from "../api";
import { Advice } from "../components/Advice";
import { CopyButton } from "../components/Copy";
import { Dialog } from "../components/Dialog";
import { ErrorBox } from "../components/Errors";
import { Field, invalidProps } from "../components/Field";
import { ListPage } from "../components/ListPage";
import { Pager } from "../components/Pager";
import { serverFieldMessages } from "../form";
import { formatTime, plural } from "../format";
import { useAction } from "../hooks";
import { useLivePoll } from "../live";
import { listVolumes, reclaimOwner, type Volume } from "../volumes";

export type User = Schemas["AccountSummary"];
type UserList = Schemas["UserList"];
type Role = Schemas["UserRole"];

const PAGE_SIZE = 50;

export interface UserFilters {
  role?: string;
  group?: string;
  q?: string;
  disabled?: string;
}

/** The list's query string (empty filters left out). */
export function usersQuery(f: UserFilters & { page?: number; size?: number; format?: "csv" }): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v !== undefined && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

const path = (name: string, suffix = "") => `/api/v1/users/${encodeURIComponent(name)}${suffix}`;
const listUsers = (qs: string, signal?: AbortSignal) => request<UserList>("GET", `/api/v1/users${qs}`, { signal });
const createUser = (body: Schemas["NewUser"]) => request<Schemas["CreatedUser"]>("POST", "/api/v1/users", { body });
const patchUser = (name: string, body: Schemas["UserPatch"]) => request<User>("PATCH", path(name), { body });
const deleteUser = (name: string) => request<void>("DELETE", path(name));
const resetPassword = (name: string) => request<Schemas["ResetPassword"]>("POST", path(name, "/password"));
const inviteUser = (name: string) => request<Schemas["InviteLink"]>("POST", path(name, "/invite"));
const importCsv = (text: string) =>
  request<Schemas["BulkCreated"]>("POST", "/api/v1/users/bulk", { raw: { contentType: "text/csv", text } });

/** A secret shown this once: the password or the link, with a copy button. */
function Secret(props: { label: string; value: string }) {
  return (
    <div class="secret">
      <div class="command-label">{props.label}</div>
      <pre>
        <code>{props.value}</code>
      </pre>
      <CopyButton text={props.value} label={`Copy ${props.label.toLowerCase()}`} />
    </div>
  );
}

function NewUserDialog(props: { onClose: () => void; onSaved: () => void }) {
  const [username, setUsername] = useState("");
  const [role, setRole] = useState<Role>("member");
  const [group, setGroup] = useState("");
  const [invite, setInvite] = useState(false);
  const [created, setCreated] = useState<Schemas["CreatedUser"] | null>(null);
  const { busy, error, run } = useAction();
  const fields = serverFieldMessages(error);
  if (created)
    return (
      <Dialog title="User created" onClose={props.onClose}>
        <div class="dialog-body">
          {created.invite ? (
            <p>
              Send <strong>{created.user.username}</strong> ({created.user.role}) this invite link: it works once, until{" "}
              {formatTime(created.invite.expires_at)}, and they choose their own password with it. It is shown only now.
            </p>
          ) : (
            <p>
              <strong>{created.user.username}</strong> ({created.user.role}) can sign in with this first password. It is shown only now;
              they choose their own at first sign-in.
            </p>
          )}
          {created.invite && <Secret label="Invite link" value={created.invite.url} />}
          {created.password && <Secret label="First password" value={created.password} />}
          <footer class="dialog-foot">
            <button type="button" class="primary" autoFocus onClick={props.onClose}>
              Done
            </button>
          </footer>
        </div>
      </Dialog>
    );
  return (
    <Dialog title="New user" onClose={props.onClose}>
      <form
        class="dialog-body"
        onSubmit={(e) => {
          e.preventDefault();
          run(() => createUser({ username: username.trim(), role, group: group.trim() || null, password: null, invite }), {
            key: "create",
            onSuccess: (c) => {
              setCreated(c);
              props.onSaved();
            },
          });
        }}
      >
        <Field id="nu-name" label="Username" error={fields.username}>
          <input
            id="nu-name"
            value={username}
            required
            maxLength={64}
            autoComplete="off"
            onInput={(e) => setUsername((e.target as HTMLInputElement).value)}
            {...invalidProps("nu-name", fields.username)}
          />
        </Field>
        <Field id="nu-role" label="Role">
          <select id="nu-role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as Role)}>
            <option value="member">member</option>
            <option value="admin">admin</option>
          </select>
        </Field>
        <Field id="nu-group" label="Group (optional)" error={fields.group}>
          <input
            id="nu-group"
            value={group}
            maxLength={64}
            onInput={(e) => setGroup((e.target as HTMLInputElement).value)}
            {...invalidProps("nu-group", fields.group)}
          />
        </Field>
        <label class="check-line">
          <input type="checkbox" checked={invite} onChange={(e) => setInvite((e.target as HTMLInputElement).checked)} /> Send an invite link
          instead of a password
        </label>
        <p class="muted small">
          {invite
            ? "An invite link (single use, 72 hours) is shown once; the user chooses their own password with it."
            : "A first password is generated and shown once; the user replaces it at first sign-in."}
        </p>
        <ErrorBox error={Object.keys(fields).length ? null : error} title="Cannot create the user">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy !== ""}>
            {busy ? "Creating…" : "Create user"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}

type RowResult = Schemas["BulkResult"];

function ImportDialog(props: { onClose: () => void; onSaved: () => void }) {
  const [text, setText] = useState("username,role,group\n");
  const [done, setDone] = useState<Schemas["BulkCreated"] | null>(null);
  const { busy, error, run } = useAction();
  // A refused import says what is wrong with each row.
  const refused = (error as { details?: { results?: RowResult[] } } | null)?.details?.results;
  const rows: RowResult[] | undefined = done?.results ?? refused;
  return (
    <Dialog title="Import users" onClose={props.onClose} wide>
      <div class="dialog-body">
        {!done && (
          <>
            <p>
              Paste CSV with the header <code>username,role,group</code> (role and group may be empty), or choose a file. Up to 1,000 rows;
              if any row has a problem, nothing is created.
            </p>
            <Field id="imp-file" label="CSV file">
              <input
                id="imp-file"
                type="file"
                accept=".csv,text/csv"
                onChange={(e) => {
                  const f = (e.target as HTMLInputElement).files?.[0];
                  if (f) void f.text().then(setText);
                }}
              />
            </Field>
            <Field id="imp-text" label="CSV">
              <textarea id="imp-text" rows={8} value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
            </Field>
          </>
        )}
        {done && <p role="status">{plural(done.created, "user")} created. The first passwords are shown only now.</p>}
        <ErrorBox error={error} title="Nothing was imported">
          <Advice error={error} />
        </ErrorBox>
        {rows && (
          <div class="table-wrap" role="region" aria-label="Import results" tabIndex={0}>
            <table class="import-results">
              <thead>
                <tr>
                  <th scope="col">Row</th>
                  <th scope="col">Username</th>
                  <th scope="col">Result</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => (
                  <tr key={r.row} class={`import-${r.status}`}>
                    <td class="num">{r.row}</td>
                    <td>
                      <code>{r.username}</code>
                    </td>
                    <td>
                      {r.status === "created" && r.password ? (
                        <>
                          <code>{r.password}</code> <CopyButton text={r.password} label={`Copy ${r.username}'s password`} />
                        </>
                      ) : r.errors && r.errors.length ? (
                        <ul class="row-errors">
                          {r.errors.map((m) => (
                            <li key={m}>{m}</li>
                          ))}
                        </ul>
                      ) : (
                        "ok"
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        {done && (
          <CopyButton
            text={["username,password", ...done.results.map((r) => `${r.username},${r.password ?? ""}`)].join("\n")}
            label="Copy all passwords as CSV"
          />
        )}
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            {done ? "Done" : "Cancel"}
          </button>
          {!done && (
            <button
              type="button"
              class="primary"
              disabled={busy !== ""}
              onClick={() =>
                run(() => importCsv(text), {
                  key: "import",
                  onSuccess: (d) => {
                    setDone(d);
                    props.onSaved();
                  },
                })
              }
            >
              {busy ? "Importing…" : "Import"}
            </button>
          )}
        </footer>
      </div>
    </Dialog>
  );
}

/** Reset a password or make an invite link: asks first, then shows the secret once. */
function SecretDialog(props: { user: User; kind: "reset" | "invite"; onClose: () => void; onChanged: () => void }) {
  const [secret, setSecret] = useState<{ label: string; value: string; note: string } | null>(null);
  const { busy, error, run } = useAction();
  const u = props.user.username;
  const reset = props.kind === "reset";
  return (
    <Dialog title={reset ? "Reset password" : "Invite link"} onClose={props.onClose}>
      <div class="dialog-body">
        {secret ? (
          <>
            <p>{secret.note}</p>
            <Secret label={secret.label} value={secret.value} />
          </>
        ) : reset ? (
          <p>
            Give <strong>{u}</strong> a new generated password? Their current sign-ins end; they choose their own password at the next
            sign-in.
          </p>
        ) : (
          <p>
            Make a single-use link for <strong>{u}</strong> to set their own password? It is good for 72 hours and replaces an unused older
            link.
          </p>
        )}
        <ErrorBox error={error} title={reset ? "Reset failed" : "Cannot make the link"} />
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            {secret ? "Done" : "Cancel"}
          </button>
          {!secret && (
            <button
              type="button"
              class="primary"
              autoFocus
              disabled={busy !== ""}
              onClick={() =>
                run(
                  async () => {
                    if (reset) {
                      const r = await resetPassword(u);
                      return { label: "New password", value: r.password, note: `${u}'s new password, shown only now.` };
                    }
                    const l = await inviteUser(u);
                    return {
                      label: "Invite link",
                      value: l.url,
                      note: `Send this link to ${u}; it works once, until ${formatTime(l.expires_at)}.`,
                    };
                  },
                  {
                    onSuccess: (s) => {
                      setSecret(s);
                      props.onChanged();
                    },
                  },
                )
              }
            >
              {busy ? "Working…" : reset ? "Reset password" : "Make link"}
            </button>
          )}
        </footer>
      </div>
    </Dialog>
  );
}

function DeleteUserDialog(props: { user: User; onClose: () => void; onChanged: () => void }) {
  const { busy, error, run } = useAction();
  const u = props.user.username;
  // Their volumes: kept by default (listed here), or reclaimed with the account.
  const owned = useLivePoll((signal) => listVolumes(new URLSearchParams({ owner: u }).toString(), signal), [], { pollMs: 0 });
  const volumes = owned.data?.data ?? [];
  const [reclaim, setReclaim] = useState(false);
  const [kept, setKept] = useState<Volume[] | null>(null);
  if (kept)
    return (
      <Dialog title="Delete user" onClose={props.onClose}>
        <div class="dialog-body">
          <p role="status">
            {u} is deleted. {plural(kept.length, "volume")} a running session mounts {kept.length === 1 ? "was" : "were"} kept:{" "}
            {kept.map((v) => `${v.kind === "home" ? "home" : v.name} on ${v.cluster_name}`).join(", ")}. End the session, then reclaim it on
            the Volumes page.
          </p>
          <footer class="dialog-foot">
            <button type="button" autoFocus onClick={props.onClose}>
              Close
            </button>
          </footer>
        </div>
      </Dialog>
    );
  return (
    <Dialog title="Delete user" onClose={props.onClose}>
      <div class="dialog-body">
        <p>
          Delete <strong>{u}</strong>? They can no longer sign in and their invite link stops working. Their sessions keep running (end them
          on the Sessions page) and the audit log keeps the name, which is not given to anyone again.
        </p>
        {volumes.length > 0 && (
          <fieldset class="volume-choice">
            <legend>
              Their {plural(volumes.length, "volume")} ({volumes.reduce((n, v) => n + v.size_gb, 0)} GiB)
            </legend>
            <ul class="small">
              {volumes.map((v) => (
                <li key={v.id}>
                  {v.kind === "home" ? "Home" : v.name} on {v.cluster_name}, {v.size_gb} GiB
                  {v.mounted_by.length > 0 && <span class="muted"> (mounted by a running session)</span>}
                </li>
              ))}
            </ul>
            <label class="check">
              <input type="radio" name="volumes" checked={!reclaim} onChange={() => setReclaim(false)} /> Keep them (listed under {u} on the
              Volumes page)
            </label>
            <label class="check">
              <input type="radio" name="volumes" checked={reclaim} onChange={() => setReclaim(true)} /> Reclaim them: their clusters delete
              the claims and the data (a mounted one is kept)
            </label>
          </fieldset>
        )}
        <ErrorBox error={error} title="Delete refused">
          <Advice error={error} />
        </ErrorBox>
        <footer class="dialog-foot">
          <button type="button" autoFocus onClick={props.onClose}>
            Keep {u}
          </button>
          <button
            type="button"
            class="danger"
            disabled={busy !== ""}
            onClick={() =>
              run(
                async () => {
                  await deleteUser(u);
                  return reclaim ? await reclaimOwner(u) : null;
                },
                {
                  onSuccess: (r) => {
                    props.onChanged();
                    if (r && r.kept.length > 0) setKept(r.kept);
                    else props.onClose();
                  },
                },
              )
            }
          >
            {busy ? "Deleting…" : `Delete ${u}`}
          </button>
        </footer>
      </div>
    </Dialog>
  );
}

type DialogState = { kind: "new" | "import" } | { kind: "reset" | "invite" | "delete"; user: User } | null;

/** `me`: the signed-in admin, whose own row offers no disable, demote or delete (the server refuses them). */
export function UsersPage(props: { me?: string } = {}) {
  const [filters, setFilters] = useState<UserFilters>({});
  const [page, setPage] = useState(1);
  const qs = usersQuery({ ...filters, page, size: PAGE_SIZE });
  const polled = useLivePoll((signal) => listUsers(qs, signal), [], { deps: [qs], pollMs: 30000 });
  const [dialog, setDialog] = useState<DialogState>(null);
  const rowAction = useAction();
  const filter = (k: keyof UserFilters) => (v: string) => {
    setFilters({ ...filters, [k]: v });
    setPage(1);
  };
  const users = polled.data?.data ?? [];
  const p = polled.data?.pagination;
  const filtered = Object.values(filters).some((v) => v);
  const change = (u: User, patch: Schemas["UserPatch"], key: string) =>
    rowAction.run(() => patchUser(u.username, patch), { key: `${key}:${u.username}`, onSuccess: () => polled.reload() });
  return (
    <ListPage
      id="users"
      title="Users"
      noun="users"
      polled={polled}
      summary={<span class="muted summary">{plural(p?.total ?? 0, "user")}</span>}
      tools={
        <>
          <div class="filters">
            <input
              type="search"
              aria-label="Search by name"
              placeholder="Search by name"
              value={filters.q ?? ""}
              onInput={(e) => filter("q")((e.target as HTMLInputElement).value)}
            />
            <select
              aria-label="Filter by role"
              value={filters.role ?? ""}
              onChange={(e) => filter("role")((e.target as HTMLSelectElement).value)}
            >
              <option value="">All roles</option>
              <option value="admin">admin</option>
              <option value="member">member</option>
            </select>
            <input
              aria-label="Filter by group"
              placeholder="Group"
              value={filters.group ?? ""}
              onInput={(e) => filter("group")((e.target as HTMLInputElement).value)}
            />
            <select
              aria-label="Filter by state"
              value={filters.disabled ?? ""}
              onChange={(e) => filter("disabled")((e.target as HTMLSelectElement).value)}
            >
              <option value="">Enabled and disabled</option>
              <option value="false">Enabled</option>
              <option value="true">Disabled</option>
            </select>
          </div>
          <a href={`/api/v1/users${usersQuery({ ...filters, format: "csv" })}`} download="users.csv">
            Export CSV
          </a>
          <button type="button" onClick={() => setDialog({ kind: "import" })}>
            Import
          </button>
          <button type="button" class="primary" onClick={() => setDialog({ kind: "new" })}>
            New user
          </button>
        </>
      }
      isEmpty={users.length === 0}
      empty={<div class="empty">{filtered ? <p>No user matches these filters.</p> : <p>No user yet.</p>}</div>}
      showTable={users.length > 0}
      regionLabel="User list"
      after={
        <>
          {p && <Pager label="User pages" page={page} totalPages={p.total_pages} onPage={setPage} />}
          <ErrorBox error={rowAction.error} title="The change was refused">
            <Advice error={rowAction.error} />
          </ErrorBox>
          {dialog?.kind === "new" && <NewUserDialog onClose={() => setDialog(null)} onSaved={() => polled.reload()} />}
          {dialog?.kind === "import" && <ImportDialog onClose={() => setDialog(null)} onSaved={() => polled.reload()} />}
          {(dialog?.kind === "reset" || dialog?.kind === "invite") && (
            <SecretDialog user={dialog.user} kind={dialog.kind} onClose={() => setDialog(null)} onChanged={() => polled.reload()} />
          )}
          {dialog?.kind === "delete" && (
            <DeleteUserDialog user={dialog.user} onClose={() => setDialog(null)} onChanged={() => polled.reload()} />
          )}
        </>
      }
    >
      <table class="users">
        <thead>
          <tr>
            <th scope="col">User</th>
            <th scope="col">Role</th>
            <th scope="col">Group</th>
            <th scope="col">State</th>
            <th scope="col">Created</th>
            <th scope="col">
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {users.map((u) => {
            const busy = rowAction.busy.endsWith(`:${u.username}`);
            const self = u.username === props.me;
            return (
              <tr key={u.username} class="user-row" data-username={u.username}>
                <td>
                  <span class="user-name">{u.username}</span>
                  {self && <span class="muted small"> (you)</span>}
                  {u.source && u.source !== "local" && (
                    <span
                      class="badge user-source"
                      title={
                        u.source === "ldap"
                          ? "signs in with the lab's directory (LDAP)"
                          : "signs in with the lab's single sign-on (OpenID Connect)"
                      }
                    >
                      {u.source}
                    </span>
                  )}
                </td>
                <td>{u.role}</td>
                <td>{u.group ?? <span class="muted">—</span>}</td>
                <td>
                  <span class={`badge user-${u.disabled ? "disabled" : "enabled"}`}>{u.disabled ? "disabled" : "enabled"}</span>
                  {u.must_change_password && <span class="badge nowrap">password to change</span>}
                </td>
                <td>{formatTime(u.created_at)}</td>
                <td class="actions">
                  {!self && (
                    <>
                      <button
                        type="button"
                        disabled={busy}
                        aria-label={`${u.disabled ? "Enable" : "Disable"} ${u.username}`}
                        onClick={() => change(u, { disabled: !u.disabled }, "disable")}
                      >
                        {u.disabled ? "Enable" : "Disable"}
                      </button>{" "}
                      <button
                        type="button"
                        disabled={busy}
                        aria-label={`${u.role === "admin" ? "Demote" : "Promote"} ${u.username}`}
                        onClick={() => change(u, { role: u.role === "admin" ? "member" : "admin" }, "role")}
                      >
                        {u.role === "admin" ? "Make member" : "Make admin"}
                      </button>{" "}
                    </>
                  )}
                  <button type="button" aria-label={`Reset ${u.username}'s password`} onClick={() => setDialog({ kind: "reset", user: u })}>
                    Reset password
                  </button>{" "}
                  <button type="button" aria-label={`Invite link for ${u.username}`} onClick={() => setDialog({ kind: "invite", user: u })}>
                    Invite link
                  </button>{" "}
                  {!self && (
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Delete ${u.username}`}
                      onClick={() => setDialog({ kind: "delete", user: u })}
                    >
                      Delete
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </ListPage>
  );
}
