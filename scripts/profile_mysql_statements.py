#!/usr/bin/env python3
"""MariaDB's own cost of the MySQL shard's dequeue(100)+ack(100) cycle, per statement.

    PYTHONPATH=. python scripts/profile_mysql_statements.py [--jobs 20000] [--threads 4]
        [--rounds 3] [--trees . /path/to/other/checkout]

Starts one throwaway mariadbd (innodb_flush_log_at_trx_commit=1, performance_schema ON) and,
round after round, for each source tree given (interleaved, so the shared machine's noise
hits them alike), a child process that runs that tree's MySQL shard: it fills a fresh queue
with `--jobs` jobs, then on a signal drains it with `--threads` threads, each looping
`dequeue(100)` then `ack` of what it got. Around each drain this process reads

* mariadbd's CPU from /proc/<pid>/stat (every thread: statements, purge, log writes), given
  as microseconds per job: the figure to compare (wall rates vary 2-5x on a shared machine);
* performance_schema's events_statements_summary_by_digest (truncated before the drain):
  per statement shape, calls and time per 100 jobs, rows examined / sent / affected per
  call, lock time, and whether it used no index.

Each tree's drain runs its own `backends.mysql` (the child's PYTHONPATH is the tree), so a
checkout of main next to the working tree measures a change before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BATCH = 100
#: performance_schema timers are picoseconds
_PS = 1e-12
_DIGESTS = """
SELECT DIGEST_TEXT, COUNT_STAR, SUM_TIMER_WAIT, SUM_LOCK_TIME, SUM_ROWS_EXAMINED,
       SUM_ROWS_SENT, SUM_ROWS_AFFECTED, SUM_NO_INDEX_USED, SUM_SORT_ROWS,
       SUM_CREATED_TMP_TABLES
FROM performance_schema.events_statements_summary_by_digest
WHERE SCHEMA_NAME IS NULL OR SCHEMA_NAME NOT IN ('performance_schema')
ORDER BY SUM_TIMER_WAIT DESC
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the child (one tree)


def child(port: int, queue: str, jobs: int, threads: int) -> None:
    """Fill `queue`, say "ready", wait for a line on stdin, drain it, print a JSON report.
    Imports the shard from the child's PYTHONPATH (the tree being measured)."""
    from backends.mysql import MySQLBackend
    from pinlater.storage.claims import new_claim
    from pinlater.storage.contract import StorageLimits
    from pinlater.storage.models import Ack, ClaimMatch, NewJob

    backend = MySQLBackend({}, StorageLimits())
    spec = MySQLBackend.parse_shards(
        [{"name": "prof", "port": port, "pool_size": threads + 2}], {}, "shards"
    )[0]
    shard = backend.open_shard(spec)
    shard.create_queue(queue)
    body = b"x" * 100
    for _ in range(jobs // 1000):
        shard.enqueue(queue, [NewJob(body=body)] * 1000)
    print("ready", flush=True)
    sys.stdin.readline()
    done = [0] * threads

    def drain(i: int) -> None:
        source = f"prof-{i}"
        while True:
            claim = new_claim(source)
            got = shard.dequeue(queue, 1, BATCH, claim)
            if not got:
                return
            acks = [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got]
            done[i] += shard.ack(queue, acks, [])

    started = time.perf_counter()
    workers = [threading.Thread(target=drain, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    usage = os.times()
    ledger_ok = None  # a tree from before the ledger (e.g. the code issue 18 measured)
    if hasattr(shard, "ledger"):
        book = shard.ledger(queue)
        counted = book.counters["succeeded"] == sum(done) == book.counters["dequeued"]
        ledger_ok = book.balanced and counted
    report = {"acked": sum(done), "seconds": elapsed, "client_cpu": usage.user + usage.system}
    print(json.dumps({**report, "ledger_ok": ledger_ok}), flush=True)
    shard.close()
    backend.close()


# ------------------------------------------------------------------ the parent


def run_tree(db, tree: Path, queue: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(db.port), queue]
    cmd += ["--jobs", str(args.jobs), "--threads", str(args.threads)]
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"child for {tree} failed to fill {queue}")
        time.sleep(1.0)  # let the fill's background work (purge, flushing) settle
        db.query("TRUNCATE TABLE performance_schema.events_statements_summary_by_digest")
        before = cpu_seconds(db.proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        report = json.loads(proc.stdout.readline())
        report["db_cpu"] = cpu_seconds(db.proc.pid) - before
        report["digests"] = db.query(_DIGESTS)
    finally:
        proc.wait(120)
    return report


def print_report(tree: str, report: dict) -> None:
    acked = max(report["acked"], 1)
    cycles = acked / BATCH
    print(
        f"  {tree}: {acked} jobs in {report['seconds']:.2f} s ({acked / report['seconds']:,.0f}"
        f" jobs/s); mariadbd CPU {report['db_cpu'] * 1e6 / acked:.1f} us/job; client CPU "
        f"{report['client_cpu'] * 1e6 / acked:.1f} us/job; ledger ok {report['ledger_ok']}"
    )
    print(
        f"    {'calls/100':>9} {'us/100':>8} {'us/call':>8} {'lock us':>8} {'exam/c':>7}"
        f" {'sent/c':>7} {'aff/c':>7} noidx  statement"
    )
    for text, count, wait, lock, examined, sent, affected, noidx, _sort, _tmp in report["digests"]:
        if not count:
            continue
        print(
            f"    {count / cycles:9.2f} {wait * _PS * 1e6 / cycles:8.1f}"
            f" {wait * _PS * 1e6 / count:8.1f} {lock * _PS * 1e6 / count:8.1f}"
            f" {examined / count:7.1f} {sent / count:7.1f} {affected / count:7.1f}"
            f" {noidx:5}  {' '.join((text or '').split())[:110]}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("PORT", "QUEUE"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)])
    parser.add_argument("--quiet", action="store_true", help="per-statement table only at the end")
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], args.jobs, args.threads)
        return 0
    sys.path.insert(0, str(ROOT))  # the parent's own tree (a child imports its PYTHONPATH's)
    from tests.support.mysql_env import running_server

    trees = [Path(t).resolve() for t in args.trees]
    per_job: dict[str, list[float]] = {str(t): [] for t in trees}
    with tempfile.TemporaryDirectory(prefix="pinlater-prof-") as tmp:
        extra = ["--performance-schema=ON", "--innodb-buffer-pool-size=512M"]
        with running_server(Path(tmp) / "db", flush_log_at_trx_commit=1, extra=extra) as db:
            for round_no in range(args.rounds):
                order = trees if round_no % 2 == 0 else list(reversed(trees))
                print(f"round {round_no + 1}", flush=True)
                for tree in order:
                    report = run_tree(db, tree, f"q{round_no}t{trees.index(tree)}", args)
                    per_job[str(tree)].append(report["db_cpu"] * 1e6 / max(report["acked"], 1))
                    last = round_no == args.rounds - 1
                    if not args.quiet or last:
                        print_report(str(tree), report)
    print("\nmariadbd CPU us/job by tree, median [min..max] over rounds:")
    for tree, values in per_job.items():
        print(f"  {statistics.median(values):6.1f} [{min(values):.1f}..{max(values):.1f}]  {tree}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
