"""Many queues cost the storage per tick, not per queue (hostile load, issue 12 item 11).

Black box: a real server per backend holding QUEUES idle queues, with the depth collector and
the janitor on short intervals; /metrics read over HTTP counts the server's storage calls.
Before, every depth refresh counted each queue on its own and every janitor pass touched each
queue (at least QUEUES / interval calls a second each); now both read a slice of queues per
tick with one call per shard, so an idle server's storage calls stay a small fraction of that.
The latency figures (dequeue+ack p99 with 1,000 and 2,000 queues) are printed by
`scripts/bench_many_queues.py`; this test asserts the calls and that a client is served.
"""

from __future__ import annotations

import re
import time

import pytest

from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.integration.test_hostile_metrics import scrape
from tests.support import ddl_load
from tests.support.server_process import ServerProcess, free_port
from tests.support.storage import KINDS

CTX = RequestContext(source="many-queues")
QUEUES = 300
INTERVAL = 0.5
MEASURE_SECONDS = 4.0
#: per-queue work would make at least QUEUES / INTERVAL calls a second for each duty
PER_QUEUE_RATE = QUEUES / INTERVAL


def _config(backend: dict) -> dict:
    config = ddl_load.ddl_config(backend)
    config["metrics"] = {"port": free_port(), "depth_interval_seconds": INTERVAL}
    config["janitor"] = {"enabled": True, "interval_seconds": INTERVAL}
    return config


def _storage_calls(server: ServerProcess) -> float:
    pattern = r"^pinlater_shard_call_duration_seconds_count\{[^}]*\} ([0-9.e+]+)$"
    return sum(float(m) for m in re.findall(pattern, scrape(server), re.MULTILINE))


@pytest.mark.parametrize("kind", KINDS)
def test_idle_queues_cost_storage_calls_per_tick_not_per_queue(tmp_path, kind):
    with (
        ddl_load.one_shard(kind, tmp_path) as backend,
        ServerProcess(_config(backend), tmp_path) as server,
    ):
        client = server.client()
        try:
            for i in range(QUEUES):
                client.createQueue(CTX, f"idle{i:04d}")
            time.sleep(2 * INTERVAL)  # the sweeps have met every queue
            before, started = _storage_calls(server), time.monotonic()
            time.sleep(MEASURE_SECONDS)
            rate = (_storage_calls(server) - before) / (time.monotonic() - started)
            print(f"\n{kind}: {QUEUES} idle queues, {rate:.1f} storage calls/s")
            assert rate < PER_QUEUE_RATE / 4, rate
            client.enqueueJobs(CTX, ddl_load.enqueue_request("idle0000", 1, b"x"))
            reply = client.dequeueJobs(CTX, t.PinLaterDequeueRequest(queueName="idle0000", limit=1))
            assert len(reply.jobs) == 1
        finally:
            client.close()
