"""What a check works with: the `Kit` (the shard under test, queue "q" created, and helpers over
it), the `Storage` a backend's test module provides, and the constants the checks share."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import Backend, Shard, ShardSpec, StorageLimits
from pinlater.storage.models import (
    Ack,
    Checkpoint,
    ClaimMatch,
    DequeuedJob,
    JobRecord,
    JobState,
    NewJob,
    ScanBound,
)

#: the shard under test, and a second shard of the same backend instance
MAIN, OTHER = "main", "other"
#: limits the checks are written for (a small status cap makes truncation visible)
KIT_LIMITS = StorageLimits(num_priorities=3, status_cap=20)
QUEUE = "q"
SOURCE = "worker:host1"
HOUR_MS = 3_600_000
PENDING, IN_PROGRESS = JobState.PENDING, JobState.IN_PROGRESS
SUCCEEDED, FAILED = JobState.SUCCEEDED, JobState.FAILED
E = TypeVar("E", bound=BaseException)


@dataclass(frozen=True)
class Storage:
    """Fresh storage for one check, as a backend's test module provides it."""

    #: a new backend instance on this storage with the given limits
    new_backend: Callable[[StorageLimits], Backend]
    #: the spec of the shard the kit calls `name` (MAIN or OTHER): equal names address the same
    #: storage, and both names are shards of one backend instance
    spec: Callable[[str], ShardSpec]


@dataclass
class Window:
    """`now_ms()` read before and after a call: the shard clock the call used lies within."""

    lo: int
    hi: int = 0

    def holds(self, value: int, plus: int = 0) -> bool:
        return self.lo + plus <= value <= self.hi + plus


class Kit:
    """What a check works with: `shard` (queue "q" created) and helpers over it."""

    shard: Shard

    def __init__(self, storage: Storage):
        self.storage = storage
        self._backends: dict[StorageLimits, Backend] = {}
        self._opened: list[tuple[str, StorageLimits, Shard]] = []

    def begin(self) -> None:
        self.shard = self.open()
        self.shard.create_queue(QUEUE)

    # ---- shards and time ----
    def open(self, name: str = MAIN, limits: StorageLimits = KIT_LIMITS) -> Shard:
        """A new handle on shard `name` (another one each call, as another process would have),
        from the one backend instance this check uses for `limits`."""
        if limits not in self._backends:
            self._backends[limits] = self.storage.new_backend(limits)
        shard = self._backends[limits].open_shard(self.storage.spec(name))
        shard.clock_offset_ms = self._opened[0][2].clock_offset_ms if self._opened else 0
        self._opened.append((name, limits, shard))
        return shard

    def advance(self, ms: int) -> None:
        """Move the clock of every open handle forward by `ms`."""
        for _, _, shard in self._opened:
            shard.clock_offset_ms += ms

    @contextlib.contextmanager
    def timed(self) -> Iterator[Window]:
        window = Window(self.shard.now_ms())
        yield window
        window.hi = self.shard.now_ms()

    def close(self, strict: bool) -> None:
        """Delete every queue the check left (through the contract) and release everything;
        errors count only when the check itself passed."""
        try:
            top = max((limits for _, limits, _ in self._opened), key=lambda lim: lim.num_priorities)
            for name in dict.fromkeys(name for name, _, _ in self._opened):
                shard = self.open(name, top)
                for queue in shard.queue_names():
                    shard.delete_queue(queue)
        except Exception:
            if strict:
                raise
        finally:
            for _, _, shard in self._opened:
                shard.close()
            for backend in self._backends.values():
                backend.close()

    # ---- job helpers (on the shard under test and queue "q" unless told) ----
    def enqueue(self, *bodies: bytes, queue: str = QUEUE, shard: Shard | None = None, **fields):
        return (shard or self.shard).enqueue(queue, [NewJob(body=b, **fields) for b in bodies])

    def dequeue(
        self, limit: int = 10, priority: int = 1, source: str = SOURCE, queue: str = QUEUE
    ) -> list[DequeuedJob]:
        return self.shard.dequeue(queue, priority, limit, new_claim(source))

    def dry_run(self, limit: int = 10, priority: int = 1) -> list[DequeuedJob]:
        return self.shard.dequeue(QUEUE, priority, limit, None)

    def record(self, local_id: int, priority: int = 1) -> JobRecord:
        (found,) = self.shard.lookup(QUEUE, [(priority, local_id)], True)
        return found

    def records(self, ids: Sequence[int], priority: int = 1) -> list[JobRecord]:
        return self.shard.lookup(QUEUE, [(priority, i) for i in ids], False)

    def count(
        self,
        state: JobState = PENDING,
        priorities: Sequence[int] = (1,),
        future: bool = False,
        cap: int = 10**6,
        body_filter: Callable[[bytes], bool] | None = None,
    ) -> int:
        return self.shard.count(QUEUE, state, list(priorities), future, cap, body_filter)

    def ack(self, succeeded: Sequence[Ack] = (), failed: Sequence[Ack] = ()) -> int:
        return self.shard.ack(QUEUE, succeeded, failed)

    def ack_jobs(
        self, succeeded: Sequence[DequeuedJob] = (), failed: Sequence[DequeuedJob] = ()
    ) -> int:
        """Acks dequeued jobs the way a client does (`acked`)."""
        return self.ack([acked(j) for j in succeeded], [acked(j) for j in failed])

    def checkpoint(self, *checkpoints: Checkpoint) -> int:
        return self.shard.checkpoint(QUEUE, checkpoints)

    def scan(
        self,
        state: JobState = PENDING,
        bounds: dict[int, ScanBound | None] | None = None,
        future: bool = False,
        limit: int = 10,
        body_filter: Callable[[bytes], bool] | None = None,
    ) -> list[JobRecord]:
        return self.shard.scan(QUEUE, state, bounds or {1: None}, future, limit, body_filter)

    def fail_for_good(self, jobs: Sequence[DequeuedJob]) -> None:
        """Failure-ack jobs that had one attempt, so they end FAILED."""
        assert self.ack(failed=[Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim)) for j in jobs])


def by_source(source: str = SOURCE) -> ClaimMatch:
    """The claim match of a client that sends no claim back (matched by source)."""
    return ClaimMatch(source)


def held(job: DequeuedJob) -> ClaimMatch:
    """The claim match of a client that sends back the claim it was given."""
    return ClaimMatch(SOURCE, job.claim)


def acked(job: DequeuedJob) -> Ack:
    """The ack a client sends back for `job`: its priority and id, and the claim it was given."""
    return Ack(job.priority, job.local_id, held(job))


def raises(kind: type[E], call: Callable[[], Any]) -> E:
    """The exception `call` raised, which must be a `kind` (plain asserts, no pytest)."""
    try:
        call()
    except kind as exc:
        return exc
    raise AssertionError(f"expected {kind.__name__}")
