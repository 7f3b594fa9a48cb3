#!/usr/bin/env python3
"""Instructions per request of the relay and of the bare pass-through (issue "Edge footprint").

Throughput and CPU time on a shared two-core VM move by +-20 % between runs; instruction counts do
not. Runs the sessions bench under callgrind (the server, the bare pass-through and the stand-in
ingress are one process; wrk is outside it), zeroes the counters when the "ingress directly" phase
ends and dumps them when the bare and the relay phases end, and divides each dump's instructions by
the requests wrk made in it. Both figures include the stand-in ingress's work (the same in both).

Usage: hack/relay_instr.py [--ws] <sessions bench binary built with symbols> [out dir]
  --ws: instructions per WebSocket upgrade instead (a new connection, the 101, one echoed frame,
  the close; the bench's client runtime is in the process too, the same work on both sides).
  The binary: CARGO_PROFILE_BENCH_STRIP=false CARGO_PROFILE_BENCH_DEBUG=line-tables-only
  cargo bench --bench sessions --no-run (prints its path). BENCH_SECONDS (default 15) per phase;
  the stored history is kept small (BENCH_HISTORY=2000, BENCH_LIVE=200): the relay's session lookup
  is a cached map read whatever the count. Then, per phase:
  callgrind_annotate --inclusive=yes <out dir>/cg.out.<pid>.<n> | head -60
"""
import os, re, shutil, subprocess, sys, tempfile

if not shutil.which("wrk") or not shutil.which("valgrind"):
    raise SystemExit("relay_instr.py: needs wrk and valgrind (Debian packages wrk, valgrind)")

args = sys.argv[1:]
ws = "--ws" in args
args = [a for a in args if a != "--ws"]
binary = args[0]
out = args[1] if len(args) > 1 else tempfile.mkdtemp(prefix="relay-instr-")
os.makedirs(out, exist_ok=True)
secs = int(os.environ.get("BENCH_SECONDS", "15"))
env = dict(os.environ, BENCH_SECONDS=str(secs))
env.setdefault("BENCH_HISTORY", "2000")
env.setdefault("BENCH_LIVE", "200")
if ws:
    env.setdefault("BENCH_PAIRS", "0")
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
p = subprocess.Popen(
    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out.%p", binary, "--bench"],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root, env=env,
)


def control(*args):
    subprocess.run(["callgrind_control", *args, str(p.pid)], check=True, stdout=subprocess.DEVNULL)


def total_ir(path):
    for line in open(path):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


phases = {}
unit = "upgrade" if ws else "request"
for line in p.stdout:
    sys.stdout.write(line)
    if ws:
        m = re.match(r"\s+WS upgrades: (.*?)\s{2,}([\d.]+) upgrades/s", line)
        first, bare, relay = "ingress directly", "bare pass-through", "relay"
    else:
        m = re.match(r"\s+GET (.*?)\s{2,}.*?([\d.]+) req/s", line)
        first, bare, relay = "ingress directly", "through a bare", "/proxy/<cr>/lab/… through the relay"
    if not m:
        continue
    label, rate = m.group(1), float(m.group(2))
    if label.startswith(first):
        control("-z")
    elif label.startswith(bare) or label.startswith(relay):
        before = set(os.listdir(out))
        control("-d")
        dumped = sorted(set(os.listdir(out)) - before)
        phases[label] = (dumped[-1], rate * secs)
        if label.startswith(relay):
            break
p.kill()
p.wait()
res = {}
for label, (f, n) in phases.items():
    ir = total_ir(os.path.join(out, f))
    res[label] = ir / n
    print(f"{label}: {n:.0f} {unit}s, {ir / n:,.0f} instructions/{unit} ({out}/{f})")
if len(res) == 2:
    b, r = list(res.values())
    print(f"relay/bare instructions per {unit}: {r / b:.3f} (relay extra {r - b:,.0f})")
