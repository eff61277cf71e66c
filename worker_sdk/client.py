"""PinLaterClient: a typed, thread-safe Python client for the PinLater Thrift service.

    client = PinLaterClient(["127.0.0.1:9010"])            # or a ServerSet file path
    ids = client.enqueue("emails", [b"hello", Job(b"later", run_after_ms=...)])
    for job in client.dequeue("emails", 10):
        ...
        client.ack("emails", succeeded=[job])                # sends the job's claim back

Behaviour worth knowing (the reasons are in the module docstrings of pool.py and errors.py):
* Several servers are used round-robin; a server that refuses connections is skipped for a
  short while (failover). Each server has a small pool of reusable connections.
* `connect_timeout` bounds connecting, `timeout` bounds each socket read/write of a call.
* A connection is discarded after any transport error or timeout, never reused.
* Retries (`retries` extra attempts, exponential backoff with jitter): a failure to connect is
  always retried (nothing was sent); a failure after sending is retried only for idempotent
  calls, i.e. everything except enqueue, and enqueues whose jobs all carry a `unique_key` (the
  server stores one job per key and answers a repeat with the same descriptor); other
  enqueues retry only with `retry_enqueue=True` (a retried enqueue can store its jobs twice).
  Server errors are raised as their typed `pinlater.errors` class and not retried, except
  NO_HEALTHY_SHARDS and SHARD_CONNECTION_FAILED for idempotent calls.
* Every call sends RequestContext(source, requestId): one fresh requestId per method call
  (this client's random 16-hex prefix plus a call counter: unique without a random draw per
  call), kept across its retries so server logs can tie the attempts together (the server
  warns about a failing request id once). Each retry is logged here at DEBUG with its attempt
  number; what to tell the user about a call that finally failed is the caller's business (the
  worker logs it once, with how many calls in a row failed).
* `tls`: None (plain TCP), True (verify against the system CAs), a CA file path, or an
  ssl.SSLContext (e.g. pinlater.common.tls.client_context(ca, cert, key) for mutual TLS). The
  server's certificate and host name are always verified unless the context says otherwise. A TLS
  failure is a connect failure (PinLaterTransportError, maybe_applied=False).
"""

from __future__ import annotations

import itertools
import logging
import random
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence

from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TDecodeException
from thriftpy2.transport import TTransportException

from pinlater.common.serverset import Endpoint, format_endpoint, server_source
from pinlater.common.tls import as_client_context
from pinlater.idl import CONTINUATION_END, CONTINUATION_START, PinLaterException
from pinlater.idl import pinlater_thrift as wire
from worker_sdk.errors import (
    RETRYABLE_SERVER_CODES,
    PinLaterApplicationError,
    PinLaterTransportError,
    error_for_code,
)
from worker_sdk.models import (
    AckInfo,
    Acks,
    CheckpointRequest,
    DequeuedJob,
    Job,
    JobInfo,
    JobState,
    ScheduleInfo,
    ack_request,
    dequeued_jobs,
    job_to_wire,
)
from worker_sdk.pool import EndpointPool

_TRANSPORT_ERRORS = (TTransportException, TProtocolException, TDecodeException, OSError, EOFError)
_MAX_SOURCE_LENGTH = (
    200  # pinlater.storage.claims.MAX_SOURCE_LENGTH; the server rejects longer ones
)
_DOWN_SECONDS = 1.0  # how long a server that refused a connection is skipped

log = logging.getLogger(__name__)


