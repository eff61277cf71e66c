"""The ledger (`Shard.ledger` and the counts every primitive adds): each transition counts in
its counter, what stores nothing (a held key, a stale ack, a dry run) counts nothing or only
as deduplicated, the books balance through deletes and purges, they are per queue and go with
it, and they balance under concurrent writers."""

from __future__ import annotations

import functools
import threading

from pinlater.storage.claims import new_claim
from pinlater.storage.ledger import COUNTERS, LedgerBook
from pinlater.storage.models import Ack, Checkpoint, ClaimMatch, NewJob
from pinlater.storage.shard_kit.kit import (
    FAILED,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    SUCCEEDED,
    Kit,
    acked,
    held,
)
from pinlater.storage.shard_kit.races import retried, run_threads
from pinlater.storage.shard_kit.registry import check


def book(kit: Kit, queue: str = QUEUE) -> LedgerBook:
    found = kit.shard.ledger(queue)
    assert set(found.counters) == set(COUNTERS)
    return found


def counters(kit: Kit, queue: str = QUEUE) -> dict[str, int]:
    """The non-zero counters."""
    return {k: v for k, v in book(kit, queue).counters.items() if v}


@check(rule=("A-ledger-counts", "A-books-balance"))
def ledger_starts_empty_and_counts_enqueues(kit: Kit) -> None:
    empty = book(kit)
    assert counters(kit) == {} and empty.present == 0 and empty.balanced
    kit.enqueue(b"a", b"b")
    kit.enqueue(b"c", priority=3)
    found = book(kit)
    assert counters(kit) == {"enqueued": 3}
    assert found.states == {PENDING: 3} and found.balanced


@check(rule="A-ledger-counts")
def ledger_counts_dequeues_but_not_dry_runs(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c")
    kit.dry_run()
    assert counters(kit) == {"enqueued": 3}
    assert len(kit.dequeue(2)) == 2
    found = book(kit)
    assert counters(kit) == {"enqueued": 3, "dequeued": 2}
    assert found.states == {PENDING: 1, IN_PROGRESS: 2} and found.balanced


@check(rule="A-ledger-counts")
def ledger_counts_success_failure_and_retry_acks_apart(kit: Kit) -> None:
    kit.enqueue(b"ok", b"retry", attempts_allowed=2)
    kit.enqueue(b"last", attempts_allowed=1)
    ok, retry, last = kit.dequeue(3)
    stale = ClaimMatch(SOURCE, "not-the-claim")
    assert kit.ack(succeeded=[Ack(1, ok.local_id, stale)]) == 0  # a no-op counts nothing
    applied = kit.ack_jobs(succeeded=[ok], failed=[retry, last])
    assert applied == 3
    assert kit.ack_jobs(succeeded=[ok]) == 0  # a resent ack neither
    found = book(kit)
    assert counters(kit) == {
        "enqueued": 3,
        "dequeued": 3,
        "succeeded": 1,
        "failed": 1,
        "retried": 1,
    }
    assert found.states == {PENDING: 1, SUCCEEDED: 1, FAILED: 1} and found.balanced


@check(rule="A-ledger-counts")
def ledger_counts_piggybacked_acks_and_their_dequeue(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    (first,) = kit.dequeue(1)
    applied, jobs = kit.shard.ack_and_dequeue(QUEUE, [acked(first)], [], 1, 5, new_claim(SOURCE))
    assert applied == 1 and len(jobs) == 1
    assert counters(kit) == {"enqueued": 2, "dequeued": 2, "succeeded": 1}


@check(rule=("A-ledger-counts", "A-books-balance"))
def ledger_counts_deletes_and_purges_and_stays_balanced(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 5, attempts_allowed=1)
    jobs = kit.dequeue(4)
    kit.ack_jobs(succeeded=jobs[:2])
    kit.fail_for_good(jobs[2:3])
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 1
    assert kit.shard.delete_jobs(QUEUE, IN_PROGRESS, 1, 10, lambda body: True) == 1
    kit.advance(10_000)
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 1000, 10) == 2
    found = book(kit)
    assert counters(kit) == {
        "enqueued": 5,
        "dequeued": 4,
        "succeeded": 2,
        "failed": 1,
        "deleted": 2,
        "purged": 2,
    }
    assert found.states == {FAILED: 1} and found.present == 1 and found.balanced


@check(rule="A-ledger-counts")
def ledger_counts_reclaimed_claims(kit: Kit) -> None:
    kit.enqueue(b"retry", attempts_allowed=2)
    kit.enqueue(b"last", attempts_allowed=1)
    kit.dequeue(2)
    kit.advance(60_000)
    counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed) == (1, 1)
    found = book(kit)
    assert found.counters["reclaimed"] == 2 and found.counters["failed"] == 0
    assert found.states == {PENDING: 1, FAILED: 1} and found.balanced


