"""BodyFilter: one request's regex work is bounded in CPU, wall-clock time, bodies and bytes, the
per-body budget is thread CPU time (so load cannot make a cheap pattern fail), and once stopped
the filter stays stopped for every thread of the request (hostile load, items 6 and 7).

Real `regex` engine throughout; `Starved` stands in for the engine only where a test needs an
attempt that times out without having had the CPU, which real load produces only by chance.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from pinlater.config import LimitsConfig
from pinlater.errors import InvalidRequest
from pinlater.handler.body_filter import BodyFilter, RegexBudget, compile_body_filter
from pinlater.storage.errors import BodyFilterStopped

SLOW = "(.*a){5}x"
#: ~2-20 ms of CPU for SLOW, depending on the machine
SLOW_BODY = b"a" * 90


def limits(**overrides) -> LimitsConfig:
    return dataclasses.replace(LimitsConfig(), **overrides)


def test_no_pattern_no_filter_and_bad_input_names_the_field():
    assert compile_body_filter(None, limits()) is None
    assert compile_body_filter("", limits()) is None
    with pytest.raises(InvalidRequest, match="bodyRegexToMatch: must be valid UTF-8 text"):
        compile_body_filter(b"abc", limits())
    with pytest.raises(InvalidRequest, match="bodyRegexToMatch: longer than 10 characters"):
        compile_body_filter("a" * 11, limits(max_regex_length=10))
    with pytest.raises(InvalidRequest, match=r"limits\.max_regex_size"):
        compile_body_filter("a{1000}", limits(max_regex_size=500))


def test_the_filter_searches_the_raw_bytes_unanchored():
    matches = compile_body_filter("job_body_1.", limits())
    assert matches(b"xx job_body_12") is True
    assert matches(b"job_body_2") is False
    assert matches(b"\xff\x00job_body_1\xfe") is True
    assert compile_body_filter("^a$", limits())(b"a") is True


def test_one_body_over_its_cpu_budget_stops_the_request():
    matches = compile_body_filter("(x+x+)+y", limits(regex_timeout_seconds=0.02))
    started = time.thread_time()
    with pytest.raises(BodyFilterStopped) as stopped:
        matches(b"x" * 5000)
    assert time.thread_time() - started < 0.5
    assert "one body needed more than 0.02 s of CPU (limits.regex_timeout_seconds" in str(
        stopped.value
    )
    assert "simplify the pattern" in str(stopped.value)
    with pytest.raises(BodyFilterStopped, match="one body needed more"):
        matches(b"cheap")  # sticky: the request is over


def test_the_request_cpu_budget_bounds_many_cheap_enough_bodies():
    budget_seconds = 0.2
    matches = compile_body_filter(SLOW, limits(regex_request_cpu_seconds=budget_seconds))
    started_cpu, started = time.thread_time(), time.monotonic()
    with pytest.raises(BodyFilterStopped) as stopped:
        for _ in range(100_000):
            matches(SLOW_BODY)
    assert time.thread_time() - started_cpu < budget_seconds + 0.1
    assert time.monotonic() - started < 10 * budget_seconds + 2
    message = str(stopped.value)
    assert "limits.regex_request_cpu_seconds = 0.2" in message, message
    assert "s CPU /" in message and "bodies /" in message and "narrow the query" in message
    assert matches.budget.cpu_seconds == pytest.approx(budget_seconds, abs=0.05)


def test_the_cpu_a_thread_uses_between_bodies_counts_for_the_request():
    """The request budget covers the scan, paging included: one clock read per body charges
    the CPU since the thread's previous body."""
    matches = compile_body_filter("needle", limits())
    matches(b"hay")
    until = time.thread_time() + 0.05
    while time.thread_time() < until:
        pass  # what a backend spends fetching the next page
    matches(b"hay")
    assert 0.05 <= matches.budget.cpu_seconds < 0.1


def test_the_scan_cap_counts_bodies_over_the_whole_request():
    matches = compile_body_filter("needle", limits(regex_scan_cap=5))
    for _ in range(5):
        assert matches(b"hay") is False
    with pytest.raises(BodyFilterStopped, match=r"5 bodies / 15 bytes scanned: reached limits\."):
        matches(b"hay")
    assert matches.budget.bodies == 5


def test_the_byte_budget_counts_body_bytes():
    matches = compile_body_filter("needle", limits(regex_scan_bytes=2048))
    assert matches(b"x" * 2000) is False
    with pytest.raises(BodyFilterStopped, match=r"limits\.regex_scan_bytes = 2,048 bytes"):
        matches(b"x" * 49)
    with pytest.raises(BodyFilterStopped, match="regex_scan_bytes"):
        matches(b"")  # stays stopped


