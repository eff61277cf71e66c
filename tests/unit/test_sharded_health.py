"""ShardedBackend's failure policy: which storage errors are retried, and when a shard is taken
out of enqueue/dequeue. Real SQLite shards, with one wrapped to fail the way a dead or hung
storage server does."""

from __future__ import annotations

import pytest

from pinlater.errors import QueueContended, ShardConnectionFailed
from pinlater.storage.errors import QueueBusy, ShardError
from pinlater.storage.models import NewJob
from tests.support.sqlite_env import sharded_store


class Failing:
    """Wraps a real shard; `enqueue`/`ping` raise the configured ShardError and count calls."""

    def __init__(self, shard, error: ShardError | None):
        self._shard, self.error, self.calls = shard, error, 0

    def __getattr__(self, name):
        return getattr(self._shard, name)

    def enqueue(self, queue, jobs):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self._shard.enqueue(queue, jobs)

    def ping(self):
        if self.error is not None:
            raise self.error
        self._shard.ping()


@pytest.fixture
def store(tmp_path):
    store = sharded_store(tmp_path, num_priorities=3, retries=2, unhealthy_after_failures=3, seed=7)
    yield store
    store.close()


def wrap(store, name, error):
    wrapped = Failing(store._set.shards[name], error)
    store._set.shards[name] = wrapped
    return wrapped


def test_a_timed_out_shard_is_taken_out_at_once_and_not_retried(store):
    dead = wrap(store, "a", ShardError("a", "read timed out", timed_out=True))
    with pytest.raises(ShardConnectionFailed):
        store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]))
    assert dead.calls == 1
    assert not store.health.is_healthy("a")
    assert store.enqueue_candidates() == ["b"]


def test_fast_connection_errors_are_retried_and_counted_towards_unhealthy(store):
    flaky = wrap(store, "a", ShardError("a", "connection refused"))
    with pytest.raises(ShardConnectionFailed):
        store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]))
    assert flaky.calls == 3
    assert not store.health.is_healthy("a")


def test_enqueues_go_to_the_other_shard_while_one_is_down(store):
    wrap(store, "a", ShardError("a", "read timed out", timed_out=True))
    shards = {store.enqueue("q", [NewJob(b"x")])[0].shard for _ in range(20)}
    assert shards == {"b"}


def test_a_probe_brings_a_recovered_shard_back(store):
    dead = wrap(store, "a", ShardError("a", "read timed out", timed_out=True))
    store.health.mark_unhealthy("a")
    assert store.probe_unhealthy() == []
    dead.error = None
    assert store.probe_unhealthy() == ["a"]
    assert sorted(store.enqueue_candidates()) == ["a", "b"]


def test_no_enqueue_shard_left_answers_no_healthy_shards(store):
    from pinlater.errors import NoHealthyShards

    store.health.mark_unhealthy("a")
    store.health.mark_unhealthy("b")
    with pytest.raises(NoHealthyShards):
        store.enqueue("q", [NewJob(b"x")])


def test_a_queues_own_contention_is_retried_but_never_costs_the_shard_its_health(store):
    busy = wrap(store, "a", QueueBusy("a", "MySQL error 1205: Lock wait timeout exceeded"))
    for _ in range(10):  # far more failures than unhealthy_after_failures
        with pytest.raises(QueueContended, match="1205"):  # a SHARD_CONNECTION_FAILED
            store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]))
    assert busy.calls == 10 * 3, "retried like any retriable failure"
    assert store.health.is_healthy("a")
    assert sorted(store.enqueue_candidates()) == ["a", "b"]


def test_queue_busy_does_not_reset_a_shards_count_of_real_failures(store):
    flaky = wrap(store, "a", ShardError("a", "connection refused"))
    with pytest.raises(ShardConnectionFailed):
        store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]), retries=1)  # 2 failures
    flaky.error = QueueBusy("a", "deadlock")
    with pytest.raises(ShardConnectionFailed):
        store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]))
    flaky.error = ShardError("a", "connection refused")
    with pytest.raises(ShardConnectionFailed):
        store.call("a", lambda s: s.enqueue("q", [NewJob(b"x")]), retries=0)  # the third
    assert not store.health.is_healthy("a")