@check(rule=("A-ledger-counts", "A-books-balance"))
def ledger_counts_held_keys_as_deduplicated_not_enqueued(kit: Kit) -> None:
    window = 3_600_000
    kit.shard.enqueue_keyed(QUEUE, [NewJob(b"a", unique_key="k"), NewJob(b"b")], window)
    again = [NewJob(b"a2", unique_key="k"), NewJob(b"c", unique_key="j")]
    again.append(NewJob(b"c2", unique_key="j"))  # a repeat within the batch stores nothing
    kit.shard.enqueue_keyed(QUEUE, again, window)
    found = book(kit)
    assert counters(kit) == {"enqueued": 3, "deduplicated": 2}
    assert found.present == 3 and found.balanced


@check(rule="A-ledger-counts")
def ledger_ignores_moves_that_neither_add_nor_remove(kit: Kit) -> None:
    kit.enqueue(b"x", attempts_allowed=1)
    (job,) = kit.dequeue()
    kit.fail_for_good([job])
    assert kit.shard.retry_failed(QUEUE, 1, 1, None, 10) == 1
    before = counters(kit)
    (again,) = kit.dequeue()
    kit.checkpoint(Checkpoint(1, again.local_id, held(again), move_to_pending=True))
    after = book(kit)
    assert after.counters["dequeued"] == before["dequeued"] + 1
    assert after.states == {PENDING: 1} and after.balanced


@check(rule="A-ledger-reset")
def ledger_is_per_queue_and_reset_by_deleting_the_queue(kit: Kit) -> None:
    kit.shard.create_queue("other")
    kit.enqueue(b"a", b"b")
    kit.enqueue(b"c", queue="other")
    assert counters(kit, "other") == {"enqueued": 1}
    kit.shard.delete_queue(QUEUE)
    kit.shard.create_queue(QUEUE)
    fresh = book(kit)
    assert counters(kit) == {} and fresh.present == 0 and fresh.balanced
    kit.enqueue(b"d")
    assert counters(kit) == {"enqueued": 1}
    assert counters(kit, "other") == {"enqueued": 1}


@check(rule="A-books-balance")
def ledger_balances_under_concurrent_writers_and_readers(kit: Kit) -> None:
    """Enqueuers, dequeuers and ackers on their own handles while another reads the books:
    every book read mid-flight balances (counters and states come from one snapshot)."""
    stop = threading.Event()
    imbalances: list[int] = []

    def writer() -> None:
        shard = kit.open()
        for _ in range(15):
            retried(lambda: shard.enqueue(QUEUE, [NewJob(b"x", attempts_allowed=2)] * 3))
            jobs = retried(lambda: shard.dequeue(QUEUE, 1, 2, new_claim(SOURCE)))
            acks = [Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim)) for j in jobs]
            retried(functools.partial(shard.ack, QUEUE, acks[:1], acks[1:]))
            retried(lambda: shard.delete_jobs(QUEUE, SUCCEEDED, 1, 1, None))

    reading = threading.Event()

    def reader() -> None:
        shard = kit.open()
        while not stop.is_set():
            imbalances.append(retried(lambda: shard.ledger(QUEUE).imbalance))
            reading.set()

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        # the writers start once the reader reads (on a loaded machine they could all finish
        # before its first read: a check of nothing)
        assert reading.wait(60), "the reader never read the books"
        run_threads([writer] * 3)
    finally:
        stop.set()
        watcher.join(30)
    assert imbalances and set(imbalances) == {0}, sorted(set(imbalances))
    final = book(kit)
    assert final.counters["enqueued"] == 135 and final.balanced


@check(rule="A-books-balance")
def ledger_fold_keeps_the_books(kit: Kit) -> None:
    """fold_ledger (the janitor's) changes nothing the books show, in batches, repeatedly."""
    for _ in range(7):
        kit.enqueue(b"x", b"y")
        kit.dequeue(1)
    before = book(kit)
    removed = kit.shard.fold_ledger(QUEUE, 3)
    assert removed >= 0 and book(kit) == before
    while kit.shard.fold_ledger(QUEUE, 3):
        assert book(kit) == before
    assert kit.shard.fold_ledger(QUEUE, 3) == 0 and book(kit) == before
    kit.enqueue(b"z")
    assert book(kit).counters["enqueued"] == before.counters["enqueued"] + 1
    assert book(kit).balanced
