"""The `pinlater` command line: options, subcommands and an example for each.

Connection, TLS and output options belong before the subcommand (`pinlater --port 9011 scan
-q emails`); subcommands that talk to a server also accept them after their own options (hidden
from their help) so scripts written either way keep working. `hash-password` connects nowhere
and takes none of them. Subcommands are named after the original PinLaterClientTool modes, with
hyphenated aliases; the original's underscore flags (--job_descriptor, --num_queries ...) are
accepted beside hyphenated ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Callable
from typing import TextIO

from pinlater import __version__
from pinlater.cli import stats as cli_stats
from pinlater.common.passwords import DEFAULT_ITERATIONS
from worker_sdk.models import JobState

SERVICE = "pinlaterclienttool"
SERVERS_ENV = "PINLATER_SERVERS"
#: values of the connection and output options when given nowhere
GLOBAL_DEFAULTS = {
    "host": "127.0.0.1",
    "port": 9010,
    "servers": None,
    "source": None,
    "timeout": 10.0,
    "connect_timeout": 2.0,
    "retries": 2,
    "json": False,
    "tls": False,
    "tls_ca": None,
    "tls_cert": None,
    "tls_key": None,
}

#: subcommand -> examples shown at the end of its --help
EXAMPLES = {
    "create": """
        pinlater create --queue emails
        pinlater --host 10.0.0.5 --port 9010 create --queue emails""",
    "delete": """
        PINLATER_ADMIN_PASSWORD=secret pinlater delete --queue old_emails""",
    "enqueue": """
        pinlater enqueue --queue emails --body alice@example.com --body bob@example.com
        pinlater enqueue --queue emails --priority 2 --run-after +10m --attempts 5 --body later
        pinlater enqueue --queue orders --body 'ship 17' --unique-key order-17   # once per window
        printf 'one\\ntwo\\n' | pinlater enqueue --queue emails      # one job per stdin line
        # load: 100 requests of 100 jobs each (10,000 jobs), 4 at a time
        pinlater enqueue --queue emails --num_queries 100 --batch_size 100 --concurrency 4""",
    "dequeue": """
        pinlater dequeue --queue emails --limit 5                 # claimed until acked or timed out
        pinlater dequeue --queue emails --limit 5 --ack success
        pinlater dequeue --queue emails --dry-run                 # look, claim nothing
        pinlater dequeue --queue emails --wait-ms 20000           # wait up to 20 s for a job
        # load for 10 s: dequeue 100 per request, ack 90% as success
        pinlater dequeue --queue emails --num_queries -1 --duration 10 --batch_size 100 \\
            --dequeue_success_percent 90""",
    "check_dequeue": """
        pinlater check_dequeue --queue emails""",
    "lookup": """
        pinlater lookup --job_descriptor emails:s1:p1:42
        pinlater lookup emails:s1:p1:42 emails:s1:p2:7 --no-body""",
    "get_queue_names": """
        pinlater get_queue_names
        pinlater --json get_queue_names""",
    "get_job_count": """
        pinlater get_job_count --queue emails                     # pending now, all priorities
        pinlater get_job_count --queue emails --state failed --priority 1
        pinlater get_job_count --queue emails --future            # pending, run-after later""",
    "scan": """
        pinlater scan --queue emails --state failed --max 20
        pinlater scan --queue emails --body-regex '@example[.]com$'""",
    "retry_failed": """
        pinlater retry_failed --queue emails                      # every priority, 1 attempt
        pinlater retry_failed --queue emails --priority 2 --attempts 3 --run-after +5m""",
    "delete_jobs": """
        pinlater delete_jobs --queue emails --state succeeded     # every priority
        pinlater delete_jobs --queue emails --state pending --body-regex '^test' --limit 100""",
    "checkpoint": """
        pinlater checkpoint --queue emails -j emails:s1:p1:42 --claim CLAIM --run-after +1h \\
            --move-to-pending""",
    "stats": """
        pinlater stats                                  # /health from port 9999 on --host
        pinlater stats --watch 5 -q emails              # redraw every 5 s, with rates
        pinlater stats --metrics-port 9998 --json""",
    "pause": """
        PINLATER_ADMIN_PASSWORD=secret pinlater pause --queue emails
        pinlater pause --queue emails --metrics-port 9998 --password secret""",
    "resume": """
        PINLATER_ADMIN_PASSWORD=secret pinlater resume --queue emails""",
    "audit": """
        PINLATER_ADMIN_PASSWORD=secret pinlater audit   # every queue; exit code 1 if a book
                                                        # does not balance
        pinlater audit -q emails --password secret --json""",
    "shards": """
        PINLATER_ADMIN_PASSWORD=secret pinlater shards  # health, mode, drain progress
        pinlater shards --metrics-port 9998 --password secret --json""",
    "schedules": """
        pinlater schedules                              # every queue, next 5 runs each
        pinlater schedules -q reports --count 10 --json""",
    "hash-password": """
        pinlater hash-password                          # prompts twice
        printf 'secret\\n' | pinlater hash-password""",
}


