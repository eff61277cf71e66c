#!/usr/bin/env python3
"""The cost of the ledger: enqueue (batch 100) and dequeue+ack throughput of this tree against
the tree just before the ledger, side by side in one run, per backend.

The ledger has no switch (the books are only worth something when every write keeps them), so
the baseline is the code without it: a detached `git worktree` of the parent of the commit
that added pinlater/storage/ledger.py (or `--baseline-dir`, any checkout). For each backend
and round, `scripts/bench_server.py` runs once in each tree (fresh storage and server each
time; the order alternates between rounds, so a busier moment of the shared machine hits both
alike), and this prints the median jobs/s of each and ledger/baseline.

It also measures the SQLite shard in this process, where the ledger can be switched off for
the benchmark (`SQLShard._book` replaced by a no-op): the CPU time (`time.process_time`, which
other load on a shared machine hardly moves, unlike wall-clock throughput) that enqueue and
dequeue+ack of 10,000 jobs in batches of 100 take, with and without the books.

    python scripts/bench_ledger.py                          # sqlite, redis, mysql; 3 rounds
    python scripts/bench_ledger.py --backend mysql --rounds 5 --jobs 50000
    python scripts/bench_ledger.py --in-process-only
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("enqueue", "dequeue")
_RATE = re.compile(r"^\s*(enqueue|dequeue)\s+jobs_per_s ([0-9.]+)", re.M)


def baseline_commit() -> str:
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "pinlater/storage/ledger.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    if not added:
        raise SystemExit("cannot find the commit that added the ledger; use --baseline-dir")
    return added[-1] + "^"


@contextlib.contextmanager
def baseline_tree(directory: str | None, ref: str | None):
    if directory:
        yield Path(directory)
        return
    with tempfile.TemporaryDirectory(prefix="pinlater-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run(
            [*git, "worktree", "add", "--detach", str(tree), ref or baseline_commit()],
            check=True,
            capture_output=True,
        )
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def bench(tree: Path, backend: str, jobs: int, batch: int, concurrency: int) -> dict[str, float]:
    """One bench_server.py run in `tree`: {mode: jobs/s}."""
    out = subprocess.run(
        [
            sys.executable,
            "scripts/bench_server.py",
            "--backend",
            backend,
            "--jobs",
            str(jobs),
            "--batch",
            str(batch),
            "--concurrency",
            str(concurrency),
        ],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    ).stdout
    return {mode: float(rate) for mode, rate in _RATE.findall(out)}


def shard_cpu(with_ledger: bool) -> tuple[float, float]:
    """CPU jobs/s of a SQLite shard (synchronous=NORMAL: no fsync, so CPU is what is
    measured): enqueue of 100 batches of 100, then 100 dequeues of 100 each acked."""
    sys.path.insert(0, str(ROOT))
    from backends import sql_base
    from backends.sqlite import SQLiteBackend, SQLiteShardSpec
    from pinlater.storage.claims import new_claim
    from pinlater.storage.contract import StorageLimits
    from pinlater.storage.models import Ack, ClaimMatch, NewJob

    book = sql_base.SQLShard._book
    if not with_ledger:
        sql_base.SQLShard._book = lambda self, cur, queue, **changes: None  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory(prefix="pinlater-bench-") as tmp:
            options = {"data_dir": tmp, "synchronous": "NORMAL"}
            backend = SQLiteBackend(SQLiteBackend.parse_options(options, "b"), StorageLimits())
            shard = backend.open_shard(SQLiteShardSpec(name="1"))
            shard.create_queue("q")
            started = time.process_time()
            for _ in range(100):
                shard.enqueue("q", [NewJob(b"x" * 100)] * 100)
            enqueued = time.process_time()
            for _ in range(100):
                claim = new_claim("bench")
                jobs = shard.dequeue("q", 1, 100, claim)
                shard.ack("q", [Ack(1, j.local_id, ClaimMatch("bench", claim)) for j in jobs], [])
            done = time.process_time()
            shard.close()
            backend.close()
    finally:
        sql_base.SQLShard._book = book  # type: ignore[method-assign]
    return 10_000 / (enqueued - started), 10_000 / (done - enqueued)


def in_process(rounds: int) -> None:
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_no in range(rounds):
        for on in (True, False) if round_no % 2 == 0 else (False, True):
            runs[on].append(shard_cpu(on))
    for i, mode in enumerate(MODES):
        on = statistics.median(r[i] for r in runs[True])
        off = statistics.median(r[i] for r in runs[False])
        print(
            f"sqlite shard in process, {mode:8s} CPU jobs/s: ledger {on:8.0f}, "
            f"ledger off {off:8.0f}, ratio {on / off:.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "redis", "mysql"], action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--baseline-dir", help="a checkout without the ledger")
    parser.add_argument(
        "--baseline",
        help="the commit to compare with (default: the parent of the commit that added the "
        "ledger; a later commit without the ledger, e.g. origin/main before it was merged, "
        "leaves out the other changes in between)",
    )
    parser.add_argument("--in-process-only", action="store_true")
    args = parser.parse_args()
    in_process(max(args.rounds * 2, 6))
    if args.in_process_only:
        return 0
    backends = args.backend or ["sqlite", "redis", "mysql"]
    print(
        f"batch {args.batch}, concurrency {args.concurrency}, {args.jobs} jobs per mode, "
        f"{args.rounds} rounds; dequeue = dequeue + ack"
    )
    with baseline_tree(args.baseline_dir, args.baseline) as base:
        trees = {"ledger": ROOT, "baseline": base}
        for backend in backends:
            rates: dict[tuple[str, str], list[float]] = {}
            for round_no in range(args.rounds):
                order = list(trees) if round_no % 2 == 0 else list(reversed(trees))
                for name in order:
                    got = bench(trees[name], backend, args.jobs, args.batch, args.concurrency)
                    for mode, rate in got.items():
                        rates.setdefault((name, mode), []).append(rate)
            for mode in MODES:
                with_ledger = statistics.median(rates[("ledger", mode)])
                without = statistics.median(rates[("baseline", mode)])
                print(
                    f"{backend:7s} {mode:8s} ledger {with_ledger:8.0f} jobs/s, "
                    f"baseline {without:8.0f} jobs/s, ratio {with_ledger / without:.2f} "
                    f"(rounds: {rates[('ledger', mode)]} vs {rates[('baseline', mode)]})"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