def test_the_wall_clock_budget_runs_from_when_the_filter_is_built():
    now = [100.0]
    settings = limits(regex_request_seconds=5)
    budget = RegexBudget(settings, clock=lambda: now[0])
    matches = BodyFilter(compile_body_filter("a", settings).compiled, 0.05, budget)
    assert matches(b"a") is True
    now[0] += 5.01
    with pytest.raises(BodyFilterStopped, match=r"reached limits\.regex_request_seconds = 5"):
        matches(b"a")


def test_the_engine_timeout_of_an_attempt_never_exceeds_the_per_body_budget():
    seen: list[float] = []

    class Recording:
        def search(self, body, timeout):
            seen.append(timeout)

    budget = RegexBudget(limits(regex_request_cpu_seconds=0.03))
    matches = BodyFilter(Recording(), 0.05, budget)
    matches(b"x")
    assert seen == [pytest.approx(0.03, abs=0.001)]  # the request's CPU left is smaller
    budget.charge(0.025)
    matches(b"x")
    assert seen[-1] <= 0.0051


class Starved:
    """An engine stand-in whose first `misses` attempts time out without using CPU (what a
    thread waiting for the GIL sees), then a real search."""

    def __init__(self, pattern: str, misses: int):
        self.real = compile_body_filter(pattern, limits()).compiled
        self.misses = misses
        self.attempts = 0

    def search(self, body, timeout):
        self.attempts += 1
        if self.attempts <= self.misses:
            time.sleep(timeout)  # the window passes on the wall clock, not on this CPU
            raise TimeoutError("regex timed out")
        return self.real.search(body, timeout=timeout)


def test_an_attempt_that_timed_out_without_the_cpu_is_retried():
    engine = Starved("zzz", misses=3)
    matches = BodyFilter(engine, 0.01, RegexBudget(limits()))
    assert matches(b"abc zzz") is True
    assert engine.attempts == 4
    assert matches.budget.cpu_seconds < 0.01


def test_starvation_ends_at_the_request_wall_clock_budget():
    engine = Starved("zzz", misses=10**6)
    matches = BodyFilter(engine, 0.01, RegexBudget(limits(regex_request_seconds=0.2)))
    started = time.monotonic()
    with pytest.raises(BodyFilterStopped, match="regex_request_seconds"):
        matches(b"zzz")
    assert time.monotonic() - started < 0.2 + 0.1


class HalfFed:
    """An engine stand-in that computes for 40% of each window, then times out: a body that
    needs more CPU than a loaded server gives its thread within one window."""

    def __init__(self):
        self.attempts = 0

    def search(self, body, timeout):
        self.attempts += 1
        until = time.thread_time() + 0.4 * timeout
        while time.thread_time() < until:
            pass
        raise TimeoutError("regex timed out")


def test_starved_attempts_of_one_body_end_after_three_budgets_of_cpu():
    engine = HalfFed()
    matches = BodyFilter(engine, 0.01, RegexBudget(limits()))
    with pytest.raises(BodyFilterStopped, match=r"one body needed more than 0\.01 s of CPU"):
        matches(b"x")
    assert engine.attempts == 8  # 8 x 0.004 s >= 3 x 0.01 s
    assert 0.03 <= matches.budget.cpu_seconds < 0.04


def busy_python(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


def test_a_trivial_pattern_never_fails_while_threads_fight_for_the_gil():
    """8 threads evaluating `zzz` on 1 KiB bodies with a 5 ms per-body budget while 4 threads
    spin in Python: with a wall-clock budget some evaluations time out waiting for the GIL."""
    body = bytes(range(97, 122)) * 41
    failures: list[str] = []
    stop = threading.Event()

    def evaluate() -> None:
        matches = compile_body_filter("zzz", limits(regex_timeout_seconds=0.005))
        try:
            for _ in range(2000):
                assert matches(body) is False
        except BodyFilterStopped as exc:
            failures.append(exc.message)

    spinners = [threading.Thread(target=busy_python, args=(stop,)) for _ in range(4)]
    workers = [threading.Thread(target=evaluate) for _ in range(8)]
    for thread in spinners + workers:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    for thread in spinners:
        thread.join()
    assert failures == []


def test_threads_of_one_request_share_its_budget_and_all_stop():
    matches = compile_body_filter("needle", limits(regex_scan_cap=1000))
    outcomes: list[str] = []
    lock = threading.Lock()

    def scan() -> None:
        examined = 0
        try:
            while True:
                matches(b"hay" * 10)
                examined += 1
        except BodyFilterStopped:
            with lock:
                outcomes.append(f"stopped after {examined}")

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(outcomes) == 4
    assert matches.budget.bodies == 1000
    assert sum(int(o.split()[-1]) for o in outcomes) == 1000
