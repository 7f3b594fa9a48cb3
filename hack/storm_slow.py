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
median and worst latency, and the server's RSS before, at its peak, when the clients have closed and
30 s later.

ws-relay: WebSockets through real relayed sessions (hack/bench.sh ws-relay starts the server with
running sessions, GSHARE_SESSION_DOMAIN=$STORM_HOST and GSHARE_SESSION_INGRESS at a backend this
script runs as `storm_slow.py ws-backend PORT`: it answers upgrades with 101 and echoes bytes, as an
app's WebSocket would). STORM_SESSIONS names a file of the sessions' CR names. /healthz is asked
every 20 ms from 127.0.0.200 (a new connection each time, 2 s timeout) for 5 s before and during
the storm. The storm, from 64 addresses (127.0.1.1-64): 6,000 upgrades spread over the sessions,
held open (the last session is left out); of the tunnels opened, a third stay idle (a client gone without a FIN), a third send
WebSocket frames one byte a second, a third write 1 MiB each and never read (a stalled reader);
200 upgrade requests whose head comes one byte every 2 s (127.0.0.5); and a well-behaved user
(127.0.0.201) who opens a tunnel to the last session, echoes a frame and closes it, again and again. Printed: /healthz
p50/p99 before and during, what the upgrades were answered, the user's echoes, fds and RSS before,
at the peak, once every client has closed, and 30 s later.
"""

import asyncio
import resource
import statistics
import sys
import threading
import time
import urllib.request

if sys.argv[1] == "ws-backend":
    port, pid, scenario = None, None, "ws-backend"
else:
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


# ---------------------------------------------------------------- ws-relay (real relayed sessions)


async def ws_backend_serve(bport):
    """The sessions' ingress and app: 101 for an upgrade, then an echo of every byte until EOF;
    a plain request gets a small 200."""
    import base64
    import hashlib

    async def handle(r, w):
        try:
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, OSError):
            w.close()
            return
        lower = head.decode("latin-1").lower()
        if "\nupgrade: websocket" in lower:
            key = ""
            for line in head.decode("latin-1").split("\r\n"):
                if line.lower().startswith("sec-websocket-key:"):
                    key = line.split(":", 1)[1].strip()
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
            w.write(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            try:
                await w.drain()
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    w.write(data)
                    await w.drain()
            except OSError:
                pass
        else:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            try:
                await w.drain()
            except OSError:
                pass
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", bport, backlog=4096)
    async with server:
        await server.serve_forever()


def ws_frame(payload):
    """A masked client text frame (RFC 6455 §5.2)."""
    import os

    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def ws_open(source, host, cr, timeout=10):
    """An upgrade of /proxy/<cr>/api/kernels/k/channels from `source`: (status, reader, writer);
    status is the answer's code, "closed" when the server closed the connection unanswered."""
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), timeout)
    except (OSError, asyncio.TimeoutError):
        return "connect-failed", None, None
    w.write(
        f"GET /proxy/{cr}/api/kernels/k/channels HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n"
        f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode()
    )
    try:
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.IncompleteReadError as e:
        w.close()
        return ("closed" if not e.partial else "partial"), None, None
    except (OSError, asyncio.TimeoutError, asyncio.LimitOverrunError):
        w.close()
        return "error", None, None
    parts = head.split(b" ", 2)
    code = parts[1].decode() if len(parts) > 1 else "?"
    if code != "101":
        w.close()
        return code, None, None
    return code, r, w


failures = {}


