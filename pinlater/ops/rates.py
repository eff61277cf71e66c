"""Per-queue job rates for the admin API: enqueued, dequeued and acked jobs per second over the
last minutes, from this server's own traffic.

The request path only adds to a running total per (queue, event) (`record`, one dict update
under a lock). A background duty (`sample`, every `dashboard.rate_sample_seconds`) moves the
totals into a fixed ring of samples per queue, so memory is bounded by queues x events x
samples (8 bytes each: 1,000 queues x 4 events x 60 samples ~ 2 MB) and a read never walks
requests. Why not read the Prometheus counters: a rate needs their history, which Prometheus
keeps and the server does not; and collecting the whole registry every few seconds costs more
than this tally.

Rates are per server: behind several servers, each reports the traffic it served (Prometheus
sums them across servers).
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable

#: the events counted, as `RequestObserver.on_jobs` names them
EVENTS = ("enqueued", "dequeued", "acked_succeeded", "acked_failed")
#: the windows reported by `rates`, in seconds
WINDOWS = {"1m": 60.0, "5m": 300.0}


class _Ring:
    """The last `size` per-sample job counts of one queue, one array per event."""

    __slots__ = ("counts",)

    def __init__(self, size: int):
        self.counts = [array("q", bytes(8 * size)) for _ in EVENTS]


class JobRates:
    """Running totals per (queue, event) and their sampled history. Thread-safe."""

    def __init__(
        self,
        sample_seconds: float = 5.0,
        samples: int = 60,
    ):
        self.sample_seconds = sample_seconds
        self.samples = samples
        self._lock = threading.Lock()
        self._pending: dict[str, list[int]] = {}
        self._rings: dict[str, _Ring] = {}
        self._taken = 0  # samples taken so far (the ring is partly empty before `samples`)

    def record(self, event: str, queue: str, count: int) -> None:
        """Add `count` jobs of `event` on `queue` (events outside EVENTS are ignored)."""
        if count <= 0 or event not in _INDEX:
            return
        index = _INDEX[event]
        with self._lock:
            totals = self._pending.get(queue)
            if totals is None:
                totals = self._pending[queue] = [0] * len(EVENTS)
            totals[index] += count

    def sample(self, known_queues: Iterable[str] | None = None) -> None:
        """Close the current sample: every queue's counts since the last one go into its ring.
        When `known_queues` is given, a queue outside it whose ring holds nothing any more (a
        deleted queue, once its history has passed) is forgotten; one with counts is kept, since
        the list may be older than the queue."""
        with self._lock:
            pending, self._pending = self._pending, {}
            for queue in pending:
                if queue not in self._rings:
                    self._rings[queue] = _Ring(self.samples)
            slot = self._taken % self.samples
            idle = [0] * len(EVENTS)
            for queue, ring in self._rings.items():
                for counts, value in zip(ring.counts, pending.get(queue, idle), strict=True):
                    counts[slot] = value
            self._taken += 1
            if known_queues is not None:
                self._forget_idle(set(known_queues))

    def _forget_idle(self, known: set[str]) -> None:
        """Drop the rings of unlisted queues that hold only zeros. Caller holds the lock."""
        for queue in [q for q in self._rings if q not in known]:
            if not any(any(counts) for counts in self._rings[queue].counts):
                del self._rings[queue]

    def tracked(self) -> set[str]:
        """The queues with a ring (memory is bounded by these)."""
        with self._lock:
            return set(self._rings)

    def rates(self, queue: str) -> dict[str, dict[str, float]]:
        """{event: {window: jobs per second}} over the samples taken (a window longer than the
        history so far is averaged over the history)."""
        with self._lock:
            ring = self._rings.get(queue)
            windows = [(name, self._window_samples(s)) for name, s in WINDOWS.items()]
            return {
                event: {
                    name: round(
                        self._last(ring.counts[index], n).sum() / (n * self.sample_seconds), 3
                    )
                    if ring is not None and n
                    else 0.0
                    for name, n in windows
                }
                for index, event in enumerate(EVENTS)
            }

    def series(self, queue: str) -> dict[str, list[float]]:
        """{event: jobs per second of each sample kept, oldest first} (for a small chart)."""
        with self._lock:
            ring = self._rings.get(queue)
            n = min(self._taken, self.samples)
            return {
                event: self._per_second(self._last(ring.counts[index], n).values())
                if ring
                else [0.0] * n
                for index, event in enumerate(EVENTS)
            }

    def _per_second(self, counts: list[int]) -> list[float]:
        if not any(counts):  # an idle queue (most of them, with many queues): no division
            return [0.0] * len(counts)
        return [round(v / self.sample_seconds, 3) for v in counts]

    def _window_samples(self, seconds: float) -> int:
        wanted = max(1, round(seconds / self.sample_seconds))
        return min(wanted, self._taken, self.samples)

    def _last(self, counts: array, n: int) -> _Slices:
        """The last `n` samples of one event's ring, oldest first, as at most two slices."""
        end = self._taken % self.samples
        if n <= end:
            return _Slices(counts[end - n : end])
        return _Slices(counts[self.samples - (n - end) :], counts[:end])


class _Slices:
    """One or two array slices read as one sequence (summed in C, no per-item Python)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: array):
        self.parts = parts

    def sum(self) -> int:
        return sum(sum(part) for part in self.parts)

    def values(self) -> list[int]:
        return [v for part in self.parts for v in part]


_INDEX = {event: i for i, event in enumerate(EVENTS)}
