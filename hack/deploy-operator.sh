#!/usr/bin/env bash
# Deploy the gShare operator to a cluster by hand: `gshare operator manifests | kubectl apply -f -`.
# Upstream's interface (CLUSTER_ID, SOT_ENDPOINT, OPERATOR_TOKEN, KUBECONFIG, SESSION_DOMAIN, IMAGE),
# with upstream's chart behind it: all three CRDs, the chart's RBAC, Pod Security labels, and only
# flags the operator defines. With a running server, `gshare cluster attach ID` does this in one step.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: CLUSTER_ID=clu_… SOT_ENDPOINT=https://gshare.example.com OPERATOR_TOKEN=$(gshare token operator --cluster-id clu_… | tail -1) \
       KUBECONFIG=./cluster.kubeconfig SESSION_DOMAIN=lab.example.com [IMAGE=registry/gshare-operator:tag] hack/deploy-operator.sh

  CLUSTER_ID      the id registration returned (clu_<ULID>)
  SOT_ENDPOINT    this control plane's URL as the cluster reaches it (not 127.0.0.1)
  OPERATOR_TOKEN  an operator token for CLUSTER_ID (written to Secret gshare-system/gshare-operator-internal-jwt)
  KUBECONFIG      credentials for the target cluster (may create CRDs, namespaces and RBAC)
  SESSION_DOMAIN  must equal the control plane's session_domain
  IMAGE           optional: operator image (default: the configured operator_image)
  GSHARE, KUBECTL optional: the gshare and kubectl commands to run (default: from PATH)
USAGE
}

case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; exit 2 ;; esac
for v in CLUSTER_ID SOT_ENDPOINT OPERATOR_TOKEN KUBECONFIG SESSION_DOMAIN; do
  if [ -z "${!v:-}" ]; then
    echo "deploy-operator.sh: $v is not set (see --help)" >&2
    exit 1
  fi
done
[ -r "$KUBECONFIG" ] || { echo "deploy-operator.sh: KUBECONFIG=$KUBECONFIG is not a readable file" >&2; exit 1; }
GSHARE="${GSHARE:-gshare}"
KUBECTL="${KUBECTL:-kubectl}"

args=(operator manifests --cluster-id "$CLUSTER_ID" --control-plane-url "$SOT_ENDPOINT" --session-domain "$SESSION_DOMAIN")
[ -n "${IMAGE:-}" ] && args+=(--image "$IMAGE")
manifests="$(OPERATOR_TOKEN="$OPERATOR_TOKEN" "$GSHARE" "${args[@]}")"
printf '%s\n' "$manifests" | "$KUBECTL" --kubeconfig "$KUBECONFIG" apply -f -
# The operator re-reads its token file on every call: no restart is needed when only the token changed.
