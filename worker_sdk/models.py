"""Plain values the client takes and returns, and their conversion to and from wire structs.

SDK users never see thriftpy2 structs: jobs go in as `Job` (or bare bytes), come back from
dequeue as `DequeuedJob`, and acks/checkpoints are described by `AckInfo` / `CheckpointRequest`.
Claims (the extension fields with id 100) travel inside these values, so a worker that passes a
`DequeuedJob` back to `ack` is fenced against a stale claim without thinking about it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pinlater.idl import pinlater_thrift as wire


class JobState(enum.IntEnum):
    """Mirror of the wire enum PinLaterJobState."""

    PENDING = 0
    IN_PROGRESS = 1
    SUCCEEDED = 2
    FAILED = 3

    @classmethod
    def parse(cls, text: str | int | JobState) -> JobState:
        """Accept a member, its number, or its name in any case (`failed`, `in_progress`)."""
        if isinstance(text, int):
            return cls(text)
        key = str(text).strip().upper().replace("-", "_")
        if key.isdigit():
            return cls(int(key))
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"unknown job state {text!r} (expected one of {names})") from None


@dataclass(frozen=True, slots=True)
class Job:
    """A job to enqueue. None fields take the server's defaults (priority 1, attempts 2, now).
    `unique_key` (printable ASCII): within the queue's unique window the server stores one job
    per key and answers a repeated enqueue with that job's descriptor, so enqueues of keyed
    jobs are safe to retry (the client does)."""

    body: bytes
    priority: int | None = None
    run_after_ms: int | None = None
    attempts: int | None = None
    custom_status: str | None = None
    unique_key: str | None = None

    def to_wire(self) -> Any:
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise TypeError(f"job body must be bytes, not {type(self.body).__name__}")
        job = wire.PinLaterJob(body=bytes(self.body))
        if self.priority is not None:
            job.priority = self.priority
        if self.run_after_ms is not None:
            job.runAfterTimestampMillis = self.run_after_ms
        if self.attempts is not None:
            job.numAttemptsAllowed = self.attempts
        if self.custom_status is not None:
            job.customStatus = self.custom_status
        if self.unique_key is not None:
            job.uniqueKey = self.unique_key
        return job


@dataclass(frozen=True, slots=True, init=False)
class DequeuedJob:
    """A job handed out by dequeue. `claim` is None for dry runs and for servers without claims."""

    descriptor: str
    body: bytes
    attempts_allowed: int | None
    attempts_remaining: int | None
    claim: str | None

    def __init__(
        self,
        descriptor: str,
        body: bytes,
        attempts_allowed: int | None,
        attempts_remaining: int | None,
        claim: str | None,
    ):
        """Set the slots directly: the dataclass's frozen `__init__` goes through
        `object.__setattr__` per field, 1.6x slower (57 us vs 35 us per 100 jobs,
        scripts/bench_converters.py), once per dequeued job."""
        _SET_DESCRIPTOR(self, descriptor)
        _SET_BODY(self, body)
        _SET_ALLOWED(self, attempts_allowed)
        _SET_REMAINING(self, attempts_remaining)
        _SET_CLAIM(self, claim)


_SET_DESCRIPTOR, _SET_BODY, _SET_ALLOWED, _SET_REMAINING, _SET_CLAIM = (
    getattr(DequeuedJob, name).__set__ for name in DequeuedJob.__slots__
)


@dataclass(frozen=True, slots=True, init=False)
class AckInfo:
    """One job's ack. With `claim` set the server applies it only while that claim holds."""

    descriptor: str
    claim: str | None
    append_status: str
    retry_delay_ms: int

    def __init__(
        self,
        descriptor: str,
        claim: str | None = None,
        append_status: str = "",
        retry_delay_ms: int = 0,
    ):
        """Slots set directly, as DequeuedJob's: the Worker makes one per finished job."""
        _SET_ACK_DESCRIPTOR(self, descriptor)
        _SET_ACK_CLAIM(self, claim)
        _SET_ACK_STATUS(self, append_status)
        _SET_ACK_DELAY(self, retry_delay_ms)

    def to_wire(self) -> Any:
        return _ack_struct(self.descriptor, self.claim, self.append_status, self.retry_delay_ms)


_SET_ACK_DESCRIPTOR, _SET_ACK_CLAIM, _SET_ACK_STATUS, _SET_ACK_DELAY = (
    getattr(AckInfo, name).__set__ for name in AckInfo.__slots__
)


