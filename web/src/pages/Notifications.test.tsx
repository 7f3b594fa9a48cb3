import { fireEvent, render, screen, waitFor } from "@testing-library/preact";
import { NotificationsLink, NotificationsPage } from "./Notifications";
import { stubFetch } from "../test/fetch";

const note = (id: number, kind: string, read: boolean, text = `note ${id}`) => ({
  id,
  kind,
  text,
  read,
  session_id: "ses_01JAAAAAAAAAAAAAAAAAAAAAAA",
  at: new Date(Date.now() - id * 60_000).toISOString(),
});

describe("Notifications", () => {
  it("lists the caller's own newest first, marks one read, then all", async () => {
    let notes = [note(2, "drained", false, "Session x was moved"), note(1, "idle_warning", false), note(0, "admin_ended", true)];
    const page = () => ({
      body: { data: notes, unread: notes.filter((n) => !n.read).length, total: notes.length },
    });
    const calls = stubFetch({
      "GET /api/v1/notifications": page,
      "POST /api/v1/notifications/1/read": () => {
        notes = notes.map((n) => (n.id === 1 ? { ...n, read: true } : n));
        return { body: { ...notes[1] } };
      },
      "POST /api/v1/notifications/read": () => {
        notes = notes.map((n) => ({ ...n, read: true }));
        return { body: { marked: 1, unread: 0 } };
      },
    });
    render(<NotificationsPage />);
    await screen.findByText("Session x was moved");
    expect(screen.getByRole("status")?.textContent).toContain("2 unread of 3");
    const items = screen.getByRole("list", { name: "Your notifications" }).querySelectorAll("li");
    expect(Array.from(items, (li) => li.dataset.kind)).toEqual(["drained", "idle_warning", "admin_ended"]);
    expect(screen.getAllByRole("button", { name: /^Mark read/ })).toHaveLength(2);
    fireEvent.click(screen.getByRole("button", { name: /^Mark read: Idle warning/ }));
    await waitFor(() => expect(screen.getByRole("status")?.textContent).toContain("1 unread of 3"));
    expect(calls.some((c) => c.method === "POST" && c.path === "/api/v1/notifications/1/read")).toBe(true);
    fireEvent.click(screen.getByRole("button", { name: "Mark all read" }));
    await waitFor(() => expect(screen.getByRole("status")?.textContent).toContain("All 3 read"));
    expect(screen.queryByRole("button", { name: /^Mark read/ })).toBeNull();
  });

  it("shows the unread count in the header link, and none when all are read", async () => {
    let unread = 3;
    stubFetch({ "GET /api/v1/notifications": () => ({ body: { data: [], unread, total: 5 } }) });
    const { unmount } = render(<NotificationsLink current={false} />);
    expect((await screen.findByRole("link", { name: "Notifications, 3 unread" })).getAttribute("href")).toBe("/notifications");
    unmount();
    unread = 0;
    render(<NotificationsLink current />);
    await waitFor(() => expect(screen.getByRole("link", { name: "Notifications" }).getAttribute("aria-current")).toBe("page"));
  });
});
