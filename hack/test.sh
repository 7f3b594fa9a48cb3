#!/usr/bin/env bash
# The project's test command (README.md names it; .ci/run runs it): every unit test, the one
# integration-test binary (tests/it, including the kubectl fidelity tests against the fake API
# server), the fake server's own unit tests, and the console's (web/) component and browser tests.
# On a fresh Debian machine run as root, it first installs what it needs (hack/deps.sh: Chromium,
# kubectl, openssl, curl, uuid-runtime, systemd-analyze; the console's npm packages via npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
./hack/deps.sh
# The console's type check and component tests (Vitest); its browser tests are web/e2e/run.sh.
(cd web && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm test --silent)
cargo test --workspace --locked "$@"
# The console in headless Chromium against the real binary and fake clusters (/usr/bin/chromium).
web/e2e/run.sh
