"""pinlater.storage.steps.in_steps: the one loop every backend's big deletes go through."""

from __future__ import annotations

from pinlater.storage.steps import in_steps


class Table:
    """`available` jobs; step(n) deletes up to n of them and records what it was asked."""

    def __init__(self, available: int):
        self.available = available
        self.asked: list[int] = []

    def step(self, allowed: int) -> int:
        self.asked.append(allowed)
        deleted = min(allowed, self.available)
        self.available -= deleted
        return deleted


def test_a_limit_past_one_step_is_met_exactly_in_bounded_steps():
    table = Table(10**6)
    assert in_steps(4500, table.step, size=2000) == 4500
    assert table.asked == [2000, 2000, 500]


def test_a_short_step_means_nothing_is_left():
    table = Table(3000)
    assert in_steps(10**6, table.step, size=2000) == 3000
    assert table.asked == [2000, 2000]


def test_no_limit_deletes_everything_and_a_zero_limit_still_runs_one_empty_step():
    table = Table(4000)
    assert in_steps(None, table.step, size=2000) == 4000
    assert table.asked == [2000, 2000, 2000]
    empty = Table(10)
    assert in_steps(0, empty.step, size=2000) == 0
    assert empty.asked == [0]  # the step still checks that the queue exists


def test_without_until_short_every_step_runs_and_pauses_come_between_steps():
    table = Table(100)  # e.g. chunks of listed ids, most of which moved on meanwhile
    pauses: list[float] = []
    assert in_steps(4500, table.step, size=2000, until_short=False, pause=pauses.append) == 100
    assert len(table.asked) == 3 and len(pauses) == 2
    assert all(p >= 0 for p in pauses)
