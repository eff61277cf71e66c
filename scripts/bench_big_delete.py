#!/usr/bin/env python3
"""What deleting a big queue costs the other queues of its shard (issue 12, item 10), and what
delete/create churn of one queue does to the others (item 4), on a real server per backend.

Big delete: fills a queue with --jobs jobs (batches of 10,000), then deletes it while one
client enqueues one job at a time into another queue of the same shard; prints the delete's
duration and that client's latencies before (quiet) and during the delete.

Churn (--churn SECONDS): one thread deletes and re-creates a queue in a loop while 4 clients
work on it and 4 on another queue; prints the answers each queue got and whether a shard was
marked unhealthy.

    python scripts/bench_big_delete.py --backend sqlite --jobs 800000
    python scripts/bench_big_delete.py --backend mysql --jobs 200000
    python scripts/bench_big_delete.py --backend redis --churn 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import ddl_load  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "redis", "mysql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs in the deleted queue")
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--churn", type=float, default=0.0, help="run the churn for N seconds")
    parser.add_argument("--keep-logs", action="store_true", help="keep the server's tmp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-big-delete-") as scratch:
        tmp = Path(tempfile.mkdtemp(prefix="bench-big-delete-kept-") if args.keep_logs else scratch)
        if args.keep_logs:
            print(f"server log and data in {tmp}", file=sys.stderr)
        with (
            ddl_load.one_shard(args.backend, tmp) as backend,
            ServerProcess(ddl_load.ddl_config(backend), tmp) as server,
        ):
            report: dict = {"backend": args.backend}
            if args.churn:
                got = ddl_load.churn(server, "churned", "steady", seconds=args.churn)
                report["churn"] = {
                    "seconds": args.churn,
                    "cycles": got.cycles,
                    "churned_queue": dict(got.churned),
                    "other_queue": dict(got.other),
                    "ddl": dict(got.ddl),
                    "slowest_call_s": round(got.slowest_call, 3),
                    "ddl_max_s": round(max(got.ddl_seconds, default=0), 3),
                    "ddl_mean_s": round(sum(got.ddl_seconds) / max(len(got.ddl_seconds), 1), 3),
                    "messages": got.messages,
                    "unhealthy_log_lines": ddl_load.unhealthy_lines(server)[:5],
                }
            else:
                got = ddl_load.big_delete(
                    server, "big", "other", args.jobs, body_size=args.body_size
                )
                report["big_delete"] = {**got.figures(), "other_errors": dict(got.other_errors)}
            print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
