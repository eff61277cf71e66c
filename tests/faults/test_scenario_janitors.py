"""F8: two servers (two janitors) on the same storage, a short janitor interval and a claim
timeout that the workers' job times straddle, so reclaims race acks all the time. No job may
end both succeeded and pending, no attempt may be charged twice, stale acks change nothing.
Run on every backend."""

from __future__ import annotations

import time

import pytest

from tests.faults.storage import KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_f8_two_janitors_racing_acks_charge_each_expiry_once(make_rig, kind):
    rig = make_rig("F8", kind, janitor={"interval_seconds": 0.05, "claim_timeout_seconds": 0.5})
    first = rig.start_server()
    rig.start_server()
    rig.create_queue()
    rig.enqueue(150)
    rig.baseline(first)
    for source, work in (("fast", 0.3), ("edge", 0.5), ("slow", 0.7)):
        rig.spawn_worker(source, limit=3, work_seconds=work)
    with rig.watch_resources(first):
        time.sleep(6)
    for worker in rig.workers:
        worker.stop()
    rejected = rig.stale_ack_probe()
    report = rig.check()  # strict: every delivery was recorded, so attempts must add up
    rig.assert_resources_back(first)
    reclaimed = sum(1 for r in rig.all_records() if r["op"] == "deliver") - report.attempted
    assert reclaimed > 0, "no claim expired: the janitors never raced an ack"
    rig.finish(
        report,
        note=f"{rejected} probe stale acks rejected; "
        f"{report.stale_acks} late worker acks were no-ops; "
        f"{report.failed_exhausted} jobs FAILED after exhausting attempts",
    )
