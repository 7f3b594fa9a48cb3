// Newer / Older page buttons under a newest-first list (shown only when there is more than one page).

export function Pager(props: { label: string; page: number; totalPages: number; onPage: (page: number) => void }) {
  if (props.totalPages <= 1) return null;
  return (
    <nav class="pager" aria-label={props.label}>
      <button type="button" disabled={props.page <= 1} onClick={() => props.onPage(props.page - 1)}>
        Newer
      </button>
      <span>
        page {props.page} of {props.totalPages}
      </span>
      <button type="button" disabled={props.page >= props.totalPages} onClick={() => props.onPage(props.page + 1)}>
        Older
      </button>
    </nav>
  );
}
