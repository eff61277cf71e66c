"""The prefetching broker's storage rules (docs/semantics.md `F-...`) on every backend, through
the sharded layer (`pinlater/storage/broker_store.py`) with the wire for everything a client
sees: reserved jobs are PENDING (no claim) to lookups and counts and invisible to dequeues, hand-out
restarts the claim clock, release and a dead broker's expired reservations use no attempt, an
ack of a reserved job applies, leases have one owner."""

from __future__ import annotations

import pytest

from pinlater.storage.broker_store import BrokerStore, partition_lease
from tests.conformance.api import WORKER

BROKER = "broker:server1"
HOLD_MS = 10_000


@pytest.fixture
def broker(api) -> BrokerStore:
    return BrokerStore(api.store)


def prefetch_all(api, broker: BrokerStore, queue: str, hold_ms: int = HOLD_MS):
    """Every eligible job of priority 1 reserved, from every shard: [(descriptor, job)]."""
    return [
        found
        for shard in api.store.shard_names()
        for found in broker.prefetch(queue, shard, 1, 100, BROKER, hold_ms)
    ]


def pairs(reserved) -> dict[str, list[tuple[int, str]]]:
    """shard -> [(local_id, prefetch claim)] of reserved jobs."""
    by_shard: dict[str, list[tuple[int, str]]] = {}
    for descriptor, job in reserved:
        by_shard.setdefault(descriptor.shard, []).append((job.local_id, job.claim))
    return by_shard


@pytest.mark.rule("S-prefetch")
def test_reserved_jobs_read_as_pending_and_no_dequeue_takes_them(api, queue, broker):
    descriptors = api.enqueue(queue, *[{"body": b"x", "numAttemptsAllowed": 2}] * 3)
    reserved = prefetch_all(api, broker, queue)
    assert sorted(str(d) for d, _ in reserved) == sorted(descriptors)
    assert api.dequeue(queue, 10).jobs is None
    assert api.count(queue, 0) == 3 and api.count(queue, 1) == 0
    for descriptor, _job in reserved:
        info = api.job(str(descriptor))
        assert (info.jobState, info.claimDescriptor, info.attemptsRemaining) == (0, None, 2)


@pytest.mark.rule("S-hand-out", "S-reserved-ack")
def test_handed_out_and_reserved_jobs_are_acked_like_dequeued_ones(api, queue, broker):
    first, second = api.enqueue(queue, b"a", b"b")
    reserved = dict((str(d), (d, job)) for d, job in prefetch_all(api, broker, queue))
    descriptor, job = reserved[first]
    mine = "0" * 24 + ":" + WORKER  # the handing-out request's own claim, for an original client
    assert broker.hand_out(queue, descriptor.shard, 1, [(job.local_id, job.claim)], mine) == 1
    api.ack(queue, succeeded=[first])  # no claim sent back: matched by source
    assert api.state(first) == 2
    other, other_job = reserved[second]
    api.ack(queue, succeeded=[(second, {"claimDescriptor": other_job.claim})])  # not handed out
    assert api.state(second) == 2
    assert broker.hand_out(queue, other.shard, 1, [(other_job.local_id, other_job.claim)]) == 0


@pytest.mark.rule("S-hand-out", "T-claim-expiry")
def test_the_claim_timeout_counts_from_hand_out(api, queue, broker):
    [descriptor] = api.enqueue(queue, {"body": b"x", "numAttemptsAllowed": 2})
    [(found, job)] = prefetch_all(api, broker, queue, hold_ms=3_600_000)
    api.advance(50_000)
    assert broker.hand_out(queue, found.shard, 1, [(job.local_id, job.claim)]) == 1
    api.advance(30_000)
    assert api.janitor(claim_timeout_seconds=60).reclaimed_to_pending == 0  # 80 s since prefetch
    api.advance(31_000)
    assert api.janitor(claim_timeout_seconds=60).reclaimed_to_pending == 1
    assert api.job(descriptor).attemptsRemaining == 1


@pytest.mark.rule("S-release")
def test_released_jobs_are_pending_at_once_with_nothing_used(api, queue, broker):
    descriptors = api.enqueue(queue, *[{"body": b"x", "numAttemptsAllowed": 1}] * 2)
    reserved = prefetch_all(api, broker, queue)
    for shard, jobs in pairs(reserved).items():
        assert broker.release(queue, shard, 1, jobs) == len(jobs)
    assert {api.state(d) for d in descriptors} == {0}
    assert sorted(api.dequeue(queue, 10).jobs) == sorted(descriptors)
    assert {api.job(d).attemptsRemaining for d in descriptors} == {1}


@pytest.mark.rule("S-reserve-expiry")
def test_the_janitor_returns_a_dead_brokers_reservations_using_no_attempt(api, queue, broker):
    descriptors = api.enqueue(queue, *[{"body": b"x", "numAttemptsAllowed": 1}] * 3)
    reserved = prefetch_all(api, broker, queue)
    api.advance(HOLD_MS // 2)
    counts = api.janitor(claim_timeout_seconds=1)  # the claim timeout does not apply
    assert (counts.reservations_returned, counts.reclaimed_to_failed) == (0, 0)
    api.advance(HOLD_MS)
    counts = api.janitor(claim_timeout_seconds=3600)
    assert counts.reservations_returned == 3
    assert (counts.reclaimed_to_pending, counts.reclaimed_to_failed) == (0, 0)
    assert {(api.state(d), api.job(d).attemptsRemaining) for d in descriptors} == {(0, 1)}
    for shard, jobs in pairs(reserved).items():  # the broker came back too late
        assert broker.hand_out(queue, shard, 1, jobs) == 0
    assert sorted(api.dequeue(queue, 10).jobs) == sorted(descriptors)


@pytest.mark.rule("S-leases")
def test_a_partition_lease_has_one_owner_and_servers_see_each_other(api, queue, broker):
    shard = api.store.shard_names()[-1]
    name = partition_lease(queue)
    try:
        assert broker.acquire_lease(shard, name, "server-a", 5000)
        assert not broker.acquire_lease(shard, name, "server-b", 5000)
        assert broker.heartbeat("server-a", 5000) and broker.heartbeat("server-b", 5000)
        assert {"server-a", "server-b"} <= set(broker.live_servers())
        assert not broker.release_lease(shard, name, "server-b")
        assert broker.release_lease(shard, name, "server-a")
        assert broker.acquire_lease(shard, name, "server-b", 5000)
        api.advance(5000)
        assert not {"server-a", "server-b"} & set(broker.live_servers())
        assert broker.acquire_lease(shard, name, "server-a", 5000)
    finally:
        broker.release_lease(shard, name, "server-a")
        broker.release_lease(shard, name, "server-b")
