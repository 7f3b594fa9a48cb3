#!/usr/bin/env bash
# Operator-facing benchmarks on a release build. Prints medians; every ratio is against a baseline
# measured in the same run. Usage: hack/bench.sh [start|rss|size|jwt|all]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gshare/target}"
what="${1:-all}"
cargo build --release --locked -q
bin="$CARGO_TARGET_DIR/release/gshare"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Time from exec to a 200 from /readyz with existing keys and state (first start done beforehand).
start_to_ready() {
  local data="$work/start" port
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null "$bin" token operator --cluster-id clu_local >/dev/null 2>&1
  for _ in $(seq 1 15); do
    port=$(free_port)
    python3 - "$bin" "$data" "$port" <<'PY'
import os, subprocess, sys, time, urllib.request
bin, data, port = sys.argv[1:]
env = {"GSHARE_DATA_DIR": data, "GSHARE_CONFIG": "/dev/null", "GSHARE_LISTEN": f"127.0.0.1:{port}", "PATH": os.environ["PATH"]}
t0 = time.perf_counter()
p = subprocess.Popen([bin, "serve"], env=env, stderr=subprocess.DEVNULL)
while True:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1).status == 200:
            break
    except Exception:
        time.sleep(0.0005)
print(f"{(time.perf_counter() - t0) * 1000:.1f}")
p.terminate(); p.wait()
PY
  done | median | xargs -I{} echo "start-to-ready (existing keys), median of 15: {} ms (target <= 100 ms)"
}

idle_rss() {
  local data="$work/rss" port
  port=$(free_port)
  GSHARE_DATA_DIR="$data" GSHARE_CONFIG=/dev/null GSHARE_LISTEN="127.0.0.1:$port" "$bin" serve 2>/dev/null &
  local pid=$!
  until curl -fs "http://127.0.0.1:$port/readyz" >/dev/null; do sleep 0.05; done
  for _ in $(seq 1 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null; done
  sleep 1
  echo "idle RSS after start and 50 requests: $(awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' /proc/$pid/status) (target <= 20 MiB)"
  kill $pid; wait $pid 2>/dev/null || true
}

binary_size() {
  echo "stripped binary: $(stat -c %s "$bin" | awk '{printf "%.1f MiB", $1/1048576}') (target <= 25 MiB)"
}

jwt() {
  cargo bench --bench jwt --locked -- --noplot 2>/dev/null | grep -E "^rs256_verify|time:"
}

case "$what" in
  start) start_to_ready ;;
  rss) idle_rss ;;
  size) binary_size ;;
  jwt) jwt ;;
  all) binary_size; start_to_ready; idle_rss; jwt ;;
  *) echo "usage: $0 [start|rss|size|jwt|all]" >&2; exit 2 ;;
esac
