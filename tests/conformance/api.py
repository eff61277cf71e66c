"""A terse test client for the conformance suite: builds wire structs from keyword arguments and
calls the handler through the in-process wire (tests/conformance/wire.py)."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from pinlater.config import JanitorConfig
from pinlater.idl import pinlater_thrift as t
from pinlater.ops.janitor import Janitor

WORKER = "worker:host1"
ADMIN_PASSWORD = "s3cret"


def queue_store(app):
    """The store holding the tests' queues: the app's, or with clusters the default cluster's
    (requests still go through the router; the tests' shard probes and faults see the shards
    their queues live on)."""
    store = app.store
    clusters = getattr(store, "clusters", None)
    return store if clusters is None else clusters[store.default]


class Api:
    def __init__(self, client, app):
        self.client = client
        self.app = app
        #: the store of the tests' queues (with clusters, the default cluster's; see conftest)
        self.store = queue_store(app)
        self.created: list[str] = []

    # -- helpers
    def ctx(self, source: str = WORKER) -> t.RequestContext:
        return t.RequestContext(source=source, requestId=uuid.uuid4().hex[:8])

    def now(self) -> int:
        """The storage clock (first shard), in epoch ms."""
        return self.store.shard(self.store.shard_names()[0]).now_ms()

    def advance(self, ms: int) -> None:
        """Time passes: with the broker on, the hand-outs it writes behind (within
        milliseconds of real time) are written first, at the time they were made, and when
        `ms` outlasts `broker.idle_seconds`, the broker idles out first (`Broker.idle_out`), as
        it would in that time without a dequeue: its buffered jobs are released and no refill
        reserves more at the old time (reservations whose hold the shifted clock would expire
        at once, to be served after the janitor gave them back)."""
        broker = self.store.broker
        if broker is not None:
            broker.flush()
            if ms >= broker.idle_seconds * 1000:
                broker.idle_out()
        self.store.shift_clock(ms)

    @contextlib.contextmanager
    def from_storage(self, queue: str):
        """Inside, the queue's dequeues go to storage: with the broker on, its prefetch is off
        and its buffered jobs are back to PENDING (a test of what storage answers)."""
        broker = self.store.broker
        if broker is None:
            yield
            return
        self.app.settings.change(queue, {"prefetch": 0}, "conformance")
        broker.tick()
        try:
            yield
        finally:
            self.app.settings.change(queue, {"prefetch": None}, "conformance")

    def janitor(self, **overrides):
        settings = dict(
            claim_timeout_seconds=60,
            succeeded_ttl_seconds=3600,
            failed_ttl_seconds=7200,
            batch_size=1000,
        )
        settings.update(overrides)
        return Janitor(self.app.store, JanitorConfig(**settings)).run_once()

    @staticmethod
    @contextlib.contextmanager
    def raises(code: int, match: str | None = None):
        with pytest.raises(t.PinLaterException) as info:
            yield info
        assert info.value.errorCode == code, (info.value.errorCode, info.value.message)
        if match is not None:
            assert match in info.value.message, info.value.message

    # -- queues
    def new_queue(self, prefix: str = "q") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self.create(name)
        return name

    def create(self, name) -> None:
        self.client.createQueue(self.ctx(), name)
        if isinstance(name, str):
            self.created.append(name)

    def delete_queue(self, name, password=ADMIN_PASSWORD) -> None:
        self.client.deleteQueue(self.ctx(), name, password)

    def queue_names(self) -> set[str]:
        return self.client.getQueueNames(self.ctx())

    # -- jobs
    def enqueue(self, queue, *jobs, source: str = WORKER, **defaults) -> list[str]:
        built = [
            t.PinLaterJob(**({"body": j} if isinstance(j, bytes) else j), **defaults)
            if not isinstance(j, t.PinLaterJob)
            else j
            for j in jobs
        ]
        response = self.client.enqueueJobs(
            self.ctx(source), t.PinLaterEnqueueRequest(queueName=queue, jobs=built)
        )
        return response.jobDescriptors

    def dequeue(self, queue, limit: int = 10, source: str = WORKER, ack=None, **kwargs):
        request = t.PinLaterDequeueRequest(
            queueName=queue, limit=limit, jobAckRequest=ack, **kwargs
        )
        return self.client.dequeueJobs(self.ctx(source), request)

    def dequeue_ids(self, queue, limit: int = 10, **kwargs) -> list[str]:
        """Descriptors a dequeue handed out (order not meaningful)."""
        return sorted((self.dequeue(queue, limit, **kwargs).jobs or {}).keys())

    def ack_request(self, queue, succeeded=(), failed=()) -> t.PinLaterJobAckRequest:
        def infos(items):
            out = []
            for item in items:
                if isinstance(item, str):
                    out.append(t.PinLaterJobAckInfo(jobDescriptor=item))
                else:
                    descriptor, fields = item
                    out.append(t.PinLaterJobAckInfo(jobDescriptor=descriptor, **fields))
            return out

        return t.PinLaterJobAckRequest(
            queueName=queue, jobsSucceeded=infos(succeeded), jobsFailed=infos(failed)
        )

    def ack(self, queue, succeeded=(), failed=(), source: str = WORKER) -> None:
        self.client.ackDequeuedJobs(self.ctx(source), self.ack_request(queue, succeeded, failed))

    def checkpoint(self, queue, *requests, source: str = WORKER) -> None:
        built = [
            t.PinLaterCheckpointJobRequest(jobDescriptor=r)
            if isinstance(r, str)
            else t.PinLaterCheckpointJobRequest(jobDescriptor=r[0], **r[1])
            for r in requests
        ]
        self.client.checkpointJobs(
            self.ctx(source), t.PinLaterCheckpointJobsRequest(queueName=queue, requests=built)
        )

    def lookup(self, descriptors, include_body: bool = False) -> dict:
        return self.client.lookupJobs(
            self.ctx(),
            t.PinLaterLookupJobRequest(jobDescriptors=list(descriptors), includeBody=include_body),
        )

    def job(self, descriptor: str, include_body: bool = True):
        return self.lookup([descriptor], include_body).get(descriptor)

    def state(self, descriptor: str) -> int | None:
        info = self.job(descriptor, include_body=False)
        return None if info is None else info.jobState

    def count(self, queue, state, **kwargs) -> int:
        return self.client.getJobCount(
            self.ctx(), t.PinLaterGetJobCountRequest(queueName=queue, jobState=state, **kwargs)
        )

    def scan(self, queue, state, **kwargs) -> t.PinLaterScanJobsResponse:
        return self.client.scanJobs(
            self.ctx(), t.PinLaterScanJobsRequest(queueName=queue, jobState=state, **kwargs)
        )

    def retry_failed(self, queue, **kwargs) -> int:
        return self.client.retryFailedJobs(
            self.ctx(), t.PinLaterRetryFailedJobsRequest(queueName=queue, **kwargs)
        )

    def delete_jobs(self, queue, state, **kwargs) -> int:
        return self.client.deleteJobs(
            self.ctx(), t.PinLaterDeleteJobsRequest(queueName=queue, jobState=state, **kwargs)
        )
