"""Plain models that cross the storage seam.

No Thrift types live below the handler: it converts wire structs to these frozen dataclasses and
back. Times are epoch milliseconds; bodies are bytes. The job state machine these models move
through is written down once, in docs/semantics.md (rows `T-...`); backends implement its rows
in SQL/Lua and the conformance suite pins each one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class JobState(enum.IntEnum):
    PENDING = 0
    IN_PROGRESS = 1
    SUCCEEDED = 2
    FAILED = 3


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated job to enqueue. `run_after_ms` None means "now" by the shard's clock.
    `unique_key` (validated ASCII) makes the enqueue idempotent within the queue's unique
    window (docs/semantics.md `U-...`); only `Shard.enqueue_keyed` looks at it."""

    body: bytes
    priority: int = 1
    run_after_ms: int | None = None
    attempts_allowed: int = 2
    custom_status: str = ""
    unique_key: str | None = None


class Enqueued(NamedTuple):
    """One job of a keyed enqueue: where it is. `stored` False means nothing was stored for
    it because its unique key was held: (priority, local_id) then name the job that holds it
    (enqueued earlier, or earlier in the same batch)."""

    priority: int
    local_id: int
    stored: bool


@dataclass(frozen=True, slots=True)
class JobRef:
    """Where a job lives: shard name, priority and its local id there."""

    shard: str
    priority: int
    local_id: int


@dataclass(frozen=True, slots=True)
class DequeuedJob:
    """A job handed out by a dequeue; `claim` is None for dry runs."""

    priority: int
    local_id: int
    body: bytes
    attempts_allowed: int
    attempts_remaining: int
    claim: str | None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """Everything stored about a job, as lookup and scan report it. `body` only when asked;
    `body_size` (the body's length in bytes) whenever the body was asked for, also when a
    lookup's byte budget left the body itself out."""

    priority: int
    local_id: int
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int
    updated_at_ms: int
    claim: str | None
    body: bytes | None = None
    body_size: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimMatch:
    """Which claim an ack or checkpoint must hold to apply (fencing, semantics.md "Claims").

    With `claim` set, the job's current claim must equal it exactly. Without it (an original
    client), the source part of the job's claim must equal `source` exactly.
    """

    source: str
    claim: str | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledgement of a dequeued job on a shard."""

    priority: int
    local_id: int
    match: ClaimMatch
    append_status: str = ""
    retry_delay_ms: int = 0


_NEW = object.__new__
_SET_ACK = tuple(getattr(Ack, name).__set__ for name in Ack.__slots__)


_SET_DEQUEUED = tuple(getattr(DequeuedJob, name).__set__ for name in DequeuedJob.__slots__)
_SET_NEW_JOB = tuple(getattr(NewJob, name).__set__ for name in NewJob.__slots__)


def new_job(
    body: bytes,
    priority: int,
    run_after_ms: int | None,
    attempts_allowed: int,
    custom_status: str,
    unique_key: str | None,
) -> NewJob:
    """`NewJob(...)` of already valid values, built by setting its slots directly (as
    new_ack): the handler builds one per enqueued job, and the frozen dataclass `__init__`
    took ~0.8 us of the server's ~11 us per job on a Redis enqueue."""
    job = _NEW(NewJob)
    set_body, set_priority, set_run_after, set_attempts, set_status, set_key = _SET_NEW_JOB
    set_body(job, body)
    set_priority(job, priority)
    set_run_after(job, run_after_ms)
    set_attempts(job, attempts_allowed)
    set_status(job, custom_status)
    set_key(job, unique_key)
    return job


def new_dequeued_job(
    priority: int,
    local_id: int,
    body: bytes,
    attempts_allowed: int,
    attempts_remaining: int,
    claim: str | None,
) -> DequeuedJob:
    """`DequeuedJob(...)` built by setting its slots directly (as new_ack): backends build one
    per handed-out job."""
    job = _NEW(DequeuedJob)
    set_priority, set_local_id, set_body, set_allowed, set_remaining, set_claim = _SET_DEQUEUED
    set_priority(job, priority)
    set_local_id(job, local_id)
    set_body(job, body)
    set_allowed(job, attempts_allowed)
    set_remaining(job, attempts_remaining)
    set_claim(job, claim)
    return job


def new_ack(
    priority: int, local_id: int, match: ClaimMatch, append_status: str, retry_delay_ms: int
) -> Ack:
    """`Ack(...)` of already valid values, built by setting its slots directly: the frozen
    dataclass `__init__` goes through `object.__setattr__` per field, ~40% slower, and an ack
    request builds one per job."""
    ack = _NEW(Ack)
    set_priority, set_local_id, set_match, set_status, set_delay = _SET_ACK
    set_priority(ack, priority)
    set_local_id(ack, local_id)
    set_match(ack, match)
    set_status(ack, append_status)
    set_delay(ack, retry_delay_ms)
    return ack


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint of an in-progress job on a shard."""

    priority: int
    local_id: int
    match: ClaimMatch
    new_body: bytes | None = None
    move_to_pending: bool = False
    run_after_ms: int | None = None
    attempts_allowed: int | None = None
    prepend_status: str | None = None


@dataclass(frozen=True, slots=True)
class ScanBound:
    """Resume point for a scan on one (shard, priority): return rows strictly after
    (run_after_ms, local_id) in (run_after DESC, local_id DESC) order."""

    run_after_ms: int
    local_id: int


@dataclass(frozen=True, slots=True)
class ReclaimCounts:
    """What one reclaim step did: expired claims sent back to PENDING (one attempt used) and
    moved to FAILED, and expired reservations of a prefetching broker returned to PENDING
    with nothing used (`released`: not reclaims, the jobs were never handed out)."""

    retried: int = 0
    failed: int = 0
    released: int = 0


#: the states whose jobs the janitor ages by updated_at (claims expire, finished jobs are purged)
AGED_STATES = (JobState.IN_PROGRESS, JobState.SUCCEEDED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue on one shard as `Shard.queue_stats` read it, in one snapshot at `now_ms`.

    `counts[(priority, state, future)]`: jobs of the priority in the state with run_after >
    now (future) or <= now, exact up to the call's cap, for every configured priority and all
    four states. `oldest_update[(priority, state)]`: the smallest updated_at of the
    jobs in an AGED_STATES state (absent when there is none). `first_key_expiry`: the
    earliest expires_at of the queue's unique-key records (None when there is none).
    `first_reserve_expiry[priority]`: the earliest deadline of the priority's reserved jobs
    (`Shard.prefetch`; absent when there is none), so the janitor knows when to return them."""

    now_ms: int
    counts: dict[tuple[int, JobState, bool], int]
    oldest_update: dict[tuple[int, JobState], int]
    first_key_expiry: int | None = None
    first_reserve_expiry: dict[int, int] = field(default_factory=dict)
