// Names for the ids the API returns (clu_…, ses_…, off_…), so pages can show "gpu-a" with a link
// instead of a bare id. Looked up once per id and remembered for the page's life.

import { get } from "./api";
import type { Cluster } from "./clusters";
import type { Offering } from "./offerings";
import type { Session } from "./sessions";

export interface Named {
  name: string;
  href: string;
}

const cache = new Map<string, Promise<Named | null>>();

export const hrefOf = (id: string): string | null =>
  id.startsWith("clu_") ? `/clusters#${id}` : id.startsWith("ses_") ? `/sessions#${id}` : id.startsWith("off_") ? `/offerings#${id}` : null;

async function lookup(id: string): Promise<Named | null> {
  const href = hrefOf(id);
  if (!href) return null;
  try {
    if (id.startsWith("clu_")) return { name: (await get<Cluster>(`/api/v1/clusters/${encodeURIComponent(id)}`)).name, href };
    if (id.startsWith("off_")) return { name: (await get<Offering>(`/api/v1/offerings/${encodeURIComponent(id)}`)).name, href };
    const s = await get<Session>(`/api/v1/sessions/${encodeURIComponent(id)}`);
    return { name: s.name || `unnamed session on ${s.cluster_name}`, href };
  } catch {
    // Gone (an unregistered cluster, a deleted offering) or not readable: the id stays.
    return null;
  }
}

/** The name of `id`, fetched at most once. */
export function nameOf(id: string): Promise<Named | null> {
  let p = cache.get(id);
  if (!p) {
    p = lookup(id);
    cache.set(id, p);
  }
  return p;
}

/** Test hook: forget what was looked up. */
export function forgetNames() {
  cache.clear();
}

export const ID_RE = /^(clu|ses|off)_[0-9A-HJKMNP-TV-Z]{26}$/;
