// A labelled form control with its own error line: the message sits next to the field it is about,
// the control is marked aria-invalid and described by it.

import type { ComponentChildren } from "preact";

export function FieldError(props: { id: string; message?: string }) {
  if (!props.message) return null;
  return (
    <span class="field-error" id={props.id}>
      {props.message}
    </span>
  );
}

/** Props for the control inside a field with `error` (spread them onto the input). */
export function invalidProps(id: string, error?: string, describedBy?: string): Record<string, unknown> {
  const ids = [error ? `${id}-error` : "", describedBy ?? ""].filter(Boolean).join(" ");
  return { "aria-invalid": error ? true : undefined, "aria-describedby": ids || undefined };
}

export function Field(props: { id: string; label: ComponentChildren; error?: string; children: ComponentChildren }) {
  return (
    <label class={props.error ? "field has-error" : "field"}>
      {props.label}
      {props.children}
      <FieldError id={`${props.id}-error`} message={props.error} />
    </label>
  );
}
