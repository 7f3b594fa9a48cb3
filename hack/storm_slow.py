#!/usr/bin/env python3
"""Slow-body storms against a running gshare (hack/bench.sh slow): /readyz latency and RSS while
clients hold request bodies open.

  storm_slow.py PORT PID SCENARIO [SECONDS]

SCENARIO: one-address (4,200 stalled sign-ins from 127.0.0.2), many-addresses (66 each from
127.0.0.1-64), h2c (one HTTP/2 connection, 200 stalled streams). Each stalled request announces a
1,000,000-byte body and sends 64 KiB of it (h2c: 960 KiB), then nothing. A probe asks /readyz
every 100 ms from 127.0.0.200 with a 2 s timeout; the line printed has the probes answered, their
median and worst latency, and the server's RSS before, at its peak and at the end.
"""

import asyncio
import resource
import statistics
import sys
import threading
import time
import urllib.request

port, pid, scenario = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 12.0
LENGTH = 1_000_000


def rss_mib(field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def probe(stop, results):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/readyz")
            # From an address of its own, as monitoring would be.
            opener = urllib.request.build_opener(SourceHandler("127.0.0.200"))
            with opener.open(req, timeout=2) as r:
                ok = r.status == 200
        except Exception:
            ok = False
        results.append((ok, (time.perf_counter() - t0) * 1000))
        time.sleep(0.1)


class SourceHandler(urllib.request.HTTPHandler):
    def __init__(self, source):
        super().__init__()
        self.source = source

    def http_open(self, req):
        import http.client

        src = self.source

        class Conn(http.client.HTTPConnection):
            def __init__(self, host, **kw):
                super().__init__(host, source_address=(src, 0), **kw)

        return self.do_open(Conn, req)


async def stalled_h1(source, held):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return
    head = (
        f"POST /api/v1/auth/login HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {LENGTH}\r\n\r\n"
    ).encode()
    try:
        w.write(head + b" " * 65536)
        await w.drain()
    except OSError:
        return
    held.append((r, w))


async def h1_storm(sources, per_source):
    held = []
    sem = asyncio.Semaphore(256)

    async def one(src):
        async with sem:
            await stalled_h1(src, held)

    await asyncio.gather(*(one(s) for s in sources for _ in range(per_source)))
    return held


def h2c_storm(stop):
    import socket

    import h2.config
    import h2.connection

    s = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    s.sendall(conn.data_to_send())
    body = b" " * (960 * 1024)
    pending = {}
    for _ in range(200):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(
            sid,
            [(":method", "POST"), (":path", "/api/v1/auth/login"), (":scheme", "http"), (":authority", "t"),
             ("content-type", "application/json"), ("content-length", str(LENGTH))],
        )
        pending[sid] = body
    s.settimeout(0.2)
    answered = set()
    while not stop.is_set():
        for sid in list(pending):
            data = pending[sid]
            if not data:
                continue
            try:
                n = min(len(data), conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            except Exception:
                pending[sid] = b""
                continue
            if n > 0:
                try:
                    conn.send_data(sid, data[:n])
                    pending[sid] = data[n:]
                except Exception:
                    # Answered or reset by the server: nothing more to send on it.
                    pending[sid] = b""
        out = conn.data_to_send()
        if out:
            s.sendall(out)
        try:
            got = s.recv(65536)
        except socket.timeout:
            continue
        if not got:
            break
        for ev in conn.receive_data(got):
            if type(ev).__name__ in ("ResponseReceived", "StreamReset"):
                answered.add(ev.stream_id)
        out = conn.data_to_send()
        if out:
            s.sendall(out)
    s.close()
    return len(answered)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = rss_mib()
    stop = threading.Event()
    results = []
    t = threading.Thread(target=probe, args=(stop, results))
    t.start()
    extra = ""
    if scenario == "h2c":
        h2_stop = threading.Event()
        out = {}
        h = threading.Thread(target=lambda: out.setdefault("answered", h2c_storm(h2_stop)))
        h.start()
        time.sleep(seconds)
        h2_stop.set()
        h.join()
        extra = f", streams answered or reset {out.get('answered', 0)}/200"
    else:
        if scenario == "one-address":
            sources, per = ["127.0.0.2"], 4200
        else:
            sources, per = [f"127.0.0.{i}" for i in range(1, 65)], 66
        loop = asyncio.new_event_loop()
        held = loop.run_until_complete(h1_storm(sources, per))
        loop.run_until_complete(asyncio.sleep(seconds))
        extra = f", {len(held)} of {len(sources) * per} stalled requests sent"
        for _, w in held:
            w.close()
        loop.close()
    peak = rss_mib("VmHWM")
    stop.set()
    t.join()
    ok = [ms for good, ms in results if good]
    print(
        f"{scenario}: /readyz answered {len(ok)}/{len(results)}, "
        f"median {statistics.median(ok) if ok else float('nan'):.1f} ms, worst {max(ms for _, ms in results):.1f} ms; "
        f"RSS {before:.1f} -> peak {peak:.1f} -> {rss_mib():.1f} MiB{extra}"
    )


main()
