"""`pinlater-worker`: run a handler function on a queue from the command line.

    pinlater-worker --queue emails --handler myapp.jobs:send_email --concurrency 8 \\
        --servers 127.0.0.1:9010,127.0.0.1:9011 --retry exponential:base=1s,max=5m

The handler is `module:function` (the current directory is importable, as with gunicorn).
Logs go to stderr, as text or (`--log-format json`) one JSON object per line: each job outcome
(FailJob / RetryJob at INFO, other exceptions at WARNING, successes at DEBUG) and a summary at
exit; on a terminal a one-line status (jobs/s, successes, failures, in flight) is redrawn every
second. The queue must exist: without `--wait-for-queue` a missing queue is reported at start
(exit 3); with it the worker logs that it waits and starts once the queue is created. SIGTERM /
Ctrl-C stops gracefully (see worker_sdk.worker); a second one exits at once.

Exit codes: 0 stopped cleanly, 1 some jobs were left for the claim timeout (handlers past the
shutdown deadline, or acks that could not be sent), 2 usage error (bad option, handler not
importable), 3 the queue does not exist, 128+N killed by a second signal N.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
import time
from typing import TextIO

from pinlater import __version__
from pinlater.common.logs import FORMATS, configure_logging, parse_level
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import QueueNotFound
from worker_sdk.retry import parse_duration, parse_retry
from worker_sdk.worker import Worker

EXIT_OK, EXIT_ABANDONED, EXIT_USAGE, EXIT_NO_QUEUE = 0, 1, 2, 3
SERVICE = "pinlaterworker"
SERVERS_ENV = "PINLATER_SERVERS"
log = logging.getLogger("worker_sdk.worker_cli")


class UsageError(Exception):
    """Bad command line: reported in one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pinlater-worker", description="Run a PinLater job handler on a queue."
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--queue", "-q", required=True, help="queue to work on")
    p.add_argument("--handler", required=True, help="module:function taking a JobContext")
    p.add_argument("--concurrency", "-c", type=int, default=4, help="handler threads (4)")
    p.add_argument(
        "--max-prefetch",
        type=int,
        default=1000,
        help="jobs claimed ahead of the threads at most, while handlers are fast enough to "
        "start them within --prefetch-wait; 0: never more jobs than threads (1000)",
    )
    p.add_argument(
        "--prefetch-wait",
        type=_duration,
        default=0.05,
        help="how long a prefetched job may wait for a thread, at the handlers' measured "
        "speed (50ms)",
    )
    p.add_argument(
        "--servers",
        default=os.environ.get(SERVERS_ENV) or "127.0.0.1:9010",
        help=f"comma-separated host:port list or a ServerSet file (${SERVERS_ENV}, else "
        "127.0.0.1:9010)",
    )
    p.add_argument(
        "--wait-for-queue",
        action="store_true",
        help="if the queue does not exist yet, wait for it (logged) instead of exiting with 3",
    )
    p.add_argument(
        "--retry",
        default="exponential:base=1s,max=5m",
        help="retry delay after a failure: exponential:base=1s,max=5m[,factor=2]"
        "[,jitter=0.5] | constant:delay=10s | none",
    )
    p.add_argument(
        "--heartbeat",
        type=_duration,
        default=None,
        help="extend running jobs' claims this often (e.g. 60s; default off); keep "
        "it well under the server's claim timeout",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=_duration,
        default=30.0,
        help="on SIGTERM, how long running jobs may take to finish (30s)",
    )
    p.add_argument("--max-batch", type=int, default=1000, help="most jobs per dequeue (1000)")
    p.add_argument(
        "--long-poll",
        type=_duration,
        default=1.0,
        help="how long the server may hold an idle dequeue for a job (1s; 0: poll instead)",
    )
    p.add_argument("--source", help=f"RequestContext source ({SERVICE}:HOSTNAME)")
    p.add_argument("--timeout", type=_duration, default=10.0, help="per-call timeout (10s)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR (INFO)")
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text, or json: one JSON object per line for log shippers (text)",
    )
    p.add_argument(
        "--status",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="redraw a status line every second (default: when stderr is a TTY)",
    )
    return p


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def load_handler(spec: str):
    """Import `module:function` (attribute paths like `module:Class.method` work too)."""
    module_name, colon, attr_path = spec.partition(":")
    if not colon or not module_name or not attr_path:
        raise UsageError(f"--handler must be module:function, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    for name in attr_path.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr_path!r}") from None
    if not callable(target):
        raise UsageError(f"{spec} is not callable")
    return target


