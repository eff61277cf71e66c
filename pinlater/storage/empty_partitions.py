"""The empty-partition map: (queue, shard, priority) partitions known to hold no eligible job.

Pinterest measured more than half of PinLater's dequeue queries returning nothing: every
dequeue asks every shard at each priority until it has enough. This server remembers which
partitions a dequeue found empty and skips them until a change to that partition is seen
(an enqueue, a failure ack, a retry through this server, or the backend's signal of one through
another) or `ttl` passes. A partition is marked empty only when no change to its queue was
seen while the storage call ran (the queue's epoch is unchanged) and the mark expires `ttl`
after the call *started*: so whatever made a job eligible, the map hides it for less than `ttl`.
A call that found jobs unmarks its partition and keeps a concurrent call that started before it
finished from marking it: on MySQL a dequeue skips the rows another one holds locked, so an
empty answer next to a busy one says nothing about what else is there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

#: beyond this many marks, expired ones are dropped (and if none were, all: it is only a cache)
MAX_MARKS = 100_000


class EmptyPartitions:
    """Thread-safe; `ttl` 0 turns it off (nothing is ever skipped)."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        #: queue -> (shard, priority) -> when the mark expires
        self._until: dict[str, dict[tuple[str, int], float]] = {}
        #: entries in `_until` and `_found` together (bounded by MAX_MARKS)
        self._marks = 0
        self._epochs: dict[str, int] = {}
        #: queue -> (shard, priority) -> when a call last found jobs there
        self._found: dict[str, dict[tuple[str, int], float]] = {}
        #: storage dequeue calls made, those that found nothing, partitions skipped
        self.calls = 0
        self.empty_calls = 0
        self.skipped = 0

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    def epoch(self, queue: str) -> int:
        return self._epochs.get(queue, 0)

    def skip(self, queue: str, shard: str, priority: int) -> bool:
        """Whether the partition is known empty now (counted when it is)."""
        marks = self._until.get(queue)
        until = None if marks is None else marks.get((shard, priority))
        if until is None or until <= self.clock():
            return False
        self.skipped += 1
        return True

    def observed(
        self, queue: str, shard: str, priority: int, found: int, epoch: int, started: float
    ) -> None:
        """A storage dequeue of the partition that began at `started` (with the queue at
        `epoch`) found `found` jobs; mark it empty when it found none and nothing changed."""
        with self._lock:
            self.calls += 1
            if found:
                self._found_now(queue, shard, priority)
                return
            self.empty_calls += 1
            self._mark(queue, shard, (priority,), epoch, started)

    def found(self, queue: str, shard: str, priority: int) -> None:
        """A call other than a storage dequeue (a broker's prefetch) found jobs there."""
        with self._lock:
            self._found_now(queue, shard, priority)

    def _found_now(self, queue: str, shard: str, priority: int) -> None:
        """Under the lock."""
        if not self.enabled:
            return
        marks = self._until.get(queue)
        if marks is not None and marks.pop((shard, priority), None) is not None:
            self._marks -= 1
        found = self._found.setdefault(queue, {})
        if (shard, priority) not in found:
            self._marks += 1
        found[(shard, priority)] = self.clock()

    def nothing_due(
        self, queue: str, shard: str, priorities: Iterable[int], epoch: int, started: float
    ) -> None:
        """A check that began at `started` (queue at `epoch`) found no eligible job of `queue`
        on `shard` at any priority (the long-poll watcher's `next_due_ms`)."""
        with self._lock:
            self._mark(queue, shard, tuple(priorities), epoch, started)

    def _mark(
        self, queue: str, shard: str, priorities: tuple[int, ...], epoch: int, started: float
    ) -> None:
        """Under the lock."""
        if not self.enabled or self._epochs.get(queue, 0) != epoch:
            return
        if self._marks >= MAX_MARKS:
            self._prune()
        marks = self._until.setdefault(queue, {})
        found = self._found.get(queue, {})
        for priority in priorities:
            if found.get((shard, priority), -1.0) >= started:  # jobs were there meanwhile
                continue
            self._marks += (shard, priority) not in marks
            marks[(shard, priority)] = started + self.ttl

    def forget(
        self, queue: str, shards: Iterable[str] | None = None, priorities: Iterable[int] = ()
    ) -> None:
        """A change to `queue` (on `shards`, all when None; at `priorities`, all when empty):
        its partitions there are no longer known empty."""
        with self._lock:
            self._epochs[queue] = self._epochs.get(queue, 0) + 1
            marks = self._until.get(queue)
            if not marks:
                return
            names = None if shards is None else set(shards)
            levels = set(priorities)
            for key in [k for k in marks if names is None or k[0] in names]:
                if not levels or key[1] in levels:
                    del marks[key]
                    self._marks -= 1

    def clear(self) -> None:
        """Forget every mark (a shard clock moved)."""
        with self._lock:
            for queue in self._epochs:
                self._epochs[queue] += 1
            self._until.clear()
            self._found.clear()
            self._marks = 0

    def _prune(self) -> None:
        now = self.clock()
        for queue, marks in list(self._until.items()):
            live = {k: until for k, until in marks.items() if until > now}
            if live:
                self._until[queue] = live
            else:
                del self._until[queue]
        for queue, found in list(self._found.items()):  # only calls still running need them
            recent = {k: at for k, at in found.items() if at > now - self.ttl}
            if recent:
                self._found[queue] = recent
            else:
                del self._found[queue]
        self._marks = sum(len(m) for m in self._until.values()) + sum(
            len(f) for f in self._found.values()
        )
        if self._marks >= MAX_MARKS:
            self._until.clear()
            self._found.clear()
            self._marks = 0
