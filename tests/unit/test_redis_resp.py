"""backends/redis_resp.py encodes exactly what redis-py (hiredis) would send for the same
arguments; the Redis shard suites check that Redis accepts it."""

from __future__ import annotations

import hiredis
import pytest
from redis.exceptions import DataError

from backends import redis_resp
from pinlater.storage.models import NewJob

SHA = "0123456789abcdef0123456789abcdef01234567"
JOBS = [
    NewJob(body=b"plain"),
    NewJob(body=b"plain"),  # same shape: its head comes from the cache
    NewJob(b"\xff\x00\r\n", 3, 1_700_000_000_000, 5, "caf\u00e9 \ud800", "key-1"),
    NewJob(body=b"", custom_status="x" * 300),
    NewJob(body=b"second of a shape", priority=3, run_after_ms=0, attempts_allowed=5),
]


def _reference(keyed: bool, cap: int) -> bytes:
    flat: list = []
    for job in JOBS:
        flat += [
            job.priority,
            "" if job.run_after_ms is None else job.run_after_ms,
            job.attempts_allowed,
            job.custom_status[:cap].encode("utf-8", "surrogatepass"),
            job.body,
        ]
        if keyed:
            flat.append(job.unique_key or "")
    return hiredis.pack_command(("EVALSHA", SHA, 1, "reg", "q", "pfx", "-5", len(JOBS), *flat))


@pytest.mark.parametrize("keyed", [False, True])
def test_job_args_encode_as_redis_py_would(keyed: bool) -> None:
    packed = redis_resp.job_args(JOBS, 250, keyed=keyed)
    assert packed.arguments == len(JOBS) * (6 if keyed else 5)
    sent = redis_resp.evalsha(SHA, "reg", ["q", "pfx", "-5", len(JOBS), packed])
    assert sent == _reference(keyed, 250)


def test_plain_arguments_and_refusals() -> None:
    args = ["q", b"\x00raw", 7, -3, 2.5, bytearray(b"ba"), memoryview(b"mv")]
    same = ["q", b"\x00raw", 7, -3, 2.5, b"ba", b"mv"]
    assert redis_resp.evalsha(SHA, "k", args) == hiredis.pack_command(
        ("EVALSHA", SHA, 1, "k", *same)
    )
    for bad in (True, None, object()):
        with pytest.raises(DataError):
            redis_resp.evalsha(SHA, "k", [bad])
