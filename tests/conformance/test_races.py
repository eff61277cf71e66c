"""Concurrency: several dequeuers claim every job exactly once; acks racing the janitor never
double-move a job."""

import threading
from collections import Counter
from functools import partial

import pytest

from pinlater.storage.shard_kit.races import run_threads
from tests.conformance.api import Api
from tests.conformance.wire import loopback_client


def own_api(api: Api) -> Api:
    """An Api with its own in-process connection (one connection per thread, as on a socket)."""
    return Api(loopback_client(api.app.handler), api.app)


@pytest.mark.rule("X-claim-once")
def test_concurrent_dequeuers_claim_each_job_exactly_once(api, queue):
    total = 600
    for start in range(0, total, 200):
        api.enqueue(queue, *[f"job{i}".encode() for i in range(start, start + 200)])
    got: list[str] = []
    lock = threading.Lock()

    def worker(n):
        mine = own_api(api)
        for _ in range(200):
            ids = list((mine.dequeue(queue, 7, source=f"w:{n}").jobs or {}).keys())
            if not ids:
                return
            with lock:
                got.extend(ids)

    run_threads([partial(worker, n) for n in range(4)], timeout=60)
    counts = Counter(got)
    assert len(counts) == total and max(counts.values()) == 1
    assert api.count(queue, 1) == total


@pytest.mark.rule("X-fail-once")
def test_acks_racing_the_janitor_never_double_move_a_job(api, queue):
    ds = api.enqueue(queue, *[{"body": b"x", "numAttemptsAllowed": 3}] * 200)
    claims = {d: m.claimDescriptor for d, m in api.dequeue(queue, 200).jobMetadata.items()}
    api.advance(61_000)
    mine = own_api(api)
    acker = threading.Thread(
        target=lambda: [mine.ack(queue, failed=[(d, {"claimDescriptor": claims[d]})]) for d in ds]
    )
    acker.start()
    api.janitor(claim_timeout_seconds=60, batch_size=10)
    acker.join(60)
    api.janitor(claim_timeout_seconds=60)
    for info in api.lookup(ds).values():
        assert info.jobState == 0
        assert info.attemptsRemaining == 2, "one failure charged exactly once"
