"""The prefetching broker's server rules (docs/semantics.md `R-...`), on every backend flavour:
the broker is turned on for the test's queue through the runtime settings (`prefetch`), and
its lease passes run in the session's App. The whole suite also runs with the broker on for
every queue (the `sqlite_broker` flavour of conftest.py)."""

from __future__ import annotations

import threading
import time

import pytest

from pinlater.idl import pinlater_thrift as t
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import Ack, ClaimMatch
from tests.conformance.wire import loopback_client

PREFETCH = 5
PENDING, IN_PROGRESS, SUCCEEDED = 0, 1, 2


@pytest.fixture
def brokered(api, queue):
    app = api.app
    if app.store.broker is None:
        pytest.skip("the broker is off here: no prefetch primitives (Shard.prefetch), or clusters")
    app.settings.change(queue, {"prefetch": PREFETCH}, "conformance")
    app.start_broker()
    yield queue
    app.settings.change(queue, {"prefetch": None}, "conformance")


def wait_buffered(api, queue: str, jobs: int, timeout: float = 5.0) -> None:
    """Until this server's broker holds `jobs` jobs of `queue` (its lease pass and refill
    run in threads of their own)."""
    broker = api.app.store.broker
    deadline = time.monotonic() + timeout
    while broker.buffered(queue) < jobs:
        assert time.monotonic() < deadline, f"{broker.buffered(queue)} of {jobs} buffered"
        time.sleep(0.02)


def served_now(api) -> int:
    return api.app.store.broker.served


def one(response) -> tuple[str, str]:
    """(descriptor, claim) of a dequeue that handed out one job."""
    [(descriptor, meta)] = response.jobMetadata.items()
    return descriptor, meta.claimDescriptor


@pytest.mark.rule("R-broker-serve")
def test_buffered_jobs_are_served_and_a_higher_priority_comes_first(api, brokered):
    queue = brokered
    api.enqueue(queue, *[b"low-%d" % i for i in range(4)], priority=2)
    assert len(api.dequeue(queue, 1).jobs) == 1, "answered before the broker owns anything"
    wait_buffered(api, queue, 3)
    assert api.count(queue, PENDING) == 3, "buffered (reserved) jobs read as PENDING"
    [urgent] = api.enqueue(queue, b"urgent", priority=1)
    before = served_now(api)
    assert list(api.dequeue(queue, 1).jobs) == [urgent]
    rest = api.dequeue(queue, 10).jobs
    assert sorted(rest.values()) == [b"low-1", b"low-2", b"low-3"]
    assert served_now(api) - before >= 3, "the priority-2 jobs came from the buffer"


@pytest.mark.rule("R-broker-serve")
def test_a_buffered_dequeue_honours_the_reply_budget_and_the_limit(api, brokered):
    queue = brokered
    api.enqueue(queue, *[b"j%d" % i for i in range(6)])
    api.dequeue(queue, 1)
    wait_buffered(api, queue, PREFETCH - 1)  # the first dequeue may race the first refill
    assert len(api.dequeue(queue, 2).jobs) == 2
    assert len(api.dequeue(queue, 10).jobs) == 3
    assert api.dequeue(queue, 10).jobs in (None, {})


@pytest.mark.rule("R-broker-claim")
def test_a_buffered_job_is_handed_out_under_the_dequeue_claim(api, brokered):
    queue = brokered
    api.enqueue(queue, *[b"j%d" % i for i in range(4)], numAttemptsAllowed=3)
    api.dequeue(queue, 1)
    wait_buffered(api, queue, 3)
    before = served_now(api)
    first, _ = one(api.dequeue(queue, 1, source="worker:other"))
    api.ack(queue, succeeded=[first], source="worker:elsewhere")
    assert api.state(first) == IN_PROGRESS, "another source's ack without a claim is stale"
    api.ack(queue, succeeded=[first], source="worker:other")
    assert api.state(first) == SUCCEEDED, "matched by the dequeuing source (C-source-match)"
    second, claim = one(api.dequeue(queue, 1))
    api.ack(queue, failed=[(second, {"claimDescriptor": claim + "x"})])
    info = api.job(second, include_body=False)
    assert (info.jobState, info.claimDescriptor) == (IN_PROGRESS, claim)
    assert info.attemptsRemaining == 3, "handed out: the attempt is used only by a failure"
    ack = api.ack_request(queue, failed=[(second, {"claimDescriptor": claim})])
    third, _ = one(api.dequeue(queue, 1, ack=ack))
    info = api.job(second, include_body=False)
    # the piggy-backed failure applied: one attempt used, the claim gone (PENDING, even when
    # already reserved again by a refill: reads show a reservation as PENDING, S-prefetch)
    assert (info.jobState, info.attemptsRemaining, info.claimDescriptor) == (PENDING, 2, None)
    assert third != second and served_now(api) - before == 3


@pytest.mark.rule("R-broker-release")
def test_turning_prefetch_off_gives_buffered_jobs_back_with_nothing_used(api, brokered):
    queue = brokered
    descriptors = api.enqueue(queue, *[b"j%d" % i for i in range(6)], numAttemptsAllowed=3)
    [taken] = api.dequeue_ids(queue, 1)
    wait_buffered(api, queue, PREFETCH - 1)  # the first dequeue may race the first refill
    api.app.settings.change(queue, {"prefetch": 0}, "conformance")
    api.app.store.broker.tick()  # the broker's periodic pass, run here to not wait for it
    assert api.app.store.broker.buffered(queue) == 0
    assert api.count(queue, PENDING) == 5
    for descriptor, info in api.lookup(descriptors).items():
        if descriptor != taken:
            assert (info.jobState, info.attemptsRemaining) == (PENDING, 3), descriptor
    assert len(api.dequeue(queue, 10).jobs) == 5, "served from storage again"


