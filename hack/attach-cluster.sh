#!/usr/bin/env bash
# Register a cluster with a running gShare Edge server and attach the operator to it, from a shell.
# The server applies the operator's objects through the kubeconfig you register (server-side apply)
# and keeps the operator's token renewed from then on.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: GSHARE_URL=https://gshare.example.com ADMIN_TOKEN=$(gshare admin token | tail -1) NAME=gpu-a \
       KUBECONFIG=./cluster.kubeconfig [ROLE=primary] [SESSION_DOMAIN=lab.example.com] hack/attach-cluster.sh

  GSHARE_URL      the server's URL (its public_url)
  ADMIN_TOKEN     an admin API token (`gshare admin token` on the server host)
  NAME            display name for the cluster
  KUBECONFIG      the cluster's kubeconfig, credentials embedded
  ROLE            optional: primary (default) or standby
  SESSION_DOMAIN  optional: the cluster's own session domain (default: the server's)
  CLUSTER_ID      optional: skip registration and attach this registered cluster
  CURL_OPTS       optional: extra curl options (e.g. --cacert ca.pem)
Prints the cluster id on the last line.
USAGE
}

case "${1:-}" in -h|--help) usage; exit 0 ;; "") ;; *) usage >&2; exit 2 ;; esac
need=(GSHARE_URL ADMIN_TOKEN)
[ -z "${CLUSTER_ID:-}" ] && need+=(NAME KUBECONFIG)
for v in "${need[@]}"; do
  if [ -z "${!v:-}" ]; then
    echo "attach-cluster.sh: $v is not set (see --help)" >&2
    exit 1
  fi
done
url="${GSHARE_URL%/}"
# shellcheck disable=SC2086
api() { curl -sS ${CURL_OPTS:-} -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' "$@"; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -1; }

if [ -z "${CLUSTER_ID:-}" ]; then
  [ -r "$KUBECONFIG" ] || { echo "attach-cluster.sh: KUBECONFIG=$KUBECONFIG is not a readable file" >&2; exit 1; }
  b64="$(base64 -w0 <"$KUBECONFIG")"
  body="{\"name\":\"$NAME\",\"role\":\"${ROLE:-primary}\",\"kubeconfig_b64\":\"$b64\""
  [ -n "${SESSION_DOMAIN:-}" ] && body="$body,\"session_domain\":\"$SESSION_DOMAIN\""
  body="$body}"
  out="$(api -w '\n%{http_code}' -X POST "$url/api/v1/clusters" --data-binary @- <<<"$body")"
  code="${out##*$'\n'}"; out="${out%$'\n'*}"
  if [ "$code" != 201 ]; then
    echo "attach-cluster.sh: registration failed ($code): $(printf '%s' "$out" | field message)" >&2
    exit 1
  fi
  CLUSTER_ID="$(printf '%s' "$out" | field id)"
  echo "registered $NAME as $CLUSTER_ID" >&2
fi
out="$(api -w '\n%{http_code}' -X POST "$url/api/v1/clusters/$CLUSTER_ID/attach")"
code="${out##*$'\n'}"; out="${out%$'\n'*}"
if [ "$code" != 200 ]; then
  echo "attach-cluster.sh: attach of $CLUSTER_ID failed ($code): $(printf '%s' "$out" | field message)" >&2
  echo "attach-cluster.sh: re-run with CLUSTER_ID=$CLUSTER_ID once fixed" >&2
  exit 1
fi
echo "operator attached to $CLUSTER_ID (token expires $(printf '%s' "$out" | field expires_at))" >&2
echo "$CLUSTER_ID"
