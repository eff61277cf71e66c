"""`pinlater stats`: the server's /health plus a per-queue, per-priority table of job counts.

Counts come from getJobCount over the Thrift port (exact up to the server's count cap), health
from the metrics port's /health (`--metrics-port N` on the --host, or `--metrics-url URL`).
Without either, the health part is skipped and `--priorities` (default 3) says how many
priority levels to show. `--watch [SECONDS]` redraws until Ctrl-C (or `--iterations` times).
"""

from __future__ import annotations

import functools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TextIO

from pinlater.cli import format as fmt
from worker_sdk.models import JobState

COLUMNS = ("pending", "future", "in_progress", "succeeded", "failed")
_CLEAR = "\x1b[H\x1b[2J"


def add_arguments(p) -> None:
    p.add_argument(
        "--queue",
        "-q",
        action="append",
        dest="queues",
        help="only this queue (repeatable; default: every queue)",
    )
    p.add_argument("--metrics-port", type=int, help="server metrics port, for /health")
    p.add_argument("--metrics-url", help="metrics base URL (default http://HOST:METRICS_PORT)")
    p.add_argument(
        "--priorities",
        type=int,
        default=None,
        help="priority levels to show when /health is not available (3)",
    )
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (2) until Ctrl-C",
    )
    p.add_argument("--iterations", type=int, default=None, help="with --watch: stop after N")


def fetch_health(url: str, timeout: float) -> tuple[int | None, dict[str, Any], str]:
    """(HTTP status or None, JSON body, error text)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as response:
            return response.status, json.loads(response.read()), ""
    except urllib.error.HTTPError as exc:
        with exc:
            try:
                return exc.code, json.loads(exc.read()), ""
            except ValueError:
                return exc.code, {}, f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return None, {}, str(getattr(exc, "reason", exc))


def _count(client, queue: str, priority: int, state: JobState, future: bool) -> int:
    return client.count(queue, state, priority=priority, future=future)


def queue_counts(client, queue: str, priorities: int) -> list[dict[str, Any]]:
    """One row per priority: pending (runnable now), future, in_progress, succeeded, failed."""
    rows = []
    for priority in range(1, priorities + 1):
        count = functools.partial(_count, client, queue, priority)

        both = {
            state: count(state, False) + count(state, True)
            for state in (JobState.IN_PROGRESS, JobState.SUCCEEDED, JobState.FAILED)
        }
        rows.append(
            {
                "queue": queue,
                "priority": priority,
                "pending": count(JobState.PENDING, False),
                "future": count(JobState.PENDING, True),
                "in_progress": both[JobState.IN_PROGRESS],
                "succeeded": both[JobState.SUCCEEDED],
                "failed": both[JobState.FAILED],
            }
        )
    return rows


def snapshot(args, client) -> dict[str, Any]:
    url = args.metrics_url or (
        f"http://{args.host}:{args.metrics_port}" if args.metrics_port else None
    )
    status: int | None = None
    health: dict[str, Any] = {}
    error = "no --metrics-port or --metrics-url given"
    if url:
        status, health, error = fetch_health(url, args.timeout)
    priorities = args.priorities or health.get("priorities") or 3
    queues = args.queues or client.queue_names()
    rows = [row for queue in sorted(queues) for row in queue_counts(client, queue, priorities)]
    return {"health_status": status, "health": health, "health_error": error, "rows": rows}


def render(data: dict[str, Any]) -> str:
    lines = [fmt.health_summary(data["health_status"], data["health"], data["health_error"])]
    if data["rows"]:
        lines.append(
            fmt.table(
                ["QUEUE", "PRIORITY", "PENDING", "FUTURE", "IN PROGRESS", "SUCCEEDED", "FAILED"],
                [[r["queue"], r["priority"]] + [r[c] for c in COLUMNS] for r in data["rows"]],
            )
        )
    else:
        lines.append("(no queues)")
    return "\n".join(lines)


def run(
    args,
    out: TextIO,
    client_factory: Callable[[], Any],
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print once, or redraw every --watch seconds. Exit 1 when /health says unavailable."""
    with client_factory() as client:
        done = 0
        while True:
            data = snapshot(args, client)
            text = fmt.dumps(data) if args.json else render(data)
            if args.watch and not args.json and getattr(out, "isatty", lambda: False)():
                text = _CLEAR + text
            out.write(text + "\n")
            out.flush()
            done += 1
            if args.watch is None or (args.iterations and done >= args.iterations):
                return 1 if data["health_status"] == 503 else 0
            try:
                sleep(args.watch)
            except KeyboardInterrupt:
                return 0
