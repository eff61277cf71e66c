"""`pinlater`: the operator CLI, built on worker_sdk.client (one client implementation).

Subcommands are named after the original PinLaterClientTool modes (create, delete, enqueue,
dequeue, check_dequeue, lookup, get_queue_names, get_job_count, scan, retry_failed,
delete_jobs, checkpoint) plus `hash-password`, `stats`, `schedules`, and `pause`/`resume`
(through the server's admin API, pinlater.cli.admin_client); the options are in
pinlater.cli.parser, the commands here.

Exit codes: 0 success, 1 the server reported an error (its ErrorCode name is printed),
2 usage or input error, 3 the server could not be reached or the connection failed.
"""

from __future__ import annotations

import argparse
import getpass
import itertools
import random
import ssl
import sys
from collections.abc import Callable
from typing import TextIO
from urllib.parse import quote

from pinlater.cli import format as fmt
from pinlater.cli import load as cli_load
from pinlater.cli import parser as cli_parser
from pinlater.cli import stats as cli_stats
from pinlater.cli.admin_client import (
    AdminApiError,
    AdminClient,
    AdminUnreachable,
    admin_password,
    http_context,
)
from pinlater.cli.parser import SERVICE, UsageError
from pinlater.common.ledger_counters import COUNTERS as LEDGER_COUNTERS
from pinlater.common.passwords import hash_password
from pinlater.common.serverset import ServerSetError
from pinlater.common.tls import client_context
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import PinLaterError, PinLaterTransportError, PriorityNotSupported
from worker_sdk.models import AckInfo, CheckpointRequest, Job

EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_CONNECTION = 0, 1, 2, 3
#: bulk commands without --priority stop at the first priority the server refuses, or here
MAX_PRIORITIES = 100


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
    except (PinLaterTransportError, AdminUnreachable) as exc:
        err.write(f"pinlater: connection failed: {getattr(exc, 'message', exc)}\n")
        return EXIT_CONNECTION
    except AdminApiError as exc:
        err.write(f"pinlater: server error: {exc}\n")
        return EXIT_SERVER
    except PinLaterError as exc:
        err.write(f"pinlater: server error: {exc}\n")
        return EXIT_SERVER
    except KeyboardInterrupt:
        err.write("pinlater: interrupted\n")
        return 130


def parse_args(argv: list[str] | None, out: TextIO = sys.stdout) -> argparse.Namespace:
    return cli_parser.parse_args(argv, HANDLERS, out)


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


def _password(args) -> str:
    password = admin_password(args)
    if password is None:
        raise UsageError("no password: use --password or $PINLATER_ADMIN_PASSWORD")
    return password


def cmd_delete(args, out, err):
    password = _password(args)
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


def _job(args, body: bytes, unique_key: str | None = None) -> Job:
    return Job(
        body,
        priority=args.priority,
        run_after_ms=args.run_after,
        attempts=args.attempts,
        custom_status=args.status,
        unique_key=unique_key,
    )


def cmd_enqueue(args, out, err):
    keys = args.unique_keys
    if args.num_queries is not None:
        if keys:
            raise UsageError("--unique-key does not go with load mode (--num_queries)")
        return _load(args, out, err, "enqueue")
    bodies = [body for body in _bodies(args) for _ in range(args.count)]
    if keys and len(keys) != len(bodies):
        raise UsageError(
            f"--unique-key given {len(keys)} time(s) for {len(bodies)} job(s): give one per job"
        )
    jobs = [_job(args, body, keys[i] if keys else None) for i, body in enumerate(bodies)]
    with make_client(args) as client:
        descriptors = client.enqueue(args.queue, jobs)
    _emit(args, out, {"enqueued": descriptors}, "\n".join(descriptors))


def cmd_dequeue(args, out, err):
    if args.num_queries is not None:
        if not 0 <= args.success_percent <= 100:
            raise UsageError("--dequeue_success_percent must be 0..100")
        return _load(args, out, err, "dequeue")
    with make_client(args) as client:
        jobs = client.dequeue(
            args.queue,
            args.limit,
            dry_run=args.dry_run,
            wait_ms=0 if args.dry_run else args.wait_ms,
        )
        if args.ack and jobs and not args.dry_run:
            acks = [
                AckInfo(j.descriptor, claim=j.claim, retry_delay_ms=args.retry_delay_ms)
                for j in jobs
            ]
            client.ack(args.queue, **{"succeeded" if args.ack == "success" else "failed": acks})
    acked = args.ack if args.ack and jobs and not args.dry_run else None
    data = {"jobs": [fmt.dequeued_json(j) for j in jobs], "acked": acked}
    text = fmt.dequeued_table(jobs) if jobs else "No jobs dequeued."
    if acked:
        text += f"\nAcked {len(jobs)} job(s) as {acked}."
    _emit(args, out, data, text)


