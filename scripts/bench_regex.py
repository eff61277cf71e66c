"""Body-regex figures of hostile load items 6 and 7, against a real server over a socket.

    .venv/bin/python scripts/bench_regex.py [--backend sqlite|redis|mysql] [--slow-threads N]

Storage as the tests use it (tests/support/storage.py: SQLite one shard, Redis two, MariaDB
three). Item 6: one getJobCount with `(.*a){5}x` over 1,000 bodies of 125 `a` (each ~20 ms of
CPU, under the 50 ms per-body budget): how long the request holds its worker, and what it
answers.
Item 7: 16 threads, each sending getJobCount with the trivial `zzz` over 1,000 bodies of 1 KiB
while 2 more threads (--slow-threads) run `(.*a){5}x` requests: the share of trivial requests
that fail, and how many were served.
Prints the figures; asserts nothing (the tests in tests/integration/test_hostile_regex.py do).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section

CTX = RequestContext(source="bench-regex")
SLOW = "(.*a){5}x"
#: ~20 ms of CPU per body for SLOW: well under the 50 ms per-body budget even on a busy machine
SLOW_BODY_BYTES = 125
TRIVIAL_THREADS = 16
TRIVIAL_BODIES = 1000


def fill(client, queue: str, body: bytes, count: int) -> None:
    client.createQueue(CTX, queue)
    for start in range(0, count, 500):
        jobs = [t.PinLaterJob(body=body) for _ in range(min(500, count - start))]
        client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))


def count(client, queue: str, pattern: str) -> int:
    request = t.PinLaterGetJobCountRequest(queueName=queue, jobState=0, bodyRegexToMatch=pattern)
    return client.getJobCount(CTX, request)


def item6(server: ServerProcess) -> None:
    client = server.client(timeout=120)
    fill(client, "slow", b"a" * SLOW_BODY_BYTES, 1000)
    started = time.monotonic()
    try:
        outcome = f"answered {count(client, 'slow', SLOW)}"
    except PinLaterException as exc:
        outcome = f"error: {exc.message}"
    took = time.monotonic() - started
    print(f"item 6: getJobCount {SLOW!r} over 1,000 x {SLOW_BODY_BYTES} B: {took:.2f} s")
    print(f"        {outcome}")


def item7(server: ServerProcess, seconds: float, slow_threads: int) -> None:
    setup = server.client()
    fill(setup, "trivial", bytes(range(97, 122)) * 41, TRIVIAL_BODIES)  # 1,025 bytes, no "zzz"
    deadline = time.monotonic() + seconds
    tally = {"ok": 0, "failed": 0, "slow ok": 0, "slow failed": 0}
    lock = threading.Lock()

    def run(queue: str, pattern: str, prefix: str) -> None:
        client = server.client(timeout=60)
        while time.monotonic() < deadline:
            try:
                count(client, queue, pattern)
                key = f"{prefix}ok"
            except PinLaterException:
                key = f"{prefix}failed"
            with lock:
                tally[key] += 1

    threads = [
        threading.Thread(target=run, args=("trivial", "zzz", "")) for _ in range(TRIVIAL_THREADS)
    ]
    threads += [
        threading.Thread(target=run, args=("slow", SLOW, "slow ")) for _ in range(slow_threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = tally["ok"] + tally["failed"]
    print(
        f"item 7: {TRIVIAL_THREADS} threads x 'zzz' over {TRIVIAL_BODIES} x 1 KiB (+{slow_threads}"
        " threads of"
        f" {SLOW!r}) for {seconds:.0f}"
        f" s: {tally['failed']} of {total} trivial requests failed"
        f" ({100 * tally['failed'] / max(total, 1):.1f}%); slow requests: {tally['slow ok']} ok,"
        f" {tally['slow failed']} refused"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=KINDS, default="sqlite")
    parser.add_argument("--seconds", type=float, default=20.0, help="item 7 duration")
    parser.add_argument(
        "--slow-threads", type=int, default=2, help="item 7: clients sending the slow pattern"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, backend_section(args.backend, Path(tmp)) as shards:
        config = {"janitor": {"enabled": False}, "backend": shards}
        with ServerProcess(config, Path(tmp)) as server:
            item6(server)
            item7(server, args.seconds, args.slow_threads)


if __name__ == "__main__":
    main()
