"""The example job (example_job.resize) run by the Worker class, as an application would.

    python -m worker_sdk.examples.example_worker [--servers 127.0.0.1:9010] [--queue example]

Creates the queue if needed, then works until Ctrl-C / SIGTERM (graceful: running jobs finish
and are acked). The same thing with the CLI is
`pinlater-worker --queue example --handler worker_sdk.examples.example_job:resize`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from worker_sdk import ExponentialRetry, PinLaterClient, Worker
from worker_sdk.examples.example_job import resize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="127.0.0.1:9010")
    parser.add_argument("--queue", default="example")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    client = PinLaterClient(args.servers, service="pinlaterexampleworker")
    client.create_queue(args.queue)  # idempotent
    worker = Worker(
        client,
        args.queue,
        resize,
        concurrency=args.concurrency,
        retry=ExponentialRetry(base=1, max=60),
        heartbeat=10,
    )
    clean = worker.run()
    print(f"processed: {worker.stats()}", file=sys.stderr)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
