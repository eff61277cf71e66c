#!/usr/bin/env python3
"""The prefetching dequeue broker, per backend, on and off side by side in one run.

For each backend: throwaway storage with two shards, two `pinlater-server` subprocesses on it,
`off` (broker.default_prefetch 0) and `on` (broker.default_prefetch `--prefetch`), then:

  latency     dequeue at batch 1 p50/p99, each as a ratio to a no-op RPC (getQueueNames) on
              the same connection, the two calls interleaved (goal: broker p50 <= 1.5x no-op).
  throughput  jobs/s dequeued and acked (piggy-backed on the next dequeue) at batch 100 by
              `--threads` workers, the servers taking turns in slices, each on a queue of its
              own (goal: on >= off).

    python scripts/bench_broker.py                       # sqlite, redis, mysql
    python scripts/bench_broker.py --backend sqlite --rounds 500
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server_process import ServerProcess  # noqa: E402
from worker_sdk.client import PinLaterClient  # noqa: E402
from worker_sdk.models import Acks  # noqa: E402

QUIET = {
    "janitor": {"enabled": False},
    "metrics": {"port": 0, "depth_interval_seconds": 3600},
}


@contextlib.contextmanager
def storage(kind: str, tmp: Path, shards: int = 2):
    names = [f"s{i}" for i in range(shards)]
    if kind == "sqlite":
        yield {"kind": kind, "shards": [{"name": n} for n in names], "data_dir": str(tmp)}
        return
    if kind == "redis":
        from tests.support.redis_env import running_server
    elif kind == "mysql":
        from tests.support.mysql_env import running_server  # type: ignore[no-redef]
    else:
        raise SystemExit(f"unknown backend {kind}")
    with running_server(tmp / kind) as running:
        yield {"kind": kind, "shards": [running.shard(n) for n in names]}


def server(stack, backend: dict, tmp: Path, name: str, prefetch: int) -> ServerProcess:
    config = {**QUIET, "backend": backend, "broker": {"default_prefetch": prefetch}}
    return stack.enter_context(ServerProcess(config, tmp, name=name))


def client(proc: ServerProcess, **kwargs) -> PinLaterClient:
    return PinLaterClient([f"{proc.host}:{proc.port}"], **kwargs)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def fill(proc: ServerProcess, queue: str, jobs: int) -> None:
    with client(proc, timeout=60) as c:
        c.create_queue(queue)
        for start in range(0, jobs, 1000):
            c.enqueue(queue, [b"job-%d" % i for i in range(start, min(jobs, start + 1000))])


def latency(proc: ServerProcess, rounds: int) -> dict[str, list[float]]:
    """Interleaved no-op RPCs and batch-1 dequeues on one connection (a warm-up first)."""
    queue = f"lat_{time.monotonic_ns()}"
    fill(proc, queue, rounds + 200)
    out: dict[str, list[float]] = {"noop": [], "dequeue": []}
    with client(proc, pool_size=1) as c:
        for _ in range(100):  # warm: connection, demand noticed, leases taken, buffer filled
            c.queue_names()
            c.dequeue(queue, 1)
        time.sleep(1.0)
        for _ in range(rounds):
            started = time.perf_counter()
            c.queue_names()
            middle = time.perf_counter()
            got = c.dequeue(queue, 1)
            out["noop"].append(middle - started)
            out["dequeue"].append(time.perf_counter() - middle)
            assert got, "the queue ran dry"
    return out


def throughput(servers: dict[str, ServerProcess], args) -> dict[str, float]:
    """Jobs/s dequeued and acked at batch 100 by `threads` workers per server, the servers
    taking turns in `--slices` slices (so that the shared machine's load changes hit both)."""
    queues = {}
    for name, proc in servers.items():
        queues[name] = f"tp_{name}_{time.monotonic_ns()}"
        fill(proc, queues[name], args.jobs)
    done = dict.fromkeys(servers, 0)
    spent = dict.fromkeys(servers, 0.0)
    for _ in range(args.slices):
        for name, proc in servers.items():
            jobs, seconds = _slice(proc, queues[name], args.threads, args.seconds / args.slices)
            done[name] += jobs
            spent[name] += seconds
    for name in servers:
        if done[name] >= args.jobs:
            print(f"  ({name}: the queue ran dry, the rate counts until then: raise --jobs)")
    return {name: done[name] / spent[name] for name in servers}


def _slice(proc: ServerProcess, queue: str, threads: int, seconds: float) -> tuple[int, float]:
    """(jobs dequeued and acked, seconds until the workers stopped: at the slice's end, or
    when the queue ran dry)."""
    done = [0] * threads
    stop = threading.Event()
    started = time.perf_counter()

    def work(i: int) -> None:
        with client(proc, pool_size=1, timeout=30) as c:
            acks = None
            while not stop.is_set():
                got = c.dequeue(queue, 100, acks)
                if not got:
                    break
                done[i] += len(got)
                acks = Acks(succeeded=tuple(got))
            if acks is not None:
                c.ack(queue, acks.succeeded)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    deadline = started + seconds
    while any(w.is_alive() for w in workers) and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    for worker in workers:
        worker.join(60)
    return sum(done), time.perf_counter() - started


def run(kind: str, args) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tmp_path = Path(tmp)
        backend = stack.enter_context(storage(kind, tmp_path / "storage"))
        servers = {
            "off": server(stack, backend, tmp_path, "off", 0),
            "on": server(stack, backend, tmp_path, "on", args.prefetch),
        }
        print(f"\n== {kind} (2 shards, prefetch {args.prefetch})")
        for name, proc in servers.items():
            lat = latency(proc, args.rounds)
            noop, deq = pct(lat["noop"], 0.5), pct(lat["dequeue"], 0.5)
            noop99, deq99 = pct(lat["noop"], 0.99), pct(lat["dequeue"], 0.99)
            print(
                f"broker {name:3}: dequeue batch 1 p50 {deq:6.3f} ms ({deq / noop:4.2f}x no-op "
                f"{noop:6.3f} ms)  p99 {deq99:6.3f} ms ({deq99 / noop99:4.2f}x no-op "
                f"{noop99:6.3f} ms)"
            )
        rates = throughput(servers, args)
        print(
            f"batch 100, {args.threads} workers: off {rates['off']:8.0f} jobs/s  on "
            f"{rates['on']:8.0f} jobs/s ({rates['on'] / rates['off']:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "redis", "mysql"])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0, help="per server, in all")
    parser.add_argument("--slices", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=500_000, help="per server")
    args = parser.parse_args()
    for kind in args.backend or ["sqlite", "redis", "mysql"]:
        run(kind, args)


if __name__ == "__main__":
    main()
