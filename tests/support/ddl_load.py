"""Black-box load around queue DDL (hostile load, issue 12 items 4 and 10), shared by the
integration tests and `scripts/bench_big_delete.py`.

- `churn`: one thread deletes and re-creates a queue in a loop while clients use that queue and
  a second one; every answer is recorded per queue (error code names, "ok").
- `big_delete`: fill a queue with many jobs (in big batches), then delete it while another
  queue on the same shard takes one-job enqueues; the other queue's latencies are recorded.

Everything goes over a real socket to a `ServerProcess`; nothing here looks inside the server.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pinlater.idl import ErrorCode, PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ADMIN_PASSWORD, ServerProcess, admin_config

CTX = RequestContext(source="ddl-load")
#: the server log lines that say a shard was taken out of service
UNHEALTHY_LOG_MARKERS = ("is unhealthy after", "marked unhealthy")


@contextlib.contextmanager
def one_shard(kind: str, tmp: Path) -> Iterator[dict]:
    """The `backend:` section of one throwaway shard of `kind` (so two queues share a shard)."""
    if kind == "sqlite":
        yield {"kind": "sqlite", "data_dir": str(tmp / "sqlite"), "shards": [{"name": "1"}]}
    elif kind == "redis":
        from tests.support.redis_env import running_server

        with running_server(tmp / "redis") as server:
            yield {"kind": "redis", "shards": [server.shard("r1")]}
    elif kind == "mysql":
        from tests.support.mysql_env import running_server

        with running_server(tmp / "mysql") as server:
            yield {"kind": "mysql", "shards": [server.shard("m1")]}
    else:
        raise ValueError(f"unknown backend {kind}")


def ddl_config(backend: dict) -> dict:
    """A server config on `backend` whose deleteQueue takes ADMIN_PASSWORD as often as asked
    (the default caps password checks at 4 per second), janitor off."""
    config = {**admin_config(), "backend": backend}
    config["admin"] = {**config["admin"], "password_checks_per_second": 10_000}
    return config


def outcome(call: Callable[[], object], messages: dict[str, str] | None = None) -> str:
    """'ok', or the ErrorCode name of the PinLaterException `call` raised (its message kept in
    `messages` under that name, the first one of each)."""
    try:
        call()
    except PinLaterException as exc:
        name = ErrorCode._VALUES_TO_NAMES.get(exc.errorCode, str(exc.errorCode))
        if messages is not None:
            messages.setdefault(name, exc.message)
        return name
    return "ok"


def enqueue_request(queue: str, count: int, body: bytes) -> t.PinLaterEnqueueRequest:
    return t.PinLaterEnqueueRequest(queueName=queue, jobs=[t.PinLaterJob(body=body)] * count)


def unhealthy_lines(server: ServerProcess) -> list[str]:
    return [
        line for line in server.log().splitlines() if any(m in line for m in UNHEALTHY_LOG_MARKERS)
    ]


# ---------------------------------------------------------------- churn


@dataclass
class ChurnResult:
    churned: Counter = field(default_factory=Counter)  # outcomes on the churned queue
    other: Counter = field(default_factory=Counter)  # outcomes on the steady queue
    ddl: Counter = field(default_factory=Counter)  # outcomes of deleteQueue / createQueue
    cycles: int = 0
    slowest_call: float = 0.0  # seconds, any worker call
    ddl_seconds: list[float] = field(default_factory=list)  # each deleteQueue / createQueue
    messages: dict[str, str] = field(default_factory=dict)  # one message per error kind


def _worker_calls(client, queue: str) -> list[Callable[[], object]]:
    """One round of what a worker does: enqueue, dequeue, ack, count."""

    def dequeue_and_ack() -> None:
        reply = client.dequeueJobs(CTX, t.PinLaterDequeueRequest(queueName=queue, limit=5))
        if reply.jobs:
            acks = [t.PinLaterJobAckInfo(jobDescriptor=d) for d in reply.jobs]
            client.ackDequeuedJobs(
                CTX, t.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks)
            )

    return [
        lambda: client.enqueueJobs(CTX, enqueue_request(queue, 5, b"churn")),
        dequeue_and_ack,
        lambda: client.getJobCount(CTX, t.PinLaterGetJobCountRequest(queueName=queue, jobState=0)),
    ]


def churn(
    server: ServerProcess,
    churned: str,
    other: str,
    *,
    seconds: float,
    clients_per_queue: int = 4,
    timeout: float = 30.0,
) -> ChurnResult:
    """Delete and re-create `churned` in a loop for `seconds` while `clients_per_queue` clients
    work on it and as many on `other` (both created first)."""
    result = ChurnResult()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    admin = server.client(timeout)
    for queue in (churned, other):
        admin.createQueue(CTX, queue)

    def record(counter: Counter, call: Callable[[], object]) -> None:
        started = time.monotonic()
        try:
            got = outcome(call, result.messages)
        except Exception as exc:  # noqa: BLE001 - a transport failure is an outcome too
            got = f"transport:{type(exc).__name__}"
        elapsed = time.monotonic() - started
        with lock:
            counter[got] += 1
            if counter is result.ddl:
                result.ddl_seconds.append(elapsed)
            else:
                result.slowest_call = max(result.slowest_call, elapsed)

    def work(queue: str, counter: Counter) -> None:
        client = server.client(timeout)
        try:
            while time.monotonic() < deadline:
                for call in _worker_calls(client, queue):
                    record(counter, call)
        finally:
            client.close()

    def ddl() -> None:
        while time.monotonic() < deadline:
            record(result.ddl, lambda: admin.deleteQueue(CTX, churned, ADMIN_PASSWORD))
            record(result.ddl, lambda: admin.createQueue(CTX, churned))
            result.cycles += 1

    threads = [threading.Thread(target=ddl)]
    threads += [
        threading.Thread(target=work, args=(q, c))
        for q, c in ((churned, result.churned), (other, result.other))
        for _ in range(clients_per_queue)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 4 * timeout)
    admin.close()
    return result


# ---------------------------------------------------------------- big delete


@dataclass
class DeleteResult:
    jobs: int
    fill_seconds: float
    delete_seconds: float
    #: latencies (seconds) of the other queue's enqueues that overlapped the delete
    during: list[float]
    #: the same before the delete started (the quiet baseline)
    quiet: list[float]
    other_errors: Counter

    def figures(self) -> dict[str, float]:
        def pct(values: list[float], q: float) -> float:
            if not values:
                return 0.0
            ordered = sorted(values)
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return {
            "jobs": self.jobs,
            "fill_s": round(self.fill_seconds, 2),
            "delete_s": round(self.delete_seconds, 3),
            "other_enqueues_during": len(self.during),
            "other_max_ms": round(1000 * max(self.during, default=0.0), 1),
            "other_p99_ms": round(1000 * pct(self.during, 0.99), 1),
            "other_p50_ms": round(1000 * statistics.median(self.during or [0.0]), 2),
            "quiet_p99_ms": round(1000 * pct(self.quiet, 0.99), 2),
            "quiet_max_ms": round(1000 * max(self.quiet, default=0.0), 1),
        }


def fill(server: ServerProcess, queue: str, jobs: int, *, batch: int = 10_000, body_size=100):
    """Enqueue `jobs` jobs into `queue` in batches of `batch` (2 client threads)."""
    body = b"b" * body_size
    batches = [min(batch, jobs - start) for start in range(0, jobs, batch)]
    lock = threading.Lock()

    def producer() -> None:
        client = server.client(120)
        try:
            while True:
                with lock:
                    if not batches:
                        return
                    size = batches.pop()
                client.enqueueJobs(CTX, enqueue_request(queue, size, body))
        finally:
            client.close()

    threads = [threading.Thread(target=producer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def big_delete(
    server: ServerProcess,
    big: str,
    other: str,
    jobs: int,
    *,
    quiet_seconds: float = 1.0,
    body_size: int = 100,
    timeout: float = 120.0,
) -> DeleteResult:
    """Fill `big` with `jobs` jobs, then deleteQueue it while a client enqueues one job at a
    time into `other` (on the same shard); the other queue's latencies before and during."""
    admin = server.client(timeout)
    for queue in (big, other):
        admin.createQueue(CTX, queue)
    started = time.monotonic()
    fill(server, big, jobs, body_size=body_size)
    fill_seconds = time.monotonic() - started
    phase = {"name": "quiet"}
    samples: dict[str, list[float]] = {"quiet": [], "during": [], "after": []}
    errors: Counter = Counter()
    stop = threading.Event()

    def steady() -> None:
        client = server.client(timeout)
        try:
            while not stop.is_set():
                name = phase["name"]
                began = time.monotonic()
                got = outcome(lambda: client.enqueueJobs(CTX, enqueue_request(other, 1, b"o")))
                elapsed = time.monotonic() - began
                # a call that began before the delete and ended during it counts as during
                samples[phase["name"] if name == "quiet" else name].append(elapsed)
                if got != "ok":
                    errors[got] += 1
        finally:
            client.close()

    thread = threading.Thread(target=steady)
    thread.start()
    time.sleep(quiet_seconds)
    phase["name"] = "during"
    began = time.monotonic()
    admin.deleteQueue(CTX, big, ADMIN_PASSWORD)
    delete_seconds = time.monotonic() - began
    phase["name"] = "after"
    time.sleep(0.2)
    stop.set()
    thread.join(timeout)
    admin.close()
    return DeleteResult(
        jobs=jobs,
        fill_seconds=fill_seconds,
        delete_seconds=delete_seconds,
        during=samples["during"],
        quiet=samples["quiet"],
        other_errors=errors,
    )
