#!/usr/bin/env python3
"""The cost of the ledger: enqueue (batch 100) and dequeue+ack throughput of this tree against
the tree just before the ledger, side by side in one run, per backend.

The ledger has no switch (the books are only worth something when every write keeps them), so
the baseline is the code without it: a detached `git worktree` of the parent of the commit
that added pinlater/storage/ledger.py (or `--baseline-dir`, any checkout). For each backend
and round, `scripts/bench_server.py` runs once in each tree (fresh storage and server each
time; the order alternates between rounds, so a busier moment of the shared machine hits both
alike), and this prints the median jobs/s of each and ledger/baseline.

    python scripts/bench_ledger.py                          # sqlite, redis, mysql; 3 rounds
    python scripts/bench_ledger.py --backend mysql --rounds 5 --jobs 50000
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
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
def baseline_tree(directory: str | None):
    if directory:
        yield Path(directory)
        return
    with tempfile.TemporaryDirectory(prefix="pinlater-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run(
            [*git, "worktree", "add", "--detach", str(tree), baseline_commit()],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "redis", "mysql"], action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--baseline-dir", help="a checkout without the ledger")
    args = parser.parse_args()
    backends = args.backend or ["sqlite", "redis", "mysql"]
    print(
        f"batch {args.batch}, concurrency {args.concurrency}, {args.jobs} jobs per mode, "
        f"{args.rounds} rounds; dequeue = dequeue + ack"
    )
    with baseline_tree(args.baseline_dir) as base:
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
