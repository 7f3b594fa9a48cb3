import { ApiError, base64Utf8, csrfHeaders, newIdempotencyKey, request, setCsrfToken } from "./api";
import { formatAge } from "./format";
import { stubFetch } from "./test/fetch";

describe("csrfHeaders", () => {
  afterEach(() => setCsrfToken(""));
  it("sends nothing on safe methods", () => {
    setCsrfToken("t1");
    expect(csrfHeaders("GET", "gshare_csrf=abc")).toEqual({});
    expect(csrfHeaders("head", "")).toEqual({});
  });
  it("echoes the double-submit cookie, else the token from login", () => {
    setCsrfToken("from-login");
    expect(csrfHeaders("POST", "a=1; gshare_csrf=abc%3D; b=2")).toEqual({ "X-CSRF-Token": "abc=" });
    expect(csrfHeaders("POST", "a=1; __Host-gshare_csrf=tls; b=2")).toEqual({ "X-CSRF-Token": "tls" });
    expect(csrfHeaders("DELETE", "a=1")).toEqual({ "X-CSRF-Token": "from-login" });
    setCsrfToken("");
    expect(csrfHeaders("PATCH", "")).toEqual({});
  });
});

describe("request", () => {
  it("turns the error envelope into an ApiError", async () => {
    stubFetch({
      "GET /api/v1/x": () => ({
        status: 409,
        body: { error: { code: "conflict", message: "name taken", details: { name: "a" }, request_id: "r1" } },
      }),
    });
    const e = await request("GET", "/api/v1/x").catch((e) => e);
    expect(e).toBeInstanceOf(ApiError);
    expect(e).toMatchObject({ status: 409, code: "conflict", message: "name taken", details: { name: "a" }, requestId: "r1" });
  });
  it("turns a route the server does not have into a 404 ApiError", async () => {
    stubFetch({});
    const e = await request("GET", "/api/v1/sessions").catch((e) => e);
    expect(e).toMatchObject({ status: 404, code: "not_found", message: "no such route" });
  });
  it("reports an unreachable server plainly", async () => {
    vi.stubGlobal("fetch", () => Promise.reject(new TypeError("Failed to fetch")));
    const e = await request("GET", "/api/v1/x").catch((e) => e);
    expect(e).toMatchObject({ status: 0, code: "network" });
  });
});

describe("helpers", () => {
  it("base64-encodes UTF-8", () => {
    expect(base64Utf8("apiVersion: v1\n")).toBe(btoa("apiVersion: v1\n"));
    expect(atob(base64Utf8("클러스터"))).toBe(String.fromCharCode(...new TextEncoder().encode("클러스터")));
  });
  it("makes v4-shaped idempotency keys", () => {
    const a = newIdempotencyKey();
    expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(newIdempotencyKey()).not.toBe(a);
  });
  it("formats ages", () => {
    expect(formatAge(null)).toBe("—");
    expect(formatAge(5.9)).toBe("5s");
    expect(formatAge(303)).toBe("5m 03s");
    expect(formatAge(3 * 3600 + 120)).toBe("3h 2m");
    expect(formatAge(90000)).toBe("1d 1h");
  });
});
