"""Failing and full storage as clients see it: retries, unhealthy shards, full shards.

The failures are injected at the shard seam (tests/conformance/faults.py) on the real shards of
every backend; the answers pinned are the sharded layer's and the handler's.
"""

import pytest

from pinlater.idl import ErrorCode as E
from pinlater.idl import pinlater_thrift as t
from tests.conformance.faults import full, intercepted, lost_connection, queue_busy, shard_of

MAX_ENQUEUE_TRIES = 30


@pytest.mark.rule("E-shard-connection-failed")
def test_a_shard_failing_every_try_answers_shard_connection_failed(api, queue):
    [d] = api.enqueue(queue, b"x")
    home = shard_of(d)
    tries = 1 + api.app.config.sharding.retries
    with intercepted(api.store, "lookup", fail_with=lost_connection, shards=[home]) as calls:
        with api.raises(E.SHARD_CONNECTION_FAILED, match=f"shard {home}"):
            api.lookup([d])
    assert calls.count[home] == tries, "retriable failures are retried, then reported"
    with intercepted(
        api.store, "lookup", fail_with=lost_connection, fail_times=tries - 1, shards=[home]
    ) as calls:
        assert api.job(d).body == b"x"  # a failure that clears within the retries is invisible
    assert calls.count[home] == tries


@pytest.mark.rule("E-no-healthy-shards")
def test_shards_that_keep_failing_are_skipped_until_none_is_left(api, queue):
    answers = []
    with intercepted(api.store, "enqueue", fail_with=lost_connection, keep_health=True):
        for _ in range(MAX_ENQUEUE_TRIES):
            with pytest.raises(t.PinLaterException) as info:
                api.enqueue(queue, b"x")
            answers.append(info.value.errorCode)
            if info.value.errorCode == E.NO_HEALTHY_SHARDS:
                break
        assert answers[-1] == E.NO_HEALTHY_SHARDS, answers
        assert set(answers[:-1]) == {E.SHARD_CONNECTION_FAILED}, answers
        with api.raises(E.NO_HEALTHY_SHARDS):
            api.dequeue(queue, 1)
    with api.raises(E.NO_HEALTHY_SHARDS):  # the shards answer again but are not probed yet
        api.enqueue(queue, b"x")
    assert sorted(api.store.probe_unhealthy()) == sorted(api.store.shard_names())
    assert api.count(queue, 0) == 0
    [d] = api.enqueue(queue, b"back")
    assert api.dequeue_ids(queue) == [d]


@pytest.mark.rule("E-storage-full-enqueue")
def test_an_enqueue_moves_on_from_full_shards_and_is_rejected_when_all_are_full(api, queue):
    names = api.store.shard_names()
    # at most `retries` full shards, so the tries of one enqueue always reach one with room
    full_ones = names[: min(api.app.config.sharding.retries, len(names) - 1)]
    with intercepted(api.store, "enqueue", fail_with=full, shards=full_ones):
        stored = [d for _ in range(10) for d in api.enqueue(queue, b"a", b"b")]
    assert not {shard_of(d) for d in stored} & set(full_ones)
    with intercepted(api.store, "enqueue", fail_with=full) as calls:
        with api.raises(E.ENQUEUE_REJECTED, match="full"):
            api.enqueue(queue, b"c", b"d")
    assert sum(calls.count.values()) >= 1
    assert api.count(queue, 0) == len(stored) == 20


@pytest.mark.rule("E-storage-full")
def test_other_calls_on_a_full_shard_say_so_and_leave_it_healthy(api, queue):
    [d] = api.enqueue(queue, b"x")
    api.dequeue(queue, 1)
    [waiting] = api.enqueue(queue, b"waiting")
    more_than_unhealthy = api.app.config.sharding.unhealthy_after_failures + 2
    with (
        api.from_storage(queue),
        intercepted(api.store, "ack", fail_with=full),
        intercepted(api.store, "checkpoint", fail_with=full),
        intercepted(api.store, "dequeue", fail_with=full),
    ):
        for _ in range(more_than_unhealthy):
            with api.raises(E.SHARD_CONNECTION_FAILED, match="full"):
                api.ack(queue, succeeded=[d])
        with api.raises(E.SHARD_CONNECTION_FAILED, match="full"):
            api.checkpoint(queue, (d, {"newBody": "y"}))
        with api.raises(E.SHARD_CONNECTION_FAILED, match="full"):
            api.dequeue(queue, 1)
        assert all(map(api.store.health.is_healthy, api.store.shard_names()))
        # what needs no room is still served
        assert api.state(d) == 1 and api.count(queue, 0) == 1 and api.job(d).body == b"x"
    assert api.dequeue_ids(queue) == [waiting]


@pytest.mark.rule("E-queue-busy")
def test_a_queues_own_contention_is_retried_and_never_turns_a_shard_unhealthy(api, queue):
    other = api.new_queue()
    [d] = api.enqueue(queue, b"x")
    home = shard_of(d)
    tries = 1 + api.app.config.sharding.retries
    threshold = api.app.config.sharding.unhealthy_after_failures
    with intercepted(api.store, "lookup", fail_with=queue_busy, keep_health=True) as calls:
        for _ in range(threshold + 2):
            with api.raises(E.SHARD_CONNECTION_FAILED, match=f"shard {home}"):
                api.lookup([d])
        assert calls.count[home] == (threshold + 2) * tries, "retried like any failure"
        assert not api.store.health.unhealthy()
        [mine] = api.enqueue(other, b"served")  # every shard still takes enqueues
        assert api.dequeue_ids(other) == [mine]
    with intercepted(api.store, "lookup", fail_with=queue_busy, fail_times=tries - 1):
        assert api.job(d).body == b"x"  # contention that clears within the retries is invisible


@pytest.mark.rule("E-queue-busy")
def test_the_janitor_skips_only_the_busy_queue_and_cleans_the_others_of_its_shard(api, queue):
    busy = api.new_queue(prefix="a")  # sorts first: the janitor meets it before `queue`
    for name in (busy, queue):
        api.enqueue(name, *[b"x"] * 6)
        api.dequeue(name, 6)
    api.advance(61_000)
    shards = api.store.shard_names()
    real = {name: api.store.shard(name).reclaim_expired for name in shards}

    def contended(name):
        def reclaim(q, *args):
            if q == busy:
                raise queue_busy(name)
            return real[name](q, *args)

        return reclaim

    try:
        for name in shards:
            api.store.shard(name).reclaim_expired = contended(name)
        api.janitor(claim_timeout_seconds=60)
    finally:
        for name in shards:
            del api.store.shard(name).reclaim_expired
    assert api.count(queue, 0) == 6  # reclaimed on every shard despite its busy neighbour
    assert api.count(busy, 1) == 6
    assert not api.store.health.unhealthy()
