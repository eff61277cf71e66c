"""Concurrent callers on one shard: dequeuers claim each job once, acks racing the reclaimer
move each job once, enqueuers get distinct ids, a queue deleted and re-created under its callers
answers only QueueNotFound and leaves other queues alone. The helpers run the threads and retry
what the contract lets a storage roll back under contention."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from pinlater.storage.claims import new_claim
from pinlater.storage.errors import QueueBusy, QueueNotFound, ShardError
from pinlater.storage.models import Ack, NewJob
from pinlater.storage.shard_kit.kit import (
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    SUCCEEDED,
    Kit,
    by_source,
)
from pinlater.storage.shard_kit.registry import check

T = TypeVar("T")


def retried(call: Callable[[], T], attempts: int = 50) -> T:
    """`call`, tried again after a retriable ShardError, as the sharded layer does: under
    contention a storage may roll a call back (an InnoDB deadlock between an ack and a
    reclaim), which the contract allows."""
    for _ in range(attempts - 1):
        try:
            return call()
        except ShardError as exc:
            if not exc.retriable:
                raise
    return call()


def run_threads(targets: Sequence[Callable[[], None]], timeout: float = 120) -> None:
    """Run the targets in threads at once; re-raise the first error any of them hit."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads still running"
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- concurrency


@check(rule="X-claim-once")
def concurrency_four_dequeuers_claim_every_job_exactly_once(kit: Kit) -> None:
    ids: list[int] = []
    for start in range(0, 2000, 500):
        ids += kit.enqueue(*[b"%d" % i for i in range(start, start + 500)])
    claimed: Counter = Counter()
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(2000):  # bounded
            jobs = kit.dequeue(23)
            if not jobs:
                return
            with lock:
                claimed.update(j.local_id for j in jobs)

    run_threads([worker] * 4)
    assert sorted(claimed) == sorted(ids) and set(claimed.values()) == {1}
    assert kit.count(IN_PROGRESS, cap=10_000) == 2000


@check
def concurrency_acks_racing_the_reclaimer_move_each_job_once(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 400, attempts_allowed=3)
    jobs = kit.dequeue(400)
    kit.advance(60_000)
    acked: list[int] = []
    reclaimed: list[int] = []

    def acker() -> None:
        for start in range(0, 400, 10):
            acks = [Ack(1, j.local_id, by_source()) for j in jobs[start : start + 10]]
            acked.append(retried(functools.partial(kit.ack, acks)))

    def reclaimer() -> None:
        for _ in range(100):  # bounded
            counts = retried(lambda: kit.shard.reclaim_expired(QUEUE, 1, 30_000, 7))
            reclaimed.append(counts.retried + counts.failed)

    run_threads([acker, reclaimer])
    succeeded, pending = kit.count(SUCCEEDED, cap=1000), kit.count(cap=1000)
    assert sum(acked) == succeeded and sum(reclaimed) == pending
    assert succeeded + pending == 400


@check(rule="I-ids-not-reused")
def concurrency_enqueuers_get_distinct_ids_matching_their_jobs(kit: Kit) -> None:
    results: list[tuple[list[int], list[bytes]]] = []

    def producer(worker: int) -> None:
        for batch in range(5):
            bodies = [b"w%d-b%d-%d" % (worker, batch, i) for i in range(37)]
            jobs = [NewJob(body=b, priority=1 + i % 2) for i, b in enumerate(bodies)]
            results.append((kit.shard.enqueue(QUEUE, jobs), bodies))

    run_threads([functools.partial(producer, w) for w in range(4)])
    seen: set[tuple[int, int]] = set()
    for ids, bodies in results:
        refs = [(1 + i % 2, local_id) for i, local_id in enumerate(ids)]
        assert not seen & set(refs)
        seen |= set(refs)
        found = {(r.priority, r.local_id): r.body for r in kit.shard.lookup(QUEUE, refs, True)}
        assert [found[ref] for ref in refs] == bodies
    assert len(seen) == 4 * 5 * 37


@check(rule=("Q-delete-concurrent", "E-queue-busy"))
def concurrency_delete_and_create_churn_answers_queue_not_found_and_spares_other_queues(
    kit: Kit,
) -> None:
    """One handle deletes and re-creates queue "x" in a loop while others enqueue, claim, ack
    and count on it and on queue "y". On "x" every call succeeds or raises QueueNotFound (or
    QueueBusy, which the sharded layer retries); "y" never sees an error at all."""
    admin = kit.open()
    for name in ("x", "y"):
        admin.create_queue(name)
    stop = threading.Event()

    def churn() -> None:
        try:
            for _ in range(CHURN_CYCLES):
                admin.delete_queue("x")
                admin.create_queue("x")
        finally:
            stop.set()

    def work(queue: str, tolerated: tuple[type[Exception], ...]) -> None:
        shard = kit.open()
        while not stop.is_set():
            for call in _worker_round(shard, queue):
                try:
                    call()
                except tolerated:
                    pass  # the queue is gone (or busy) at this moment: a correct answer

    run_threads(
        [churn]
        + [functools.partial(work, "x", (QueueNotFound, QueueBusy))] * 3
        + [functools.partial(work, "y", ())]
    )
    assert admin.queue_names() >= {"x", "y"}
    admin.delete_queue("x")
    admin.create_queue("x")
    assert admin.enqueue("x", [NewJob(body=b"after")]) == [1]  # fresh, and usable


#: delete/create cycles of the churn check (each a few ms to ~100 ms, by backend)
CHURN_CYCLES = 15


def _worker_round(shard, queue: str) -> list[Callable[[], object]]:
    """What a worker does on `queue`: enqueue, claim, ack what it claimed, count."""

    def claim_and_ack() -> None:
        jobs = shard.dequeue(queue, 1, 3, new_claim(SOURCE))
        shard.ack(queue, [Ack(1, j.local_id, by_source()) for j in jobs], [])

    return [
        lambda: shard.enqueue(queue, [NewJob(body=b"c")] * 3),
        claim_and_ack,
        lambda: shard.count(queue, PENDING, [1, 2, 3], False, 10**6, None),
    ]
