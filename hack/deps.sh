#!/usr/bin/env bash
# What ./hack/test.sh (and .ci/run) need on a Debian machine. As root, installs what is missing
# with apt-get; otherwise names the packages to install and fails. Sourced or run:
#   ./hack/deps.sh          # check / install
set -euo pipefail

# <command> <debian package> [why]
needs=(
  "kubectl kubernetes-client"       # the kubectl fidelity tests against the fake API server
  "openssl openssl"
  "curl curl"
  "uuidgen uuid-runtime"            # the seed's registration command uses $(uuidgen)
  "systemd-analyze systemd"         # verifies packaging/systemd/gshare.service
  "chromium chromium"               # web/e2e/run.sh drives Debian's Chromium, headless
  "nginx nginx"                     # tests/it/ingress_nginx.rs: the connect path through a real nginx
  "promtool prometheus"             # tests/it/monitoring.rs: promtool check metrics / check rules / test rules
  "slapd slapd"                     # tests/it/directory.rs: LDAP sign-in against a real OpenLDAP on loopback
  "ldapsearch ldap-utils"           # looking into that directory by hand (ldapsearch, ldapwhoami)
)

missing=()
for n in "${needs[@]}"; do
  read -r cmd pkg <<<"$n"
  # web/e2e/run.sh takes another Chromium from $CHROMIUM.
  [ "$cmd" = chromium ] && [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && continue
  # nginx lives in /usr/sbin, which a non-root PATH may lack.
  [ "$cmd" = nginx ] && [ -x /usr/sbin/nginx ] && continue
  [ "$cmd" = slapd ] && [ -x /usr/sbin/slapd ] && continue
  command -v "$cmd" >/dev/null || missing+=("$pkg")
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "${EUID}" = 0 ] && command -v apt-get >/dev/null; then
    echo "hack/deps.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "hack/deps.sh: missing tools; install them first (as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

# The console (web/): build.rs runs its npm build; Node.js is not installed here (Debian's may be
# older than the 20+ the console needs).
command -v npm >/dev/null || {
  echo "hack/deps.sh: Node.js 20+ with npm is needed to build the console (web/); install it (e.g. from nodejs.org or NodeSource)" >&2
  exit 1
}

# The OIDC sign-in tests' OpenID provider (tests/oidc: npm `oidc-provider`, run by tests/it/oidc.rs).
(cd "$(dirname "$0")/../tests/oidc" && npm ci --no-audit --no-fund)
