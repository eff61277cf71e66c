"""The depth collector against this server's own createQueue/deleteQueue running meanwhile,
over a real (SQLite) store: what the server did while a sweep listed the queues or read their
counts is not undone by that sweep's older picture (the hostile-metrics churn test caught each
of these under load: a new queue's series under queue="", a deleted queue's gauges left)."""

from __future__ import annotations

from contextlib import closing

import pytest

from pinlater.ops.depth import DepthCollector
from pinlater.ops.metrics import NO_QUEUE, Metrics
from tests.support.sqlite_env import sharded_store


@pytest.fixture
def store(tmp_path):
    with closing(sharded_store(tmp_path, shards=("1", "2"), queue=None, retries=0)) as store:
        yield store


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def depth(store, metrics):
    return DepthCollector(store, metrics, cap=1000, interval=1.0)


def create(store, metrics, queue: str) -> None:
    """What this server's createQueue does (store, then the label)."""
    store.create_queue(queue)
    metrics.queues.add(queue)


def delete(store, metrics, queue: str) -> None:
    """What this server's deleteQueue does (store, then forget the queue's series)."""
    store.delete_queue(queue)
    metrics.forget_queue(queue)


def gauged(metrics, queue: str) -> bool:
    return any(
        s.labels.get("queue") == queue
        for family in metrics.registry.collect()
        if family.name == "pinlater_queue_jobs"
        for s in family.samples
    )


def sweep(depth) -> None:
    """One whole sweep: list the queues, then read the counts of all of them."""
    assert depth._list_queues()
    depth._refresh(depth._queues)


def after_listing(monkeypatch, store, action) -> None:
    """Run `action` once, right after the store listed its queues (before the sweep uses it)."""
    real = store.queue_names

    def listing():
        names = real()
        monkeypatch.setattr(store, "queue_names", real)
        action()
        return names

    monkeypatch.setattr(store, "queue_names", listing)


def test_a_queue_created_while_the_sweep_lists_keeps_its_label(monkeypatch, store, metrics, depth):
    create(store, metrics, "old")
    after_listing(monkeypatch, store, lambda: create(store, metrics, "new"))
    sweep(depth)
    assert metrics.queues.label("new") == "new"  # was forgotten again: counted under ""
    sweep(depth)
    assert gauged(metrics, "new") and gauged(metrics, "old")


def test_a_queue_deleted_while_the_sweep_lists_does_not_come_back(
    monkeypatch, store, metrics, depth
):
    create(store, metrics, "old")
    create(store, metrics, "kept")
    after_listing(monkeypatch, store, lambda: delete(store, metrics, "old"))
    sweep(depth)
    assert metrics.queues.label("old") == NO_QUEUE
    assert not gauged(metrics, "old") and gauged(metrics, "kept")


def test_a_queue_deleted_while_its_counts_are_read_leaves_no_gauges(
    monkeypatch, store, metrics, depth
):
    create(store, metrics, "gone")
    create(store, metrics, "kept")
    real_call = store.call
    pending = ["gone"]

    def call_then_delete(name, op, **kwargs):
        result = real_call(name, op, **kwargs)
        if pending:
            delete(store, metrics, pending.pop())
        return result

    assert depth._list_queues()
    monkeypatch.setattr(store, "call", call_then_delete)
    depth._refresh(depth._queues)
    monkeypatch.setattr(store, "call", real_call)
    assert not gauged(metrics, "gone")
    counts, _ = depth.snapshot()  # what the admin API's queue overview shows
    assert {queue for queue, _, _ in counts} == {"kept"}, "a deleted queue's counts stayed"
