"""The depth collector and the janitor scale with the number of queues (issue 12 item 11).

With a few hundred queues on every backend: one depth tick reads its slice of queues with one
`queue_stats` call per shard and no per-queue count; a janitor tick touches at most its
`queues_per_tick` queues, writes only where work is due (an idle queue costs no write), and a
sweep of ticks still reclaims every expired claim. Speed is for scripts/bench_many_queues.py.
"""

from __future__ import annotations

import contextlib
import math
import uuid

import pytest

from pinlater.config import JanitorConfig
from pinlater.ops.depth import DepthCollector
from pinlater.ops.janitor import Janitor
from pinlater.ops.metrics import Metrics
from tests.conformance.faults import intercepted

QUEUES = 200
PER_TICK = 40
#: what a tick may call besides the reads under test
WRITES = ("reclaim_expired", "purge", "purge_keys")


@contextlib.contextmanager
def recorded(store, *methods):
    with contextlib.ExitStack() as stack:
        yield {m: stack.enter_context(intercepted(store, m)) for m in methods}


@pytest.mark.rule("J-spread")
def test_depth_and_janitor_ticks_scale_with_the_number_of_queues(api):
    run = uuid.uuid4().hex[:6]
    names = [f"scale{i:03d}_{run}" for i in range(QUEUES)]
    for name in names:
        api.create(name)
    one_depth_tick_reads_its_slice_with_one_call_per_shard(api, names)
    a_janitor_tick_touches_at_most_its_bound_and_idle_queues_cost_no_write(api, names)


def depth_tick(store, depth: DepthCollector, calls) -> None:
    """One depth tick: one stats call per shard, for at most PER_TICK queues."""
    before = dict(calls["queue_stats"].count)
    depth.tick()
    for shard in store.shard_names():
        assert calls["queue_stats"].count[shard] == before.get(shard, 0) + 1
    asked = [args[0] for _, args in calls["queue_stats"].args[-len(store.shard_names()) :]]
    assert max(len(queues) for queues in asked) <= PER_TICK


def one_depth_tick_reads_its_slice_with_one_call_per_shard(api, names: list[str]) -> None:
    api.enqueue(names[0], b"a", b"b")
    api.enqueue(names[-1], {"body": b"p2", "priority": 2})
    store = api.store
    depth = DepthCollector(store, Metrics(), cap=1000, queues_per_tick=PER_TICK, interval=1.0)
    expected_ticks = math.ceil(len(store.queue_names()) / PER_TICK)
    with recorded(store, "queue_stats", "count", "queue_names") as calls:
        for _ in range(expected_ticks):
            depth_tick(store, depth, calls)
    assert depth.sweep.starting, "the sweep took the expected number of ticks"
    assert sum(calls["count"].count.values()) == 0, "no per-queue count"
    # the queues were listed once for the sweep (one call per shard), not per tick
    assert set(calls["queue_names"].count.values()) == {1}
    snapshot, refreshed_at = depth.snapshot()
    assert refreshed_at > 0
    assert {q for q, _, _ in snapshot} >= set(names)
    assert snapshot[(names[0], "pending", 1)] == api.count(names[0], 0) == 2
    assert snapshot[(names[-1], "pending", 2)] == 1
    assert snapshot[(names[5], "pending", 1)] == 0
    assert depth.sweep.wait_seconds() < 1.0  # a sweep of several ticks spreads them


def janitor_tick(janitor: Janitor, calls) -> int:
    """One janitor tick: its writes stay within the slice it read; returns claims reclaimed."""
    marks = {m: len(calls[m].args) for m in calls}
    reclaimed = janitor.run_tick().reclaimed_to_pending
    (sliced,) = {tuple(a[0]) for _, a in calls["queue_stats"].args[marks["queue_stats"] :]}
    assert len(sliced) <= PER_TICK
    touched = {a[0] for m in WRITES for _, a in calls[m].args[marks[m] :]}
    assert touched <= set(sliced), "a tick writes only to the queues of its slice"
    return reclaimed


def a_janitor_tick_touches_at_most_its_bound_and_idle_queues_cost_no_write(
    api, names: list[str]
) -> None:
    busy = names[1::40]  # five queues with one claim each, expiring below
    for queue in busy:
        api.enqueue(queue, b"job")
        assert api.dequeue_ids(queue, 1)
    store = api.store
    config = JanitorConfig(claim_timeout_seconds=60, queues_per_tick=PER_TICK, interval_seconds=1)
    janitor = Janitor(store, config)
    api.advance(120_000)
    expected_ticks = math.ceil(len(store.queue_names()) / PER_TICK)
    with recorded(store, "queue_stats", *WRITES) as calls:
        reclaimed = sum(janitor_tick(janitor, calls) for _ in range(expected_ticks))
    assert janitor.sweep.starting, "the sweep took the expected number of ticks"
    assert reclaimed == len(busy)
    written = {a[0] for m in WRITES for _, a in calls[m].args}
    assert written == set(busy), "idle queues cost no write"
    for queue in busy:
        assert api.count(queue, 0) == 1  # the claim came back to PENDING
