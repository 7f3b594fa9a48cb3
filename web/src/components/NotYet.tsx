/** Where an API the page needs does not exist on this server yet: said plainly, no made-up data. */
export function NotYet(props: { what: string; issue: string }) {
  return (
    <div class="empty not-yet" role="status">
      <p>
        <strong>{props.what}</strong> arrives with the {props.issue} issue: this server has no API for it yet.
      </p>
    </div>
  );
}
