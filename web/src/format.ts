// Small display helpers shared by the pages.

/** "42s", "5m 03s", "3h 12m", "4d 2h"; "—" when unknown. */
/** "1 session", "2 sessions": `many` defaults to `one` + "s". */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

export function formatAge(seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** MiB as "3125 TiB" / "80 GiB" / "512 MiB". */
export function formatMib(mb: number | undefined): string {
  if (mb == null) return "—";
  if (mb >= 1024 * 1024) return `${+(mb / 1024 / 1024).toFixed(1)} TiB`;
  return mb >= 1024 ? `${+(mb / 1024).toFixed(1)} GiB` : `${mb} MiB`;
}

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

/** Seconds since an ISO time, against the browser clock. */
export function secondsSince(iso: string | null | undefined, now = Date.now()): number | null {
  if (!iso) return null;
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : (now - t) / 1000;
}

/** A configured duration: "30m", "1h 30m", "2d"; `zero` when 0 (e.g. "never"). */
export function formatDuration(seconds: number | null | undefined, zero = "0s"): string {
  if (seconds == null || !Number.isFinite(seconds)) return "—";
  if (seconds <= 0) return zero;
  const parts: string[] = [];
  let s = Math.floor(seconds);
  for (const [unit, n] of [
    ["d", 86400],
    ["h", 3600],
    ["m", 60],
    ["s", 1],
  ] as const) {
    if (s >= n) {
      parts.push(`${Math.floor(s / n)}${unit}`);
      s %= n;
    }
  }
  return parts.slice(0, 2).join(" ");
}