def cmd_check_dequeue(args, out, err):
    with make_client(args) as client:
        available = bool(client.dequeue(args.queue, 1, dry_run=True))
    _emit(
        args, out, {"available": available}, f"Jobs available for dequeue: {str(available).lower()}"
    )


def cmd_lookup(args, out, err):
    descriptors = args.descriptors + args.positional
    if not descriptors:
        raise UsageError("lookup: give job descriptors (or --job_descriptor D ...)")
    with make_client(args) as client:
        found = client.lookup(descriptors, include_body=not args.no_body)
    missing = [d for d in descriptors if d not in found]
    infos = [found[d] for d in descriptors if d in found]
    blocks = [fmt.job_info_block(i, with_body=not args.no_body) for i in infos]
    text = "\n\n".join(blocks + [f"not found: {d}" for d in missing])
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
    what = args.state.name.lower() + (" (future)" if args.future else "")
    if args.priority is not None:
        what += f" (priority {args.priority})"
    _emit(args, out, {"queue": args.queue, "state": args.state.name, "count": n}, f"{n} {what}")


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
        done = _each_priority(
            args,
            lambda priority, limit: client.retry_failed(
                args.queue,
                priority=priority,
                attempts=args.attempts,
                run_after_ms=args.run_after,
                limit=limit,
            ),
        )
    n = sum(done.values())
    _emit(args, out, {"retried": n, "by_priority": done}, f"Retried {n} failed jobs")


def cmd_delete_jobs(args, out, err):
    with make_client(args) as client:
        done = _each_priority(
            args,
            lambda priority, limit: client.delete_jobs(
                args.queue, args.state, priority=priority, body_regex=args.body_regex, limit=limit
            ),
        )
    n = sum(done.values())
    _emit(args, out, {"deleted": n, "by_priority": done}, f"Deleted {n} jobs")


def _each_priority(args, call: Callable[[int, int], int]) -> dict[int, int]:
    """`call(priority, limit)` for --priority, or for priorities 1, 2, ... until the server
    refuses one as not supported (or --limit jobs were handled); jobs handled per priority."""
    if args.priority is not None:
        return {args.priority: call(args.priority, args.limit)}
    done: dict[int, int] = {}
    left = args.limit
    for priority in itertools.count(1):
        if left <= 0 or priority > MAX_PRIORITIES:
            break
        try:
            done[priority] = call(priority, left)
        except PriorityNotSupported:
            if priority == 1:
                raise
            break
        left -= done[priority]
    return done


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
    context = _http_context(args)
    password = admin_password(args, prompt=False)
    settings = None
    if password is not None and cli_stats.metrics_url(args) is not None:
        admin = AdminClient.from_args(args, password, context)

        def settings():
            return {q["name"]: q["settings"] for q in admin.get("/api/v1/queues")["queues"]}

    return cli_stats.run(args, out, lambda: make_client(args), context=context, settings=settings)


def cmd_pause(args, out, err):
    return _pause_or_resume(args, out, "pause")


def cmd_resume(args, out, err):
    return _pause_or_resume(args, out, "resume")


def _pause_or_resume(args, out, action: str) -> int:
    """Through the admin API: the setting is stored in the backend, so every server sharing
    it applies it within admin.settings_poll_seconds (1 s)."""
    admin = AdminClient.from_args(args, _password(args), _http_context(args))
    result = admin.queue_action(args.queue, action, {})
    paused = result["settings"]["paused"]
    text = f"{'Paused' if action == 'pause' else 'Resumed'} queue: {args.queue}"
    if action == "resume" and paused["value"]:
        text += f" (still paused: {result.get('note', paused['source'])})"
    _emit(args, out, result, text)
    return EXIT_OK


