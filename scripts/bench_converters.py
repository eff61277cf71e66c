#!/usr/bin/env python3
"""Micro-benchmark of the per-item conversions that run for every job of a request.

Each fast path is timed against the plain way it stands in for, on realistic inputs: a 100-job
enqueue batch, a 100-ack request of one dequeue's jobs, 100 descriptors, a 100-job dequeue
response. Best of several repeats, microseconds per 100 items.

The rule (issue 11): one converter per input type. A second, fast converter for the same input
(the handler's `_plain_new_job` and `_PlainAcks`, each beside the checked path that names the
wrong field) stays only while it saves at least 3% of the CPU its process spends on that
request in `scripts/bench_server.py` (sqlite: about 1.3 ms of server CPU per 100 jobs
enqueued, 2.6 ms per 100 dequeued and acked); its docstring gives the figure. A hand-written
`__init__` on a frozen dataclass is no twin (there is one constructor); the rows for those
compare with the dataclass-generated `__init__` of the same fields.

    python scripts/bench_converters.py
    python scripts/bench_converters.py --repeat 9 --number 2000
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.app import App, load_config  # noqa: E402
from pinlater.handler.handler import _PlainAcks  # noqa: E402
from pinlater.idl import pinlater_thrift as wire  # noqa: E402
from pinlater.storage.descriptors import JobDescriptor, split_local_id, split_prefix  # noqa: E402
from worker_sdk import models  # noqa: E402

N = 100
QUEUE, SOURCE, CLAIM = "bench", "worker:host1", "0123456789abcdef01234567:worker:host1"


def generated_init(cls: type) -> type:
    """A frozen slots dataclass with the fields of `cls` and the generated `__init__`."""
    fields = [(f.name, f.type) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True)


def pairs(handler) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """name -> (fast path, plain path), each converting N items of one request."""
    jobs = [wire.PinLaterJob(body=b"x" * 100) for _ in range(N)]
    texts = [f"{QUEUE}:s1:p1:{1000 + i}" for i in range(N)]
    infos = [wire.PinLaterJobAckInfo(jobDescriptor=t, claimDescriptor=CLAIM) for t in texts]
    parts = [(QUEUE, "1", 1, 1000 + i) for i in range(N)]
    rows = [(t, b"x" * 100, 2, 2, CLAIM) for t in texts]
    dequeued = [models.DequeuedJob(*row) for row in rows]
    plain_descriptor = generated_init(JobDescriptor)
    plain_dequeued_job = generated_init(models.DequeuedJob)

    def enqueue_fast():
        return [
            handler._plain_new_job(j) or handler._new_job(j, f"jobs[{i}]")
            for i, j in enumerate(jobs)
        ]

    def enqueue_checked():
        return [handler._new_job(j, f"jobs[{i}]") for i, j in enumerate(jobs)]

    def acks_fast():
        plain = _PlainAcks(QUEUE, SOURCE, handler.levels)
        return [plain.convert(info) for info in infos]

    def acks_checked():
        return [
            handler._checked_ack(QUEUE, info, SOURCE, f"request.jobsSucceeded[{i}]")
            for i, info in enumerate(infos)
        ]

    def parse_split():
        """As `_PlainAcks` does: the local id per text, each distinct prefix once."""
        prefixes: dict[str, object] = {}
        out = []
        for text in texts:
            prefix, local_id = split_local_id(text)
            where = prefixes.get(prefix)
            if where is None:
                where = prefixes[prefix] = split_prefix(prefix)
            out.append((where, local_id))
        return out

    return {
        "enqueue: 100 jobs -> NewJob": (enqueue_fast, enqueue_checked),
        "acks: 100 acks -> (shard, Ack)": (acks_fast, acks_checked),
        "parse: 100 descriptors of one dequeue": (
            parse_split,
            lambda: [JobDescriptor.parse(text) for text in texts],
        ),
        "JobDescriptor(): 100": (
            lambda: [JobDescriptor(*p) for p in parts],
            lambda: [plain_descriptor(*p) for p in parts],
        ),
        "sdk DequeuedJob(): 100": (
            lambda: [models.DequeuedJob(*row) for row in rows],
            lambda: [plain_dequeued_job(*row) for row in rows],
        ),
        "sdk ack struct: 100 DequeuedJob": (
            lambda: [models.ack_to_wire(j) for j in dequeued],
            lambda: [models.AckInfo(j.descriptor, claim=j.claim).to_wire() for j in dequeued],
        ),
    }


def best_us(fn: Callable[[], object], repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pinlater-bench-") as tmp:
        config = load_config(
            env={},
            overrides={"backend": {"kind": "sqlite", "data_dir": tmp, "shards": [{"name": "1"}]}},
        )
        app = App(config)
        try:
            print(f"{'conversion':42s} {'fast us':>9s} {'plain us':>9s} {'saved us':>9s}")
            for name, (fast, plain) in pairs(app.handler).items():
                fast_us = best_us(fast, args.repeat, args.number)
                plain_us = best_us(plain, args.repeat, args.number)
                print(
                    f"{name:42s} {fast_us:9.1f} {plain_us:9.1f} {plain_us - fast_us:9.1f}"
                    f"  ({plain_us / fast_us:.2f}x)"
                )
        finally:
            app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
