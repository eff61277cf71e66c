"""`pinlater stats` against a real server: /health line, per-queue per-priority counts, JSON,
--watch, rates, finding the metrics port, surviving a server restart in --watch, and the exit
code when no shard takes enqueues."""

from __future__ import annotations

import io
import json
import time

from pinlater.cli import stats as cli_stats
from pinlater.cli.main import main, make_client, parse_args
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.operating import OperatingServer
from tests.support.server_process import ServerProcess, free_port

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
        table = [line.split() for line in lines[2:8]]
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
        code, out, _ = run(
            srv, "-q", "stats_a", "--priorities", "1", "--metrics-port", "0", "--json"
        )
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


def test_stats_finds_the_metrics_port_the_server_reads_and_shows_rates(tmp_path, monkeypatch):
    with OperatingServer(tmp_path) as srv:
        prepare(srv)
        port = srv.app.metrics_server.address[1]
        monkeypatch.setenv("PINLATER_METRICS_PORT", str(port))  # what the server read
        client = srv.client()

        def sleep_enqueueing(seconds):  # between the two frames: 40 jobs in, 30 out
            enqueue(client, "stats_b", 40)
            client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="stats_b", limit=30))
            time.sleep(0.2)

        args = parse_args(
            ["--port", str(srv.port), "--json", "stats", "-q", "stats_b", "--watch", "0.2"]
        )
        args.iterations = 2
        out = io.StringIO()
        assert cli_stats.run(args, out, lambda: make_client(args), sleep=sleep_enqueueing) == 0
        first, second = (json.loads(line) for line in out.getvalue().splitlines())
        assert first["health_status"] == 200 and first["rates"] is None
        rates = second["rates"]["stats_b"]
        assert 40 / 0.5 < rates["enqueued"] <= 40 / 0.2
        assert 30 / 0.5 < rates["dequeued"] <= 30 / 0.2
        assert rates["acked_succeeded"] == rates["acked_failed"] == 0
        code, text, _ = run(srv, "-q", "stats_b", "--rate-window", "0.3")
        assert code == 0 and text.startswith("health: ok (HTTP 200)")
        assert text.splitlines()[-2].split() == [
            "QUEUE",
            "ENQUEUED/S",
            "DEQUEUED/S",
            "ACKED",
            "OK/S",
            "ACKED",
            "FAILED/S",
        ]
        assert text.splitlines()[-1].split() == ["stats_b", "0.0", "0.0", "0.0", "0.0"]


def test_stats_without_a_metrics_endpoint_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("PINLATER_METRICS_PORT", raising=False)
    with OperatingServer(tmp_path) as srv:
        prepare(srv)
        dead = free_port()
        code, out, _ = run(srv, "-q", "stats_a", "--metrics-port", str(dead))
        assert code == 0
        assert out.splitlines()[0].startswith(
            f"health: not available (http://127.0.0.1:{dead}/health: "
        )
        assert out.splitlines()[-1] == "rates: - (no /metrics)"


def test_stats_watch_keeps_going_while_the_server_restarts(tmp_path):
    port, metrics_port = free_port(), free_port()
    config = {"metrics": {"port": metrics_port}}

    def server(name):
        return ServerProcess(config, tmp_path, port=port, name=name)

    current = server("first").start()
    try:
        client = current.client()
        client.createQueue(CTX, "restart_q")
        client.close()
        frames = []

        def sleep(seconds):  # frame 1 sees the server; 2 sees it down; 3 sees it back
            nonlocal current
            frames.append(seconds)
            if len(frames) == 1:
                current.stop()
            else:
                current = server("second").start()

        args = parse_args(
            ["--port", str(port), "--retries", "0", "stats", "--watch", "0.1", "--iterations", "3"]
        )
        args.metrics_port = metrics_port
        out = io.StringIO()
        code = cli_stats.run(args, out, lambda: make_client(args), sleep=sleep)
        text = out.getvalue()
        assert code == 0, text
        assert text.count("health: ok (HTTP 200)") == 2
        assert "server not reachable: " in text and "(still watching)" in text
        assert text.index("server not reachable") < text.rindex("health: ok")
    finally:
        current.stop()


def enqueue(client, queue, n):
    client.enqueueJobs(
        CTX,
        T.PinLaterEnqueueRequest(queueName=queue, jobs=[T.PinLaterJob(body=b"x")] * n),
    )
