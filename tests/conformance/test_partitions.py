"""Partitions per queue (`partitions: k`, pinlater/storage/placement.py) on every backend:
the jobs land on the queue's partitions, and a change of k moves none of them."""

from __future__ import annotations

import pytest

from pinlater.ops.placement_check import PlacementCheck
from pinlater.storage.placement import rendezvous


@pytest.fixture
def placed(api, queue):
    """`queue` set to 1 partition (as a queue-config file would), unset afterwards."""
    placement = api.app.store.placement
    placement.configure({queue: 1})
    yield placement
    placement.configure({})


def shard_of(descriptor: str) -> str:
    return descriptor.split(":")[1][1:]


@pytest.mark.rule("Q-partitions")
def test_a_one_partition_queue_stores_its_jobs_on_its_rendezvous_shard(api, queue, placed):
    eligible = [s.name for s in api.store.shard_specs() if not s.dequeue_only]  # its cluster's
    [expected] = rendezvous(queue, eligible, 1)
    descriptors = [d for _ in range(12) for d in api.enqueue(queue, b"x")]
    assert {shard_of(d) for d in descriptors} == {expected}
    PlacementCheck(api.app.store).run_once()
    assert placed.dequeue_shards(queue) == (expected,)
    assert sorted(api.dequeue_ids(queue, 20)) == sorted(descriptors)


@pytest.mark.rule("Q-partitions-change")
def test_changing_partitions_moves_no_job_and_all_stay_reachable(api, queue, placed):
    shards = len(api.store.shard_names())
    placed.configure({queue: shards})  # every shard
    spread = [d for _ in range(30) for d in api.enqueue(queue, b"a")]
    placed.configure({queue: 1})  # the others leave: their jobs stay where they are
    narrow = [d for _ in range(5) for d in api.enqueue(queue, b"b")]
    assert len({shard_of(d) for d in narrow}) == 1
    everything = sorted(spread + narrow)
    assert api.count(queue, 0) == len(everything)
    assert len(api.scan(queue, 0, limit=100).scannedJobs) == len(everything)
    assert sorted(api.lookup(everything)) == everything
    assert sorted(api.dequeue_ids(queue, 100)) == everything
