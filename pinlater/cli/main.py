"""`pinlater`: the operator CLI, built on worker_sdk.client (one client implementation).

Subcommands are named after the original PinLaterClientTool modes (create, delete, enqueue,
dequeue, check_dequeue, lookup, get_queue_names, get_job_count, scan, retry_failed,
delete_jobs, checkpoint) plus `hash-password` and `stats`; hyphenated aliases work too. The
original's underscore flags (--job_descriptor, --num_queries ...) are accepted beside
hyphenated ones.

Exit codes: 0 success, 1 the server reported an error (its ErrorCode name is printed),
2 usage or input error, 3 the server could not be reached or the connection failed.
"""

from __future__ import annotations

import argparse
import getpass
import os
import random
import ssl
import sys
import time
from typing import TextIO

from pinlater.cli import format as fmt
from pinlater.cli import load as cli_load
from pinlater.cli import stats as cli_stats
from pinlater.common.passwords import DEFAULT_ITERATIONS, hash_password
from pinlater.common.serverset import ServerSetError
from pinlater.common.tls import client_context
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import PinLaterError, PinLaterTransportError
from worker_sdk.models import AckInfo, CheckpointRequest, Job, JobState

EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_CONNECTION = 0, 1, 2, 3
SERVICE = "pinlaterclienttool"
_GLOBAL_DEFAULTS = {
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


class UsageError(Exception):
    """Bad command line or input; printed with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting and prints help to the injected stream."""

    stream: TextIO = sys.stdout

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}")

    def print_help(self, file=None):
        super().print_help(file or self.stream)

    def exit(self, status=0, message=None):
        if message:
            self.stream.write(message)
        raise SystemExit(status)


