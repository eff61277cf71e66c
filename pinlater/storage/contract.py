"""The backend contract: small, atomic, batched per-shard primitives.

A storage kind (SQLite, MySQL, Redis) provides a `Backend` that parses its part of the config
and opens `Shard`s. Everything that is not storage-specific (validation, shard choice, priority
order, fan-out and merge, descriptors, retries, health) lives above, in `sharded.py`.

Rules every implementation follows:
- One round trip (or one transaction / one script call) per primitive call, never one per job.
- Each state transition is one guarded statement (expected state and claim in the WHERE clause or
  the Lua condition); a transition whose guard does not hold is a silent no-op.
- Times are epoch ms read from the shard's own clock (`now_ms`), plus `clock_offset_ms`, which
  tests and operators use to move a shard's clock; the application clock is never mixed in.
- A call on a queue that does not exist on the shard raises `QueueNotFound`.
- Connection-level failures raise `ShardError` (retriable or not); storage refusals for lack of
  memory/space raise `StorageFull`; contention on one queue's own storage (its createQueue or
  deleteQueue running, lock waits between calls on it) raises `QueueBusy`, which never counts
  against the shard's health. Nothing else escapes for expected conditions.
- A queue being deleted is gone from the first moment: from then on calls on it raise
  `QueueNotFound` and a create of the same name gets fresh, empty storage, whatever is still
  being freed.
- Big deletes work in bounded steps: `delete_queue`, `delete_jobs` and `purge` change at most
  `DELETE_STEP` jobs per transaction (script call) and let other writers in between, so
  freeing a big queue never stalls the other queues of the shard. A crash between steps leaves
  nothing visible; `finish_deletes` frees what it left.
- Bodies are bytes, byte-identical on the way back; custom statuses are truncated to
  `status_cap` characters keeping the newest text (acks append, checkpoints prepend).
- What goes into one reply is bounded before it is read: a dequeue claims only the jobs whose
  bodies fit its `ByteBudget`, and a lookup returns bodies only when they all fit its
  `max_body_bytes`. Lengths come before bodies (SQL `LENGTH(body)`, Redis `HSTRLEN`, or reads
  in chunks that fit even at the body cap), so a call reads at most about twice its budget of
  bodies, whatever `limit` is.
- Unique keys (`enqueue_keyed`) are records of their own, per queue and shard: a key is held
  from the enqueue that stored its job until `expires_at` = that enqueue's now + the window,
  whatever becomes of the job (deleted and purged jobs included). Checking a key and storing
  its job is one transaction (script call), so concurrent enqueues of one key from any number
  of servers store one job. Expired records are removed by `purge_keys` (the janitor).
- The ledger (`pinlater/storage/ledger.py`): every primitive that stores, claims, acks,
  reclaims, deletes or purges jobs adds what it did to the queue's counters on the shard in
  the same transaction (script call) as the jobs it changed, so a crash or a rollback never
  separates them. `ledger` reads the counters and the jobs per state in one snapshot. The
  counters belong to the queue: `delete_queue` removes them with it, and a queue created again
  starts with empty books. A storage with row locks may keep the counters as a journal (one
  row per transaction, so writers never wait for one another, nor for a transaction its
  client abandoned) that `fold_ledger` (the janitor) folds into one row.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pinlater.common.sections import ConfigError
from pinlater.storage.ledger import LedgerBook
from pinlater.storage.models import (
    Ack,
    Checkpoint,
    DequeuedJob,
    Enqueued,
    JobRecord,
    JobState,
    NewJob,
    QueueStats,
    ReclaimCounts,
    ScanBound,
)

BodyFilter = Callable[[bytes], bool]
#: the most jobs one transaction (or script call) of a delete may remove (see the rules above)
DELETE_STEP = 2000
#: the most queues one `Shard.queue_stats` call may be asked about (callers slice)
MAX_STATS_QUEUES = 1000
#: the most leases one `Shard.live_leases` call returns (lease names are few: one per
#: partition and one per server)
MAX_LEASES_LISTED = 10_000


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """One logical shard as configured. Backends subclass it with their connection fields.

    Two specs that differ only in `dequeue_only` can share an open shard (hot reload flips the
    flag without reconnecting); see `connection_key`.
    """

    name: str
    dequeue_only: bool = False

    def connection_key(self) -> tuple:
        """Everything but `dequeue_only`: equal keys mean the open shard can be reused."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "dequeue_only")


@dataclass(frozen=True, slots=True)
class StorageLimits:
    """Limits the storage must honour, from the validated config."""

    num_priorities: int = 3
    body_cap: int = 1024 * 1024
    status_cap: int = 5000


