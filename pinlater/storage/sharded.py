"""ShardedBackend: everything common above the per-shard primitives, written once.

Shard choice for enqueue, priority order across shards for dequeue, fan-out and merge for
count/scan/lookup, retry/delete across shards, descriptors, retries of retriable storage errors,
health (skip unhealthy shards for enqueue/dequeue, probe them back) and hot reload of the shard
map. Inputs are already validated by the service layer; outputs are plain models.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from pinlater.errors import (
    ContinuationInvalid,
    EnqueueRejected,
    InvalidRequest,
    NoHealthyShards,
    QueueContended,
    QueueNotFound,
    ShardConnectionFailed,
    ShardFull,
)
from pinlater.storage.broker.broker import Broker
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import Backend, BodyFilter, ByteBudget, Shard, ShardSpec
from pinlater.storage.descriptors import MAX_LOCAL_ID, JobDescriptor
from pinlater.storage.empty_partitions import EmptyPartitions
from pinlater.storage.errors import QueueBusy, ShardError, StorageFull
from pinlater.storage.fifo import FifoQueues, dequeue_fifo
from pinlater.storage.health import ShardHealth
from pinlater.storage.ledger import LedgerBook
from pinlater.storage.models import (
    Ack,
    Checkpoint,
    DequeuedJob,
    Enqueued,
    JobRecord,
    JobState,
    NewJob,
    ScanBound,
)
from pinlater.storage.placement import Placement
from pinlater.storage.signals import QueueSignals
from pinlater.storage.unique_keys import owner_shard

log = logging.getLogger(__name__)
T = TypeVar("T")

CONTINUATION_START = "0"
CONTINUATION_END = "-1"
_CONTINUATION = re.compile(r"(\d{1,16}):([A-Za-z0-9]{1,32}):(\d{1,3}):(\d{1,19})", re.ASCII)
#: the longest continuation `_CONTINUATION` accepts (a reply's size is bounded before it is built)
MAX_CONTINUATION_CHARS = 16 + 32 + 3 + 19 + 3


@dataclass(frozen=True)
class KeyedEnqueue:
    """What `enqueue_keyed` did: a descriptor per job in request order (a job whose unique key
    was held gets its holder's), and how many jobs stored nothing for that reason."""

    descriptors: list[JobDescriptor]
    deduplicated: int


@dataclass(frozen=True)
class _ShardSet:
    """An immutable snapshot of the open shards; replaced whole on reload."""

    shards: dict[str, Shard]
    specs: dict[str, ShardSpec]
    #: the shards enqueues use: the same objects, or ones with connections of their own
    enqueue: dict[str, Shard]
    #: shards retired with their jobs: named in errors, never called
    retired: frozenset[str] = frozenset()


class ShardedBackend:
    """The storage as the service sees it: one logical queue store over N shards."""

    #: told (shard, seconds, ok) after every storage call attempt (metrics); None = nobody
    call_observer: Callable[[str, float, bool], None] | None = None
    #: told (shard, error) of every failed storage call attempt (recent errors); None = nobody
    failure_observer: Callable[[str, Exception], None] | None = None
    #: asked (specs, retired) before a reload takes effect, may raise to refuse it (a
    #: ClusterRouter: shard names unique across clusters); None = nobody
    reload_check: Callable[[Sequence[ShardSpec], frozenset[str]], None] | None = None
    #: told after every applied reload (a ClusterRouter: which cluster owns which shard)
    on_reloaded: Callable[[], None] | None = None
    #: the prefetching broker (pinlater/storage/broker/), asked first by every dequeue step;
    #: None = off (set by the composition root)
    broker: Broker | None = None

    def __init__(
        self,
        backend: Backend,
        specs: Sequence[ShardSpec],
        *,
        num_priorities: int,
        retries: int = 2,
        unhealthy_after_failures: int = 3,
        rng: random.Random | None = None,
        empty_partition_ttl: float = 0.0,
        enqueue_backend: Backend | None = None,
        retired: Iterable[str] = (),
        cluster: str | None = None,
        signals: QueueSignals | None = None,
        empty: EmptyPartitions | None = None,
    ):
        """`empty_partition_ttl` (seconds; 0 = off): how long a (queue, shard, priority) a
        dequeue found empty is skipped at most (pinlater/storage/empty_partitions.py).
        `enqueue_backend` (another instance of the backend's class): enqueues get shards
        opened from it, i.e. storage connections of their own, so that no dequeue storm
        holding every pooled connection delays them. `cluster` names this store when it is one
        of several behind a ClusterRouter (pinlater/storage/clusters.py), which hands every
        cluster the same `signals` and `empty` (parked dequeues wait on one set of signals)."""
        self.enqueue_backend = enqueue_backend
        self.cluster = cluster
        self.backend = backend
        #: what makes parked dequeues look again (pinlater/storage/signals.py)
        self.signals = QueueSignals() if signals is None else signals
        self.empty = EmptyPartitions(empty_partition_ttl) if empty is None else empty
        self.num_priorities = num_priorities
        self._retries = retries
        self.health = ShardHealth(unhealthy_after_failures)
        self._rng = rng or random.Random()
        self._reload_lock = threading.Lock()
        shards = {s.name: backend.open_shard(s) for s in specs}
        self._set = _ShardSet(
            shards,
            {s.name: s for s in specs},
            self._enqueue_shards(specs, shards),
            frozenset(retired),
        )
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="shard-fanout")
        #: which shards each partitioned queue lives on (pinlater/storage/placement.py)
        self.placement = Placement()
        self.broker = None
        self.placement.shards_changed(specs)
        #: the FIFO queues and their in-flight caps (pinlater/storage/fifo.py)
        self.fifo = FifoQueues()

    # ---------------------------------------------------------------- shard set

    def shard_names(self) -> list[str]:
        return list(self._set.specs)

    def shard_specs(self) -> list[ShardSpec]:
        return list(self._set.specs.values())

    def cluster_names(self) -> list[str]:
        """The configured clusters (none without `clusters:`)."""
        return [] if self.cluster is None else [self.cluster]

    def cluster_of_shard(self, name: str) -> str | None:
        """The cluster shard `name` belongs to (None without `clusters:`)."""
        return self.cluster

    def cluster_of(self, queue: str) -> str | None:
        """The cluster that serves `queue` (None without `clusters:`)."""
        return self.cluster

    def _enqueue_shards(
        self, specs: Sequence[ShardSpec], shards: dict[str, Shard], reuse: dict | None = None
    ) -> dict[str, Shard]:
        """The enqueue shards for `shards`: themselves without an enqueue backend; else ones
        opened from it (those of `reuse` when their shard was reused)."""
        if self.enqueue_backend is None:
            return shards
        reuse = reuse or {}
        out = {}
        for spec in specs:
            shard = reuse.get(spec.name)
            if shard is None:
                shard = self.enqueue_backend.open_shard(spec)
                shard.clock_offset_ms = shards[spec.name].clock_offset_ms
            out[spec.name] = shard
        return out

    def shard(self, name: str, for_enqueue: bool = False) -> Shard:
        try:
            return (self._set.enqueue if for_enqueue else self._set.shards)[name]
        except KeyError:
            if name in self._set.retired:
                raise InvalidRequest(
                    f"job descriptor names shard {name!r}, retired with its jobs "
                    "(retired_with_jobs in the shard map): its jobs are no longer served"
                ) from None
            raise InvalidRequest(f"job descriptor names unknown shard {name!r}") from None

    def enqueue_candidates(self, queue: str | None = None) -> list[str]:
        """Shards that may take enqueues now: healthy and not dequeue_only (and, with a
        `queue` that has partitions, one of them)."""
        placed = None if queue is None else self.placement.targets(queue)
        return [
            name
            for name, spec in self._set.specs.items()
            if not spec.dequeue_only
            and self.health.is_healthy(name)
            and (placed is None or name in placed)
        ]

    def read_shards(self, queue: str) -> list[str]:
        """The shards that may hold jobs of `queue` (every shard unless it has partitions)."""
        names = self.placement.read_shards(queue)
        return self.shard_names() if names is None else list(names)

    def reload(self, specs: Sequence[ShardSpec], retired: Iterable[str] = ()) -> None:
        """Switch to a new shard map without a restart: reuse shards whose connection settings
        are unchanged (only dequeue_only may differ), open new (or repointed) ones and create
        every known queue on them, then close the removed ones. Only healthy shards are asked
        for the queue list, and only when a shard is new: a removed or repointed shard whose
        storage is down is never called. Raises (keeping the old map) if a new shard fails.
        Whether dropping a shard loses jobs is the caller's check (`pinlater.ops.retire`)."""
        retired = frozenset(retired)
        if self.reload_check is not None:
            self.reload_check(specs, retired)
        with self._reload_lock:
            old = self._set
            reused = _reusable(old, specs)
            fresh = [s for s in specs if s.name not in reused]
            queues = self._known_queues() if fresh and old.shards else set()
            opened = self._open(fresh, queues)
            shards = {s.name: reused.get(s.name) or opened[s.name] for s in specs}
            kept = {n: old.enqueue[n] for n in shards if shards[n] is old.shards.get(n)}
            enqueue = self._enqueue_shards(specs, shards, kept)
            self._set = _ShardSet(shards, {s.name: s for s in specs}, enqueue, retired)
            self.placement.shards_changed(specs)
            self._close_replaced(old, shards)
            log.info(
                "shard map reloaded: %s%s",
                ", ".join(f"{s.name}{' (dequeue_only)' if s.dequeue_only else ''}" for s in specs),
                f"; retired with jobs: {', '.join(sorted(retired))}" if retired else "",
            )
        if self.on_reloaded is not None:
            self.on_reloaded()

    def _close_replaced(self, old: _ShardSet, shards: dict[str, Shard]) -> None:
        """Close the shards of `old` the new map (`shards`) did not keep."""
        for name, shard in old.shards.items():
            if shards.get(name) is not shard:
                self.health.forget(name)
                shard.close()
                if old.enqueue[name] is not shard:
                    old.enqueue[name].close()

    def _open(self, specs: Sequence[ShardSpec], queues: set[str]) -> dict[str, Shard]:
        """Open shards with every queue in `queues` created; all or none (closed again)."""
        opened: dict[str, Shard] = {}
        try:
            for spec in specs:
                shard = opened[spec.name] = self.backend.open_shard(spec)
                for queue in sorted(queues):
                    shard.create_queue(queue)
        except Exception:
            for shard in opened.values():
                shard.close()
            raise
        return opened

    def _known_queues(self) -> set[str]:
        """The queues of every healthy shard that answers at once (a reload must neither ask
        a shard known to be down nor wait on one); logs when none answered."""
        found: set[str] = set()
        answered = False
        for name in self.shard_names():
            if not self.health.is_healthy(name):
                continue
            try:
                found |= self.call(name, lambda s: s.queue_names(), retries=0)
                answered = True
            except ShardConnectionFailed as exc:
                log.warning("shard map reload: shard %s did not list its queues: %s", name, exc)
        if not answered:
            log.warning(
                "shard map reload: no shard listed the queues; new shards get each queue "
                "from its next createQueue"
            )
        return found

    def retired_shards(self) -> frozenset[str]:
        """Shards retired with their jobs (`retired_with_jobs` in the shard map)."""
        return self._set.retired

    def probe_unhealthy(self) -> list[str]:
        """Ping every unhealthy shard once; return the names that came back."""
        recovered = []
        for name in self.health.unhealthy():
            shard = self._set.shards.get(name)
            if shard is None:
                self.health.forget(name)
                continue
            try:
                shard.ping()
            except Exception as exc:  # noqa: BLE001 - any failure keeps it down
                log.debug("shard %s still unhealthy: %s", name, exc)
                continue
            self.health.record_success(name)
            recovered.append(name)
            log.warning("shard %s is healthy again", name)
        return recovered

    def shift_clock(self, delta_ms: int) -> None:
        """Move every shard's clock (tests and drills; the storage clock stays authoritative)."""
        for shard in self._all_shards():
            shard.clock_offset_ms += delta_ms
        self.empty.clear()
        self.signals.changed_all()

    def jobs_may_be_due(
        self,
        queue: str,
        shards: Sequence[str] | None = None,
        priorities: Sequence[int] = (),
        jobs: int = 0,
    ) -> None:
        """Something made jobs of `queue` eligible (on `shards`, all when None; at
        `priorities`, all when empty; `jobs` of them when known): its partitions there are no
        longer known empty, and parked dequeues look again."""
        self.empty.forget(queue, shards, priorities)
        self.signals.changed(queue, jobs)

    def shift_shard_clocks(self, names: Sequence[str], delta_ms: int) -> None:
        """Move some shards' clocks only (tests and drills); see `shift_clock`."""
        for name in names:
            for shard in {id(s): s for s in (self.shard(name), self.shard(name, True))}.values():
                shard.clock_offset_ms += delta_ms
        self.empty.clear()
        self.signals.changed_all()

    def _all_shards(self) -> list[Shard]:
        """Every open shard object, the enqueue ones included, once each."""
        seen = {id(s): s for s in self._set.shards.values()}
        seen.update({id(s): s for s in self._set.enqueue.values()})
        return list(seen.values())

    def close(self) -> None:
        if self.broker is not None:  # buffered jobs go back to PENDING while shards are open
            self.broker.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for shard in self._all_shards():
            shard.close()
        self.backend.close()
        if self.enqueue_backend is not None:
            self.enqueue_backend.close()

    # ---------------------------------------------------------------- calls

    def call(
        self,
        name: str,
        op: Callable[[Shard], T],
        *,
        retries: int | None = None,
        for_enqueue: bool = False,
    ) -> T:
        """Run `op` on shard `name`, retrying retriable storage errors; record health.
        Raises ShardConnectionFailed when the tries are used up, and ShardFull (at once, health
        unchanged: the shard still serves what needs no space) when the storage is full.
        A QueueBusy (one queue's own contention) is retried the same way but leaves the
        shard's health alone: the shard answered, and its other queues are fine."""
        tries = 1 + (self._retries if retries is None else retries)
        last: ShardError | None = None
        observe = self.call_observer
        for attempt in range(tries):
            shard = self.shard(name, for_enqueue)  # per try: a reload may have replaced it
            started = time.perf_counter()
            try:
                result = op(shard)
            except StorageFull as exc:
                if observe is not None:
                    observe(name, time.perf_counter() - started, False)
                self._failed(name, exc)
                raise ShardFull(f"shard {name} is full and refused the write: {exc}") from None
            except ShardError as exc:
                if observe is not None:
                    observe(name, time.perf_counter() - started, False)
                self._failed(name, exc)
                last = exc
                if not isinstance(exc, QueueBusy):
                    self._record_failure(name, exc)
                if not exc.retriable or not self.health.is_healthy(name):
                    break
                if attempt + 1 < tries:
                    time.sleep(0.005 * (2**attempt))
                continue
            if observe is not None:
                observe(name, time.perf_counter() - started, True)
            self.health.record_success(name)
            return result
        failed = QueueContended if isinstance(last, QueueBusy) else ShardConnectionFailed
        raise failed(str(last))  # "shard NAME: cause" (ShardError's own text)

    def _record_failure(self, name: str, exc: ShardError) -> None:
        """A shard-scoped failure: a timeout takes the shard out at once, anything else counts
        towards `unhealthy_after_failures`."""
        if exc.timed_out:
            self.health.mark_unhealthy(name)
        else:
            self.health.record_failure(name)

    def _failed(self, name: str, error: Exception) -> None:
        if self.failure_observer is not None:
            self.failure_observer(name, error)

    def _fan_out(self, names: Iterable[str], op: Callable[[Shard], T]) -> dict[str, T]:
        """Run `op` on each shard (in parallel when there are several); first error wins."""
        names = list(names)
        if len(names) <= 1:
            return {name: self.call(name, op) for name in names}
        futures = {name: self._pool.submit(self.call, name, op) for name in names}
        return {name: future.result() for name, future in futures.items()}

    # ---------------------------------------------------------------- queues

    def create_queue(self, queue: str) -> None:
        self._fan_out(self.shard_names(), lambda s: s.create_queue(queue))

    def delete_queue(self, queue: str) -> None:
        self._fan_out(self.shard_names(), lambda s: s.delete_queue(queue))
        self.empty.forget(queue)
        self.signals.forget(queue)

    def queue_names(self) -> set[str]:
        """Queues on any shard (a queue exists on all shards unless a create was interrupted,
        which the client's retry of createQueue repairs)."""
        names: set[str] = set()
        for found in self._fan_out(self.shard_names(), lambda s: s.queue_names()).values():
            names |= found
        return names

    def ledger(self, queue: str, shards: Iterable[str] | None = None) -> dict[str, LedgerBook]:
        """The queue's books on each shard (or on `shards`), each read in one snapshot on
        its shard (`Shard.ledger`); the first error wins, as for counts."""
        names = self.shard_names() if shards is None else list(shards)
        self._handed_out_first(queue)
        return self._fan_out(names, lambda s: s.ledger(queue))

    def _handed_out_first(self, queue: str) -> None:
        """Before a read of `queue`, with the broker on: write the hand-outs of its jobs this
        server answered but has not written yet (`broker.write_behind_ms`), so that a read
        right after a dequeue finds them IN_PROGRESS, as without the broker."""
        if self.broker is not None:
            self.broker.flush_queue(queue)

    # ---------------------------------------------------------------- jobs

    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[JobDescriptor]:
        """Store the whole batch in one transaction on one random healthy enqueue shard; on a
        storage failure or a full shard try another shard (up to `retries` more tries). All or
        nothing; ENQUEUE_REJECTED when the shards tried were full. Jobs with a unique key go
        through `enqueue_keyed` (a ValueError here: the caller's bug)."""
        if any(job.unique_key is not None for job in jobs):
            raise ValueError("enqueue got jobs with a unique key; use enqueue_keyed")
        tried: set[str] = set()
        last: ShardConnectionFailed | None = None
        for _ in range(1 + self._retries):
            candidates = self.enqueue_candidates(queue)
            if not candidates:
                break
            name = self._rng.choice([n for n in candidates if n not in tried] or candidates)
            try:
                ids = self.call(name, lambda s: s.enqueue(queue, jobs), retries=0, for_enqueue=True)
            except ShardConnectionFailed as exc:  # ShardFull included: another may have room
                tried.add(name)
                last = exc
                continue
            self._enqueued(queue, [name], jobs)
            return [
                JobDescriptor(queue, name, job.priority, local_id)
                for job, local_id in zip(jobs, ids, strict=True)
            ]
        if isinstance(last, ShardFull):
            raise EnqueueRejected(f"storage full: {last.message}")
        if last is not None:
            raise last
        placed = self.placement.targets(queue)
        raise NoHealthyShards(
            "Unable to find healthy shard: no shard accepts enqueues (all are "
            "unhealthy or dequeue_only)"
            + ("" if placed is None else f"; queue {queue} lives on {', '.join(placed) or '-'}")
        )

    def enqueue_keyed(
        self, queue: str, jobs: Sequence[NewJob], unique_window_ms: int
    ) -> KeyedEnqueue:
        """Store a batch where jobs may carry a unique key (docs/semantics.md `U-...`): each
        keyed job goes to the shard that owns its key (`unique_keys.owner_shard`, over the
        configured enqueue shards, healthy or not), which alone decides whether the key is
        held; the jobs without a key go with the last shard's part. One transaction per shard
        (`Shard.enqueue_keyed`), the parts one after the other: if one fails, the later ones
        are not tried, so an error leaves no job without a key stored, and every keyed job
        already stored is found again by a retry. A part whose owner is unhealthy is refused
        (SHARD_CONNECTION_FAILED) before anything is stored: trying another shard could store
        a key twice."""
        parts = self._key_parts(queue, jobs)
        for name in parts:
            if not self.health.is_healthy(name):
                raise ShardConnectionFailed(
                    f"shard {name}: unhealthy, and it owns unique keys of this request, which "
                    "no other shard may take; nothing was stored (retry later)"
                )
        found: list[JobDescriptor | None] = [None] * len(jobs)
        deduplicated = 0
        for name, indexes in parts.items():
            batch = [jobs[i] for i in indexes]
            keyed_only = all(job.unique_key is not None for job in batch)
            try:
                # a part of keyed jobs only is idempotent: retried on its shard like a read
                outcome = self.call(
                    name,
                    _keyed_call(queue, batch, unique_window_ms),
                    retries=None if keyed_only else 0,
                    for_enqueue=True,
                )
            except ShardFull as exc:
                raise EnqueueRejected(f"storage full: {exc.message}") from None
            for i, done in zip(indexes, outcome, strict=True):
                found[i] = JobDescriptor(queue, name, done.priority, done.local_id)
                deduplicated += not done.stored
            self._enqueued(queue, [name], batch)
        return KeyedEnqueue([d for d in found if d is not None], deduplicated)

    def _enqueued(self, queue: str, shards: Sequence[str], jobs: Sequence[NewJob]) -> None:
        self.jobs_may_be_due(
            queue,
            shards,
            sorted({job.priority for job in jobs}),
            sum(1 for job in jobs if job.run_after_ms is None),
        )

    def _key_parts(self, queue: str, jobs: Sequence[NewJob]) -> dict[str, list[int]]:
        """shard -> indexes of its jobs, shards in the order their first keyed job comes; the
        jobs without a key join the last shard."""
        placed = self.placement.targets(queue)
        owners = [
            name
            for name, spec in self._set.specs.items()
            if not spec.dequeue_only and (placed is None or name in placed)
        ]
        if not owners:
            raise NoHealthyShards(
                "Unable to find healthy shard: no shard accepts enqueues (all are dequeue_only)"
            )
        parts: dict[str, list[int]] = {}
        plain: list[int] = []
        for i, job in enumerate(jobs):
            if job.unique_key is None:
                plain.append(i)
            else:
                parts.setdefault(owner_shard(queue, job.unique_key, owners), []).append(i)
        if plain:
            parts[next(reversed(parts))].extend(plain)
        return parts

    def dequeue(
        self,
        queue: str,
        limit: int,
        source: str,
        *,
        dry_run: bool = False,
        coverage: float = 1.0,
        acks: tuple[Sequence[tuple[str, Ack]], Sequence[tuple[str, Ack]]] | None = None,
        budget: ByteBudget | None = None,
    ) -> list[tuple[JobDescriptor, DequeuedJob]]:
        """Claim up to `limit` jobs: priority 1 on every examined shard first, then 2, ...;
        shards in random order, each asked for all jobs still needed. A shard that fails after
        others already handed out jobs is skipped (those jobs are delivered, not orphaned).

        With a `budget` (one reply's room), every step gets what is left of it, and the
        dequeue stops once what is left cannot hold a job at the body cap: a step that took
        fewer jobs than asked for lack of room stopped there, so no job of a later step is
        handed out ahead of it (a reply that is full is full).

        `acks` (succeeded, failed) of this queue are applied before anything is dequeued. When
        they all belong to one examined healthy shard, that shard comes first and takes them
        with its first dequeue in one call (`Shard.ack_and_dequeue`: one round trip on Redis);
        if that call fails, the acks are applied on their own (an error there is the caller's)
        and the dequeue goes on as usual."""
        cap = self.fifo.cap(queue)
        if cap is not None:  # docs/semantics.md F-...
            return dequeue_fifo(self, queue, limit, source, dry_run, cap, acks, budget)
        names = self._examined(coverage, self.placement.dequeue_shards(queue))
        healthy = [n for n in names if self.health.is_healthy(n)]
        claim = None if dry_run else new_claim(source)
        acks = self._broker_first(queue, acks, claim, limit)
        lead = self._piggyback_lead(queue, acks, healthy, claim)  # applies acks that can't ride
        if not healthy:
            raise NoHealthyShards(f"no healthy shard to dequeue from (examined {names})")
        run = _DequeueRun(self, queue, limit, claim, budget)
        if lead is not None and claim is not None:  # a lead is chosen only for a real claim
            healthy.remove(lead)
            healthy.insert(0, lead)
            jobs = self._lead_dequeue(queue, lead, acks, limit, claim, budget)
            if acks is not None and acks[1]:  # failure acks may have made jobs PENDING
                self.jobs_may_be_due(queue, [lead])
            if jobs is not None:
                run.add(lead, jobs, step=(1, lead))
                run.buffered_since(1, lead)
        for priority in range(1, self.num_priorities + 1):
            if run.done:
                break
            run.sweep(priority, healthy)
        return run.result(healthy)

    def _broker_first(self, queue: str, acks, claim: str | None, limit: int):
        """With the broker on: note the demand of a dequeue it buffers for (`Broker.wants`),
        write pending hand-outs before acks are applied, and apply acks on their own while
        the queue has buffered jobs or this server buffers for it (riding with a storage
        dequeue, they would go ahead of the buffer). Returns the acks still to apply."""
        broker = self.broker
        if broker is None:
            return acks
        wanted = broker.wants(limit)
        if claim is not None and wanted:
            broker.note_demand(queue)
        if acks is not None:
            broker.flush_for(queue, _refs(acks[0], acks[1]))
            if (acks[0] or acks[1]) and (broker.buffered(queue) or (wanted and broker.owned())):
                self.ack(queue, *acks)
                return None
        return acks

    def _examined(self, coverage: float, among: Sequence[str] | None = None) -> list[str]:
        """The shards a dequeue examines: a random `coverage` share of them (of `among`, the
        queue's placement and holders, when it has partitions; rounded half up, at least
        one), in random order."""
        names = self.shard_names() if among is None else list(among)
        self._rng.shuffle(names)
        return names[: max(1, int(len(names) * coverage + 0.5))]

    def _piggyback_lead(
        self, queue: str, acks, healthy: list[str], claim: str | None
    ) -> str | None:
        """Apply `acks` now, except those that can ride with the first dequeue: the name of
        the one healthy shard they all belong to (then nothing is applied yet), else None."""
        if acks is None:
            return None
        owners = {name for name, _ in acks[0]} | {name for name, _ in acks[1]}
        if claim is not None and len(owners) == 1 and next(iter(owners)) in healthy:
            return next(iter(owners))
        if owners:
            self.ack(queue, *acks)
        return None

    def _lead_dequeue(
        self, queue: str, name: str, acks, limit: int, claim: str, budget: ByteBudget | None
    ) -> list[DequeuedJob] | None:
        """The acks plus priority 1 of shard `name` in one call; None when that failed and the
        acks were applied on their own instead (their error, if any, is raised)."""
        succeeded = [ack for _, ack in acks[0]]
        failed = [ack for _, ack in acks[1]]
        try:
            return self.call(
                name,
                lambda s: s.ack_and_dequeue(queue, succeeded, failed, 1, limit, claim, budget),
            )[1]
        except (QueueNotFound, ShardConnectionFailed):
            self.ack(queue, *acks)  # a repeated ack is a no-op
            return None

    def ack(
        self, queue: str, succeeded: Sequence[tuple[str, Ack]], failed: Sequence[tuple[str, Ack]]
    ) -> int:
        """Apply acks grouped per shard (one call each); returns how many applied."""
        if self.broker is not None:  # a job this server handed out is IN_PROGRESS first
            self.broker.flush_for(queue, _refs(succeeded, failed))
        by_shard: dict[str, tuple[list[Ack], list[Ack]]] = defaultdict(lambda: ([], []))
        for name, ack in succeeded:
            by_shard[name][0].append(ack)
        for name, ack in failed:
            by_shard[name][1].append(ack)
        for name in by_shard:  # first-seen order: the same unknown shard is reported first
            self.shard(name)
        try:
            applied = self._fan_out(by_shard, lambda s: s.ack(queue, *by_shard[s.name]))
        finally:
            if failed:  # a failure ack may have made its job PENDING again
                self.jobs_may_be_due(queue, list({name for name, _ in failed}))
            elif succeeded and self.fifo.cap(queue) is not None:  # room under the FIFO cap
                self.signals.changed(queue, len(succeeded))
        return sum(applied.values())

    def checkpoint(self, queue: str, checkpoints: Sequence[tuple[str, Checkpoint]]) -> int:
        if self.broker is not None:
            self.broker.flush_for(queue, _refs(checkpoints))
        by_shard: dict[str, list[Checkpoint]] = defaultdict(list)
        for name, checkpoint in checkpoints:
            self.shard(name)
            by_shard[name].append(checkpoint)
        try:
            applied = self._fan_out(by_shard, lambda s: s.checkpoint(queue, by_shard[s.name]))
        finally:
            if any(c.move_to_pending for _, c in checkpoints):
                self.jobs_may_be_due(queue, list(by_shard))
        return sum(applied.values())

    def lookup(
        self,
        descriptors: Sequence[JobDescriptor],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> dict[JobDescriptor, JobRecord]:
        """Records of the jobs that exist, keyed by descriptor; one call per (queue, shard).
        With `max_body_bytes`, one body budget for all the calls: a call whose bodies do not
        fit what is left returns none (only `body_size`), and every later call gets 0 left."""
        groups: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        for d in descriptors:
            self.shard(d.shard)
            groups[(d.queue, d.shard)].append((d.priority, d.local_id))
        found: dict[JobDescriptor, JobRecord] = {}
        left = max_body_bytes
        for queue in {queue for queue, _ in groups}:
            self._handed_out_first(queue)
        for (queue, name), refs in groups.items():
            records = self.call(name, _lookup_call(queue, refs, include_body, left))
            for record in records:
                found[JobDescriptor(queue, name, record.priority, record.local_id)] = record
            if left is not None and include_body:
                fitted = all(r.body is not None for r in records)
                left = max(left - sum(len(r.body or b"") for r in records), 0) if fitted else 0
        return found

    def count(
        self,
        queue: str,
        state: JobState,
        priority: int | None,
        future: bool,
        cap: int,
        body_filter: BodyFilter | None,
    ) -> int:
        priorities = self._priorities(priority)
        self._handed_out_first(queue)
        counts = self._fan_out(
            self.read_shards(queue),
            lambda s: s.count(queue, state, priorities, future, cap, body_filter),
        )
        return min(sum(counts.values()), cap)

    def scan(
        self,
        queue: str,
        state: JobState,
        priority: int | None,
        future: bool,
        continuation: str,
        limit: int,
        body_filter: BodyFilter | None,
    ) -> tuple[list[tuple[JobDescriptor, JobRecord]], str]:
        """A page of jobs, newest run_after first, merged across shards, and the continuation
        for the next page (CONTINUATION_END when there is none)."""
        if continuation == CONTINUATION_END:
            return [], CONTINUATION_END
        cursor = _parse_continuation(continuation)
        priorities = self._priorities(priority)
        self._handed_out_first(queue)
        pages = self._fan_out(
            self.read_shards(queue),
            lambda s: s.scan(
                queue,
                state,
                {p: _bound(cursor, s.name, p) for p in priorities},
                future,
                limit,
                body_filter,
            ),
        )
        rows = [(name, record) for name, records in pages.items() for record in records]
        rows.sort(key=lambda row: _scan_key(row[0], row[1]))
        page_full = any(
            sum(1 for r in records if r.priority == p) >= limit
            for records in pages.values()
            for p in priorities
        )
        more = len(rows) > limit or page_full
        rows = rows[:limit]
        result = [(JobDescriptor(queue, name, r.priority, r.local_id), r) for name, r in rows]
        if not more or not rows:
            return result, CONTINUATION_END
        return result, scan_continuation(*result[-1])

    def retry_failed(
        self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        self.placement.reopened(queue)  # before: a dequeue must not miss what it moves
        try:
            return self._sequential(
                lambda s, left: s.retry_failed(queue, priority, attempts, run_after_ms, left),
                limit,
                self.read_shards(queue),
            )
        finally:
            self.jobs_may_be_due(queue, None, [priority])

    def delete_jobs(
        self, queue: str, state: JobState, priority: int, limit: int, body_filter: BodyFilter | None
    ) -> int:
        """With the broker on, a delete first writes the queue's pending hand-outs (a job
        this server handed out is IN_PROGRESS, not the reservation storage would delete as
        PENDING), and a delete of PENDING jobs takes the priority's buffered jobs back
        (`Broker.held_back`): a deleted reservation is never served."""
        held: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.broker is not None and state == JobState.PENDING:
            held = self.broker.held_back(queue, priority)
        with held:
            self._handed_out_first(queue)
            return self._sequential(
                lambda s, left: s.delete_jobs(queue, state, priority, left, body_filter),
                limit,
                self.read_shards(queue),
            )

    # ---------------------------------------------------------------- helpers

    def _sequential(self, op: Callable[[Shard, int], int], limit: int, names: list[str]) -> int:
        """Run `op` on shards `names` one by one in random order with the limit still left."""
        self._rng.shuffle(names)
        left = limit
        for name in names:
            if left <= 0:
                break
            left -= self.call(name, _with_limit(op, left))
        return limit - left

    def _priorities(self, priority: int | None) -> list[int]:
        return [priority] if priority is not None else list(range(1, self.num_priorities + 1))


class _DequeueRun:
    """One dequeue's progress over its (priority, shard) steps: the jobs claimed so far, the
    reply room left, the shards that do not hold the queue and the last storage failure."""

    def __init__(
        self,
        store: ShardedBackend,
        queue: str,
        limit: int,
        claim: str | None,
        budget: ByteBudget | None,
    ):
        self.store, self.queue, self.limit, self.claim = store, queue, limit, claim
        self.budget = budget
        #: the room of a job at the body cap (less room left: the reply is full, see dequeue)
        self.body_cap = store.backend.limits.body_cap
        self.got: list[tuple[JobDescriptor, DequeuedJob]] = []
        self.missing: set[str] = set()
        self.failure: ShardConnectionFailed | None = None
        self.taken: set[tuple[int, str]] = set()  # steps already done (with piggy-backed acks)
        self.empty = store.empty

    @property
    def need(self) -> int:
        return self.limit - len(self.got)

    @property
    def done(self) -> bool:
        """The limit is reached, or the reply has no room for a job at the body cap."""
        budget = self.budget
        return self.need <= 0 or (budget is not None and not budget.holds(1, self.body_cap))

    def add(self, name: str, jobs: Sequence[DequeuedJob], step: tuple[int, str]) -> None:
        self.taken.add(step)
        self.got += [
            (JobDescriptor(self.queue, name, job.priority, job.local_id), job) for job in jobs
        ]
        if self.budget is not None:
            self.budget = self.budget.spent(len(jobs), sum([len(job.body) for job in jobs]))

    def sweep(self, priority: int, names: Sequence[str]) -> None:
        """Ask each shard for the jobs still needed at `priority`. Raises QueueNotFound when no
        shard holds the queue and nothing was claimed."""
        for name in names:
            if self.done:
                return
            if name not in self.missing and (priority, name) not in self.taken:
                self._step(priority, name)
        if len(self.missing) == len(names) and not self.got:
            raise QueueNotFound(self.queue)

    def _step(self, priority: int, name: str) -> None:
        broker = self.store.broker
        if broker is None:
            self._storage_step(priority, name)
            return
        if self._take_buffered(broker, priority, name):
            return
        lock = broker.partition_lock(self.queue, name)  # None: not a partition it owns
        if lock is None:
            self._storage_step(priority, name)
            self.buffered_since(priority, name)
            return
        with lock:  # no refill runs now: a job it reserves is in the buffer, not in between
            if not self._take_buffered(broker, priority, name):
                self._storage_step(priority, name)

    def buffered_since(self, priority: int, name: str) -> None:
        """After a storage call made without the partition's lock: if this server came to own
        the partition meanwhile, its first refill may have reserved what the call missed (the
        refill holds the lock until its jobs are buffered), so take those too."""
        broker = self.store.broker
        if broker is None or self.done:
            return
        lock = broker.partition_lock(self.queue, name)
        if lock is None:
            return
        with lock:
            self._take_buffered(broker, priority, name)

    def _take_buffered(self, broker: Broker, priority: int, name: str) -> bool:
        """Take the broker's buffered jobs of the partition at `priority` (older than what
        storage still holds); whether the dequeue is done."""
        jobs = broker.serve(self.queue, name, priority, self.need, self.claim, self.budget)
        if jobs:
            self.add(name, jobs, step=(priority, name))
        return self.done

    def _storage_step(self, priority: int, name: str) -> None:
        queue, need, claim, budget = self.queue, self.need, self.claim, self.budget
        empty = self.empty
        if empty.enabled and empty.skip(queue, name, priority):
            return
        epoch, started = empty.epoch(queue), empty.clock()
        try:
            jobs = self.store.call(name, lambda s: s.dequeue(queue, priority, need, claim, budget))
            empty.observed(queue, name, priority, len(jobs), epoch, started)
        except QueueNotFound:
            self.missing.add(name)
            return
        except ShardConnectionFailed as exc:  # others may still deliver; reported if none did
            self.failure = exc
            return
        self.add(name, jobs, step=(priority, name))

    def result(self, names: Sequence[str]) -> list[tuple[JobDescriptor, DequeuedJob]]:
        """The jobs claimed; when nothing was, raises the last failure if it was a full shard or
        every examined shard has since turned unhealthy."""
        health, failure = self.store.health, self.failure
        if (
            not self.got
            and failure is not None
            and (isinstance(failure, ShardFull) or not any(map(health.is_healthy, names)))
        ):
            raise failure
        return self.got


def _refs(*groups: Sequence[tuple[str, Ack | Checkpoint]]) -> list[tuple[str, int, int]]:
    """(shard, priority, local_id) of acks or checkpoints."""
    return [(name, item.priority, item.local_id) for group in groups for name, item in group]


def _reusable(old: _ShardSet, specs: Sequence[ShardSpec]) -> dict[str, Shard]:
    """The open shards of `old` that `specs` keeps on the same storage."""
    return {
        s.name: old.shards[s.name]
        for s in specs
        if s.name in old.specs and old.specs[s.name].connection_key() == s.connection_key()
    }


def scan_continuation(descriptor: JobDescriptor, record: JobRecord) -> str:
    """The continuation that resumes a scan after this job (of a page in scan order)."""
    return f"{record.run_after_ms}:{descriptor.shard}:{record.priority}:{record.local_id}"


def _parse_continuation(token: str) -> tuple[int, str, int, int] | None:
    if token == CONTINUATION_START:
        return None
    match = _CONTINUATION.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise ContinuationInvalid(
            f"continuation {token!r} is not one this server issued; "
            f"start with {CONTINUATION_START!r}"
        )
    run_after, shard, priority, local_id = match.groups()
    return int(run_after), shard, int(priority), int(local_id)


def _scan_key(shard: str, record: JobRecord) -> tuple:
    """Total order of scan results: newest run_after first, then shard, priority, newest id."""
    return (-record.run_after_ms, shard, record.priority, -record.local_id)


def _bound(cursor: tuple[int, str, int, int] | None, shard: str, priority: int) -> ScanBound | None:
    """The per-(shard, priority) resume point equivalent to "after `cursor` in _scan_key order"."""
    if cursor is None:
        return None
    run_after, c_shard, c_priority, c_id = cursor
    if (shard, priority) == (c_shard, c_priority):
        return ScanBound(run_after, c_id)
    after = (shard, priority) > (c_shard, c_priority)
    return ScanBound(run_after, MAX_LOCAL_ID if after else 0)


def _keyed_call(
    queue: str, jobs: list[NewJob], unique_window_ms: int
) -> Callable[[Shard], list[Enqueued]]:
    """One shard's keyed enqueue, its arguments bound now (not by the loop that builds it)."""
    return lambda shard: shard.enqueue_keyed(queue, jobs, unique_window_ms)


def _lookup_call(
    queue: str, refs: list[tuple[int, int]], include_body: bool, max_body_bytes: int | None
) -> Callable[[Shard], list[JobRecord]]:
    """One shard's lookup, its arguments bound now (not by the loop that builds it)."""
    return lambda shard: shard.lookup(queue, refs, include_body, max_body_bytes)


def _with_limit(op: Callable[[Shard, int], int], limit: int) -> Callable[[Shard], int]:
    """`op` with this shard's share of the limit bound now."""
    return lambda shard: op(shard, limit)