class UsageError(Exception):
    """Bad command line or input; printed with exit code 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions as usual, but keeps the examples epilog line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting and prints help to the injected stream."""

    stream: TextIO = sys.stdout

    def error(self, message: str):
        # main prints "pinlater: error: ": name the sub-command, never the program twice
        command = self.prog.removeprefix("pinlater").strip()
        raise UsageError(f"{command}: {message}" if command else message)

    def print_help(self, file=None):
        super().print_help(file or self.stream)

    def exit(self, status=0, message=None):
        if message:
            self.stream.write(message)
        raise SystemExit(status)


def _connection_options(p: argparse.ArgumentParser, *, hidden: bool) -> None:
    """Connection, TLS and output options. SUPPRESS as default keeps a value given before the
    subcommand from being reset by the subcommand's parser; `hidden` keeps them out of help."""

    def add(*flags: str, help_text: str, **kwargs) -> None:
        shown = argparse.SUPPRESS if hidden else help_text
        target.add_argument(*flags, default=argparse.SUPPRESS, help=shown, **kwargs)

    target = p if hidden else p.add_argument_group("connection (before the subcommand)")
    add("--host", help_text="server host (127.0.0.1)")
    add("--port", type=int, help_text="server port (9010)")
    add(
        "--servers",
        help_text="comma-separated host:port list or a ServerSet file; overrides --host/--port "
        f"(default: ${SERVERS_ENV})",
    )
    add("--source", help_text=f"RequestContext source ({SERVICE}:HOSTNAME)")
    add("--timeout", type=float, help_text="per-call timeout, s (10)")
    add("--connect-timeout", type=float, help_text="connect timeout, s (2)")
    add("--retries", type=int, help_text="retries of idempotent calls (2)")
    add("--tls", action="store_true", help_text="TLS, verifying the server certificate and name")
    add("--tls-ca", help_text="CA file for the server certificate (implies --tls)")
    add("--tls-cert", help_text="client certificate for mutual TLS")
    add("--tls-key", help_text="key of --tls-cert (if not in the same file)")


def _json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


