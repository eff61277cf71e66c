"""The Thrift handler: one method per RPC — validate, convert to models, call the store, convert
back. The only place Thrift structs meet storage models; every method runs inside the one error
boundary (`pinlater.handler.boundary.rpc`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from pinlater.config import Config
from pinlater.errors import (
    DequeueRateLimited,
    EnqueueRejected,
    InvalidRequest,
    PasswordInvalid,
    PinLaterError,
)
from pinlater.handler import validation as check
from pinlater.handler.body_filter import compile_body_filter
from pinlater.handler.boundary import rpc, wire_error
from pinlater.handler.context import current_peer, peer_alive_check
from pinlater.handler.context import deferred_allowed as context_allows_deferred
from pinlater.handler.longpoll import ParkedDequeues, Waiter
from pinlater.handler.observer import RequestObserver
from pinlater.handler.password_guard import PasswordGuard
from pinlater.handler.reply_room import ReplyRoom
from pinlater.handler.schedule_view import ScheduleView
from pinlater.handler.tarpit import Tarpit
from pinlater.idl import pinlater_thrift as wire
from pinlater.storage.descriptors import JobDescriptor, split_local_id, split_prefix
from pinlater.storage.models import (
    Ack,
    Checkpoint,
    ClaimMatch,
    JobRecord,
    NewJob,
    new_ack,
    new_job,
)
from pinlater.storage.sharded import CONTINUATION_START, ShardedBackend
from pinlater.storage.unique_keys import DEFAULT_UNIQUE_WINDOW_SECONDS
from pinlater.storage.watch import DueWatcher

log = logging.getLogger(__name__)
#: the most next run times getSchedules lists per schedule
MAX_NEXT_RUNS = 100


class PinLaterHandler:
    """Implements the PinLater service on a ShardedBackend."""

    def __init__(
        self,
        store: ShardedBackend,
        config: Config,
        observer: RequestObserver | None = None,
        *,
        unique_window_for: Callable[[str], float] | None = None,
        schedules: Callable[[str | None, int, float], list[ScheduleView]] | None = None,
    ):
        """`unique_window_for(queue)`: seconds a unique key is held in that queue (the queue
        settings; default DEFAULT_UNIQUE_WINDOW_SECONDS). `schedules(queue, count, now)`: the
        schedules this server runs with their next run times (none when not given)."""
        self.store = store
        self._unique_window_for = unique_window_for
        self._schedules = schedules
        self.config = config
        self.limits = config.limits
        self.levels = config.priorities.levels
        self.observer = observer or RequestObserver()
        backend_cap = store.backend.queue_name_limit(store.shard_names())
        self.max_queue_name = min(
            self.limits.max_queue_name_length, backend_cap or self.limits.max_queue_name_length
        )
        self.passwords = _password_guard(config, self.observer)
        self.tarpit = Tarpit(config.admin.password_refusal_delay_seconds, wire_error)
        self.room = ReplyRoom(config.server.max_frame_bytes, self.levels)
        self.max_unique_key = self.limits.max_unique_key_length
        self.max_wait_ms = config.server.max_dequeue_wait_ms
        #: server.role: "enqueue" refuses dequeueJobs, "dequeue" refuses enqueueJobs
        self.role = config.server.role
        #: parked long-poll dequeues (None when max_dequeue_wait_ms is 0: no request waits)
        self.longpoll: ParkedDequeues | None = None
        signals = getattr(store, "signals", None)  # a test's stand-in store may have none
        if self.max_wait_ms and signals is not None and self.role != "enqueue":
            watcher = DueWatcher(store, max_interval=config.server.long_poll_check_max_ms / 1000)
            self.longpoll = ParkedDequeues(signals, watcher)

    def close(self) -> None:
        """Answer parked dequeues (empty) and stop their threads; close the password guard."""
        if self.longpoll is not None:
            self.longpoll.close()
        if self.passwords is not None:
            self.passwords.close()
        self.tarpit.close()

    # ------------------------------------------------------------ queues

    @rpc
    def createQueue(self, context, name):
        self._source(context)
        self.store.create_queue(self._queue(name, "name"))

    @rpc
    def deleteQueue(self, context, name, password):
        self._source(context)
        queue = self._queue(name, "name")
        given = check.text(password, "password", default="")
        try:
            self._check_password(given)
        except PasswordInvalid as refused:
            # answered late without a thread, so a guessing client cannot repeat at once
            delayed = self.tarpit.refuse(refused) if context_allows_deferred() else None
            if delayed is None:
                raise
            return delayed
        self.store.delete_queue(queue)
        return None

    def _check_password(self, given: str | None) -> None:
        if self.passwords is None:
            raise PasswordInvalid(
                "Invalid admin password: deleteQueue is disabled until "
                "admin.password_hash is configured"
            )
        self.passwords.check(given, current_peer())

    @rpc
    def getQueueNames(self, context):
        self._source(context)
        return self.store.queue_names()

    # ------------------------------------------------------------ jobs

    @rpc
    def enqueueJobs(self, context, request):
        self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        if self.role == "dequeue":
            raise EnqueueRejected(
                "this server runs with server.role dequeue and answers no enqueueJobs: "
                "send enqueues to the enqueue (or all) servers"
            )
        jobs = self._list(request.jobs, "jobs", EnqueueRejected)
        if not jobs:
            raise EnqueueRejected("jobs: must hold at least one job")
        self.room.check_enqueue(queue, self.store.shard_names(), len(jobs))
        new_jobs = [
            self._plain_new_job(job) or self._new_job(job, f"jobs[{i}]")
            for i, job in enumerate(jobs)
        ]
        if any(job.unique_key is not None for job in new_jobs):
            outcome = self.store.enqueue_keyed(queue, new_jobs, self._unique_window_ms(queue))
            descriptors = outcome.descriptors
            self.observer.on_jobs("deduplicated", queue, outcome.deduplicated)
            self.observer.on_jobs("enqueued", queue, len(descriptors) - outcome.deduplicated)
        else:
            descriptors = self.store.enqueue(queue, new_jobs)
            self.observer.on_jobs("enqueued", queue, len(descriptors))
        return wire.PinLaterEnqueueResponse(jobDescriptors=[str(d) for d in descriptors])

    def _unique_window_ms(self, queue: str) -> int:
        seconds = (
            DEFAULT_UNIQUE_WINDOW_SECONDS
            if self._unique_window_for is None
            else self._unique_window_for(queue)
        )
        return int(seconds * 1000)

    @rpc
    def dequeueJobs(self, context, request):
        """A dequeue; with `waitMillis`, one that finds nothing is parked (`ParkedDequeues`)
        and its reply is a `Deferred` when the dispatcher can send it later, else waited for
        here."""
        source = self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        if self.role == "enqueue":
            self._refuse_dequeue(request, source)
        limit = check.limit(request.limit, self.limits.max_dequeue_limit)
        dry_run = check.flag(request.dryRun, "dryRun")
        coverage = self._coverage(request.coverage)
        wait_ms = check.wait_millis(request.waitMillis, self.max_wait_ms)
        acks = None
        if request.jobAckRequest is not None:
            acks = self._ack_request(request.jobAckRequest, source, "jobAckRequest")
        parking = self.longpoll if wait_ms and not dry_run else None
        generation = 0 if parking is None else parking.signals.generation(queue)
        response, handed_out = self._dequeue_once(queue, limit, source, dry_run, coverage, acks)
        if parking is None or handed_out:
            return response
        waiter = Waiter(
            queue,
            limit,
            lambda: self._dequeue_again(queue, limit, source, coverage),
            parking.clock() + wait_ms / 1000,
            wire.PinLaterDequeueResponse,
            alive=peer_alive_check(),
        )
        deferred = parking.park(waiter, generation)
        return deferred if context_allows_deferred() else deferred.wait()

    def _refuse_dequeue(self, request, source: str) -> None:
        """An enqueue-role server answers no dequeue: DEQUEUE_RATE_LIMITED naming the role,
        after applying the piggy-backed acks, as any refused dequeue does
        (`E-dequeue-rate-limited`)."""
        if request.jobAckRequest is not None:
            self._apply_acks(self._ack_request(request.jobAckRequest, source, "jobAckRequest"))
        raise DequeueRateLimited(
            "this server runs with server.role enqueue and answers no dequeueJobs: "
            "send dequeues to the dequeue (or all) servers"
        )

    def _dequeue_once(
        self, queue: str, limit: int, source: str, dry_run: bool, coverage: float, acks
    ) -> tuple[object, int]:
        """One dequeue (acks first): the response and how many jobs it handed out."""
        try:
            allowed = self.observer.before_dequeue(queue, limit)
        except BaseException:
            if acks is not None:  # applied even when the dequeue is refused
                self._apply_acks(acks)
            raise
        handed_out = 0
        try:
            riding = None  # acks of this queue go with the dequeue (one storage call)
            counted = None
            if acks is not None and acks[0] == queue:
                riding, counted = acks[1:], acks
            elif acks is not None:
                self._apply_acks(acks)
            jobs = self.store.dequeue(
                queue,
                limit if allowed is None else min(limit, allowed),
                source,
                dry_run=dry_run,
                coverage=coverage,
                acks=riding,
                budget=self.room.dequeue(queue, self.store.shard_names(), source, dry_run),
            )
            if counted is not None:
                self._count_acks(counted)
            handed_out = len(jobs)
        finally:
            self.observer.after_dequeue(queue, handed_out)
        if not dry_run:
            self.observer.on_jobs("dequeued", queue, handed_out)
        response = wire.PinLaterDequeueResponse()
        if jobs:
            _fill_dequeue_response(response, jobs)
        return response, handed_out

    def _dequeue_again(
        self, queue: str, limit: int, source: str, coverage: float
    ) -> tuple[object, int]:
        """A parked dequeue's next look, outside the RPC's own error boundary: errors become
        the wire exception its client gets."""
        try:
            return self._dequeue_once(queue, limit, source, False, coverage, None)
        except PinLaterError as exc:
            raise wire_error(exc) from None
        except Exception:
            log.exception("unexpected error in a parked dequeue of %s", queue)
            raise wire_error(
                PinLaterError("internal error in dequeueJobs (parked); see the server log")
            ) from None

    @rpc
    def ackDequeuedJobs(self, context, request):
        source = self._source(context)
        self._apply_acks(self._ack_request(request, source, "request"))

    def _apply_acks(self, acks: tuple) -> None:
        queue, succeeded, failed = acks
        self.store.ack(queue, succeeded, failed)
        self._count_acks(acks)

    def _count_acks(self, acks: tuple) -> None:
        queue, succeeded, failed = acks
        self.observer.on_jobs("acked_succeeded", queue, len(succeeded))
        self.observer.on_jobs("acked_failed", queue, len(failed))

    @rpc
    def checkpointJobs(self, context, request):
        source = self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        items = self._list(request.requests, "requests")
        checkpoints = [
            self._checkpoint(queue, item, source, f"requests[{i}]") for i, item in enumerate(items)
        ]
        self.store.checkpoint(queue, checkpoints)

    @rpc
    def lookupJobs(self, context, request):
        self._source(context)
        check.request_present(request)
        texts = self._list(request.jobDescriptors, "jobDescriptors")
        wanted: dict[JobDescriptor, str] = {}
        for i, text in enumerate(texts):
            wanted[self._descriptor(text, f"jobDescriptors[{i}]")] = text
        include_body = check.flag(request.includeBody, "includeBody")
        found = self.store.lookup(list(wanted), include_body, self.room.lookup_bodies())
        entries = [(wanted[d], record) for d, record in found.items()]
        self.room.check_lookup(entries)
        return {text: _job_info(text, record) for text, record in entries}

    @rpc
    def getJobCount(self, context, request):
        self._source(context)
        check.request_present(request)
        return self.store.count(
            self._queue(request.queueName),
            check.job_state(request.jobState),
            check.optional_priority(request.priority, self.levels),
            check.flag(request.countFutureJobs, "countFutureJobs"),
            min(self.limits.count_cap, check.I32_MAX),
            self._body_filter(request.bodyRegexToMatch),
        )

    @rpc
    def scanJobs(self, context, request):
        self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        continuation = check.text(request.continuation, "continuation")
        if continuation is None:
            continuation = CONTINUATION_START
        limit = check.limit(
            100 if request.limit is None else request.limit, self.limits.max_scan_limit
        )
        rows, next_token = self.store.scan(
            queue,
            check.job_state(request.jobState),
            check.optional_priority(request.priority, self.levels),
            check.flag(request.scanFutureJobs, "scanFutureJobs"),
            continuation,
            limit,
            self._body_filter(request.bodyRegexToMatch),
        )
        rows, next_token = self.room.scan_page(rows, next_token)
        return wire.PinLaterScanJobsResponse(
            scannedJobs=[_job_info(str(d), record) for d, record in rows], continuation=next_token
        )

    @rpc
    def retryFailedJobs(self, context, request):
        self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        retried = self.store.retry_failed(
            queue,
            check.priority(1 if request.priority is None else request.priority, self.levels),
            check.attempts(
                1 if request.attemptsToAllow is None else request.attemptsToAllow,
                self.limits.max_attempts,
                "attemptsToAllow",
            ),
            check.timestamp_ms(request.runAfterTimestampMillis, "runAfterTimestampMillis"),
            check.limit(
                1000 if request.limit is None else request.limit, self.limits.max_jobs_per_request
            ),
        )
        self.observer.on_jobs("retried", queue, retried)
        return retried

    @rpc
    def deleteJobs(self, context, request):
        self._source(context)
        check.request_present(request)
        queue = self._queue(request.queueName)
        deleted = self.store.delete_jobs(
            queue,
            check.job_state(request.jobState),
            check.priority(1 if request.priority is None else request.priority, self.levels),
            check.limit(
                1000 if request.limit is None else request.limit, self.limits.max_jobs_per_request
            ),
            self._body_filter(request.bodyRegexToMatch),
        )
        self.observer.on_jobs("deleted", queue, deleted)
        return deleted

    @rpc
    def getSchedules(self, context, request):
        self._source(context)
        check.request_present(request)
        queue = None if request.queueName is None else self._queue(request.queueName)
        count = check.limit(5 if request.count is None else request.count, MAX_NEXT_RUNS, "count")
        views = [] if self._schedules is None else self._schedules(queue, count, time.time())
        return [
            wire.PinLaterScheduleInfo(
                queueName=v.queue,
                name=v.name,
                cron=v.cron,
                timezone=v.timezone,
                missedPolicy=v.missed,
                catchUpSeconds=int(v.catch_up_seconds),
                priority=v.priority,
                numAttemptsAllowed=v.attempts,
                nextRunTimestampsMillis=list(v.next_runs_ms),
            )
            for v in views
        ]

    # ------------------------------------------------------------ conversions

    def _source(self, context) -> str:
        return check.source(context, self.limits.max_source_length)

    def _queue(self, name, field: str = "queueName") -> str:
        return check.queue_name(name, self.max_queue_name, field)

    def _list(self, value, field: str, error: type[PinLaterError] = InvalidRequest) -> list:
        if value is None:
            raise error(f"{field}: is required")
        if not isinstance(value, list):
            raise error(f"{field}: must be a list")
        if len(value) > self.limits.max_jobs_per_request:
            raise error(
                f"{field}: {len(value)} entries is over the maximum of "
                f"{self.limits.max_jobs_per_request} per request"
            )
        return value

    def _descriptor(self, text, field: str, queue: str | None = None) -> JobDescriptor:
        descriptor = JobDescriptor.parse(text, field)
        self._queue(descriptor.queue, field)
        check.priority(descriptor.priority, self.levels, field)
        if queue is not None and descriptor.queue != queue:
            raise InvalidRequest(
                f"{field}: job {text!r} belongs to queue {descriptor.queue!r}, not {queue!r}"
            )
        return descriptor

    def _plain_new_job(self, job) -> NewJob | None:
        """The common job (bytes body within the cap, absent or plain in-range fields)
        converted without building field names for error texts; None sends it through
        `_new_job`, which gives the same NewJob or names the field that is wrong. Kept for
        its measured gain: 100 jobs in 112 us instead of 179 us (scripts/bench_converters.py),
        about 5% of the server's CPU per enqueue of 100 jobs (scripts/bench_server.py)."""
        if job is None:
            return None
        body, priority, attempts = job.body, job.priority, job.numAttemptsAllowed
        status, key = job.customStatus, job.uniqueKey
        if not (
            type(body) is bytes
            and len(body) <= self.limits.body_max_bytes
            and (status is None or type(status) is str)
            and (key is None or (type(key) is str and check.is_plain_key(key, self.max_unique_key)))
            and self._plain_numbers(priority, attempts, job.runAfterTimestampMillis)
        ):
            return None
        return new_job(
            body,
            priority or 1,  # None or 1..levels
            job.runAfterTimestampMillis,
            attempts or 2,  # None or 1..max_attempts
            status[: self.limits.custom_status_max_chars] if status else "",
            key,
        )

    def _plain_numbers(self, priority, attempts, run_after) -> bool:
        """Each absent, or a plain int in its range (`check.priority`, `check.attempts`,
        `check.timestamp_ms` accept these and more, with error texts)."""
        return (
            (priority is None or (type(priority) is int and 1 <= priority <= self.levels))
            and (
                attempts is None
                or (type(attempts) is int and 1 <= attempts <= self.limits.max_attempts)
            )
            and (
                run_after is None
                or (type(run_after) is int and 0 <= run_after <= check.MAX_TIMESTAMP_MS)
            )
        )

    def _new_job(self, job, field: str) -> NewJob:
        if job is None:
            raise EnqueueRejected(f"{field}: is empty")
        body = job.body
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not isinstance(body, bytes):
            raise EnqueueRejected(f"{field}.body: is required")
        if len(body) > self.limits.body_max_bytes:
            raise EnqueueRejected(
                f"{field}.body: {len(body)} bytes is over the maximum of "
                f"{self.limits.body_max_bytes}"
            )
        priority = check.priority(
            1 if job.priority is None else job.priority, self.levels, f"{field}.priority"
        )
        attempts = check.attempts(
            2 if job.numAttemptsAllowed is None else job.numAttemptsAllowed,
            self.limits.max_attempts,
            f"{field}.numAttemptsAllowed",
            EnqueueRejected,
        )
        run_after = check.timestamp_ms(
            job.runAfterTimestampMillis, f"{field}.runAfterTimestampMillis", EnqueueRejected
        )
        status = check.text(job.customStatus, f"{field}.customStatus", EnqueueRejected) or ""
        return NewJob(
            body=body,
            priority=priority,
            run_after_ms=run_after,
            attempts_allowed=attempts,
            custom_status=status[: self.limits.custom_status_max_chars],
            unique_key=check.unique_key(job.uniqueKey, self.max_unique_key, f"{field}.uniqueKey"),
        )

    def _ack_request(self, request, source: str, field: str):
        check.request_present(request, field)
        queue = self._queue(request.queueName, f"{field}.queueName")
        succeeded = self._acks(queue, request.jobsSucceeded, source, f"{field}.jobsSucceeded")
        failed = self._acks(queue, request.jobsFailed, source, f"{field}.jobsFailed")
        return queue, succeeded, failed

    def _acks(self, queue: str, infos, source: str, field: str) -> list[tuple[str, Ack]]:
        if infos is None:
            return []
        acks = []
        plain = _PlainAcks(queue, source, self.levels)
        for i, info in enumerate(self._list(infos, field)):
            ack = plain.convert(info)
            if ack is None:  # something unusual: the checked path names the field or raises
                ack = self._checked_ack(queue, info, source, f"{field}[{i}]")
            acks.append(ack)
        return acks

    def _checked_ack(self, queue: str, info, source: str, where: str) -> tuple[str, Ack]:
        if info is None:
            raise InvalidRequest(f"{where}: is empty")
        d = self._descriptor(info.jobDescriptor, f"{where}.jobDescriptor", queue)
        return d.shard, Ack(
            priority=d.priority,
            local_id=d.local_id,
            match=self._claim_match(info.claimDescriptor, source, where),
            append_status=check.text(info.appendCustomStatus, f"{where}.appendCustomStatus") or "",
            retry_delay_ms=check.delay_ms(info.retryDelayMillis, f"{where}.retryDelayMillis"),
        )

    def _checkpoint(self, queue: str, item, source: str, where: str) -> tuple[str, Checkpoint]:
        if item is None:
            raise InvalidRequest(f"{where}: is empty")
        d = self._descriptor(item.jobDescriptor, f"{where}.jobDescriptor", queue)
        new_body = item.newBody
        if isinstance(new_body, str):
            new_body = new_body.encode("utf-8")
        if new_body is not None and len(new_body) > self.limits.body_max_bytes:
            raise InvalidRequest(
                f"{where}.newBody: {len(new_body)} bytes is over the maximum "
                f"of {self.limits.body_max_bytes}"
            )
        attempts = item.numOfAttemptsAllowed
        return d.shard, Checkpoint(
            priority=d.priority,
            local_id=d.local_id,
            match=self._claim_match(item.claimDescriptor, source, where),
            new_body=new_body,
            move_to_pending=check.flag(item.moveToPending, f"{where}.moveToPending"),
            run_after_ms=check.timestamp_ms(
                item.runAfterTimestampMillis, f"{where}.runAfterTimestampMillis"
            ),
            attempts_allowed=None
            if attempts is None
            else check.attempts(
                attempts, self.limits.max_attempts, f"{where}.numOfAttemptsAllowed"
            ),
            prepend_status=check.text(item.prependCustomStatus, f"{where}.prependCustomStatus"),
        )

    @staticmethod
    def _claim_match(claim, source: str, where: str) -> ClaimMatch:
        return ClaimMatch(
            source=source, claim=check.text(claim, f"{where}.claimDescriptor") or None
        )

    @staticmethod
    def _coverage(value) -> float:
        if value is None:
            return 1.0
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or math.isnan(value)
            or not 0 < value <= 1
        ):
            raise InvalidRequest(f"coverage: must be in (0, 1], got {value!r}")
        return float(value)

    def _body_filter(self, pattern):
        return compile_body_filter(pattern, self.limits)


