"""FIFO dequeue on SQL shards (`Shard.dequeue_fifo`, docs/semantics.md `F-...`): one write
transaction that counts the queue's IN_PROGRESS jobs and claims its heads in local id order.

What makes it atomic against other FIFO dequeues of the queue is the dialect's
`_fifo_transaction`: SQLite's writer transaction already holds the database lock; MySQL takes a
named lock per (shard, queue) around the transaction (`backends/mysql.py`), so two servers never
count the same in-flight jobs or claim the same head. Heads are read with `fifo_heads` (ORDER BY
local_id over the PENDING rows) on an index of (state, local_id) that the queue's first FIFO
dequeue adds to its job tables (`_ensure_fifo_index`, once per table and shard object), so a
head costs a seek whatever the backlog or the finished jobs awaiting purge, and queues that are
not FIFO never maintain that index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.storage.contract import ByteBudget
from pinlater.storage.models import DequeuedJob, new_dequeued_job

_ALL_INLINE = 2**62


def dequeue_fifo(
    shard: Any,
    queue: str,
    limit: int,
    in_flight_cap: int,
    claim: str | None,
    budget: ByteBudget | None,
) -> list[DequeuedJob]:
    """`Shard.dequeue_fifo` for an `SQLShard` (`shard`)."""
    levels = range(1, shard.limits.num_priorities + 1)
    shard._ensure_fifo_index(queue)
    out: list[DequeuedJob] = []
    with shard._read() if claim is None else shard._fifo_transaction(queue) as cur:
        now = shard._tx_now(cur)
        tables = {p: shard._job_table(cur, queue, p) for p in levels}
        busy = sum(shard._run(cur, "fifo_in_flight", t, {}).fetchone()[0] for t in tables.values())
        room = min(limit, in_flight_cap - busy)
        for priority in levels:
            if room <= 0:
                break
            jobs, full = _take(shard, cur, tables[priority], priority, room, now, budget, claim)
            out += jobs
            room -= len(jobs)
            if budget is not None:
                budget = budget.spent(len(jobs), sum(len(job.body) for job in jobs))
            if full:
                break
        if claim is not None:
            shard._book(cur, queue, dequeued=len(out))
    return out


def _take(
    shard: Any,
    cur: Any,
    table: tuple[str, ...],
    priority: int,
    room: int,
    now: int,
    budget: ByteBudget | None,
    claim: str | None,
) -> tuple[list[DequeuedJob], bool]:
    """Claim (or, without `claim`, read) one priority's due heads that fit; and whether the
    budget ran out."""
    rows, full = _heads(shard, cur, table, room, now, budget, claim)
    if claim is not None and rows:
        shard._claim(cur, table, [(*row[:5], now) for row in rows], claim)
    rows = shard._with_bodies(cur, table, rows)
    jobs = [new_dequeued_job(priority, r[0], bytes(r[1]), r[3], r[4], claim) for r in rows]
    return jobs, full


def _heads(
    shard: Any,
    cur: Any,
    table: tuple[str, ...],
    room: int,
    now: int,
    budget: ByteBudget | None,
    claim: str | None,
) -> tuple[Sequence, bool]:
    """The due heads of one priority that fit the budget, and whether the budget ran out."""
    inline = _ALL_INLINE if budget is None else max(budget.max_bytes // room - budget.per_job, 0)
    lock = "" if claim is None else shard._fifo_row_lock()
    params = {"limit": room, "inline": inline}
    rows = shard._run(cur, "fifo_heads", table, params, lock=lock).fetchall()
    due = []
    for row in rows:
        if int(row[5]) > now:
            break
        due.append(row)
    if budget is None:
        return due, False
    fit = budget.fitting([row[2] for row in due])
    return due[:fit], fit < len(due)
