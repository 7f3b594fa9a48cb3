#!/usr/bin/env bash
# The project's test command (README.md names it; .ci/run runs it): every unit test, the one
# integration-test binary (tests/it, including the kubectl fidelity tests against the fake API
# server) and the fake server's own unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
command -v kubectl >/dev/null || { echo "hack/test.sh: kubectl is needed (apt-get install kubernetes-client)" >&2; exit 1; }
exec cargo test --workspace --locked "$@"
