"""QueueNotFound from every primitive on a queue that does not exist (empty and zero-limit calls
included), naming the queue and creating nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import Shard
from pinlater.storage.errors import QueueNotFound
from pinlater.storage.models import Ack, Checkpoint, NewJob
from pinlater.storage.shard_kit.kit import PENDING, QUEUE, SOURCE, SUCCEEDED, Kit, by_source, raises
from pinlater.storage.shard_kit.registry import register

_UNKNOWN_QUEUE_CALLS: dict[str, Callable[[Shard], Any]] = {
    "enqueue": lambda s: s.enqueue("nope", [NewJob(b"x")]),
    "enqueue-empty": lambda s: s.enqueue("nope", []),
    "enqueue-keyed": lambda s: s.enqueue_keyed("nope", [NewJob(b"x", unique_key="k")], 1000),
    "enqueue-keyed-no-key": lambda s: s.enqueue_keyed("nope", [NewJob(b"x")], 1000),
    "dequeue": lambda s: s.dequeue("nope", 1, 5, new_claim(SOURCE)),
    "dequeue-limit-zero": lambda s: s.dequeue("nope", 1, 0, new_claim(SOURCE)),
    "dequeue-dry-run": lambda s: s.dequeue("nope", 1, 5, None),
    "ack": lambda s: s.ack("nope", [Ack(1, 1, by_source())], []),
    "ack-failure": lambda s: s.ack("nope", [], [Ack(1, 1, by_source())]),
    "ack-empty": lambda s: s.ack("nope", [], []),
    "ack-and-dequeue": lambda s: s.ack_and_dequeue("nope", [], [], 1, 5, new_claim(SOURCE)),
    "checkpoint": lambda s: s.checkpoint("nope", [Checkpoint(1, 1, by_source())]),
    "checkpoint-empty": lambda s: s.checkpoint("nope", []),
    "lookup": lambda s: s.lookup("nope", [(1, 1)], False),
    "lookup-empty": lambda s: s.lookup("nope", [], True),
    "count": lambda s: s.count("nope", PENDING, [1, 2], False, 10, None),
    "count-capped-at-zero": lambda s: s.count("nope", PENDING, [1], False, 0, None),
    "count-filtered": lambda s: s.count("nope", PENDING, [1], False, 10, lambda b: True),
    "scan": lambda s: s.scan("nope", PENDING, {1: None}, False, 10, None),
    "scan-filtered": lambda s: s.scan("nope", PENDING, {1: None}, False, 10, lambda b: True),
    "scan-empty": lambda s: s.scan("nope", PENDING, {}, False, 10, None),
    "retry-failed": lambda s: s.retry_failed("nope", 1, 1, None, 10),
    "delete-jobs": lambda s: s.delete_jobs("nope", PENDING, 1, 10, None),
    "delete-jobs-filtered": lambda s: s.delete_jobs("nope", PENDING, 1, 10, lambda b: True),
    "reclaim-expired": lambda s: s.reclaim_expired("nope", 1, 1000, 10),
    "purge": lambda s: s.purge("nope", 1, SUCCEEDED, 1000, 10),
    "purge-keys": lambda s: s.purge_keys("nope", 10),
    "next-due": lambda s: s.next_due_ms("nope"),
}


def _unknown_queue_check(call: Callable[[Shard], Any]) -> Callable[[Kit], None]:
    def run(kit: Kit) -> None:
        error = raises(QueueNotFound, lambda: call(kit.shard))
        assert error.queue == "nope"
        assert kit.shard.queue_names() == {QUEUE}  # and the call created nothing

    return run


for _name, _call in _UNKNOWN_QUEUE_CALLS.items():
    register(f"unknown-queue-{_name}", _unknown_queue_check(_call), rule="E-queue-not-found")
