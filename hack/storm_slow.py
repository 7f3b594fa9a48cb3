#!/usr/bin/env python3
"""Slow-body storms against a running gshare (hack/bench.sh slow): /readyz latency and RSS while
clients hold request bodies open.

  storm_slow.py PORT PID SCENARIO [SECONDS]

SCENARIO: one-address (4,200 stalled sign-ins from 127.0.0.2), many-addresses (66 each from
127.0.0.1-64), h2c (one HTTP/2 connection, 200 stalled streams). Each stalled request announces a
1,000,000-byte body and sends 64 KiB of it (h2c: 960 KiB), then nothing.
HTTP/2 abuse, raw frames on h2c connections from 127.0.0.3 (no library): rst-flood (HEADERS then
RST_STREAM at once, stream after stream: the "rapid reset"), continuation-flood (one HEADERS
without END_HEADERS, then 16 KiB CONTINUATION frames without end), settings-flood (SETTINGS frames
without reading the ACKs) and ping-flood (the same with PING). ws-upgrades: 2,000 connections from
127.0.0.4 each asking a WebSocket upgrade of /proxy/<cr>/ (no session: refused) and held open. A probe asks /readyz
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


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# HPACK, static table only: GET, http, :path /healthz, :authority t.
HEALTHZ_BLOCK = b"\x82\x86\x04\x08/healthz\x01\x01t"


def frame(kind, flags, sid, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


def h2_abuse(stop, kind, counts):
    """One abusive h2c connection after another until `stop`; counts frames sent, connections
    the server closed, and GOAWAYs seen."""
    import select
    import socket

    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0))
        except OSError:
            counts["refused"] = counts.get("refused", 0) + 1
            time.sleep(0.05)
            continue
        s.setblocking(False)
        out = PREFACE + frame(0x4, 0, 0)
        sid = 1
        closed = False
        if kind == "continuation-flood":
            out += frame(0x1, 0x0, 1, HEADERS_START)
        sent_conn = 0
        while not stop.is_set() and not closed:
            if kind == "rst-flood":
                for _ in range(50):
                    out += frame(0x1, 0x5, sid, HEALTHZ_BLOCK) + frame(0x3, 0, sid, (8).to_bytes(4, "big"))
                    sid += 2
                n = 50
            elif kind == "continuation-flood":
                out += frame(0x9, 0x0, 1, CONT_BLOCK)
                n = 1
            elif kind == "settings-flood":
                out += frame(0x4, 0, 0, (3).to_bytes(2, "big") + (100).to_bytes(4, "big")) * 50
                n = 50
            else:
                out += frame(0x6, 0, 0, b"12345678") * 50
                n = 50
            # Write what the socket takes; a flood that the server stops reading stalls here.
            deadline = time.perf_counter() + 0.5
            while out and not stop.is_set():
                try:
                    k = s.send(out)
                    out = out[k:]
                except BlockingIOError:
                    if time.perf_counter() > deadline:
                        counts["stalled"] = counts.get("stalled", 0) + 1
                        break
                    select.select([], [s], [], 0.05)
                except OSError:
                    closed = True
                    break
            if out:
                out = b""
                n = 0
            counts["frames"] = counts.get("frames", 0) + n
            sent_conn += n
            # Read and drop what the server says (settings-flood and ping-flood never read).
            if kind in ("rst-flood", "continuation-flood"):
                try:
                    while True:
                        got = s.recv(65536)
                        if not got:
                            closed = True
                            break
                        if b"\x07\x00\x00\x00\x00\x00" in got:
                            counts["goaway"] = counts.get("goaway", 0) + 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    closed = True
        if closed:
            counts["closed_by_server"] = counts.get("closed_by_server", 0) + 1
            counts.setdefault("frames_per_closed_conn", []).append(sent_conn)
        s.close()


# A header block start and 16 KiB continuations of literal headers (never indexed, new name).
HEADERS_START = b"\x82\x86\x04\x08/healthz"
CONT_BLOCK = b"\x10\x01x\x01y" * (16384 // 5)


async def ws_upgrades(n, source, statuses, held):
    sem = asyncio.Semaphore(256)

    async def one():
        async with sem:
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                w.write(
                    b"GET /proxy/ses-01jaaaaaaaaaaaaaaaaaaaaaaa/api/kernels/x/channels HTTP/1.1\r\nHost: t\r\n"
                    b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nCookie: gshare_session=forged\r\n\r\n"
                )
                await w.drain()
                line = await asyncio.wait_for(r.readline(), 5)
                code = line.split()[1].decode() if len(line.split()) > 1 else "closed"
            except (OSError, asyncio.TimeoutError, IndexError):
                code = "error"
                w = None
            statuses[code] = statuses.get(code, 0) + 1
            if w is not None:
                held.append(w)

    await asyncio.gather(*(one() for _ in range(n)))


def fds():
    import os

    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    before = rss_mib()
    stop = threading.Event()
    results = []
    t = threading.Thread(target=probe, args=(stop, results))
    t.start()
    extra = ""
    fd_before = fds()
    if scenario in ("rst-flood", "continuation-flood", "settings-flood", "ping-flood"):
        a_stop = threading.Event()
        counts = {}
        h = threading.Thread(target=h2_abuse, args=(a_stop, scenario, counts))
        h.start()
        time.sleep(seconds)
        a_stop.set()
        h.join()
        per = counts.pop("frames_per_closed_conn", [])
        extra = (
            f", {counts.get('frames', 0)} frames sent, connections closed by the server {counts.get('closed_by_server', 0)}"
            f" (median {statistics.median(per) if per else 0} frames each), GOAWAY seen {counts.get('goaway', 0)},"
            f" writes stalled {counts.get('stalled', 0)}, fds {fd_before} -> {fds()}"
        )
    elif scenario == "ws-upgrades":
        statuses, held = {}, []
        loop = asyncio.new_event_loop()
        loop.run_until_complete(ws_upgrades(2000, "127.0.0.4", statuses, held))
        loop.run_until_complete(asyncio.sleep(seconds))
        extra = f", answers {dict(sorted(statuses.items()))}, fds {fd_before} -> {fds()} while held"
        for w in held:
            w.close()
        loop.close()
    elif scenario == "h2c":
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
