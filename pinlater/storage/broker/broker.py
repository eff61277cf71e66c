"""The prefetching dequeue broker of one server (issue 15 item 3; docs/semantics.md `B-...`).

For each (queue, shard) partition this server owns (`own`, decided by
pinlater/ops/partition_owner.py through leases), the broker keeps up to the queue's `prefetch`
jobs reserved in storage (`Shard.prefetch`: claimed, no attempt used, given back by the janitor
after `hold_ms` if this server dies) and in memory (`PartitionBuffer`). The sharded dequeue asks
the broker first at each (priority, shard) step (`serve`), so priorities, the reply budget,
rate limits (applied before, to the limit) and piggy-backed acks (applied before, after
`flush`) work as without it; what the buffer cannot give is dequeued from storage as usual.

Correctness never depends on ownership: every job is claimed atomically in storage, so two
servers that both believe they own a partition hand out different jobs. A job served from the
buffer gets a claim naming the dequeue's source (so acks without a claim match as without the
broker) with its reservation's token (so an ack with it applies through any server before the
hand-out is written, `handed_claim`), and becomes an ordinary IN_PROGRESS claim under it when
its hand-out is written behind (`HandOuts`): its claim timeout counts from then. Refills follow
demand (a partition is refilled only while this server served dequeues of its queue within
`idle_seconds`), so a server without workers hoards nothing; buffered jobs idle longer than
`idle_seconds` are released, and `close` releases all.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pinlater.errors import PinLaterError, QueueNotFound
from pinlater.storage.broker.buffer import PartitionBuffer
from pinlater.storage.broker.handouts import HandOuts
from pinlater.storage.claims import handed_claim, new_claim
from pinlater.storage.contract import ByteBudget
from pinlater.storage.models import DequeuedJob

log = logging.getLogger(__name__)

Partition = tuple[str, str]  # (queue, shard)


class Broker:
    """Buffers, refills, idle release and hand-outs of one server. Thread-safe."""

    def __init__(
        self,
        store: Any,
        *,
        server_id: str,
        prefetch_for: Callable[[str], int],
        hold_ms: int,
        idle_seconds: float,
        write_behind_seconds: float,
        low_water: float,
        max_limit: int,
        refill_threads: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`store`: the ShardedBackend (its `call`, `empty`, `signals`, `num_priorities`);
        `max_limit`: the largest dequeue that counts as demand (`wants`)."""
        self.store = store
        self.max_limit = max_limit
        self.server_id = server_id
        self.prefetch_for = prefetch_for
        self.hold_ms = hold_ms
        self.idle_seconds = idle_seconds
        self.low_water = low_water
        self.clock = clock
        self._claim_source = f"broker-{server_id}"
        #: told the queue whose first dequeue (in a while) reached this server
        self.on_new_demand: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._buffers: dict[Partition, PartitionBuffer] = {}
        self._demand: dict[str, float] = {}
        self._closed = False
        self._stopping = threading.Event()
        self.handouts = HandOuts(
            self._write_handouts, write_behind_seconds, (hold_ms / 1000) - idle_seconds, clock
        )
        self._refills = ThreadPoolExecutor(refill_threads, thread_name_prefix="broker-refill")
        #: counters: jobs served from buffers, prefetched, released (idle / stop / lost lease)
        self.served = self.prefetched = self.released = 0
        self._ticker: threading.Thread | None = None  # started with the first partition
        store.signals.listen(self._on_signal)

    # ---------------------------------------------------------------- ownership

    def own(self, queue: str, shard: str) -> None:
        """This server holds the lease of the partition: buffer it (refilled on demand)."""
        with self._lock:
            if self._closed or (queue, shard) in self._buffers:
                return
            self._buffers[(queue, shard)] = PartitionBuffer()
            if self._ticker is None:
                self._ticker = threading.Thread(
                    target=self._tick_loop, name="broker-tick", daemon=True
                )
                self._ticker.start()
        self._maybe_refill(queue, shard)

    def disown(self, queue: str, shard: str) -> None:
        """The partition's lease is gone or given up: release its buffered jobs at once."""
        with self._lock:
            buffer = self._buffers.pop((queue, shard), None)
        if buffer is not None:
            self._release_buffered(queue, shard, buffer)

    def _release_buffered(self, queue: str, shard: str, buffer: PartitionBuffer) -> None:
        """Release every job of the partition's buffer; a refill in flight ends first (and
        releases what it fetched, once the partition is no longer ours)."""
        with buffer.lock:
            with self._lock:
                jobs = buffer.drain()
        self._release(queue, shard, jobs)

    def owned(self) -> set[Partition]:
        with self._lock:
            return set(self._buffers)

    def buffered(self, queue: str | None = None) -> int:
        """Jobs held in memory now (of `queue`, or of all)."""
        with self._lock:
            return sum(b.size for (q, _), b in self._buffers.items() if queue in (None, q))

    def demanded(self) -> set[str]:
        """Queues this server served dequeues of within `idle_seconds`."""
        since = self.clock() - self.idle_seconds
        with self._lock:
            return {queue for queue, at in self._demand.items() if at >= since}

    # ---------------------------------------------------------------- serving

    def wants(self, limit: int) -> bool:
        """Whether a dequeue of `limit` jobs is one the broker buffers for: small, latency-bound
        ones. A larger batch spreads its storage round trip over many jobs, and serving it from
        a buffer would only add a write per job (the hand-out)."""
        return limit <= self.max_limit

    def note_demand(self, queue: str) -> None:
        """A dequeue of `queue` reached this server (refills follow demand)."""
        now = self.clock()
        first = self._demand.get(queue, 0.0) < now - self.idle_seconds
        self._demand[queue] = now
        if first:
            if self.on_new_demand is not None:
                self.on_new_demand(queue)
            for q, shard in self.owned():
                if q == queue:
                    self._maybe_refill(q, shard)

    def serve(
        self,
        queue: str,
        shard: str,
        priority: int,
        need: int,
        claim: str | None,
        budget: ByteBudget | None,
    ) -> list[DequeuedJob]:
        """Up to `need` buffered jobs of the partition at `priority` that fit `budget`,
        handed out with `claim` (None: a dry run, which leaves them buffered). Jobs buffered
        longer than `idle_seconds` are released first, never served: the tick that releases
        them may be late (a stalled process), and a job served near the end of its hold
        would have its hand-out written after the janitor gave it back (delivered twice)."""
        buffer = self._buffers.get((queue, shard))
        if buffer is None or not buffer.held(priority):
            return []
        with self._lock:
            if claim is None:
                return buffer.peek(priority, need, budget)
            stale = buffer.stale(self.clock() - self.idle_seconds)
            jobs = buffer.take(priority, need, budget)
            low = buffer.size < self._low_mark(queue)
        if stale:
            self._release(queue, shard, stale)
        if low:
            self._maybe_refill(queue, shard)
        if not jobs:
            return jobs
        self.served += len(jobs)
        given = [handed_claim(job.claim or "", claim) for job in jobs]
        groups: dict[str, list[tuple[int, str]]] = defaultdict(list)  # one per prefetch served
        for job, handed in zip(jobs, given, strict=True):
            groups[handed].append((job.local_id, job.claim or ""))
        for handed, items in groups.items():
            self.handouts.add((queue, shard, priority, handed), items)
        return [replace(job, claim=handed) for job, handed in zip(jobs, given, strict=True)]

    @contextlib.contextmanager
    def held_back(self, queue: str, priority: int) -> Iterator[None]:
        """Around a delete of PENDING jobs of `queue` at `priority`, which takes reserved jobs
        too (S-prefetch): none of them may stay buffered, to be served after it is gone. Holds
        the queue's partition locks (in order: no refill reserves meanwhile) and releases
        their buffered jobs of that priority first; refills follow afterwards."""
        partitions = sorted(p for p in self.owned() if p[0] == queue)
        with contextlib.ExitStack() as stack:
            for partition in partitions:
                buffer = self._buffers.get(partition)
                if buffer is None:
                    continue
                stack.enter_context(buffer.lock)
                with self._lock:
                    jobs = buffer.drain(priority)
                self._release(queue, partition[1], jobs)
            yield
        for partition in partitions:
            self._maybe_refill(*partition)

    def idle_out(self) -> None:
        """What `idle_seconds` without a dequeue does to this server: the demand is forgotten
        (no refill follows until the next dequeue) and every buffered job is released; a refill
        in flight finishes first. Drills and tests that move the clock past `idle_seconds`
        call it first, so no reservation outlives its hold in the moved clock while buffered."""
        with self._lock:
            self._demand.clear()
        for partition in sorted(self.owned()):
            buffer = self._buffers.get(partition)
            if buffer is not None:
                self._release_buffered(*partition, buffer)

    def partition_lock(self, queue: str, shard: str) -> threading.Lock | None:
        """The lock a dequeue holds while it asks storage for an owned partition (`None`: not
        owned); a refill holds it while it prefetches."""
        buffer = self._buffers.get((queue, shard))
        return None if buffer is None else buffer.lock

    def flush(self) -> None:
        """Write every pending hand-out now."""
        self.handouts.flush()

    def flush_for(self, queue: str, jobs: Iterable[tuple[str, int, int]]) -> None:
        """Write the pending hand-outs first if one of `jobs` ((shard, priority, local_id))
        is among them: acks and checkpoints of a job this server handed out then find it
        handed out."""
        self.handouts.flush_for(queue, jobs)

    def flush_queue(self, queue: str) -> None:
        """Write the queue's pending hand-outs first: reads through this server then show
        the jobs it handed out as IN_PROGRESS."""
        self.handouts.flush_queue(queue)

    def _low_mark(self, queue: str) -> float:
        prefetch = self.prefetch_for(queue)
        return max(1.0, prefetch * self.low_water) if prefetch else 0.0

    # ---------------------------------------------------------------- refills

    def _on_signal(self, queue: str, jobs: int) -> None:
        """Jobs of `queue` may have become eligible: refill its owned partitions that are
        low, when this server has demand for it."""
        if queue not in self._demand:
            return
        for q, shard in self.owned():
            if q == queue:
                self._maybe_refill(queue, shard)

    def _maybe_refill(self, queue: str, shard: str) -> None:
        with self._lock:
            buffer = self._buffers.get((queue, shard))
            if buffer is None or buffer.refilling or not self._recent(queue) or self._closed:
                return
            if buffer.size >= self._low_mark(queue):
                return
            buffer.refilling = True
        try:
            self._refills.submit(self._refill, queue, shard)
        except RuntimeError:  # shut down
            buffer.refilling = False

    def _recent(self, queue: str) -> bool:
        """This server served a dequeue of `queue` within `idle_seconds`."""
        return self._demand.get(queue, -1e18) >= self.clock() - self.idle_seconds

    def _refill(self, queue: str, shard: str) -> None:
        got = 0
        buffer = self._buffers.get((queue, shard))
        try:
            if buffer is not None:
                with buffer.lock:
                    if self._recent(queue):  # still: demand may have gone while it waited
                        got = self._fill(queue, shard)
        except QueueNotFound:  # deleted: its buffer goes (its jobs went with the queue)
            with self._lock:
                self._buffers.pop((queue, shard), None)
                self._demand.pop(queue, None)
        except PinLaterError as exc:
            log.warning("broker: refill of %s on %s failed: %s", queue, shard, exc)
        except Exception:
            log.exception("broker: refill of %s on %s failed", queue, shard)
        finally:
            with self._lock:
                buffer = self._buffers.get((queue, shard))
                if buffer is not None:
                    buffer.refilling = False
        if got:
            self.store.signals.changed(queue, got)  # parked dequeues look again

    def _fill(self, queue: str, shard: str) -> int:
        """Prefetch up to the queue's `prefetch` less what is buffered, priority 1 first; a
        priority that gave fewer than asked is marked empty in storage (the empty-partition
        map), so serving from the buffer costs no storage call for it."""
        prefetch, empty, got = self.prefetch_for(queue), self.store.empty, 0
        for priority in range(1, self.store.num_priorities + 1):
            want = prefetch - self.buffered_in(queue, shard)
            if want <= 0:
                break
            if empty.enabled and empty.skip(queue, shard, priority):
                continue
            epoch, started = empty.epoch(queue), empty.clock()
            claim = new_claim(self._claim_source)
            jobs = self.store.call(
                shard,
                lambda s, p=priority, n=want, c=claim: s.prefetch(queue, p, n, c, self.hold_ms),
            )
            if len(jobs) < want:
                empty.nothing_due(queue, shard, (priority,), epoch, started)
            else:  # maybe more: no concurrent call's empty answer may mark it
                empty.found(queue, shard, priority)
            got += self._keep(queue, shard, jobs)
        return got

    def buffered_in(self, queue: str, shard: str) -> int:
        buffer = self._buffers.get((queue, shard))
        return 0 if buffer is None else buffer.size

    def _keep(self, queue: str, shard: str, jobs: list[DequeuedJob]) -> int:
        """Buffer prefetched jobs, or release them when the partition is no longer ours."""
        if not jobs:
            return 0
        with self._lock:
            buffer = None if self._closed else self._buffers.get((queue, shard))
            if buffer is not None:
                self.prefetched += buffer.add(jobs, self.clock())
                return len(jobs)
        self._release(queue, shard, jobs)
        return 0

    # ---------------------------------------------------------------- release

    def _release(self, queue: str, shard: str, jobs: list[DequeuedJob]) -> None:
        """Back to PENDING at once, no attempt used (one call per priority); on a storage
        failure the janitor gives them back after the hold."""
        if not jobs:
            return
        by_priority: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for job in jobs:
            by_priority[job.priority].append((job.local_id, job.claim or ""))
        for priority, items in by_priority.items():
            try:
                self.store.call(
                    shard, lambda s, p=priority, i=items: s.release(queue, p, i), retries=0
                )
                self.released += len(items)
            except PinLaterError as exc:
                log.warning(
                    "broker: release of %d job(s) of %s on %s failed (the janitor returns "
                    "them after the hold): %s",
                    len(items),
                    queue,
                    shard,
                    exc,
                )
        self.store.jobs_may_be_due(queue, [shard], sorted(by_priority), len(jobs))

    def _tick_loop(self) -> None:
        interval = min(self.idle_seconds / 4, 0.5)
        while not self._stopping.wait(interval):
            try:
                self.tick()
            except Exception:
                log.exception("broker: tick failed")

    def tick(self) -> None:
        """Release jobs idle too long and partitions whose queue turned the broker off;
        refill the low partitions that have demand (jobs that came due, or arrived through
        another server)."""
        before = self.clock() - self.idle_seconds
        stale: list[tuple[Partition, list[DequeuedJob]]] = []
        off: list[Partition] = []
        with self._lock:
            for partition, buffer in self._buffers.items():
                if not self.prefetch_for(partition[0]):
                    off.append(partition)
                    continue
                jobs = buffer.stale(before)
                if jobs:
                    stale.append((partition, jobs))
        for (queue, shard), jobs in stale:
            self._release(queue, shard, jobs)
        for queue, shard in off:
            self.disown(queue, shard)
        for queue, shard in self.owned():
            self._maybe_refill(queue, shard)

    def _write_handouts(self, key: tuple[str, str, int, str], items: list[tuple[int, str]]) -> int:
        queue, shard, priority, claim = key
        return self.store.call(shard, lambda s: s.hand_out(queue, priority, items, claim))

    # ---------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Stop refilling, write pending hand-outs and release every buffered job at once
        (SIGTERM, shutdown). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stopping.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self._refills.shutdown(wait=True, cancel_futures=True)
        self.handouts.close()
        with self._lock:
            drained = [(p, b.drain()) for p, b in self._buffers.items()]
            self._buffers.clear()
        for (queue, shard), jobs in drained:
            self._release(queue, shard, jobs)