@dataclass(frozen=True, slots=True)
class Acks:
    """Acks to piggy-back on a dequeue (applied by the server before it dequeues)."""

    succeeded: tuple = ()
    failed: tuple = ()


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    """One job's checkpoint; None fields are left unchanged by the server."""

    descriptor: str
    claim: str | None = None
    new_body: str | bytes | None = None
    move_to_pending: bool = False
    run_after_ms: int | None = None
    attempts_allowed: int | None = None
    prepend_status: str | None = None

    def to_wire(self) -> Any:
        req = wire.PinLaterCheckpointJobRequest(
            jobDescriptor=self.descriptor, moveToPending=self.move_to_pending
        )
        for attr, value in (
            ("newBody", self.new_body),
            ("runAfterTimestampMillis", self.run_after_ms),
            ("numOfAttemptsAllowed", self.attempts_allowed),
            ("prependCustomStatus", self.prepend_status),
            ("claimDescriptor", self.claim),
        ):
            if value is not None:
                setattr(req, attr, value)
        return req


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What lookup and scan report about one job."""

    descriptor: str
    state: JobState
    attempts_allowed: int
    attempts_remaining: int
    custom_status: str
    created_at_ms: int
    run_after_ms: int | None = None
    updated_at_ms: int | None = None
    claim: str | None = None
    body: bytes | None = None

    @classmethod
    def from_wire(cls, info: Any) -> JobInfo:
        return cls(
            descriptor=info.jobDescriptor,
            state=JobState(info.jobState),
            attempts_allowed=info.attemptsAllowed,
            attempts_remaining=info.attemptsRemaining,
            custom_status=info.customStatus,
            created_at_ms=info.createdAtTimestampMillis,
            run_after_ms=info.runAfterTimestampMillis,
            updated_at_ms=info.updatedAtTimestampMillis,
            claim=info.claimDescriptor,
            body=info.body,
        )


def job_to_wire(job: Job | bytes) -> Any:
    """Bare bytes are a job with every default."""
    if isinstance(job, Job):
        return job.to_wire()
    return Job(job).to_wire()


def ack_to_wire(item: AckInfo | DequeuedJob | str) -> Any:
    """An ack from an AckInfo, a DequeuedJob (its claim is sent back) or a bare descriptor,
    each straight to the one struct builder (a DequeuedJob through an AckInfo would take
    100 us instead of 41 us per 100, scripts/bench_converters.py)."""
    if isinstance(item, AckInfo):
        return item.to_wire()
    if isinstance(item, DequeuedJob):  # the common case
        return _ack_struct(item.descriptor, item.claim)
    if isinstance(item, str):
        return _ack_struct(item)
    raise TypeError(f"cannot ack a {type(item).__name__}; pass AckInfo, DequeuedJob or str")


def _ack_struct(
    descriptor: str, claim: str | None = None, append_status: str = "", retry_delay_ms: int = 0
) -> Any:
    """The wire ack of one job (the claim extension field only when there is a claim)."""
    info = wire.PinLaterJobAckInfo(
        jobDescriptor=descriptor,
        appendCustomStatus=append_status,
        retryDelayMillis=retry_delay_ms,
    )
    if claim is not None:
        info.claimDescriptor = claim
    return info


def ack_request(queue: str, succeeded: Iterable = (), failed: Iterable = ()) -> Any:
    return wire.PinLaterJobAckRequest(
        queueName=queue,
        jobsSucceeded=[ack_to_wire(a) for a in succeeded],
        jobsFailed=[ack_to_wire(a) for a in failed],
    )


def dequeued_jobs(response: Any) -> list[DequeuedJob]:
    """Flatten a dequeue response; both maps are unset when nothing was dequeued."""
    bodies = response.jobs or {}
    metadata = response.jobMetadata or {}
    out = []
    for descriptor, body in bodies.items():
        meta = metadata.get(descriptor)
        if meta is None:
            out.append(DequeuedJob(descriptor, body, None, None, None))
        else:
            out.append(
                DequeuedJob(
                    descriptor,
                    body,
                    meta.attemptsAllowed,
                    meta.attemptsRemaining,
                    getattr(meta, "claimDescriptor", None),
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule a server runs (getSchedules) and its next run times (epoch ms)."""

    queue: str
    name: str
    cron: str
    timezone: str
    missed: str
    catch_up_seconds: int
    priority: int
    attempts: int
    next_runs_ms: tuple[int, ...]

    @classmethod
    def from_wire(cls, info: Any) -> ScheduleInfo:
        return cls(
            queue=info.queueName,
            name=info.name,
            cron=info.cron,
            timezone=info.timezone,
            missed=info.missedPolicy,
            catch_up_seconds=info.catchUpSeconds,
            priority=info.priority,
            attempts=info.numAttemptsAllowed,
            next_runs_ms=tuple(info.nextRunTimestampsMillis or ()),
        )