class _PlainAcks:
    """Converts the common ack of one request list (well-formed descriptor of `queue` at a
    configured priority, plain field types) without building error texts or re-validating
    `queue`, which the request already named; `convert` returns None to send an ack through
    `_checked_ack` instead, which gives the same Ack or names the field that is wrong. Per
    request state: one dequeue's jobs share one descriptor prefix (checked once) and one claim
    (one ClaimMatch). Kept for its measured gain: 100 acks in 97 us instead of 430 us
    (scripts/bench_converters.py), about 13% of the server's CPU per 100 jobs dequeued and
    acked (scripts/bench_server.py)."""

    __slots__ = ("matches", "prefixes", "queue", "source")

    def __init__(self, queue: str, source: str, levels: int):
        self.queue, self.source = queue, source
        #: descriptor prefix -> (shard, priority), or None when not this queue's at a level
        self.prefixes = _Memo(lambda prefix: _shard_priority(prefix, queue, levels))
        #: claim (None when absent or empty) -> its ClaimMatch
        self.matches = _Memo(lambda claim: ClaimMatch(source=source, claim=claim))

    def convert(self, info) -> tuple[str, Ack] | None:
        if info is None:
            return None
        split = split_local_id(info.jobDescriptor)
        if split is None:
            return None
        prefix, local_id = split
        where = self.prefixes[prefix]
        claim, status, delay = info.claimDescriptor, info.appendCustomStatus, info.retryDelayMillis
        if where is None or not (
            (claim is None or type(claim) is str)
            and (status is None or type(status) is str)
            and (delay is None or type(delay) is int)
        ):
            return None
        return where[0], new_ack(
            where[1],
            local_id,
            self.matches[claim or None],
            status or "",
            check.clamp_delay_ms(delay) if delay else 0,
        )


