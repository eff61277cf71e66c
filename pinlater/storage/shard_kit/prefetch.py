"""The prefetching broker's storage primitives (docs/semantics.md `S-...`): prefetch reserves
jobs as a dequeue would claim them, using no attempt; hand_out makes them ordinary claims
whose timeout counts from then; release and an expired deadline give them back with nothing
used; acks and checkpoints of a reserved job apply as to a handed-out one; fencing by claim."""

from __future__ import annotations

import functools
import threading
from collections import Counter

from pinlater.storage.claims import claim_source, handed_claim, new_claim
from pinlater.storage.contract import ByteBudget
from pinlater.storage.models import Ack, Checkpoint, ClaimMatch, DequeuedJob
from pinlater.storage.shard_kit.kit import (
    HOUR_MS,
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    SUCCEEDED,
    Kit,
    by_source,
    held,
)
from pinlater.storage.shard_kit.races import retried, run_threads
from pinlater.storage.shard_kit.registry import check

BROKER = "broker:server1"
HOLD_MS = 10_000
#: a claim timeout far longer than any check's clock moves (only reservations expire)
LONG_TIMEOUT_MS = 100 * HOUR_MS


def prefetch(kit: Kit, limit: int = 10, priority: int = 1, hold_ms: int = HOLD_MS):
    return kit.shard.prefetch(QUEUE, priority, limit, new_claim(BROKER), hold_ms)


def refs(jobs: list[DequeuedJob]) -> list[tuple[int, str]]:
    return [(j.local_id, j.claim or "") for j in jobs]


@check(rule="S-prefetch")
def prefetch_reserves_in_dequeue_order_using_no_attempt(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"later", run_after_ms=now + HOUR_MS)
    kit.enqueue(b"second", run_after_ms=now - 10, attempts_allowed=3)
    kit.enqueue(b"first", run_after_ms=now - 20, attempts_allowed=3)
    kit.enqueue(b"p2", priority=2)
    jobs = prefetch(kit)
    assert [(j.local_id, j.body) for j in jobs] == [(3, b"first"), (2, b"second")]
    assert {j.claim for j in jobs} == {jobs[0].claim} and jobs[0].claim is not None
    assert [(j.attempts_allowed, j.attempts_remaining) for j in jobs] == [(3, 3)] * 2
    assert kit.dequeue() == [] and kit.dry_run() == []  # reserved jobs are claimed
    assert [j.body for j in prefetch(kit, priority=2)] == [b"p2"]
    assert kit.count(PENDING, future=True) == 1


@check(rule="S-prefetch")
def reads_show_a_reserved_job_as_pending_without_a_claim(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"old", run_after_ms=now - 30, attempts_allowed=3)
    kit.enqueue(b"mid", run_after_ms=now - 20)
    kit.enqueue(b"new", run_after_ms=now - 10)
    (taken,) = kit.dequeue(1)
    before = kit.record(2)
    kit.advance(5000)
    jobs = prefetch(kit, limit=1)
    assert [j.body for j in jobs] == [b"mid"]
    assert kit.record(2) == before  # exactly the PENDING job it was, updated_at included
    assert [(r.local_id, r.state, r.claim) for r in kit.scan(PENDING)] == [
        (3, PENDING, None),
        (2, PENDING, None),
    ]
    assert [(r.local_id, r.claim) for r in kit.scan(IN_PROGRESS)] == [(1, taken.claim)]
    assert [r.local_id for r in kit.scan(PENDING, limit=1)] == [3]
    assert [r.local_id for r in kit.scan(PENDING, body_filter=lambda b: b == b"mid")] == [2]
    assert (kit.count(PENDING), kit.count(IN_PROGRESS)) == (2, 1)
    assert kit.count(PENDING, cap=1) == 1
    assert kit.count(PENDING, body_filter=lambda b: b == b"mid") == 1
    stats = kit.shard.queue_stats([QUEUE], 100)[QUEUE]
    assert (stats.counts[(1, PENDING, False)], stats.counts[(1, IN_PROGRESS, False)]) == (2, 1)
    assert kit.shard.ledger(QUEUE).states == {PENDING: 2, IN_PROGRESS: 1}


