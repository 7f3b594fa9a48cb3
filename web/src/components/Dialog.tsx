// A modal dialog: focus moves in on open and back on close, Tab stays inside (and comes back in
// when focus fell out), Escape closes.

import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";

let counter = 0;

export function Dialog(props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean }) {
  const ref = useRef<HTMLDivElement>(null);
  const titleId = useRef(`dlg-${++counter}`).current;
  const onClose = useRef(props.onClose);
  onClose.current = props.onClose;
  useEffect(() => {
    const before = document.activeElement as HTMLElement | null;
    const el = ref.current;
    // The marked field, else the first field, else the first button after the header's Close.
    const first =
      el?.querySelector<HTMLElement>("[autofocus]") ??
      el?.querySelector<HTMLElement>("input, select, textarea") ??
      el?.querySelector<HTMLElement>(".dialog-body button, .dialog-foot button");
    (first ?? el)?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") {
        e.stopPropagation();
        onClose.current();
      } else if (e.key === "Tab" && el) {
        const items = Array.from(
          el.querySelectorAll<HTMLElement>(
            "a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), textarea, [tabindex='0']",
          ),
        );
        if (!items.length) return;
        const [a, z] = [items[0], items[items.length - 1]];
        if (!el.contains(document.activeElement)) {
          // Focus fell out (its button got disabled while busy): bring it back in.
          e.preventDefault();
          (e.shiftKey ? z : a).focus();
        } else if (e.shiftKey && document.activeElement === a) {
          e.preventDefault();
          z.focus();
        } else if (!e.shiftKey && document.activeElement === z) {
          e.preventDefault();
          a.focus();
        }
      }
    };
    // On the document, so keys still reach it when focus fell out of the dialog.
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("keydown", onKey);
      // Back where it was; if that control is gone (the empty state's button once the first item
      // exists), to the page's heading rather than nowhere.
      if (before?.isConnected && before !== document.body) before.focus?.();
      // Gone, or disabled meanwhile (its row is ending): focus would fall to the page's start.
      if (!before || document.activeElement !== before) {
        const h1 = document.querySelector<HTMLElement>("main h1");
        if (h1 && !h1.hasAttribute("tabindex")) h1.tabIndex = -1;
        h1?.focus();
      }
    };
  }, []);
  return (
    <div class="backdrop" onMouseDown={(e) => e.target === e.currentTarget && props.onClose()}>
      <div class={props.wide ? "dialog wide" : "dialog"} role="dialog" aria-modal="true" aria-labelledby={titleId} ref={ref} tabIndex={-1}>
        <header class="dialog-head">
          <h2 id={titleId}>{props.title}</h2>
          <button type="button" class="icon" aria-label="Close" onClick={props.onClose}>
            ×
          </button>
        </header>
        {props.children}
      </div>
    </div>
  );
}
