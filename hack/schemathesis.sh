#!/usr/bin/env bash
# Schemathesis against the server's own OpenAPI document (/api/openapi.json): every documented
# operation with generated valid and invalid requests, expecting no 5xx and no status code the
# document does not list for the operation.
#   ./hack/schemathesis.sh             -> SCHEMATHESIS_EXAMPLES (default 25) cases per operation
# Builds the debug binary, runs it in a temporary data directory inside a network namespace of its
# own (loopback only: generated kubeconfigs and API server URLs can reach nothing), mints an admin
# and an operator token, and runs two passes: /api/v1 and the public routes with the admin token,
# /internal with the operator token. Installs schemathesis (PyPI) into a virtualenv when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
version=4.32.5
examples="${SCHEMATHESIS_EXAMPLES:-25}"

if [ -z "${GSHARE_SCHEMATHESIS_INNER:-}" ]; then
    # schemathesis in a virtualenv of its own, on Python 3.13 or newer when there is one: on 3.11
    # its fuzzing phase died on POST /internal/audit/operator with CPython's "SystemError: AST
    # constructor recursion depth mismatch" (hypothesis describing a lambda), a tool error, not a
    # server answer.
    py=python3
    for candidate in python3.14 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[3-9]*/bin/python3; do
        if command -v "$candidate" >/dev/null && "$candidate" -c 'import venv' 2>/dev/null; then
            py=$candidate
            break
        fi
    done
    pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    case "$pyver" in
        3.1[3-9] | 3.[2-9][0-9]) ;;
        *) echo "hack/schemathesis.sh: warning: Python $pyver may crash schemathesis's fuzzing phase (use 3.13+)" >&2 ;;
    esac
    venv="${GSHARE_SCHEMATHESIS_VENV:-$HOME/.cache/gshare/schemathesis-py$pyver}"
    if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
        rm -rf "$venv"
        "$py" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$version"
    fi
    export PATH="$venv/bin:$PATH"
    # The binary the integration tests use (same features, so no rebuild after ./hack/test.sh).
    cargo test --locked --no-run --test it
    # Re-run this script in a fresh network namespace (root, as in CI); without one, refuse rather
    # than let generated cluster addresses reach the network.
    if ! unshare --net true 2>/dev/null; then
        echo "hack/schemathesis.sh: cannot create a network namespace (unshare --net); run as root" >&2
        exit 1
    fi
    exec unshare --net env GSHARE_SCHEMATHESIS_INNER=1 "$0" "$@"
fi

ip link set lo up
bin="$CARGO_TARGET_DIR/debug/gshare"
work=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export GSHARE_CONFIG=/dev/null GSHARE_DATA_DIR="$work/data" GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=warn
# Both tokens before the server serves the run. The server makes the key rings on its first start
# (no command does: a ring made by a command would sign tokens the server rejects), so it starts
# once and stops; then both tokens are signed offline. With a server running, `token operator`
# asks it instead, and the server refuses a token for a cluster that is not registered (clu_local
# is not).
"$bin" serve >"$work/first.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/first.log" >&2; exit 1; }
    sleep 0.2
done
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=
admin=$("$bin" admin token --ttl 1h | tail -1)
operator=$("$bin" token operator --cluster-id clu_local --ttl 1h | tail -1)
"$bin" serve >"$work/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
    curl -fsS "$base/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.2
done
curl -fsS "$base/healthz" >/dev/null


run() { # run <label> <token> <schemathesis filter args...>
    local label=$1 token=$2
    shift 2
    echo "== schemathesis: $label ($examples examples per operation)"
    schemathesis run "$base/api/openapi.json" \
        --checks not_a_server_error,status_code_conformance \
        --max-examples "$examples" --seed 1 --workers 2 --no-shrink \
        --phases examples,coverage,fuzzing \
        --suppress-health-check all --warnings off \
        --request-timeout 30 \
        -H "Authorization: Bearer $token" \
        --report junit --report-junit-path "$work/$label.xml" \
        "$@" || status=$?
    python3 - "$work/$label.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
tests = sum(int(s.get("tests", 0)) for s in suites)
failures = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
print(f"operations: {tests}, failing: {failures}")
EOF
}

status=0
# Logout would end the admin token mid-run; its behaviour has integration tests.
run api "$admin" --exclude-path-regex '^/internal/' --exclude-path /api/v1/auth/logout
run internal "$operator" --include-path-regex '^/internal/'
if grep -q 'panicked' "$work/server.log"; then
    echo "hack/schemathesis.sh: the server logged a panic:" >&2
    grep -A5 panicked "$work/server.log" >&2
    status=1
fi
kill -0 "$server_pid" || { echo "hack/schemathesis.sh: the server died" >&2; status=1; }
exit "$status"
