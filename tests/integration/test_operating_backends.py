"""Operating features on every backend: a real server process on SQLite, Redis (two
throwaway redis-servers) and MariaDB (two throwaway mariadbd) serves /metrics with the workload's
counters, depth gauges and shard health, /health with every shard, and enforces a paused queue."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import sample
from tests.support.server_process import ServerProcess, free_port
from tests.support.storage import KINDS, backend_section

CTX = RequestContext(source="ops-backends", requestId="r")


def get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.status, response.read().decode()


def scrape(port: int) -> dict:
    return {m.name: m for m in text_string_to_metric_families(get(port, "/metrics")[1])}


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_health_and_rate_limits_work_on_every_backend(tmp_path, kind):
    port = free_port()
    queues = tmp_path / "queues.yaml"
    queues.write_text("queues: {paused_q: {max_jobs_per_second: 0}}\n")
    with (
        backend_section(kind, tmp_path) as backend,
        ServerProcess(
            {
                "backend": backend,
                "janitor": {"enabled": False},
                "queue_config": str(queues),
                "metrics": {"port": port, "depth_interval_seconds": 0.2},
            },
            tmp_path,
        ) as server,
    ):
        _run_workload(server.client())
        shards = [s["name"] for s in backend["shards"]]
        _assert_health_and_counters(port, shards)
        _assert_depth_gauges_refresh(port)


def _run_workload(client) -> None:
    """5 enqueued on ops_q, 3 dequeued, 2 acked; a dequeue from the paused queue refused."""
    try:
        for queue in ("ops_q", "paused_q"):
            client.createQueue(CTX, queue)
        jobs = [T.PinLaterJob(body=b"%d" % i) for i in range(5)]
        client.enqueueJobs(CTX, T.PinLaterEnqueueRequest(queueName="ops_q", jobs=jobs))
        got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="ops_q", limit=3))
        client.ackDequeuedJobs(
            CTX,
            T.PinLaterJobAckRequest(
                queueName="ops_q",
                jobsSucceeded=[T.PinLaterJobAckInfo(jobDescriptor=d) for d in list(got.jobs)[:2]],
            ),
        )
        with pytest.raises(PinLaterException) as refused:
            client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="paused_q", limit=1))
        assert refused.value.errorCode == T.ErrorCode.DEQUEUE_RATE_LIMITED
    finally:
        client.close()


def _assert_health_and_counters(port: int, shards: list[str]) -> None:
    status, body = get(port, "/health")
    health = json.loads(body)
    assert status == 200 and health["status"] == "ok"
    assert {s["name"] for s in health["shards"]} >= set(shards)
    families = scrape(port)
    assert sample(families, "pinlater_jobs_enqueued", queue="ops_q") == 5
    assert sample(families, "pinlater_jobs_dequeued", queue="ops_q") == 3
    assert sample(families, "pinlater_acks", queue="ops_q", result="succeeded") == 2
    assert sample(families, "pinlater_dequeue_refused", queue="paused_q", reason="paused") == 1
    for shard in shards:
        assert sample(families, "pinlater_shard_healthy", shard=shard) == 1


def _assert_depth_gauges_refresh(port: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # depth gauges refresh in the background
        families = scrape(port)
        pending = sample(
            families, "pinlater_queue_jobs", queue="ops_q", state="pending", priority="1"
        )
        running = sample(
            families, "pinlater_queue_jobs", queue="ops_q", state="in_progress", priority="1"
        )
        if (pending, running) == (2, 1):
            break
        time.sleep(0.1)
    assert (pending, running) == (2, 1)
