"""Recent storage calls per shard for the admin API: latency percentiles over the last calls,
call and error counts, and the last few error messages with their time.

Fed by the sharded store's observers (`ShardedBackend.call_observer` for every call attempt,
`failure_observer` for each failed one), so it sees exactly what the shard-call metrics see.
Bounded: a fixed ring of latencies and a short list of errors per shard.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

#: latencies kept per shard (the percentiles cover these calls)
LATENCY_SAMPLES = 512
#: error messages kept per shard
RECENT_ERRORS = 10
#: longest error message kept (the rest is cut)
MAX_ERROR_CHARS = 500


@dataclass
class _Shard:
    latencies: array = field(default_factory=lambda: array("d", bytes(8 * LATENCY_SAMPLES)))
    filled: int = 0
    calls: int = 0
    errors: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_ERRORS))


class ShardStats:
    """Thread-safe per-shard call statistics."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}

    def call(self, shard: str, seconds: float, ok: bool) -> None:
        with self._lock:
            stats = self._shards.get(shard)
            if stats is None:
                stats = self._shards[shard] = _Shard()
            stats.latencies[stats.calls % LATENCY_SAMPLES] = seconds
            stats.calls += 1
            stats.filled = min(LATENCY_SAMPLES, stats.filled + 1)
            if not ok:
                stats.errors += 1

    def failure(self, shard: str, error: BaseException) -> None:
        text = str(error)[:MAX_ERROR_CHARS]
        with self._lock:
            stats = self._shards.get(shard)
            if stats is None:
                stats = self._shards[shard] = _Shard()
            stats.recent.append({"at_ms": int(self._clock() * 1000), "message": text})

    def report(self, shard: str) -> dict:
        """{calls, errors, latency_ms: {p50, p99, max, samples}, recent_errors: [...]} (counts
        since the server started; latencies over the last LATENCY_SAMPLES calls)."""
        with self._lock:
            stats = self._shards.get(shard) or _Shard()
            values = sorted(stats.latencies[: stats.filled])
            return {
                "calls": stats.calls,
                "errors": stats.errors,
                "latency_ms": {
                    "samples": len(values),
                    "p50": _percentile(values, 0.50),
                    "p99": _percentile(values, 0.99),
                    "max": round(values[-1] * 1000, 3) if values else None,
                },
                "recent_errors": list(reversed(stats.recent)),  # newest first
            }


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return round(sorted_values[index] * 1000, 3)