@check(rule="S-prefetch")
def prefetch_claims_only_what_fits_its_budget(kit: Kit) -> None:
    kit.enqueue(b"x" * 100, b"y" * 100, b"z" * 100)
    jobs = kit.shard.prefetch(QUEUE, 1, 10, new_claim(BROKER), HOLD_MS, ByteBudget(250))
    assert [j.local_id for j in jobs] == [1, 2]
    assert kit.record(3).state == PENDING


@check(rule="S-hand-out")
def hand_out_starts_the_claim_timeout_and_uses_no_attempt(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", attempts_allowed=2)
    jobs = prefetch(kit, hold_ms=HOUR_MS)
    kit.advance(50_000)
    with kit.timed() as window:
        assert kit.shard.hand_out(QUEUE, 1, refs(jobs)) == 2
    for record in kit.records([1, 2]):
        assert (record.state, record.claim, record.attempts_remaining) == (
            IN_PROGRESS,
            jobs[0].claim,
            2,
        )
        assert window.holds(record.updated_at_ms)
    assert kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10).retried == 0  # 50 s since prefetch
    stats = kit.shard.queue_stats([QUEUE], 0)[QUEUE]
    assert stats.first_reserve_expiry == {}  # handed out: no deadline of its own any more
    kit.advance(HOUR_MS + 31_000)  # past the prefetch's hold too: an ordinary claim now
    counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed, counts.released) == (2, 0, 0)
    assert [r.attempts_remaining for r in kit.records([1, 2])] == [1, 1]


