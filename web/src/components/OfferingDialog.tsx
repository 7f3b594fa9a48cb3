// Create or edit an offering: name, class, image, the GPU share (GPU offerings), CPU / memory /
// disk, idle timeout and max runtime; editing also (de)activates it. Fields the server refuses are
// marked; its message says why.

import { useState } from "preact/hooks";
import { ApiError } from "../api";
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
    resource_class: (o?.resource_class as ResourceClass) ?? "gpu",
    image: o?.image ?? "",
    mode: (o?.mode as GpuMode) ?? "fractional",
    gpu_model: o?.gpu_model ?? "",
    gpu_mem_mb: str(o?.gpu_mem_mb),
    gpu_cores: str(o?.gpu_cores),
    cpu: str(o?.cpu),
    mem_gb: str(o?.mem_gb),
    disk_gb: str(o?.disk_gb),
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
    return body as OfferingBody;
  }
  // The class is fixed once created, and a PATCH's null means "unchanged": neither is sent.
  for (const [k, v] of Object.entries(full)) {
    const was = (original as unknown as Record<string, unknown>)[k] ?? null;
    if (k !== "resource_class" && v !== null && v !== was) body[k] = v;
  }
  if (f.status !== original.status) body.status = f.status;
  return body as OfferingBody;
}

/** The fields a 422 names (`details.errors[].loc` = ["body", field, …]). */
function badFields(e: unknown): Set<string> {
  const errs = e instanceof ApiError ? (e.details as { errors?: { loc?: unknown[] }[] }).errors : undefined;
  const out = new Set<string>();
  if (Array.isArray(errs)) for (const x of errs) out.add(String((x.loc ?? []).filter((l) => l !== "body")[0] ?? ""));
  if (e instanceof ApiError && e.code === "conflict") out.add("name");
  return out;
}

export function OfferingDialog(props: { offering?: Offering; onClose: () => void; onSaved: (o: Offering) => void }) {
  const original = props.offering;
  const [f, setF] = useState<Form>(() => formOf(original));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const body = offeringBody(f, original);
  const dirty = !original || Object.keys(body).length > 0;
  const bad = badFields(error);

  const set = (k: keyof Form) => (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement | HTMLSelectElement).value });
  const field = (k: keyof Form, label: string, extra: Record<string, unknown> = {}) => (
    <label>
      {label}
      <input name={k} value={f[k]} onInput={set(k)} aria-invalid={bad.has(k) || undefined} {...extra} />
    </label>
  );
  const number = (k: NumField, label: string, extra: Record<string, unknown> = {}) =>
    field(k, label, { type: "number", inputMode: "numeric", step: 1, min: 0, ...extra });

  const submit = async (e: Event) => {
    e.preventDefault();
    if (busy || !dirty) return;
    setBusy(true);
    setError(null);
    try {
      const o = original ? await patchOffering(original.id, body) : await createOffering(body);
      props.onSaved(o);
      props.onClose();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
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
        {field("image", "Image", { required: true, placeholder: "registry.example.com/team/notebook:tag", spellcheck: false, autocomplete: "off" })}
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
            {field("gpu_model", "GPU model", { placeholder: "any", autocomplete: "off" })}
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
        <ErrorBox error={error} title={original ? "Cannot save" : "Cannot create the offering"} />
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
