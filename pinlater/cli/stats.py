"""`pinlater stats`: the server's /health, a per-queue, per-priority table of job counts, and
per-queue enqueue/dequeue/ack rates.

Counts come from getJobCount over the Thrift port (exact up to the server's count cap). Health
and rates come from the server's metrics endpoint: `--metrics-url URL`, else port
`--metrics-port` (else $PINLATER_METRICS_PORT, the variable the server reads, else the server's
default 9999) on the host the CLI talks to; `--metrics-port 0` skips it. Rates are the change of
the `pinlater_jobs_enqueued_total`, `pinlater_jobs_dequeued_total` and `pinlater_acks_total`
counters between two scrapes: successive frames with `--watch`, else two scrapes at least
`--rate-window` seconds apart (the job counts are taken in between).

`--watch [SECONDS]` redraws until Ctrl-C (or `--iterations` times) and keeps going when the
server restarts or cannot be reached for a while (the frame says so).

With the admin password (`--password` or $PINLATER_ADMIN_PASSWORD) it also shows which queues
are paused or rate limited, and where that comes from (the admin API's GET /api/v1/queues;
docs/admin-api.md). With the TLS options the metrics endpoint is read over HTTPS.
"""

from __future__ import annotations

import functools
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from prometheus_client.parser import text_string_to_metric_families

from pinlater.cli import format as fmt
from pinlater.common.serverset import server_source
from worker_sdk.errors import PinLaterTransportError
from worker_sdk.models import JobState

COLUMNS = ("pending", "future", "in_progress", "succeeded", "failed")
RATE_COLUMNS = ("enqueued", "dequeued", "acked_succeeded", "acked_failed")
DEFAULT_METRICS_PORT = 9999
METRICS_PORT_ENV = "PINLATER_METRICS_PORT"
_CLEAR = "\x1b[H\x1b[2J"


