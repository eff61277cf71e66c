"""Retry delays: how long a failed job waits before its next attempt.

The server knows only "failure + retry delay": a failure ack with `retryDelayMillis` puts the
job back to PENDING with run_after = now + delay while it has attempts left (FAILED otherwise).
A `RetryPolicy` picks that delay for a handler that raised; `RetryJob(delay)` overrides it for
one failure. Three policies cover most needs:

* `ConstantRetry(10)`: always 10 s;
* `ExponentialRetry(base=1, max=300, factor=2, jitter=0.5)`: 1 s, 2 s, 4 s ... capped at 5 min,
  each shortened by up to `jitter` of itself at random so a burst of failures does not come
  back as a burst;
* `FunctionRetry(fn)`: `fn(job, error) -> seconds` for per-job decisions.

`parse_retry("exponential:base=1s,max=5m")` builds one from the CLI's `--retry` text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from worker_sdk.job import JobContext


@runtime_checkable
class RetryPolicy(Protocol):
    """Anything with `delay(job, error) -> seconds` (a float >= 0)."""

    def delay(self, job: JobContext, error: BaseException) -> float: ...


@dataclass(frozen=True)
class ConstantRetry:
    """The same delay after every failure."""

    seconds: float = 0.0

    def __post_init__(self):
        if self.seconds < 0:
            raise ValueError("retry delay must be >= 0")

    def delay(self, job: JobContext, error: BaseException) -> float:
        return self.seconds


@dataclass(frozen=True)
class ExponentialRetry:
    """`base * factor ** (attempt - 1)` capped at `max`, then reduced by a random share of up
    to `jitter` (0 = exact, 1 = full jitter). `attempt` is the job's 1-based attempt number."""

    base: float = 1.0
    max: float = 300.0
    factor: float = 2.0
    jitter: float = 0.5

    def __post_init__(self):
        if self.base < 0 or self.max < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("need base >= 0, max >= 0, factor >= 1 and 0 <= jitter <= 1")

    def delay(self, job: JobContext, error: BaseException) -> float:
        exponent = min(max(job.attempt - 1, 0), 64)  # bounded: no float overflow
        full = min(self.max, self.base * self.factor**exponent)
        return full * (1 - self.jitter * random.random())


@dataclass(frozen=True)
class FunctionRetry:
    """Delegates to `fn(job, error) -> seconds`."""

    fn: Callable[[JobContext, BaseException], float]

    def delay(self, job: JobContext, error: BaseException) -> float:
        return float(self.fn(job, error))


def as_policy(policy: RetryPolicy | Callable | float | int | None) -> RetryPolicy:
    """Accept a policy, a plain function (job, error) -> seconds, a number of seconds, or None
    (retry at once)."""
    if policy is None:
        return ConstantRetry(0.0)
    if isinstance(policy, (int, float)):
        return ConstantRetry(float(policy))
    if isinstance(policy, RetryPolicy):
        return policy
    if callable(policy):
        return FunctionRetry(policy)
    raise TypeError(f"not a retry policy: {policy!r}")


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "": 1.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|)\s*$")


def parse_duration(text: str) -> float:
    """`250ms`, `1.5s`, `5m`, `2h`, `1d` or a bare number of seconds -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"bad duration {text!r} (examples: 250ms, 1s, 5m, 2h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


_KINDS: dict[str, tuple[type, dict[str, Callable[[str], float]]]] = {
    "constant": (ConstantRetry, {"delay": parse_duration}),
    "exponential": (
        ExponentialRetry,
        {"base": parse_duration, "max": parse_duration, "factor": float, "jitter": float},
    ),
}


def parse_retry(spec: str) -> RetryPolicy:
    """`constant:delay=10s`, `exponential:base=1s,max=5m[,factor=2][,jitter=0.5]`, `none`
    (retry at once), or a bare duration (constant)."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "none" and not rest:
        return ConstantRetry(0.0)
    if kind not in _KINDS:
        try:
            return ConstantRetry(parse_duration(spec))
        except ValueError:
            raise ValueError(
                f"unknown retry policy {spec!r} (constant:delay=10s, "
                "exponential:base=1s,max=5m, none)"
            ) from None
    cls, fields = _KINDS[kind]
    values = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in fields:
            raise ValueError(f"bad {kind} retry option {item!r} (options: {', '.join(fields)})")
        values[key.strip()] = fields[key.strip()](value)
    if cls is ConstantRetry:
        return ConstantRetry(values.get("delay", 0.0))
    return cls(**values)
