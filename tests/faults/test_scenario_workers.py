"""F4: a worker killed mid-job, and a worker paused (SIGSTOP) past its claim whose late ack must
be fenced. Run on every backend."""

from __future__ import annotations

import signal

import pytest

from tests.faults.harness import CLAIM_TIMEOUT
from tests.faults.storage import KINDS
from worker_sdk.models import JobState


@pytest.mark.parametrize("kind", KINDS)
def test_f4_worker_killed_mid_job_its_jobs_come_back_after_the_claim(make_rig, kind):
    rig = make_rig("F4-kill", kind)
    server = rig.start_seeded(40)
    doomed = rig.spawn_worker("doomed", limit=5, work_seconds=30)
    rig.wait_for(lambda: len(_delivered(doomed)) == 5, 20, "the doomed worker's jobs")
    doomed.kill()
    rig.fault("kill_worker")
    rig.spawn_worker("healthy", limit=5, work_seconds=0.02)
    taken = {r["descriptor"] for r in _delivered(doomed)}
    rig.wait_for(
        lambda: taken <= _acked_by(rig, "healthy"),
        CLAIM_TIMEOUT + 15,
        "the killed worker's jobs redelivered and acked",
    )
    report = rig.check()
    rig.assert_resources_back(server)
    assert report.dup_deliveries >= len(taken)
    rig.finish(report, note=f"{len(taken)} jobs of the killed worker redelivered")


@pytest.mark.parametrize("kind", KINDS)
def test_f4_worker_paused_past_its_claim_late_ack_is_fenced(make_rig, kind):
    rig = make_rig("F4-stop", kind)
    server = rig.start_seeded(20)
    sleeper = rig.spawn_worker("sleeper", limit=3, work_seconds=1.0)
    rig.wait_for(lambda: len(_delivered(sleeper)) == 3, 20, "the sleeper's jobs")
    sleeper.signal(signal.SIGSTOP)  # inside its 1 s of "work", before it acks
    rig.fault("sigstop_worker")
    held = {r["descriptor"]: r for r in _delivered(sleeper)}
    thief = rig.client("thief")
    again = _redeliver(rig, thief, set(held))
    sleeper.signal(signal.SIGCONT)
    rig.wait_for(
        lambda: len([r for r in sleeper.records() if r["op"] == "ack"]) >= 3,
        20,
        "the sleeper's late acks",
    )
    late = [r for r in sleeper.records() if r["op"] == "ack" and r["descriptor"] in held]
    assert all(r["outcome"] == "ok" for r in late), late  # sent and answered: a no-op
    infos = thief.lookup(list(held))
    for descriptor, info in infos.items():
        assert info.state == JobState.IN_PROGRESS, info
        assert info.claim == again[descriptor].claim, info
        assert info.attempts_remaining == again[descriptor].attempts_remaining, info
    rig._ack_recorded(thief, list(again.values()))
    report = rig.check()
    rig.assert_resources_back(server)
    rig.finish(report, note="late acks of a SIGSTOPped worker left the new claim untouched")


def _redeliver(rig, client, descriptors: set[str]) -> dict:
    """Dequeue (recorded) until every descriptor is handed out again; ack the others."""
    found: dict = {}

    def round_() -> bool:
        record = rig.history.invoke("dequeue")
        jobs = client.dequeue(rig.queue, 50)
        rig.history.deliveries(record, jobs, "thief")
        found.update({j.descriptor: j for j in jobs if j.descriptor in descriptors})
        others = [j for j in jobs if j.descriptor not in descriptors]
        if others:
            rig._ack_recorded(client, others)
        return descriptors <= set(found)

    rig.wait_for(round_, CLAIM_TIMEOUT + 15, "the paused worker's jobs to be reclaimed")
    return found


def _delivered(worker) -> list[dict]:
    return [r for r in worker.records() if r["op"] == "deliver"]


def _acked_by(rig, source: str) -> set[str]:
    return {
        r["descriptor"]
        for r in rig.worker_records()
        if r["op"] == "ack" and r["process"] == source and r["outcome"] == "ok"
    }
