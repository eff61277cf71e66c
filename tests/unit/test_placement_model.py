"""Partitions per queue against an in-memory model (Hypothesis, bounded): random enqueues,
changes of `partitions`, shards turning dequeue_only and back, dequeues with success and
failure acks, and background checks, on 4 real SQLite shards. After every step the pending
count equals the model's, every job the model holds is found by lookup, and a dequeue only
ever hands out jobs the model has pending; at the end a drain hands out exactly those."""

from __future__ import annotations

import dataclasses
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from backends.sqlite import SQLiteBackend
from pinlater.ops.placement_check import PlacementCheck
from pinlater.storage.contract import StorageLimits
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from pinlater.storage.sharded import ShardedBackend

NAMES = ["a", "b", "c", "d"]
QUEUE = "q"


class PlacementModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.options = SQLiteBackend.parse_options({"data_dir": self.tmp.name}, "backend")
        self.specs = SQLiteBackend.parse_shards([{"name": n} for n in NAMES], self.options, "s")
        self.store = ShardedBackend(
            SQLiteBackend(self.options, StorageLimits()), self.specs, num_priorities=2
        )
        self.store.create_queue(QUEUE)
        self.check = PlacementCheck(self.store)
        self.pending: set[JobDescriptor] = set()
        self.done: set[JobDescriptor] = set()

    def teardown(self):
        try:
            seen: set[JobDescriptor] = set()
            for _ in range(100):
                got = self.store.dequeue(QUEUE, 50, "m")
                if not got:
                    break
                seen |= {d for d, _ in got}
            assert seen == self.pending, "the drain did not hand out exactly the pending jobs"
        finally:
            self.store.close()
            self.tmp.cleanup()

    @rule(n=st.integers(1, 4), priority=st.integers(1, 2))
    def enqueue(self, n, priority):
        targets = self.store.placement.targets(QUEUE)
        descriptors = self.store.enqueue(
            QUEUE, [NewJob(b"j", priority=priority, attempts_allowed=50) for _ in range(n)]
        )
        assert targets is None or {d.shard for d in descriptors} <= set(targets)
        self.pending |= set(descriptors)

    @rule(k=st.none() | st.integers(1, 5))
    def set_partitions(self, k):
        self.store.placement.configure({QUEUE: k} if k else {})

    @rule(index=st.integers(0, 3), dequeue_only=st.booleans())
    def flip_dequeue_only(self, index, dequeue_only):
        specs = [
            dataclasses.replace(s, dequeue_only=dequeue_only) if i == index else s
            for i, s in enumerate(self.specs)
        ]
        if all(s.dequeue_only for s in specs):
            return  # some shard must take enqueues
        self.specs = specs
        self.store.reload(specs)

    @rule(n=st.integers(1, 6), fail=st.booleans())
    def dequeue_and_ack(self, n, fail):
        got = self.store.dequeue(QUEUE, n, "m")
        assert {d for d, _ in got} <= self.pending, "handed out a job that is not pending"
        assert len(got) == min(n, len(self.pending)), "a pending job was not reachable"
        acks = [
            (d.shard, Ack(d.priority, d.local_id, ClaimMatch("m", job.claim))) for d, job in got
        ]
        self.store.ack(QUEUE, [] if fail else acks, acks if fail else [])
        if not fail:
            self.pending -= {d for d, _ in got}
            self.done |= {d for d, _ in got}

    @rule()
    def background_check(self):
        self.check.run_once()

    @invariant()
    def counts_and_lookups_agree(self):
        count = self.store.count(QUEUE, JobState.PENDING, None, False, 10_000, None)
        assert count == len(self.pending)
        found = self.store.lookup(list(self.pending | self.done), include_body=False)
        assert set(found) == self.pending | self.done


TestPlacementModel = PlacementModel.TestCase
TestPlacementModel.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