@check(rule=("S-hand-out", "C-source-match"))
def hand_out_may_give_the_jobs_the_requests_own_claim(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    jobs = prefetch(kit)
    mine = new_claim(SOURCE)
    assert kit.shard.hand_out(QUEUE, 1, refs(jobs[:1]), mine) == 1
    assert kit.record(1).claim == mine and kit.record(2).claim is None  # 2: still reserved
    assert claim_source(jobs[1].claim or "") == BROKER
    # an original client (no claim sent back) is matched by the source of the claim it got
    assert kit.ack(succeeded=[Ack(1, 2, by_source())]) == 0
    assert kit.ack(succeeded=[Ack(1, 1, by_source())]) == 1
    assert kit.record(1).state == SUCCEEDED


@check(rule=("S-hand-out", "C-claim-fences"))
def hand_out_and_release_are_fenced_by_the_prefetch_claim(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    jobs = prefetch(kit)
    stale = [(j.local_id, new_claim(BROKER)) for j in jobs]
    assert kit.shard.hand_out(QUEUE, 1, stale) == 0
    assert kit.shard.release(QUEUE, 1, stale) == 0
    assert kit.shard.release(QUEUE, 1, refs(jobs[:1])) == 1
    assert kit.shard.hand_out(QUEUE, 1, refs(jobs)) == 1  # job 1 is no longer reserved
    assert kit.shard.release(QUEUE, 1, refs(jobs)) == 0  # job 2 is handed out: not released
    assert kit.record(1).state == PENDING and kit.record(2).state == IN_PROGRESS
    assert kit.shard.hand_out(QUEUE, 1, []) == 0 and kit.shard.release(QUEUE, 1, []) == 0


@check(rule="S-release")
def release_returns_jobs_at_once_in_their_place_with_nothing_used(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"old", run_after_ms=now - 50, attempts_allowed=1)
    kit.enqueue(b"new", run_after_ms=now - 10, attempts_allowed=1)
    before = kit.record(1)
    jobs = prefetch(kit, limit=1)
    kit.enqueue(b"newest", run_after_ms=now - 5)
    kit.advance(5000)
    assert kit.shard.release(QUEUE, 1, refs(jobs)) == 1
    assert kit.record(1) == before  # unchanged, updated_at included: nothing showed
    assert [j.body for j in kit.dequeue(3)] == [b"old", b"new", b"newest"]


@check(rule="S-reserve-expiry")
def reclaim_returns_expired_reservations_using_no_attempt(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"one-attempt", run_after_ms=now - 10, attempts_allowed=1)
    kit.enqueue(b"two", run_after_ms=now - 5, attempts_allowed=2)
    before = kit.records([1, 2])
    jobs = prefetch(kit)
    stats = kit.shard.queue_stats([QUEUE], 0)[QUEUE]
    deadline = stats.first_reserve_expiry[1]
    assert now + HOLD_MS <= deadline <= kit.shard.now_ms() + HOLD_MS
    # a reservation is not subject to the claim timeout, only to its own deadline
    counts = kit.shard.reclaim_expired(QUEUE, 1, 1, 10)
    assert (counts.retried, counts.failed, counts.released) == (0, 0, 0)
    kit.advance(HOLD_MS + 1)
    counts = kit.shard.reclaim_expired(QUEUE, 1, LONG_TIMEOUT_MS, 10)
    assert (counts.retried, counts.failed, counts.released) == (0, 0, 2)
    assert kit.records([1, 2]) == before  # unchanged, updated_at included
    assert kit.shard.queue_stats([QUEUE], 0)[QUEUE].first_reserve_expiry == {}
    assert kit.shard.hand_out(QUEUE, 1, refs(jobs)) == 0  # the broker came back too late
    assert [j.body for j in kit.dequeue()] == [b"one-attempt", b"two"]


@check(rule=("S-reserve-expiry", "J-batches"))
def reclaim_of_reservations_and_claims_stops_at_the_limit(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 3)
    kit.dequeue(1)
    prefetch(kit, limit=2, hold_ms=1000)
    kit.advance(5000)
    first = kit.shard.reclaim_expired(QUEUE, 1, 1000, 2)
    assert (first.released, first.retried) == (2, 0)
    second = kit.shard.reclaim_expired(QUEUE, 1, 1000, 2)
    assert (second.released, second.retried) == (0, 1)
    assert kit.count(PENDING) == 3


@check(rule="S-reserved-ack")
def acks_of_a_reserved_job_apply_as_if_it_was_handed_out(kit: Kit) -> None:
    kit.enqueue(b"ok", b"retry", attempts_allowed=2)
    jobs = prefetch(kit)
    ok, retry = jobs
    assert kit.ack(succeeded=[Ack(1, ok.local_id, held(ok))]) == 1
    assert kit.ack(failed=[Ack(1, retry.local_id, held(retry), retry_delay_ms=HOUR_MS)]) == 1
    done, again = kit.records([1, 2])
    assert (done.state, done.claim) == (SUCCEEDED, ok.claim)
    assert (again.state, again.attempts_remaining) == (PENDING, 1)  # one attempt used
    assert kit.shard.hand_out(QUEUE, 1, refs(jobs)) == 0  # the late hand-out is a no-op
    assert kit.shard.queue_stats([QUEUE], 0)[QUEUE].first_reserve_expiry == {}
    kit.advance(HOLD_MS + 1)
    assert kit.shard.reclaim_expired(QUEUE, 1, LONG_TIMEOUT_MS, 10).released == 0


@check(rule="S-reserved-ack")
def a_checkpoint_of_a_reserved_job_hands_it_out(kit: Kit) -> None:
    kit.enqueue(b"a")
    (job,) = prefetch(kit)
    assert kit.ack(succeeded=[Ack(1, 1, ClaimMatch(SOURCE, new_claim(BROKER)))]) == 0
    assert kit.checkpoint(Checkpoint(1, 1, held(job), prepend_status="seen")) == 1
    kit.advance(HOLD_MS + 1)
    assert kit.shard.reclaim_expired(QUEUE, 1, LONG_TIMEOUT_MS, 10).released == 0
    record = kit.record(1)
    assert (record.state, record.claim, record.custom_status) == (IN_PROGRESS, job.claim, "seen")
    assert kit.shard.release(QUEUE, 1, refs([job])) == 0


@check(rule=("S-reserved-ack", "R-broker-claim"))
def a_claim_with_the_reservations_token_acks_it_before_the_hand_out(kit: Kit) -> None:
    """A broker hands a buffered job out under `handed_claim` (the reservation's token, the
    worker's source); a server that never saw the hand-out applies the worker's ack or
    checkpoint with that claim, and the job takes it. Another token, or the token once the
    reservation has ended, matches nothing."""
    kit.enqueue(b"acked", b"checkpointed", b"other", b"ended")
    acked, checkpointed, other, ended = prefetch(kit)
    given = handed_claim(acked.claim or "", new_claim(SOURCE))
    assert claim_source(given) == SOURCE and given != acked.claim
    assert kit.ack(succeeded=[Ack(1, acked.local_id, ClaimMatch(SOURCE, given))]) == 1
    assert kit.checkpoint(Checkpoint(1, checkpointed.local_id, ClaimMatch(SOURCE, given))) == 1
    foreign = handed_claim(new_claim(BROKER), new_claim(SOURCE))
    assert kit.ack(succeeded=[Ack(1, other.local_id, ClaimMatch(SOURCE, foreign))]) == 0
    assert kit.shard.hand_out(QUEUE, 1, refs([ended]), new_claim(SOURCE)) == 1
    assert kit.ack(succeeded=[Ack(1, ended.local_id, ClaimMatch(SOURCE, given))]) == 0
    done, kept, still, handed = kit.records([1, 2, 3, 4])
    assert (done.state, done.claim) == (SUCCEEDED, given)
    assert (kept.state, kept.claim) == (IN_PROGRESS, given)
    assert (still.state, handed.state) == (PENDING, IN_PROGRESS)  # `other` is still reserved
    assert kit.shard.hand_out(QUEUE, 1, refs([acked, checkpointed]), given) == 0
    assert kit.ack(succeeded=[Ack(1, checkpointed.local_id, ClaimMatch(SOURCE, given))]) == 1


def nonzero(kit: Kit) -> dict[str, int]:
    return {k: v for k, v in kit.shard.ledger(QUEUE).counters.items() if v}


@check(rule=("S-prefetch", "A-ledger-counts", "A-books-balance"))
def ledger_counts_a_reservation_when_handed_out_and_no_return(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c")
    jobs = prefetch(kit)
    assert nonzero(kit) == {"enqueued": 3}  # reserved, not dequeued yet
    kit.shard.hand_out(QUEUE, 1, refs(jobs[:1]))
    assert kit.shard.hand_out(QUEUE, 1, refs(jobs[:1])) == 0  # again: a no-op counts nothing
    kit.shard.release(QUEUE, 1, refs(jobs[1:2]))
    kit.advance(HOLD_MS + 1)
    assert kit.shard.reclaim_expired(QUEUE, 1, LONG_TIMEOUT_MS, 10).released == 1
    found = kit.shard.ledger(QUEUE)
    assert nonzero(kit) == {"enqueued": 3, "dequeued": 1}
    assert found.states == {PENDING: 2, IN_PROGRESS: 1} and found.balanced


@check(rule=("S-reserved-ack", "A-ledger-counts", "A-books-balance"))
def ledger_counts_a_reservation_an_ack_or_checkpoint_hands_out(kit: Kit) -> None:
    kit.enqueue(b"acked", b"checkpointed", b"stale", b"kept")
    acked, checkpointed, stale, _kept = prefetch(kit)
    assert kit.ack(succeeded=[Ack(1, acked.local_id, held(acked))]) == 1
    assert kit.checkpoint(Checkpoint(1, checkpointed.local_id, held(checkpointed))) == 1
    wrong = ClaimMatch(SOURCE, new_claim(BROKER))
    assert kit.ack(failed=[Ack(1, stale.local_id, wrong)]) == 0
    assert kit.checkpoint(Checkpoint(1, stale.local_id, wrong)) == 0
    assert nonzero(kit) == {"enqueued": 4, "dequeued": 2, "succeeded": 1}
    found = kit.shard.ledger(QUEUE)
    assert found.states == {PENDING: 2, IN_PROGRESS: 1, SUCCEEDED: 1} and found.balanced


@check(rule=("S-prefetch", "X-claim-once"))
def two_brokers_and_a_dequeuer_take_every_job_exactly_once(kit: Kit) -> None:
    """Two servers both believing they own the partition (a lease moving) and a plain
    dequeue: storage claims each job once, whatever the leases say."""
    ids = kit.enqueue(*[b"%d" % i for i in range(600)])
    taken: Counter = Counter()
    lock = threading.Lock()

    def take(call) -> None:
        for _ in range(600):  # bounded
            jobs = retried(call)
            if not jobs:
                return
            with lock:
                taken.update(j.local_id for j in jobs)

    run_threads(
        [
            functools.partial(take, functools.partial(prefetch, kit, 17)),
            functools.partial(take, functools.partial(prefetch, kit, 13)),
            functools.partial(take, functools.partial(kit.dequeue, 11)),
        ]
    )
    assert sorted(taken) == sorted(ids) and set(taken.values()) == {1}


@check(rule=("S-hand-out", "S-reserve-expiry"))
def hand_outs_racing_the_reclaimer_end_each_reservation_once(kit: Kit) -> None:
    """A late broker handing out while the janitor returns its expired reservations: each job
    ends up either handed out (IN_PROGRESS) or PENDING again, never both, nothing used."""
    kit.enqueue(*[b"x"] * 300, attempts_allowed=2)
    jobs = prefetch(kit, limit=300, hold_ms=1000)
    kit.advance(2000)
    handed: list[int] = []
    returned: list[int] = []

    def broker() -> None:
        for start in range(0, 300, 10):
            batch = refs(jobs[start : start + 10])
            handed.append(retried(functools.partial(kit.shard.hand_out, QUEUE, 1, batch)))

    def janitor() -> None:
        for _ in range(100):  # bounded
            counts = retried(lambda: kit.shard.reclaim_expired(QUEUE, 1, LONG_TIMEOUT_MS, 7))
            returned.append(counts.released)

    run_threads([broker, janitor])
    assert sum(handed) == kit.count(IN_PROGRESS, cap=1000)
    assert sum(returned) == kit.count(PENDING, cap=1000)
    assert sum(handed) + sum(returned) == 300
    assert {r.attempts_remaining for r in kit.records([j.local_id for j in jobs])} == {2}


@check(rule=("S-prefetch", "A-ledger-counts"))
def deletes_take_a_reserved_job_as_pending(kit: Kit) -> None:
    """A reserved job reads as PENDING, so deleteJobs of PENDING jobs deletes it (first: a
    prefetch took the oldest due) and one of IN_PROGRESS jobs leaves it."""
    kit.enqueue(b"a", b"b", b"c", b"d")
    kit.dequeue(1)
    prefetch(kit, limit=2)  # b, c reserved
    assert kit.shard.delete_jobs(QUEUE, IN_PROGRESS, 1, 10, None) == 1  # a alone
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, lambda body: body == b"c") == 1
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 1, None) == 1  # b, reserved, first
    assert [r.local_id for r in kit.scan(PENDING, body_filter=lambda body: True)] == [4]
    found = kit.shard.ledger(QUEUE)
    assert found.counters["deleted"] == 3 and found.states == {PENDING: 1} and found.balanced