def build_parser(handlers: dict[str, Callable]) -> argparse.ArgumentParser:
    """The whole parser; `handlers` maps each subcommand name to its function."""
    parser = Parser(
        prog="pinlater",
        description="Operate a PinLater job queue server.",
        epilog=f"Connection options go before COMMAND; ${SERVERS_ENV} sets the default servers. "
        "Exit codes: 0 ok, 1 server error, 2 usage, 3 cannot connect. "
        "`pinlater COMMAND --help` shows a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _connection_options(parser, hidden=False)
    _json_option(parser)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )

    def command(name: str, help_text: str, *, connects: bool = True) -> argparse.ArgumentParser:
        aliases = [name.replace("_", "-")] if "_" in name else []
        p = sub.add_parser(
            name,
            aliases=aliases,
            help=help_text,
            description=help_text,
            epilog="examples:\n" + textwrap.indent(textwrap.dedent(EXAMPLES[name]).strip(), "  "),
            formatter_class=HelpFormatter,
        )
        p.set_defaults(handler=handlers[name])
        _json_option(p)
        if connects:
            _connection_options(p, hidden=True)
        return p

    _queue(command("create", "create a queue (no error if it exists)"))
    p = command("delete", "delete a queue and all its jobs (admin password)")
    _queue(p)
    p.add_argument(
        "--password", help="admin password (default: $PINLATER_ADMIN_PASSWORD, else prompt)"
    )
    p = command("enqueue", "enqueue jobs (or generate load with --num_queries)")
    _queue(p)
    _enqueue_options(p)
    _load_options(p)
    _dequeue_options(command("dequeue", "dequeue jobs (or generate load with --num_queries)"))
    _queue(command("check_dequeue", "tell whether a job is ready (dry run)"))
    p = command("lookup", "show jobs by descriptor: state, attempts, claim, status, times, body")
    p.add_argument("--queue", "-q", help="ignored (the original tool required it)")
    p.add_argument("positional", nargs="*", metavar="DESCRIPTOR", help="job descriptor(s)")
    _descriptors(p, required=False)
    p.add_argument("--no-body", action="store_true", help="do not fetch bodies")
    command("get_queue_names", "list queues")
    _count_options(command("get_job_count", "count jobs in a state"))
    _scan_options(command("scan", "list jobs in a state, newest run-after first"))
    p = command("retry_failed", "move FAILED jobs back to PENDING")
    _queue(p)
    _priority(p, "only this priority (default: every priority)")
    p.add_argument("--attempts", type=positive, default=1, help="attempts to allow (1)")
    p.add_argument("--run-after", type=run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--limit", type=positive, default=1000, help="at most this many (1000)")
    p = command("delete_jobs", "delete jobs in a state")
    _queue(p)
    _state(p, default=None)
    _priority(p, "only this priority (default: every priority)")
    p.add_argument("--body-regex", help="only jobs whose body matches")
    p.add_argument("--limit", type=positive, default=1000, help="at most this many (1000)")
    _checkpoint_options(command("checkpoint", "update a running job"))
    cli_stats.add_arguments(
        command("stats", "server health, per-queue job counts by priority, enqueue/dequeue rates")
    )
    for name, what in (("pause", "stop"), ("resume", "restart")):
        p = command(
            name,
            f"{what} handing out a queue's jobs on every server sharing the storage (admin API)",
        )
        _queue(p)
        _admin_api_options(p)
    p = command(
        "audit", "the ledger of each queue per shard: counters, jobs present, balance (admin API)"
    )
    p.add_argument("--queue", "-q", help="only this queue")
    _admin_api_options(p)
    _admin_api_options(
        command("shards", "shards: health, dequeue_only, unfinished jobs left (admin API)")
    )
    p = command("schedules", "periodic jobs the server runs and their next run times")
    p.add_argument("--queue", "-q", help="only this queue's schedules")
    p.add_argument("--count", type=positive, default=5, help="next run times per schedule (5)")
    p = command(
        "hash-password", "print a pbkdf2_sha256 hash for admin.password_hash", connects=False
    )
    p.add_argument("--iterations", type=positive, default=DEFAULT_ITERATIONS)
    p.add_argument("--password", help="(default: prompt, or the first line of stdin)")
    return parser


def parse_args(
    argv: list[str] | None, handlers: dict[str, Callable], out: TextIO = sys.stdout
) -> argparse.Namespace:
    """Parse; options given nowhere take GLOBAL_DEFAULTS, and $PINLATER_SERVERS stands in for
    --servers unless --servers, --host or --port was given."""
    Parser.stream = out
    args = build_parser(handlers).parse_args(argv)
    given = set(vars(args))
    for key, default in GLOBAL_DEFAULTS.items():
        if key not in given:
            setattr(args, key, default)
    if not given & {"servers", "host", "port"}:
        args.servers = os.environ.get(SERVERS_ENV) or None
    return args


# ---- option groups ----


def _admin_api_options(p) -> None:
    """Where the admin API is (the server's HTTP listener) and the password it takes."""
    p.add_argument(
        "--password", help="admin password (default: $PINLATER_ADMIN_PASSWORD, else prompt)"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        help=f"the server's HTTP port (${cli_stats.METRICS_PORT_ENV}, else "
        f"{cli_stats.DEFAULT_METRICS_PORT})",
    )
    p.add_argument("--metrics-url", help="its base URL (default http://HOST:METRICS_PORT)")


def _queue(p) -> None:
    p.add_argument("--queue", "-q", required=True, help="queue name")


def _priority(p, help_text: str) -> None:
    p.add_argument("--priority", type=int, help=help_text)


def _state(p, default: str | None = "pending") -> None:
    p.add_argument(
        "--job_state",
        "--job-state",
        "--state",
        dest="state",
        type=job_state,
        default=None if default is None else JobState.parse(default),
        required=default is None,
        help="pending, in_progress, succeeded or failed (any case; or 0-3)"
        + ("" if default is None else f" (default {default})"),
    )


def _descriptors(p, required: bool = True) -> None:
    p.add_argument(
        "--job_descriptor",
        "--job-descriptor",
        "-j",
        dest="descriptors",
        action="append",
        required=required,
        default=[],
        help="job descriptor (repeatable)",
    )


def _enqueue_options(p) -> None:
    p.add_argument("--body", "-b", action="append", help="job body (repeatable)")
    p.add_argument("--body-file", help="file whose content is one job body")
    p.add_argument("--priority", type=int, help="priority (server default 1)")
    p.add_argument("--run-after", type=run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--attempts", type=positive, help="attempts allowed (server default 2)")
    p.add_argument("--status", help="initial custom status")
    p.add_argument(
        "--count", type=positive, default=1, help="enqueue each body this many times (default 1)"
    )
    p.add_argument(
        "--unique-key",
        "--unique_key",
        action="append",
        dest="unique_keys",
        metavar="KEY",
        help="unique key of the job (repeatable: one per job, in order); an enqueue whose key "
        "the queue holds stores nothing and prints the holder's descriptor",
    )


def _dequeue_options(p) -> None:
    _queue(p)
    p.add_argument("--limit", type=positive, default=1, help="jobs to dequeue (1)")
    p.add_argument(
        "--ack",
        type=str.lower,
        choices=["success", "failure"],
        help="ack the dequeued jobs; without it they stay claimed until timeout",
    )
    p.add_argument("--retry-delay-ms", type=int, default=0, help="retry delay of failure acks")
    p.add_argument("--dry-run", "--dry_run", action="store_true", help="look, do not claim")
    p.add_argument(
        "--wait-ms",
        "--wait_ms",
        type=non_negative,
        default=1000,
        help="long-poll: when no job is ready the server may hold the call this long for one "
        "(ms, 1000; 0: answer at once; the server caps it at server.max_dequeue_wait_ms)",
    )
    _load_options(p)
    p.add_argument(
        "--dequeue_success_percent",
        "--dequeue-success-percent",
        type=int,
        default=100,
        dest="success_percent",
        help="load mode: share acked success (100)",
    )
    p.add_argument(
        "--piggyback",
        action="store_true",
        help="load mode: send acks with the next dequeue instead of a separate call",
    )


def _count_options(p) -> None:
    _queue(p)
    _state(p)
    _priority(p, "only this priority (default: every priority)")
    p.add_argument(
        "--count_future_jobs",
        "--count-future-jobs",
        "--future",
        action="store_true",
        dest="future",
        help="count jobs whose run-after is in the future",
    )
    p.add_argument("--body-regex", help="only jobs whose body matches")


def _scan_options(p) -> None:
    _queue(p)
    _state(p)
    _priority(p, "only this priority (default: every priority)")
    p.add_argument("--future", action="store_true", help="scan jobs to run in the future")
    p.add_argument("--body-regex", help="only jobs whose body matches")
    p.add_argument("--page-size", type=positive, default=100, help="jobs per request (100)")
    p.add_argument("--max", type=positive, default=1000, help="stop after this many (1000)")


def _checkpoint_options(p) -> None:
    _queue(p)
    _descriptors(p)
    p.add_argument("--claim", help="the claim from dequeue (fences stale workers)")
    p.add_argument("--new-body", help="replace the body")
    p.add_argument("--move-to-pending", action="store_true", help="give the job back")
    p.add_argument("--run-after", type=run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--attempts", type=positive, help="set attempts allowed and remaining")
    p.add_argument("--prepend-status", help="text prepended to the custom status")


def _load_options(p) -> None:
    g = p.add_argument_group(
        "load mode",
        "Issue --num_queries requests of --batch_size jobs each (as the original client tool "
        "did: 100 x 100 is 10,000 jobs), --concurrency at a time; report jobs/s and latency "
        "every second and a summary at the end.",
    )
    g.add_argument(
        "--num_queries",
        "--num-queries",
        type=int,
        default=None,
        help="requests to issue, each of --batch_size jobs (-1: until --duration or Ctrl-C)",
    )
    g.add_argument("--duration", type=float, help="stop after this many seconds")
    g.add_argument(
        "--batch_size", "--batch-size", type=positive, default=1, help="jobs per request (1)"
    )
    g.add_argument("--concurrency", type=positive, default=1, help="requests in flight (1)")


# ---- value types ----


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def job_state(text: str) -> JobState:
    """A job state by name (any case, `-` or `_`) or number, with the names in the error."""
    try:
        return JobState.parse(text)
    except ValueError:
        names = ", ".join(m.name.lower() for m in JobState)
        numbers = ", ".join(f"{m.value}={m.name.lower()}" for m in JobState)
        raise argparse.ArgumentTypeError(
            f"unknown job state {text!r}: use one of {names} (or a number: {numbers})"
        ) from None


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def run_after(text: str) -> int:
    """Epoch milliseconds, or `+N[ms|s|m|h|d]` from now (seconds when no unit)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    if text.startswith("+"):
        number = text[1:].rstrip("smhd")
        unit = text[1 + len(number) :] or "s"
        if number.isascii() and number.isdigit() and unit in _UNITS_MS:
            return int(time.time() * 1000) + int(number) * _UNITS_MS[unit]
    raise argparse.ArgumentTypeError(f"expected epoch ms or +N[ms|s|m|h|d], got {text!r}")
