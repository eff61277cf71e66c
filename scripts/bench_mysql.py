"""End-to-end rates of PinLater on ONE durable MariaDB shard, through the Thrift server.

    PYTHONPATH=. python scripts/bench_mysql.py [--jobs 200000] [--concurrency 4] [--body 100]

Starts a throwaway mariadbd (innodb_flush_log_at_trx_commit=1, never the system server) and a
`pinlater-server` subprocess on it, then runs the CLI load modes as a client would:

    pinlater enqueue --num_queries N --batch_size 100 --concurrency 4
    pinlater dequeue --num_queries N --batch_size 100 --concurrency 4   (dequeue, then ack)

and prints jobs/s with p50/p99 request latency for each (the dequeue numbers count jobs
dequeued AND acked; its latency covers the dequeue call plus the ack call). Then the same
batches against the shard primitives directly (no Thrift, no server), for comparison, and the
statements each shard primitive sends (the server's `Questions` counter: every statement is one
round trip, BEGIN and COMMIT included), which, unlike the rates, does not vary from run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backends.mysql import MySQLBackend  # noqa: E402
from pinlater.storage.claims import new_claim  # noqa: E402
from pinlater.storage.contract import StorageLimits  # noqa: E402
from pinlater.storage.models import Ack, ClaimMatch, NewJob  # noqa: E402
from tests.support.mysql_env import MariaDBServer  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402

BATCH = 100


def cli(port: int, *args: str) -> dict | None:
    """Run the pinlater CLI; return its final JSON report (load modes) or None."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pinlater.cli", "--port", str(port), "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pinlater {' '.join(args)} failed: {done.stderr or done.stdout}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def show(label: str, report: dict) -> None:
    print(
        f"{label:<28} {report['jobs_per_s']:>10,.0f} jobs/s   p50 {report['p50_ms']:7.2f} ms"
        f"   p99 {report['p99_ms']:7.2f} ms   ({report['jobs']} jobs, "
        f"{report.get('errors', 0)} errors)",
        flush=True,
    )


def through_server(
    db: MariaDBServer, tmp: Path, jobs: int, concurrency: int, body_size: int
) -> None:
    config = {
        "backend": {"kind": "mysql", "shards": [db.shard("1", pool_size=2 * concurrency + 4)]},
        "janitor": {"enabled": False},
    }
    queries = jobs // BATCH
    with ServerProcess(config, tmp, name="bench-server", start_timeout=60) as server:
        cli(server.port, "create", "--queue", "bench")
        load = (
            "--num_queries",
            str(queries),
            "--batch_size",
            str(BATCH),
            "--concurrency",
            str(concurrency),
        )
        show(
            "server enqueue",
            cli(server.port, "enqueue", "--queue", "bench", "--body", "x" * body_size, *load),
        )
        show("server dequeue+ack", cli(server.port, "dequeue", "--queue", "bench", *load))


