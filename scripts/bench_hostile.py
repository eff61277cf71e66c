#!/usr/bin/env python3
"""Hostile load against a real `pinlater-server`: a normal client's enqueue latency, quiet and
during each flood, side by side in one run (issue 12: each flood must leave p99 within 2x quiet).

Floods (each runs alone, for --seconds, after it is fully set up):
- idle: one peer (127.0.0.2) holds --idle-connections idle TCP connections (more than the
  per-peer cap and than the old 256 total cap), reopening every one the server closes;
- slowloris: --slowloris connections from 8 peers (127.0.0.3-10) each send the start of a frame
  and then one byte per second, never finishing it, reopening every one the server closes;
- password: 32 threads send deleteQueue with a wrong admin password as fast as answered.

The normal client (127.0.0.1) enqueues one job per call and opens a new connection every
--calls-per-connection calls (new clients keep arriving). Failed calls are counted; latency is
over the calls that succeeded. The server's RSS and thread count are sampled at each phase end.

    python scripts/bench_hostile.py                      # sqlite
    python scripts/bench_hostile.py --backend redis
    python scripts/bench_hostile.py --memory 1000,5000   # RSS per idle connection, plain + TLS

Runs against whatever code tree the script lives in: copy it into an older checkout to compare.
Loopback only (127.0.0.x are all loopback on Linux); every process is stopped after.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import re
import selectors
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.idl import PinLater, RequestContext  # noqa: E402
from pinlater.idl import pinlater_thrift as t  # noqa: E402
from tests.support.server_process import (  # noqa: E402
    ServerProcess,
    encode_call,
    free_port,
    recv_exact,
)

CTX = RequestContext(source="bench-hostile")
PASSWORD = "bench-admin-password"


@contextlib.contextmanager
def backend_section(kind: str, tmp: Path):
    if kind == "sqlite":
        yield {"kind": "sqlite", "data_dir": str(tmp / "sqlite"), "shards": [{"name": "1"}]}
    else:
        from tests.support.redis_env import running_server

        with running_server(tmp / "redis") as server:
            yield {"kind": "redis", "shards": [server.shard("r1")]}


def proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MiB, thread count) of a process (Linux /proc)."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024
    threads = int(re.search(r"Threads:\s+(\d+)", text).group(1))
    return rss, threads


# ---- the normal client ----


class NormalClient:
    """Enqueues one job per call on a fresh connection every `per_connection` calls."""

    def __init__(self, server: ServerProcess, per_connection: int, timeout: float = 5.0):
        self.server, self.per_connection, self.timeout = server, per_connection, timeout

    def run(self, seconds: float) -> dict:
        latencies: list[float] = []
        errors = 0
        client, used = None, 0
        request = t.PinLaterEnqueueRequest(queueName="victim", jobs=[t.PinLaterJob(body=b"job")])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                if client is None or used >= self.per_connection:
                    if client is not None:
                        client.close()
                    client, used = self.server.client(timeout=self.timeout), 0
                client.enqueueJobs(CTX, request)
                used += 1
                latencies.append(time.perf_counter() - started)
            except Exception:  # noqa: BLE001 - a refused or failed call is what we count
                errors += 1
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.05)
        if client is not None:
            client.close()
        return summary(latencies, errors)


def summary(latencies: list[float], errors: int) -> dict:
    if not latencies:
        return {"calls": 0, "errors": errors, "p50_ms": None, "p99_ms": None}
    ordered = sorted(latencies)
    return {
        "calls": len(ordered),
        "errors": errors,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


# ---- floods ----


class SocketFlood:
    """Holds `count` connections from `sources` (round robin), reopening each one the server
    closes after `reopen_delay`. Each new connection sends `opening` once; with `trickle`, one
    more byte every second."""

    def __init__(self, addr, count: int, sources: list[str], opening: bytes, trickle: bool, delay):
        self.addr, self.count, self.sources = addr, count, sources
        self.opening, self.trickle, self.reopen_delay = opening, trickle, delay
        self.selector = selectors.DefaultSelector()
        self.reopen_at: list[tuple[float, int]] = []
        self.stats = {"reopened": 0, "failed_connects": 0}

    def _open(self, index: int) -> None:
        try:
            sock = socket.create_connection(
                self.addr, timeout=2, source_address=(self.sources[index % len(self.sources)], 0)
            )
            if self.opening:
                sock.sendall(self.opening)
            sock.setblocking(False)
        except OSError:
            self.stats["failed_connects"] += 1
            self.reopen_at.append((time.monotonic() + self.reopen_delay, index))
            return
        self.selector.register(sock, selectors.EVENT_READ, index)

    def _closed(self, sock) -> bool:
        try:
            return not sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            return True

    def run(self, ready, stop) -> dict:
        for i in range(self.count):
            self._open(i)
        ready.set()
        next_trickle = time.monotonic() + 1
        while not stop.is_set():
            for key, _ in self.selector.select(0.05):
                if self._closed(key.fileobj):
                    self.selector.unregister(key.fileobj)
                    key.fileobj.close()
                    self.stats["reopened"] += 1
                    self.reopen_at.append((time.monotonic() + self.reopen_delay, key.data))
            now = time.monotonic()
            due = [index for at, index in self.reopen_at if at <= now]
            self.reopen_at = [(at, index) for at, index in self.reopen_at if at > now]
            for index in due:
                self._open(index)
            if self.trickle and now >= next_trickle:
                next_trickle += 1
                for key in list(self.selector.get_map().values()):
                    with contextlib.suppress(OSError):
                        key.fileobj.send(b"\0")
        return self.stats


def password_flood(addr, ready, stop, threads: int = 32) -> dict:
    from tests.support.server_process import make_thrift_client

    guesses = [0]

    def guess() -> None:
        client = None
        while not stop.is_set():
            try:
                client = client or make_thrift_client(*addr, timeout=5)
                client.deleteQueue(CTX, "victim", "wrong-password")
            except Exception:  # noqa: BLE001 - every guess fails; that is the point
                guesses[0] += 1
        if client is not None:
            client.close()

    workers = [threading.Thread(target=guess, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    ready.set()
    stop.wait()
    for w in workers:
        w.join(10)
    return {"guesses": guesses[0]}


def slowloris_opening() -> bytes:
    """The start of a frame that claims 1000 bytes and never gets them."""
    payload = encode_call("getQueueNames", PinLater.getQueueNames_args(context=CTX))
    return struct.pack("!i", 1000) + payload[:6]


def flood_main(kind: str, addr, args, ready, stop, results) -> None:
    """One flood, in its own process (so it does not share the normal client's GIL)."""
    if kind == "idle":
        flood = SocketFlood(
            addr, args.idle_connections, ["127.0.0.2"], b"", False, args.reopen_delay
        )
        results.put(flood.run(ready, stop))
    elif kind == "slowloris":
        sources = [f"127.0.0.{i}" for i in range(3, 11)]
        flood = SocketFlood(
            addr, args.slowloris, sources, slowloris_opening(), True, args.reopen_delay
        )
        results.put(flood.run(ready, stop))
    else:
        results.put(password_flood(addr, ready, stop))


def run_flood(kind: str, server: ServerProcess, normal: NormalClient, args) -> tuple:
    """The normal client's figures during one flood, the server's (RSS, threads) at its end,
    and what the flood did."""
    ctx = multiprocessing.get_context("fork")
    ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(
        target=flood_main, args=(kind, (server.host, server.port), args, ready, stop, results)
    )
    child.start()
    ready.wait(120)
    time.sleep(1.0)  # past the linger: the flood's connections are idle
    result = normal.run(args.seconds)
    status = proc_status(server.pid)
    stop.set()
    stats = results.get(timeout=60)
    child.join(30)
    return result, status, ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in stats.items())


