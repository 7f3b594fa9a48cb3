// The skeleton of a list page: the toolbar (title, a summary once loaded, filters and buttons),
// then loading, the load error (or a failed refresh above the last data), the empty state, and
// the table in a scrollable region that keyboard users can reach. On a phone the table's first
// column (what names the row) stays put while the rest scrolls beside it (styles.css, `.list-wrap`):
// a page puts its naming column first.

import type { ComponentChildren } from "preact";
import type { Polled } from "../hooks";
import { ErrorBox } from "./Errors";

export interface ListPageProps {
  /** Names the heading `${id}-title` the section is labelled by. */
  id: string;
  title: string;
  /** What is listed, as in "Loading clusters…" and "Cannot load clusters". */
  noun: string;
  polled: Pick<Polled<unknown>, "data" | "error" | "loading">;
  /** Beside the title, once loaded. */
  summary?: ComponentChildren;
  /** Right of the toolbar: filters, then the page's main button. */
  tools?: ComponentChildren;
  /** Shown instead of the table when the list loaded empty. */
  empty: ComponentChildren;
  isEmpty: boolean;
  /** Whether the table shows (false also when a filter matches nothing). */
  showTable: boolean;
  /** The table region's accessible name. */
  regionLabel: string;
  /** The title of a refresh that failed while the last data shows. */
  refreshError?: string;
  /** The table. */
  children: ComponentChildren;
  /** After the table: a pager, "nothing matches", the page's dialogs. */
  after?: ComponentChildren;
  class?: string;
}

export function ListPage(p: ListPageProps) {
  const loaded = p.polled.data !== undefined;
  return (
    <section aria-labelledby={`${p.id}-title`} class={p.class}>
      <div class="toolbar">
        <h1 id={`${p.id}-title`}>{p.title}</h1>
        {loaded && p.summary}
        <span class="grow" />
        {p.tools}
      </div>
      {p.polled.error != null && (
        <ErrorBox
          error={p.polled.error}
          title={loaded ? (p.refreshError ?? "Refresh failed; showing the last data") : `Cannot load ${p.noun}`}
        />
      )}
      {p.polled.loading && !loaded && (
        <p class="loading" aria-live="polite">
          Loading {p.noun}…
        </p>
      )}
      {loaded && p.isEmpty && p.empty}
      {p.showTable && (
        <div class="table-wrap list-wrap" role="region" aria-label={p.regionLabel} tabIndex={0}>
          {p.children}
        </div>
      )}
      {p.after}
    </section>
  );
}
