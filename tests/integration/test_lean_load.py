"""scripts/lean_load.py (the ceiling benchmark's load client) against a real server: its
pre-encoded enqueues store what they claim, its dequeue+ack finishes every job, and a failed
request raises instead of being counted."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from worker_sdk import JobState, PinLaterClient

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lean_load", ROOT / "scripts" / "lean_load.py")
assert _spec is not None and _spec.loader is not None
lean_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lean_load)

_names = itertools.count()


@pytest.fixture
def client(admin_server):
    with PinLaterClient([f"{admin_server.host}:{admin_server.port}"], source="lean-test") as c:
        yield c


@pytest.fixture
def queue(client):
    name = f"lean_q{next(_names)}"
    client.create_queue(name)
    return name


def _address(server) -> str:
    return f"{server.host}:{server.port}"


def test_enqueue_then_dequeue_ack_moves_every_job_through(admin_server, client, queue):
    latencies, jobs, elapsed = lean_load.run(
        _address(admin_server), "enqueue", queue, 7, 30, b"lean-body", 3
    )
    assert (jobs, len(latencies)) == (210, 7) and elapsed > 0
    assert client.count(queue, JobState.PENDING) == 210
    assert [job.body for job in client.dequeue(queue, 2, dry_run=True)] == [b"lean-body"] * 2

    _, drained, _ = lean_load.run(_address(admin_server), "dequeue", queue, 8, 30, b"", 2)
    assert drained == 210
    assert client.count(queue, JobState.SUCCEEDED) == 210
    assert client.count(queue, JobState.IN_PROGRESS) == 0


def test_a_refused_enqueue_raises_with_the_servers_reason(admin_server):
    with pytest.raises(RuntimeError, match=r"enqueue failed.*lean_missing"):
        lean_load.run(_address(admin_server), "enqueue", "lean_missing", 1, 5, b"x", 1)


def test_the_reply_check_reads_only_a_success_with_the_batchs_count(admin_server, queue):
    conn = lean_load.Connection(_address(admin_server))
    try:
        reply = conn.call(lean_load.enqueue_frame(queue, b"x", 4))
    finally:
        conn.close()
    assert lean_load.check_enqueued(reply, 4) == 4
    with pytest.raises(RuntimeError, match="enqueue failed"):
        lean_load.check_enqueued(reply, 5)
