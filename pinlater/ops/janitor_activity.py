"""What the janitor did lately, for the admin API: the last passes (start, duration, counts,
the queues that had work, the error of a pass that raised) and totals since the server started.

The composition root runs `JanitorActivity.run` as the janitor's periodic duty instead of
`Janitor.run_once` directly, and reports per-queue counts through `queue_counts` (the same
callback that feeds the janitor metrics).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: passes remembered
RECENT_RUNS = 20
#: queues listed per pass (the busiest first)
QUEUES_PER_RUN = 50


class JanitorActivity:
    """Thread-safe record of janitor passes."""

    def __init__(self, run_once: Callable[[], Any], clock: Callable[[], float] = time.time):
        self._run_once = run_once
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: deque[dict] = deque(maxlen=RECENT_RUNS)
        self._totals: dict[str, int] = {}
        self._current: dict[str, dict[str, int]] | None = None
        self.passes = 0

    def run(self) -> Any:
        """One janitor pass, recorded (an exception is recorded and raised again)."""
        started = self._clock()
        with self._lock:
            self._current = {}
        error = None
        counts: Any = None
        try:
            counts = self._run_once()
            return counts
        except Exception as exc:
            error = str(exc)[:500]
            raise
        finally:
            self._finish(started, counts, error)

    def queue_counts(self, queue: str, counts: Any) -> None:
        """Add what the janitor just did on one (shard, queue)."""
        values = _as_dict(counts)
        with self._lock:
            if self._current is None:
                return
            mine = self._current.setdefault(queue, {})
            for key, value in values.items():
                mine[key] = mine.get(key, 0) + value

    def _finish(self, started: float, counts: Any, error: str | None) -> None:
        ended = self._clock()
        values = _as_dict(counts) if counts is not None else {}
        with self._lock:
            queues = self._current or {}
            self._current = None
            busiest = sorted(queues.items(), key=lambda kv: -sum(kv[1].values()))
            self._runs.append(
                {
                    "started_at_ms": int(started * 1000),
                    "seconds": round(ended - started, 3),
                    "counts": values,
                    "queues": dict(busiest[:QUEUES_PER_RUN]),
                    "queues_with_work": len(queues),
                    "error": error,
                }
            )
            for key, value in values.items():
                self._totals[key] = self._totals.get(key, 0) + value
            self.passes += 1

    def report(self) -> dict:
        """{"passes", "totals", "runs": newest first}."""
        with self._lock:
            return {
                "passes": self.passes,
                "totals": dict(self._totals),
                "runs": list(reversed(self._runs)),
            }


def _as_dict(counts: Any) -> dict[str, int]:
    if dataclasses.is_dataclass(counts) and not isinstance(counts, type):
        return {k: int(v) for k, v in dataclasses.asdict(counts).items()}
    return {}
