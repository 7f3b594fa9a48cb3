// Create or edit an offering: name, class, image, the GPU share (GPU offerings), CPU / memory /
// disk, idle timeout and max runtime; editing also (de)activates it. Fields the server refuses are
// marked; its message says why.

import { useState } from "preact/hooks";
import { useAction, usePoll } from "../hooks";
import { formatDuration, formatMib } from "../format";
import { getOverview } from "../overview";
import { ApiError } from "../api";
import { imageProblem, onlyFieldErrors, sentence, serverFieldMessages } from "../form";
import { FieldError, invalidProps } from "./Field";
import { createOffering, patchOffering, type GpuMode, type Offering, type OfferingBody, type ResourceClass } from "../offerings";
import { Dialog } from "./Dialog";
import { ErrorBox } from "./Errors";

type NumField = "gpu_mem_mb" | "gpu_cores" | "cpu" | "mem_gb" | "disk_gb" | "idle_timeout_sec" | "max_runtime_sec";

interface Form {
  name: string;
  resource_class: ResourceClass;
  image: string;
  mode: GpuMode;
  gpu_model: string;
  gpu_mem_mb: string;
  gpu_cores: string;
  cpu: string;
  mem_gb: string;
  disk_gb: string;
  idle_timeout_sec: string;
  max_runtime_sec: string;
  status: "active" | "inactive";
}

const str = (n: number | null | undefined) => (n == null ? "" : String(n));

function formOf(o?: Offering): Form {
  return {
    name: o?.name ?? "",
    resource_class: o?.resource_class ?? "gpu",
    image: o?.image ?? "",
    mode: o?.mode ?? "fractional",
    gpu_model: o?.gpu_model ?? "",
    gpu_mem_mb: str(o?.gpu_mem_mb),
    gpu_cores: str(o?.gpu_cores),
    // A new offering shows the server's defaults (1 CPU, 4 GB, 10 GB disk) rather than leaving
    // them unsaid: what is in the fields is what sessions get.
    cpu: o ? str(o.cpu) : "1",
    mem_gb: o ? str(o.mem_gb) : "4",
    disk_gb: o ? str(o.disk_gb) : "10",
    idle_timeout_sec: o ? str(o.idle_timeout_sec) : "1800",
    max_runtime_sec: o ? str(o.max_runtime_sec) : "0",
    status: o?.status === "inactive" ? "inactive" : "active",
  };
}

const num = (s: string) => (s.trim() === "" ? null : Number(s));

/** The request body: every set field for a new offering; only what changed for an edit. */
export function offeringBody(f: Form, original?: Offering): OfferingBody {
  const gpu = f.resource_class === "gpu";
  const full: OfferingBody = {
    name: f.name.trim(),
    resource_class: f.resource_class,
    image: f.image.trim(),
    mode: gpu ? f.mode : null,
    gpu_model: gpu && f.gpu_model.trim() ? f.gpu_model.trim() : null,
    gpu_mem_mb: gpu ? num(f.gpu_mem_mb) : null,
    gpu_cores: gpu ? num(f.gpu_cores) : null,
    cpu: num(f.cpu),
    mem_gb: num(f.mem_gb),
    disk_gb: num(f.disk_gb),
    idle_timeout_sec: num(f.idle_timeout_sec),
    max_runtime_sec: num(f.max_runtime_sec),
  };
  const body: Record<string, unknown> = {};
  if (!original) {
    for (const [k, v] of Object.entries(full)) if (v !== null && v !== "") body[k] = v;
    return body;
  }
  // The class is fixed once created, and a PATCH's null means "unchanged": neither is sent.
  for (const [k, v] of Object.entries(full)) {
    const was = (original as unknown as Record<string, unknown>)[k] ?? null;
    if (k !== "resource_class" && v !== null && v !== was) body[k] = v;
  }
  if (f.status !== original.status) body.status = f.status;
  return body;
}

const intIn = (v: string, lo: number, hi: number, what: string): string => {
  if (v.trim() === "") return "";
  const n = Number(v);
  return Number.isInteger(n) && n >= lo && n <= hi ? "" : `${what} between ${lo} and ${hi}.`;
};

/**
 * Everything wrong with the form at once, one message per field, before anything is sent (the
 * server checks the same and answers with the first problem only).
 */
