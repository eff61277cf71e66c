"""kill -9 of one MariaDB instance under a stream of enqueues, dequeues and acks through the
sharded store: the store keeps serving from the other instance, reports the dead shards
unhealthy, takes them back after a restart on the same datadir (probe_unhealthy), and every
enqueue and ack that returned success is still there. With innodb_flush_log_at_trx_commit=0 the
same checker must detect a loss (negative control), or it proves nothing.

Bounded: loopback only, a few hundred small batches, deadlines on every loop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from backends.mysql import MySQLBackend
from pinlater.errors import PinLaterError
from pinlater.storage.contract import StorageLimits
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from pinlater.storage.sharded import ShardedBackend
from tests.support import mysql_env

pytestmark = pytest.mark.backend("mysql")

BATCH = 10
BATCHES_BEFORE_KILL = 30
BATCHES_AFTER_KILL = 30
DEADLINE_SECONDS = 60
SOURCE = "crash-test"
QUEUE = "crashq"


@dataclass
class History:
    """What the client was told succeeded."""

    enqueued: dict[JobDescriptor, bytes] = field(default_factory=dict)
    acked: set[JobDescriptor] = field(default_factory=set)
    batches: int = 0
    batches_after_kill: int = 0
    failures: int = 0
    dequeued_during_outage: set[str] = field(default_factory=set)


def stream(
    store: ShardedBackend,
    history: History,
    killed: threading.Event,
    ready: threading.Event,
    stop: threading.Event,
) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    serial = 0
    while not stop.is_set() and time.monotonic() < deadline:
        bodies = [b"job-%d" % (serial + i) for i in range(BATCH)]
        serial += BATCH
        after_kill = killed.is_set()
        try:
            descriptors = store.enqueue(QUEUE, [NewJob(body=b) for b in bodies])
            history.enqueued.update(zip(descriptors, bodies, strict=True))
            got = store.dequeue(QUEUE, BATCH // 2, SOURCE)
            acks = [
                (d.shard, Ack(d.priority, d.local_id, ClaimMatch(SOURCE, job.claim)))
                for d, job in got
            ]
            if store.ack(QUEUE, acks, []) == len(acks):
                history.acked.update(
                    JobDescriptor(QUEUE, name, a.priority, a.local_id) for name, a in acks
                )
            if after_kill:
                history.batches_after_kill += 1
                history.dequeued_during_outage.update(d.shard for d, _ in got)
        except PinLaterError:
            history.failures += 1
            time.sleep(0.02)
        history.batches += 1
        if history.batches >= BATCHES_BEFORE_KILL:
            ready.set()
        if history.batches_after_kill >= BATCHES_AFTER_KILL:
            return


def losses(store: ShardedBackend, history: History) -> tuple[set, set]:
    """(accepted enqueues that are gone or changed, acks that did not hold)."""
    found = store.lookup(list(history.enqueued), True)
    lost = {d for d, body in history.enqueued.items() if d not in found or found[d].body != body}
    unacked = {d for d in history.acked if d not in found or found[d].state != JobState.SUCCEEDED}
    return lost, unacked


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def crash_run(tmp_path, flush: int) -> tuple[History, set, set, ShardedBackend]:
    with (
        mysql_env.running_server(tmp_path / "a", flush_log_at_trx_commit=flush) as victim,
        mysql_env.running_server(tmp_path / "b") as survivor,
    ):
        backend = MySQLBackend({}, StorageLimits())
        specs = MySQLBackend.parse_shards(
            [
                victim.shard("1", databases_per_queue=2, connect_timeout_seconds=0.5),
                survivor.shard("2"),
            ],
            {},
            "backend.shards",
        )
        store = ShardedBackend(
            backend, specs, num_priorities=3, retries=2, unhealthy_after_failures=2
        )
        try:
            store.create_queue(QUEUE)
            history = History()
            killed, ready, stop = threading.Event(), threading.Event(), threading.Event()
            producer = threading.Thread(target=stream, args=(store, history, killed, ready, stop))
            producer.start()
            try:
                assert ready.wait(DEADLINE_SECONDS), "the stream did not get going"
                victim.kill()  # mid-stream: requests are in flight as this happens
                killed.set()
                producer.join(DEADLINE_SECONDS + 5)
            finally:
                stop.set()
                producer.join(10)
            assert history.batches_after_kill >= BATCHES_AFTER_KILL, "no service after kill"
            assert not store.health.is_healthy("1") and not store.health.is_healthy("1d1")
            assert store.health.is_healthy("2")
            victim.start()  # same port, same datadir: InnoDB crash recovery
            wait_for(
                lambda: (
                    sorted(store.probe_unhealthy()) == ["1", "1d1"] or not store.health.unhealthy()
                ),
                30,
                "the restarted shards to come back",
            )
            assert all(store.health.is_healthy(n) for n in ("1", "1d1", "2"))
            lost, unacked = losses(store, history)
            return history, lost, unacked, store
        finally:
            store.close()


@pytest.mark.slow
def test_store_survives_kill_minus_nine_of_one_instance_and_loses_nothing_accepted(tmp_path):
    history, lost, unacked, _ = crash_run(tmp_path, flush=1)
    assert history.dequeued_during_outage <= {"2"}
    assert {d.shard for d in history.enqueued} == {"1", "1d1", "2"}
    assert history.acked
    assert lost == set()
    assert unacked == set()


@pytest.mark.slow
def test_negative_control_with_lazy_log_flush_the_checker_detects_loss(tmp_path):
    history, lost, unacked, _ = crash_run(tmp_path, flush=0)
    assert history.enqueued and history.acked
    assert lost or unacked  # the checker sees what innodb_flush_log_at_trx_commit=0 loses