def refused_counts(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    found = re.finditer(r'^pinlater_connections_refused_total\{reason="(\w+)"\} (\S+)$', text, re.M)
    return {m.group(1): float(m.group(2)) for m in found}


def latency_run(args) -> None:
    from pinlater.common.passwords import hash_password

    with tempfile.TemporaryDirectory(prefix="pinlater-hostile-") as tmp_name:
        tmp = Path(tmp_name)
        with backend_section(args.backend, tmp) as backend:
            metrics_port = free_port()
            config = {
                "backend": backend,
                "janitor": {"enabled": False},
                "metrics": {"port": metrics_port},
                "admin": {
                    "password_hash": hash_password(PASSWORD),
                    "password_failures_per_minute": 120,
                },
            }
            with ServerProcess(config, tmp / "server") as server:
                setup = server.client()
                setup.createQueue(CTX, "victim")
                setup.close()
                normal = NormalClient(server, args.calls_per_connection)
                normal.run(1.0)  # warm-up
                rows = [("quiet", normal.run(args.seconds), proc_status(server.pid), "")]
                for kind in args.floods:
                    rows.append((kind, *run_flood(kind, server, normal, args)))
                    time.sleep(1.0)
                print_rows(args, rows)
                counts = refused_counts(metrics_port)
                if counts:
                    print("pinlater_connections_refused_total:", counts)


def print_rows(args, rows) -> None:
    print(
        f"backend {args.backend}, {args.seconds:g}s per phase, new connection every "
        f"{args.calls_per_connection} calls; idle flood {args.idle_connections} connections "
        f"from one peer, slowloris {args.slowloris} connections from 8 peers; floods reopen "
        f"closed connections after {args.reopen_delay:g}s"
    )
    quiet_p99 = rows[0][1]["p99_ms"]
    print(
        f"{'phase':10s} {'calls':>6s} {'errors':>6s} {'p50 ms':>8s} {'p99 ms':>8s} "
        f"{'p99/quiet':>9s} {'RSS MiB':>8s} {'threads':>7s}  flood"
    )
    for name, r, (rss, threads), note in rows:
        ratio = f"{r['p99_ms'] / quiet_p99:.2f}" if r["p99_ms"] and quiet_p99 else "-"
        p50 = f"{r['p50_ms']:.2f}" if r["p50_ms"] is not None else "-"
        p99 = f"{r['p99_ms']:.2f}" if r["p99_ms"] is not None else "-"
        print(
            f"{name:10s} {r['calls']:6d} {r['errors']:6d} {p50:>8s} {p99:>8s} {ratio:>9s} "
            f"{rss:8.1f} {threads:7d}  {note}"
        )


# ---- memory per idle connection ----


def open_idle(server, count: int, tls_context: ssl.SSLContext | None) -> list[socket.socket]:
    """`count` idle connections (after one request each), spread over 127.0.0.x sources."""
    call = encode_call("getQueueNames", PinLater.getQueueNames_args(context=CTX))
    socks = []
    for i in range(count):
        sock = socket.create_connection(
            (server.host, server.port), timeout=10, source_address=(f"127.0.1.{1 + i % 200}", 0)
        )
        if tls_context is not None:
            sock = tls_context.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(struct.pack("!i", len(call)) + call)
        (size,) = struct.unpack("!i", recv_exact(sock, 4))
        recv_exact(sock, size)
        socks.append(sock)
    return socks


def memory_run(args) -> None:
    from tests.fuzz.certs import make_certs

    counts = [int(c) for c in args.memory.split(",")]
    with tempfile.TemporaryDirectory(prefix="pinlater-memory-") as tmp_name:
        tmp = Path(tmp_name)
        certs = make_certs(tmp / "certs")
        for label in ("plain", "tls"):
            server_cfg: dict = {"max_connections": max(counts) + 100}
            context = None
            if label == "tls":
                server_cfg["tls"] = {
                    "enabled": True,
                    "cert_file": certs.server_cert,
                    "key_file": certs.server_key,
                }
                context = ssl.create_default_context(cafile=certs.ca)
            for count in counts:
                config = {"janitor": {"enabled": False}, "server": server_cfg}
                with ServerProcess(config, tmp / f"{label}-{count}") as server:
                    warm = open_idle(server, 20, context)  # threads, caches, first allocations
                    time.sleep(1.0)
                    before, _ = proc_status(server.pid)
                    socks = open_idle(server, count, context)
                    time.sleep(2.0)  # every connection parked (past the linger)
                    after, threads = proc_status(server.pid)
                    per_conn = (after - before) * 1024 / count
                    print(
                        f"{label:5s} {count:6d} idle connections: RSS {before:.1f} -> "
                        f"{after:.1f} MiB, {per_conn:.1f} KiB per connection, {threads} threads"
                    )
                    for sock in socks + warm:
                        sock.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "redis"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--idle-connections", type=int, default=2000)
    parser.add_argument("--slowloris", type=int, default=400)
    parser.add_argument("--calls-per-connection", type=int, default=20)
    parser.add_argument(
        "--reopen-delay",
        type=float,
        default=0.1,
        help="a flood reopens each connection the server closed after this long",
    )
    parser.add_argument(
        "--floods",
        nargs="*",
        default=["idle", "slowloris", "password"],
        choices=["idle", "slowloris", "password"],
    )
    parser.add_argument(
        "--memory", metavar="N,N", help="instead: RSS per idle connection at these counts"
    )
    args = parser.parse_args()
    if args.memory:
        memory_run(args)
    else:
        latency_run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