def main(
    argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one command; returns the exit code. The single error boundary of the CLI."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        args = parse_args(argv, out)
        return args.handler(args, out, err) or EXIT_OK
    except SystemExit as stop:  # --help
        return stop.code if isinstance(stop.code, int) else EXIT_OK
    except (UsageError, ServerSetError, ValueError) as exc:
        err.write(f"pinlater: error: {exc}\n")
        return EXIT_USAGE
    except PinLaterTransportError as exc:
        err.write(f"pinlater: connection failed: {exc.message}\n")
        return EXIT_CONNECTION
    except PinLaterError as exc:
        err.write(f"pinlater: server error: {exc}\n")
        return EXIT_SERVER
    except KeyboardInterrupt:
        err.write("pinlater: interrupted\n")
        return 130


def parse_args(argv: list[str] | None, out: TextIO = sys.stdout) -> argparse.Namespace:
    _Parser.stream = out
    args = build_parser().parse_args(argv)
    for key, default in _GLOBAL_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    return args


# ---- parser ----


def _global_options() -> _Parser:
    """Options valid before or after the subcommand (SUPPRESS keeps one from erasing the other)."""
    common = _Parser(add_help=False)
    opt = common.add_argument_group("connection and output")
    suppress = argparse.SUPPRESS
    opt.add_argument("--host", default=suppress, help="server host (default 127.0.0.1)")
    opt.add_argument("--port", type=int, default=suppress, help="server port (default 9010)")
    opt.add_argument(
        "--servers",
        default=suppress,
        help="comma-separated host:port list or a ServerSet file (overrides --host)",
    )
    opt.add_argument(
        "--source", default=suppress, help=f"RequestContext source ({SERVICE}:HOSTNAME)"
    )
    opt.add_argument("--timeout", type=float, default=suppress, help="per-call timeout, s (10)")
    opt.add_argument(
        "--connect-timeout", type=float, default=suppress, help="connect timeout, s (2)"
    )
    opt.add_argument(
        "--retries", type=int, default=suppress, help="retries of idempotent calls (2)"
    )
    opt.add_argument("--json", action="store_true", default=suppress, help="print JSON")
    opt.add_argument(
        "--tls",
        action="store_true",
        default=suppress,
        help="connect with TLS, verifying the server certificate and host name",
    )
    opt.add_argument(
        "--tls-ca", default=suppress, help="CA file for the server certificate (implies --tls)"
    )
    opt.add_argument("--tls-cert", default=suppress, help="client certificate for mutual TLS")
    opt.add_argument(
        "--tls-key", default=suppress, help="key of --tls-cert (if not in the same file)"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _global_options()
    parser = _Parser(
        prog="pinlater", parents=[common], description="Operate a PinLater job queue server."
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    def command(name: str, handler, help_text: str) -> argparse.ArgumentParser:
        aliases = [name.replace("_", "-")] if "_" in name else []
        p = sub.add_parser(
            name, aliases=aliases, parents=[common], help=help_text, description=help_text
        )
        p.set_defaults(handler=handler)
        return p

    p = command("create", cmd_create, "create a queue")
    _queue(p)
    p = command("delete", cmd_delete, "delete a queue and all its jobs (admin password)")
    _queue(p)
    p.add_argument(
        "--password", help="admin password (default: $PINLATER_ADMIN_PASSWORD, else prompt)"
    )
    p = command("enqueue", cmd_enqueue, "enqueue jobs (or generate load with --num_queries)")
    _queue(p)
    _enqueue_options(p)
    _load_options(p)
    p = command("dequeue", cmd_dequeue, "dequeue jobs (or generate load with --num_queries)")
    _queue(p)
    p.add_argument("--limit", type=_positive, default=1, help="jobs to dequeue (1)")
    p.add_argument(
        "--ack",
        choices=["success", "failure"],
        help="ack the dequeued jobs; without it they stay claimed until timeout",
    )
    p.add_argument("--retry-delay-ms", type=int, default=0, help="retry delay of failure acks")
    p.add_argument("--dry-run", "--dry_run", action="store_true", help="look, do not claim")
    _load_options(p)
    p.add_argument(
        "--dequeue_success_percent",
        "--dequeue-success-percent",
        type=int,
        default=100,
        dest="success_percent",
        help="load mode: share acked success",
    )
    p.add_argument(
        "--piggyback",
        action="store_true",
        help="load mode: send acks with the next dequeue instead of a separate call",
    )
    p = command("check_dequeue", cmd_check_dequeue, "tell whether a job is ready (dry run)")
    _queue(p)
    p = command("lookup", cmd_lookup, "show jobs by descriptor")
    p.add_argument("--queue", "-q", help="ignored (the original tool required it)")
    _descriptors(p)
    p.add_argument("--no-body", action="store_true", help="do not fetch bodies")
    command("get_queue_names", cmd_queue_names, "list queues")
    p = command("get_job_count", cmd_count, "count jobs in a state")
    _queue(p)
    _state(p)
    p.add_argument("--priority", type=int, help="only this priority (default: all)")
    p.add_argument(
        "--count_future_jobs",
        "--count-future-jobs",
        "--future",
        action="store_true",
        dest="future",
        help="count jobs whose run-after is in the future",
    )
    p.add_argument("--body-regex", help="only jobs whose body matches")
    p = command("scan", cmd_scan, "list jobs in a state, newest run-after first")
    _queue(p)
    _state(p)
    p.add_argument("--priority", type=int, help="only this priority (default: all)")
    p.add_argument("--future", action="store_true", help="scan jobs to run in the future")
    p.add_argument("--body-regex", help="only jobs whose body matches")
    p.add_argument("--page-size", type=_positive, default=100, help="jobs per request (100)")
    p.add_argument("--max", type=_positive, default=1000, help="stop after this many (1000)")
    p = command("retry_failed", cmd_retry_failed, "move FAILED jobs back to PENDING")
    _queue(p)
    p.add_argument("--priority", type=int, default=1, help="priority (1)")
    p.add_argument("--attempts", type=_positive, default=1, help="attempts to allow (1)")
    p.add_argument("--run-after", type=_run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--limit", type=_positive, default=1000, help="at most this many (1000)")
    p = command("delete_jobs", cmd_delete_jobs, "delete jobs in a state")
    _queue(p)
    _state(p, default=None)
    p.add_argument("--priority", type=int, default=1, help="priority (1)")
    p.add_argument("--body-regex", help="only jobs whose body matches")
    p.add_argument("--limit", type=_positive, default=1000, help="at most this many (1000)")
    p = command("checkpoint", cmd_checkpoint, "update a running job")
    _queue(p)
    _descriptors(p)
    p.add_argument("--claim", help="the claim from dequeue (fences stale workers)")
    p.add_argument("--new-body", help="replace the body")
    p.add_argument("--move-to-pending", action="store_true", help="give the job back")
    p.add_argument("--run-after", type=_run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--attempts", type=_positive, help="set attempts allowed and remaining")
    p.add_argument("--prepend-status", help="text prepended to the custom status")
    p = command("stats", cmd_stats, "server health and per-queue job counts by priority")
    cli_stats.add_arguments(p)
    p = command(
        "hash-password", cmd_hash_password, "print a pbkdf2_sha256 hash for admin.password_hash"
    )
    p.add_argument("--iterations", type=_positive, default=DEFAULT_ITERATIONS)
    p.add_argument("--password", help="(default: prompt, or the first line of stdin)")
    return parser


def _queue(p):
    p.add_argument("--queue", "-q", required=True, help="queue name")


def _state(p, default="pending"):
    p.add_argument(
        "--job_state",
        "--job-state",
        "--state",
        dest="state",
        type=JobState.parse,
        default=None if default is None else JobState.parse(default),
        required=default is None,
        help="pending, in_progress, succeeded, failed (or 0-3)",
    )


def _descriptors(p):
    p.add_argument(
        "--job_descriptor",
        "--job-descriptor",
        "-j",
        dest="descriptors",
        action="append",
        required=True,
        help="job descriptor (repeatable)",
    )


def _enqueue_options(p):
    p.add_argument("--body", "-b", action="append", help="job body (repeatable)")
    p.add_argument("--body-file", help="file whose content is one job body")
    p.add_argument("--priority", type=int, help="priority (server default 1)")
    p.add_argument("--run-after", type=_run_after, help="epoch ms, or +N[ms|s|m|h|d]")
    p.add_argument("--attempts", type=_positive, help="attempts allowed (server default 2)")
    p.add_argument("--status", help="initial custom status")
    p.add_argument(
        "--count", type=_positive, default=1, help="enqueue each body this many times (default 1)"
    )


def _load_options(p):
    g = p.add_argument_group("load mode")
    g.add_argument(
        "--num_queries",
        "--num-queries",
        type=int,
        default=None,
        help="issue this many requests (-1: until --duration or Ctrl-C)",
    )
    g.add_argument("--duration", type=float, help="stop after this many seconds")
    g.add_argument(
        "--batch_size", "--batch-size", type=_positive, default=1, help="jobs per request (1)"
    )
    g.add_argument("--concurrency", type=_positive, default=1, help="parallel requests (1)")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _run_after(text: str) -> int:
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


# ---- commands ----


def make_client(args: argparse.Namespace) -> PinLaterClient:
    servers = args.servers or [f"{args.host}:{args.port}"]
    return PinLaterClient(
        servers,
        source=args.source,
        service=SERVICE,
        connect_timeout=args.connect_timeout,
        timeout=args.timeout,
        retries=args.retries,
        pool_size=max(4, getattr(args, "concurrency", 1) or 1),
        tls=_tls_context(args),
    )


def _tls_context(args: argparse.Namespace):
    """None for plain TCP, else a verifying client context (mutual TLS with --tls-cert)."""
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    try:
        return client_context(args.tls_ca, args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load TLS files: {exc}") from None


def _emit(args, out: TextIO, data, text: str) -> None:
    out.write((fmt.dumps(data) if args.json else text) + "\n")


def cmd_create(args, out, err):
    with make_client(args) as client:
        client.create_queue(args.queue)
    _emit(args, out, {"created": args.queue}, f"Created queue: {args.queue}")


def cmd_delete(args, out, err):
    password = args.password
    if password is None:
        password = os.environ.get("PINLATER_ADMIN_PASSWORD")
    if password is None:
        if not sys.stdin.isatty():
            raise UsageError("no password: use --password or $PINLATER_ADMIN_PASSWORD")
        password = getpass.getpass("admin password: ")
    with make_client(args) as client:
        client.delete_queue(args.queue, password)
    _emit(args, out, {"deleted": args.queue}, f"Deleted queue: {args.queue}")


def _bodies(args) -> list[bytes]:
    bodies = [b.encode("utf-8") for b in args.body or []]
    if args.body_file:
        with open(args.body_file, "rb") as handle:
            bodies.append(handle.read())
    if not bodies and args.num_queries is None:
        if sys.stdin.isatty():
            raise UsageError("no job bodies: give --body, --body-file or lines on stdin")
        bodies = [line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip()]
        if not bodies:
            raise UsageError("no job bodies on stdin")
    return bodies


def _job(args, body: bytes) -> Job:
    return Job(
        body,
        priority=args.priority,
        run_after_ms=args.run_after,
        attempts=args.attempts,
        custom_status=args.status,
    )


def cmd_enqueue(args, out, err):
    if args.num_queries is not None:
        return _load(args, out, err, "enqueue")
    jobs = [_job(args, body) for body in _bodies(args) for _ in range(args.count)]
    with make_client(args) as client:
        descriptors = client.enqueue(args.queue, jobs)
    _emit(args, out, {"enqueued": descriptors}, "\n".join(descriptors))


def cmd_dequeue(args, out, err):
    if args.num_queries is not None:
        if not 0 <= args.success_percent <= 100:
            raise UsageError("--dequeue_success_percent must be 0..100")
        return _load(args, out, err, "dequeue")
    with make_client(args) as client:
        jobs = client.dequeue(args.queue, args.limit, dry_run=args.dry_run)
        if args.ack and jobs and not args.dry_run:
            acks = [
                AckInfo(j.descriptor, claim=j.claim, retry_delay_ms=args.retry_delay_ms)
                for j in jobs
            ]
            client.ack(args.queue, **{"succeeded" if args.ack == "success" else "failed": acks})
    data = {
        "jobs": [fmt.dequeued_json(j) for j in jobs],
        "acked": args.ack if args.ack and not args.dry_run else None,
    }
    text = fmt.dequeued_table(jobs) if jobs else "No jobs dequeued."
    _emit(args, out, data, text)


def cmd_check_dequeue(args, out, err):
    with make_client(args) as client:
        available = bool(client.dequeue(args.queue, 1, dry_run=True))
    _emit(
        args, out, {"available": available}, f"Jobs available for dequeue: {str(available).lower()}"
    )


def cmd_lookup(args, out, err):
    with make_client(args) as client:
        found = client.lookup(args.descriptors, include_body=not args.no_body)
    missing = [d for d in args.descriptors if d not in found]
    infos = [found[d] for d in args.descriptors if d in found]
    text = fmt.job_infos_table(infos, with_body=not args.no_body) if infos else ""
    text += "".join(f"\nnot found: {d}" for d in missing)
    _emit(
        args,
        out,
        {"jobs": [fmt.job_info_json(i) for i in infos], "not_found": missing},
        text.strip("\n"),
    )
    return EXIT_SERVER if missing else EXIT_OK


def cmd_queue_names(args, out, err):
    with make_client(args) as client:
        names = client.queue_names()
    _emit(args, out, {"queues": names}, "\n".join(names) if names else "(no queues)")


def cmd_count(args, out, err):
    with make_client(args) as client:
        n = client.count(
            args.queue,
            args.state,
            priority=args.priority,
            future=args.future,
            body_regex=args.body_regex,
        )
    _emit(args, out, {"queue": args.queue, "state": args.state.name, "count": n}, str(n))


def cmd_scan(args, out, err):
    with make_client(args) as client:
        infos = list(
            client.scan(
                args.queue,
                args.state,
                max_jobs=args.max,
                priority=args.priority,
                future=args.future,
                limit=args.page_size,
                body_regex=args.body_regex,
            )
        )
    text = fmt.job_infos_table(infos, with_body=False) if infos else "(no jobs)"
    _emit(args, out, {"jobs": [fmt.job_info_json(i) for i in infos]}, text)


def cmd_retry_failed(args, out, err):
    with make_client(args) as client:
        n = client.retry_failed(
            args.queue,
            priority=args.priority,
            attempts=args.attempts,
            run_after_ms=args.run_after,
            limit=args.limit,
        )
    _emit(args, out, {"retried": n}, f"Retried {n} failed jobs")


def cmd_delete_jobs(args, out, err):
    with make_client(args) as client:
        n = client.delete_jobs(
            args.queue,
            args.state,
            priority=args.priority,
            body_regex=args.body_regex,
            limit=args.limit,
        )
    _emit(args, out, {"deleted": n}, f"Deleted {n} jobs")


def cmd_checkpoint(args, out, err):
    requests = [
        CheckpointRequest(
            d,
            claim=args.claim,
            new_body=args.new_body,
            move_to_pending=args.move_to_pending,
            run_after_ms=args.run_after,
            attempts_allowed=args.attempts,
            prepend_status=args.prepend_status,
        )
        for d in args.descriptors
    ]
    with make_client(args) as client:
        client.checkpoint(args.queue, requests)
    _emit(args, out, {"checkpointed": args.descriptors}, f"Checkpointed {len(requests)} job(s)")


def cmd_stats(args, out, err):
    if args.watch is not None and args.watch <= 0:
        raise UsageError("--watch must be a positive number of seconds")
    return cli_stats.run(args, out, lambda: make_client(args))


def cmd_hash_password(args, out, err):
    password = args.password
    if password is None:
        if sys.stdin.isatty():
            password = getpass.getpass("password: ")
            if getpass.getpass("again: ") != password:
                raise UsageError("passwords differ")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("empty password")
    hashed = hash_password(password, iterations=args.iterations)
    _emit(args, out, {"password_hash": hashed}, hashed)


# ---- load modes ----


def _load(args, out, err, mode: str) -> int:
    if args.num_queries == 0 or args.num_queries < -1:
        raise UsageError("--num_queries must be >= 1, or -1 for until --duration")
    options = cli_load.LoadOptions(
        num_queries=args.num_queries,
        duration=args.duration,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        success_percent=getattr(args, "success_percent", 100),
        piggyback=getattr(args, "piggyback", False),
    )
    live = not args.json and getattr(out, "isatty", lambda: False)()
    with make_client(args) as client:
        if mode == "enqueue":
            worker = cli_load.enqueue_worker(client, args.queue, _job_maker(args))
        else:
            worker = cli_load.dequeue_worker(client, args.queue)
        summary = cli_load.LoadRun(mode, options, out, err, args.json, live).run(worker)
    return EXIT_OK if summary["errors"] == 0 else EXIT_SERVER


def _job_maker(args):
    """Batches of the given bodies (cycled), or `task_<random>` bodies like the original."""
    bodies = _bodies(args)

    def make(n: int) -> list[Job]:
        if bodies:
            return [_job(args, bodies[i % len(bodies)]) for i in range(n)]
        return [_job(args, f"task_{random.getrandbits(31)}".encode()) for _ in range(n)]

    return make


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
