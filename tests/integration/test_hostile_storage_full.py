"""Storage full is a clear answer on every RPC, never UNKNOWN (hostile load, item 9).

A real server over a socket on storage that runs out of room: SQLite on a small tmpfs (the
test mounts one; it needs root, as CI has) and Redis over its maxmemory with noeviction. Enqueue
answers ENQUEUE_REJECTED; every other call either works (it needed no room) or answers a named
error saying the storage is full; the server logs no traceback, loses nothing and serves again
once room is made.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinlater.idl import ErrorCode, PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.redis_env import running_server
from tests.support.server_process import ServerProcess

CTX = RequestContext(source="full-test")
#: body sizes used to fill the storage, largest first, down to a single byte
FILL_SIZES = (256 * 1024, 16 * 1024, 1024, 64, 1)
MAX_FILL_CALLS = 2000


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs and needs root (CI runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def enqueue(client, queue: str, size: int) -> None:
    job = t.PinLaterJob(body=b"x" * size)
    client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=[job]))


def fill(client, queue: str) -> PinLaterException:
    """Enqueue ever smaller jobs until even a one-byte job is refused; that refusal."""
    calls = 0
    for size in FILL_SIZES:
        while calls < MAX_FILL_CALLS:
            calls += 1
            try:
                enqueue(client, queue, size)
            except PinLaterException as exc:
                refusal = exc
                break
    assert calls < MAX_FILL_CALLS, "the storage never filled up"
    return refusal


def outcome(call) -> str:
    """'ok', or the error code name of the PinLaterException it raised."""
    try:
        call()
    except PinLaterException as exc:
        assert exc.errorCode != ErrorCode.UNKNOWN, exc.message
        assert "full" in exc.message, exc.message
        return ErrorCode._VALUES_TO_NAMES[exc.errorCode]
    return "ok"


def every_rpc_answers_clearly(client, queue: str, held: dict) -> dict[str, str]:
    descriptors = list(held)
    acks = [t.PinLaterJobAckInfo(jobDescriptor=d) for d in descriptors[:1]]
    checkpoint = t.PinLaterCheckpointJobRequest(jobDescriptor=descriptors[1], newBody=b"y" * 64)
    calls = {
        "dequeueJobs": lambda: client.dequeueJobs(
            CTX, t.PinLaterDequeueRequest(queueName=queue, limit=5)
        ),
        "ackDequeuedJobs": lambda: client.ackDequeuedJobs(
            CTX, t.PinLaterJobAckRequest(queueName=queue, jobsFailed=acks)
        ),
        "checkpointJobs": lambda: client.checkpointJobs(
            CTX, t.PinLaterCheckpointJobsRequest(queueName=queue, requests=[checkpoint])
        ),
        "retryFailedJobs": lambda: client.retryFailedJobs(
            CTX, t.PinLaterRetryFailedJobsRequest(queueName=queue)
        ),
        "createQueue": lambda: client.createQueue(CTX, "another_queue"),
    }
    return {name: outcome(call) for name, call in calls.items()}


def hold_two_jobs(client, queue: str) -> dict:
    enqueue(client, queue, 10)
    enqueue(client, queue, 10)
    reply = client.dequeueJobs(CTX, t.PinLaterDequeueRequest(queueName=queue, limit=2))
    assert len(reply.jobs) == 2
    return reply.jobs


def check_server(server: ServerProcess, make_room, keep_full=None) -> None:
    """Fill the storage through the server, then (`keep_full()` holding it full) try every
    other RPC, then `make_room()` and enqueue again."""
    client = server.client()
    client.createQueue(CTX, "q")
    held = hold_two_jobs(client, "q")
    refusal = fill(client, "q")
    assert refusal.errorCode == ErrorCode.ENQUEUE_REJECTED, refusal.message
    assert "full" in refusal.message
    if keep_full is not None:
        keep_full()
    outcomes = every_rpc_answers_clearly(client, "q", held)
    assert "SHARD_CONNECTION_FAILED" in outcomes.values(), outcomes  # something did need room
    make_room()
    enqueue(client, "q", 10)  # serves again without a restart
    client.close()
    assert "Traceback" not in server.log()


@pytest.mark.backend("sqlite")
def test_sqlite_on_a_full_disk_answers_every_call_clearly(tmp_path):
    with small_tmpfs(tmp_path / "disk", "3m") as disk:
        config = {"janitor": {"enabled": False}, "backend": {"data_dir": str(disk)}}
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * 512 * 1024)  # removed to make room afterwards
        with ServerProcess(config, tmp_path) as server:
            check_server(server, ballast.unlink)


def redis_kept_full(admin) -> None:
    """Set maxmemory to half of what Redis uses, so it stays over it. Redis counts transient
    buffers in used_memory (the query buffer that held a 256 KiB body) and frees them a moment
    later: right after the fill it used 3.09 MB of 3.09 MB, 0.5 s later 2.76 MB, and every call
    then had room (on a loaded machine the calls often came that late)."""
    admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) // 2)


@pytest.mark.backend("redis")
def test_redis_over_maxmemory_answers_every_call_clearly(tmp_path):
    with running_server(tmp_path / "redis") as redis_server:
        admin = redis_server.client()
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + 2 * 1024 * 1024)
        config = {
            "janitor": {"enabled": False},
            "backend": {"kind": "redis", "shards": [redis_server.shard("r1")]},
        }
        with ServerProcess(config, tmp_path) as server:
            check_server(
                server,
                make_room=lambda: admin.config_set("maxmemory", 0),
                keep_full=lambda: redis_kept_full(admin),
            )
