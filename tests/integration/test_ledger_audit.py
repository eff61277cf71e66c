"""The ledger seen by an operator, on a real server (SQLite, two shards): the audit duty's
`pinlater_ledger_imbalance_jobs{queue}` and `pinlater audit`, balanced, then after a job was
deleted behind the server's back, then after the queue was deleted and created again."""

from __future__ import annotations

import io
import json
import time

import pytest

from pinlater.cli.main import main
from pinlater.common.passwords import hash_password
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer, sample
from tests.support.raw_storage import delete_job_behind_the_server

PASSWORD = "ledger-admin"
CTX = RequestContext(source="ledger-test")
CONFIG = {
    "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
    "metrics": {"ledger_audit_interval_seconds": 0.05, "ledger_audits_per_pass": 1},
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with OperatingServer(tmp_path_factory.mktemp("ledger"), CONFIG) as server:
        yield server


def audit(srv, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    port = srv.app.metrics_server.address[1]
    code = main(
        ["--port", str(srv.port), "audit", "--metrics-port", str(port), "--password", PASSWORD]
        + list(argv),
        out,
        err,
    )
    assert err.getvalue() == ""
    return code, out.getvalue()


def gauge_becomes(srv, queue: str, value: float, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = sample(srv.scrape(), "pinlater_ledger_imbalance_jobs", queue=queue)
        if found == value:
            return
        assert time.monotonic() < deadline, f"{queue}: imbalance {found}, expected {value}"
        time.sleep(0.05)


def enqueue(srv, queue: str, n: int) -> list[str]:
    jobs = [T.PinLaterJob(body=b"job-%d" % i) for i in range(n)]
    return srv.client().enqueueJobs(CTX, T.PinLaterEnqueueRequest(queue, jobs)).jobDescriptors


def test_the_books_balance_then_show_a_job_deleted_behind_the_servers_back(srv):
    client = srv.client()
    for queue in ("books_a", "books_b"):
        client.createQueue(CTX, queue)
    descriptors = enqueue(srv, "books_a", 5) + enqueue(srv, "books_a", 5)
    enqueue(srv, "books_b", 3)
    gauge_becomes(srv, "books_a", 0.0)
    gauge_becomes(srv, "books_b", 0.0)
    code, out = audit(srv, "--json")
    books = {q["queue"]: q for q in json.loads(out)["queues"]}
    assert code == 0 and books["books_a"]["balanced"] and books["books_a"]["imbalance"] == 0
    assert sum(b["counters"]["enqueued"] for b in books["books_a"]["shards"].values()) == 10

    delete_job_behind_the_server(srv.app.store, descriptors[3])
    gauge_becomes(srv, "books_a", 1.0)
    gauge_becomes(srv, "books_b", 0.0)
    code, out = audit(srv, "--queue", "books_a")
    assert code == 1
    assert "NO (+1)" in out and out.count("books_a") == 2  # one line per shard


def test_a_queue_deleted_and_created_again_starts_with_empty_books(srv):
    client = srv.client()
    client.createQueue(CTX, "books_c")
    descriptors = enqueue(srv, "books_c", 4)
    delete_job_behind_the_server(srv.app.store, descriptors[0])
    gauge_becomes(srv, "books_c", 1.0)
    client.deleteQueue(CTX, "books_c", PASSWORD)
    client.createQueue(CTX, "books_c")
    code, out = audit(srv, "--queue", "books_c", "--json")
    (books,) = json.loads(out)["queues"]
    assert code == 0 and books["balanced"]
    assert all(b["counters"]["enqueued"] == 0 for b in books["shards"].values())
    gauge_becomes(srv, "books_c", 0.0)
