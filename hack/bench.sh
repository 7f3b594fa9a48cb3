#!/usr/bin/env bash
# Operator-facing benchmarks on a release build. Prints medians; every ratio is against a baseline
# measured in the same run. Usage: hack/bench.sh [start|rss|storm|size|jwt|callbacks|snapshot|sessions|admission|metrics|fleet|all]
# (default: all); also slow (stalled-body storms), ws-relay (WebSockets through relayed sessions) and
# console (the e2e with its time budgets enforced).
# `fleet` takes flags: --clusters 10 --nodes 500 --gpus 8 --sessions 2000 --seconds 15, and --small
# (the server in 256 MiB and one CPU).
# `signin` takes flags: --students 200 --users 1000 --sessions 20000 --seconds 10, and --ldap / --oidc
# (the same class signs in again from a real slapd / OpenID provider, against the local class).
# BENCH_PROFILE=dev measures a debug build instead (quicker to build, much slower to run).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
what="${1:-all}"
[ $# -gt 0 ] && shift
# GSHARE_BENCH_BIN: measure an existing binary (e.g. the dist build, $CARGO_TARGET_DIR/dist/gshare)
# instead of building the release one.
if [ -n "${GSHARE_BENCH_BIN:-}" ]; then
  bin="$GSHARE_BENCH_BIN"
elif [ "${BENCH_PROFILE:-release}" = dev ]; then
  cargo build --locked -q
  bin="$CARGO_TARGET_DIR/debug/gshare"
else
  cargo build --release --locked -q
  bin="$CARGO_TARGET_DIR/release/gshare"
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Time from exec to a 200 from /readyz with existing keys and state (first start done beforehand).
# Milliseconds from `gshare serve` (environment: the KEY=VALUE arguments after the port) to its
# first 200 from /readyz; the server is stopped afterwards.
ready_ms() {
  python3 - "$bin" "$@" <<'PY'
import os, subprocess, sys, time, urllib.request
bin, port, *env = sys.argv[1:]
e = dict(kv.split("=", 1) for kv in env)
e.update({"GSHARE_LISTEN": f"127.0.0.1:{port}", "PATH": os.environ["PATH"]})
t0 = time.perf_counter()
p = subprocess.Popen([bin, "serve"], env=e, stderr=subprocess.DEVNULL)
while True:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1).status == 200:
            break
    except Exception:
        time.sleep(0.0005)
print(f"{(time.perf_counter() - t0) * 1000:.1f}")
p.terminate(); p.wait()
PY
}

