"""Per-queue dequeue rate limits: a token bucket per queue, charged with the jobs handed out.

Why not the original's scheme (Guava `tryAcquire(limit)`): it charged the *requested* limit, so
a worker asking for 100 jobs on a 1 job/s queue was allowed once and then refused for 100 s even
when the queue was empty. Here a dequeue is refused only while the bucket is empty
(tokens <= 0); otherwise it may take at most `min(limit, allowance)` jobs, where the allowance is
the whole tokens in the bucket (at least 1), and afterwards the bucket is charged what was
actually handed out. Concurrent dequeues can overdraw the bucket (each sees the same
allowance); the debt is paid back before the next dequeue is allowed, so the long-run rate
holds.

The bucket holds at most one second's worth of tokens (at least 1, so fractional rates such as
0.2 jobs/s hand out one job every 5 s) and starts full. A rate of 0 pauses the queue. Queues
without a configured rate are unlimited. Changing a queue's rate keeps its current tokens
(clipped to the new capacity) instead of resetting them, so a reload cannot grant a burst.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping

from pinlater.common.token_bucket import TokenBucket


class QueueRateLimiter:
    """Token buckets for the queues that have a rate; this server's share of each rate."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._rates: dict[str, float] = {}
        self._servers = 1
        self._buckets: dict[str, TokenBucket] = {}

    def configure(self, rates: Mapping[str, float], servers: int = 1) -> None:
        """Set the cluster-wide rates (jobs/s per queue) and the number of live servers; this
        server enforces rate / servers. Queues not in `rates` become unlimited."""
        if servers < 1:
            raise ValueError("servers must be >= 1")
        now = self._clock()
        with self._lock:
            self._rates = dict(rates)
            self._servers = servers
            for queue in list(self._buckets):
                if queue not in rates:
                    del self._buckets[queue]
            for queue, rate in rates.items():
                share = rate / servers
                bucket = self._buckets.get(queue)
                if bucket is None:
                    self._buckets[queue] = TokenBucket(share, now)
                elif not math.isclose(bucket.rate, share):
                    bucket.set_rate(share, now)

    def allowance(self, queue: str, limit: int) -> int:
        """Jobs a dequeue of up to `limit` may take now (0: refuse). Unlimited queues get
        `limit`."""
        with self._lock:
            bucket = self._buckets.get(queue)
            if bucket is None:
                return limit
            return min(limit, bucket.allowance(self._clock()))

    def charge(self, queue: str, jobs: int) -> None:
        """Take `jobs` tokens (the jobs actually handed out) from the queue's bucket."""
        if jobs <= 0:
            return
        with self._lock:
            bucket = self._buckets.get(queue)
            if bucket is not None:
                bucket.charge(jobs, self._clock())

    def paused(self, queue: str) -> bool:
        with self._lock:
            bucket = self._buckets.get(queue)
            return bucket is not None and bucket.rate <= 0

    def shares(self) -> dict[str, float]:
        """This server's rate per limited queue (jobs/s)."""
        with self._lock:
            return {queue: bucket.rate for queue, bucket in self._buckets.items()}

    @property
    def servers(self) -> int:
        return self._servers
