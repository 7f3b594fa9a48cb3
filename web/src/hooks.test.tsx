import { act, fireEvent, render, screen } from "@testing-library/preact";
import { useState } from "preact/hooks";
import { useAction } from "./hooks";

/** A promise the test settles. */
function deferred() {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** What Chromium does when the focused control becomes disabled: focus falls to the body (happy-dom keeps it there). */
function loseFocus(el: HTMLElement) {
  const b = el as HTMLButtonElement;
  b.disabled = false;
  b.blur();
  b.disabled = true;
}

function Row(props: { call: () => Promise<void>; disableAfter?: boolean; pauseAllowed?: boolean }) {
  const a = useAction();
  const [done, setDone] = useState(false);
  return (
    <ul>
      <li>
        <button
          type="button"
          disabled={a.busy !== "" || (props.disableAfter && done) || props.pauseAllowed === false}
          onClick={() => a.run(props.call, { key: "pause", onSuccess: () => setDone(true) })}
        >
          {a.busy === "pause" ? "Pausing…" : "Pause"}
        </button>
        <button type="button" disabled={a.busy !== ""}>
          Resume
        </button>
        {a.error != null && <p role="alert">{(a.error as Error).message}</p>}
      </li>
    </ul>
  );
}

describe("useAction", () => {
  it("is busy while its run goes, runs once at a time, and shows the failure as busy ends", async () => {
    const d = deferred();
    const call = vi.fn(() => d.promise);
    render(<Row call={call} />);
    const pause = screen.getByRole("button", { name: "Pause" });
    fireEvent.click(pause);
    expect(pause.textContent).toBe("Pausing…");
    expect((pause as HTMLButtonElement).disabled).toBe(true);
    // A second start while one runs does nothing.
    act(() => (pause as HTMLButtonElement).click());
    expect(call).toHaveBeenCalledTimes(1);
    await act(async () => {
      d.reject(new Error("session_conflict"));
      await d.promise.catch(() => undefined);
    });
    const alert = screen.getByRole("alert");
    expect(alert.textContent).toBe("session_conflict");
    // The same render: no error beside a button still saying it works.
    expect(pause.textContent).toBe("Pause");
    expect((pause as HTMLButtonElement).disabled).toBe(false);
  });

  it("gives focus back to the button that started the run once it is enabled again", async () => {
    const d = deferred();
    render(<Row call={() => d.promise} />);
    const pause = screen.getByRole("button", { name: "Pause" });
    pause.focus();
    fireEvent.click(pause);
    loseFocus(pause);
    expect(document.activeElement).toBe(document.body);
    await act(async () => {
      d.resolve();
      await d.promise;
    });
    expect(document.activeElement).toBe(pause);
  });

  it("when that button stays disabled, focus goes to the first enabled control of its row", async () => {
    const d = deferred();
    render(<Row call={() => d.promise} disableAfter />);
    const pause = screen.getByRole("button", { name: "Pause" });
    pause.focus();
    fireEvent.click(pause);
    loseFocus(pause);
    await act(async () => {
      d.resolve();
      await d.promise;
    });
    expect((pause as HTMLButtonElement).disabled).toBe(true);
    expect(document.activeElement).toBe(screen.getByRole("button", { name: "Resume" }));
  });

  it("when the list reloads and disables that button later, focus moves on within its row", async () => {
    const d = deferred();
    const { rerender } = render(<Row call={() => d.promise} pauseAllowed />);
    const pause = screen.getByRole("button", { name: "Pause" });
    pause.focus();
    fireEvent.click(pause);
    loseFocus(pause);
    await act(async () => {
      d.resolve();
      await d.promise;
    });
    expect(document.activeElement).toBe(pause);
    // The reload: the session is paused now, Pause is no longer allowed.
    rerender(<Row call={() => d.promise} pauseAllowed={false} />);
    await act(async () => {});
    expect(document.activeElement).toBe(screen.getByRole("button", { name: "Resume" }));
  });

  it("leaves focus alone where the user has put it meanwhile", async () => {
    const d = deferred();
    const { container } = render(
      <div>
        <Row call={() => d.promise} />
        <input aria-label="elsewhere" />
      </div>,
    );
    const pause = screen.getByRole("button", { name: "Pause" });
    pause.focus();
    fireEvent.click(pause);
    const elsewhere = container.querySelector("input")!;
    elsewhere.focus();
    await act(async () => {
      d.resolve();
      await d.promise;
    });
    expect(document.activeElement).toBe(elsewhere);
  });
});
