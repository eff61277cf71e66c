"""Metrics and /health of a real server (App + accept loop + metrics HTTP endpoint, SQLite
shards) after a scripted workload, scraped over HTTP and parsed with prometheus_client's parser.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer, sample
from tests.support.server_process import ServerProcess, free_port

CTX = RequestContext(source="ops-test", requestId="req-1")


def enqueue(client, queue, *jobs):
    return client.enqueueJobs(CTX, T.PinLaterEnqueueRequest(queueName=queue, jobs=list(jobs)))


def dequeue(client, queue, limit, **kwargs):
    return client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=limit, **kwargs))


def ack(client, queue, succeeded=(), failed=()):
    client.ackDequeuedJobs(
        CTX,
        T.PinLaterJobAckRequest(
            queueName=queue,
            jobsSucceeded=[T.PinLaterJobAckInfo(jobDescriptor=d) for d in succeeded],
            jobsFailed=[T.PinLaterJobAckInfo(jobDescriptor=d) for d in failed],
        ),
    )


def wait_for(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def job(body: bytes, priority=1, attempts=1, run_after=None):
    return T.PinLaterJob(
        body=body, priority=priority, numAttemptsAllowed=attempts, runAfterTimestampMillis=run_after
    )


def test_scripted_workload_shows_up_with_the_right_labels_and_values(tmp_path):
    qc = tmp_path / "queues.yaml"
    qc.write_text("queues: {ops_claims: {claim_timeout_seconds: 0.05}}\n")
    with OperatingServer(
        tmp_path, {"queue_config": str(qc), "janitor": {"succeeded_ttl_seconds": 0}}
    ) as srv:
        c = srv.client()
        for queue in ("ops_q", "ops_claims", "ops_other"):
            c.createQueue(CTX, queue)
        _run_scripted_workload(c)
        f = srv.scrape()
        _assert_request_and_job_counters(f)
        _assert_connection_and_shard_metrics(f)
        _assert_depth_gauges(srv)
        _assert_janitor_reclaims_per_queue_timeout(srv, c)


def _run_scripted_workload(c) -> None:
    """On ops_q: 6 enqueued (one in the future), 3 dequeued, 2 acked ok and 1 failed then
    retried; two requests refused (unknown queue, bad name)."""
    future = int(time.time() * 1000) + 3_600_000
    enqueue(c, "ops_q", job(b"a"), job(b"b"), job(b"c"), job(b"d", 2), job(b"e", 2))
    enqueue(c, "ops_q", job(b"later", run_after=future))
    got = dequeue(c, "ops_q", 3)
    descriptors = sorted(got.jobs)
    assert len(descriptors) == 3 and all(":p1:" in d for d in descriptors)
    ack(c, "ops_q", succeeded=descriptors[:2], failed=descriptors[2:])
    assert (
        c.retryFailedJobs(
            CTX,
            T.PinLaterRetryFailedJobsRequest(queueName="ops_q", priority=1, attemptsToAllow=1),
        )
        == 1
    )
    with pytest.raises(PinLaterException):
        dequeue(c, "not_a_queue_7", 1)
    with pytest.raises(PinLaterException):
        c.createQueue(CTX, "bad-name")


def _assert_request_and_job_counters(f) -> None:
    req = "pinlater_requests"
    assert sample(f, req, method="enqueueJobs", queue="ops_q", outcome="ok") == 2
    assert sample(f, req, method="dequeueJobs", queue="ops_q", outcome="ok") == 1
    assert sample(f, req, method="retryFailedJobs", queue="ops_q", outcome="ok") == 1
    assert sample(f, req, method="dequeueJobs", queue="", outcome="QUEUE_NOT_FOUND") == 1
    assert sample(f, req, method="createQueue", queue="", outcome="QUEUE_NAME_INVALID") == 1
    assert (
        sample(
            f,
            "pinlater_request_duration_seconds",
            "pinlater_request_duration_seconds_count",
            method="enqueueJobs",
            queue="ops_q",
            outcome="ok",
        )
        == 2
    )
    assert sample(f, "pinlater_jobs_enqueued", queue="ops_q") == 6
    assert sample(f, "pinlater_jobs_dequeued", queue="ops_q") == 3
    assert sample(f, "pinlater_acks", queue="ops_q", result="succeeded") == 2
    assert sample(f, "pinlater_acks", queue="ops_q", result="failed") == 1
    assert sample(f, "pinlater_jobs_retried", queue="ops_q") == 1
    assert all(
        s.labels["queue"] in {"ops_q", "ops_claims", "ops_other", ""} for s in f[req].samples
    )


def _assert_connection_and_shard_metrics(f) -> None:
    for shard in ("1", "2"):
        assert sample(f, "pinlater_shard_healthy", shard=shard) == 1
        assert (
            sample(
                f,
                "pinlater_shard_call_duration_seconds",
                "pinlater_shard_call_duration_seconds_count",
                shard=shard,
                result="ok",
            )
            > 0
        )
    assert sample(f, "pinlater_connections") >= 1
    assert sample(f, "pinlater_in_flight") == 0


def _assert_depth_gauges(srv) -> None:
    def depth_ready():
        f = srv.scrape()
        return (
            f
            if sample(f, "pinlater_queue_jobs", queue="ops_q", state="succeeded", priority="1") == 2
            else None
        )

    f = wait_for(depth_ready)
    assert f, "queue depth gauges were not refreshed"
    expected = {
        ("pending", "1"): 1,
        ("pending", "2"): 2,
        ("pending_future", "1"): 1,
        ("pending_future", "2"): 0,
        ("in_progress", "1"): 0,
        ("succeeded", "1"): 2,
        ("failed", "1"): 0,
        ("failed", "2"): 0,
    }
    for (state, priority), value in expected.items():
        assert (
            sample(f, "pinlater_queue_jobs", queue="ops_q", state=state, priority=priority) == value
        ), (state, priority)
    assert {s.labels["queue"] for s in f["pinlater_queue_jobs"].samples} == {
        "ops_q",
        "ops_claims",
        "ops_other",
    }


def _assert_janitor_reclaims_per_queue_timeout(srv, c) -> None:
    """The per-queue claim timeout (0.05 s) reclaims ops_claims but not ops_other."""
    enqueue(c, "ops_claims", job(b"x", attempts=3), job(b"y", attempts=3))
    enqueue(c, "ops_other", job(b"z", attempts=3))
    assert len(dequeue(c, "ops_claims", 2).jobs) == 2
    assert len(dequeue(c, "ops_other", 1).jobs) == 1
    time.sleep(0.1)
    counts = srv.app.janitor.run_once()
    assert counts.reclaimed_to_pending == 2 and counts.purged_succeeded == 2
    f = srv.scrape()
    assert sample(f, "pinlater_jobs_reclaimed", queue="ops_claims", to="pending") == 2
    assert sample(f, "pinlater_jobs_reclaimed", queue="ops_other", to="pending") is None
    assert sample(f, "pinlater_jobs_purged", queue="ops_q", state="succeeded") == 2
    assert c.getJobCount(CTX, T.PinLaterGetJobCountRequest(queueName="ops_other", jobState=1)) == 1


def test_health_is_503_when_no_shard_takes_enqueues(tmp_path):
    # A successful call on a shard marks it healthy again: no probes, and the depth collector's
    # first pass (it runs at start) is over before the marks below; no second pass comes.
    quiet = {
        "sharding": {"probe_interval_seconds": 3600},
        "metrics": {"depth_interval_seconds": 3600},
    }
    with OperatingServer(tmp_path, quiet) as srv:
        deadline = time.monotonic() + 10
        while srv.app.depth._refreshed_at == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        status, body = srv.health()
        assert status == 200 and body["status"] == "ok"
        assert [s["name"] for s in body["shards"]] == ["1", "2"]
        assert body["version"] and body["uptime_seconds"] >= 0
        srv.app.store.health.mark_unhealthy("1")
        status, body = srv.health()
        assert status == 200
        assert {s["name"]: s["healthy"] for s in body["shards"]} == {"1": False, "2": True}
        srv.app.store.health.mark_unhealthy("2")
        status, body = srv.health()
        assert status == 503 and body["status"] == "unavailable"
        f = srv.scrape()
        assert sample(f, "pinlater_shard_healthy", shard="1") == 0
        assert srv.get("/nothing")[0] == 404


def test_real_server_process_serves_metrics_and_health_on_the_metrics_port(tmp_path):
    port = free_port()
    with ServerProcess(
        {"janitor": {"enabled": False}, "metrics": {"port": port}}, tmp_path
    ) as server:
        assert f"metrics on http://127.0.0.1:{port}/metrics" in server.log()
        client = server.client()
        try:
            client.createQueue(CTX, "proc_q")
            enqueue(client, "proc_q", job(b"1"), job(b"2"))
        finally:
            client.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            f = {m.name: m for m in text_string_to_metric_families(r.read().decode())}
        assert sample(f, "pinlater_jobs_enqueued", queue="proc_q") == 2
