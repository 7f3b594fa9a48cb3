// The operator's state on a cluster (`ClusterView.operator`), typed by hand: the OpenAPI document
// says only `object` for it today, because the clusters domain may not name the operator's type.
// These are the fields the console reads, as src/operator/status.rs (`OperatorConnection`) and
// src/operator/pod.rs (`OperatorPods`) serialise them. Replace with the generated types once the
// document has them (issue 23: "views that cross domains … with real types in the OpenAPI document").

import type { Schemas } from "./api";

/** not_attached · attach_incomplete · connected (a callback within two heartbeats) · silent. */
export type OperatorState = "not_attached" | "attach_incomplete" | "connected" | "silent";

export interface OperatorConnection {
  state: OperatorState;
  attached_at: string | null;
  last_callback_age_s: number | null;
  likely_causes: string[];
  last_token_rejection: { at: string; reason: string; counts: Record<string, number> } | null;
  token: Schemas["TokenView"] | null;
  renewal_error: string | null;
  renewal_error_at: string | null;
  next_renewal_attempt_at: string | null;
  /** The operator's Deployment, pods, log tail and Events as last read from the cluster. */
  pod: OperatorPods | null;
}

export interface OperatorContainer {
  name: string;
  image: string;
  ready: boolean;
  restarts: number;
  state: string;
  reason: string | null;
  message: string | null;
  last_termination: { exit_code: number; reason: string | null; message: string | null } | null;
}

export interface OperatorPods {
  read_at: string;
  pods: { name: string; phase: string; unschedulable: string | null; containers: OperatorContainer[] }[];
  pods_matching: number;
  pods_more: boolean;
  log: { pod: string; container: string; previous: boolean; lines: string[] } | null;
  log_error: string | null;
  events: { type: string; reason: string; object: string; message: string; count: number }[];
  events_error: string | null;
  diagnosis: { cause: string; fix: string } | null;
  error: string | null;
}
