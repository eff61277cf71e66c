"""QueueRateLimiter / TokenBucket on a fake clock: no sleeping, exact arithmetic."""

from __future__ import annotations

import pytest

from pinlater.common.token_bucket import TokenBucket
from pinlater.ops.rate_limiter import QueueRateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def limiter(clock: Clock, rates: dict[str, float], servers: int = 1) -> QueueRateLimiter:
    rl = QueueRateLimiter(clock)
    rl.configure(rates, servers)
    return rl


def test_queue_without_a_rate_is_unlimited(clock):
    rl = limiter(clock, {"other": 1})
    assert rl.allowance("free", 500) == 500
    rl.charge("free", 10_000)
    assert rl.allowance("free", 500) == 500


def test_bucket_starts_with_one_second_of_tokens_and_caps_the_dequeue_size(clock):
    rl = limiter(clock, {"q": 10})
    assert rl.allowance("q", 100) == 10
    assert rl.allowance("q", 3) == 3


def test_dequeue_is_refused_only_once_the_handed_out_jobs_emptied_the_bucket(clock):
    rl = limiter(clock, {"q": 10})
    rl.charge("q", 10)
    assert rl.allowance("q", 5) == 0
    clock.now += 0.1  # one token back
    assert rl.allowance("q", 5) == 1


def test_an_empty_dequeue_costs_nothing_unlike_the_original(clock):
    # the original charged the requested limit: 100 on a 1/s queue meant 100 s of refusals
    rl = limiter(clock, {"q": 1})
    for _ in range(50):
        assert rl.allowance("q", 100) == 1
        rl.charge("q", 0)


def test_concurrent_overdraw_is_paid_back_before_the_next_dequeue(clock):
    rl = limiter(clock, {"q": 10})
    first, second = rl.allowance("q", 10), rl.allowance("q", 10)
    rl.charge("q", first)
    rl.charge("q", second)  # both saw 10: the bucket is 10 in debt
    clock.now += 1.0
    assert rl.allowance("q", 10) == 0  # back to 0 tokens: still refused
    clock.now += 0.5
    assert rl.allowance("q", 10) == 5


def test_fractional_rate_hands_out_one_job_per_interval(clock):
    rl = limiter(clock, {"q": 0.25})
    rl.charge("q", rl.allowance("q", 10))  # the initial token
    assert rl.allowance("q", 10) == 0  # exactly empty: refused
    clock.now += 0.1
    assert rl.allowance("q", 10) == 1  # some credit: one job, leaving the bucket in debt
    rl.charge("q", 1)
    clock.now += 3.8
    assert rl.allowance("q", 10) == 0
    clock.now += 0.2
    assert rl.allowance("q", 10) == 1


def test_zero_pauses_the_queue(clock):
    rl = limiter(clock, {"q": 0})
    clock.now += 3600
    assert rl.allowance("q", 1) == 0
    assert rl.paused("q")


def test_long_run_rate_holds_for_greedy_consumers(clock):
    rl = limiter(clock, {"q": 7.5})
    handed = 0
    for _ in range(10_000):  # 100 s in 10 ms steps, a dequeue of up to 50 per step
        clock.now += 0.01
        n = rl.allowance("q", 50)
        rl.charge("q", n)
        handed += n
    assert 750 <= handed <= 750 + 7.5 + 1  # rate x time, plus the initial bucket


def test_server_set_share_divides_the_rate(clock):
    rl = limiter(clock, {"q": 30}, servers=3)
    assert rl.shares() == {"q": 10}
    assert rl.allowance("q", 100) == 10


def test_reconfigure_keeps_the_tokens_instead_of_granting_a_new_burst(clock):
    rl = limiter(clock, {"q": 10})
    rl.charge("q", 10)
    rl.configure({"q": 20}, 1)
    assert rl.allowance("q", 100) == 0
    clock.now += 0.5
    assert rl.allowance("q", 100) == 10


def test_lowering_the_rate_clips_stored_tokens(clock):
    rl = limiter(clock, {"q": 100})
    rl.configure({"q": 2}, 1)
    assert rl.allowance("q", 100) == 2


def test_queue_removed_from_the_config_becomes_unlimited(clock):
    rl = limiter(clock, {"q": 0})
    rl.configure({}, 1)
    assert rl.allowance("q", 7) == 7
    assert rl.shares() == {}


def test_servers_must_be_positive(clock):
    with pytest.raises(ValueError):
        QueueRateLimiter(clock).configure({"q": 1}, 0)


def test_token_bucket_capacity_is_at_least_one_job():
    assert TokenBucket(0.1, 0.0).capacity == 1.0
    assert TokenBucket(50, 0.0).capacity == 50.0
