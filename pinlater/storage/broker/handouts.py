"""Hand-outs written behind: a dequeue served from a buffer answers at once, and the reserved
jobs it handed out become ordinary IN_PROGRESS claims under its claim (`Shard.hand_out`, one
call per dequeue, partition and priority) within `interval` seconds, from a thread of their
own: the dequeue itself costs no storage round trip.

Whatever this server applies to a job it handed out (an ack, a checkpoint) waits for `flush`
first, so a worker that acks through the same server never finds its job still reserved; an
ack through another server inside the interval is the storage's rule (an ack of a reserved job
with its claim is honoured, docs/semantics.md). A batch whose shard fails is kept and written
with the next one; one that cannot be written before the hold ends is counted as lost (the
janitor then gives the jobs back without an attempt used: delivered twice at worst).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pinlater.errors import InvalidRequest, PinLaterError, QueueNotFound

log = logging.getLogger(__name__)

#: writes `flush_for` tries before it lets an ack through anyway (it then finds the job still
#: reserved and is not applied: the job comes back, as any unacked one)
FLUSH_TRIES = 3
#: (queue, shard, priority, the dequeue's claim) -> [(local_id, prefetch claim)]
Key = tuple[str, str, int, str]
Batch = dict[Key, list[tuple[int, str]]]
#: writes one group (`Shard.hand_out`): (key, [(local_id, prefetch claim)]) -> how many applied
Writer = Callable[[Key, list[tuple[int, str]]], int]


@dataclass
class HandOutStats:
    """Counters for metrics and tests."""

    written: int = 0
    calls: int = 0
    #: hand-outs storage did not apply (the reservation was gone: released, reclaimed)
    refused: int = 0
    #: hand-outs given up after failing until `give_up_seconds`
    lost: int = 0
    failures: int = 0
    batches: list[int] = field(default_factory=list)


class HandOuts:
    """The pending hand-outs of one server and the thread that writes them."""

    def __init__(
        self,
        write: Writer,
        interval: float,
        give_up_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._write = write
        self.interval = interval
        self.give_up_seconds = give_up_seconds
        self.clock = clock
        self._lock = threading.Condition()
        self._flush_lock = threading.Lock()  # one writer at a time: batches stay in order
        self._pending: Batch = defaultdict(list)
        #: (queue, shard, priority, local_id) of every hand-out pending or being written
        self._unwritten: set[tuple[str, str, int, int]] = set()
        self._since: float | None = None  # when the oldest pending hand-out was added
        self._closed = False
        self.stats = HandOutStats()
        self._thread: threading.Thread | None = None  # started by the first hand-out

    def add(self, key: Key, items: list[tuple[int, str]]) -> None:
        """Hand-outs of one dequeue (`key` names its claim) of reserved jobs of one partition
        and priority, given as (local_id, prefetch claim)."""
        queue, shard, priority = key[0], key[1], key[2]
        with self._lock:
            self._pending[key].extend(items)
            self._unwritten.update((queue, shard, priority, local_id) for local_id, _ in items)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="broker-handouts", daemon=True
                )
                self._thread.start()
            if self._since is None:
                self._since = self.clock()
                self._lock.notify()

    def pending(self) -> int:
        with self._lock:
            return sum(len(items) for items in self._pending.values())

    def flush(self) -> None:
        """Write every pending hand-out now. Costs a look when nothing is pending."""
        if self._since is None and not self._unwritten:
            return
        self._write_pending()

    def flush_for(self, queue: str, jobs: Iterable[tuple[str, int, int]]) -> None:
        """Before acks or checkpoints of `jobs` ((shard, priority, local_id) of `queue`) are
        applied: write the pending hand-outs if one of them is among them (or wait for the
        write in progress that holds it); nothing to do, the usual case, costs a look."""
        wanted = [(queue, *job) for job in jobs]
        for _ in range(FLUSH_TRIES):  # a write that failed (a lock wait) is kept and retried
            unwritten = self._unwritten
            if not unwritten or not any(key in unwritten for key in wanted):
                return
            self._write_pending()

    def flush_queue(self, queue: str) -> None:
        """Before a read of `queue`: write its pending hand-outs (or wait for the write that
        holds them), so this server's reads show a job it handed out as IN_PROGRESS, not as
        the reservation it still is in storage (PENDING to reads, S-prefetch); nothing pending
        for the queue, the usual case, costs a look."""
        for _ in range(FLUSH_TRIES):
            with self._lock:
                if not any(key[0] == queue for key in self._unwritten):
                    return
            self._write_pending()

    def _take(self) -> tuple[Batch, float | None]:
        with self._lock:
            batch, since = dict(self._pending), self._since
            self._pending.clear()
            self._since = None
        return batch, since

    def _write_pending(self) -> None:
        with self._flush_lock:
            batch, since = self._take()
            failed: Batch = {}
            for key, items in batch.items():
                if not self._write_one(key, items):
                    failed[key] = items
            if failed:
                self._keep(failed, since)
            with self._lock:  # written (or given up): only what is pending again stays
                self._unwritten = {
                    (k[0], k[1], k[2], local_id)
                    for k, items in self._pending.items()
                    for local_id, _ in items
                }

    def _write_one(self, key: Key, items: list[tuple[int, str]]) -> bool:
        queue, shard = key[0], key[1]
        try:
            applied = self._write(key, items)
        except (QueueNotFound, InvalidRequest) as exc:  # the queue or shard is gone: so are they
            self.stats.refused += len(items)
            log.info("broker: %d hand-out(s) of %s dropped: %s", len(items), queue, exc)
            return True
        except PinLaterError as exc:
            self.stats.failures += 1
            log.warning(
                "broker: hand-out of %d job(s) of %s on %s failed: %s",
                len(items),
                queue,
                shard,
                exc,
            )
            return False
        self.stats.calls += 1
        self.stats.written += applied
        self.stats.batches.append(len(items))
        del self.stats.batches[:-100]
        if applied < len(items):
            self.stats.refused += len(items) - applied
            log.warning(
                "broker: %d of %d hand-out(s) of %s on %s found no reservation (released or "
                "reclaimed first)",
                len(items) - applied,
                len(items),
                queue,
                shard,
            )
        return True

    def _keep(self, failed: Batch, since: float | None) -> None:
        """Put failed groups back for the next pass, unless they are too old to matter."""
        if since is not None and self.clock() - since > self.give_up_seconds:
            self.stats.lost += sum(len(items) for items in failed.values())
            log.error("broker: %d hand-out(s) given up after storage failures", self.stats.lost)
            return
        with self._lock:
            for key, items in failed.items():
                self._pending[key][:0] = items
            self._since = since if self._since is None else min(self._since, since or self._since)

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._since is None and not self._closed:
                    self._lock.wait()
                since = self._since
                if self._closed or since is None:
                    return
                wait = since + self.interval - self.clock()
            if wait > 0:
                time.sleep(wait)
            self._write_pending()

    def close(self) -> None:
        """Write what is pending and stop the thread."""
        with self._lock:
            self._closed = True
            self._lock.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        self._write_pending()
