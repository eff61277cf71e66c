"""FIFO queues (`fifo: true`, docs/semantics.md `F-...`) at the wire, on every backend: order
within a priority, the in-flight cap, heads that come back, dry runs and long-poll."""

from __future__ import annotations

import threading
import time

import pytest

from pinlater.common.sections import ConfigError
from pinlater.ops.queue_settings import QueueConfig, parse_queue_config
from tests.conformance.api import Api
from tests.conformance.wire import loopback_client

PENDING, IN_PROGRESS, SUCCEEDED, FAILED = 0, 1, 2, 3


def configure(api: Api, text: str) -> None:
    """Apply a queue-config file's text as the server does when it reads the file."""
    api.app._queue_config_changed(parse_queue_config(text, "test"), 1)


@pytest.fixture
def fifo(api, queue):
    """`queue` made a FIFO queue with a cap `fifo.set(n)` (1 at first); unset afterwards."""

    class Fifo:
        @staticmethod
        def set(cap: int = 1) -> None:
            configure(api, f"queues:\n  {queue}: {{fifo: true, fifo_in_flight: {cap}}}\n")

    Fifo.set(1)
    yield Fifo
    api.app._queue_config_changed(QueueConfig(), 1)


def one(api: Api, queue: str, **kwargs) -> str | None:
    """The one job a dequeue handed out (None when it handed out none)."""
    jobs = sorted((api.dequeue(queue, 10, **kwargs).jobs or {}).keys())
    assert len(jobs) <= 1, jobs
    return jobs[0] if jobs else None


def shard_of(descriptor: str) -> str:
    return descriptor.split(":")[1]


@pytest.mark.rule("F-setting")
def test_fifo_setting_places_the_queue_on_one_shard_and_refuses_partitions(api, queue, fifo):
    descriptors = [d for _ in range(12) for d in api.enqueue(queue, b"x")]
    assert len({shard_of(d) for d in descriptors}) == 1
    assert api.app.store.placement.targets(queue) is not None
    assert len(api.app.store.placement.targets(queue)) == 1
    with pytest.raises(ConfigError, match="partitions must be 1"):
        parse_queue_config(f"queues:\n  {queue}: {{fifo: true, partitions: 2}}\n", "t")
    with pytest.raises(ConfigError, match="only for a FIFO queue"):
        parse_queue_config(f"queues:\n  {queue}: {{fifo_in_flight: 2}}\n", "t")
    configure(api, f"queues:\n  {queue}: {{fifo: true, partitions: 1}}\n")
    assert api.app.store.fifo.cap(queue) == 1


@pytest.mark.rule("F-order")
def test_fifo_hands_out_in_enqueue_order_priority_one_first(api, queue, fifo):
    low = api.enqueue(queue, b"l1", b"l2", priority=2)
    high = api.enqueue(queue, b"h1", b"h2", b"h3")
    seen = []
    for _ in range(5):
        job = one(api, queue)
        seen.append(job)
        api.ack(queue, succeeded=[job])
    assert seen == high + low
    assert one(api, queue) is None


@pytest.mark.rule("F-order")
def test_fifo_delayed_head_blocks_its_priority_only(api, queue, fifo):
    fifo.set(5)
    [delayed] = api.enqueue(queue, {"body": b"d", "runAfterTimestampMillis": api.now() + 60_000})
    behind = api.enqueue(queue, b"b1", b"b2")
    low = api.enqueue(queue, b"l", priority=2)
    assert api.dequeue_ids(queue, 10) == low
    api.advance(60_000)
    assert api.dequeue_ids(queue, 10) == sorted([delayed, *behind])


@pytest.mark.rule("F-in-flight")
def test_fifo_in_flight_cap_and_piggy_backed_acks(api, queue, fifo):
    fifo.set(2)
    jobs = api.enqueue(queue, *[b"j%d" % i for i in range(6)])
    assert api.dequeue_ids(queue, 10) == sorted(jobs[:2])
    assert api.dequeue_ids(queue, 10) == []
    ack = api.ack_request(queue, succeeded=[jobs[0]])
    assert sorted((api.dequeue(queue, 10, ack=ack).jobs or {}).keys()) == [jobs[2]]
    assert api.count(queue, IN_PROGRESS) == 2
    assert api.dequeue_ids(queue, 10) == []


