#!/usr/bin/env python3
"""The cost of uniqueness: enqueue throughput at batch 100 with and without unique keys, per
backend, side by side in one run.

For each backend: throwaway storage (SQLite files, a durable redis-server with the shipped
queue config, a durable mariadbd) with one shard, one `pinlater-server` subprocess on it, and
`--clients` client threads enqueueing batches of `--batch` jobs for `--seconds` per mode, the
modes interleaved over `--rounds` rounds (so a busier moment of the shared machine hits every
mode alike). Modes:

  plain     no unique key (the random-shard path, one insert per request)
  keyed     every job a fresh key (claim, insert, bind: the uniqueness cost)
  repeated  every job a key already held (nothing stored; the answer is the holders')

Prints jobs/s (median over rounds) and p50/p99 request latency per mode, and keyed/plain.

    python scripts/bench_unique.py                       # sqlite, redis, mysql
    python scripts/bench_unique.py --backend redis --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server_process import ServerProcess  # noqa: E402
from worker_sdk.client import PinLaterClient  # noqa: E402
from worker_sdk.models import Job  # noqa: E402

MODES = ("plain", "keyed", "repeated")


@contextlib.contextmanager
def storage(kind: str, tmp: Path):
    """The `backend:` section of one throwaway durable shard of `kind`."""
    if kind == "sqlite":
        yield {"kind": "sqlite", "data_dir": str(tmp / "sqlite"), "shards": [{"name": "1"}]}
    elif kind == "redis":
        from tests.support.redis_env import running_server

        config = ROOT / "configs" / "redis-queue.conf"
        with running_server(tmp / "redis", config_file=config) as server:
            yield {"kind": "redis", "shards": [server.shard("r1")]}
    elif kind == "mysql":
        from tests.support.mysql_env import running_server

        with running_server(tmp / "mysql", flush_log_at_trx_commit=1) as server:
            yield {"kind": "mysql", "shards": [server.shard("m1")]}
    else:
        raise SystemExit(f"unknown backend {kind}")


class Load:
    """Client threads enqueueing batches in one mode for a fixed time."""

    def __init__(self, client: PinLaterClient, queue: str, batch: int):
        self.client, self.queue, self.batch = client, queue, batch
        self._fresh = itertools.count()
        self._held: list[list[str]] = []  # key batches stored before (for `repeated`)
        self._lock = threading.Lock()

    def _jobs(self, mode: str) -> list[Job]:
        body = b"x" * 100
        if mode == "plain":
            return [Job(body) for _ in range(self.batch)]
        if mode == "keyed":
            with self._lock:
                keys = [f"order-{next(self._fresh)}" for _ in range(self.batch)]
                self._held.append(keys)
            return [Job(body, unique_key=k) for k in keys]
        with self._lock:
            keys = self._held[next(self._fresh) % len(self._held)]
        return [Job(body, unique_key=k) for k in keys]

    def run(self, mode: str, clients: int, seconds: float) -> tuple[float, list[float]]:
        """(jobs per second, request latencies in ms)."""
        latencies: list[float] = []
        done = [0]
        stop = time.monotonic() + seconds

        def worker() -> None:
            mine, count = [], 0
            while time.monotonic() < stop:
                jobs = self._jobs(mode)
                started = time.perf_counter()
                self.client.enqueue(self.queue, jobs)
                mine.append((time.perf_counter() - started) * 1000)
                count += len(jobs)
            with self._lock:
                latencies.extend(mine)
                done[0] += count

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return done[0] / (time.monotonic() - began), latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def bench(kind: str, args: argparse.Namespace) -> dict[str, tuple[float, float, float]]:
    with tempfile.TemporaryDirectory(prefix=f"bench-unique-{kind}-") as tmp_text:
        tmp = Path(tmp_text)
        with (
            storage(kind, tmp) as section,
            ServerProcess({"backend": section, "janitor": {"enabled": False}}, tmp) as server,
        ):
            client = PinLaterClient(
                [f"{server.host}:{server.port}"], pool_size=args.clients, timeout=60
            )
            client.create_queue("bench")
            load = Load(client, "bench", args.batch)
            load.run("keyed", args.clients, 1.0)  # warm-up, and keys for `repeated`
            load.run("plain", args.clients, 1.0)
            rates: dict[str, list[float]] = {m: [] for m in MODES}
            lat: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(args.rounds):
                for mode in MODES:
                    rate, ms = load.run(mode, args.clients, args.seconds)
                    rates[mode].append(rate)
                    lat[mode].extend(ms)
            client.close()
    return {
        m: (statistics.median(rates[m]), percentile(lat[m], 0.5), percentile(lat[m], 0.99))
        for m in MODES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "redis", "mysql"])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0, help="per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kinds = args.backend or ["sqlite", "redis", "mysql"]
    print(
        f"batch {args.batch}, {args.clients} clients, {args.rounds} rounds of "
        f"{args.seconds:g} s per mode; jobs/s is the median over rounds"
    )
    print(f"{'backend':8} {'mode':9} {'jobs/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs plain':>9}")
    for kind in kinds:
        results = bench(kind, args)
        plain = results["plain"][0]
        for mode, (rate, p50, p99) in results.items():
            print(f"{kind:8} {mode:9} {rate:9.0f} {p50:8.1f} {p99:8.1f} {rate / plain:9.2f}")


if __name__ == "__main__":
    main()