def healthz_probe(stop, phase, results):
    import http.client

    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2, source_address=("127.0.0.200", 0))
            c.request("GET", "/healthz")
            status = c.getresponse().status
            ok = status == 200
            c.close()
            if not ok:
                failures[f"{phase[0]}: {status}"] = failures.get(f"{phase[0]}: {status}", 0) + 1
        except Exception as e:
            ok = False
            kind = f"{phase[0]}: {type(e).__name__}"
            failures[kind] = failures.get(kind, 0) + 1
        results.append((phase[0], ok, (time.perf_counter() - t0) * 1000))
        time.sleep(0.02)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def ws_relay():
    import os

    host = os.environ["STORM_HOST"]
    crs = [l.strip() for l in open(os.environ["STORM_SESSIONS"]) if l.strip()]
    # The last session is the well-behaved user's own; the storm uses the others.
    crs, mine = crs[:-1], crs[-1]
    total = int(os.environ.get("STORM_UPGRADES", "6000"))
    sources = [f"127.0.1.{i}" for i in range(1, 65)]
    phase = ["before"]
    results = []
    stop = threading.Event()
    t = threading.Thread(target=healthz_probe, args=(stop, phase, results))
    rss_idle, fd_idle = rss_mib(), fds()
    t.start()
    time.sleep(5)
    phase[0] = "during"
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    statuses, tunnels, tasks = {}, [], []
    user = {"echoed": 0, "refused": {}, "ms": []}
    fd_peak = [fd_idle]

    async def storm():
        sem = asyncio.Semaphore(256)
        end = asyncio.Event()

        async def idle(r, w):
            await end.wait()

        async def slow_frames(r, w):
            frame = ws_frame(b"x" * 64)
            i = 0
            while not end.is_set():
                try:
                    w.write(frame[i % len(frame) : i % len(frame) + 1])
                    await w.drain()
                except OSError:
                    return
                i += 1
                try:
                    await asyncio.wait_for(end.wait(), 1)
                except asyncio.TimeoutError:
                    pass

        async def stalled_reader(r, w):
            chunk = ws_frame(b"y" * 65000)
            sent = 0
            try:
                while sent < (1 << 20) and not end.is_set():
                    w.write(chunk)
                    await asyncio.wait_for(w.drain(), 5)
                    sent += len(chunk)
            except (OSError, asyncio.TimeoutError):
                pass
            await end.wait()

        behaviours = [idle, slow_frames, stalled_reader]

        async def one(i):
            async with sem:
                code, r, w = await ws_open(sources[i % len(sources)], host, crs[i % len(crs)])
            statuses[code] = statuses.get(code, 0) + 1
            if w is not None:
                tunnels.append(w)
                await behaviours[len(tunnels) % 3](r, w)

        async def slow_head(i):
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.5", 0))
            except OSError:
                statuses["slow-head-refused"] = statuses.get("slow-head-refused", 0) + 1
                return
            head = (
                f"GET /proxy/{crs[i % len(crs)]}/ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n"
                f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            ).encode()
            k = 0
            while not end.is_set():
                try:
                    w.write(head[k % len(head) : k % len(head) + 1])
                    await w.drain()
                    if r.at_eof():
                        break
                except OSError:
                    break
                k += 1
                try:
                    await asyncio.wait_for(end.wait(), 2)
                except asyncio.TimeoutError:
                    pass
            closed = r.at_eof() or w.is_closing()
            key = "slow-head-closed-by-server" if closed and not end.is_set() else "slow-head-held"
            statuses[key] = statuses.get(key, 0) + 1
            w.close()

        async def good_user():
            k = 0
            while not end.is_set():
                t0 = time.perf_counter()
                code, r, w = await ws_open("127.0.0.201", host, mine)
                k += 1
                if w is None:
                    user["refused"][code] = user["refused"].get(code, 0) + 1
                else:
                    # The app echoes the bytes it gets: the same (masked) frame comes back.
                    sent = ws_frame(b"hello %d" % k)
                    try:
                        w.write(sent)
                        await w.drain()
                        if await asyncio.wait_for(r.readexactly(len(sent)), 5) == sent:
                            user["echoed"] += 1
                            user["ms"].append((time.perf_counter() - t0) * 1000)
                    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                        user["refused"]["echo-failed"] = user["refused"].get("echo-failed", 0) + 1
                    w.close()
                try:
                    await asyncio.wait_for(end.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass

        async def watch_fds():
            while not end.is_set():
                fd_peak[0] = max(fd_peak[0], fds())
                try:
                    await asyncio.wait_for(end.wait(), 0.25)
                except asyncio.TimeoutError:
                    pass

        runners = [asyncio.ensure_future(one(i)) for i in range(total)]
        runners += [asyncio.ensure_future(slow_head(i)) for i in range(200)]
        runners += [asyncio.ensure_future(good_user()), asyncio.ensure_future(watch_fds())]
        await asyncio.sleep(seconds)
        end.set()
        await asyncio.gather(*runners, return_exceptions=True)
        for w in tunnels:
            w.close()
        await asyncio.sleep(0)

    loop.run_until_complete(storm())
    peak = rss_mib("VmHWM")
    phase[0] = "after"
    stop.set()
    t.join()
    loop.close()
    # Every client socket is closed: wait (at most 30 s) for the server to give the tunnels back.
    t0 = time.perf_counter()
    while fds() > fd_idle + 4 and time.perf_counter() - t0 < 30:
        time.sleep(0.1)
    fd_after, back_s, rss_closed = fds(), time.perf_counter() - t0, rss_mib()
    time.sleep(30)
    rss_30 = rss_mib()
    lat = {p: [ms for ph, ok, ms in results if ph == p and ok] for p in ("before", "during")}
    failed = {p: sum(1 for ph, ok, _ in results if ph == p and not ok) for p in ("before", "during")}
    um = user["ms"]
    print(
        f"ws-relay ({len(crs)} sessions stormed, {total} upgrades from 64 addresses, {seconds:.0f} s): "
        f"/healthz p50/p99 before {pct(lat['before'], 50):.1f}/{pct(lat['before'], 99):.1f} ms "
        f"({len(lat['before'])} ok, {failed['before']} failed), during {pct(lat['during'], 50):.1f}/{pct(lat['during'], 99):.1f} ms "
        f"({len(lat['during'])} ok, {failed['during']} failed{': ' + str(failures) if failures else ''}); answers {dict(sorted(statuses.items()))}; "
        f"tunnels held {len(tunnels)}; the other user: {user['echoed']} echoes (median {pct(um, 50):.1f} ms), "
        f"refused {user['refused']}; fds {fd_idle} -> peak {fd_peak[0]} -> {fd_after} ({back_s:.1f} s after the clients closed); "
        f"RSS {rss_idle:.1f} -> peak {peak:.1f} -> {rss_closed:.1f} (clients closed) -> {rss_30:.1f} MiB (30 s later)"
    )


def fds():
    import os

    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if scenario == "ws-relay":
        ws_relay()
        return
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
    ended = rss_mib()
    # Does the memory go back once the clients are gone?
    time.sleep(30)
    ok = [ms for good, ms in results if good]
    print(
        f"{scenario}: /readyz answered {len(ok)}/{len(results)}, "
        f"median {statistics.median(ok) if ok else float('nan'):.1f} ms, worst {max(ms for _, ms in results):.1f} ms; "
        f"RSS {before:.1f} -> peak {peak:.1f} -> {ended:.1f} (clients closed) -> {rss_mib():.1f} MiB (30 s later){extra}"
    )


if scenario == "ws-backend":
    _soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
    asyncio.run(ws_backend_serve(int(sys.argv[2])))
else:
    main()
