#!/usr/bin/env python3
"""What FIFO order costs per job: storage calls and time per dequeue RPC of a FIFO queue (cap
1, `Shard.dequeue_fifo`) next to the same queue as a plain 1-partition queue and as a default
queue on every shard, per backend, with a backlog of `--backlog` pending jobs, side by side in
one run (8 shards, tests/support/many_shards.py; the sharded store in this process, every
storage call attempt counted).

Each mode: `--backlog` jobs enqueued in batches of 100, then `--jobs` dequeues of one job,
each acking the previous job piggy-backed, as a worker does (a FIFO queue applies the acks on
their own first: one more call). Prints storage calls and median microseconds per dequeue.

    python scripts/bench_fifo.py                           # sqlite, redis, mysql
    python scripts/bench_fifo.py --backend sqlite --backlog 20000
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends import backend_class  # noqa: E402
from pinlater.ops.placement_check import PlacementCheck  # noqa: E402
from pinlater.storage.contract import StorageLimits  # noqa: E402
from pinlater.storage.models import Ack, ClaimMatch, NewJob  # noqa: E402
from pinlater.storage.sharded import ShardedBackend  # noqa: E402
from tests.support.many_shards import eight_shards  # noqa: E402

MODES = ("default", "partitions=1", "fifo")


def open_store(found) -> tuple[ShardedBackend, collections.Counter]:
    kind, options, entries = found
    cls = backend_class(kind)
    parsed = cls.parse_options(options, "backend")
    store = ShardedBackend(
        cls(parsed, StorageLimits()), cls.parse_shards(entries, parsed, "s"), num_priorities=3
    )
    calls: collections.Counter = collections.Counter()
    store.call_observer = lambda shard, seconds, ok: calls.update(["all"])
    return store, calls


def run(store, calls, queue: str, args) -> tuple[list[int], list[float]]:
    """Calls and seconds of each of `args.jobs` one-job dequeues with piggy-backed acks."""
    for _ in range(args.backlog // 100):
        store.enqueue(queue, [NewJob(b"x" * 64) for _ in range(100)])
    counts, seconds, acks = [], [], None
    for _ in range(args.jobs):
        before, started = calls["all"], time.perf_counter()
        got = store.dequeue(queue, 1, "bench", acks=acks)
        seconds.append(time.perf_counter() - started)
        counts.append(calls["all"] - before)
        assert len(got) == 1, got
        acks = (
            [(d.shard, Ack(d.priority, d.local_id, ClaimMatch("b", j.claim))) for d, j in got],
            [],
        )
    return counts, seconds


def bench(kind: str, args) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp, eight_shards(kind, Path(tmp)) as found:
        store, calls = open_store(found)
        try:
            store.placement.configure({"qpart": 1, "qfifo": 1})
            store.fifo.configure({"qfifo": 1})
            queues = dict(zip(MODES, ("qdefault", "qpart", "qfifo"), strict=True))
            for queue in queues.values():
                store.create_queue(queue)
            PlacementCheck(store).run_once()
            return {
                mode: (statistics.fmean(c), statistics.median(s) * 1e6)
                for mode, (c, s) in ((m, run(store, calls, q, args)) for m, q in queues.items())
            }
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "redis", "mysql"])
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    print(f"8 shards, 3 priorities, backlog {args.backlog}; per one-job dequeue RPC:")
    print(f"{'backend':8} {'queue':14} {'calls':>8} {'median us':>10}")
    for kind in args.backend or ["sqlite", "redis", "mysql"]:
        for mode, (calls, micros) in bench(kind, args).items():
            print(f"{kind:8} {mode:14} {calls:8.2f} {micros:10.0f}")


if __name__ == "__main__":
    main()
