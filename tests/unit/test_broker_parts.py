"""The broker's pure parts: a partition buffer serves in storage order within a reply's byte
budget and gives back idle jobs; rendezvous ownership spreads partitions evenly over servers
and moves few when one joins or leaves."""

from __future__ import annotations

from collections import Counter

from pinlater.ops.partition_owner import winner
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


def test_partitions_spread_evenly_and_move_little():
    partitions = [(f"q{q}", str(s)) for q in range(40) for s in range(1, 6)]  # 200
    servers = ["a", "b", "c", "d"]
    owners = {p: winner(*p, servers) for p in partitions}
    counts = Counter(owners.values())
    assert set(counts) == set(servers)
    assert max(counts.values()) - min(counts.values()) <= 25, counts  # 50 each +- hashing
    joined = {p: winner(*p, [*servers, "e"]) for p in partitions}
    moved = [p for p in partitions if joined[p] != owners[p]]
    assert all(joined[p] == "e" for p in moved), "a join moves partitions only to the new one"
    assert 20 <= len(moved) <= 60, len(moved)  # about a fifth
    left = {p: winner(*p, ["a", "b", "c"]) for p in partitions}
    assert all(left[p] == owners[p] for p in partitions if owners[p] != "d")