@dataclass(frozen=True, slots=True)
class ByteBudget:
    """Room for jobs in one reply: a job costs its body's length plus `per_job` bytes (what
    the reply spends on it besides the body), and jobs fit, in the order they are handed out,
    while their costs add up to at most `max_bytes`. The caller sizes both (the handler knows
    the wire); storage only adds up lengths."""

    max_bytes: int
    per_job: int = 0

    def fitting(self, body_lengths: Sequence[int]) -> int:
        """How many of the jobs, taken in order, fit (0 when even the first does not)."""
        if sum(body_lengths) + self.per_job * len(body_lengths) <= self.max_bytes:
            return len(body_lengths)  # the usual case, without a step per job
        left, count = self.max_bytes, 0
        for length in body_lengths:
            left -= length + self.per_job
            if left < 0:
                break
            count += 1
        return count

    def spent(self, jobs: int, body_bytes: int) -> ByteBudget:
        """The budget left after `jobs` jobs with `body_bytes` of bodies (never below 0)."""
        used = body_bytes + self.per_job * jobs
        return ByteBudget(max(self.max_bytes - used, 0), self.per_job)

    def holds(self, jobs: int, body_bytes: int) -> bool:
        """Whether `jobs` jobs of `body_bytes` each certainly fit (no lengths needed)."""
        return jobs * (body_bytes + self.per_job) <= self.max_bytes


