"""LedgerAudit (pinlater/ops/ledger_audit.py) on a real two-shard SQLite store: bounded work
per pass, every book read in turn, the gauge summed over shards, gone queues dropped."""

from __future__ import annotations

import sqlite3

from pinlater.ops.ledger_audit import LedgerAudit
from pinlater.ops.metrics import Metrics
from pinlater.storage.models import NewJob
from pinlater.storage.sharded import ShardedBackend
from tests.support.sqlite_env import sharded_store


def store(tmp_path) -> ShardedBackend:
    return sharded_store(tmp_path, shards=("1", "2"), queue=None)


def gauge(metrics: Metrics, queue: str) -> float | None:
    return metrics.registry.get_sample_value("pinlater_ledger_imbalance_jobs", {"queue": queue})


def test_each_pass_reads_at_most_per_pass_books_and_every_book_in_turn(tmp_path):
    s = store(tmp_path)
    try:
        for queue in ("a", "b", "c"):
            s.create_queue(queue)
        s.enqueue("a", [NewJob(b"x")] * 3)
        metrics = Metrics()
        metrics.queues.replace(["a", "b", "c"])
        audit = LedgerAudit(s, metrics, per_pass=4)
        assert [audit.run_once() for _ in range(3)] == [4, 2, 4]  # 6 books, then a new round
        assert audit.imbalances() == {"a": 0, "b": 0, "c": 0}
        assert gauge(metrics, "a") == 0

        # a job of "a" deleted by hand on its shard: the next reads of that book show it
        (descriptor,) = s.enqueue("a", [NewJob(b"y")])
        shard = s.shard(descriptor.shard)
        conn = sqlite3.connect(shard.path)
        with conn:
            qid = conn.execute("SELECT queue_id FROM queues WHERE name = 'a'").fetchone()[0]
            conn.execute(f"DELETE FROM q{qid}_p1 WHERE local_id = ?", (descriptor.local_id,))
        conn.close()
        for _ in range(3):
            audit.run_once()
        assert audit.imbalances()["a"] == 1 and gauge(metrics, "a") == 1

        s.delete_queue("c")  # gone: its books drop out at the next round
        for _ in range(4):
            audit.run_once()
        assert set(audit.imbalances()) == {"a", "b"}
    finally:
        s.close()
