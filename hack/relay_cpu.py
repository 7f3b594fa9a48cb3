#!/usr/bin/env python3
"""Process CPU per request of the sessions bench's HTTP phases (issue "Edge footprint").

Throughput ratios on two shared cores move by +-10 % from run to run; the CPU the bench process
(server, bare pass-through and stand-in ingress) spends per request is steadier. Reads utime+stime
of the process between the lines the bench prints at the end of each phase and divides by
(req/s x seconds). Stops after the relay phases.

Usage: hack/relay_cpu.py <sessions bench binary> [<another binary> ...] [rounds]
  (a binary: `cargo bench --bench sessions --no-run` prints its path; BENCH_SECONDS, default 8).
  Several binaries (a change and its parent) are run in turn, round by round, so that a slow
  spell of the machine falls on both.
"""
import subprocess, sys, time, os, re
args = sys.argv[1:]
rounds = int(args.pop()) if len(args) > 1 and args[-1].isdigit() else 1
bins = args
secs = int(os.environ.get("BENCH_SECONDS","8"))
tick = os.sysconf('SC_CLK_TCK')
for r, bin_ in ((r, b) for r in range(rounds) for b in bins):
    p = subprocess.Popen([bin_, "--bench"], stdout=subprocess.PIPE, text=True, cwd=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."), env=dict(os.environ, BENCH_SECONDS=str(secs)))
    def cpu():
        f = open(f"/proc/{p.pid}/stat").read().rsplit(")",1)[1].split()
        io = dict(l.split(": ") for l in open(f"/proc/{p.pid}/io").read().splitlines())
        cpu_line = open("/proc/stat").readline().split()
        idle = (int(cpu_line[4]) + int(cpu_line[5])) / tick
        return ((int(f[11]) + int(f[12])) / tick, int(f[11]) / tick, int(io["syscr"]) + int(io["syscw"]), idle)
    last = None; res = {}
    for line in p.stdout:
        now = cpu()
        m = re.match(r"\s+(GET|WS) (.*?)\s{2,}.*?([\d.]+) req/s", line)
        if last is not None and m:
            label = m.group(2)
            rps = float(m.group(3))
            n = rps * secs
            res[label] = ((now[0] - last[0]) / n * 1e6, rps, (now[1] - last[1]) / n * 1e6, (now[2] - last[2]) / n, (now[3] - last[3]) / secs / os.cpu_count())
        last = now
        if "relay, session cookie" in line and line.strip().startswith("GET"):
            p.kill(); break
    p.wait()
    b = res.get("through a bare pass-through (bound)"); rl = res.get("/proxy/<cr>/lab/… through the relay"); rc = res.get("/proxy/<cr>/lab/… relay, session cookie")
    print(f"{os.path.basename(bin_)} r{r}: process CPU µs/request: bare {b[0]:.1f} ({b[1]:.0f}/s), relay {rl[0]:.1f} ({rl[1]:.0f}/s), relay+cookie {rc[0]:.1f} ({rc[1]:.0f}/s); relay/bare rps {rl[1]/b[1]:.2f}, cpu {rl[0]/b[0]:.2f}; user µs/request bare {b[2]:.1f} relay {rl[2]:.1f}; read+write syscalls/request bare {b[3]:.1f} relay {rl[3]:.1f}; machine idle bare {b[4]:.0%} relay {rl[4]:.0%}", flush=True)
