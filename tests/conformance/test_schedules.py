"""Periodic jobs on every backend: three schedule runners (three servers) over the suite's
store, time injected, store each slot once; missed slots follow the policy; getSchedules
answers the next runs through the wire."""

import random
import time
from datetime import UTC, datetime

import pytest

from pinlater.handler.handler import PinLaterHandler
from pinlater.idl import ErrorCode as E
from pinlater.idl import pinlater_thrift as t
from pinlater.ops.schedules import ON_TIME_SECONDS, Schedule, ScheduleRunner, slot_text
from tests.conformance.wire import loopback_client


def every_second(**fields) -> Schedule:
    return Schedule(name="tick", cron="* * * * * *", body="tick {slot}", **fields)


def ticks(start: float, end: float) -> list[str]:
    return [
        f"tick {slot_text(datetime.fromtimestamp(s, UTC))}"
        for s in range(int(start) + 1, int(end) + 1)
    ]


def bodies(api, queue) -> list[str]:
    return sorted(b.decode() for b in (api.dequeue(queue, 10_000, dryRun=True).jobs or {}).values())


def runners(api, queue, schedule, count=3) -> list[ScheduleRunner]:
    return [
        ScheduleRunner(api.store, lambda: [(queue, 86_400.0, (schedule,))]) for _ in range(count)
    ]


@pytest.mark.rule("P-slot-once", "X-key-once")
def test_three_servers_store_each_slot_of_an_every_second_schedule_once(api, queue):
    t0 = float(int(time.time()))
    rng = random.Random(3)
    servers = runners(api, queue, every_second(missed="skip", catch_up_seconds=5))
    now = t0
    while now < t0 + 30:
        now += 0.3
        for run in servers:
            if rng.random() < 0.6:
                run.run_once(now + rng.uniform(-0.2, 0.2))
    got = bodies(api, queue)
    assert len(got) == len(set(got))
    assert set(ticks(t0, t0 + 29.5)) <= set(got) <= set(ticks(t0 - 6, t0 + 30.5))


@pytest.mark.rule("P-missed")
@pytest.mark.parametrize("policy", ["skip", "latest", "all"])
def test_a_server_back_after_a_pause_enqueues_missed_slots_per_policy(api, queue, policy):
    t0 = float(int(time.time()))
    [run] = runners(api, queue, every_second(missed=policy, catch_up_seconds=60), count=1)
    run.run_once(t0)
    before = set(bodies(api, queue))
    assert set(ticks(t0 - ON_TIME_SECONDS, t0)) <= before  # and, but for skip, missed ones
    run.run_once(t0 + 40)  # 40 s without a pass
    new = sorted(set(bodies(api, queue)) - before)
    expected = {
        "skip": ticks(t0 + 40 - ON_TIME_SECONDS, t0 + 40),
        "latest": ticks(t0 + 40 - ON_TIME_SECONDS - 1, t0 + 40),
        "all": ticks(t0, t0 + 40),
    }[policy]
    assert new == expected


@pytest.mark.rule("P-next-runs")
def test_get_schedules_lists_the_next_runs(api, queue):
    nightly = Schedule(name="nightly", cron="30 2 * * *", timezone="Asia/Tokyo", body="x")
    [run] = runners(api, queue, nightly, count=1)
    client = loopback_client(PinLaterHandler(api.store, api.app.config, schedules=run.views))
    ctx = t.RequestContext(source="test")
    [info] = client.getSchedules(ctx, t.PinLaterGetSchedulesRequest(queueName=queue, count=3))
    assert (info.queueName, info.name, info.cron) == (queue, "nightly", "30 2 * * *")
    assert (info.timezone, info.missedPolicy, info.priority) == ("Asia/Tokyo", "latest", 1)
    runs = [datetime.fromtimestamp(ms / 1000, UTC) for ms in info.nextRunTimestampsMillis]
    assert [(r.hour, r.minute) for r in runs] == [(17, 30)] * 3  # 02:30 JST
    assert runs[0].timestamp() > time.time()
    assert client.getSchedules(ctx, t.PinLaterGetSchedulesRequest(queueName="other")) == []
    with pytest.raises(t.PinLaterException) as info:
        client.getSchedules(ctx, t.PinLaterGetSchedulesRequest(count=0))
    assert info.value.errorCode == E.UNKNOWN and "count" in info.value.message
