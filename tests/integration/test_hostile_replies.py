"""Replies respect the frame cap, on every backend (hostile load, item 5).

A real server over a socket with the default limits (16 MiB frames, 1 MiB bodies) on SQLite,
Redis (two shards) and MariaDB (three shards). Before: a dequeue or lookup of 20 one-MiB jobs
sent a 21 MB frame that standard clients refuse, after the dequeue had claimed every job (a
retrying client drove them to FAILED unseen); 300 of them left the server near 1 GB RSS, 1,500
exhausted its memory. Now:
- a dequeue hands out only what fits one frame and claims only those: the rest stay PENDING
  with their attempts untouched, and the next dequeues hand them out (piggy-backed acks still
  applied);
- a lookup over the cap answers an error naming it (and the bytes it would need);
- a burst of large replies from many clients leaves the server's RSS near where it started.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinlater.idl import ErrorCode, RequestContext
from pinlater.idl import pinlater_thrift as t
from tests.support.server_process import ServerProcess, call_measured
from tests.support.storage import KINDS, backend_section

CTX = RequestContext(source="hostile-replies")
MIB = 1024 * 1024
FRAME = 16 * MIB  # the default server.max_frame_bytes
PER_REPLY = 15  # 1-MiB jobs that fit one 16 MiB reply with their descriptors and metadata
BURST_JOBS = 150
BURST_CLIENTS = 8
BURST_CALLS = 6  # per client: dry-run dequeues of every job, alternating with lookups
#: RSS the burst may leave behind (it sends ~1.4 GB of replies; before, one 150-job reply
#: alone could pin several hundred MB)
RSS_GROWTH_BOUND = 150 * MIB
#: peak RSS during the burst: 8 replies of 15 MiB in flight, each held a few times over while
#: it is built and sent (before: 8 dry runs of 150 MiB each)
PEAK_RSS_BOUND = 1200 * MIB


@pytest.fixture(scope="module", params=KINDS)
def server(request, tmp_path_factory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"replies-{request.param}")
    with backend_section(request.param, tmp) as backend:
        config = {"janitor": {"enabled": False}, "backend": backend}
        with ServerProcess(config, tmp) as running:
            yield running
            assert "Traceback" not in running.log()


def fill(server: ServerProcess, queue: str, count: int, attempts: int = 2) -> list[str]:
    client = server.client(timeout=120)
    client.createQueue(CTX, queue)
    descriptors: list[str] = []
    for start in range(0, count, 8):
        jobs = [
            t.PinLaterJob(body=bytes([i % 251]) * MIB, numAttemptsAllowed=attempts)
            for i in range(start, min(start + 8, count))
        ]
        reply = client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))
        descriptors += reply.jobDescriptors
    client.close()
    return descriptors


def dequeue(server: ServerProcess, queue: str, limit: int, **fields):
    request = t.PinLaterDequeueRequest(queueName=queue, limit=limit, **fields)
    frame, result = call_measured(server, "dequeueJobs", 120, context=CTX, request=request)
    assert frame <= FRAME, frame
    assert result.e is None, result.e
    return result.success


def lookup(server: ServerProcess, descriptors: list[str], include_body: bool):
    request = t.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=include_body)
    frame, result = call_measured(server, "lookupJobs", 120, context=CTX, request=request)
    assert frame <= FRAME, frame
    return result


def rss(pid: int, key: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def test_a_dequeue_hands_out_only_what_fits_and_claims_only_that(server):
    descriptors = fill(server, "many", 40, attempts=3)
    first = dequeue(server, "many", 40)
    assert len(first.jobs) == PER_REPLY
    found = lookup(server, descriptors, include_body=False).success
    states = {d: (info.jobState, info.attemptsRemaining) for d, info in found.items()}
    assert {states[d] for d in first.jobs} == {(1, 3)}
    assert {states[d] for d in set(descriptors) - set(first.jobs)} == {(0, 3)}
    acks = t.PinLaterJobAckRequest(
        queueName="many", jobsSucceeded=[t.PinLaterJobAckInfo(jobDescriptor=d) for d in first.jobs]
    )
    second = dequeue(server, "many", 40, jobAckRequest=acks)
    assert len(second.jobs) == PER_REPLY and not set(second.jobs) & set(first.jobs)
    third = dequeue(server, "many", 40)
    assert len(third.jobs) == 40 - 2 * PER_REPLY
    assert set(first.jobs) | set(second.jobs) | set(third.jobs) == set(descriptors)
    for d, body in third.jobs.items():
        assert body == bytes([descriptors.index(d) % 251]) * MIB
    found = lookup(server, list(first.jobs), include_body=False).success
    assert {info.jobState for info in found.values()} == {2}  # the piggy-backed acks applied


def test_a_lookup_over_the_cap_answers_an_error_naming_it(server):
    descriptors = fill(server, "looked", 20)
    refused = lookup(server, descriptors, include_body=True).e
    assert refused.errorCode == ErrorCode.UNKNOWN
    assert f"server.max_frame_bytes of {FRAME}" in refused.message
    assert int(refused.message.split("would take ")[1].split(" bytes")[0]) > 20 * MIB
    assert len(lookup(server, descriptors, include_body=False).success) == 20
    assert len(lookup(server, descriptors[:PER_REPLY], include_body=True).success) == PER_REPLY


def test_a_burst_of_large_replies_leaves_rss_bounded(server):
    descriptors = fill(server, "burst", BURST_JOBS)
    dequeue(server, "burst", BURST_JOBS, dryRun=True)  # warm up (first reply's allocations)
    before = rss(server.pid)
    errors: list[BaseException] = []

    def client() -> None:
        try:
            for i in range(BURST_CALLS):
                if i % 2:
                    reply = lookup(server, descriptors[i : i + PER_REPLY], include_body=True)
                    assert len(reply.success) == PER_REPLY
                else:
                    assert len(dequeue(server, "burst", BURST_JOBS, dryRun=True).jobs) == PER_REPLY
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(BURST_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    after, peak = rss(server.pid), rss(server.pid, "VmHWM")
    print(f"RSS before {before / MIB:.0f} MiB, after {after / MIB:.0f} MiB, peak {peak / MIB:.0f}")
    assert after - before < RSS_GROWTH_BOUND, (before, after)
    assert peak < PEAK_RSS_BOUND, peak
