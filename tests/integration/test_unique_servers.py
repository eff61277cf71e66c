"""Unique keys and periodic jobs across real server processes, on SQLite, Redis and MariaDB:
one key enqueued 1,000 times from 8 threads through two servers is one job; an enqueue whose
reply was lost is retried by the SDK (keyed) and stores one job; three servers running an
every-second schedule store each slot once (real time, a few seconds)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime
from functools import partial

import pytest
import yaml

from pinlater.storage.shard_kit.races import run_threads
from tests.faults.proxy import FaultProxy
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section
from worker_sdk.client import PinLaterClient
from worker_sdk.errors import PinLaterTransportError
from worker_sdk.models import Job, JobState

CRON_QUEUE = "cron_q"
QUEUE_CONFIG = {
    "queues": {
        CRON_QUEUE: {
            "schedules": [
                {
                    "name": "tick",
                    "cron": "* * * * * *",
                    "body": "tick {slot}",
                    "missed": "skip",
                    "catch_up_seconds": 5,
                }
            ]
        }
    }
}


@pytest.fixture(scope="module", params=KINDS)
def servers(request, tmp_path_factory):
    """Three servers on one fresh storage of each kind, all running the every-second schedule
    of `cron_q` (its enqueues fail until the test creates the queue)."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"unique-{kind}")
    queue_config = tmp / "queues.yaml"
    queue_config.write_text(yaml.safe_dump(QUEUE_CONFIG))
    with contextlib.ExitStack() as stack:
        section = stack.enter_context(backend_section(kind, tmp))
        config = {
            "backend": section,
            "janitor": {"enabled": False},
            "queue_config": str(queue_config),
        }
        yield [stack.enter_context(ServerProcess(config, tmp, name=f"server{i}")) for i in range(3)]


def address(server: ServerProcess) -> str:
    return f"{server.host}:{server.port}"


def test_one_key_enqueued_1000_times_from_8_threads_through_two_servers_is_one_job(servers):
    client = PinLaterClient([address(s) for s in servers[:2]], pool_size=8, timeout=30)
    client.create_queue("once")
    answers: list[str] = []
    lock = threading.Lock()

    def enqueuer(n: int) -> None:
        for i in range(125):
            [d] = client.enqueue("once", [Job(b"%d-%d" % (n, i), unique_key="order-1")])
            with lock:
                answers.append(d)

    run_threads([partial(enqueuer, n) for n in range(8)], timeout=120)
    assert len(answers) == 1000 and len(set(answers)) == 1
    assert client.count("once", JobState.PENDING) == 1
    client.close()


def test_a_keyed_enqueue_whose_reply_was_lost_is_retried_and_stores_one_job(servers):
    first, second = servers[0], servers[1]
    with FaultProxy((first.host, first.port)) as proxy:
        # the first try goes through the proxy, which cuts the reply after the server stored
        # the job; the retry goes to the other server
        with PinLaterClient([address(second)]) as setup:
            setup.create_queue("retried")
        with PinLaterClient([proxy.address, address(second)], retries=2, timeout=5) as client:
            proxy.cut_after(8, "down")
            [d] = client.enqueue("retried", [Job(b"a", unique_key="payment-9")])  # via proxy
            assert proxy.faults["cut"] == 1
            proxy.heal()
            assert client.count("retried", JobState.PENDING) == 1
            assert client.enqueue("retried", [Job(b"b", unique_key="payment-9")]) == [d]
        # without a key the client does not retry: the caller learns it may have been stored
        with PinLaterClient([proxy.address, address(second)], retries=2, timeout=5) as plain:
            proxy.cut_after(8, "down")
            with pytest.raises(PinLaterTransportError) as info:
                plain.enqueue("retried", [Job(b"c")])
            assert info.value.maybe_applied and proxy.faults["cut"] == 2
            proxy.heal()


def test_three_servers_store_each_slot_of_an_every_second_schedule_once(servers):
    client = PinLaterClient([address(s) for s in servers])
    client.create_queue(CRON_QUEUE)
    started = time.time()
    time.sleep(5)
    ended = time.time()
    jobs = client.dequeue(CRON_QUEUE, 1000, dry_run=True)
    bodies = [job.body.decode() for job in jobs]
    assert len(bodies) == len(set(bodies)), sorted(bodies)
    slots = sorted(
        datetime.strptime(b.removeprefix("tick "), "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=UTC)
        .timestamp()
        for b in bodies
    )
    # every second from creation on is there, once (earlier ones within the catch-up too)
    assert [s for s in slots if started + 1 < s <= ended - 1] == [
        float(s) for s in range(int(started) + 2, int(ended - 1) + 1)
    ]
    assert [view.name for view in client.schedules(CRON_QUEUE)] == ["tick"]
    client.close()
