// A tiny history router: the server answers every non-API path with index.html.

import { useEffect, useState } from "preact/hooks";

const listeners = new Set<() => void>();

export function navigate(path: string, replace = false) {
  if (path === location.pathname + location.search) return;
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  listeners.forEach((l) => l());
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    listeners.add(update);
    addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      removeEventListener("popstate", update);
    };
  }, []);
  return path;
}

/** Follows same-origin links without a reload (keeps modifier-clicks opening new tabs). */
export function onLinkClick(e: MouseEvent) {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = (e.target as Element).closest?.("a");
  const href = a?.getAttribute("href");
  if (!a || !href || !href.startsWith("/") || a.target) return;
  e.preventDefault();
  navigate(href);
}

/**
 * A link like /sessions#ses_… points at one row: once `ready` (the rows are rendered), the row
 * with `data-<attr>` equal to the hash is scrolled into view and marked (class "target").
 */
export function useHashTarget(attr: string, ready: unknown) {
  useEffect(() => {
    const id = location.hash.slice(1);
    if (!id || !ready) return;
    const row = document.querySelector<HTMLElement>(`[data-${attr}="${CSS.escape(id)}"]`);
    if (!row) return;
    row.classList.add("target");
    row.scrollIntoView({ block: "center" });
  }, [attr, ready]);
}
