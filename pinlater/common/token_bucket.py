"""A token bucket: `rate` tokens per second, at most `capacity` held, starting full.

`allowance` is the whole tokens available (0 while the bucket is empty or the rate is 0, at
least 1 otherwise); `charge` may overdraw, and the debt is paid back by refills before the next
allowance. Not thread-safe on its own: callers hold their lock around every call.
"""

from __future__ import annotations


class TokenBucket:
    def __init__(self, rate: float, now: float, capacity: float | None = None):
        """`capacity` None holds one second's worth of tokens, at least 1 (so a fractional
        rate such as 0.2/s still grants one token every 5 s)."""
        self.rate = rate
        self._capacity = capacity
        self.tokens = self.capacity
        self._at = now

    @property
    def capacity(self) -> float:
        return self._capacity if self._capacity is not None else max(1.0, self.rate)

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = max(self._at, now)

    def allowance(self, now: float) -> int:
        """How many tokens may be taken now; 0 means refuse."""
        if self.rate <= 0:
            return 0
        self._refill(now)
        if self.tokens <= 0:
            return 0
        return max(1, int(self.tokens))

    def charge(self, tokens: float, now: float) -> None:
        self._refill(now)
        self.tokens -= tokens

    def available(self, now: float) -> float:
        """The tokens held now (negative while paying back an overdraft)."""
        self._refill(now)
        return self.tokens

    def seconds_until(self, tokens: float, now: float) -> float:
        """How long until the bucket holds `tokens` (inf at rate 0)."""
        missing = tokens - self.available(now)
        if missing <= 0:
            return 0.0
        return float("inf") if self.rate <= 0 else missing / self.rate

    def set_rate(self, rate: float, now: float) -> None:
        self._refill(now)
        self.rate = rate
        self.tokens = min(self.tokens, self.capacity)
