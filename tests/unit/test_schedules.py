"""Periodic jobs (pinlater/ops/schedules.py) on a real SQLite store, time injected: the
schedules section of the queue-config file, the missed-slot policies, the catch-up horizon,
retries of failed slots, next runs; and three runners ("servers") sharing one store."""

from __future__ import annotations

import random
from contextlib import closing
from datetime import UTC, datetime

import pytest

from backends.sqlite import SQLiteBackend, SQLiteShardSpec
from pinlater.common.sections import ConfigError
from pinlater.ops.queue_settings import parse_queue_config
from pinlater.ops.schedules import ON_TIME_SECONDS, Schedule, ScheduleRunner, slot_text
from pinlater.storage.contract import StorageLimits
from pinlater.storage.sharded import ShardedBackend
from tests.support.sqlite_env import sharded_store

pytestmark = pytest.mark.backend("sqlite")

T0 = datetime(2030, 1, 1, tzinfo=UTC).timestamp()  # a whole minute
Q = "cron_q"


def every_second(**fields) -> Schedule:
    return Schedule(name="tick", cron="* * * * * *", body="tick {slot}", **fields)


@pytest.fixture
def store(tmp_path):
    with closing(sharded_store(tmp_path, queue=Q)) as store:
        yield store


def runner(store, *schedules: Schedule, window: float = 86_400.0) -> ScheduleRunner:
    return ScheduleRunner(store, lambda: [(Q, window, schedules)])


def bodies(store) -> list[str]:
    jobs = store.dequeue(Q, 10_000, "test", dry_run=True)
    return sorted(job.body.decode() for _, job in jobs)


def ticks(start: float, end: float) -> list[str]:
    """Bodies of every-second slots in (start, end]."""
    return [
        f"tick {slot_text(datetime.fromtimestamp(t, UTC))}"
        for t in range(int(start) + 1, int(end) + 1)
    ]


# ---------------------------------------------------------------- the config file


def test_schedules_are_read_with_the_queue_settings():
    config = parse_queue_config(
        """
queues:
  reports:
    unique_window_seconds: 7200
    schedules:
      - {name: nightly, cron: "0 3 * * *", timezone: Europe/Berlin, body: go, priority: 2,
         attempts: 5, missed: all, catch_up_seconds: 600}
      - {name: tick, cron: "*/5 * * * * *"}
  plain: {max_jobs_per_second: 3}
""",
        "test",
    )
    [(queue, window, schedules)] = config.schedule_list()
    assert (queue, window) == ("reports", 7200)
    nightly, tick = schedules
    assert (nightly.timezone, nightly.priority, nightly.attempts) == ("Europe/Berlin", 2, 5)
    assert (nightly.missed, nightly.catch_up_seconds) == ("all", 600)
    assert (tick.timezone, tick.missed, tick.catch_up_seconds) == ("UTC", "latest", 3600)


def test_every_problem_of_a_schedule_is_reported_with_its_path():
    with pytest.raises(ConfigError) as info:
        parse_queue_config(
            """
queues:
  q:
    unique_window_seconds: 600
    schedules:
      - {name: "bad name", cron: "61 * * * *", timezone: Mars/Base, missed: maybe}
      - {name: ok, cron: "* * * * *", catch_up_seconds: 600, priority: 0, colour: red}
      - {name: twice, cron: "* * * * *", catch_up_seconds: 60}
      - {name: twice, cron: "* * * * *", catch_up_seconds: 60}
    """,
            "f",
        )
    text = "\n".join(info.value.problems)
    for expected in (
        "queues.q.schedules[0].name: 'bad name'",
        "queues.q.schedules[0].cron: '61 * * * *' is not a cron expression",
        "queues.q.schedules[0].timezone: 'Mars/Base'",
        "queues.q.schedules[0].missed: 'maybe'",
        "queues.q.schedules[1].catch_up_seconds: 600 must be below the queue's "
        "unique_window_seconds (600)",
        "queues.q.schedules[1].priority: 0 is outside",
        "queues.q.schedules[1].colour: unknown key",
        "queues.q.schedules[3].name: 'twice' is used twice",
    ):
        assert expected in text, text


# ---------------------------------------------------------------- slots and policies