@pytest.mark.rule("F-retry-head")
def test_fifo_failed_job_runs_again_before_any_later_job(api, queue, fifo):
    jobs = api.enqueue(queue, b"a", b"b", b"c", numAttemptsAllowed=3)
    assert one(api, queue) == jobs[0]
    api.ack(queue, failed=[(jobs[0], {"retryDelayMillis": 30_000})])
    assert one(api, queue) is None  # the head waits for its delay; nothing passes it
    api.advance(30_000)
    assert one(api, queue) == jobs[0]
    api.ack(queue, succeeded=[jobs[0]])
    assert one(api, queue) == jobs[1]


@pytest.mark.rule("F-retry-head")
def test_fifo_reclaimed_and_retried_jobs_come_back_at_the_head(api, queue, fifo):
    jobs = api.enqueue(queue, b"a", b"b", b"c", numAttemptsAllowed=2)
    assert one(api, queue) == jobs[0]
    api.advance(61_000)
    api.janitor(claim_timeout_seconds=60)
    assert api.state(jobs[0]) == PENDING
    assert one(api, queue) == jobs[0]
    api.ack(queue, failed=[jobs[0]])  # its last attempt: FAILED, it no longer blocks
    assert api.state(jobs[0]) == FAILED
    assert one(api, queue) == jobs[1]
    api.ack(queue, succeeded=[jobs[1]])
    assert api.retry_failed(queue) == 1
    assert one(api, queue) == jobs[0]  # ahead of job c


@pytest.mark.rule("F-checkpoint", "F-retry-head")
def test_fifo_checkpoint_keeps_the_job_in_flight_or_puts_it_back_first(api, queue, fifo):
    jobs = api.enqueue(queue, b"a", b"b")
    assert one(api, queue) == jobs[0]
    api.checkpoint(queue, jobs[0])
    assert one(api, queue) is None  # still in flight
    later = api.now() + 5_000
    api.checkpoint(queue, (jobs[0], {"moveToPending": True, "runAfterTimestampMillis": later}))
    assert api.state(jobs[0]) == PENDING
    assert one(api, queue) is None  # at the head, not due yet
    api.advance(5_000)
    assert one(api, queue) == jobs[0]


@pytest.mark.rule("F-dry-run")
def test_fifo_dry_run_shows_the_heads_and_claims_nothing(api, queue, fifo):
    fifo.set(2)
    jobs = api.enqueue(queue, b"a", b"b", b"c")
    assert api.dequeue_ids(queue, 10, dryRun=True) == sorted(jobs[:2])
    assert api.count(queue, PENDING) == 3
    assert api.dequeue_ids(queue, 10) == sorted(jobs[:2])
    assert api.dequeue_ids(queue, 10, dryRun=True) == []


@pytest.mark.rule("F-long-poll")
def test_fifo_parked_dequeue_wakes_on_a_success_ack(api, queue, fifo):
    jobs = api.enqueue(queue, b"a", b"b")
    assert one(api, queue) == jobs[0]
    got: dict = {}
    other = Api(loopback_client(api.app.handler), api.app)

    def parked() -> None:
        started = time.monotonic()
        got["jobs"] = sorted((other.dequeue(queue, 5, waitMillis=15_000).jobs or {}).keys())
        got["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=parked, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert "jobs" not in got  # parked: the cap is full
    api.ack(queue, succeeded=[jobs[0]])
    thread.join(timeout=10)
    assert got["jobs"] == [jobs[1]]
    assert got["seconds"] < 5


@pytest.mark.rule("F-setting")
def test_jobs_stored_before_the_queue_became_fifo_are_still_handed_out(api, queue):
    before = [d for _ in range(12) for d in api.enqueue(queue, b"old")]
    try:
        configure(api, f"queues:\n  {queue}: {{fifo: true, fifo_in_flight: 20}}\n")
        after = api.enqueue(queue, b"new")
        assert len({shard_of(d) for d in after}) == 1
        got: list[str] = []
        for _ in range(10):
            got += api.dequeue_ids(queue, 50)
            if len(got) == 13:
                break
        assert sorted(got) == sorted(before + after)
    finally:
        api.app._queue_config_changed(QueueConfig(), 1)