export function formProblems(f: Form, editing: boolean): Record<string, string> {
  const gpu = f.resource_class === "gpu";
  const out: Record<string, string> = {
    name: !f.name.trim()
      ? "Required: a name people pick sessions by, e.g. a100-20g."
      : f.name.trim().length > 80
        ? "At most 80 characters."
        : "",
    image: imageProblem(f.image),
    gpu_mem_mb: !gpu
      ? ""
      : f.gpu_mem_mb.trim() === ""
        ? editing
          ? ""
          : "Required for a GPU offering: the GPU memory each session gets, in MiB (e.g. 20480)."
        : intIn(f.gpu_mem_mb, 1, 1048576, "Whole MiB"),
    gpu_cores: !gpu
      ? ""
      : f.gpu_cores.trim() === ""
        ? !editing && f.mode === "fractional"
          ? "Required for a fractional GPU offering: the share of the card's cores, 0–100 %."
          : ""
        : intIn(f.gpu_cores, 0, 100, "A percentage"),
    cpu: intIn(f.cpu, 1, 1024, "Whole cores"),
    mem_gb: intIn(f.mem_gb, 1, 16384, "Whole GB"),
    disk_gb: intIn(f.disk_gb, 1, 65536, "Whole GB"),
    idle_timeout_sec: intIn(f.idle_timeout_sec, 0, 604800, "Seconds"),
    max_runtime_sec: intIn(f.max_runtime_sec, 0, 604800, "Seconds"),
  };
  for (const k of Object.keys(out)) if (!out[k]) delete out[k];
  return out;
}

const SHOWN = [
  "name",
  "image",
  "gpu_model",
  "gpu_mem_mb",
  "gpu_cores",
  "cpu",
  "mem_gb",
  "disk_gb",
  "idle_timeout_sec",
  "max_runtime_sec",
  "mode",
];

/** The card models the fleet reports, for the GPU model field's suggestions (none when unknown). */
export function fleetModels(o: { clusters?: { nodes?: { models?: string[] }[] }[] } | undefined): string[] {
  const all = new Set<string>();
  for (const c of o?.clusters ?? []) for (const n of c.nodes ?? []) for (const m of n.models ?? []) if (m) all.add(m);
  return [...all].sort();
}

/** A number field's value in words: "= 20 GiB", "= 30m"; "" when empty or not a number. */
function inWords(k: NumField, v: string): string {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) return "";
  if (k === "gpu_mem_mb") return n >= 1024 ? `= ${formatMib(n)}` : "";
  if (k === "idle_timeout_sec") return `= ${formatDuration(n, "never times out")}`;
  if (k === "max_runtime_sec") return `= ${formatDuration(n, "no cap")}`;
  return "";
}

