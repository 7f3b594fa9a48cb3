import { fireEvent, render, screen, waitFor, within } from "@testing-library/preact";
import { OfferingsPage } from "./Offerings";
import { choose } from "../test/dom";
import { offering, stubFetch } from "../test/fetch";

const cpu = () =>
  offering({
    id: "off_01JCCCCCCCCCCCCCCCCCCCCCCC",
    name: "CPU small",
    resource_class: "cpu",
    mode: null,
    gpu_model: null,
    gpu_mem_mb: null,
    gpu_cores: null,
    cpu: 2,
    mem_gb: 4,
    disk_gb: 10,
    idle_timeout_sec: 0,
    max_runtime_sec: 5400,
    status: "inactive",
    sessions: 0,
  });
const err = (status: number, code: string, message: string, details: Record<string, unknown> = {}) => ({
  status,
  body: { error: { code, message, details, request_id: "req_1" } },
});

describe("OfferingsPage", () => {
  it("lists offerings with class, shape, image, timeouts, status and live sessions", async () => {
    stubFetch({ "GET /api/v1/offerings": () => ({ body: { data: [offering(), cpu()] } }) });
    const { container } = render(<OfferingsPage />);
    await screen.findByText("A100 20 GB slice");
    const headers = Array.from(container.querySelectorAll("thead th")).map((th) => th.textContent);
    expect(headers).toEqual(["Offering", "Class", "Shape", "Image", "Idle / max runtime", "Status", "Live sessions", "Actions"]);
    expect(screen.getByText("2 offerings · 1 active")).toBeTruthy();
    const gpu = container.querySelector('[data-offering-id="off_01JAAAAAAAAAAAAAAAAAAAAAAA"]') as HTMLElement;
    const cells = Array.from(gpu.querySelectorAll("td")).map((td) => td.textContent);
    expect(cells.slice(1, 7)).toEqual([
      "gpu",
      "NVIDIA A100 · 20 GiB · 30% cores · fractional4 CPU · 16 GB memory · 50 GB disk",
      "registry.example/notebook:1.2",
      "30m / no cap",
      "active",
      "2",
    ]);
    const c = container.querySelector('[data-offering-id="off_01JCCCCCCCCCCCCCCCCCCCCCCC"]') as HTMLElement;
    expect(
      Array.from(c.querySelectorAll("td"))
        .map((td) => td.textContent)
        .slice(1, 7),
    ).toEqual(["cpu", "2 CPU · 4 GB memory · 10 GB disk", "registry.example/notebook:1.2", "never / 1h 30m", "inactive", "0"]);
  });

  it("shows the empty state", async () => {
    stubFetch({ "GET /api/v1/offerings": () => ({ body: { data: [] } }) });
    render(<OfferingsPage />);
    await screen.findByRole("button", { name: "Create the first offering" });
  });

  it("creates a CPU offering without GPU fields, and marks the field a 422 names", async () => {
    let valid = false;
    const calls = stubFetch({
      "GET /api/v1/offerings": () => ({ body: { data: valid ? [cpu()] : [] } }),
      "POST /api/v1/offerings": (c) => {
        if (!valid)
          return err(422, "validation_failed", "image: not a valid image reference", {
            errors: [{ loc: ["body", "image"], msg: "not a valid image reference", type: "value_error" }],
          });
        return { status: 201, body: { ...cpu(), ...(c.body as object) } };
      },
    });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "New offering" }));
    const dialog = screen.getByRole("dialog", { name: "New offering" });
    expect(document.activeElement).toBe(within(dialog).getByLabelText("Name"));
    expect(within(dialog).getByLabelText("GPU memory (MiB)")).toBeTruthy();
    fireEvent.input(within(dialog).getByLabelText("Name"), { target: { value: "CPU small" } });
    choose(within(dialog).getByLabelText("Resource class"), "cpu");
    expect(within(dialog).queryByLabelText("GPU memory (MiB)")).toBeNull();
    fireEvent.input(within(dialog).getByLabelText("Image"), { target: { value: "NOT-AN-IMAGE!" } });
    fireEvent.input(within(dialog).getByLabelText("CPU cores"), { target: { value: "2" } });
    fireEvent.input(within(dialog).getByLabelText("Memory (GB)"), { target: { value: "4" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create offering" }));

    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("Not created: see the marked field.");
    const image = within(dialog).getByLabelText("Image");
    expect(image.getAttribute("aria-invalid")).toBe("true");
    // The server's reason, in words, next to the field and tied to it.
    expect(document.getElementById(image.getAttribute("aria-describedby") ?? "")?.textContent).toBe("Not a valid image reference.");
    expect(within(dialog).getByLabelText("Name").getAttribute("aria-invalid")).toBeNull();
    expect(calls.find((c) => c.method === "POST")?.body).toEqual({
      name: "CPU small",
      resource_class: "cpu",
      image: "NOT-AN-IMAGE!",
      cpu: 2,
      mem_gb: 4,
      disk_gb: 10,
      idle_timeout_sec: 1800,
      max_runtime_sec: 0,
    });

    valid = true;
    fireEvent.input(within(dialog).getByLabelText("Image"), { target: { value: "registry.example/cpu:1" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create offering" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    await screen.findByText("CPU small");
  });

  it("creates a GPU offering with its share and shows a name conflict", async () => {
    const calls = stubFetch({
      "GET /api/v1/offerings": () => ({ body: { data: [] } }),
      "POST /api/v1/offerings": () => err(409, "conflict", "an offering named A100 20 GB slice exists"),
    });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Create the first offering" }));
    const dialog = screen.getByRole("dialog", { name: "New offering" });
    fireEvent.input(within(dialog).getByLabelText("Name"), { target: { value: "A100 20 GB slice" } });
    fireEvent.input(within(dialog).getByLabelText("Image"), { target: { value: "registry.example/notebook:1.2" } });
    choose(within(dialog).getByLabelText("Mode"), "exclusive");
    fireEvent.input(within(dialog).getByLabelText("GPU model"), { target: { value: "NVIDIA A100" } });
    fireEvent.input(within(dialog).getByLabelText("GPU memory (MiB)"), { target: { value: "20480" } });
    fireEvent.input(within(dialog).getByLabelText("GPU cores (%)"), { target: { value: "30" } });
    fireEvent.input(within(dialog).getByLabelText("Idle timeout (seconds, 0 = never)"), { target: { value: "0" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create offering" }));
    await within(dialog).findByText(/offering named A100 20 GB slice exists/);
    expect(within(dialog).getByLabelText("Name").getAttribute("aria-invalid")).toBe("true");
    expect(calls.find((c) => c.method === "POST")?.body).toEqual({
      name: "A100 20 GB slice",
      resource_class: "gpu",
      image: "registry.example/notebook:1.2",
      mode: "exclusive",
      gpu_model: "NVIDIA A100",
      gpu_mem_mb: 20480,
      gpu_cores: 30,
      cpu: 1,
      mem_gb: 4,
      disk_gb: 10,
      idle_timeout_sec: 0,
      max_runtime_sec: 0,
    });
  });

  it("an empty form flags every missing field in words, and sends nothing", async () => {
    const calls = stubFetch({ "GET /api/v1/offerings": () => ({ body: { data: [] } }) });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Create the first offering" }));
    const dialog = screen.getByRole("dialog", { name: "New offering" });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create offering" }));
    await within(dialog).findByText("4 fields need attention; nothing was sent.");
    const said = (label: string) => {
      const input = within(dialog).getByLabelText(label);
      expect(input.getAttribute("aria-invalid")).toBe("true");
      return document.getElementById(input.getAttribute("aria-describedby") ?? "")?.textContent ?? "";
    };
    expect(said("Name")).toMatch(/^Required/);
    expect(said("Image")).toMatch(/^Required/);
    expect(said("GPU memory (MiB)")).toMatch(/^Required for a GPU offering/);
    expect(said("GPU cores (%)")).toMatch(/^Required for a fractional GPU offering/);
    expect(dialog.textContent).not.toMatch(/body\.|missing field|`/);
    expect(document.activeElement).toBe(within(dialog).getByLabelText("Name"));
    // An image reference with spaces is caught before sending too.
    fireEvent.input(within(dialog).getByLabelText("Name"), { target: { value: "lab" } });
    fireEvent.input(within(dialog).getByLabelText("Image"), { target: { value: "ghcr.io/org/lab 1.0" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Create offering" }));
    await waitFor(() => expect(said("Image")).toBe("An image reference has no spaces — e.g. ghcr.io/org/lab:1.0."));
    expect(calls.filter((c) => c.method === "POST")).toEqual([]);
  });

  it("edits only the changed fields, deactivation included", async () => {
    const calls = stubFetch({
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "PATCH /api/v1/offerings/off_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: offering({ status: "inactive" }) }),
    });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Edit A100 20 GB slice" }));
    const dialog = screen.getByRole("dialog", { name: "Edit A100 20 GB slice" });
    expect((within(dialog).getByRole("button", { name: "Save" }) as HTMLButtonElement).disabled).toBe(true);
    expect((within(dialog).getByLabelText("Resource class") as HTMLSelectElement).disabled).toBe(true);
    // Clearing an optional field sends nothing (a PATCH's null means unchanged).
    fireEvent.input(within(dialog).getByLabelText("GPU model"), { target: { value: "" } });
    fireEvent.input(within(dialog).getByLabelText("Max runtime (seconds, 0 = no cap)"), { target: { value: "7200" } });
    choose(within(dialog).getByLabelText("Status"), "inactive");
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.find((c) => c.method === "PATCH")?.body).toEqual({ max_runtime_sec: 7200, status: "inactive" });
  });

  it("refuses to delete an offering in use, advises deactivating, and deactivates", async () => {
    const calls = stubFetch({
      "GET /api/v1/offerings": () => ({ body: { data: [offering()] } }),
      "DELETE /api/v1/offerings/off_01JAAAAAAAAAAAAAAAAAAAAAAA": () =>
        err(
          409,
          "offering_in_use",
          "2 sessions were created from this offering (ended ones count: their history names it); deactivate it instead",
          { sessions: 2 },
        ),
      "PATCH /api/v1/offerings/off_01JAAAAAAAAAAAAAAAAAAAAAAA": () => ({ body: offering({ status: "inactive" }) }),
    });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Delete A100 20 GB slice" }));
    const dialog = screen.getByRole("dialog", { name: "Delete offering" });
    expect(dialog.textContent).toContain("Delete offering A100 20 GB slice");
    expect(within(dialog).queryByRole("button", { name: "Deactivate instead" })).toBeNull();
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete offering" }));
    const alert = await within(dialog).findByRole("alert");
    // Said once: the title, then why and what to do (the server's message says the same again).
    expect(alert.textContent).toContain("Refused: the offering is in use.");
    expect(alert.textContent).toContain("Deactivate it instead");
    expect(alert.textContent?.match(/created from/g)?.length).toBe(1);
    expect(alert.textContent?.match(/deactivate/gi)?.length).toBe(1);
    fireEvent.click(within(dialog).getByRole("button", { name: "Deactivate instead" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(calls.filter((c) => c.method !== "GET").map((c) => [c.method, c.path, c.body])).toEqual([
      ["DELETE", "/api/v1/offerings/off_01JAAAAAAAAAAAAAAAAAAAAAAA", undefined],
      ["PATCH", "/api/v1/offerings/off_01JAAAAAAAAAAAAAAAAAAAAAAA", { status: "inactive" }],
    ]);
  });
});

/** Everything the field's aria-describedby points at. */
const described = (input: HTMLElement) =>
  (input.getAttribute("aria-describedby") ?? "")
    .split(" ")
    .map((id) => document.getElementById(id)?.textContent ?? "")
    .join(" ");

describe("OfferingDialog: what the second walk found", () => {
  it("shows the defaults a new offering gets, memory and times in words, and the GPU models the fleet reports", async () => {
    stubFetch({
      "GET /api/v1/offerings": () => ({ body: { data: [] } }),
      "GET /api/v1/overview": () => ({
        body: {
          clusters: [
            {
              nodes: [
                { name: "n0", models: ["NVIDIA A100-SXM4-80GB"] },
                { name: "n1", models: ["NVIDIA L4", "NVIDIA A100-SXM4-80GB"] },
              ],
            },
          ],
        },
      }),
    });
    render(<OfferingsPage />);
    fireEvent.click(await screen.findByRole("button", { name: "Create the first offering" }));
    const dialog = screen.getByRole("dialog", { name: "New offering" });
    // Not a silent default: the disk a session gets is in its field.
    expect((within(dialog).getByLabelText("Disk (GB)") as HTMLInputElement).value).toBe("10");
    expect((within(dialog).getByLabelText("CPU cores") as HTMLInputElement).value).toBe("1");
    const gpuMem = within(dialog).getByLabelText("GPU memory (MiB)");
    fireEvent.input(gpuMem, { target: { value: "20480" } });
    expect(described(gpuMem)).toContain("= 20 GiB");
    expect(described(within(dialog).getByLabelText("Idle timeout (seconds, 0 = never)"))).toContain("= 30m");
    const model = within(dialog).getByLabelText("GPU model") as HTMLInputElement;
    await waitFor(() => expect(described(model)).toContain("The fleet has: NVIDIA A100-SXM4-80GB, NVIDIA L4."));
    const options = Array.from(document.querySelectorAll(`#${model.getAttribute("list")} option`)).map((o) => o.getAttribute("value"));
    expect(options).toEqual(["NVIDIA A100-SXM4-80GB", "NVIDIA L4"]);
  });
});
