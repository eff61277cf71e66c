"""The reads: lookup, count (exact up to the cap, due or future) and scan (newest first,
resumed after a bound), and body filters, whose errors propagate unchanged."""

from __future__ import annotations

from collections.abc import Sequence

from pinlater.storage.models import JobRecord, ScanBound
from pinlater.storage.shard_kit.kit import (
    FAILED,
    HOUR_MS,
    PENDING,
    QUEUE,
    SUCCEEDED,
    Kit,
    raises,
)
from pinlater.storage.shard_kit.registry import check

# ---------------------------------------------------------------- lookup


@check(rule=("L-fields", "L-missing-omitted"))
def lookup_omits_missing_jobs_and_leaves_out_bodies_unless_asked(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    records = kit.shard.lookup(QUEUE, [(1, 2), (1, 99), (2, 1), (1, 1)], False)
    assert [(r.priority, r.local_id, r.body) for r in records] == [(1, 2, None), (1, 1, None)]
    assert kit.shard.lookup(QUEUE, [], True) == []


# ---------------------------------------------------------------- count


@check(rule=("N-count", "N-count-cap"))
def count_is_exact_up_to_the_cap_and_splits_due_from_future(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(*[b"now"] * 5, run_after_ms=now - 10)
    kit.enqueue(*[b"later"] * 4, run_after_ms=now + HOUR_MS)
    kit.enqueue(*[b"p2"] * 3, priority=2, run_after_ms=now - 10)
    kit.enqueue(b"p2 later", priority=2, run_after_ms=now + HOUR_MS)
    assert kit.count() == 5
    assert kit.count(future=True) == 4
    assert kit.count(priorities=(1, 2, 3)) == 8
    assert kit.count(priorities=(1, 2, 3), future=True) == 5
    assert kit.count(priorities=(1, 2), cap=6) == 6
    assert kit.count(cap=3) == 3
    assert kit.count(FAILED, (1, 2)) == 0
    assert kit.count(body_filter=lambda b: b != b"now") == 0
    assert kit.count(priorities=(1, 2), body_filter=lambda b: b != b"now") == 3
    assert kit.count(cap=1, body_filter=lambda b: True) == 1


@check(rule="N-count-cap")
def count_with_a_body_filter_pages_past_the_first_page(kit: Kit) -> None:
    kit.enqueue(*[b"hit" if i % 3 == 0 else b"miss" for i in range(250)])
    assert kit.count(cap=1000, body_filter=lambda b: b == b"hit") == 84
    assert kit.count(cap=10, body_filter=lambda b: b == b"hit") == 10


class _FilterRefusedError(Exception):
    """Raised by a body filter (e.g. a regex over its time budget)."""


@check(rule="B-body-regex-budget")
def body_filter_errors_propagate_unchanged(kit: Kit) -> None:
    kit.enqueue(b"a")

    def refuse(body: bytes) -> bool:
        raise _FilterRefusedError("too slow")

    for call in (
        lambda: kit.count(cap=9, body_filter=refuse),
        lambda: kit.scan(limit=9, body_filter=refuse),
        lambda: kit.shard.delete_jobs(QUEUE, PENDING, 1, 9, refuse),
    ):
        assert str(raises(_FilterRefusedError, call)) == "too slow"
    assert kit.count() == 1


# ---------------------------------------------------------------- scan


def _positions(records: Sequence[JobRecord], now: int) -> list[tuple[int, int]]:
    return [(r.run_after_ms - now, r.local_id) for r in records]


@check(rule=("N-scan-order", "N-scan-pages"))
def scan_returns_newest_first_and_resumes_after_a_bound(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for offset in (-30, -10, -10, -20, HOUR_MS):
        kit.enqueue(b"x", run_after_ms=now + offset)
    page = kit.scan(limit=2)
    assert _positions(page, now) == [(-10, 3), (-10, 2)]
    assert all(r.body is None for r in page)
    rest = kit.scan(bounds={1: ScanBound(now - 10, 2)})
    assert _positions(rest, now) == [(-20, 4), (-30, 1)]
    assert [r.local_id for r in kit.scan(future=True)] == [5]


@check(rule="N-scan-pages")
def scan_pages_chained_by_their_last_record_visit_every_job_once(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for i in range(25):
        kit.enqueue(b"x", run_after_ms=now - 100 - (i % 4))  # many ties on run_after
    kit.enqueue(b"newer", run_after_ms=now - 50)
    seen: list[tuple[int, int]] = []
    bound = None
    for _ in range(20):  # bounded
        page = kit.scan(bounds={1: bound}, limit=4)
        if not page:
            break
        seen += [(r.run_after_ms, r.local_id) for r in page]
        bound = ScanBound(page[-1].run_after_ms, page[-1].local_id)
    assert len(seen) == len(set(seen)) == 26
    assert seen == sorted(seen, reverse=True)
    assert seen[0] == (now - 50, 26) and seen[1] == (now - 100, 25)


@check(rule="N-scan-order")
def scan_limits_each_priority_and_filters_bodies(kit: Kit) -> None:
    kit.enqueue(*[b"keep", b"drop"] * 150)
    kit.enqueue(b"keep", b"keep", priority=2)
    found = kit.scan(bounds={1: None, 2: None}, limit=120, body_filter=lambda b: b == b"keep")
    assert [r.priority for r in found].count(1) == 120
    assert [r.priority for r in found].count(2) == 2
    assert all(r.body is None and r.local_id % 2 == 1 for r in found if r.priority == 1)


@check(rule="N-scan-order")
def scan_of_other_states_splits_due_from_future_and_filters(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"keep", b"drop", run_after_ms=now - 100)
    for job in kit.dequeue():
        assert kit.ack_jobs([job]) == 1
    assert kit.scan(SUCCEEDED, {1: None, 2: None}, future=True) == []
    due = kit.scan(SUCCEEDED, {1: None, 2: None})
    assert [(r.local_id, r.state) for r in due] == [(2, SUCCEEDED), (1, SUCCEEDED)]
    kept = kit.scan(SUCCEEDED, body_filter=lambda b: b == b"keep")
    assert [(r.local_id, r.body) for r in kept] == [(1, None)]
    assert kit.scan(PENDING) == []
