#!/usr/bin/env bash
# The console's end-to-end tests: builds the gshare binary and the fake-cluster example, then drives
# Debian's Chromium (playwright-core) through sign-in, registration (success and each probe
# failure), nodes, edit, offerings and a session's life (kubectl puts the GShareSession CRD on a
# fake cluster; the test plays the operator), unregister, the other pages and the 200-cluster
# render budget.
# Screenshots, logs and results.json land in web/e2e/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(cd .. && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
chromium="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || { echo "web/e2e/run.sh: Chromium is needed at $chromium (apt-get install chromium), or set CHROMIUM" >&2; exit 1; }
[ -d node_modules ] || npm ci --no-audit --no-fund
(cd "$root" && cargo build --locked -p gshare --bin gshare --example fake-cluster)
export GSHARE_BIN="$CARGO_TARGET_DIR/debug/gshare"
export FAKE_CLUSTER_BIN="$CARGO_TARGET_DIR/debug/examples/fake-cluster"
export CHROMIUM="$chromium"
exec node e2e/console.e2e.mjs "$@"
