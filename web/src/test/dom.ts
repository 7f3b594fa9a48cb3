// DOM helpers for component tests.

import { act } from "@testing-library/preact";

/**
 * Picks an option in a <select> the way a browser does (value, then a bubbling `change`), and
 * lets Preact render, as fireEvent does. @testing-library/preact's fireEvent.change becomes an
 * `input` event once preact/compat is loaded (a page's memo), which a select's onChange never hears.
 */
export function choose(select: HTMLElement, value: string) {
  act(() => {
    (select as HTMLSelectElement).value = value;
    select.dispatchEvent(new Event("change", { bubbles: true }));
  });
}
