"""The broker's pure parts: a partition buffer serves in storage order within a reply's byte
budget and gives back idle jobs; ownership splits a queue's partitions evenly over the live
servers and moves few when one joins or leaves."""

from __future__ import annotations

from collections import Counter

from pinlater.ops.partition_owner import assign
from pinlater.storage.broker.buffer import PartitionBuffer
from pinlater.storage.contract import ByteBudget
from pinlater.storage.models import DequeuedJob


def job(local_id: int, priority: int = 1, body: bytes = b"x") -> DequeuedJob:
    return DequeuedJob(priority, local_id, body, 2, 2, "tok:broker")


def test_take_serves_oldest_first_per_priority():
    buffer = PartitionBuffer()
    buffer.add([job(1), job(2), job(5, priority=2), job(3)], now=0.0)
    assert buffer.size == 4 and buffer.held(1) == 3 and buffer.held(2) == 1
    assert [j.local_id for j in buffer.take(1, 2, None)] == [1, 2]
    assert [j.local_id for j in buffer.take(2, 5, None)] == [5]
    assert [j.local_id for j in buffer.take(1, 5, None)] == [3]
    assert buffer.size == 0 and buffer.take(1, 1, None) == []


def test_take_stops_at_the_first_job_that_does_not_fit_the_budget():
    buffer = PartitionBuffer()
    buffer.add([job(1, body=b"a" * 10), job(2, body=b"b" * 50), job(3, body=b"c")], now=0.0)
    taken = buffer.take(1, 3, ByteBudget(max_bytes=40, per_job=5))
    assert [j.local_id for j in taken] == [1], "job 2 does not fit, so job 3 is not served"
    assert buffer.size == 2
    assert [j.local_id for j in buffer.take(1, 3, ByteBudget(max_bytes=0))] == []


def test_peek_leaves_the_jobs_buffered():
    buffer = PartitionBuffer()
    buffer.add([job(1), job(2)], now=0.0)
    assert [j.local_id for j in buffer.peek(1, 5, None)] == [1, 2]
    assert buffer.size == 2


def test_stale_and_drain_give_back_jobs():
    buffer = PartitionBuffer()
    buffer.add([job(1), job(2, priority=3)], now=1.0)
    buffer.add([job(3)], now=5.0)
    assert sorted(j.local_id for j in buffer.stale(before=2.0)) == [1, 2]
    assert buffer.size == 1
    assert [j.local_id for j in buffer.drain()] == [3] and buffer.size == 0


def test_partitions_split_evenly_and_move_little():
    shards = [str(s) for s in range(1, 9)]
    for queue in (f"q{i}" for i in range(50)):
        owners = assign(queue, shards, ["a", "b", "c"])
        loads = Counter(owners.values())
        assert set(owners) == set(shards) and sorted(loads.values()) == [2, 3, 3], owners
        assert assign(queue, shards, ["c", "b", "a", "a"]) == owners, "order and repeats"
        joined = assign(queue, shards, ["a", "b", "c", "d"])
        assert sorted(Counter(joined.values()).values()) == [2, 2, 2, 2]
        moved = [s for s in shards if joined[s] != owners[s]]
        assert len(moved) <= 4, (owners, joined)  # 2 must move to d; a few may shuffle
        left = assign(queue, shards, ["a", "b"])
        assert sorted(Counter(left.values()).values()) == [4, 4]
    assert assign("q", [], ["a"]) == {} and assign("q", ["1"], []) == {}


def test_config_refuses_an_idle_bound_or_renewal_too_close_to_the_hold_or_lease():
    import pytest

    from pinlater.app import load_config
    from pinlater.common.sections import ConfigError

    broker = {"hold_seconds": 10, "idle_seconds": 6, "lease_seconds": 3, "renew_seconds": 2}
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={"broker": broker})
    problems = " ".join(info.value.problems)
    assert "broker.idle_seconds" in problems and "broker.renew_seconds" in problems
    fine = load_config(
        env={}, overrides={"broker": {**broker, "idle_seconds": 5, "lease_seconds": 4}}
    )
    assert fine.broker.default_prefetch == 0 and fine.broker.idle_seconds == 5
