"""Reply budgets: a dequeue claims only the leading jobs whose bodies fit its `ByteBudget` (the
rest stay PENDING, untouched), and a lookup returns bodies only when they all fit."""

from __future__ import annotations

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import ByteBudget, StorageLimits
from pinlater.storage.shard_kit.kit import (
    IN_PROGRESS,
    PENDING,
    QUEUE,
    SOURCE,
    SUCCEEDED,
    Kit,
    acked,
)
from pinlater.storage.shard_kit.registry import check

PER_JOB = 10


def _budget(*lengths: int) -> ByteBudget:
    """A budget that holds exactly jobs of these body lengths."""
    return ByteBudget(sum(lengths) + PER_JOB * len(lengths), PER_JOB)


def _dequeue(kit: Kit, limit: int, budget: ByteBudget | None, claim: bool = True):
    return kit.shard.dequeue(QUEUE, 1, limit, new_claim(SOURCE) if claim else None, budget)


@check(rule="D-reply-fits")
def dequeue_claims_only_the_leading_jobs_that_fit_its_budget(kit: Kit) -> None:
    bodies = [b"a" * 100, b"b" * 200, b"c" * 300, b"d" * 5]
    ids = kit.enqueue(*bodies, attempts_allowed=3)
    got = _dequeue(kit, 10, _budget(100, 200, 5))  # room for d too, but c comes first
    assert [(j.local_id, j.body) for j in got] == list(zip(ids[:2], bodies[:2], strict=True))
    left = kit.records(ids[2:])
    assert [(r.state, r.claim, r.attempts_remaining) for r in left] == [(PENDING, None, 3)] * 2
    assert [r.updated_at_ms for r in left] == [r.created_at_ms for r in left]
    assert [j.body for j in kit.dequeue()] == bodies[2:]


@check(rule="D-reply-fits")
def a_budget_holding_exactly_the_jobs_takes_them_all_and_one_byte_less_one_fewer(
    kit: Kit,
) -> None:
    ids = kit.enqueue(b"x" * 64, b"y" * 64)
    exact = _budget(64, 64)
    assert [j.local_id for j in _dequeue(kit, 10, exact, claim=False)] == ids
    short = ByteBudget(exact.max_bytes - 1, PER_JOB)
    assert [j.local_id for j in _dequeue(kit, 10, short)] == ids[:1]
    assert [j.local_id for j in _dequeue(kit, 10, exact)] == ids[1:]


@check(rule="D-reply-fits")
def a_first_job_over_the_budget_claims_nothing(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"z" * 1000)
    assert _dequeue(kit, 5, _budget(999)) == []
    assert _dequeue(kit, 5, ByteBudget(1000, 1)) == []  # the per-job cost counts too
    assert kit.records([local_id])[0].state == PENDING
    assert [j.local_id for j in _dequeue(kit, 5, _budget(1000))] == [local_id]


@check(rule="D-reply-fits")
def large_bodies_past_the_first_select_come_back_byte_identical(kit: Kit) -> None:
    """Many jobs against a budget far below limit x body: SQL reads the larger bodies after
    the claim, Redis checks lengths before reading any; either way the bytes are exact."""
    bodies = [bytes([i]) * (10 if i % 3 else 3000) + bytes(range(256)) for i in range(30)]
    ids = kit.enqueue(*bodies)
    budget = _budget(*map(len, bodies[:20]))
    dry = _dequeue(kit, 30, budget, claim=False)
    assert [(j.local_id, j.body) for j in dry] == list(zip(ids[:20], bodies[:20], strict=True))
    got = _dequeue(kit, 30, budget)
    assert [(j.local_id, j.body) for j in got] == list(zip(ids[:20], bodies[:20], strict=True))
    assert {r.state for r in kit.records(ids[20:])} == {PENDING}
    assert {r.state for r in kit.records(ids[:20])} == {IN_PROGRESS}


@check(rule="D-reply-fits")
def ack_and_dequeue_applies_its_acks_and_claims_within_the_budget(kit: Kit) -> None:
    (first,) = kit.enqueue(b"done")
    (job,) = kit.dequeue()
    ids = kit.enqueue(b"p" * 50, b"q" * 50, b"r" * 50)
    ack = acked(job)
    applied, got = kit.shard.ack_and_dequeue(
        QUEUE, [ack], [], 1, 10, new_claim(SOURCE), _budget(50, 50)
    )
    assert applied == 1 and [j.local_id for j in got] == ids[:2]
    assert kit.records([first])[0].state == SUCCEEDED
    assert kit.records(ids[2:])[0].state == PENDING


@check
def lookup_returns_bodies_only_when_they_all_fit(kit: Kit) -> None:
    ids = kit.enqueue(b"a" * 100, b"b" * 200, b"")
    refs = [(1, i) for i in ids] + [(1, 999)]
    fits = kit.shard.lookup(QUEUE, refs, True, 300)
    assert [(r.body, r.body_size) for r in fits] == [(b"a" * 100, 100), (b"b" * 200, 200), (b"", 0)]
    over = kit.shard.lookup(QUEUE, refs, True, 299)
    assert [(r.body, r.body_size) for r in over] == [(None, 100), (None, 200), (None, 0)]
    assert [r.local_id for r in over] == ids
    unbounded = kit.shard.lookup(QUEUE, refs, True)
    assert [r.body_size for r in unbounded] == [100, 200, 0]
    bodiless = kit.shard.lookup(QUEUE, refs, False, 0)
    assert [(r.body, r.body_size) for r in bodiless] == [(None, None)] * 3


@check(rule="D-reply-fits")
def the_budget_holds_when_bodies_exceed_a_lowered_body_cap(kit: Kit) -> None:
    """A handle whose body cap is below what is stored (the cap was lowered) may read bodies in
    chunks sized by that cap (Redis), but never hands out more than the budget."""
    small_cap = kit.open(limits=StorageLimits(num_priorities=3, status_cap=20, body_cap=100))
    bodies = [b"a" * 90, b"b" * 80, b"c" * 5000, b"d" * 10, b"e" * 100, b"f" * 70]
    ids = kit.enqueue(*bodies)
    budget = _budget(90, 80, 4999)  # room for a, b and most of c
    got = small_cap.dequeue(QUEUE, 1, 6, new_claim(SOURCE), budget)
    assert [(j.local_id, j.body) for j in got] == list(zip(ids[:2], bodies[:2], strict=True))
    rest = small_cap.dequeue(QUEUE, 1, 6, new_claim(SOURCE), ByteBudget(10**6, PER_JOB))
    assert [j.body for j in rest] == bodies[2:]
