"""FIFO queues end to end (issue 16, docs/semantics.md `F-...`): 1,000 jobs through 8
concurrent workers on two real server processes sharing the storage, on every backend,
complete in exact enqueue order, and a job that fails once in the middle runs again before
any later job (the queue's head waits out its retry delay)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from pinlater.common.passwords import hash_password
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.admin_http import AdminHttp
from tests.support.operating import OperatingServer
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section

QUEUE = "ordered"
JOBS = 1000
WORKERS = 8
FAIL_AT = 500  # the job that fails once
RETRY_DELAY_MS = 300
DEADLINE_SECONDS = 60.0
PASSWORD = "fifo-secret"


class Ledger:
    """What the workers did, in the order they did it (one lock: the runs are serialized by
    the queue's cap of 1 anyway, this only makes the record exact)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[int] = []
        self.succeeded = 0
        self.failed_once = False
        self.done = threading.Event()
        self.errors: list[BaseException] = []

    def run(self, body: bytes) -> bool:
        """Record a run of job `body`; True when it succeeds (False: the one planned failure)."""
        number = int(body)
        with self.lock:
            self.runs.append(number)
            if number == FAIL_AT and not self.failed_once:
                self.failed_once = True
                return False
            self.succeeded += 1
            return True

    def all_ran(self) -> bool:
        with self.lock:
            return self.succeeded >= JOBS


def worker(server: ServerProcess, ledger: Ledger, name: str) -> None:
    """Dequeue (long-poll, 1 s as the SDK's worker), run, and ack with the next dequeue
    (piggy-backed, as the SDK's worker does) until every job succeeded."""
    client = server.client()
    ctx = RequestContext(source=f"fifo-{name}")
    deadline = time.monotonic() + DEADLINE_SECONDS
    acks = None
    try:
        while not ledger.done.is_set() and time.monotonic() < deadline:
            request = T.PinLaterDequeueRequest(
                queueName=QUEUE, limit=5, waitMillis=1000, jobAckRequest=acks
            )
            acks = None
            for descriptor, body in (client.dequeueJobs(ctx, request).jobs or {}).items():
                acks = _ack(descriptor, ledger.run(body))
            if acks is not None and ledger.all_ran():  # the last job: ack it, stop everyone
                client.ackDequeuedJobs(ctx, acks)
                ledger.done.set()
    except BaseException as exc:  # noqa: BLE001 - reported by the test thread
        ledger.errors.append(exc)
    finally:
        client.close()


def _ack(descriptor: str, ok: bool) -> T.PinLaterJobAckRequest:
    info = T.PinLaterJobAckInfo(jobDescriptor=descriptor)
    if not ok:
        info.retryDelayMillis = RETRY_DELAY_MS
    return T.PinLaterJobAckRequest(
        queueName=QUEUE, jobsSucceeded=[info] if ok else [], jobsFailed=[] if ok else [info]
    )


def servers(kind: str, tmp_path, stack: contextlib.ExitStack) -> list[ServerProcess]:
    queues = tmp_path / "queues.yaml"
    queues.write_text(f"queues:\n  {QUEUE}: {{fifo: true}}\n")
    backend = stack.enter_context(backend_section(kind, tmp_path))
    config = {"backend": backend, "janitor": {"enabled": False}, "queue_config": str(queues)}
    return [stack.enter_context(ServerProcess(config, tmp_path, name=f"server{i}")) for i in (1, 2)]


@pytest.mark.parametrize("kind", KINDS)
def test_fifo_jobs_complete_in_enqueue_order_through_8_workers_and_a_retry(tmp_path, kind):
    with contextlib.ExitStack() as stack:
        one, two = servers(kind, tmp_path, stack)
        client = one.client()
        stack.callback(client.close)
        ctx = RequestContext(source="fifo-test")
        client.createQueue(ctx, QUEUE)
        for start in range(0, JOBS, 100):  # ten requests: enqueue order is request order
            jobs = [
                T.PinLaterJob(body=b"%04d" % i, numAttemptsAllowed=2)
                for i in range(start, start + 100)
            ]
            client.enqueueJobs(ctx, T.PinLaterEnqueueRequest(queueName=QUEUE, jobs=jobs))
        ledger = Ledger()
        started = time.monotonic()
        threads = [
            threading.Thread(target=worker, args=((one, two)[i % 2], ledger, str(i)), daemon=True)
            for i in range(WORKERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DEADLINE_SECONDS + 15)
        seconds = time.monotonic() - started
        assert not ledger.errors, ledger.errors
        expected = [*range(FAIL_AT + 1), FAIL_AT, *range(FAIL_AT + 1, JOBS)]
        assert ledger.runs == expected, f"first difference at run {_first_diff(ledger.runs)}"
        count = T.PinLaterGetJobCountRequest(queueName=QUEUE, jobState=T.PinLaterJobState.SUCCEEDED)
        assert client.getJobCount(ctx, count) == JOBS
        print(f"{kind}: {JOBS} FIFO jobs through {WORKERS} workers in {seconds:.2f} s")


def _first_diff(runs: list[int]) -> int:
    expected = [*range(FAIL_AT + 1), FAIL_AT, *range(FAIL_AT + 1, JOBS)]
    return next((i for i, (a, b) in enumerate(zip(runs, expected, strict=False)) if a != b), -1)


def test_the_admin_api_shows_a_fifo_queue_on_one_shard_with_its_cap(tmp_path):
    """`fifo: true` with `partitions: 1` from the queue-config file: one shard of four, and
    the queue's admin view names its in-flight cap; a plain queue shows none."""
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        f"queues:\n  {QUEUE}: {{fifo: true, fifo_in_flight: 3, partitions: 1}}\n  plain: {{}}\n"
    )
    config = {
        "queue_config": str(queues),
        "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
    }
    with OperatingServer(tmp_path, config, shards=("1", "2", "3", "4")) as srv:
        client = srv.client()
        ctx = RequestContext(source="fifo-admin")
        for name in (QUEUE, "plain"):
            client.createQueue(ctx, name)
        api = AdminHttp(srv.metrics_url, basic=PASSWORD)
        status, body, _ = api.get(f"/api/v1/queues/{QUEUE}")
        assert status == 200, body
        assert body["fifo"] == {"in_flight_cap": 3}
        assert body["placement"]["partitions"] == 1 and len(body["placement"]["shards"]) == 1
        status, body, _ = api.get("/api/v1/queues/plain")
        assert (status, body["fifo"]) == (200, None)
