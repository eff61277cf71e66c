"""Where each queue lives: a queue set to `partitions: k` is placed on k of the shards that take
enqueues, chosen by rendezvous hashing of (queue, shard name). Every server with the same shard
map and setting picks the same shards; queues spread over the shards independently (each
queue ranks the shards its own way), so small queues do not pile onto the same few; adding or
removing a shard moves only the queues that shard wins or loses. A queue without the setting
lives on every shard (PinLater's layout).

Jobs never move. After a change (k, the shard list, a shard turning dequeue_only) new jobs go
to the new placement, and the shards outside it that still hold jobs of the queue, its
*holders*, are still read: a dequeue visits those holding pending or in-progress jobs (a failed
ack or a reclaim makes those pending again); count, scan, retry and delete visit those holding
any job. Holders are known conservatively, so a read never misses a partition: at start (and
when a queue first gets the setting) every shard outside the placement is one; a shard leaving
the placement becomes one at once; only a check that finds it empty removes it
(`pinlater.ops.placement_check`, in the background), and a check that finds jobs adds it back.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pinlater.storage.contract import ShardSpec


def rendezvous(queue: str, shards: Sequence[str], k: int) -> list[str]:
    """The `k` shards of `shards` with the highest weight for `queue`, highest first."""
    ranked = sorted(shards, key=lambda shard: (_weight(queue, shard), shard), reverse=True)
    return ranked[:k]


def _weight(queue: str, shard: str) -> bytes:
    # queue and shard names are ASCII letters, digits and '_'; \0 keeps the pairs distinct
    return hashlib.blake2b(f"{queue}\0{shard}".encode("ascii"), digest_size=8).digest()


@dataclass(frozen=True)
class QueuePlacement:
    """One partitioned queue: its partitions, its holders, and the shard lists the requests
    use (precomputed, in shard map order). `generation` changes with every change, so a check
    that raced one is not applied."""

    partitions: int
    placed: tuple[str, ...]
    active: frozenset[str]
    held: frozenset[str]
    generation: int
    dequeue: tuple[str, ...] = ()
    read: tuple[str, ...] = ()


class Placement:
    """Thread-safe placement of the partitioned queues; None from a lookup means "every
    shard" (the queue has no `partitions` setting)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settings: dict[str, int] = {}
        self._shards: tuple[str, ...] = ()
        self._eligible: tuple[str, ...] = ()
        self._queues: dict[str, QueuePlacement] = {}
        self._generation = 0

    # ---- changes ----

    def shards_changed(self, specs: Sequence[ShardSpec]) -> None:
        """The shard map changed (or was first set)."""
        with self._lock:
            added = {spec.name for spec in specs} - set(self._shards)
            self._shards = tuple(spec.name for spec in specs)
            self._eligible = tuple(spec.name for spec in specs if not spec.dequeue_only)
            for queue, k in self._settings.items():
                self._place(queue, k, frozenset(added))

    def configure(self, partitions: Mapping[str, int]) -> None:
        """Set every queue's `partitions` (queues not named live on every shard)."""
        with self._lock:
            for queue in [q for q in self._queues if q not in partitions]:
                del self._queues[queue]
            self._settings = dict(partitions)
            for queue, k in self._settings.items():
                current = self._queues.get(queue)
                if current is None or current.partitions != k:
                    self._place(queue, k)

    def _place(self, queue: str, k: int, added: frozenset[str] = frozenset()) -> None:
        """Place `queue` on k shards; shards that left its placement, and `added` ones (a shard
        new to the map may be old storage with jobs), hold jobs until a check says not."""
        placed = tuple(rendezvous(queue, self._eligible, k))
        before = self._queues.get(queue)
        outside = frozenset(self._shards) - set(placed)
        if before is None:  # unknown: every shard outside may hold jobs until checked
            active = held = outside
        else:
            left = frozenset(before.placed) - set(placed) | added
            active = (before.active | left) & outside
            held = (before.held | left) & outside
        self._store(queue, k, placed, active, held)

    def _store(
        self,
        queue: str,
        k: int,
        placed: tuple[str, ...],
        active: frozenset[str],
        held: frozenset[str],
    ) -> None:
        self._generation += 1
        dequeue = set(placed) | active
        read = dequeue | held
        self._queues[queue] = QueuePlacement(
            k,
            placed,
            active,
            held,
            self._generation,
            tuple(s for s in self._shards if s in dequeue),
            tuple(s for s in self._shards if s in read),
        )

    def observed(
        self,
        queue: str,
        generation: int,
        active: Iterable[str],
        held: Iterable[str],
        unknown: Iterable[str],
    ) -> bool:
        """A check of every shard outside the placement found `active` ones holding pending
        or in-progress jobs, `held` ones holding only others; `unknown` ones did not answer
        (they keep what they were). Ignored (False) when the placement changed meanwhile."""
        with self._lock:
            current = self._queues.get(queue)
            if current is None or current.generation != generation:
                return False
            unknown = frozenset(unknown)
            new_active = frozenset(active) | (current.active & unknown)
            new_held = frozenset(held) | new_active | (current.held & unknown)
            if (new_active, new_held) != (current.active, current.held):
                self._store(queue, current.partitions, current.placed, new_active, new_held)
            return True

    def reopened(self, queue: str) -> None:
        """Jobs of `queue` may have turned pending on any holder (a retry of failed jobs):
        every holder is visited by dequeues again until a check says otherwise."""
        with self._lock:
            current = self._queues.get(queue)
            if current is not None and current.held - current.active:
                self._store(queue, current.partitions, current.placed, current.held, current.held)

    # ---- lookups (the request path) ----

    def targets(self, queue: str) -> tuple[str, ...] | None:
        """The shards that take the queue's new jobs (None: every enqueue shard)."""
        placement = self._queues.get(queue)
        return None if placement is None else placement.placed

    def dequeue_shards(self, queue: str) -> tuple[str, ...] | None:
        """The shards a dequeue visits: the placement and the holders of open jobs."""
        placement = self._queues.get(queue)
        return None if placement is None else placement.dequeue

    def read_shards(self, queue: str) -> tuple[str, ...] | None:
        """The shards a count, scan, retry or delete visits: placement and every holder."""
        placement = self._queues.get(queue)
        return None if placement is None else placement.read

    def to_check(self) -> list[tuple[str, int, tuple[str, ...]]]:
        """(queue, generation, shards outside its placement) of every partitioned queue."""
        with self._lock:
            return [
                (queue, p.generation, tuple(s for s in self._shards if s not in p.placed))
                for queue, p in sorted(self._queues.items())
            ]

    def snapshot(self) -> dict[str, QueuePlacement]:
        with self._lock:
            return dict(self._queues)
