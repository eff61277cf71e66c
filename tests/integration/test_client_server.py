"""worker_sdk.PinLaterClient against a real `pinlater-server` process (SQLite backend)."""

from __future__ import annotations

import itertools

import pytest

from pinlater.errors import PasswordInvalid, QueueNotFound
from tests.support.server_process import ADMIN_PASSWORD, ServerProcess, admin_config
from worker_sdk import (
    AckInfo,
    Acks,
    CheckpointRequest,
    Job,
    JobState,
    PinLaterClient,
    PinLaterTransportError,
)

CONFIG = admin_config()
_names = itertools.count()


@pytest.fixture
def server(admin_server):
    return admin_server


@pytest.fixture
def client(server):
    with PinLaterClient([f"{server.host}:{server.port}"], source="sdk-test:worker1") as c:
        yield c


@pytest.fixture
def queue(client):
    name = f"sdk_q{next(_names)}"
    client.create_queue(name)
    return name


def test_enqueue_dequeue_ack_round_trip_with_claims(client, queue):
    ids = client.enqueue(queue, [b"\xff\x00binary", Job(b"second", attempts=3)])
    assert len(ids) == 2 and all(i.startswith(f"{queue}:s") for i in ids)
    jobs = {j.descriptor: j for j in client.dequeue(queue, 10)}
    assert set(jobs) == set(ids)
    assert jobs[ids[0]].body == b"\xff\x00binary"
    assert (jobs[ids[1]].attempts_allowed, jobs[ids[1]].attempts_remaining) == (3, 3)
    assert all(j.claim and j.claim.endswith(":sdk-test:worker1") for j in jobs.values())
    client.ack(
        queue,
        succeeded=[jobs[ids[0]]],
        failed=[AckInfo(ids[1], claim=jobs[ids[1]].claim, append_status="oops")],
    )
    infos = client.lookup(ids, include_body=True)
    assert infos[ids[0]].state is JobState.SUCCEEDED
    assert infos[ids[0]].body == b"\xff\x00binary"
    assert infos[ids[1]].state is JobState.PENDING
    assert infos[ids[1]].attempts_remaining == 2 and "oops" in infos[ids[1]].custom_status


def test_ack_with_a_stale_claim_is_a_no_op(client, server, queue):
    [job_id] = client.enqueue(queue, [b"x"])
    [first] = client.dequeue(queue, 1)
    client.checkpoint(queue, [CheckpointRequest(job_id, claim=first.claim, move_to_pending=True)])
    with PinLaterClient([f"{server.host}:{server.port}"], source="sdk-test:worker2") as other:
        [second] = other.dequeue(queue, 1)
    assert second.descriptor == job_id and second.claim != first.claim
    client.ack(queue, succeeded=[first])  # the first worker's claim no longer holds
    info = client.lookup([job_id])[job_id]
    assert info.state is JobState.IN_PROGRESS and info.claim == second.claim


def test_piggybacked_acks_are_applied_before_the_dequeue(client, queue):
    client.enqueue(queue, [b"a"])
    [job] = client.dequeue(queue, 1)
    client.enqueue(queue, [b"b"])
    [next_job] = client.dequeue(queue, 1, Acks(succeeded=(job,)))
    assert next_job.body == b"b"
    assert client.count(queue, JobState.SUCCEEDED) == 1


def test_dry_run_does_not_claim(client, queue):
    client.enqueue(queue, [b"a"])
    [peek] = client.dequeue(queue, 5, dry_run=True)
    assert peek.claim is None
    assert client.count(queue, JobState.PENDING) == 1


def test_scan_iterates_every_page(client, queue):
    ids = client.enqueue(queue, [f"job{i}".encode() for i in range(7)])
    scanned = list(client.scan(queue, JobState.PENDING, limit=3))
    assert sorted(j.descriptor for j in scanned) == sorted(ids)
    assert len(list(client.scan(queue, JobState.PENDING, limit=3, max_jobs=4))) == 4


def test_retry_failed_and_delete_jobs(client, queue):
    [job_id] = client.enqueue(queue, [Job(b"f", attempts=1)])
    [job] = client.dequeue(queue, 1)
    client.ack(queue, failed=[job])
    assert client.count(queue, JobState.FAILED) == 1
    assert client.retry_failed(queue, attempts=2) == 1
    info = client.lookup([job_id])[job_id]
    assert (info.state, info.attempts_remaining) == (JobState.PENDING, 2)
    assert client.delete_jobs(queue, JobState.PENDING) == 1
    assert client.lookup([job_id]) == {}


def test_typed_errors_from_the_server(client):
    with pytest.raises(QueueNotFound) as caught:
        client.count("sdk_missing_queue")
    assert caught.value.queue == "sdk_missing_queue"


def test_delete_queue_needs_the_admin_password(client, queue):
    with pytest.raises(PasswordInvalid):
        client.delete_queue(queue, "wrong")
    assert queue in client.queue_names()
    client.delete_queue(queue, ADMIN_PASSWORD)
    assert queue not in client.queue_names()


def test_client_survives_a_server_restart_and_fails_over(tmp_path):
    with (
        ServerProcess(CONFIG, tmp_path / "a", name="a") as a,
        ServerProcess(CONFIG, tmp_path / "b", name="b") as b,
    ):
        servers = [f"{a.host}:{a.port}", f"{b.host}:{b.port}"]
        with PinLaterClient(servers, source="sdk-test:failover", retries=2) as client:
            for _ in range(4):
                client.create_queue("failover_q")  # warms connections to both servers
            a.kill()
            for _ in range(6):
                assert "failover_q" in client.queue_names()
            b.kill()
            with pytest.raises(PinLaterTransportError):
                client.queue_names()
            restarted = ServerProcess(
                CONFIG, tmp_path / "b", name="b2", port=b.port, data_dir=b.data_dir
            )
            with restarted:
                assert "failover_q" in client.queue_names()
