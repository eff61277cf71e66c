"""Retry policies and the --retry / duration parsers."""

from __future__ import annotations

import pytest

from worker_sdk.job import JobContext, RetryJob
from worker_sdk.models import DequeuedJob
from worker_sdk.retry import (
    ConstantRetry,
    ExponentialRetry,
    FunctionRetry,
    as_policy,
    parse_duration,
    parse_retry,
)


def ctx(allowed=10, remaining=10):
    return JobContext(None, "q", DequeuedJob("q:s1:p1:1", b"", allowed, remaining, "c"))


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("250ms", 0.25),
        ("1s", 1),
        ("1.5s", 1.5),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("3", 3),
        (".5", 0.5),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "-1s", "1y", "1 s 2", "abc"])
def test_parse_duration_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_attempt_number_comes_from_the_dequeue_metadata():
    assert [ctx(3, r).attempt for r in (3, 2, 1)] == [1, 2, 3]
    assert ctx(None, None).attempt == 1 and ctx(3, 1).is_last_attempt


def test_exponential_without_jitter_doubles_up_to_the_cap():
    policy = ExponentialRetry(base=1, max=5, jitter=0)
    assert [policy.delay(ctx(10, 10 - n), None) for n in range(5)] == [1, 2, 4, 5, 5]


def test_exponential_jitter_stays_within_its_share():
    policy = ExponentialRetry(base=8, max=100, jitter=0.5)
    delays = [policy.delay(ctx(), None) for _ in range(200)]
    assert all(4 <= d <= 8 for d in delays) and len(set(delays)) > 100


def test_huge_attempt_numbers_do_not_overflow():
    assert ExponentialRetry(base=1, max=60, jitter=0).delay(ctx(10**6, 1), None) == 60


def test_parse_retry_specs():
    assert parse_retry("exponential:base=1s,max=5m") == ExponentialRetry(base=1, max=300)
    assert parse_retry("exponential:base=250ms,max=1m,factor=3,jitter=0") == ExponentialRetry(
        base=0.25, max=60, factor=3, jitter=0
    )
    assert parse_retry("constant:delay=10s") == ConstantRetry(10)
    assert parse_retry("none") == ConstantRetry(0) and parse_retry("30s") == ConstantRetry(30)


@pytest.mark.parametrize(
    "spec",
    [
        "linear:base=1s",
        "exponential:base",
        "exponential:bse=1s",
        "exponential:factor=0.5",
        "constant:delay=-1s",
    ],
)
def test_parse_retry_rejects_bad_specs(spec):
    with pytest.raises(ValueError):
        parse_retry(spec)


def test_as_policy_accepts_numbers_functions_and_policies():
    assert as_policy(None).delay(ctx(), None) == 0
    assert as_policy(7).delay(ctx(), None) == 7
    assert as_policy(lambda job, err: job.attempt * 10).delay(ctx(10, 8), None) == 30
    policy = FunctionRetry(lambda job, err: 1)
    assert as_policy(policy) is policy
    with pytest.raises(TypeError):
        as_policy("5s")


def test_retry_job_rejects_negative_delays():
    assert RetryJob(delay=0).delay == 0 and RetryJob().delay is None
    with pytest.raises(ValueError):
        RetryJob(delay=-1)