def cmd_audit(args, out, err):
    """Through the admin API, which reads each book in one snapshot on its shard. Exit code 1
    when any book does not balance."""
    admin = AdminClient.from_args(args, _password(args), _http_context(args))
    path = "/api/v1/ledger"
    if args.queue is not None:
        path += "?queue=" + quote(args.queue, safe="")
    result = admin.get(path)
    rows = [
        (
            q["queue"],
            shard,
            *(book["counters"][name] for name in LEDGER_COUNTERS),
            book["present"],
            "yes" if book["balanced"] else f"NO ({book['imbalance']:+d})",
        )
        for q in result["queues"]
        for shard, book in q["shards"].items()
    ]
    headers = ("queue", "shard", *(AUDIT_HEADERS.get(n, n) for n in LEDGER_COUNTERS))
    headers += ("present", "balanced")
    _emit(args, out, result, fmt.table(headers, rows) if rows else "(no queues)")
    return EXIT_OK if all(q["balanced"] for q in result["queues"]) else EXIT_SERVER


#: column titles shorter than their counter's name
AUDIT_HEADERS = {"deduplicated": "dedup"}


def cmd_shards(args, out, err):
    """The admin API's shard view: a draining (dequeue_only) shard shows its unfinished jobs
    per queue as last counted; 0 left means it can leave the shard map. With clusters, each
    shard's cluster comes first."""
    admin = AdminClient.from_args(args, _password(args), _http_context(args))
    data = admin.get("/api/v1/shards")
    clustered = any(shard.get("cluster") for shard in data["shards"])
    rows = [_shard_row(shard, clustered) for shard in data["shards"]]
    headers: tuple[str, ...] = ("shard", "healthy", "mode", "unfinished jobs left", "counted (UTC)")
    if clustered:
        headers = ("cluster", *headers)
    _emit(args, out, data, fmt.table(headers, rows))
    return EXIT_OK


def _shard_row(shard: dict, clustered: bool) -> tuple[str, ...]:
    drain = shard.get("draining")
    left = "-"
    if drain is not None:
        per_queue = ", ".join(f"{q}: {n}" for q, n in sorted(drain["jobs"].items()))
        left = f"{drain['total']}" + (f" ({per_queue})" if per_queue else " (drained)")
    row = (
        shard["name"],
        "yes" if shard["healthy"] else "NO",
        "dequeue only" if shard["dequeue_only"] else "serving",
        left,
        fmt.show_time(drain["counted_at_ms"]) if drain else "-",
    )
    return (shard.get("cluster") or "-", *row) if clustered else row


def _http_context(args):
    try:
        return http_context(args)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load TLS files: {exc}") from None


def cmd_schedules(args, out, err):
    with make_client(args) as client:
        schedules = client.schedules(args.queue, count=args.count)
    rows = [
        (
            s.queue,
            s.name,
            s.cron,
            s.timezone,
            s.missed,
            ", ".join(fmt.show_time(ms) for ms in s.next_runs_ms) or "-",
        )
        for s in schedules
    ]
    headers = ("queue", "schedule", "cron", "timezone", "missed", "next runs (UTC)")
    text = fmt.table(headers, rows) if rows else "(no schedules)"
    data = {
        "schedules": [
            {
                "queue": s.queue,
                "name": s.name,
                "cron": s.cron,
                "timezone": s.timezone,
                "missed": s.missed,
                "catch_up_seconds": s.catch_up_seconds,
                "priority": s.priority,
                "attempts": s.attempts,
                "next_runs": [fmt.show_time(ms) for ms in s.next_runs_ms],
            }
            for s in schedules
        ]
    }
    _emit(args, out, data, text)


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


HANDLERS: dict[str, Callable] = {
    "create": cmd_create,
    "delete": cmd_delete,
    "enqueue": cmd_enqueue,
    "dequeue": cmd_dequeue,
    "check_dequeue": cmd_check_dequeue,
    "lookup": cmd_lookup,
    "get_queue_names": cmd_queue_names,
    "get_job_count": cmd_count,
    "scan": cmd_scan,
    "retry_failed": cmd_retry_failed,
    "delete_jobs": cmd_delete_jobs,
    "checkpoint": cmd_checkpoint,
    "stats": cmd_stats,
    "pause": cmd_pause,
    "audit": cmd_audit,
    "resume": cmd_resume,
    "shards": cmd_shards,
    "schedules": cmd_schedules,
    "hash-password": cmd_hash_password,
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
