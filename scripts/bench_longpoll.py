#!/usr/bin/env python3
"""Long-poll dequeue and the empty-partition map, per backend, side by side in one run.

For each backend: throwaway storage, `pinlater-server` subprocesses on it (metrics on, janitor
and depth refresh off so the storage calls counted are the dequeue path's), then:

  idle      storage calls/s of an idle queue with `--workers` workers waiting on one server:
            polling (the SDK's idle back-off up to 1 s: the old way) without and with the
            empty-partition map, and long-poll (20 s waits). Counted from the server's
            metrics: storage dequeue calls plus the long-poll checks; all storage calls
            (the settings poll's included) are reported apart.
  wake-up   latency from the start of an enqueue to the answer of a dequeue parked on server A,
            the enqueue through A (in-server) or through server B (cross-server): p50/p99.
  enqueue   enqueue (batch 1) p50/p99 through a server with 0 and with `--parked` dequeues
            parked on it.
  partitions  storage dequeue calls per dequeue RPC (limit 10) with 8 shards of which one holds
            jobs (the other 7 are dequeue_only), with the empty-partition map off (TTL 0) and
            on (TTL 2 s), two servers on the same storage.

    python scripts/bench_longpoll.py                       # sqlite, redis, mysql
    python scripts/bench_longpoll.py --backend sqlite --seconds 5
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.errors import PinLaterError  # noqa: E402
from tests.support.longpoll import park_dequeues  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402
from tests.support.storage_process import free_port  # noqa: E402
from worker_sdk.client import PinLaterClient  # noqa: E402

SHARDS = 8
QUIET = {
    "janitor": {"enabled": False},
    "server": {"max_connections_per_peer": 5000},
    "metrics": {"depth_interval_seconds": 3600},
}


@contextlib.contextmanager
def storage(kind: str, tmp: Path, shards: int):
    """`shards` shard entries of one throwaway storage of `kind`; all but the first are
    dequeue_only (so every job lands on the first)."""
    names = [f"s{i}" for i in range(shards)]
    if kind == "sqlite":
        entries = [{"name": n} for n in names]
        extra = {"data_dir": str(tmp / "sqlite")}
        server = None
    elif kind == "redis":
        from tests.support.redis_env import running_server

        server = running_server(tmp / "redis")
        extra = {}
    elif kind == "mysql":
        from tests.support.mysql_env import running_server

        server = running_server(tmp / "mysql")
        extra = {}
    else:
        raise SystemExit(f"unknown backend {kind}")
    with contextlib.ExitStack() as stack:
        if server is not None:
            running = stack.enter_context(server)
            entries = [running.shard(n) for n in names]
        for entry in entries[1:]:
            entry["dequeue_only"] = True
        yield {"kind": kind, "shards": entries, **extra}


class Server:
    def __init__(self, stack, backend: dict, tmp: Path, name: str, **config):
        self.metrics_port = free_port()
        merged = {**QUIET, "backend": backend, **config}
        merged["metrics"] = {**QUIET["metrics"], "port": self.metrics_port}
        merged["server"] = {**QUIET["server"], **config.get("server", {})}
        self.proc = stack.enter_context(ServerProcess(merged, tmp, name=name))
        self.address = f"{self.proc.host}:{self.proc.port}"

    def client(self, **kwargs) -> PinLaterClient:
        return PinLaterClient([self.address], **kwargs)

    def metric(self, name: str, labels: str = "") -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read()
        total = 0.0
        for line in text.decode().splitlines():
            match = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)$", line)
            if match and labels in (match.group(1) or ""):
                total += float(match.group(2))
        return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


# ---------------------------------------------------------------- idle


def idle(server: Server, workers: int, seconds: float, long_poll: float) -> dict:
    queue = f"idle_{int(long_poll)}_{time.monotonic_ns()}"
    with server.client() as admin:
        admin.create_queue(queue)
    stop = threading.Event()
    client = server.client(pool_size=workers, timeout=10)

    def worker() -> None:
        backoff = 0.05
        while not stop.is_set():
            try:
                jobs = client.dequeue(queue, 1, wait_ms=int(long_poll * 1000))
            except PinLaterError:  # refused (dequeues in flight over the cap): back off
                jobs = []
                stop.wait(backoff)
            if not jobs and not long_poll:
                stop.wait(backoff)  # the SDK Worker's idle back-off, without its jitter
                backoff = min(backoff * 2, 1.0)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    time.sleep(min(3.0, seconds))  # settle: every worker parked or backing off
    before = counts(server)
    time.sleep(seconds)
    after = counts(server)
    stop.set()
    for thread in threads:
        thread.join(long_poll + 15)
    client.close()
    per_s = {k: (after[k] - before[k]) / seconds for k in after}
    per_s["queue"] = per_s["dequeue_calls"] + per_s["checks"]
    return per_s


def counts(server: Server) -> dict:
    return {
        "all_calls": server.metric("pinlater_shard_call_duration_seconds_count"),
        "dequeue_calls": server.metric("pinlater_storage_dequeues_total"),
        "checks": server.metric("pinlater_long_poll_checks_total"),
        "rpcs": server.metric("pinlater_requests_total", 'method="dequeueJobs"'),
    }


# ---------------------------------------------------------------- wake-up


def wake_ups(a: Server, b: Server, rounds: int) -> dict:
    queue = f"wake_{time.monotonic_ns()}"
    with a.client() as admin:
        admin.create_queue(queue)
    results: dict[str, list[float]] = {"in-server": [], "cross-server": []}
    waiting, local, remote = a.client(timeout=10), a.client(), b.client()
    for i in range(rounds):
        for mode, enqueuer in (("in-server", local), ("cross-server", remote)):
            answer: dict = {}

            def wait(out: dict = answer) -> None:
                out["jobs"] = waiting.dequeue(queue, 1, wait_ms=10_000)
                out["at"] = time.perf_counter()

            parked = threading.Thread(target=wait)
            parked.start()
            time.sleep(0.15 + 0.05 * (i % 3))  # parked by now, at varied watcher phases
            started = time.perf_counter()
            enqueuer.enqueue(queue, [b"x"])
            parked.join(15)
            if answer.get("jobs"):
                results[mode].append(answer["at"] - started)
    for client in (waiting, local, remote):
        client.close()
    return results


# ---------------------------------------------------------------- enqueue with parked


def enqueue_latency(server: Server, parked: int, count: int) -> list[float]:
    with server.client() as client:
        queue = f"stream_{parked}_{time.monotonic_ns()}"
        client.create_queue(queue)
        sockets = []
        if parked:
            client.create_queue(queue + "_parked")
            sockets = park_dequeues(server.proc, queue + "_parked", parked, wait_ms=60_000)
        try:
            latencies = []
            for i in range(count):
                started = time.perf_counter()
                client.enqueue(queue, [b"%d" % i])
                latencies.append(time.perf_counter() - started)
            return latencies
        finally:
            for sock in sockets:
                sock.close()


# ---------------------------------------------------------------- partitions


def calls_per_rpc(server: Server, rpcs: int) -> float:
    queue = f"parts_{time.monotonic_ns()}"
    with server.client(timeout=30) as client:
        client.create_queue(queue)
        for _ in range(rpcs * 10 // 100 + 1):
            client.enqueue(queue, [b"j"] * 100)
        for _ in range(5):  # warm: the map learns which partitions are empty
            client.dequeue(queue, 10)
        before = server.metric("pinlater_storage_dequeues_total")
        for _ in range(rpcs):
            assert client.dequeue(queue, 10), "jobs ran out"
        return (server.metric("pinlater_storage_dequeues_total") - before) / rpcs


# ---------------------------------------------------------------- main


def run(kind: str, args) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        single = stack.enter_context(storage(kind, tmp_path / "one", 1))
        a = Server(stack, single, tmp_path, "a")
        b = Server(stack, single, tmp_path, "b")
        no_map = Server(stack, single, tmp_path, "c", sharding={"empty_partition_ttl_seconds": 0})
        print(f"\n== {kind}")
        rows = (
            ("polling, no map (before)", idle(no_map, args.workers, args.seconds, 0)),
            ("polling, map", idle(a, args.workers, args.seconds, 0)),
            ("long-poll + map", idle(a, args.workers, args.seconds, 20)),
        )
        for name, row in rows:
            print(
                f"idle queue, {args.workers} workers, {name:24}: dequeue RPC/s "
                f"{row['rpcs']:7.1f}  queue storage calls/s {row['queue']:7.2f} "
                f"(dequeues {row['dequeue_calls']:.2f} + checks {row['checks']:.2f}; all "
                f"storage calls/s incl. settings poll {row['all_calls']:.2f})"
            )
        waits = wake_ups(a, b, args.rounds)
        for mode, values in waits.items():
            print(
                f"wake-up {mode:12}: p50 {pct(values, 0.5):7.1f} ms  "
                f"p99 {pct(values, 0.99):7.1f} ms  ({len(values)} of {args.rounds})"
            )
        for n in (0, args.parked):
            lat = enqueue_latency(a, n, args.enqueues)
            print(
                f"enqueue with {n:4} parked: p50 {pct(lat, 0.5):6.2f} ms  "
                f"p99 {pct(lat, 0.99):6.2f} ms"
            )
        eight = stack.enter_context(storage(kind, tmp_path / "eight", SHARDS))
        off = Server(stack, eight, tmp_path, "map-off", sharding={"empty_partition_ttl_seconds": 0})
        on = Server(stack, eight, tmp_path, "map-on")
        before, after = calls_per_rpc(off, args.rpcs), calls_per_rpc(on, args.rpcs)
        print(
            f"{SHARDS} shards, 1 holding jobs: storage dequeue calls per RPC: map off "
            f"{before:.2f}, map on {after:.2f} ({after / before:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "redis", "mysql"])
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--parked", type=int, default=1000)
    parser.add_argument("--enqueues", type=int, default=500)
    parser.add_argument("--rpcs", type=int, default=300)
    args = parser.parse_args()
    for kind in args.backend or ["sqlite", "redis", "mysql"]:
        run(kind, args)


if __name__ == "__main__":
    main()
