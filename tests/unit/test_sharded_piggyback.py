"""ShardedBackend: piggy-backed acks ride with the first dequeue of the shard that owns them
(one storage call), and fall back to a plain ack when that call fails. Real SQLite shards."""

from __future__ import annotations

import pytest

from pinlater.errors import QueueNotFound
from pinlater.storage.errors import ShardError
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from tests.support.sqlite_env import sharded_store

SOURCE = "w:1"


class Spy:
    """Wraps a real shard: records the job calls; `combined_error` makes ack_and_dequeue fail."""

    def __init__(self, shard):
        self._shard, self.calls, self.combined_error = shard, [], None

    def __getattr__(self, name):
        return getattr(self._shard, name)

    def ack(self, queue, succeeded, failed):
        self.calls.append("ack")
        return self._shard.ack(queue, succeeded, failed)

    def dequeue(self, queue, priority, limit, claim, budget=None):
        self.calls.append(f"dequeue{priority}")
        return self._shard.dequeue(queue, priority, limit, claim, budget)

    def ack_and_dequeue(self, queue, succeeded, failed, priority, limit, claim, budget=None):
        self.calls.append(f"ack+dequeue{priority}")
        if self.combined_error is not None:
            raise self.combined_error
        return (
            self._shard.ack(queue, succeeded, failed),
            self._shard.dequeue(queue, priority, limit, claim, budget),
        )


@pytest.fixture
def store(tmp_path):
    store = sharded_store(tmp_path, num_priorities=2, retries=1, unhealthy_after_failures=5, seed=3)
    for name in ("a", "b"):
        store._set.shards[name] = Spy(store._set.shards[name])
    yield store
    store.close()


def spies(store):
    return store._set.shards["a"], store._set.shards["b"]


def held_on(store, shard, n):
    """Enqueue n jobs on `shard` and claim them; (shard, Ack) pairs with their claims."""
    ids = store.shard(shard).enqueue("q", [NewJob(body=b"x")] * n)
    jobs = store.shard(shard).dequeue("q", 1, n, f"{'0' * 24}:{SOURCE}")
    assert sorted(j.local_id for j in jobs) == ids
    for spy in spies(store):
        spy.calls.clear()
    return [(shard, Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim))) for j in jobs]


def states(store, shard, acks):
    return {
        r.state for r in store.shard(shard).lookup("q", [(1, a.local_id) for _, a in acks], False)
    }


def test_acks_of_one_shard_ride_with_its_first_dequeue(store):
    acks = held_on(store, "b", 3)
    store.shard("a").enqueue("q", [NewJob(body=b"y")] * 2)
    got = store.dequeue("q", 10, SOURCE, acks=(acks, []))
    a, b = spies(store)
    assert b.calls[0] == "ack+dequeue1" and "ack" not in b.calls
    assert "ack" not in a.calls
    assert states(store, "b", acks) == {JobState.SUCCEEDED}
    assert len(got) == 2 and {d.shard for d, _ in got} == {"a"}


def test_a_failed_combined_call_falls_back_to_a_plain_ack_then_dequeues(store):
    acks = held_on(store, "a", 2)
    store.shard("a").enqueue("q", [NewJob(body=b"z")])
    spies(store)[0].combined_error = ShardError("a", "connection reset", retriable=True)
    got = store.dequeue("q", 10, SOURCE, acks=([], acks))
    calls = spies(store)[0].calls
    assert calls[:2] == ["ack+dequeue1", "ack+dequeue1"]  # tried, retried once
    assert calls[2:4] == ["ack", "dequeue1"]
    # failure-acked with a retry left and no delay: pending again, so this dequeue took them
    assert {d.local_id for d, _ in got} >= {a.local_id for _, a in acks}
    assert states(store, "a", acks) == {JobState.IN_PROGRESS}


def test_an_ack_error_fails_the_request_as_a_plain_ack_would(store):
    acks = held_on(store, "a", 1)
    spies(store)[0].combined_error = QueueNotFound("q")
    spies(store)[0]._shard.delete_queue("q")  # the plain ack finds no queue either
    with pytest.raises(QueueNotFound):
        store.dequeue("q", 10, SOURCE, acks=(acks, []))


def test_acks_spread_over_shards_are_applied_before_any_dequeue(store):
    acks = held_on(store, "a", 1) + held_on(store, "b", 1)
    store.dequeue("q", 10, SOURCE, acks=(acks, []))
    for spy in spies(store):
        assert spy.calls[0] == "ack" and not any(c.startswith("ack+") for c in spy.calls)
    assert states(store, "a", acks[:1]) == states(store, "b", acks[1:]) == {JobState.SUCCEEDED}


def test_dry_runs_apply_piggybacked_acks_first_and_claim_nothing(store):
    acks = held_on(store, "b", 2)
    got = store.dequeue("q", 10, SOURCE, dry_run=True, acks=(acks, []))
    assert spies(store)[1].calls[0] == "ack" and got == []
    assert states(store, "b", acks) == {JobState.SUCCEEDED}