export function OfferingDialog(props: { offering?: Offering; onClose: () => void; onSaved: (o: Offering) => void }) {
  const original = props.offering;
  // What the fleet has: the GPU model is picked from it (or typed, for cards not there yet).
  const overview = usePoll((signal) => getOverview(signal), 0);
  const models = fleetModels(overview.data);
  const [f, setF] = useState<Form>(() => formOf(original));
  const { busy: running, error, setError, run } = useAction();
  const busy = running !== "";
  const body = offeringBody(f, original);
  const dirty = !original || Object.keys(body).length > 0;
  const [checked, setChecked] = useState(false);
  const local = checked ? formProblems(f, !!original) : {};
  const server = serverFieldMessages(error);
  if (error instanceof ApiError && error.code === "conflict") server.name = server.name || sentence(error.message);
  const msg = (k: string) => local[k] || server[k] || "";
  const bad = { has: (k: string) => !!msg(k) };

  const set = (k: keyof Form) => (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement | HTMLSelectElement).value });
  const field = (k: keyof Form, label: string, extra: Record<string, unknown> = {}, help = "") => (
    <div class="field">
      <label>
        {label}
        <input
          name={k}
          value={f[k]}
          onInput={set(k)}
          {...invalidProps(`off-${k}`, msg(k), help ? `off-${k}-help` : undefined)}
          {...extra}
        />
      </label>
      <FieldError id={`off-${k}-error`} message={msg(k)} />
      {help && (
        <p class="small muted help" id={`off-${k}-help`}>
          {help}
        </p>
      )}
    </div>
  );
  const number = (k: NumField, label: string, extra: Record<string, unknown> = {}) =>
    field(k, label, { type: "number", inputMode: "numeric", step: 1, min: 0, ...extra }, inWords(k, f[k]));

  const submit = (e: Event) => {
    e.preventDefault();
    if (busy || !dirty) return;
    setChecked(true);
    const problems = formProblems(f, !!original);
    if (Object.keys(problems).length) {
      setError(null);
      // Focus the first field that needs attention.
      (e.target as HTMLFormElement).querySelector<HTMLElement>(`[name="${Object.keys(problems)[0]}"]`)?.focus();
      return;
    }
    run(async () => {
      const o = original ? await patchOffering(original.id, body) : await createOffering(body);
      props.onSaved(o);
      props.onClose();
    });
  };

  return (
    <Dialog title={original ? `Edit ${original.name}` : "New offering"} onClose={props.onClose} wide>
      <form class="dialog-body form" onSubmit={submit} noValidate>
        {original && (
          <p class="small muted">
            <code>{original.id}</code>
          </p>
        )}
        {field("name", "Name", { required: true, maxLength: 80, autocomplete: "off", autoFocus: true })}
        <label>
          Resource class
          <select
            name="resource_class"
            aria-label="Resource class"
            value={f.resource_class}
            disabled={!!original}
            onChange={set("resource_class")}
            aria-invalid={bad.has("resource_class") || undefined}
          >
            <option value="gpu">gpu</option>
            <option value="cpu">cpu</option>
          </select>
          {original && <span class="small muted">fixed once created; create another offering for the other class</span>}
        </label>
        {field("image", "Image", {
          required: true,
          placeholder: "registry.example.com/team/notebook:tag",
          spellcheck: false,
          autocomplete: "off",
        })}
        {f.resource_class === "gpu" && (
          <fieldset>
            <legend>GPU</legend>
            <label>
              Mode
              <select name="mode" aria-label="Mode" value={f.mode} onChange={set("mode")} aria-invalid={bad.has("mode") || undefined}>
                <option value="fractional">fractional (a share of one GPU)</option>
                <option value="exclusive">exclusive (a whole GPU)</option>
              </select>
            </label>
            {field(
              "gpu_model",
              "GPU model",
              { placeholder: "any", autocomplete: "off", list: "off-gpu-models" },
              models.length ? `The fleet has: ${models.join(", ")}. Empty: any model.` : "Empty: any model.",
            )}
            <datalist id="off-gpu-models">
              {models.map((m) => (
                <option key={m} value={m} />
              ))}
            </datalist>
            {number("gpu_mem_mb", "GPU memory (MiB)")}
            {number("gpu_cores", "GPU cores (%)", { max: 100 })}
          </fieldset>
        )}
        {number("cpu", "CPU cores")}
        {number("mem_gb", "Memory (GB)")}
        {number("disk_gb", "Disk (GB)")}
        {number("idle_timeout_sec", "Idle timeout (seconds, 0 = never)")}
        {number("max_runtime_sec", "Max runtime (seconds, 0 = no cap)")}
        {original && (
          <label>
            Status
            <select name="status" aria-label="Status" value={f.status} onChange={set("status")}>
              <option value="active">active (new sessions can use it)</option>
              <option value="inactive">inactive (no new sessions; existing ones keep it)</option>
            </select>
          </label>
        )}
        {Object.keys(local).length > 0 && (
          <p class="field-error" role="alert">
            {Object.keys(local).length === 1 ? "One field needs attention" : `${Object.keys(local).length} fields need attention`}; nothing
            was sent.
          </p>
        )}
        {onlyFieldErrors(error, SHOWN) || (error instanceof ApiError && error.code === "conflict") ? (
          <p class="field-error" role="alert">
            {original ? "Not saved" : "Not created"}: see the marked field.
          </p>
        ) : (
          <ErrorBox error={error} title={original ? "Cannot save" : "Cannot create the offering"} />
        )}
        <footer class="dialog-foot">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary" disabled={busy || !dirty}>
            {original ? (busy ? "Saving…" : "Save") : busy ? "Creating…" : "Create offering"}
          </button>
        </footer>
      </form>
    </Dialog>
  );
}