class StatusLine:
    """A status line redrawn in place on a terminal; log records print above it."""

    def __init__(self, stream: TextIO, worker: Worker, interval: float = 1.0):
        self.stream, self.worker, self.interval = stream, worker, interval
        self.lock = threading.Lock()
        self.text = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pinlater-status")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        with self.lock:
            if self.text:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self.text = ""

    def _loop(self) -> None:
        last, last_done = time.monotonic(), 0
        while not self._stop.wait(self.interval):
            now, stats = time.monotonic(), self.worker.stats()
            rate = (stats.finished - last_done) / max(now - last, 1e-9)
            last, last_done = now, stats.finished
            self.draw(format_status(stats, rate))

    def draw(self, text: str) -> None:
        with self.lock:
            self.text = text
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()


def format_status(stats, rate: float) -> str:
    return (
        f"{rate:.1f} jobs/s | {stats.succeeded} successes | {stats.failed} failures | "
        f"{stats.in_flight} in flight | {stats.acks_pending} acks pending"
    )


class _StatusAwareHandler(logging.StreamHandler):
    """Clears the status line before a log record and redraws it after."""

    def __init__(self, stream: TextIO):
        super().__init__(stream)
        self.status: StatusLine | None = None

    def emit(self, record: logging.LogRecord) -> None:
        status = self.status
        if status is None:
            return super().emit(record)
        with status.lock:
            self.stream.write("\r\x1b[K")
            super().emit(record)
            self.stream.write(status.text)
            self.stream.flush()


def main(argv: list[str] | None = None, err: TextIO | None = None) -> int:
    err = err or sys.stderr
    try:
        args = build_parser().parse_args(argv)
        return run(args, err)
    except SystemExit as stop:  # argparse: --help or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    except (UsageError, ValueError) as exc:
        err.write(f"pinlater-worker: error: {exc}\n")
        return EXIT_USAGE


def run(args: argparse.Namespace, err: TextIO) -> int:
    try:
        parse_level(args.log_level)
    except ValueError:
        raise UsageError(f"unknown --log-level {args.log_level!r}") from None
    if args.concurrency < 1 or args.max_batch < 1:
        raise UsageError("--concurrency and --max-batch must be >= 1")
    if args.max_prefetch < 0:
        raise UsageError("--max-prefetch must be >= 0")
    handler = load_handler(args.handler)
    retry = parse_retry(args.retry)
    log_handler = _StatusAwareHandler(err)
    configure_logging(args.log_level, args.log_format, handler=log_handler)
    try:
        return _work(args, err, handler, retry, log_handler)
    finally:
        logging.getLogger().removeHandler(log_handler)


def _work(args, err: TextIO, handler, retry, log_handler: _StatusAwareHandler) -> int:
    client = PinLaterClient(
        args.servers, source=args.source, service=SERVICE, timeout=args.timeout, pool_size=2
    )
    worker = Worker(
        client,
        args.queue,
        handler,
        concurrency=args.concurrency,
        retry=retry,
        heartbeat=args.heartbeat,
        shutdown_timeout=args.shutdown_timeout,
        max_batch=args.max_batch,
        max_prefetch=args.max_prefetch,
        prefetch_wait=args.prefetch_wait,
        wait_for_queue=args.wait_for_queue,
        long_poll=args.long_poll,
    )
    show_status = args.status if args.status is not None else err.isatty()
    status = StatusLine(err, worker) if show_status else None
    if status:
        log_handler.status = status
        status.start()
    try:
        clean = worker.run()
    except QueueNotFound:
        log.error(
            "queue %s does not exist: create it (pinlater create --queue %s), or start with "
            "--wait-for-queue to wait until it is created",
            args.queue,
            args.queue,
        )
        return EXIT_NO_QUEUE
    finally:
        if status:
            status.stop()
            log_handler.status = None
        client.close()
    return EXIT_OK if clean else EXIT_ABANDONED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
