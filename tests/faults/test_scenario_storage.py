"""F5, F6, F7: faults in the storage behind the server (Redis and MariaDB shards).

F5 kill -9 a shard's storage process under load and restart it on the same data (durable
settings: no accepted job may be lost), plus the negative control on non-durable settings, where
the checker MUST report loss. F6 connection resets and mid-reply cuts between server and shard
during enqueue commits (duplicates allowed, loss not). F7 a shard blackholed for ~10 s: enqueues
go to the other shard or fail within the bound the shard timeouts set, and the server's thread
count stays bounded.
"""

from __future__ import annotations

import random
import time

import pytest

from tests.faults.harness import CLAIM_TIMEOUT, LOAD_SLACK

NETWORKED = ("redis", "mysql")


def _f5_run(rig, cycles: int):
    server = rig.start_server()
    rig.create_queue()
    rig.spawn_worker("w1", limit=5, work_seconds=0.01)
    with rig.producers(2):
        for _ in range(cycles):
            target = rig.ok_enqueues() + 150
            rig.wait_for(
                lambda target=target: rig.ok_enqueues() >= target, 30, "enqueues before the kill"
            )
            rig.storage.kill(0)
            rig.fault(f"kill_{rig.kind}")
            time.sleep(0.5)  # the server sees the shard die; enqueues move to the other one
            rig.storage.restart(0)
        target = rig.ok_enqueues() + 50
        rig.wait_for(lambda: rig.ok_enqueues() >= target, 30, "enqueues after the restart")
        rig.baseline(server)
    return server


@pytest.mark.parametrize("kind", NETWORKED)
def test_f5_storage_killed_and_restarted_on_same_data_loses_no_accepted_job(make_rig, kind):
    rig = make_rig("F5", kind)
    server = _f5_run(rig, cycles=2)
    report = rig.check(strict_attempts=False)
    rig.assert_resources_back(server)
    rig.finish(
        report, note="appendfsync always" if kind == "redis" else "innodb_flush_log_at_trx_commit=1"
    )


@pytest.mark.parametrize("kind", NETWORKED)
def test_f5_negative_control_non_durable_storage_the_checker_reports_loss(make_rig, kind):
    rig = make_rig("F5-neg", kind, durable=False)
    _f5_run(rig, cycles=3)
    report = rig.check(strict_attempts=False)
    rig.finish(
        report,
        expect_loss=True,
        note=("appendonly no" if kind == "redis" else "innodb_flush_log_at_trx_commit=0")
        + f": {len(report.lost)} accepted jobs lost, "
        f"{len(report.missing_descriptors)} descriptors gone",
    )


@pytest.mark.parametrize("kind", NETWORKED)
def test_f6_resets_and_cut_replies_between_server_and_shard_lose_nothing(make_rig, kind):
    rig = make_rig("F6", kind, proxied=True)
    server = rig.start_server()
    rig.create_queue()
    rig.baseline(server)
    rig.spawn_worker("w1", limit=5, work_seconds=0.01)
    rng = random.Random(6)
    with rig.producers(2), rig.watch_resources(server):
        rig.wait_for(lambda: rig.ok_enqueues() >= 50, 20, "enqueues before the faults")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            proxy = rng.choice(rig.storage.proxies)
            if rng.random() < 0.3:
                proxy.reset_all()
            else:
                proxy.cut_after(rng.randint(1, 300), rng.choice(["down", "down", "up"]))
            time.sleep(rng.uniform(0.05, 0.3))
            proxy.heal()
            time.sleep(rng.uniform(0.05, 0.2))
        target = rig.ok_enqueues() + 50
        rig.wait_for(lambda: rig.ok_enqueues() >= target, 20, "enqueues after healing")
    report = rig.check(strict_attempts=False)
    rig.assert_resources_back(server)
    faults = rig.storage.faults()
    assert faults.get("cut", 0) + faults.get("reset", 0) > 0, faults
    rig.finish(report, note=f"{report.stored_copies_extra} jobs stored twice (allowed)")


@pytest.mark.parametrize("kind", ["redis", "mysql"])
def test_f7_blackholed_shard_enqueues_go_elsewhere_or_fail_fast_threads_bounded(make_rig, kind):
    rig = make_rig("F7", kind, proxied=True)
    server = rig.start_seeded(50)
    rig.spawn_worker("w1", limit=5, work_seconds=0.01)
    # The server answers an enqueue within this (each shard tried fails within its timeouts);
    # the clients wait that long plus what a loaded machine adds, so an enqueue without an
    # answer is a server that left its client hanging, not a client that gave up first.
    bound = rig.enqueue_answer_bound()
    with rig.producers(2, timeout=bound + LOAD_SLACK) as producers, rig.watch_resources(server):
        rig.wait_for(lambda: rig.ok_enqueues() >= 150, 20, "enqueues before the blackhole")
        before = len(_latencies(producers))
        ok_before = rig.ok_enqueues()
        started = time.time()
        rig.storage.proxies[0].blackhole()
        time.sleep(10)
        during = _latencies(producers)[before:]
        ok_during = rig.ok_enqueues() - ok_before
        rig.storage.proxies[0].heal()
        ended = time.time()
        target = rig.ok_enqueues() + 50
        rig.wait_for(lambda: rig.ok_enqueues() >= target, 20, "enqueues after healing")
    report = rig.check(strict_attempts=False, drain_timeout=CLAIM_TIMEOUT + 25)
    rig.assert_resources_back(server)
    worst = max(during)
    timed_out = sum(
        1
        for r in rig.history.records()
        if r["op"] == "enqueue" and r["outcome"] == "unknown" and started <= r["invoke"] <= ended
    )
    peak = rig.resources["peak_threads"] - rig.resources["base_threads"]
    rig.finish(
        report,
        note=f"{ok_during} jobs accepted during 10 s blackhole, slowest enqueue "
        f"{worst:.2f}s (bound {bound:.1f}s), {timed_out} enqueues timed out at the client, "
        f"+{peak} threads at peak",
    )
    assert peak <= 24, f"the server grew {peak} threads during the blackhole"
    assert timed_out == 0, (
        f"{timed_out} enqueues got no answer within {bound + LOAD_SLACK:.1f}s "
        f"(the server's bound {bound:.1f}s plus {LOAD_SLACK}s)"
    )
    assert ok_during > 50, f"only {ok_during} jobs accepted while one shard was blackholed"


def _latencies(producers) -> list[float]:
    return [t for p in producers for t in p.latencies]
