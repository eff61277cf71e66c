"""What the admin API's and the dashboard's HTTP tests set up alike: a server config with the
admin password on, unique queues, and jobs put in a given state through the Thrift API (so
the pages and endpoints are checked against what a real client did)."""

from __future__ import annotations

import itertools
from typing import Any

from pinlater.common.passwords import hash_password
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T

CTX = RequestContext(source="admin-http-test")
_numbers = itertools.count()


def admin_config(password: str, **dashboard: Any) -> dict[str, Any]:
    """The admin API and the dashboard on, logged in with `password`; a generous failed-login
    budget (the tests send wrong passwords on purpose) and fast background samples (rates
    every 0.1 s, shard counts every 0.2 s); `dashboard` adds dashboard settings."""
    return {
        "admin": {
            "password_hash": hash_password(password, iterations=1000),
            "password_checks_per_second": 1000,
            "password_failure_burst": 1000,
        },
        "dashboard": {
            "rate_sample_seconds": 0.1,
            "shard_counts_interval_seconds": 0.2,
            **dashboard,
        },
    }


def new_queue(srv, prefix: str) -> str:
    """A queue created through Thrift, named `prefix` and a number no other test used."""
    name = f"{prefix}{next(_numbers)}"
    srv.client().createQueue(CTX, name)
    return name


def enqueue(srv, queue: str, *bodies: bytes, **fields) -> list[str]:
    jobs = [T.PinLaterJob(body=b, **fields) for b in bodies]
    reply = srv.client().enqueueJobs(CTX, T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))
    return reply.jobDescriptors


def dequeue(srv, queue: str, limit: int = 10):
    return srv.client().dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=limit))


def fail_jobs(srv, queue: str, n: int, status: str | None = None) -> list[str]:
    """n jobs that end FAILED (one attempt, failure-acked with `status`); call it before other
    enqueues to the queue (it acks the first n jobs it dequeues)."""
    enqueue(srv, queue, *[b"f%d" % i for i in range(n)], numAttemptsAllowed=1)
    taken = list(dequeue(srv, queue, n).jobs)
    failed = [T.PinLaterJobAckInfo(jobDescriptor=d, appendCustomStatus=status) for d in taken]
    srv.client().ackDequeuedJobs(CTX, T.PinLaterJobAckRequest(queueName=queue, jobsFailed=failed))
    return taken


def count(srv, queue: str, state: int, future: bool = False, priority=None) -> int:
    request = T.PinLaterGetJobCountRequest(
        queueName=queue, jobState=state, countFutureJobs=future, priority=priority
    )
    return srv.client().getJobCount(CTX, request)
