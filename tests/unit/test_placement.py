"""Placement bookkeeping without storage: rendezvous choice and spread, and the holders a
placement change leaves behind (the reads must keep visiting them until a check clears them)."""

from __future__ import annotations

import collections

from pinlater.storage.contract import ShardSpec
from pinlater.storage.placement import Placement, rendezvous

EIGHT = [f"s{i}" for i in range(8)]


def specs(names, dequeue_only=()):
    return [ShardSpec(name=n, dequeue_only=n in dequeue_only) for n in names]


def test_rendezvous_is_stable_prefix_closed_and_spreads_small_queues():
    assert rendezvous("q", EIGHT, 3) == rendezvous("q", list(reversed(EIGHT)), 3)
    assert rendezvous("q", EIGHT, 1) == rendezvous("q", EIGHT, 3)[:1]
    firsts = collections.Counter(rendezvous(f"queue{i}", EIGHT, 1)[0] for i in range(800))
    assert set(firsts) == set(EIGHT) and max(firsts.values()) < 150, firsts  # ~100 each
    # removing a shard moves only the queues it held
    moved = sum(
        rendezvous(f"queue{i}", EIGHT, 1) != rendezvous(f"queue{i}", EIGHT[:-1], 1)
        and rendezvous(f"queue{i}", EIGHT, 1)[0] != "s7"
        for i in range(800)
    )
    assert moved == 0


def test_until_the_first_check_every_other_shard_is_a_holder():
    placement = Placement()
    placement.shards_changed(specs(EIGHT))
    assert placement.targets("q") is None and placement.read_shards("q") is None
    placement.configure({"q": 1})
    [placed] = placement.targets("q")
    assert placement.dequeue_shards("q") == tuple(EIGHT)
    [(queue, generation, _)] = placement.to_check()
    assert placement.observed(queue, generation, [], [], [])
    assert placement.dequeue_shards("q") == placement.read_shards("q") == (placed,)


def test_shards_leaving_the_placement_are_holders_at_once_and_a_raced_check_is_ignored():
    placement = Placement()
    placement.shards_changed(specs(EIGHT))
    placement.configure({"q": 3})
    [(_, generation, _)] = placement.to_check()
    placement.observed("q", generation, [], [], [])
    three = placement.targets("q")
    [(_, stale, _)] = placement.to_check()
    placement.configure({"q": 1})
    assert set(placement.dequeue_shards("q")) == set(three), "the old partitions were dropped"
    assert not placement.observed("q", stale, [], [], []), "a check of the old placement applied"
    assert set(placement.dequeue_shards("q")) == set(three)
    # a shard turning dequeue_only leaves the placement the same way
    placement.shards_changed(specs(EIGHT, dequeue_only=three[:1]))
    assert three[0] not in placement.targets("q") and three[0] in placement.dequeue_shards("q")


def test_a_check_keeps_shards_that_did_not_answer_and_done_jobs_keep_only_reads():
    placement = Placement()
    placement.shards_changed(specs(EIGHT))
    placement.configure({"q": 1})
    [(_, generation, outside)] = placement.to_check()
    placement.observed("q", generation, [outside[0]], [outside[1]], [outside[2]])
    assert set(placement.dequeue_shards("q")) == set(placement.targets("q")) | {
        outside[0],
        outside[2],
    }
    assert set(placement.read_shards("q")) == set(placement.dequeue_shards("q")) | {outside[1]}
    placement.reopened("q")  # a retry of failed jobs: every holder is dequeued again
    assert placement.dequeue_shards("q") == placement.read_shards("q")


def test_a_shard_new_to_the_map_is_a_holder_until_checked():
    queue = next(f"q{i}" for i in range(100) if rendezvous(f"q{i}", EIGHT[:5], 1) != ["s4"])
    placement = Placement()
    placement.shards_changed(specs(EIGHT[:4]))
    placement.configure({queue: 1})
    [(_, generation, _)] = placement.to_check()
    placement.observed(queue, generation, [], [], [])
    placement.shards_changed(specs(EIGHT[:5]))  # s4 may be old storage that holds jobs
    assert "s4" in placement.dequeue_shards(queue)
