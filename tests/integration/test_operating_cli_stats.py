"""`pinlater stats` against a real server: /health line, per-queue per-priority counts, JSON,
--watch, and the exit code when no shard takes enqueues."""

from __future__ import annotations

import io
import json
import time

from pinlater.cli.main import main
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer

CTX = RequestContext(source="stats-test")


def run(srv, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["--port", str(srv.port), "stats", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def prepare(srv):
    c = srv.client()
    c.createQueue(CTX, "stats_a")
    c.createQueue(CTX, "stats_b")
    future = int(time.time() * 1000) + 3_600_000
    c.enqueueJobs(
        CTX,
        T.PinLaterEnqueueRequest(
            queueName="stats_a",
            jobs=[
                T.PinLaterJob(body=b"1"),
                T.PinLaterJob(body=b"2"),
                T.PinLaterJob(body=b"3", priority=2),
                T.PinLaterJob(body=b"4", runAfterTimestampMillis=future),
            ],
        ),
    )
    got = c.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="stats_a", limit=1))
    assert len(got.jobs) == 1


def test_stats_prints_health_and_counts_by_priority(tmp_path):
    with OperatingServer(tmp_path) as srv:
        prepare(srv)
        code, out, err = run(srv, "--metrics-port", str(srv.app.metrics_server.address[1]))
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("health: ok (HTTP 200), version ")
        assert "shards: 1, 2" in lines[0]
        assert lines[1].split() == [
            "QUEUE",
            "PRIORITY",
            "PENDING",
            "FUTURE",
            "IN",
            "PROGRESS",
            "SUCCEEDED",
            "FAILED",
        ]
        table = [line.split() for line in lines[2:]]
        assert table == [
            ["stats_a", "1", "1", "1", "1", "0", "0"],
            ["stats_a", "2", "1", "0", "0", "0", "0"],
            ["stats_a", "3", "0", "0", "0", "0", "0"],
            ["stats_b", "1", "0", "0", "0", "0", "0"],
            ["stats_b", "2", "0", "0", "0", "0", "0"],
            ["stats_b", "3", "0", "0", "0", "0", "0"],
        ]


def test_stats_json_one_queue_without_health_uses_the_priorities_option(tmp_path):
    with OperatingServer(tmp_path, {"priorities": {"levels": 2}}) as srv:
        prepare(srv)
        code, out, _ = run(srv, "-q", "stats_a", "--priorities", "1", "--json")
        data = json.loads(out)
        assert code == 0 and data["health_status"] is None
        assert data["rows"] == [
            {
                "queue": "stats_a",
                "priority": 1,
                "pending": 1,
                "future": 1,
                "in_progress": 1,
                "succeeded": 0,
                "failed": 0,
            }
        ]


def test_stats_watch_redraws_and_exit_code_reports_an_unavailable_server(tmp_path):
    # no probe and no depth refresh: either would find the shards fine and mark them healthy
    with OperatingServer(
        tmp_path,
        {"sharding": {"probe_interval_seconds": 3600}, "metrics": {"depth_interval_seconds": 3600}},
    ) as srv:
        prepare(srv)
        url = srv.metrics_url
        code, out, _ = run(srv, "--metrics-url", url, "--watch", "0.05", "--iterations", "3")
        assert code == 0 and out.count("health: ok") == 3
        for shard in ("1", "2"):
            srv.app.store.health.mark_unhealthy(shard)
        code, out, _ = run(srv, "--metrics-url", url, "-q", "stats_b")
        assert code == 1
        assert out.startswith("health: unavailable (HTTP 503)") and "1 UNHEALTHY" in out


def test_stats_rejects_a_non_positive_watch_interval(tmp_path):
    with OperatingServer(tmp_path) as srv:
        code, _, err = run(srv, "--watch", "0")
        assert code == 2 and "--watch" in err
