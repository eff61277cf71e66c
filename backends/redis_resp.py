"""RESP encoding of the Redis shard's EVALSHA calls, without redis-py's command packer.

Why: an enqueue of 100 jobs is one EVALSHA with 500+ arguments. redis-py's packer walks them
in Python twice (a bytes() check per argument, then hiredis) and encodes the same priority,
attempts and status of every job again: ~2 us per job, the largest single cost of the
server's Redis enqueue path (py-spy). Here the per-job fields that repeat across a batch are
encoded once per distinct value and each job adds one formatted piece.

Arguments are encoded as redis-py's default encoder does: bytes as they are, str as UTF-8
(strict), int and float as their repr; anything else (bool included) is a DataError.
`Packed` is a run of arguments already encoded (see `job_args`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from redis.exceptions import DataError

from pinlater.storage.models import NewJob


class Packed(NamedTuple):
    """`arguments` arguments already encoded as RESP bulk strings, back to back."""

    arguments: int
    data: bytes


def encode(value: Any) -> bytes:
    """One argument's bytes (redis-py's encoding)."""
    kind = type(value)
    if kind is bytes:
        return value
    if kind is str:
        return value.encode()
    if kind is int:
        return b"%d" % value
    if kind is float:
        return repr(value).encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise DataError(f"Invalid input of type: {kind.__name__!r} for a Redis argument")


def bulk(value: Any) -> bytes:
    """One argument as a RESP bulk string."""
    data = encode(value)
    return b"$%d\r\n%b\r\n" % (len(data), data)


def evalsha(sha: str, key: str, args: Sequence[Any]) -> bytes:
    """`EVALSHA sha 1 key *args` as one RESP command; `Packed` items count as their
    arguments."""
    pieces = []
    count = 0
    for arg in args:
        if type(arg) is Packed:
            pieces.append(arg.data)
            count += arg.arguments
        else:
            pieces.append(bulk(arg))
            count += 1
    head = b"*%d\r\n$7\r\nEVALSHA\r\n%b$1\r\n1\r\n%b" % (count + 4, bulk(sha), bulk(key))
    return head + b"".join(pieces)


def job_args(jobs: Sequence[NewJob], status_cap: int, keyed: bool) -> Packed:
    """enqueue.lua's per-job arguments (priority, run after or "", attempts, custom status,
    body), and with `keyed` enqueue_keyed.lua's (the same and the unique key or "")."""
    heads: dict[tuple, bytes] = {}
    pieces = []
    for job in jobs:
        shape = (job.priority, job.run_after_ms, job.attempts_allowed, job.custom_status)
        head = heads.get(shape)
        if head is None:
            head = heads[shape] = _head(job, status_cap)
        body = job.body
        if keyed:
            pieces.append(
                b"%b$%d\r\n%b\r\n%b" % (head, len(body), body, bulk(job.unique_key or ""))
            )
        else:
            pieces.append(b"%b$%d\r\n%b\r\n" % (head, len(body), body))
    return Packed(len(jobs) * (6 if keyed else 5), b"".join(pieces))


def _head(job: NewJob, status_cap: int) -> bytes:
    run_after = b"" if job.run_after_ms is None else b"%d" % int(job.run_after_ms)
    status = job.custom_status[:status_cap].encode("utf-8", "surrogatepass")
    return b"".join([bulk(job.priority), bulk(run_after), bulk(job.attempts_allowed), bulk(status)])