class PinLaterClient:
    """Typed access to every PinLater RPC. Thread-safe; share one instance per process."""

    def __init__(
        self,
        servers: str | Sequence = ("127.0.0.1:9010",),
        *,
        source: str | None = None,
        service: str = "pinlaterclient",
        connect_timeout: float = 2.0,
        timeout: float = 10.0,
        pool_size: int = 4,
        retries: int = 2,
        backoff: float = 0.05,
        max_backoff: float = 1.0,
        retry_enqueue: bool = False,
        max_idle: float = 60.0,
        tls: bool | str | ssl.SSLContext | None = None,
    ):
        """`servers`: `host:port` strings, (host, port) pairs, a comma-separated string, or the
        path of a ServerSet file. `source` defaults to `<service>:<hostname>`; it identifies
        this client in claims, so workers that ack without claims must keep it stable."""
        self.source = source if source is not None else f"{service}:{socket.gethostname()}"
        if not self.source or len(self.source) > _MAX_SOURCE_LENGTH:
            raise ValueError(f"source must be 1..{_MAX_SOURCE_LENGTH} characters")
        if retries < 0 or pool_size < 1:
            raise ValueError("retries must be >= 0 and pool_size >= 1")
        self._servers = server_source(servers)
        self._ssl_context = as_client_context(tls)
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self.pool_size, self.retries, self.retry_enqueue = pool_size, retries, retry_enqueue
        self._backoff, self._max_backoff, self._max_idle = backoff, max_backoff, max_idle
        self._lock = threading.Lock()
        self._pools: dict[Endpoint, EndpointPool] = {}
        self._down_until: dict[Endpoint, float] = {}
        self._known: list[Endpoint] | None = None
        self._next = 0
        self._request_prefix = uuid.uuid4().hex[:16]
        self._request_ids = itertools.count(1)

    # ---- jobs ----

    def enqueue(
        self, queue: str, jobs: Iterable[Job | bytes], *, retry: bool | None = None
    ) -> list[str]:
        """Store jobs; returns their descriptors in order. All or nothing on the server side
        (per shard when unique keys of several shards are involved: docs/semantics.md).

        `retry` allows retrying after a transport failure that happened after sending. The
        default: yes when every job has a `unique_key` (a repeat stores nothing new and answers
        the same descriptors), else the client's `retry_enqueue` (at the risk of storing the
        jobs twice)."""
        wire_jobs = [job_to_wire(j) for j in jobs]
        request = wire.PinLaterEnqueueRequest(queueName=queue, jobs=wire_jobs)
        if retry is None:
            keyed = bool(wire_jobs) and all(j.uniqueKey is not None for j in wire_jobs)
            idempotent = keyed or self.retry_enqueue
        else:
            idempotent = retry
        return list(self._call("enqueueJobs", request, idempotent=idempotent).jobDescriptors)

    def dequeue(
        self,
        queue: str,
        limit: int,
        acks: Acks | None = None,
        *,
        dry_run: bool = False,
        coverage: float | None = None,
        wait_ms: int = 0,
    ) -> list[DequeuedJob]:
        """Claim up to `limit` jobs (or only look at them with `dry_run`). `acks` are applied
        by the server before it dequeues. `wait_ms` > 0 is a long poll: when no job is
        eligible the server holds the call until one is or the wait (capped by the server's
        `max_dequeue_wait_ms`) ends; the call's socket timeout is then `timeout` + the wait."""
        if wait_ms < 0:
            raise ValueError("wait_ms must be >= 0")
        request = wire.PinLaterDequeueRequest(queueName=queue, limit=limit, dryRun=dry_run)
        if acks is not None and (acks.succeeded or acks.failed):
            request.jobAckRequest = ack_request(queue, acks.succeeded, acks.failed)
        if coverage is not None:
            request.coverage = coverage
        timeout = None
        if wait_ms:
            request.waitMillis = wait_ms
            timeout = self.timeout + wait_ms / 1000
        return dequeued_jobs(self._call("dequeueJobs", request, timeout=timeout))

    def ack(
        self,
        queue: str,
        succeeded: Iterable[AckInfo | DequeuedJob | str] = (),
        failed: Iterable[AckInfo | DequeuedJob | str] = (),
    ) -> None:
        """Report finished jobs. Acks for jobs no longer held under that claim are no-ops."""
        request = ack_request(queue, succeeded, failed)
        if request.jobsSucceeded or request.jobsFailed:
            self._call("ackDequeuedJobs", request)

    def checkpoint(self, queue: str, requests: Iterable[CheckpointRequest]) -> None:
        """Update running jobs (extends their claim) or move them back to pending."""
        request = wire.PinLaterCheckpointJobsRequest(
            queueName=queue, requests=[r.to_wire() for r in requests]
        )
        self._call("checkpointJobs", request)

    def lookup(
        self, descriptors: Iterable[str], *, include_body: bool = False
    ) -> dict[str, JobInfo]:
        """JobInfo by descriptor; unknown descriptors are absent from the result."""
        request = wire.PinLaterLookupJobRequest(
            jobDescriptors=list(descriptors), includeBody=include_body
        )
        found = self._call("lookupJobs", request) or {}
        return {key: JobInfo.from_wire(info) for key, info in found.items()}

    def count(
        self,
        queue: str,
        state: JobState | int = JobState.PENDING,
        *,
        priority: int | None = None,
        future: bool = False,
        body_regex: str | None = None,
    ) -> int:
        """Jobs in `state` (exact up to the server's cap); `future` counts run_after > now."""
        request = wire.PinLaterGetJobCountRequest(
            queueName=queue, jobState=int(state), countFutureJobs=future
        )
        if priority is not None:
            request.priority = priority
        if body_regex is not None:
            request.bodyRegexToMatch = body_regex
        return self._call("getJobCount", request)

    def scan_page(
        self,
        queue: str,
        state: JobState | int = JobState.PENDING,
        *,
        priority: int | None = None,
        future: bool = False,
        limit: int = 100,
        body_regex: str | None = None,
        continuation: str = CONTINUATION_START,
    ) -> tuple[list[JobInfo], str]:
        """One page of jobs, newest run_after first, and the continuation for the next page
        (CONTINUATION_END when there is none)."""
        request = wire.PinLaterScanJobsRequest(
            queueName=queue,
            jobState=int(state),
            scanFutureJobs=future,
            limit=limit,
            continuation=continuation,
        )
        if priority is not None:
            request.priority = priority
        if body_regex is not None:
            request.bodyRegexToMatch = body_regex
        response = self._call("scanJobs", request)
        jobs = [JobInfo.from_wire(info) for info in response.scannedJobs or []]
        return jobs, response.continuation or CONTINUATION_END

    def scan(
        self,
        queue: str,
        state: JobState | int = JobState.PENDING,
        *,
        max_jobs: int | None = None,
        **page_options,
    ) -> Iterator[JobInfo]:
        """Every matching job across all pages (at most `max_jobs`); options as in scan_page."""
        continuation, seen = CONTINUATION_START, 0
        while max_jobs is None or seen < max_jobs:
            jobs, following = self.scan_page(
                queue, state, continuation=continuation, **page_options
            )
            for job in jobs[: None if max_jobs is None else max_jobs - seen]:
                seen += 1
                yield job
            if following in (CONTINUATION_END, continuation) or not jobs:
                return
            continuation = following

    def retry_failed(
        self,
        queue: str,
        *,
        priority: int = 1,
        attempts: int = 1,
        run_after_ms: int | None = None,
        limit: int = 1000,
    ) -> int:
        """Move up to `limit` FAILED jobs of one priority back to PENDING; returns how many."""
        request = wire.PinLaterRetryFailedJobsRequest(
            queueName=queue, priority=priority, attemptsToAllow=attempts, limit=limit
        )
        if run_after_ms is not None:
            request.runAfterTimestampMillis = run_after_ms
        return self._call("retryFailedJobs", request)

    def delete_jobs(
        self,
        queue: str,
        state: JobState | int,
        *,
        priority: int = 1,
        body_regex: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Delete up to `limit` jobs in `state` of one priority; returns how many."""
        request = wire.PinLaterDeleteJobsRequest(
            queueName=queue, jobState=int(state), priority=priority, limit=limit
        )
        if body_regex is not None:
            request.bodyRegexToMatch = body_regex
        return self._call("deleteJobs", request)

    def schedules(self, queue: str | None = None, *, count: int = 5) -> list[ScheduleInfo]:
        """The periodic jobs the server runs (of `queue`, if given), each with its next
        `count` run times, as the server computes them."""
        request = wire.PinLaterGetSchedulesRequest(queueName=queue, count=count)
        return [ScheduleInfo.from_wire(info) for info in self._call("getSchedules", request)]

    # ---- queues ----

    def create_queue(self, name: str) -> None:
        """Create a queue; creating an existing queue is not an error."""
        self._call("createQueue", name)

    def delete_queue(self, name: str, password: str) -> None:
        """Delete a queue and its jobs; raises PasswordInvalid on a wrong admin password."""
        self._call("deleteQueue", name, password)

    def queue_names(self) -> list[str]:
        """All queue names, sorted."""
        return sorted(self._call("getQueueNames") or ())

    # ---- lifecycle ----

    def close(self) -> None:
        """Close idle connections; calls still running finish and close theirs."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def __enter__(self) -> PinLaterClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ---- the one call path ----

    def _call(self, api: str, *args, idempotent: bool = True, timeout: float | None = None):
        """Run one RPC with failover and retries; see the module docstring for the rules.
        `timeout` replaces the client's socket timeout for this call."""
        context = wire.RequestContext(
            source=self.source, requestId=f"{self._request_prefix}{next(self._request_ids):x}"
        )
        tried: set[Endpoint] = set()
        error: Exception | None = None
        maybe_applied = False
        for attempt in range(self.retries + 1):
            endpoint = self._pick(tried)
            if attempt and endpoint in tried:
                time.sleep(self._delay(attempt))
            tried.add(endpoint)
            done, result, error = self._attempt(endpoint, api, context, args, idempotent, timeout)
            if done:
                return result
            maybe_applied = maybe_applied or getattr(error, "maybe_applied", True)
            if attempt < self.retries:
                log.debug(
                    "%s (request %s) attempt %d of %d failed: %s; retrying",
                    api,
                    context.requestId,
                    attempt + 1,
                    self.retries + 1,
                    error,
                )
        if isinstance(error, PinLaterTransportError) and maybe_applied:
            # an earlier try may have reached the server even if the last one could not
            error.maybe_applied = True
        assert error is not None  # retries >= 0: at least one attempt ran and failed
        raise error

    def _attempt(self, endpoint: Endpoint, api: str, context, args, idempotent: bool, timeout=None):
        """One try: (True, result, None), or (False, None, error) when another try may help.
        Errors that must not be retried are raised."""
        where = format_endpoint(endpoint)
        pool = self._pool(endpoint)
        try:
            conn = pool.acquire()
        except _TRANSPORT_ERRORS as err:
            self._mark_down(endpoint)
            return (
                False,
                None,
                PinLaterTransportError(
                    f"cannot connect to {where}: {_describe(err)}",
                    endpoint=where,
                    maybe_applied=False,
                ),
            )
        try:
            if timeout is not None:
                conn.set_timeout(timeout)
            try:
                result = getattr(conn.client, api)(context, *args)
            finally:
                if timeout is not None:
                    conn.set_timeout(self.timeout)
        except PinLaterException as exc:
            pool.release(conn)
            error = error_for_code(exc.errorCode, exc.message)
            if idempotent and error.code in RETRYABLE_SERVER_CODES:
                return False, None, error
            raise error from None
        except TApplicationException as exc:
            pool.release(conn)  # a complete reply: the connection is still in step
            raise PinLaterApplicationError(
                f"{api} on {where}: {exc.message or exc}", type=exc.type
            ) from None
        except BaseException as exc:
            pool.discard(conn)
            if not isinstance(exc, _TRANSPORT_ERRORS):
                raise
            error = PinLaterTransportError(
                f"{api} on {where} failed: {_describe(exc)}", endpoint=where, maybe_applied=True
            )
            if not idempotent:
                raise error from exc
            return False, None, error
        pool.release(conn)
        return True, result, None

    def _delay(self, attempt: int) -> float:
        """Exponential backoff with full jitter."""
        return random.uniform(0, min(self._max_backoff, self._backoff * 2 ** (attempt - 1)))

    def _pick(self, tried: set[Endpoint]) -> Endpoint:
        """Round-robin, preferring servers not yet tried by this call and not marked down."""
        endpoints = self._servers.endpoints()
        now = time.monotonic()
        with self._lock:
            if endpoints is not self._known:
                self._forget_removed(endpoints)
            start = self._next
            self._next += 1
            down = self._down_until
        count = len(endpoints)
        for i in range(count):  # the usual case: the next server in turn is fine
            endpoint = endpoints[(start + i) % count]
            if endpoint not in tried and down.get(endpoint, 0) <= now:
                return endpoint
        ordered = [endpoints[(start + i) % count] for i in range(count)]
        for acceptable in (lambda e: e not in tried, lambda e: down.get(e, 0) <= now):
            for endpoint in ordered:
                if acceptable(endpoint):
                    return endpoint
        return ordered[0]

    def _forget_removed(self, endpoints: list[Endpoint]) -> None:
        """Close pools of servers no longer listed (called with the lock held)."""
        self._known = endpoints
        for endpoint in set(self._pools) - set(endpoints):
            self._pools.pop(endpoint).close()

    def _pool(self, endpoint: Endpoint) -> EndpointPool:
        with self._lock:
            pool = self._pools.get(endpoint)
            if pool is None:
                pool = self._pools[endpoint] = EndpointPool(
                    endpoint,
                    self.pool_size,
                    self.connect_timeout,
                    self.timeout,
                    self._max_idle,
                    self._ssl_context,
                )
            return pool

    def _mark_down(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._down_until[endpoint] = time.monotonic() + _DOWN_SECONDS


def _describe(err: BaseException) -> str:
    """A short cause: thriftpy2 hides the socket error of a failed connect in __context__."""
    cause = err.__context__ if isinstance(err.__context__, OSError) else err
    if isinstance(cause, TimeoutError):
        return "timed out"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return getattr(cause, "message", None) or str(cause) or type(cause).__name__
