"""Metrics of deleted queues are removed (hostile load, issue 12 item 8).

Black box: real server processes per backend, clients over real sockets, /metrics read over
HTTP. Before, every queue ever created kept its series: after 2,500 create/delete cycles
/metrics was 33 MB (315k lines) and RSS +86 MB, growing. Now a deleted queue's series go at
once when this server deletes it, and at the next depth refresh when another server sharing
the storage does.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support import ddl_load
from tests.support.server_process import ADMIN_PASSWORD, ServerProcess, free_port
from tests.support.storage import KINDS

CTX = RequestContext(source="metrics-churn")
CYCLES = 200
#: cycles run before the first measure, so every series not tied to a queue exists
WARM_CYCLES = 10
REFRESH_SECONDS = 0.2
#: a bounded wait for a depth refresh to notice what another server did
SETTLE_SECONDS = 10.0


def metrics_config(backend: dict) -> dict:
    config = ddl_load.ddl_config(backend)
    config["metrics"] = {"port": free_port(), "depth_interval_seconds": REFRESH_SECONDS}
    return config


def scrape(server: ServerProcess) -> str:
    port = server.config["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def use_queue(client, queue: str) -> None:
    """What puts a queue in most series: an enqueue, a dequeue, an ack, a count, a refusal."""
    client.enqueueJobs(CTX, ddl_load.enqueue_request(queue, 2, b"churn"))
    reply = client.dequeueJobs(CTX, t.PinLaterDequeueRequest(queueName=queue, limit=2))
    acks = [t.PinLaterJobAckInfo(jobDescriptor=d) for d in reply.jobs]
    client.ackDequeuedJobs(
        CTX, t.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks[:1], jobsFailed=acks[1:])
    )
    client.getJobCount(CTX, t.PinLaterGetJobCountRequest(queueName=queue, jobState=0))


#: label sets that may appear between the warm and the final scrape without being a leak
NEW_SERIES_SLACK = 6
#: lines of one histogram label set (buckets, sum, count, created)
HISTOGRAM_LINES = 20


def _series(text: str) -> set[str]:
    """The series of a scrape, metric name and labels without values or comments, except the
    steady queue's: its depth gauges appear whenever the spread depth sweep first reaches it
    (after the warm scrape or before), a fixed set that says nothing about the churn."""
    return {
        line.rsplit(" ", 1)[0]
        for line in text.splitlines()
        if line and line[0] != "#" and 'queue="steady"' not in line
    }


def mentions(text: str, queue: str) -> list[str]:
    return [line for line in text.splitlines() if f'queue="{queue}"' in line]


def settled(server: ServerProcess, queues: list[str]) -> str:
    """/metrics once it mentions none of `queues` (or the last one read, after a bounded wait)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        text = scrape(server)
        if not any(mentions(text, q) for q in queues) or time.monotonic() > deadline:
            return text
        time.sleep(REFRESH_SECONDS)


