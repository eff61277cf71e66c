"""F1, F2, F3, F10: kill -9 (or a full stop) of the Thrift server, restart on the same storage,
drain, check. Run on every backend."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from tests.faults import checker
from tests.faults.harness import BROKER, outcome_of
from tests.faults.proxy import FaultProxy
from tests.faults.storage import KINDS
from worker_sdk.errors import PinLaterError


@pytest.mark.parametrize("kind", KINDS)
def test_f1_server_killed_during_enqueue_stream_loses_no_accepted_job(make_rig, kind):
    rig = make_rig("F1", kind)
    server = rig.start_server()
    rig.create_queue()
    with rig.producers(2):
        for _ in range(2):
            target = rig.ok_enqueues() + 100
            rig.wait_for(
                lambda target=target: rig.ok_enqueues() >= target, 20, "enqueues before the kill"
            )
            rig.kill_server(server)
            time.sleep(0.3)  # producers run into the dead server
            rig.restart_server(server)
        target = rig.ok_enqueues() + 50
        rig.wait_for(lambda: rig.ok_enqueues() >= target, 20, "enqueues after the restart")
        rig.baseline(server)
    report = rig.check()
    rig.assert_resources_back(server)
    assert report.enq_fail + report.enq_unknown > 0, "the kills interrupted no enqueue"
    rig.finish(report)


@pytest.mark.parametrize("kind", KINDS)
def test_f2_server_killed_with_dequeue_replies_in_flight_jobs_return_after_lease(make_rig, kind):
    rig = make_rig("F2", kind)
    server = rig.start_seeded(200)
    with FaultProxy(("127.0.0.1", server.port), name="clients") as proxy:
        for i in range(2):
            rig.spawn_worker(f"w{i + 1}", servers=proxy.address, limit=10)
        rig.wait_for(lambda: _delivered(rig) >= 20, 20, "workers under way")
        proxy.half_open("down")  # dequeue replies now vanish inside the proxy
        blind = [
            threading.Thread(target=_blind_dequeue, args=(rig, proxy.address, f"b{i}"))
            for i in range(3)
        ]
        for thread in blind:
            thread.start()
        time.sleep(0.5)  # the server claims jobs for dequeues whose replies never arrive
        rig.kill_server(server)
        rig.restart_server(server)
        proxy.heal()  # resets the connections whose replies were dropped
        for thread in blind:
            thread.join(10)
        rig.faults.update(proxy.faults)
        rig.faults.pop("dropped_bytes", None)
        time.sleep(1.0)
        report = rig.check(strict_attempts=False)
    hidden = checker.hidden_deliveries(rig.all_records(), rig.final_state())
    rig.assert_resources_back(server)
    assert hidden > 0, "no dequeue reply was lost in flight: the fault missed"
    rig.finish(report, note=f"{hidden} deliveries lost in flight came back after the lease")


@pytest.mark.parametrize("kind", KINDS)
def test_f3_server_killed_between_work_and_ack_job_is_redelivered(make_rig, kind):
    rig = make_rig("F3", kind)
    server = rig.start_seeded(60)
    gate = rig.tmp / "ack-gate"
    worker = rig.spawn_worker("w1", limit=5, work_seconds=0.05, gate=gate)
    rig.wait_for(
        lambda: any(r["op"] == "worked" for r in worker.records()),
        20,
        "the worker to finish its first jobs",
    )
    rig.kill_server(server)
    gate.touch()  # the worker acks now, into a dead server
    rig.wait_for(lambda: any(r["op"] == "ack" for r in worker.records()), 20, "the ack try")
    rig.restart_server(server)
    time.sleep(1.0)
    report = rig.check()
    rig.assert_resources_back(server)
    failed_acks = [r for r in worker.records() if r["op"] == "ack" and r["outcome"] != "ok"]
    assert failed_acks, "the first ack did not fail"
    assert report.dup_deliveries >= len(failed_acks), "unacked jobs were not redelivered"
    rig.finish(report, note=f"{len(failed_acks)} acks hit the dead server")


@pytest.mark.parametrize("kind", KINDS)
def test_f10_full_restart_then_drain_counts_reconcile(make_rig, kind):
    rig = make_rig("F10", kind)
    server = rig.start_seeded(100, baseline=False)
    for i in range(2):
        rig.spawn_worker(f"w{i + 1}", limit=5, work_seconds=0.05)
    with rig.producers(1, pause=0.02):
        rig.wait_for(lambda: _delivered(rig) >= 40, 20, "workers under way")
    for worker in rig.workers:
        worker.kill()
    rig.fault("kill_worker", len(rig.workers))
    assert server.stop(timeout=10) == 0, server.log()
    for i in range(len(rig.storage.servers)):
        rig.storage.stop(i)
        rig.storage.restart(i)
    rig.fault("full_restart")
    rig.restart_server(server)
    rig.baseline(server)
    report = rig.check(strict_attempts=False)
    rig.assert_resources_back(server)
    client = rig.client("reconcile")
    final = rig.final_state()
    stored = len(final)
    succeeded = client.count(rig.queue, checker.JobState.SUCCEEDED)
    states = collections.Counter(info.state.name for info in final.values())
    assert succeeded == stored, (succeeded, stored, dict(states), report)
    assert report.acked + report.stored_copies_extra == stored
    assert report.enq_ok + report.recovered == report.acked
    rig.finish(report, note=f"{stored} stored = {succeeded} SUCCEEDED")


def _blind_dequeue(rig, address: str, source: str) -> None:
    """One dequeue whose reply the proxy swallows: the claim is made, nobody receives it."""
    client = rig.client(source, [address], retries=0, timeout=5.0)
    record = rig.history.invoke("dequeue")
    try:
        jobs = client.dequeue(rig.queue, 5)
    except PinLaterError as exc:
        rig.history.complete(record, outcome_of(exc))
        return
    rig.history.complete(record, "ok")
    rig.history.deliveries(record, jobs, source)  # only if the reply got through after all


def _delivered(rig) -> int:
    return sum(1 for r in rig.worker_records() if r["op"] == "deliver")


@pytest.mark.parametrize("kind", KINDS)
def test_f2b_broker_server_killed_with_buffered_jobs_uses_no_attempt(make_rig, kind):
    """F2 with the prefetching broker on: the server is killed while its buffers hold jobs
    (reserved in storage, not handed out) and workers are under way; restarted (broker on
    again), everything drains with no job lost and, strictly, no attempt used by a job that
    was only buffered (the janitor returns those after the hold)."""
    rig = make_rig("F2b", kind, broker=True)
    server = rig.start_server()
    rig.create_queue()
    rig.enqueue(300)
    rig.baseline(server)
    for i in range(2):
        rig.spawn_worker(f"w{i + 1}", limit=5, work_seconds=0.02)
    rig.wait_for(lambda: _delivered(rig) >= 30, 20, "workers under way")
    buffered = _buffered(rig)
    rig.kill_server(server)
    rig.restart_server(server)
    time.sleep(BROKER["hold_seconds"] + 1.0)  # the janitor returns the reservations
    report = rig.check(strict_attempts=True)
    rig.assert_resources_back(server)
    assert buffered > 0, "the broker held no job when it was killed: the fault missed"
    # R-broker-claim: a job handed out within broker.write_behind_ms before the kill was
    # still reserved in storage, so it came back after the hold with no attempt used: at most
    # the last dequeue of each worker (2 x limit 5), each delivered twice, no more
    unwritten = [v for v in report.violations if "0 attempts used for 2 observed" in v]
    assert len(unwritten) <= 10, unwritten
    report.violations = [v for v in report.violations if v not in unwritten]
    rig.finish(
        report,
        note=f"{buffered} jobs buffered at the kill; {len(unwritten)} handed out in the "
        "write-behind window came back without an attempt used",
    )


def _buffered(rig) -> int:
    """About how many jobs the broker holds reserved, not handed out: reads show them as
    PENDING (S-prefetch), a dry run straight to storage leaves them out (the workers run on
    between the two reads, so this may be off by a few)."""
    pending = rig.client("probe").count(rig.queue, checker.JobState.PENDING)
    return pending - rig.unreserved_pending()