@pytest.mark.rule("R-broker-release")
def test_a_buffered_job_idle_too_long_goes_back(api, brokered):
    queue = brokered
    api.enqueue(queue, *[b"j%d" % i for i in range(3)])
    api.dequeue(queue, 1)
    wait_buffered(api, queue, 2)
    broker = api.app.store.broker
    idle, broker.idle_seconds = broker.idle_seconds, 0.05
    try:
        time.sleep(0.1)
        broker.tick()
    finally:
        broker.idle_seconds = idle
    assert broker.buffered(queue) == 0 and api.count(queue, PENDING) == 2


@pytest.mark.rule("R-broker-release")
def test_a_job_buffered_too_long_is_never_served_even_before_the_tick(api, brokered, monkeypatch):
    """The broker's periodic pass may be late (a stalled process); a dequeue then releases the
    jobs idle too long instead of serving them near the end of their hold, and takes what it
    hands out from storage."""
    queue = brokered
    api.enqueue(queue, *[b"j%d" % i for i in range(3)])
    api.dequeue(queue, 1)
    wait_buffered(api, queue, 2)
    broker = api.app.store.broker
    monkeypatch.setattr(broker, "tick", lambda: None)  # the periodic pass does not come
    monkeypatch.setattr(broker, "idle_seconds", 0.05)
    time.sleep(0.1)
    served = served_now(api)
    response = api.dequeue(queue, 2)
    assert served_now(api) == served, "a job idle past idle_seconds was served from the buffer"
    assert len(response.jobs) == 2, "released, then dequeued from storage"
    for meta in response.jobMetadata.values():
        assert meta.attemptsRemaining == meta.attemptsAllowed, "the release used no attempt"


@pytest.mark.rule("R-broker-serve")
def test_a_parked_dequeue_gets_a_job_the_broker_buffers(api, brokered):
    queue = brokered
    api.dequeue(queue, 1)  # demand: the broker takes the partitions
    deadline = time.monotonic() + 5
    while not any(q == queue for q, _ in api.app.store.broker.owned()):
        assert time.monotonic() < deadline, "no partition owned"
        time.sleep(0.02)
    started = time.monotonic()
    request_wait = t.PinLaterDequeueRequest(queueName=queue, limit=1, waitMillis=10_000)
    answer: dict = {}

    def park() -> None:
        client = loopback_client(api.app.handler)
        answer["r"] = client.dequeueJobs(api.ctx(), request_wait)

    parked = threading.Thread(target=park)
    parked.start()
    time.sleep(0.2)
    [job] = api.enqueue(queue, b"wake")
    parked.join(15)
    assert list(answer["r"].jobs) == [job]
    assert time.monotonic() - started < 5, "woken, not timed out"


@pytest.mark.rule("R-broker-claim", "S-reserved-ack")
def test_an_ack_through_a_server_that_never_saw_the_hand_out_applies(api, brokered):
    """The worker's ack reaches storage through another server (here: the shard itself,
    which knows nothing of this broker's pending hand-outs) before the hand-out is written:
    the hand-out claim matches the reservation, so the ack applies and the late hand-out is
    a no-op."""
    queue = brokered
    api.enqueue(queue, *[b"j%d" % i for i in range(4)])
    api.dequeue(queue, 1)
    wait_buffered(api, queue, 3)
    handouts = api.app.store.broker.handouts
    interval, handouts.interval = handouts.interval, 30.0  # the write-behind waits
    try:
        before = served_now(api)
        descriptor, claim = one(api.dequeue(queue, 1, source="worker:w1"))
        assert served_now(api) - before == 1 and handouts.pending() == 1
        d = JobDescriptor.parse(descriptor)
        applied = api.store.shard(d.shard).ack(
            queue, [Ack(d.priority, d.local_id, ClaimMatch("worker:w1", claim))], []
        )
        assert applied == 1
    finally:
        handouts.interval = interval
    refused = handouts.stats.refused
    api.app.store.broker.flush()
    assert handouts.stats.refused == refused + 1, "the late hand-out found no reservation"
    info = api.job(descriptor, include_body=False)
    assert (info.jobState, info.claimDescriptor) == (SUCCEEDED, claim)


@pytest.mark.rule("R-broker-serve")
def test_a_throughput_batch_neither_waits_for_nor_fills_the_broker(api, brokered):
    """A dequeue of more than `broker.max_limit` jobs is answered from storage with its acks
    in the same call, and makes this server buffer nothing of the queue."""
    queue = brokered
    broker = api.app.store.broker
    large = broker.max_limit + 1
    ids = api.enqueue(queue, *[b"j%d" % i for i in range(2 * large)])
    first = api.dequeue(queue, large)
    assert len(first.jobs) == large
    ack = api.ack_request(queue, succeeded=list(first.jobs))
    second = api.dequeue(queue, large, ack=ack)
    assert len(second.jobs) == large and set(first.jobs) | set(second.jobs) == set(ids)
    assert {api.state(d) for d in first.jobs} == {SUCCEEDED}
    time.sleep(0.3)  # a lease pass or refill, had the queue become demand
    assert queue not in broker.demanded() and broker.buffered(queue) == 0
    assert not any(q == queue for q, _ in broker.owned())
