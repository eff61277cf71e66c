"""A minimal worker process for the fault scenarios, built on PinLaterClient only.

    python -m tests.faults.fault_worker --server 127.0.0.1:PORT --queue q --source w1 \
        --history w1.jsonl [--work-seconds 0.02] [--limit 5] [--max-seconds 30] \
        [--gate FILE] [--stop-file FILE]

Loop: dequeue up to `limit` jobs, record each delivery (descriptor, claim), "work" for
`work-seconds`, record `worked`, then ack success with the claim and record the ack's outcome.
With `--gate FILE` the worker waits (bounded) after working until FILE exists before acking:
that is how a test kills the server "between a worker finishing and its ack". It stops when
`--stop-file` exists or after `--max-seconds`, whatever happens in between (every loop is
bounded). Its own framework-free code, so the scenarios do not depend on worker_sdk.worker.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tests.faults.ledger import History, job_id
from worker_sdk import PinLaterClient
from worker_sdk.errors import PinLaterError, PinLaterTransportError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, action="append")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--work-seconds", type=float, default=0.02)
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--gate")
    parser.add_argument("--stop-file")
    return parser.parse_args(argv)


def outcome_of(exc: Exception) -> str:
    if isinstance(exc, PinLaterTransportError):
        return "unknown" if exc.maybe_applied else "fail"
    return "fail"


def wait_for(path: str, deadline: float) -> None:
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def run(args: argparse.Namespace) -> int:
    history = History(args.history, process=args.source)
    client = PinLaterClient(
        args.server, source=args.source, connect_timeout=0.5, timeout=3.0, retries=1, backoff=0.05
    )
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        record = history.invoke("dequeue")
        try:
            jobs = client.dequeue(args.queue, args.limit)
        except PinLaterError as exc:
            history.complete(record, outcome_of(exc), error=str(exc)[:200])
            time.sleep(0.1)
            continue
        history.deliveries(record, jobs)
        if not jobs:
            time.sleep(0.05)
            continue
        time.sleep(args.work_seconds)
        for job in jobs:
            history.add(
                {
                    "op": "worked",
                    "process": args.source,
                    "invoke": time.time(),
                    "complete": time.time(),
                    "outcome": "ok",
                    "job": job_id(job.body),
                    "descriptor": job.descriptor,
                    "claim": job.claim,
                }
            )
        if args.gate:
            wait_for(args.gate, deadline)
        ack(client, history, args, jobs)
    client.close()
    history.close()
    return 0


def ack(client: PinLaterClient, history: History, args, jobs) -> None:
    records = [
        history.invoke(
            "ack", job=job_id(j.body), descriptor=j.descriptor, claim=j.claim, result="success"
        )
        for j in jobs
    ]
    for j in jobs:  # written before sending: a kill -9 may land before the outcome is recorded
        now = time.time()
        history.add(
            {
                "op": "ack_sending",
                "process": args.source,
                "invoke": now,
                "complete": now,
                "outcome": "unknown",
                "job": job_id(j.body),
                "descriptor": j.descriptor,
                "claim": j.claim,
            }
        )
    try:
        client.ack(args.queue, succeeded=jobs)
        outcome, error = "ok", None
    except PinLaterError as exc:
        outcome, error = outcome_of(exc), str(exc)[:200]
    for record in records:
        history.complete(record, outcome, **({"error": error} if error else {}))


if __name__ == "__main__":
    sys.exit(run(parse_args(sys.argv[1:])))
