import { useState } from "preact/hooks";

async function writeClipboard(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Plain-HTTP consoles on a LAN address have no Clipboard API: fall back to a selection.
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "offscreen";
    document.body.appendChild(ta);
    ta.select();
    const ok = document.execCommand?.("copy") ?? false;
    ta.remove();
    return ok;
  }
}

/** A button that copies `text`; says "Copied" for a moment. */
export function CopyButton(props: { text: string; label?: string }) {
  const [state, setState] = useState<"" | "ok" | "fail">("");
  return (
    <button
      type="button"
      class="copy"
      aria-label={`${props.label ?? "Copy"}: ${props.text}`}
      title="Copy to clipboard"
      onClick={(e) => {
        e.stopPropagation();
        void writeClipboard(props.text).then((ok) => {
          setState(ok ? "ok" : "fail");
          setTimeout(() => setState(""), 1500);
        });
      }}
    >
      {state === "ok" ? "Copied" : state === "fail" ? "Select & copy" : (props.label ?? "Copy")}
    </button>
  );
}

/** A command line shown in full with a copy button beside its label (never over the command's text). */
export function CommandBlock(props: { command: string; label: string }) {
  return (
    <div class="command">
      <div class="command-head">
        <span class="command-label">{props.label}</span>
        <CopyButton text={props.command} />
      </div>
      <pre>
        <code>{props.command}</code>
      </pre>
    </div>
  );
}