def add_arguments(p) -> None:
    p.add_argument(
        "--queue",
        "-q",
        action="append",
        dest="queues",
        help="only this queue (repeatable; default: every queue)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        help=f"server metrics port for /health and rates (${METRICS_PORT_ENV}, else "
        f"{DEFAULT_METRICS_PORT}; 0: none)",
    )
    p.add_argument("--metrics-url", help="metrics base URL (default http://HOST:METRICS_PORT)")
    p.add_argument(
        "--password",
        help="admin password, to show paused and rate-limited queues from the admin API "
        "(default: $PINLATER_ADMIN_PASSWORD; without it they are not shown)",
    )
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
    p.add_argument(
        "--rate-window",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="without --watch: scrape /metrics twice this far apart for rates (1; 0: no rates)",
    )


def metrics_url(args, environ=os.environ) -> str | None:
    """Base URL of the metrics endpoint of the server the CLI talks to (None: not wanted)."""
    if args.metrics_url:
        return args.metrics_url.rstrip("/")
    port = args.metrics_port
    if port is None:
        text = environ.get(METRICS_PORT_ENV, "").strip()
        port = int(text) if text.isdigit() else DEFAULT_METRICS_PORT
    if port == 0:
        return None
    host = args.host
    if args.servers:
        host = server_source(args.servers).endpoints()[0][0]
    if ":" in host:
        host = f"[{host}]"
    secure = any(getattr(args, name, None) for name in ("tls", "tls_ca", "tls_cert"))
    return f"{'https' if secure else 'http'}://{host}:{port}"


def _get(url: str, timeout: float, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET; 4xx/5xx answers are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def fetch_health(
    url: str, timeout: float, context: ssl.SSLContext | None = None
) -> tuple[int | None, dict[str, Any], str]:
    """(HTTP status or None, JSON body, error text)."""
    try:
        status, body = _get(url.rstrip("/") + "/health", timeout, context)
    except (OSError, ValueError) as exc:
        return None, {}, f"{url}/health: {getattr(exc, 'reason', exc)}"
    try:
        return status, json.loads(body), ""
    except ValueError:
        return status, {}, f"HTTP {status}"


def fetch_counters(
    url: str, timeout: float, context: ssl.SSLContext | None = None
) -> dict[tuple[str, str], float] | None:
    """{(queue, column): counter value} from /metrics, or None when it cannot be read."""
    try:
        status, body = _get(url.rstrip("/") + "/metrics", timeout, context)
    except (OSError, ValueError):
        return None
    if status != 200:
        return None
    return parse_counters(body.decode("utf-8", "replace"))


def parse_counters(text: str) -> dict[tuple[str, str], float]:
    """The job counters of a Prometheus text page, keyed by (queue, RATE_COLUMNS entry)."""
    wanted = {
        "pinlater_jobs_enqueued_total": lambda labels: "enqueued",
        "pinlater_jobs_dequeued_total": lambda labels: "dequeued",
        "pinlater_acks_total": lambda labels: f"acked_{labels.get('result', '')}",
    }
    counters: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            column = wanted.get(sample.name)
            queue = sample.labels.get("queue")
            if column is None or not queue:
                continue
            key = (queue, column(sample.labels))
            counters[key] = counters.get(key, 0.0) + sample.value
    return counters


@dataclass
class Sample:
    """Counter values and when they were read (time.monotonic)."""

    at: float
    counters: dict[tuple[str, str], float] = field(default_factory=dict)


def rates(before: Sample | None, after: Sample | None) -> dict[str, dict[str, float]] | None:
    """Per-queue rates (per second) between two samples; None when either is missing. A
    counter that went down (the server restarted) counts from zero, as Prometheus does."""
    if before is None or after is None or after.at <= before.at:
        return None
    elapsed = after.at - before.at
    out: dict[str, dict[str, float]] = {}
    for (queue, column), value in after.counters.items():
        previous = before.counters.get((queue, column), 0.0)
        delta = value - previous if value >= previous else value
        out.setdefault(queue, dict.fromkeys(RATE_COLUMNS, 0.0))[column] = round(delta / elapsed, 1)
    return out


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


#: reads {queue: effective settings} from the admin API (raises with a reason when it cannot)
SettingsSource = Callable[[], dict[str, dict[str, Any]]]


class Collector:
    """Takes snapshots; remembers the last counter sample so each frame can show rates."""

    def __init__(
        self,
        args,
        client,
        clock: Callable[[], float] = time.monotonic,
        context: ssl.SSLContext | None = None,
        settings: SettingsSource | None = None,
    ):
        self.args, self.client, self.clock = args, client, clock
        self.url = metrics_url(args)
        self.context = context
        self.settings = settings
        self.last: Sample | None = None

    def sample(self) -> Sample | None:
        if self.url is None:
            return None
        counters = fetch_counters(self.url, self.args.timeout, self.context)
        return None if counters is None else Sample(self.clock(), counters)

    def snapshot(self, wait: Callable[[float], None] | None = None) -> dict[str, Any]:
        """Health, counts and rates. With `wait` (one-shot mode) the counters are sampled
        before and after the counts, at least --rate-window seconds apart."""
        first = self.sample() if wait is not None and self.args.rate_window > 0 else self.last
        status: int | None = None
        health: dict[str, Any] = {}
        error = "no metrics endpoint (--metrics-port 0)"
        if self.url:
            status, health, error = fetch_health(self.url, self.args.timeout, self.context)
        priorities = self.args.priorities or health.get("priorities") or 3
        queues = self.args.queues or self.client.queue_names()
        rows = [
            row for queue in sorted(queues) for row in queue_counts(self.client, queue, priorities)
        ]
        if wait is not None and first is not None:
            wait(max(0.0, first.at + self.args.rate_window - self.clock()))
        now = self.sample()
        self.last = now
        shown = rates(first, now)
        if shown is not None:
            shown = {q: shown.get(q, dict.fromkeys(RATE_COLUMNS, 0.0)) for q in sorted(queues)}
        return {
            "health_status": status,
            "health": health,
            "health_error": error,
            "rows": rows,
            "rates": shown,
            **self._settings(queues),
            "error": None,
        }

    def _settings(self, queues) -> dict[str, Any]:
        """{"settings": {queue: paused/limit summary}} from the admin API (only with a password;
        "settings_error" says why they are missing)."""
        if self.settings is None:
            return {}
        try:
            every = self.settings()
        except Exception as exc:  # noqa: BLE001 - any failure is shown, the frame goes on
            return {"settings": None, "settings_error": str(exc)}
        return {"settings": {q: _setting_summary(every[q]) for q in sorted(queues) if q in every}}


def _setting_summary(settings: dict[str, Any]) -> dict[str, Any]:
    rate = settings["max_jobs_per_second"]
    return {
        "paused": settings["paused"]["value"],
        "paused_source": settings["paused"]["source"],
        "max_jobs_per_second": rate["value"],
        "rate_source": rate["source"],
    }


def render(data: dict[str, Any], watching: bool = False) -> str:
    if data.get("error"):
        return f"server not reachable: {data['error']} (still watching)"
    lines = [fmt.health_summary(data["health_status"], data["health"], data["health_error"])]
    if not data["rows"]:
        lines.append("(no queues)")
        return "\n".join(lines)
    lines.append(
        fmt.table(
            ["QUEUE", "PRIORITY", "PENDING", "FUTURE", "IN PROGRESS", "SUCCEEDED", "FAILED"],
            [[r["queue"], r["priority"]] + [r[c] for c in COLUMNS] for r in data["rows"]],
        )
    )
    if "settings" in data:
        lines.append(_settings_line(data))
    if data.get("rates") is None:
        lines.append("rates: from the next frame on" if watching else "rates: - (no /metrics)")
    else:
        lines.append(
            fmt.table(
                ["QUEUE", "ENQUEUED/S", "DEQUEUED/S", "ACKED OK/S", "ACKED FAILED/S"],
                [
                    [queue] + [float(values[c]) for c in RATE_COLUMNS]
                    for queue, values in data["rates"].items()
                ],
            )
        )
    return "\n".join(lines)


def _settings_line(data: dict[str, Any]) -> str:
    """`settings: emails paused (stored), reports 5/s (file)` or why they are missing."""
    if data["settings"] is None:
        return f"settings: - ({data.get('settings_error')})"
    parts = []
    for queue, s in data["settings"].items():
        if s["paused"]:
            parts.append(f"{queue} paused ({s['paused_source']})")
        elif s["max_jobs_per_second"] is not None:
            parts.append(f"{queue} {s['max_jobs_per_second']:g}/s ({s['rate_source']})")
    return "settings: " + (", ".join(parts) if parts else "no queue paused or rate limited")


def run(
    args,
    out: TextIO,
    client_factory: Callable[[], Any],
    sleep: Callable[[float], None] = time.sleep,
    context: ssl.SSLContext | None = None,
    settings: SettingsSource | None = None,
) -> int:
    """Print once, or redraw every --watch seconds. Exit 1 when /health says unavailable."""
    with client_factory() as client:
        collector = Collector(args, client, context=context, settings=settings)
        if args.watch is None:
            return _show(args, out, collector.snapshot(wait=sleep))
        done = 0
        while True:
            try:
                data = collector.snapshot()
            except PinLaterTransportError as exc:
                collector.last = None  # rates restart after the outage
                data = {"error": exc.message}
            code = _show(args, out, data)
            done += 1
            if args.iterations and done >= args.iterations:
                return code
            try:
                sleep(args.watch)
            except KeyboardInterrupt:
                return 0


def _show(args, out: TextIO, data: dict[str, Any]) -> int:
    text = fmt.dumps(data) if args.json else render(data, watching=args.watch is not None)
    if args.watch and not args.json and getattr(out, "isatty", lambda: False)():
        text = _CLEAR + text
    out.write(text + "\n")
    out.flush()
    if data.get("error"):
        return 3
    return 1 if data.get("health_status") == 503 else 0
