// What a route change tells: the tab's title names the page ("Sessions — gShare Edge"), and after
// a change of page (not on the first load) focus moves to the page's h1 and a polite live region
// says which page it is, so a keyboard or screen-reader user starts on the new page, not at
// "Skip to content".

import { useEffect, useRef, useState } from "preact/hooks";

export const BRAND = "gShare Edge";

/** The page's title as the tab shows it. */
export const pageTitle = (heading: string | null | undefined) => (heading?.trim() ? `${heading.trim()} — ${BRAND}` : BRAND);

export function RouteAnnouncer(props: { path: string }) {
  const [said, setSaid] = useState("");
  const first = useRef(true);
  useEffect(() => {
    const initial = first.current;
    first.current = false;
    // After the page's own render (a page may put its h1 in the same commit as this effect).
    const t = setTimeout(() => {
      const h1 = document.querySelector<HTMLElement>("main h1");
      const name = h1?.textContent?.trim() ?? "";
      document.title = pageTitle(name);
      if (initial || !h1) return;
      if (!h1.hasAttribute("tabindex")) h1.tabIndex = -1;
      h1.focus();
      setSaid(name ? `${name} page` : "");
    });
    return () => clearTimeout(t);
  }, [props.path]);
  return (
    <p class="sr-only" role="status" aria-live="polite" aria-atomic="true">
      {said}
    </p>
  );
}
