"""One partition's buffer: the jobs a broker reserved (`Shard.prefetch`) of one (queue, shard),
kept per priority in storage order, each with the time it was fetched.

Pure bookkeeping, no storage and no lock of its own (the broker holds its lock around every
call): taking serves the oldest job of a priority first, exactly the order a storage dequeue of
that priority would claim them in, and only the leading jobs that fit a reply's `ByteBudget`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from pinlater.storage.contract import ByteBudget
from pinlater.storage.models import DequeuedJob


@dataclass(frozen=True, slots=True)
class Buffered:
    """A reserved job and when (monotonic seconds) it was fetched."""

    job: DequeuedJob
    fetched_at: float


class PartitionBuffer:
    """The reserved jobs of one (queue, shard), per priority, oldest first."""

    def __init__(self) -> None:
        self._levels: dict[int, deque[Buffered]] = {}
        self.size = 0
        #: a refill of this partition is running or queued (one at a time)
        self.refilling = False
        #: held by a refill while it prefetches, and by a dequeue that found the buffer short
        #: while it asks storage: a job is then either buffered or still in storage, never
        #: reserved on its way to the buffer while the dequeue looks
        self.lock = threading.Lock()

    def add(self, jobs: Iterable[DequeuedJob], now: float) -> int:
        """Append jobs a prefetch returned (in its order); returns how many."""
        added = 0
        for job in jobs:
            self._levels.setdefault(job.priority, deque()).append(Buffered(job, now))
            added += 1
        self.size += added
        return added

    def held(self, priority: int) -> int:
        level = self._levels.get(priority)
        return 0 if level is None else len(level)

    def take(self, priority: int, need: int, budget: ByteBudget | None) -> list[DequeuedJob]:
        """Remove and return up to `need` oldest jobs of `priority` that fit `budget`."""
        level = self._levels.get(priority)
        if not level or need <= 0:
            return []
        count = min(need, len(level))
        if budget is not None:
            count = budget.fitting([len(level[i].job.body) for i in range(count)])
        taken = [level.popleft().job for _ in range(count)]
        self.size -= count
        return taken

    def peek(self, priority: int, need: int, budget: ByteBudget | None) -> list[DequeuedJob]:
        """What `take` would return, leaving the jobs in place (a dry run)."""
        level = self._levels.get(priority)
        if not level or need <= 0:
            return []
        jobs = [level[i].job for i in range(min(need, len(level)))]
        if budget is not None:
            jobs = jobs[: budget.fitting([len(job.body) for job in jobs])]
        return jobs

    def stale(self, before: float) -> list[DequeuedJob]:
        """Remove and return the jobs fetched before `before` (idle too long)."""
        out: list[DequeuedJob] = []
        for level in self._levels.values():
            while level and level[0].fetched_at < before:
                out.append(level.popleft().job)
        self.size -= len(out)
        return out

    def drain(self, priority: int | None = None) -> list[DequeuedJob]:
        """Remove and return every job (the broker stops or loses the partition), or every
        job of `priority`."""
        if priority is not None:
            out = [item.job for item in self._levels.pop(priority, ())]
            self.size -= len(out)
            return out
        out = [item.job for level in self._levels.values() for item in level]
        self._levels.clear()
        self.size = 0
        return out