@pytest.mark.parametrize("kind", KINDS)
def test_create_delete_churn_leaves_metrics_flat(tmp_path, kind):
    with (
        ddl_load.one_shard(kind, tmp_path) as backend,
        ServerProcess(metrics_config(backend), tmp_path) as server,
    ):
        client = server.client()
        try:
            client.createQueue(CTX, "steady")
            deleted: list[str] = []
            sizes = []
            series: list[set[str]] = []
            for cycle in range(CYCLES):
                queue = f"churn{cycle}"
                client.createQueue(CTX, queue)
                use_queue(client, queue)
                use_queue(client, "steady")
                if cycle % 20 == 0:  # a scrape while it exists: its series are there
                    assert mentions(scrape(server), queue)
                client.deleteQueue(CTX, queue, ADMIN_PASSWORD)
                deleted.append(queue)
                if cycle + 1 in (WARM_CYCLES, CYCLES):
                    text = settled(server, deleted)
                    sizes.append((len(text), len(_series(text))))
                    series.append(_series(text))
                    leftovers = [line for q in deleted for line in mentions(text, q)]
                    assert leftovers == [], leftovers[:5]
        finally:
            client.close()
        (warm_bytes, warm_lines), (end_bytes, end_lines) = sizes
        print(
            f"\n{kind}: /metrics after {WARM_CYCLES} cycles {warm_bytes} B {warm_lines} lines, "
            f"after {CYCLES} {end_bytes} B {end_lines} lines"
        )
        # flat: no series per cycle. A loaded machine may add a few label sets that name no
        # queue of the churn (a slow call's histogram bucket, a QUEUE_BUSY outcome of "steady"),
        # never one per cycle; a leak would add hundreds (every cycle added ~20 before)
        grown = sorted(series[1] - series[0])
        assert len(grown) <= NEW_SERIES_SLACK, grown[:20]
        assert end_lines <= warm_lines + NEW_SERIES_SLACK * HISTOGRAM_LINES
        assert end_bytes <= warm_bytes + 2048  # counter values grow a digit or two, no more
        assert 'queue="steady"' in text


@pytest.mark.parametrize("kind", KINDS)
def test_a_queue_deleted_through_another_server_leaves_its_metrics(tmp_path, kind):
    with (
        ddl_load.one_shard(kind, tmp_path) as backend,
        ServerProcess(metrics_config(backend), tmp_path, name="a") as deleter,
        ServerProcess(metrics_config(backend), tmp_path, name="b") as watcher,
    ):
        creator, user = deleter.client(), watcher.client()
        try:
            queues = [f"elsewhere{i}" for i in range(3)]
            for queue in queues:
                creator.createQueue(CTX, queue)
            deadline = time.monotonic() + SETTLE_SECONDS  # b learns of them at a refresh
            while not all(mentions(scrape(watcher), q) for q in queues):
                assert time.monotonic() < deadline, "the watcher never saw the queues"
                time.sleep(REFRESH_SECONDS)
            for queue in queues:
                use_queue(user, queue)
            assert all(mentions(scrape(watcher), q) for q in queues)
            for queue in queues:
                creator.deleteQueue(CTX, queue, ADMIN_PASSWORD)
            text = settled(watcher, queues)
            assert [line for q in queues for line in mentions(text, q)] == []
            # a request naming a deleted queue is counted under queue="", not under its name
            use_queue_failed = ddl_load.outcome(
                lambda: user.getJobCount(
                    CTX, t.PinLaterGetJobCountRequest(queueName=queues[0], jobState=0)
                )
            )
            assert use_queue_failed == "QUEUE_NOT_FOUND"
            assert mentions(scrape(watcher), queues[0]) == []
        finally:
            creator.close()
            user.close()


def test_metrics_max_queues_bounds_the_queues_with_series_of_their_own(tmp_path):
    with ddl_load.one_shard("sqlite", tmp_path) as backend:
        config = metrics_config(backend)
        config["metrics"]["max_queues"] = 3
        with ServerProcess(config, tmp_path) as server:
            client = server.client()
            try:
                queues = [f"capped{i}" for i in range(8)]
                for queue in queues:
                    client.createQueue(CTX, queue)
                    use_queue(client, queue)
                depth = 'pinlater_queue_jobs{priority="1",queue="(other)",state="succeeded"} 5.0'
                deadline = time.monotonic() + SETTLE_SECONDS  # a depth sweep after the acks
                while depth not in (text := scrape(server)) and time.monotonic() < deadline:
                    time.sleep(REFRESH_SECONDS)
            finally:
                client.close()
    labels = {
        line.split('queue="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if 'queue="' in line
    }
    assert labels - {"", "(other)"} == {"capped0", "capped1", "capped2"}
    assert 'pinlater_jobs_enqueued_total{queue="(other)"} 10.0' in text  # 5 queues x 2 jobs
    assert depth in text  # the depth of those 5 queues adds up under "(other)" too
