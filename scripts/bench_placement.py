#!/usr/bin/env python3
"""What `partitions: 1` saves: storage calls and time per dequeue, 8 shards, a 1-partition
queue next to a queue on every shard (the default), per backend, side by side in one run.

For each backend: 8 shards on throwaway storage (tests/support/many_shards.py), the sharded
store in this process with every storage call attempt counted. Per queue and round: `--jobs`
jobs enqueued in batches of 10, then dequeues of `--limit` (each acking the previous one's
jobs, piggy-backed, as a worker does) until the queue is empty, then `--empty` dequeues of the
empty queue (the idle worker's poll, where the default visits every shard at every priority).
Prints storage calls per dequeue and median microseconds per dequeue, busy and idle, and the
ratios default / partitioned.

    python scripts/bench_placement.py                      # sqlite, redis, mysql
    python scripts/bench_placement.py --backend redis --rounds 5
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

MODES = {"default": None, "partitions=1": 1}


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


def one_round(store, calls, queue: str, args) -> dict[str, list[float]]:
    """Calls and seconds of each busy and idle dequeue of one round."""
    for _ in range(args.jobs // 10):
        store.enqueue(queue, [NewJob(b"x" * 64) for _ in range(10)])
    out: dict[str, list[float]] = {"busy_calls": [], "busy_s": [], "idle_calls": [], "idle_s": []}
    acks = None
    while True:
        before, started = calls["all"], time.perf_counter()
        got = store.dequeue(queue, args.limit, "bench", acks=acks)
        if not got:
            break
        out["busy_s"].append(time.perf_counter() - started)
        out["busy_calls"].append(calls["all"] - before)
        acks = (
            [(d.shard, Ack(d.priority, d.local_id, ClaimMatch("b", j.claim))) for d, j in got],
            [],
        )
    if acks:
        store.ack(queue, *acks)
    for _ in range(args.empty):
        before, started = calls["all"], time.perf_counter()
        assert store.dequeue(queue, args.limit, "bench") == []
        out["idle_s"].append(time.perf_counter() - started)
        out["idle_calls"].append(calls["all"] - before)
    return out


def bench(kind: str, args) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp, eight_shards(kind, Path(tmp)) as found:
        store, calls = open_store(found)
        try:
            store.placement.configure({"qpart": 1})
            for queue in ("qdefault", "qpart"):
                store.create_queue(queue)
            PlacementCheck(store).run_once()
            samples: dict[str, dict[str, list[float]]] = {
                m: collections.defaultdict(list) for m in MODES
            }
            for _ in range(args.rounds):  # modes interleaved: a busy moment hits both
                for mode, queue in zip(MODES, ("qdefault", "qpart"), strict=True):
                    for key, values in one_round(store, calls, queue, args).items():
                        samples[mode][key] += values
        finally:
            store.close()
    return {
        mode: {
            "busy_calls": statistics.fmean(s["busy_calls"]),
            "busy_us": statistics.median(s["busy_s"]) * 1e6,
            "idle_calls": statistics.fmean(s["idle_calls"]),
            "idle_us": statistics.median(s["idle_s"]) * 1e6,
        }
        for mode, s in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "redis", "mysql"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--empty", type=int, default=50)
    args = parser.parse_args()
    print("8 shards, 3 priorities; storage calls and median us per dequeue RPC")
    heads = ("busy calls", "busy us", "idle calls", "idle us")
    print(f"{'backend':8} {'queue':14} " + " ".join(f"{h:>10}" for h in heads))
    for kind in args.backend or ["sqlite", "redis", "mysql"]:
        result = bench(kind, args)
        for mode, r in result.items():
            print(
                f"{kind:8} {mode:14} {r['busy_calls']:10.2f} {r['busy_us']:10.0f} "
                f"{r['idle_calls']:10.2f} {r['idle_us']:10.0f}"
            )
        d, p = result["default"], result["partitions=1"]
        print(
            f"{kind:8} {'default/part.':14} {d['busy_calls'] / p['busy_calls']:10.2f} "
            f"{d['busy_us'] / p['busy_us']:10.2f} {d['idle_calls'] / p['idle_calls']:10.2f} "
            f"{d['idle_us'] / p['idle_us']:10.2f}"
        )


if __name__ == "__main__":
    main()