# The server makes the key rings on its first start; no command does (a ring made by a command
# would sign tokens the server rejects). Start one on `data` and stop it.
make_keys() {
  local data=$1 port pid
  port=$(free_port)
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=error "$bin" serve 2>/dev/null &
  pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

start_to_ready() {
  local data="$work/start" port
  make_keys "$data"
  for _ in $(seq 1 15); do
    port=$(free_port)
    ready_ms "$port" GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null
  done | median | xargs -I{} echo "start-to-ready (existing keys), median of 15: {} ms (target <= 100 ms)"
}

# Idle RSS 1 s and 10 s after /readyz answers (issue "Edge footprint": <= 32 MiB empty, <= 40 MiB with
# 200 clusters, at 10 s): a first start (keys, the initial admin's argon2id hash), a restart, and a
# restart with 200 registered clusters written by examples/fleet_seed. Also the anonymous (heap,
# stacks) and file-backed (the binary's pages) parts, which say where the memory is.
idle_rss() {
  local data="$work/rss" port pid seed="${BENCH_SEED_BIN:-}"
  local profile_flag=(--release)
  if [ -z "$seed" ]; then
    [ "${BENCH_PROFILE:-release}" = dev ] && profile_flag=()
    cargo build "${profile_flag[@]}" --locked -q --example fleet_seed
    seed="$CARGO_TARGET_DIR/$([ "${BENCH_PROFILE:-release}" = dev ] && echo debug || echo release)/examples/fleet_seed"
  fi
  mem() { awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {printf "%.1f MiB (anon %.1f, file %.1f)", r/1024, a/1024, f/1024}' /proc/$1/status; }
  for run in "first start (generates keys, hashes the initial password)" "restart with existing state" "restart with 200 registered clusters"; do
    if [ "$run" = "restart with 200 registered clusters" ]; then
      "$seed" seed --data-dir "$data" --clusters 200 --sessions 0 --out "$work/rss-plan.lua" >/dev/null
    fi
    port=$(free_port)
    GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_PROBE_INTERVAL=86400s "$bin" serve 2>/dev/null &
    pid=$!
    until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
    sleep 1
    local at1; at1=$(mem $pid)
    sleep 9
    echo "idle RSS, $run: 1 s after ready $at1; 10 s after ready $(mem $pid)"
    kill $pid; wait $pid 2>/dev/null || true
  done
  echo "(targets at 10 s: <= 32 MiB empty, <= 40 MiB with 200 clusters)"
}

# Stalled request bodies: /readyz latency and RSS while 4,200 sign-ins from one
# address, 66 from each of 64 addresses, or 200 streams of one h2c connection hold their bodies
# open (hack/storm_slow.py); then HTTP/2 abuse (rapid reset, CONTINUATION, SETTINGS and PING floods)
# and a storm of WebSocket upgrades held open. A fresh server for each; BENCH_SECONDS (default 12)
# per storm; SLOW_SCENARIOS picks some.
slow_bodies() {
  local venv="$work/venv" data port pid
  python3 -m venv "$venv" && "$venv/bin/pip" install -q h2 >/dev/null
  local scenarios="${SLOW_SCENARIOS:-one-address many-addresses h2c rst-flood continuation-flood settings-flood ping-flood ws-upgrades}"
  for scenario in $scenarios; do
    data="$work/slow-$scenario"
    port=$(free_port)
    GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=error "$bin" serve 2>/dev/null &
    pid=$!
    until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
    for _ in $(seq 1 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null; done
    "$venv/bin/python" hack/storm_slow.py "$port" "$pid" "$scenario" "${BENCH_SECONDS:-12}"
    kill $pid; wait $pid 2>/dev/null || true
  done
}

# WebSockets through real relayed sessions (hack/storm_slow.py ws-relay): S running sessions seeded
# into the state (examples/fleet_seed.rs, one cluster), the server's session domain and ingress set,
# the ingress and app played by `storm_slow.py ws-backend` (101, then an echo). 6,000 upgrades from 64
# addresses held idle, trickling frames or never reading, 200 upgrade heads sent a byte every 2 s,
# and one well-behaved user; /healthz p50/p99 before and during, fds and RSS before, at the peak,
# once the clients have closed and 30 s later. BENCH_SECONDS (default 20) of storm;
# STORM_SESSION_COUNT (default 100) sessions; STORM_UPGRADES (default 6000).
ws_relay() {
  local profile_flag=(--release) seed="${BENCH_SEED_BIN:-}"
  # BENCH_SEED_BIN: a fleet_seed binary already built (it only writes the state file; its
  # profile does not matter to what is measured).
  if [ -z "$seed" ]; then
    [ "${BENCH_PROFILE:-release}" = dev ] && profile_flag=()
    cargo build "${profile_flag[@]}" --locked -q --example fleet_seed
    seed="$CARGO_TARGET_DIR/$([ "${BENCH_PROFILE:-release}" = dev ] && echo debug || echo release)/examples/fleet_seed"
  fi
  local data="$work/ws-relay" port bport pid bpid host=sessions.bench.test
  mkdir -p "$data"
  "$seed" seed --data-dir "$data" --clusters 1 --sessions "${STORM_SESSION_COUNT:-100}" --out "$work/ws-plan.lua" >/dev/null
  # The sessions' CR names: ses_<ULID> -> ses-<ulid>.
  grep '^sessions' "$work/ws-plan.lua" | grep -oE 'ses_[0-9A-Z]+' | tr 'A-Z_' 'a-z-' >"$work/ws-crs"
  bport=$(free_port)
  python3 hack/storm_slow.py ws-backend "$bport" &
  bpid=$!
  port=$(free_port)
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=error \
    GSHARE_PROBE_INTERVAL=86400s GSHARE_SESSION_DOMAIN="$host" GSHARE_SESSION_URL_SCHEME=http \
    GSHARE_SESSION_INGRESS="127.0.0.1:$bport" "$bin" serve 2>"$work/ws-relay.log" &
  pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
  until python3 -c "import socket; socket.create_connection(('127.0.0.1', $bport)).close()" 2>/dev/null; do sleep 0.05; done
  for _ in $(seq 1 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null; done
  echo "ws-relay: $(wc -l <"$work/ws-crs") sessions, max_connections 4096 (default), profile ${BENCH_PROFILE:-release}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  STORM_HOST="$host" STORM_SESSIONS="$work/ws-crs" STORM_UPGRADES="${STORM_UPGRADES:-6000}" \
    python3 hack/storm_slow.py "$port" "$pid" ws-relay "${BENCH_SECONDS:-20}"
  kill "$pid" "$bpid"; wait "$pid" "$bpid" 2>/dev/null || true
}

# RSS before, during (peak) and after an attack storm: 300 alias-bomb kubeconfig
# registrations, 3,000 failed logins from one address, 3,000 malformed bodies and 400 bodies at the
# 1 MiB limit (half just over it), 16 at a time; RSS right after and after 5 s and 30 s idle (does
# the allocator give memory back?). /healthz p50/p99 (from another address) for 3 s before the
# storm, the baseline of the same run, and during it.
storm_rss() {
  local data="$work/storm" port pid admin
  mkdir -p "$data"
  port=$(free_port)
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=error "$bin" serve 2>/dev/null &
  pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
  admin=$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" admin token 2>/dev/null | tail -n1)
  for _ in $(seq 1 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null; done
  rss() { awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' /proc/$pid/status; }
  echo "storm: RSS fresh (after 50 requests): $(rss)"
  python3 - "$port" "$admin" <<'PY'
import base64, json, sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
port, admin = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}"
# A kubeconfig with a billion-laughs tail: 9 levels of 9 aliases each.
levels = ["l0: &l0 [" + ",".join(["lol"] * 9) + "]"]
for i in range(1, 9):
    levels.append(f"l{i}: &l{i} [" + ",".join([f"*l{i-1}"] * 9) + "]")
bomb = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://192.0.2.1:6443", certificate-authority-data: AAAA}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
""" + "\n".join(levels) + "\n"
b64 = base64.b64encode(bomb.encode()).decode()
def post(path, body, token=None, ctype="application/json"):
    req = urllib.request.Request(url + path, data=body, method="POST", headers={"Content-Type": ctype})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 0
jobs = []
jobs += [("/api/v1/clusters", json.dumps({"name": f"bomb{i}", "role": "primary", "kubeconfig_b64": b64}).encode(), admin) for i in range(300)]
jobs += [("/api/v1/auth/login", json.dumps({"username": "admin", "password": f"wrong{i}"}).encode(), None) for i in range(3000)]
jobs += [("/api/v1/clusters", b'{"name": [[[[[[[[' * 200, admin) for i in range(3000)]
# Bodies just under the 1 MiB JSON limit (a kubeconfig_b64 of junk) and just over it.
big = json.dumps({"name": "big", "role": "primary", "kubeconfig_b64": "A" * (1024 * 1024 - 100)}).encode()
jobs += [("/api/v1/clusters", big, admin) for i in range(200)]
jobs += [("/api/v1/clusters", big + b" " * 200, admin) for i in range(200)]
# /healthz from an address of its own (a new connection every 20 ms): 3 s before the storm (the
# baseline of this run) and during it.
import http.client, threading, time
lat, phase, stop = [], ["before"], threading.Event()
def probe():
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=2, source_address=("127.0.0.200", 0))
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
            c.close()
        except Exception:
            ok = False
        lat.append((phase[0], ok, (time.perf_counter() - t0) * 1000))
        time.sleep(0.02)
t = threading.Thread(target=probe)
t.start()
time.sleep(3)
phase[0] = "during"
t0 = time.perf_counter()
with ThreadPoolExecutor(16) as ex:
    codes = list(ex.map(lambda j: post(*j), jobs))
took = time.perf_counter() - t0
stop.set()
t.join()
five = sum(1 for c in codes if c >= 500 or c == 0)
print(f"storm: {len(codes)} requests in {took:.1f} s, 5xx or dropped: {five}")
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")
for ph in ("before", "during"):
    ok = [ms for p, good, ms in lat if p == ph and good]
    bad = sum(1 for p, good, _ in lat if p == ph and not good)
    print(f"storm: /healthz {ph} the storm: p50 {pct(ok, 50):.1f} ms, p99 {pct(ok, 99):.1f} ms ({len(ok)} answered, {bad} failed)")
PY
  echo "storm: RSS right after: $(rss)"
  echo "storm: RSS peak during the storm (VmHWM): $(awk '/VmHWM/ {printf "%.1f MiB", $2/1024}' /proc/$pid/status)"
  sleep 5
  echo "storm: RSS after 5 s idle: $(rss)"
  sleep 25
  echo "storm: RSS after 30 s idle: $(rss)"
  kill $pid; wait $pid 2>/dev/null || true
}

binary_size() {
  echo "stripped binary: $(stat -c %s "$bin" | awk '{printf "%.1f MiB", $1/1048576}') (target <= 25 MiB)"
}

jwt() {
  cargo bench --bench jwt --locked -- --noplot 2>/dev/null | grep -E "^rs256_verify|time:"
}

# Operator callbacks under load: wrk on loopback, 64 connections, the reports of a
# 10-node x 8-GPU cluster (clu_local, bootstrapped). (a) /healthz as the baseline of this run,
# (b) gpu-devices reports that repeat what is stored (target >= 0.5 x a), (c) gpu-devices reports
# that change a card every time, each a durable write (target >= 2000/s). p99 of each.
# The state file is on the same disk as $TMPDIR (fsync is real unless that is a tmpfs).
callbacks() {
  command -v wrk >/dev/null || { echo "installing wrk (Debian package)" >&2; apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null; }
  command -v wrk >/dev/null || { echo "callbacks: wrk is needed (apt-get install wrk)" >&2; return 1; }
  local data="$work/callbacks" port dur="${BENCH_SECONDS:-10}"
  mkdir -p "$data" && : >"$work/kubeconfig"
  local token
  make_keys "$data"
  token=$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" token operator --cluster-id clu_local --ttl 1d 2>/dev/null | tail -n1)
  port=$(free_port)
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" GSHARE_LOG_LEVEL=warn \
    GSHARE_BOOTSTRAP_LOCAL_CLUSTER=true GSHARE_LOCAL_KUBECONFIG="$work/kubeconfig" "$bin" serve 2>"$work/callbacks.log" &
  local pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
  local url="http://127.0.0.1:$port"
  # The cluster's reports once (creates 10 nodes and 80 cards).
  for n in $(seq 0 9); do
    curl -fs -o /dev/null -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
      -d "{\"node_id\":\"gpu-$n\",\"node_cpu\":64,\"node_mem_gb\":512,\"role\":\"gpu\",\"node_ready\":true,\"cluster_id\":\"clu_local\"}" \
      "$url/internal/inventory/nodes"
  done
  cat >"$work/gpu.lua" <<LUA
-- 80 cards: node gpu-<n>, uuid GPU-bench-<n>-<g>. CHANGE=1: every request sets a new total_mem_mb
-- on a card only this wrk thread writes (so every request changes stored state).
local change = os.getenv("CHANGE") == "1"
local threads = 0
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function init(args)
  tid = tid or 0; nthreads = 2; i = 0; n = 0
  wrk.method = "POST"; wrk.path = "/internal/inventory/gpu-devices"
  wrk.headers["Authorization"] = "Bearer $token"; wrk.headers["Content-Type"] = "application/json"
end
function body(card, mem)
  local node, g = math.floor(card / 8), card % 8
  return string.format('{"node_id":"gpu-%d","uuid":"GPU-bench-%d-%d","model":"NVIDIA A100-SXM4-80GB","mode":"fractional","total_mem_mb":%d,"used_mem_mb":0,"total_cores":100,"used_cores":0,"status":"ready","node_ready":true,"node_cpu":64,"node_mem_gb":512,"cluster_id":"clu_local"}', node, node, g, mem)
end
function request()
  local card, mem
  if change then
    card = (i % 40) * nthreads + tid; n = n + 1; mem = 81920 + n
  else
    card = i % 80; mem = 81920
  end
  i = i + 1
  return wrk.format(nil, nil, nil, body(card, mem))
end
LUA
  for c in $(seq 0 79); do
    curl -fs -o /dev/null -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
      -d "{\"node_id\":\"gpu-$((c / 8))\",\"uuid\":\"GPU-bench-$((c / 8))-$((c % 8))\",\"model\":\"NVIDIA A100-SXM4-80GB\",\"mode\":\"fractional\",\"total_mem_mb\":81920,\"used_mem_mb\":0,\"total_cores\":100,\"used_cores\":0,\"status\":\"ready\",\"node_ready\":true,\"node_cpu\":64,\"node_mem_gb\":512,\"cluster_id\":\"clu_local\"}" \
      "$url/internal/inventory/gpu-devices"
  done
  run_wrk() { # label, extra wrk args...
    local label=$1; shift
    local out; out=$(wrk -t2 -c64 -d"${dur}s" --latency "$@")
    local rps p99 bad
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    echo "$label: ${rps} req/s, p99 ${p99}${bad:+, NON-2xx: $bad}" >&2
    echo "$rps"
  }
  local base same changed commits0 commits1
  base=$(run_wrk "(a) GET /healthz baseline" "$url/healthz")
  export CHANGE=0
  same=$(run_wrk "(b) unchanged gpu-devices reports" -s "$work/gpu.lua" "$url")
  commits0=$(curl -fs "$url/metrics" | awk '$1 == "gshare_store_commit_seconds_count" {print $2}')
  export CHANGE=1
  changed=$(run_wrk "(c) state-changing gpu-devices reports (durable)" -s "$work/gpu.lua" "$url")
  commits1=$(curl -fs "$url/metrics" | awk '$1 == "gshare_store_commit_seconds_count" {print $2}')
  awk -v b="$base" -v s="$same" 'BEGIN {printf "(b)/(a) = %.2f (target >= 0.5)\n", s / b}'
  awk -v c="$changed" 'BEGIN {printf "(c) = %.0f reports/s (target >= 2000)\n", c}'
  awk -v c="$changed" -v d="$dur" -v k0="$commits0" -v k1="$commits1" \
    'BEGIN {n = k1 - k0; if (n > 0) printf "(c) group commit: %d fsyncs for ~%.0f writes (%.1f writes per commit)\n", n, c * d, c * d / n}'
  curl -fs "$url/metrics" | grep -E '^gshare_store_commit_seconds_(sum|count)|^gshare_callbacks_total.*gpu-devices' >&2
  kill $pid; wait $pid 2>/dev/null || true
}

# Snapshot of 40,000 GPUs + 20,000 sessions: time, size, callbacks' p50/p99 with and without it.
snapshot() {
  cargo bench --locked --bench snapshot 2>/dev/null | grep -E '^(snapshot|gpu-devices)'
}

# Forward-auth verify vs /healthz, the /proxy/ relay vs its ingress directly, and the session list
# pages, with 20,000 ended and 2,000 live sessions stored (BENCH_HISTORY, BENCH_LIVE change them).
sessions() {
  command -v wrk >/dev/null || { echo "sessions: wrk is needed (apt-get install wrk)" >&2; return 1; }
  echo "load before: $(uptime)"
  nice -n 10 cargo bench --locked --bench sessions 2>/dev/null | grep -vE '^(running|test result|$)'
  echo "load after: $(uptime)"
}

# Create-session latency with fair sharing's admission (policy + fit check) at 40,000 GPUs
# against creates that skip both, p50/p99 (benches/admission.rs; BENCH_GPUS, BENCH_CREATES).
admission() {
  local profile=()
  [ "${BENCH_PROFILE:-release}" = dev ] && profile=(--profile dev)
  echo "load before: $(uptime)"
  nice -n 10 cargo bench --locked "${profile[@]}" --bench admission 2>/dev/null | grep -vE '^(running|test result|$)'
  echo "load after: $(uptime)"
}

# GET /metrics against /healthz: the server's CPU per request with 20,000 ended and 2,000 live
# sessions stored (a scrape's cost must not grow with the sessions).
metrics() {
  command -v wrk >/dev/null || { echo "metrics: wrk is needed (apt-get install wrk)" >&2; return 1; }
  echo "load before: $(uptime)"
  nice -n 10 cargo bench --locked --bench metrics 2>/dev/null | grep -vE '^(running|test result|$)'
  echo "load after: $(uptime)"
}

# Fleet scale: C clusters x N nodes x G GPUs and S running sessions. The state is
# seeded (examples/fleet_seed.rs), every node and card reported once, then hack/fleet.lua drives
# the operators' steady mix at full speed with wrk on the same cores. Prints the mix's rate,
# p50/p99 and its ratio to /healthz (same run), fsyncs/s, RSS, the state file's size, the
# cluster list's and one node page's latency during the flood, one cluster flooding at ~10x its
# share while the others' p99 is measured, and start-to-ready with that state.
# `fleet --small`: the server alone in a small machine's limits, 256 MiB of memory and one CPU's
# worth of time (MemoryMax=256M, CPUQuota=100%): through `systemd-run --scope` where systemd runs,
# else a cgroup of its own (v2, or v1's memory and cpu controllers). Sets small_wrap, the command
# prefix that starts the server inside; small_machine_report says whether it hit the limit.
small_machine() {
  local name="gshare-bench-$$"
  if command -v systemd-run >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    small_wrap=(systemd-run --quiet --scope -p MemoryMax=256M -p CPUQuota=100% --)
    small_cg=""
    return
  fi
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    small_cg="/sys/fs/cgroup/$name"
    mkdir "$small_cg" && echo 268435456 >"$small_cg/memory.max" && echo "100000 100000" >"$small_cg/cpu.max"
    small_procs=("$small_cg/cgroup.procs")
  else
    small_cg="/sys/fs/cgroup/memory/$name"
    mkdir "$small_cg" "/sys/fs/cgroup/cpu/$name"
    echo 268435456 >"$small_cg/memory.limit_in_bytes"
    echo 100000 >"/sys/fs/cgroup/cpu/$name/cpu.cfs_period_us"
    echo 100000 >"/sys/fs/cgroup/cpu/$name/cpu.cfs_quota_us"
    small_procs=("$small_cg/cgroup.procs" "/sys/fs/cgroup/cpu/$name/cgroup.procs")
  fi
  # The shell joins the cgroup(s), then becomes the server (same pid).
  small_wrap=(sh -c 'for f in "$@"; do case "$f" in --) break ;; esac; echo $$ >"$f"; done; while [ "$1" != -- ]; do shift; done; shift; exec "$@"' sh "${small_procs[@]}" --)
  echo "small machine: cgroup $small_cg (memory 256 MiB, one CPU's worth)"
}

small_machine_report() {
  [ -n "${small_cg:-}" ] || { echo "small machine: systemd scope (see journalctl for OOM)"; return; }
  local alive=no; kill -0 "$pid" 2>/dev/null && alive=yes
  if [ -f "$small_cg/memory.events" ]; then
    echo "small machine: server alive $alive; cgroup peak $(awk '{printf "%.1f MiB", $1/1048576}' "$small_cg/memory.peak" 2>/dev/null || echo '?'); $(tr '\n' ' ' <"$small_cg/memory.events")"
  else
    echo "small machine: server alive $alive; cgroup peak $(awk '{printf "%.1f MiB", $1/1048576}' "$small_cg/memory.max_usage_in_bytes") (page cache included), limit hits $(cat "$small_cg/memory.failcnt"), $(grep oom_kill "$small_cg/memory.oom_control" | tr '\n' ' ')"
  fi
}

fleet() {
  local clusters=10 nodes=500 gpus=8 sessions=2000 dur=15 small=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --small) small=1; shift ;;
      --clusters) clusters=$2; shift 2 ;;
      --nodes) nodes=$2; shift 2 ;;
      --gpus) gpus=$2; shift 2 ;;
      --sessions) sessions=$2; shift 2 ;;
      --seconds) dur=$2; shift 2 ;;
      *) echo "fleet: unknown flag $1" >&2; return 2 ;;
    esac
  done
  command -v wrk >/dev/null || { echo "installing wrk (Debian package)" >&2; apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null; }
  local profile_flag=(--release) seed="${BENCH_SEED_BIN:-}"
  # BENCH_SEED_BIN: a fleet_seed binary already built (as for ws-relay).
  if [ -z "$seed" ]; then
    [ "${BENCH_PROFILE:-release}" = dev ] && profile_flag=()
    cargo build "${profile_flag[@]}" --locked -q --example fleet_seed
    seed="$CARGO_TARGET_DIR/$([ "${BENCH_PROFILE:-release}" = dev ] && echo debug || echo release)/examples/fleet_seed"
  fi
  local data="$work/fleet" plan="$work/plan.lua" port pid url
  mkdir -p "$data"
  echo "fleet: $clusters clusters x $nodes nodes x $gpus GPUs, $sessions running sessions, ${dur}s per run, profile ${BENCH_PROFILE:-release}"
  local ids; ids=$("$seed" seed --data-dir "$data" --clusters "$clusters" --sessions "$sessions" --out "$plan")
  local env=(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LOG_LEVEL=warn GSHARE_PROBE_INTERVAL=86400s)
  port=$(free_port); url="http://127.0.0.1:$port"
  local wrap=()
  [ -n "$small" ] && small_machine && wrap=("${small_wrap[@]}")
  env "${env[@]}" GSHARE_LISTEN="127.0.0.1:$port" "${wrap[@]}" "$bin" serve 2>"$work/fleet.log" &
  pid=$!
  until curl -fs "$url/readyz" >/dev/null; do sleep 0.05; done
  # Tokens once the first start made the key ring.
  local toks="tokens = {"
  for id in $ids; do
    toks+="\"$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" token operator --cluster-id "$id" --ttl 1d 2>/dev/null | tail -n1)\","
  done
  echo "$toks}" >>"$plan"
  "$seed" populate --url "$url" --plan "$plan" --nodes "$nodes" --gpus "$gpus"
  local admin first_id
  admin=$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" admin token 2>/dev/null | tail -n1)
  first_id=$(head -n1 <<<"$ids")
  rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' /proc/$pid/status; }
  commits() { curl -fs "$url/metrics" | awk '$1 == "gshare_store_commit_seconds_count" {print $2}'; }
  # wrk: prints "rps p50 p99 non2xx" (ms).
  wrk_run() {
    local out; out=$(wrk -t2 -c"$1" -d"${dur}s" --latency "${@:2}")
    local ms='{v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.2f", v}'
    echo "$(awk '/^Requests\/sec/ {print $2}' <<<"$out") $(awk '$1 == "50%"' <<<"$out" | awk "$ms") $(awk '$1 == "99%"' <<<"$out" | awk "$ms") $(awk '/Non-2xx/ {print $5}' <<<"$out" | grep . || echo 0)"
  }
  # Latency of an admin GET, sampled every 0.5 s while a run lasts: "median max" (ms).
  sample() {
    local path=$1 until=$((SECONDS + dur - 1))
    while [ $SECONDS -lt $until ]; do
      curl -fs -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $admin" "$url$path" || echo 99
      sleep 0.5
    done | awk '{printf "%.1f\n", $1 * 1000}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)], a[NR]}'
  }
  export FLEET_PLAN="$plan" FLEET_NODES="$nodes" FLEET_GPUS="$gpus"
  local base mix c0 c1
  # The first pass after the populate checks every report against the store once (a read
  # transaction each); later passes are answered from memory. At 4x the fleet a 10 s run covers
  # the fleet about once, so the measured run follows one unmeasured pass over the same reports.
  local cold cold99
  read -r cold _ cold99 _ <<<"$(FLEET_MODE=mix FLEET_FIRST=1 wrk_run 64 -s hack/fleet.lua "$url")"
  echo "mix, first pass after the populate (each report checked against the store once): $cold callbacks/s, p99 ${cold99} ms"
  read -r base _ base99 _ <<<"$(wrk_run 64 "$url/healthz")"
  echo "baseline GET /healthz: $base req/s, p99 ${base99} ms"
  sample /api/v1/clusters >"$work/list.lat" &
  local s1=$!
  sample "/api/v1/clusters/$first_id/nodes" >"$work/nodes.lat" &
  local s2=$!
  c0=$(commits)
  local rps p50 p99 bad
  read -r rps p50 p99 bad <<<"$(FLEET_MODE=mix FLEET_FIRST=1 wrk_run 64 -s hack/fleet.lua "$url")"
  c1=$(commits)
  wait $s1 $s2
  echo "mix, steady state: $rps callbacks/s (target >= 8000), p50 $p50 ms, p99 $p99 ms (target <= 20), non-2xx $bad"
  awk -v m="$rps" -v b="$base" 'BEGIN {printf "mix / healthz = %.2f (target >= 0.5)\n", m / b}'
  awk -v a="$c0" -v b="$c1" -v d="$dur" -v m="$rps" 'BEGIN {printf "fsyncs: %.1f/s (%.1f callbacks per fsync)\n", (b - a) / d, (b > a) ? m * d / (b - a) : 0}'
  read -r lm lx <"$work/list.lat"; read -r nm nx <"$work/nodes.lat"
  echo "during the mix: GET /api/v1/clusters median $lm ms, max $lx ms; GET /api/v1/clusters/{id}/nodes ($nodes nodes) median $nm ms, max $nx ms (target <= 50)"
  echo "RSS after the mix: $(rss) MiB (target <= 150); state file: $(stat -c %s "$data/gshare.redb" | awk '{printf "%.1f MiB", $1/1048576}')"
  [ -n "$small" ] && small_machine_report
  if [ "$clusters" -ge 2 ]; then
    read -r rps p50 p99 bad <<<"$(FLEET_MODE=mix FLEET_FIRST=2 wrk_run 48 -s hack/fleet.lua "$url")"
    echo "flood: the other $((clusters - 1)) clusters alone: $rps callbacks/s, p99 $p99 ms"
    FLEET_MODE=flood FLEET_FIRST=1 wrk_run 48 -s hack/fleet.lua "$url" >"$work/flood.out" &
    local f=$!
    read -r rps p50 p99 bad <<<"$(FLEET_MODE=mix FLEET_FIRST=2 wrk_run 48 -s hack/fleet.lua "$url")"
    wait $f
    read -r frps _ f99 fbad <"$work/flood.out"
    echo "flood: cluster 1 sends state-changing gpu-devices in a loop at $frps/s (p99 $f99 ms, non-2xx $fbad) on 48 connections; the other $((clusters - 1)) clusters meanwhile: $rps callbacks/s, p99 $p99 ms, non-2xx $bad"
  fi
  echo "$(curl -fs "$url/metrics" | grep -cE '^gshare_callbacks_total') callback series in /metrics"
  [ -n "$small" ] && small_machine_report
  kill $pid; wait $pid 2>/dev/null || true
  if [ -n "${small_cg:-}" ]; then
    rmdir "$small_cg" "/sys/fs/cgroup/cpu/$(basename "$small_cg")" 2>/dev/null || true
  fi
  for _ in $(seq 1 5); do
    port=$(free_port)
    ready_ms "$port" "${env[@]}"
  done | median | xargs -I{} echo "start-to-ready with this state, median of 5: {} ms (target <= 1000)"
  echo "load: $(uptime)"
}


# Sign-in at class start: a fleet's operators call back (the fleet mix, 2 clusters x 50
# nodes) while 200 members sign in at once. Prints the time until all 200 are signed in (a 429
# from the bounded argon2 pool is retried after its Retry-After, as the console does), the
# callbacks' p50/p99 with the sign-ins against without them (same run), RSS; then GET
# /api/v1/sessions for one member among 1,000 accounts and 20,000 sessions at 16 connections,
# against /healthz at 16 connections in the same run. With --ldap (and/or --oidc) the class then
# signs in again as directory users, first sign-in each (the account made), in the same run.
signin() {
  local students=200 users=1000 sessions=20000 dur=10 clusters=2 nodes=50 gpus=8 ldap=0 oidc=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --ldap) ldap=1; shift ;;
      --oidc) oidc=1; shift ;;
      --students) students=$2; shift 2 ;;
      --users) users=$2; shift 2 ;;
      --sessions) sessions=$2; shift 2 ;;
      --seconds) dur=$2; shift 2 ;;
      *) echo "signin: unknown flag $1" >&2; return 2 ;;
    esac
  done
  [ "$students" -le "$users" ] || { echo "signin: --students must not exceed --users" >&2; return 2; }
  [ "$oidc" = 0 ] || [ "$students" -lt 1000 ] || { echo "signin: --oidc takes at most 999 students" >&2; return 2; }
  [ "$oidc" = 0 ] || [ -d "$PWD/tests/oidc/node_modules/oidc-provider" ] ||
    { echo "signin: --oidc needs tests/oidc/node_modules (hack/deps.sh installs it)" >&2; return 2; }
  command -v wrk >/dev/null || { echo "installing wrk (Debian package)" >&2; apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null; }
  local profile_flag=(--release) seed="${BENCH_SEED_BIN:-}"
  # BENCH_SEED_BIN: a fleet_seed binary already built (as for ws-relay).
  if [ -z "$seed" ]; then
    [ "${BENCH_PROFILE:-release}" = dev ] && profile_flag=()
    cargo build "${profile_flag[@]}" --locked -q --example fleet_seed
    seed="$CARGO_TARGET_DIR/$([ "${BENCH_PROFILE:-release}" = dev ] && echo debug || echo release)/examples/fleet_seed"
  fi
  local data="$work/signin" plan="$work/signin.lua" port pid url
  mkdir -p "$data"
  echo "signin: $students of $users members sign in during the fleet mix ($clusters clusters x $nodes nodes x $gpus GPUs); $sessions sessions; ${dur}s runs; profile ${BENCH_PROFILE:-release}; $(nproc) cores"
  local ids; ids=$("$seed" seed --data-dir "$data" --clusters "$clusters" --sessions "$sessions" --owners "$users" --out "$plan")
  # Every sign-in of the bench comes from 127.0.0.1, as a class behind one NAT address: measured
  # with the server's default sign-in limits (in-flight attempts count against the address until
  # they succeed; a refusal then says Retry-After: 1). BENCH_LOGIN_MAX_FAILURES=N measures with
  # the per-address budget raised instead (the hashing pool alone).
  # --ldap: the same class, as directory users ldap0.. of a real slapd (start_slapd: LDAPS,
  # search-then-bind), signs in too, each account made by its first sign-in; --oidc: as students of
  # tests/oidc's provider (start_oidc), each a fresh browser through the whole code flow. Same
  # server, same run, after the local class: the ratios are against it.
  local cfg=/dev/null d sport oidc_issuer="" oidc_pid="" port url
  port=$(free_port); url="http://127.0.0.1:$port"
  if [ "$ldap" = 1 ] || [ "$oidc" = 1 ]; then
    start_slapd "$students" || return
    cfg="$work/signin.toml"
    if [ "$ldap" = 1 ]; then cat "$work/ldap.toml" >>"$cfg"; else : >"$cfg"; fi
    if [ "$oidc" = 1 ]; then
      start_oidc "$url" || return 1
      cat "$work/oidc.toml" >>"$cfg"
    fi
  fi
  local env=(GSHARE_DATA_DIR="$data" GSHARE_CONFIG="$cfg" GSHARE_LOG_LEVEL=warn GSHARE_PROBE_INTERVAL=86400s)
  [ -n "${BENCH_LOGIN_MAX_FAILURES:-}" ] && env+=(GSHARE_LOGIN_MAX_FAILURES="$BENCH_LOGIN_MAX_FAILURES")
  if [ -n "${BENCH_LOGIN_MAX_FAILURES:-}" ]; then
    echo "sign-in limits: GSHARE_LOGIN_MAX_FAILURES=$BENCH_LOGIN_MAX_FAILURES"
  else
    echo "sign-in limits: the server defaults"
  fi
  env "${env[@]}" GSHARE_LISTEN="127.0.0.1:$port" "$bin" serve 2>"$work/signin.log" &
  pid=$!
  until curl -fs "$url/readyz" >/dev/null; do sleep 0.05; done
  local toks="tokens = {"
  for id in $ids; do
    toks+="\"$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" token operator --cluster-id "$id" --ttl 1d 2>/dev/null | tail -n1)\","
  done
  echo "$toks}" >>"$plan"
  "$seed" populate --url "$url" --plan "$plan" --nodes "$nodes" --gpus "$gpus"
  local admin; admin=$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" admin token 2>/dev/null | tail -n1)
  # The accounts: one bulk import of 1,000 rows (generated passwords, argon2 on the pool).
  python3 - "$url" "$admin" "$users" "$work/passwords" <<'PY'
import json, sys, time, urllib.request
url, admin, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [{"username": f"user{i}", "group": "class"} for i in range(n)]
t0 = time.perf_counter()
for part in range(0, n, 1000):
    req = urllib.request.Request(f"{url}/api/v1/users/bulk", data=json.dumps({"users": rows[part:part + 1000]}).encode(),
                                 headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"})
    res = json.load(urllib.request.urlopen(req, timeout=600))
    with open(out, "a") as f:
        for r in res["results"]:
            f.write(f"{r['username']} {r['password']}\n")
print(f"bulk import of {n} accounts: {time.perf_counter() - t0:.1f} s")
PY
  rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' /proc/$pid/status; }
  hwm() { awk '/VmHWM/ {printf "%.1f", $2/1024}' /proc/$pid/status; }
  local ms='{v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.2f", v}'
  wrk_line() {
    local out; out=$(wrk -t2 -c"$1" -d"${dur}s" --latency "${@:2}")
    echo "$(awk '/^Requests\/sec/ {print $2}' <<<"$out") $(awk '$1 == "50%"' <<<"$out" | awk "$ms") $(awk '$1 == "99%"' <<<"$out" | awk "$ms") $(awk '/Non-2xx/ {print $5}' <<<"$out" | grep . || echo 0)"
  }
  export FLEET_PLAN="$plan" FLEET_NODES="$nodes" FLEET_GPUS="$gpus"
  # One unmeasured pass (first reports are checked against the store), then the mix alone.
  FLEET_MODE=mix FLEET_FIRST=1 wrk_line 32 -s hack/fleet.lua "$url" >/dev/null
  local rps p50 p99 bad
  read -r rps p50 p99 bad <<<"$(FLEET_MODE=mix FLEET_FIRST=1 wrk_line 32 -s hack/fleet.lua "$url")"
  echo "callbacks alone: $rps/s, p50 $p50 ms, p99 $p99 ms, non-2xx $bad; RSS $(rss) MiB"
  local base50=$p50 base99=$p99
  # class_round NAME: the class signs in while the mix runs (started together; the mix outlasts
  # the sign-ins): local and ldap by password from $work/NAME.creds ("user password" lines), a 429
  # retried after its Retry-After as the console does; oidc each as a fresh browser (gshare's
  # start, the provider's authorize/interaction/resume, gshare's callback). Writes the seconds
  # until all were signed in to $work/NAME.all.
  class_round() {
    local name=$1
    FLEET_MODE=mix FLEET_FIRST=1 wrk_line 32 -s hack/fleet.lua "$url" >"$work/mix.out" &
    local w=$!
    sleep 1
    python3 - "$url" "$students" "$name" "$work" "${d:-}" <<'PY'
import http.cookiejar, json, ssl, sys, threading, time, urllib.error, urllib.parse, urllib.request
url, n, name, work, slapd_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
done, refused, failed, lock = [], {}, [0], threading.Lock()

def password(user, pw):
    body = json.dumps({"username": user, "password": pw}).encode()
    while True:
        req = urllib.request.Request(f"{url}/api/v1/auth/login", data=body, headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=60).read()
            return True
        except urllib.error.HTTPError as e:
            if e.code != 429:
                return False
            try:
                scope = json.load(e)["error"]["details"].get("scope", "?")
            except Exception:
                scope = "?"
            with lock:
                refused[scope] = refused.get(scope, 0) + 1
            time.sleep(float(e.headers.get("Retry-After", "1")))

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None

def sso(user, _=None):
    jar = http.cookiejar.CookieJar()
    ctx = ssl.create_default_context(cafile=f"{slapd_dir}/ca.pem")
    op = urllib.request.build_opener(NoRedirect, urllib.request.HTTPCookieProcessor(jar), urllib.request.HTTPSHandler(context=ctx))
    def get(u):
        try:
            r = op.open(u, timeout=60)
            r.read()
            return r.status, r.headers.get("Location")
        except urllib.error.HTTPError as e:
            e.read()
            return e.code, e.headers.get("Location")
    status, loc = get(f"{url}/api/v1/auth/oidc/start")
    if status == 429:
        with lock:
            refused["oidc start"] = refused.get("oidc start", 0) + 1
    if status != 303:
        return False
    nxt = f"{loc}&login_hint={user}"
    for _ in range(10):
        if nxt.startswith(f"{url}/api/v1/auth/oidc/callback"):
            break
        status, loc = get(nxt)
        if status not in (302, 303):
            return False
        nxt = urllib.parse.urljoin(nxt, loc)
    status, loc = get(nxt)
    return status == 303 and loc == "/"

if name == "oidc":
    # The server has met its issuer before class (discovery and keys kept): one sign-in first.
    assert sso(f"student{n}"), "the warm-up OIDC sign-in failed"
    creds, way = [(f"student{i}", None) for i in range(n)], sso
else:
    creds, way = [l.split() for l in open(f"{work}/{name}.creds")][:n], password
start = threading.Barrier(n + 1)

def one(user, pw):
    start.wait()
    ok = way(user, pw)
    with lock:
        if ok:
            done.append(time.perf_counter())
        else:
            failed[0] += 1

threads = [threading.Thread(target=one, args=c) for c in creds]
for t in threads:
    t.start()
start.wait()
t0 = time.perf_counter()
for t in threads:
    t.join()
total = max(done) - t0 if done else float("nan")
open(f"{work}/{name}.all", "w").write(f"{total:.3f}\n")
print(f"{name}: {len(done)} of {n} signed in, all within {total:.2f} s (median {sorted(done)[len(done)//2] - t0:.2f} s); "
      f"429 + Retry-After answered {sum(refused.values())} times (by scope: {dict(sorted(refused.items()))}); other failures {failed[0]}")
PY
    echo "$name: RSS right after the sign-ins: $(rss) MiB (peak since start $(hwm) MiB)"
    wait $w
    read -r rps p50 p99 bad <"$work/mix.out"
    awk -v n="$name" -v r="$rps" -v a="$p50" -v b="$p99" -v x="$bad" -v a0="$base50" -v b0="$base99" 'BEGIN {
      printf "%s: callbacks while the class signs in (the run includes the sign-ins): %s/s, p50 %s ms (%.2fx alone), p99 %s ms (%.2fx alone), non-2xx %s\n",
        n, r, a, (a0 > 0) ? a / a0 : 0, b, (b0 > 0) ? b / b0 : 0, x }'
  }
  sed -n "1,${students}p" "$work/passwords" >"$work/local.creds"
  class_round local
  if [ "$ldap" = 1 ]; then
    for i in $(seq 0 $((students - 1))); do echo "ldap$i pw-ldap$i-secret"; done >"$work/ldap.creds"
    class_round ldap
  fi
  [ "$oidc" = 1 ] && class_round oidc
  local m
  for m in ldap oidc; do
    [ -f "$work/$m.all" ] || continue
    awk -v m="$m" -v t="$(cat "$work/$m.all")" -v b="$(cat "$work/local.all")" \
      'BEGIN {printf "class start, %s against local (same server, same run): all signed in within %.2f s vs %.2f s = %.2fx\n", m, t, b, t / b}'
  done
  # One member's sessions among all of them.
  local member; member=$(python3 - "$url" "$work/passwords" <<'PY'
import json, sys, urllib.request
url, pwfile = sys.argv[1], sys.argv[2]
user, pw = open(pwfile).readline().split()
def login(password):
    req = urllib.request.Request(f"{url}/api/v1/auth/login", data=json.dumps({"username": user, "password": password}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["access_token"]
# A bulk-imported first password opens nothing but its change, password_change_required: the
# member chooses their own first, then signs in with it.
mine = pw + " and my own words"
req = urllib.request.Request(f"{url}/api/v1/account/password", data=json.dumps({"current_password": pw, "new_password": mine}).encode(),
                             headers={"Content-Type": "application/json", "Authorization": f"Bearer {login(pw)}"})
urllib.request.urlopen(req).read()
print(login(mine))
PY
)
  read -r rps p50 p99 bad <<<"$(wrk_line 16 -H "Authorization: Bearer $member" "$url/api/v1/sessions")"
  local hrps hp50; read -r hrps hp50 _ _ <<<"$(wrk_line 16 "$url/healthz")"
  echo "GET /api/v1/sessions as one member ($((sessions / users)) of $sessions sessions are theirs, $users accounts): p50 $p50 ms, p99 $p99 ms, $rps req/s, non-2xx $bad (16 connections; /healthz p50 $hp50 ms, $hrps req/s)"
  echo "RSS at the end: $(rss) MiB; state file: $(stat -c %s "$data/gshare.redb" | awk '{printf "%.1f MiB", $1/1048576}')"
  kill $pid; wait $pid 2>/dev/null || true
  if [ -n "$oidc_pid" ]; then exec 9>&-; kill "$oidc_pid" 2>/dev/null; wait "$oidc_pid" 2>/dev/null || true; fi
  [ -n "${d:-}" ] && { kill "$(cat "$d/slapd.pid")" 2>/dev/null || true; }
  echo "load: $(uptime)"
}

# Starts Debian's slapd on loopback for this run (LDAP and LDAPS, a CA made for the run) with COUNT
# users ldap0.. (password pw-ldapN-secret), all in the directory group `class`, and a service
# account; writes gshare's [ldap] table for it (search-then-bind over LDAPS, `class` mapped to the
# group class) to $work/ldap.toml. Sets the caller's d (slapd's dir) and sport (its LDAPS port).
start_slapd() {
  local count=$1 lport
  [ -x /usr/sbin/slapd ] || { echo "slapd is missing (hack/deps.sh installs it)" >&2; return 2; }
  d="$work/slapd"
  mkdir -p "$d/db"
  # A CA made for this run, and slapd's certificate from it.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 1 -subj "/CN=bench LDAP CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/key.pem" -out "$d/cert.csr" -subj /CN=127.0.0.1 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$d/ext"
  openssl x509 -req -in "$d/cert.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 1 -extfile "$d/ext" \
    -out "$d/cert.pem" 2>/dev/null
  cat >"$d/slapd.conf" <<EOF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile $d/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCertificateFile $d/cert.pem
TLSCertificateKeyFile $d/key.pem
database mdb
suffix "dc=lab,dc=test"
rootdn "cn=root,dc=lab,dc=test"
rootpw root-secret
directory $d/db
maxsize 104857600
access to attrs=userPassword by anonymous auth by * none
access to * by dn.exact="cn=gshare,ou=services,dc=lab,dc=test" read by users read by * none
EOF
  python3 - "$count" >"$d/data.ldif" <<'PY'
import sys
n = int(sys.argv[1])
print("dn: dc=lab,dc=test\nobjectClass: dcObject\nobjectClass: organization\no: lab\ndc: lab\n")
for ou in ("people", "groups", "services"):
    print(f"dn: ou={ou},dc=lab,dc=test\nobjectClass: organizationalUnit\nou: {ou}\n")
print("dn: cn=gshare,ou=services,dc=lab,dc=test\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: gshare\nuserPassword: service-secret\n")
for i in range(n):
    print(f"dn: uid=ldap{i},ou=people,dc=lab,dc=test\nobjectClass: inetOrgPerson\nuid: ldap{i}\ncn: ldap{i}\nsn: x\nuserPassword: pw-ldap{i}-secret\n")
print("dn: cn=class,ou=groups,dc=lab,dc=test\nobjectClass: groupOfNames\ncn: class")
for i in range(n):
    print(f"member: uid=ldap{i},ou=people,dc=lab,dc=test")
PY
  /usr/sbin/slapadd -f "$d/slapd.conf" -l "$d/data.ldif" 2>/dev/null
  lport=$(free_port); sport=$(free_port)
  /usr/sbin/slapd -f "$d/slapd.conf" -h "ldap://127.0.0.1:$lport/ ldaps://127.0.0.1:$sport/"
  # `|| true`: under set -e a failing kill (slapd already stopped) would end the trap before the rm.
  trap 'kill "$(cat "$work/slapd/slapd.pid" 2>/dev/null)" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
  printf 'service-secret\n' >"$d/bind-pw"; chmod 600 "$d/bind-pw"
  cat >"$work/ldap.toml" <<EOF
[ldap]
url = "ldaps://127.0.0.1:$sport"
ca_file = "$d/ca.pem"
bind_dn = "cn=gshare,ou=services,dc=lab,dc=test"
bind_password_file = "$d/bind-pw"
user_base = "ou=people,dc=lab,dc=test"
group_base = "ou=groups,dc=lab,dc=test"
groups = [ { directory = "class", group = "class" } ]
EOF
}

# Starts tests/oidc's OpenID provider (npm oidc-provider) over HTTPS with slapd's run CA (call
# start_slapd first), registering the callback of the gshare at URL; students student0..999 sign
# in by login_hint, all in ml-lab. Writes gshare's [oidc] table for it (ml-lab mapped to the group
# class) to $work/oidc.toml. Sets the caller's oidc_issuer and oidc_pid; the provider stops when fd
# 9 closes.
start_oidc() {
  printf 'bench-oidc-client-secret\n' >"$d/oidc-secret"; chmod 600 "$d/oidc-secret"
  mkfifo "$d/oidc.in"
  (cd "$PWD/tests/oidc" && exec node provider.mjs --redirect-uri "$1/api/v1/auth/oidc/callback" \
    --client-secret bench-oidc-client-secret --cert "$d/cert.pem" --key "$d/key.pem" <"$d/oidc.in" >"$d/oidc.log" 2>&1) &
  oidc_pid=$!
  exec 9>"$d/oidc.in"  # the provider stops when this closes
  # Wait on its readiness line (bounded), not on a timer.
  for _ in $(seq 600); do grep -q '^ready ' "$d/oidc.log" 2>/dev/null && break; sleep 0.05; done
  oidc_issuer=$(sed -n 's/^ready //p' "$d/oidc.log")
  [ -n "$oidc_issuer" ] || { echo "the OpenID provider did not start: $(cat "$d/oidc.log")" >&2; return 1; }
  cat >"$work/oidc.toml" <<EOF

[oidc]
issuer = "$oidc_issuer"
client_id = "gshare"
client_secret_file = "$d/oidc-secret"
ca_file = "$d/ca.pem"
scopes = ["openid", "profile", "groups"]
groups = [ { directory = "ml-lab", group = "class" } ]
EOF
}

# Sign-in latency, one request at a time (p50 of --count each, one run, one server): a local
# member (argon2id) as the baseline; directory users' first sign-in (LDAPS search-then-bind against
# Debian's slapd on loopback, the account made) and their next one (the account updated); the same
# two by OpenID Connect against tests/oidc's oidc-provider over HTTPS (the whole browser flow, and
# gshare's own part of it: start + callback, i.e. discovery kept, code redeemed, ID token verified).
directory() {
  local count=200
  while [ $# -gt 0 ]; do
    case "$1" in
      --count) count=$2; shift 2 ;;
      *) echo "directory: unknown flag $1" >&2; return 2 ;;
    esac
  done
  local d sport port url pid
  start_slapd "$count" || return
  cp "$work/ldap.toml" "$work/directory.toml"
  # The OpenID provider of the OIDC tests (tests/oidc, npm oidc-provider) over HTTPS with the same
  # CA, registering this server's callback.
  local oidc_issuer="" oidc_pid=""
  port=$(free_port); url="http://127.0.0.1:$port"
  if [ -d "$PWD/tests/oidc/node_modules/oidc-provider" ] && [ "$count" -le 1000 ]; then
    start_oidc "$url" || return 1
    cat "$work/oidc.toml" >>"$work/directory.toml"
  else
    echo "directory: tests/oidc/node_modules is missing (hack/deps.sh installs it) or --count > 1000: no OIDC figures" >&2
  fi
  local data="$work/directory-data"
  GSHARE_DATA_DIR="$data" GSHARE_LOG_LEVEL=warn GSHARE_PROBE_INTERVAL=86400s GSHARE_LOGIN_MAX_FAILURES=10000 \
    GSHARE_LISTEN="127.0.0.1:$port" "$bin" --config "$work/directory.toml" serve 2>"$work/directory.log" &
  pid=$!
  until curl -fs "$url/readyz" >/dev/null; do sleep 0.05; done
  local admin; admin=$(GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" admin token 2>/dev/null | tail -n1)
  echo "directory: sign-in p50 of $count sequential sign-ins each; profile ${BENCH_PROFILE:-release}; $(nproc) cores; slapd $(dpkg-query -W -f='${Version}' slapd 2>/dev/null)"
  python3 - "$url" "$admin" "$count" "$oidc_issuer" "$d/ca.pem" <<'PY'
import http.cookiejar, json, ssl, sys, time, urllib.error, urllib.parse, urllib.request
url, admin, n, issuer, ca = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def call(path, body, token=None):
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), headers=h)
    t0 = time.perf_counter()
    urllib.request.urlopen(req, timeout=60).read()
    return (time.perf_counter() - t0) * 1000
call("/api/v1/users", {"username": "local0", "password": "local member password 0"}, admin)
def p50(xs):
    return sorted(xs)[len(xs) // 2]
local = [call("/api/v1/auth/login", {"username": "local0", "password": "local member password 0"}) for _ in range(n)]
first = [call("/api/v1/auth/login", {"username": f"ldap{i}", "password": f"pw-ldap{i}-secret"}) for i in range(n)]
again = [call("/api/v1/auth/login", {"username": f"ldap{i}", "password": f"pw-ldap{i}-secret"}) for i in range(n)]
b = p50(local)
print(f"local (argon2id): p50 {b:.1f} ms (baseline)")
print(f"LDAPS first sign-in (account made): p50 {p50(first):.1f} ms ({p50(first) / b:.2f}x local)")
print(f"LDAPS sign-in again (account updated): p50 {p50(again):.1f} ms ({p50(again) / b:.2f}x local)")
if not issuer:
    sys.exit(0)

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None

def sso(user):
    """One browser's whole sign-in: gshare's start, the provider (authorization, interaction,
    resume), gshare's callback. Answers (total ms, gshare's own ms: start + callback)."""
    jar = http.cookiejar.CookieJar()
    op = urllib.request.build_opener(NoRedirect, urllib.request.HTTPCookieProcessor(jar),
                                     urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca)))
    def get(u):
        t0 = time.perf_counter()
        try:
            r = op.open(u, timeout=60)
            status, loc = r.status, r.headers.get("Location")
            r.read()
        except urllib.error.HTTPError as e:
            status, loc = e.code, e.headers.get("Location")
            e.read()
        return status, loc, (time.perf_counter() - t0) * 1000
    total = ours = 0.0
    status, loc, ms = get(f"{url}/api/v1/auth/oidc/start")
    total += ms; ours += ms
    assert status == 303, status
    nxt = f"{loc}&login_hint={user}"
    for _ in range(10):
        if nxt.startswith(f"{url}/api/v1/auth/oidc/callback"):
            break
        status, loc, ms = get(nxt)
        total += ms
        assert status in (302, 303), (status, nxt)
        nxt = urllib.parse.urljoin(nxt, loc)
    status, loc, ms = get(nxt)
    total += ms; ours += ms
    assert status == 303 and loc == "/", (status, loc)
    return total, ours

sso("student0")  # discovery and keys fetched once, as a running server keeps them
first = [sso(f"student{i}") for i in range(1, n)]
again = [sso(f"student{i}") for i in range(1, n)]
for name, xs in (("first sign-in (account made)", first), ("sign-in again (account updated)", again)):
    t, o = p50([x[0] for x in xs]), p50([x[1] for x in xs])
    print(f"OIDC {name}: whole flow p50 {t:.1f} ms ({t / b:.2f}x local); gshare's part (start + callback) p50 {o:.1f} ms ({o / b:.2f}x local)")
PY
  kill $pid; wait $pid 2>/dev/null || true
  if [ -n "$oidc_pid" ]; then exec 9>&-; kill "$oidc_pid" 2>/dev/null; wait "$oidc_pid" 2>/dev/null || true; fi
  kill "$(cat "$d/slapd.pid")" 2>/dev/null || true
}

case "$what" in
  start) start_to_ready ;;
  sessions) sessions ;;
  admission) admission ;;
  metrics) metrics ;;
  snapshot) snapshot ;;
  rss) idle_rss ;;
  storm) storm_rss ;;
  slow) slow_bodies ;;
  ws-relay) ws_relay ;;
  console) E2E_ENFORCE_BUDGET=1 web/e2e/run.sh ;;
  size) binary_size ;;
  jwt) jwt ;;
  callbacks) callbacks ;;
  fleet) fleet "$@" ;;
  signin) signin "$@" ;;
  directory) directory "$@" ;;
  all) binary_size; start_to_ready; idle_rss; jwt; callbacks ;;
  *) echo "usage: $0 [start|rss|storm|slow|ws-relay|size|jwt|callbacks|snapshot|sessions|admission|metrics|fleet [flags]|signin [flags] [--ldap] [--oidc]|directory [--count N]|all]" >&2; exit 2 ;;
esac