class Shard(abc.ABC):
    """One storage shard. Thread-safe: the server calls it from many request threads."""

    def __init__(self, spec: ShardSpec, limits: StorageLimits):
        self.spec = spec
        self.name = spec.name
        self.limits = limits
        self.clock_offset_ms = 0

    # ---- clock ----
    @abc.abstractmethod
    def now_ms(self) -> int:
        """The shard's clock (storage server clock where there is one) plus clock_offset_ms."""

    # ---- queues ----
    @abc.abstractmethod
    def create_queue(self, queue: str) -> None:
        """Create the queue's storage for priorities 1..num_priorities; idempotent, and creates
        whatever is missing (e.g. tables of newly configured priority levels)."""

    @abc.abstractmethod
    def delete_queue(self, queue: str) -> None:
        """Remove the queue and every job in every state; idempotent. The queue is gone
        (QueueNotFound, a create starts afresh) before its jobs are freed in bounded steps."""

    def finish_deletes(self) -> int:
        """Free the storage of deleted queues whose delete_queue was interrupted (a crash
        between its steps); return how many such queues (or tables) it found. Run by the
        janitor; a storage that deletes atomically has nothing to do."""
        return 0

    @abc.abstractmethod
    def queue_names(self) -> set[str]:
        """Names of the queues that exist on this shard."""

    # ---- jobs ----
    @abc.abstractmethod
    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[int]:
        """Store all jobs atomically (one transaction) and return their local ids in order.
        Unique keys are not looked at (the sharded layer sends keyed batches to
        `enqueue_keyed`)."""

    @abc.abstractmethod
    def enqueue_keyed(
        self, queue: str, jobs: Sequence[NewJob], unique_window_ms: int
    ) -> list[Enqueued]:
        """As `enqueue`, in one transaction, for a batch where jobs may carry a unique key. A
        keyed job whose key is held in the queue on this shard (a record with expires_at >
        now) stores nothing and reports the holder; otherwise it is stored and its key
        recorded with expires_at = now + unique_window_ms (replacing an expired record). A key
        repeated within the batch: its first job decides, the later ones report that job. Jobs
        without a key are stored as by `enqueue`. Returns one `Enqueued` per job, in order."""

    @abc.abstractmethod
    def dequeue(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """Claim up to `limit` eligible PENDING jobs (run_after <= now) of one priority, oldest
        run_after first then by id, moving them to IN_PROGRESS with `claim` and updated_at = now.
        `claim` None is a dry run: return them without changing anything.
        With a `budget`, only the leading jobs that fit it (`ByteBudget.fitting`) are claimed
        and returned; the rest stay as they were, and bodies of jobs left out are not read."""

    # ---- prefetching broker (docs/semantics.md `S-...`) ----
    @abc.abstractmethod
    def prefetch(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        hold_ms: int,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """As `dequeue` with a claim (same eligibility, order, budget, claim and ledger
        `dequeued` count), but the jobs are *reserved*: IN_PROGRESS under `claim` for a broker
        that has not handed them out yet. A reserved job's deadline is now + `hold_ms`,
        independent of the queue's claim timeout: `reclaim_expired` returns it to PENDING after
        it without using an attempt (run_after and attempts unchanged). Reads and counts show
        it as IN_PROGRESS with its claim, and acks and checkpoints that match its claim apply
        to it as to a handed-out job (write-behind hand-outs: the worker may be faster)."""

    @abc.abstractmethod
    def hand_out(
        self,
        queue: str,
        priority: int,
        jobs: Sequence[tuple[int, str]],
        claim: str | None = None,
    ) -> int:
        """Turn reserved jobs, given as (local_id, the claim they were prefetched with), into
        ordinary claims from now: updated_at = now, so the claim timeout counts from hand-out,
        and no deadline of their own any more. With `claim`, the jobs take it (the handing-out
        request's claim, which names the worker's source); None keeps the prefetch claim. A job
        that is not reserved under the given claim any more (acked, checkpointed, released,
        returned by the janitor, claimed again) is left alone. One statement per prefetch claim
        (usually one); returns how many jobs were handed out. Counts nothing in the ledger
        (the prefetch counted the claim)."""

    @abc.abstractmethod
    def release(self, queue: str, priority: int, jobs: Sequence[tuple[int, str]]) -> int:
        """Reserved jobs, given as (local_id, prefetch claim), back to PENDING at once: claim
        cleared, run_after and attempts unchanged (they keep their place in dequeue order),
        updated_at = now. A broker that stops, or whose buffered jobs idled past its bound,
        calls it. Jobs no longer reserved under that claim are left alone; returns how many
        were released. Counts nothing in the ledger (as a checkpoint to PENDING)."""

    @abc.abstractmethod
    def dequeue_fifo(
        self,
        queue: str,
        limit: int,
        in_flight_cap: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """A FIFO queue's dequeue (docs/semantics.md `F-...`), atomic against every other
        dequeue_fifo of the queue on the shard, from any server: count the queue's IN_PROGRESS
        jobs (every priority), and claim up to min(`limit`, `in_flight_cap` - that count)
        heads, priority 1 first. A priority's heads are its PENDING jobs in local id (enqueue)
        order, taken while due: the first one not due (a retry delay, a checkpoint, a delayed
        enqueue) ends that priority, so nothing behind it is handed out. `claim` None is a dry
        run (what a claim would take now, nothing changed); a `budget` stops the whole call at
        the first job that does not fit. Jobs come back in priority, then id order."""

    @abc.abstractmethod
    def next_due_ms(self, queue: str) -> int | None:
        """Milliseconds from the shard's now until its earliest PENDING job of `queue` (any
        priority) becomes eligible: 0 when one is eligible now, None when the queue holds no
        PENDING job here. Read-only, one round trip (one read snapshot); the long-poll watcher
        (pinlater/storage/watch.py) asks this instead of dequeuing on behalf of parked
        requests, so an idle queue costs one call per poll whatever the number of waiters."""

    @abc.abstractmethod
    def ack(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack]) -> int:
        """Apply acks whose job is IN_PROGRESS and whose claim matches; return how many applied."""

    def ack_and_dequeue(
        self,
        queue: str,
        succeeded: Sequence[Ack],
        failed: Sequence[Ack],
        priority: int,
        limit: int,
        claim: str,
        budget: ByteBudget | None = None,
    ) -> tuple[int, list[DequeuedJob]]:
        """Piggy-backed acks, then a dequeue, as `ack` then `dequeue` (so the acks are applied
        first). A backend may do both in one round trip. If this raises, the acks may or may not
        have been applied (the caller applies them again: a repeated ack is a no-op)."""
        applied = self.ack(queue, succeeded, failed)
        return applied, self.dequeue(queue, priority, limit, claim, budget)

    def ack_and_dequeue_fifo(
        self,
        queue: str,
        succeeded: Sequence[Ack],
        failed: Sequence[Ack],
        limit: int,
        in_flight_cap: int,
        claim: str,
        budget: ByteBudget | None = None,
    ) -> tuple[int, list[DequeuedJob]]:
        """Piggy-backed acks, then a FIFO dequeue, as `ack` then `dequeue_fifo` (so the acks
        free their room under the cap first), as `ack_and_dequeue` is for `dequeue`."""
        applied = self.ack(queue, succeeded, failed)
        return applied, self.dequeue_fifo(queue, limit, in_flight_cap, claim, budget)

    @abc.abstractmethod
    def checkpoint(self, queue: str, checkpoints: Sequence[Checkpoint]) -> int:
        """Apply checkpoints whose job is IN_PROGRESS with a matching claim; return the count."""

    @abc.abstractmethod
    def lookup(
        self,
        queue: str,
        refs: Sequence[tuple[int, int]],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord]:
        """Records for the (priority, local_id) pairs that exist; missing ones are omitted.
        With `include_body`, each record's `body_size` is set; with `max_body_bytes` too, the
        bodies are returned only when the found ones add up to at most that many bytes, else
        none is (and none is read)."""

    @abc.abstractmethod
    def count(
        self,
        queue: str,
        state: JobState,
        priorities: Sequence[int],
        future: bool,
        cap: int,
        body_filter: BodyFilter | None,
    ) -> int:
        """Jobs in `state` over the priorities with run_after > now (future) or <= now,
        exact up to `cap` (the result is at most `cap`)."""

    @abc.abstractmethod
    def queue_stats(self, queues: Sequence[str], cap: int) -> dict[str, QueueStats]:
        """Depth and ages of many queues in one read: for each of `queues` (at most
        MAX_STATS_QUEUES) that exists on the shard, its `QueueStats` (counts exact up to `cap`;
        cap 0 reads the ages alone, every count 0); queues that do not exist are left out, never
        an error. One consistent snapshot and a fixed number of round trips whatever the number
        of queues (one script call; SQL: one transaction, one statement per few hundred
        tables), so the depth collector and the janitor cost one call per shard per tick instead
        of dozens per queue. Read-only."""

    @abc.abstractmethod
    def scan(
        self,
        queue: str,
        state: JobState,
        bounds: Mapping[int, ScanBound | None],
        future: bool,
        limit: int,
        body_filter: BodyFilter | None,
    ) -> list[JobRecord]:
        """For each priority in `bounds`, up to `limit` records after its bound (None = from the
        top) in (run_after DESC, local_id DESC) order. Bodies are not returned."""

    @abc.abstractmethod
    def retry_failed(
        self,
        queue: str,
        priority: int,
        attempts_remaining: int,
        run_after_ms: int | None,
        limit: int,
    ) -> int:
        """Move up to `limit` FAILED jobs (oldest first) to PENDING; return how many."""

    @abc.abstractmethod
    def delete_jobs(
        self, queue: str, state: JobState, priority: int, limit: int, body_filter: BodyFilter | None
    ) -> int:
        """Delete up to `limit` jobs in `state` (matching the filter, if any), in steps of at
        most DELETE_STEP jobs; return how many."""

    # ---- janitor ----
    @abc.abstractmethod
    def reclaim_expired(
        self, queue: str, priority: int, claim_timeout_ms: int, limit: int
    ) -> ReclaimCounts:
        """Up to `limit` jobs in all: reserved jobs (`prefetch`) whose deadline has passed,
        back to PENDING with nothing used (`released`; never counted as reclaimed), then
        IN_PROGRESS jobs handed out (not reserved) whose updated_at is older than the timeout:
        back to PENDING with one attempt used (run_after = now), or FAILED when none is left.
        A reserved job is never subject to the claim timeout, only to its own deadline."""

    @abc.abstractmethod
    def purge(self, queue: str, priority: int, state: JobState, ttl_ms: int, limit: int) -> int:
        """Delete up to `limit` jobs in a terminal `state` whose updated_at is older than ttl,
        in steps of at most DELETE_STEP jobs."""

    @abc.abstractmethod
    def purge_keys(self, queue: str, limit: int) -> int:
        """Delete up to `limit` expired unique-key records (expires_at <= now) of the queue, in
        one transaction (script call); return how many."""

    # ---- ledger ----
    @abc.abstractmethod
    def ledger(self, queue: str) -> LedgerBook:
        """The queue's books on this shard: its counters and its jobs per state, read in one
        snapshot (one read transaction or script call), so they agree however busy the queue
        is. Work is proportional to the queue's jobs on the shard for SQL (an index count per
        state) and to its priorities for Redis (ZCARD)."""

    #: the ledger is a journal that `fold_ledger` folds (the janitor calls it only then)
    ledger_journal: ClassVar[bool] = False

    def fold_ledger(self, queue: str, limit: int) -> int:
        """Fold up to `limit` rows of the queue's ledger journal into one, in one transaction
        (the books read the same before and after); return how many rows it removed. A
        storage whose counters are one row or hash has nothing to fold (0)."""
        return 0

    # ---- leases (partition ownership and server liveness for the prefetching broker) ----
    @abc.abstractmethod
    def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or renew the lease `name` for `owner` until now + ttl_ms (shard clock), as one
        atomic step: succeeds when the lease is free, expired, or already `owner`'s; False
        (nothing changed) while another owner holds it. Names and owners are checked by
        `pinlater.storage.leases.check_lease`. A lease is advisory: correctness never depends
        on one (jobs are claimed atomically in storage)."""

    @abc.abstractmethod
    def release_lease(self, name: str, owner: str) -> bool:
        """Give up the lease `name` if `owner` holds it (expired or not); whether it did."""

    @abc.abstractmethod
    def live_leases(self, prefix: str) -> dict[str, str]:
        """name -> owner of every unexpired lease whose name starts with `prefix` (a server
        heartbeat is a lease of its own, so this also tells which servers are alive); at
        most MAX_LEASES_LISTED leases. One transaction (script call), which also forgets a
        few leases expired for a day (`pinlater.storage.leases`), so per-process heartbeats
        do not pile up over restarts."""

    # ---- runtime queue settings (one document, kept on the first shard of the map) ----
    @abc.abstractmethod
    def read_settings(self, known_version: int) -> tuple[int, bytes | None]:
        """The stored settings document and its version, in one cheap read: (version, None)
        when the version is still `known_version`, else (version, document). Nothing stored
        yet is version 0 with an empty document."""

    @abc.abstractmethod
    def write_settings(self, expected_version: int, document: bytes) -> int | None:
        """Store `document` if the stored version is still `expected_version` (0: nothing
        stored yet), as one atomic compare-and-set; return the new version (expected + 1), or
        None when another writer changed it first (nothing written)."""

    # ---- health ----
    @abc.abstractmethod
    def ping(self) -> None:
        """Raise ShardError unless the storage answers."""

    def durability_warnings(self) -> list[str]:
        """Settings of this shard that would lose accepted jobs on a crash (empty = durable)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional: a shard may hold nothing to release
        """Release connections. Idempotent."""


class Backend(abc.ABC):
    """A storage kind. One instance per server; opens shards and may share pools among them."""

    kind: ClassVar[str]
    #: the shard map can change at run time (add/remove shards, flip dequeue_only)
    supports_shard_reload: ClassVar[bool] = False
    #: a second instance of the kind has connections of its own, which isolates enqueues from
    #: dequeues (server.role all opens one for enqueues); False where storage serializes
    #: writers anyway, so more connections would only add lock waits (SQLite's file lock)
    isolates_connections: ClassVar[bool] = True
    #: options every kind accepts under `backend:`, used or not: the server's `--data-dir` flag
    #: and PINLATER_DATA_DIR set `data_dir` without knowing the kind, so a deployment that sets
    #: them must not break when it switches to a kind without a data directory
    GENERIC_OPTIONS: ClassVar[tuple[str, ...]] = ("data_dir",)

    def __init__(self, options: Mapping[str, Any], limits: StorageLimits):
        self.options = options
        self.limits = limits

    @classmethod
    @abc.abstractmethod
    def parse_shards(cls, raw: Any, options: Mapping[str, Any], path: str) -> list[ShardSpec]:
        """Validate a shard list from YAML into specs; raise ConfigError listing every problem
        with its key path (e.g. `backend.shards[1].port`)."""

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any], path: str) -> dict[str, Any]:
        """Validate backend-wide options (everything under `backend:` except kind/shards) and
        return the ones the kind uses; raise ConfigError listing every problem. The default
        suits a kind that takes none: GENERIC_OPTIONS are accepted and dropped, any other key is
        an error."""
        problems = cls.unknown_options(raw, (), path)
        if problems:
            raise ConfigError(problems)
        return {}

    @classmethod
    def unknown_options(cls, raw: Mapping[str, Any], known: Sequence[str], path: str) -> list[str]:
        """A problem for every key of `raw` that is neither in `known` nor generic."""
        expected = (
            f"expected one of {', '.join(known)}" if known else "settings go in each shard's entry"
        )
        return [
            f"{path}.{key}: unknown key for the {cls.kind} backend ({expected})"
            for key in raw
            if key not in known and key not in cls.GENERIC_OPTIONS
        ]

    @abc.abstractmethod
    def open_shard(self, spec: ShardSpec) -> Shard:
        """Open one shard. Must neither hang nor fail because the storage is down right now:
        connect lazily (or tolerate a failed first connect) so a server can start with a dead
        shard, mark it unhealthy and pick it up when it returns."""

    def queue_name_limit(self, shard_names: Sequence[str]) -> int | None:
        """The longest queue name this storage can hold with these shards (e.g. MySQL's
        64-character identifiers minus the prefix), or None when only the config cap applies."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: a kind may share nothing between shards
        """Release anything shared between shards."""