def shard_direct(db: MariaDBServer, jobs: int, threads: int, body_size: int) -> None:
    backend = MySQLBackend({}, StorageLimits())
    spec = MySQLBackend.parse_shards([db.shard("1", pool_size=threads + 2)], {}, "b")[0]
    shard = backend.open_shard(spec)
    shard.create_queue("direct")
    per_thread = jobs // threads // BATCH
    body = b"x" * body_size
    lat: dict[str, list[float]] = {"enqueue": [], "dequeue+ack": []}

    def timed(kind, action):
        started = time.perf_counter()
        result = action()
        lat[kind].append(time.perf_counter() - started)
        return result

    def enqueue(_):
        for _ in range(per_thread):
            timed("enqueue", lambda: shard.enqueue("direct", [NewJob(body=body)] * BATCH))

    def drain(i):
        source = f"bench-{i}"
        for _ in range(per_thread):

            def step():
                got = shard.dequeue("direct", 1, BATCH, new_claim(source))
                shard.ack(
                    "direct", [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got], []
                )

            timed("dequeue+ack", step)

    for kind, work in (("enqueue", enqueue), ("dequeue+ack", drain)):
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        started = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - started
        values = sorted(lat[kind])
        show(
            f"shard {kind} ({threads} thr)",
            {
                "jobs_per_s": per_thread * threads * BATCH / elapsed,
                "jobs": per_thread * threads * BATCH,
                "p50_ms": values[len(values) // 2] * 1000,
                "p99_ms": values[min(len(values) - 1, int(len(values) * 0.99))] * 1000,
            },
        )
    shard.delete_queue("direct")
    shard.close()
    backend.close()


def round_trips(db: MariaDBServer, calls: int = 20) -> None:
    """Statements (= round trips) per call of the shard primitives, one thread, warm pool."""
    backend = MySQLBackend({}, StorageLimits())
    spec = MySQLBackend.parse_shards([db.shard("1", pool_size=2)], {}, "b")[0]
    shard = backend.open_shard(spec)
    shard.create_queue("trips")
    source = "bench-trips"
    jobs = [NewJob(body=b"x" * 100)] * BATCH
    two_priorities = [NewJob(body=b"x", priority=1 + i % 2) for i in range(BATCH)]

    def claimed() -> list[Ack]:
        got = shard.dequeue("trips", 1, BATCH, new_claim(source))
        return [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got]

    def ready() -> None:  # a full batch to dequeue (enqueued before the counting starts)
        shard.enqueue("trips", jobs)

    # label -> (unmeasured preparation, measured step taking what the preparation returned)
    steps = {
        "enqueue 100 (1 priority)": (lambda: None, lambda _: shard.enqueue("trips", jobs)),
        "enqueue 100 (2 priorities)": (
            lambda: None,
            lambda _: shard.enqueue("trips", two_priorities),
        ),
        "dequeue 100": (ready, lambda _: claimed()),
        "dequeue 100 dry run": (ready, lambda _: shard.dequeue("trips", 1, BATCH, None)),
        "ack 100 success": (lambda: ready() or claimed(), lambda a: shard.ack("trips", a, [])),
        "ack 100 failure": (lambda: ready() or claimed(), lambda a: shard.ack("trips", [], a)),
    }
    with contextlib.closing(db.connect()) as conn, conn.cursor() as cur:

        def questions() -> int:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
            return int(cur.fetchone()[1])

        overhead = -questions() + questions()  # what one reading of the counter adds
        ready()  # warm: pooled connection, server capabilities
        for label, (prepare, step) in steps.items():
            total = 0
            for _ in range(calls):
                prepared = prepare()
                before = questions()
                step(prepared)
                total += questions() - before - overhead
            print(f"round trips: {label:<28} {total / calls:5.2f} statements", flush=True)
    shard.delete_queue("trips")
    shard.close()
    backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--body", type=int, default=100, help="body size in bytes")
    parser.add_argument(
        "--buffer-pool",
        default="512M",
        help="innodb_buffer_pool_size of the throwaway server (512M)",
    )
    parser.add_argument("--skip-direct", action="store_true")
    parser.add_argument(
        "--round-trips-only", action="store_true", help="only count statements per primitive"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mysql-") as tmp:
        db = MariaDBServer(
            Path(tmp) / "mariadb",
            flush_log_at_trx_commit=1,
            extra=[f"--innodb-buffer-pool-size={args.buffer_pool}"],
        )
        try:
            db.start()
            print(
                f"MariaDB {db.query('SELECT VERSION()')[0][0]}, innodb_flush_log_at_trx_commit="
                f"{db.query('SELECT @@innodb_flush_log_at_trx_commit')[0][0]}, "
                f"{args.jobs} jobs, batch {BATCH}, concurrency {args.concurrency}, "
                f"body {args.body} B, buffer pool {args.buffer_pool}",
                flush=True,
            )
            if not args.round_trips_only:
                through_server(db, Path(tmp), args.jobs, args.concurrency, args.body)
            if not (args.skip_direct or args.round_trips_only):
                shard_direct(db, args.jobs, args.concurrency, args.body)
            round_trips(db)
        finally:
            db.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