def test_each_pass_enqueues_the_slots_since_the_last_with_the_slot_in_the_body(store):
    run = runner(store, every_second(missed="skip"))
    assert run.run_once(T0).enqueued == ON_TIME_SECONDS  # the on-time slots of the first pass
    assert run.run_once(T0 + 0.4).enqueued == 0
    assert run.run_once(T0 + 3.2).enqueued == 3
    assert bodies(store) == ticks(T0 - ON_TIME_SECONDS, T0 + 3.2)


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("skip", lambda down, up: ticks(up - ON_TIME_SECONDS, up)),
        ("latest", lambda down, up: ticks(up - ON_TIME_SECONDS - 1, up)),
        ("all", ticks),
    ],
)
def test_missed_slots_follow_the_policy(store, policy, expected):
    run = runner(store, every_second(missed=policy))
    run.run_once(T0)
    before = set(bodies(store))
    up = T0 + 100  # the server was down for 100 s
    run.run_once(up)
    assert sorted(set(bodies(store)) - before) == expected(T0, up)


def test_slots_older_than_the_catch_up_horizon_are_never_enqueued(store):
    run = runner(store, every_second(missed="all", catch_up_seconds=30))
    run.run_once(T0)
    assert bodies(store) == ticks(T0 - 30, T0)
    run.run_once(T0 + 1000)
    assert bodies(store) == ticks(T0 - 30, T0) + ticks(T0 + 970, T0 + 1000)


def test_a_slot_that_failed_to_enqueue_is_tried_again_next_pass(store):
    run = runner(store, Schedule(name="m", cron="* * * * *", body="m {slot}", missed="all"))
    store.delete_queue(Q)
    assert run.run_once(T0 + 1).failed == 60  # the last hour's minute slots
    store.create_queue(Q)
    counts = run.run_once(T0 + 2)
    assert (counts.enqueued, counts.failed) == (60, 0)
    assert run.run_once(T0 + 3).enqueued == 0


def test_a_changed_schedule_starts_afresh(store):
    schedules = [every_second(missed="skip")]
    run = ScheduleRunner(store, lambda: [(Q, 86_400.0, schedules)])
    run.run_once(T0)
    schedules[0] = every_second(missed="skip", priority=2)
    counts = run.run_once(T0 + 1)
    # the new schedule has not run here: its on-time slots are tried, the old ones' keys hold
    assert (counts.enqueued, counts.deduplicated) == (1, ON_TIME_SECONDS - 1)


def test_views_list_the_next_runs_in_the_schedules_time_zone(store):
    nightly = Schedule(name="n", cron="0 3 * * *", timezone="Europe/Berlin", body="x")
    [view] = runner(store, nightly).views(None, 3, T0)
    assert view.queue == Q and view.name == "n"
    assert [datetime.fromtimestamp(ms / 1000, UTC).hour for ms in view.next_runs_ms] == [2] * 3
    assert runner(store, nightly).views("other", 3, T0) == []


# ---------------------------------------------------------------- several servers


def test_three_servers_enqueue_every_slot_once_over_30_seconds(tmp_path):
    """Three runners, each with its own store on the same shard files (three servers), driven
    by one injected clock with jitter, one of them down for 10 s in the middle: every slot of
    an every-second schedule is stored exactly once."""
    options = SQLiteBackend.parse_options({"data_dir": str(tmp_path)}, "backend")
    specs = [SQLiteShardSpec(name="a"), SQLiteShardSpec(name="b")]
    stores = [
        ShardedBackend(SQLiteBackend(options, StorageLimits()), specs, num_priorities=3)
        for _ in range(3)
    ]
    try:
        stores[0].create_queue(Q)
        schedule = every_second(missed="skip", catch_up_seconds=5)
        runners = [runner(store, schedule) for store in stores]
        rng = random.Random(7)
        now = T0
        while now < T0 + 30:
            now += 0.25
            for i, run in enumerate(runners):
                if i == 2 and T0 + 10 < now < T0 + 20:
                    continue  # server 3 is down
                if rng.random() < 0.7:
                    run.run_once(now + rng.uniform(-0.2, 0.2))  # clock skew per pass
        got = bodies(stores[0])
        assert len(got) == len(set(got))
        assert set(ticks(T0, T0 + 29.5)) <= set(got)
        assert set(got) <= set(ticks(T0 - 6, T0 + 30.5))
    finally:
        for store in stores:
            store.close()