class _Memo(dict):
    """A dict that computes a missing value once with `compute(key)` (a hit costs one C-level
    lookup, no Python call)."""

    __slots__ = ("_compute",)

    def __init__(self, compute):
        super().__init__()
        self._compute = compute

    def __missing__(self, key):
        value = self[key] = self._compute(key)
        return value


def _shard_priority(prefix: str, queue: str, levels: int) -> tuple[str, int] | None:
    """(shard, priority) of a descriptor prefix naming `queue` at a configured priority, else
    None."""
    parts = split_prefix(prefix)
    if parts is None or parts[0] != queue or not 1 <= parts[2] <= levels:
        return None
    return parts[1], parts[2]


def _fill_dequeue_response(response, jobs) -> None:
    """Bodies and metadata keyed by descriptor text (formatted once per job: this runs for
    every job handed out). Jobs with equal metadata share one struct (one dequeue's jobs
    mostly do: same claim, same attempts); the reply is only encoded, never changed."""
    bodies, metadata = {}, {}
    shared: dict[tuple, object] = {}
    meta = wire.PinLaterDequeueMetadata
    for d, job in jobs:
        text = str(d)
        bodies[text] = job.body
        key = (job.attempts_allowed, job.attempts_remaining, job.claim)
        info = shared.get(key)
        if info is None:
            info = shared[key] = meta(
                attemptsAllowed=key[0], attemptsRemaining=key[1], claimDescriptor=key[2]
            )
        metadata[text] = info
    response.jobs, response.jobMetadata = bodies, metadata


def _job_info(descriptor: str, record: JobRecord):
    info = wire.PinLaterJobInfo(
        jobDescriptor=descriptor,
        jobState=int(record.state),
        attemptsAllowed=record.attempts_allowed,
        attemptsRemaining=record.attempts_remaining,
        customStatus=record.custom_status,
        createdAtTimestampMillis=record.created_at_ms,
        runAfterTimestampMillis=record.run_after_ms,
        updatedAtTimestampMillis=record.updated_at_ms,
    )
    if record.claim is not None:
        info.claimDescriptor = record.claim
    if record.body is not None:
        info.body = record.body
    return info


def _password_guard(config: Config, observer: RequestObserver) -> PasswordGuard | None:
    admin = config.admin
    if not admin.password_hash:
        return None
    return PasswordGuard(
        admin.password_hash,
        failures_per_minute=admin.password_failures_per_minute,
        failure_burst=admin.password_failure_burst,
        checks_per_second=admin.password_checks_per_second,
        on_refused=observer.on_password_refused,
    )
