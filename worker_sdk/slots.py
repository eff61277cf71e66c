"""How many jobs a Worker holds at once, from how fast its handlers are.

A worker with `threads` handler threads could ask for exactly the free threads at each dequeue:
no claimed job ever waits locally, but a fast handler then gets a handful of jobs per round
trip and the worker spends its time on calls (4 threads drained no-op jobs at an eighth of the
rate one client with batches of 100 reaches). So the worker also holds jobs *ahead* of its
threads (prefetch), as many as its threads can start within `prefetch_wait` seconds at the
handlers' measured speed:

    limit = threads + min(max_prefetch, threads * prefetch_wait / handler_seconds,
                          prefetch_bytes / mean body size)

`handler_seconds` rises at once with a slow handler (the slowest of the last completion and the
longest-running handler now, against a smoothed mean that only falls gradually), so a queue
whose handlers turn slow stops prefetching before the next dequeue. Before any handler has
finished nothing is prefetched, and slow handlers (prefetch_wait shorter than one job) get
exactly `threads` jobs at a time: concurrency and memory stay bounded by the knobs whatever the
queue holds.

Dequeue calls: while prefetching from a backlog (the last call came back full), up to
`max_dequeues` (4) calls may be in flight at once, each for at most half the limit, so the
round trips overlap the handlers and each other (the server answers them in parallel). One call
for the whole limit at a time left the server idle while the worker ran the batch and the
worker idle while the server fetched the next: 0.74-0.78 of the raw dequeue+ack rate on SQLite
against 1.4-1.5 with the split (scripts/bench_ceilings.py's worker line, a loaded machine).
Halves rather than quarters: calls of 250 cost MariaDB ~25% more CPU per job than calls of
1000 (10.2 vs 8.3 ms per 100 jobs), calls of 500 about the same (7.9 vs 9.1 for quarters).
Otherwise (no prefetch, or the queue ran short: an idle worker keeps one long-poll, a
rate-limited one one refusal) one call at a time. While a thread is idle a call asks for
whatever is free; otherwise it waits until at least limit / (2 x calls) is free (capped at
max_batch), so fast handlers get big batches instead of a call per finished job.

Pure arithmetic, no clock or threads of its own (the Worker passes times in), so it is tested
without sleeping.
"""

from __future__ import annotations

import math

#: weight of the newest sample in the smoothed handler time and body size
SMOOTHING = 0.1
#: dequeue calls in flight at most while prefetching
MAX_DEQUEUES = 4


class SlotController:
    """The job limit of one Worker (see the module docstring). Not thread-safe: the Worker calls
    it under its own lock."""

    def __init__(
        self,
        threads: int,
        *,
        max_prefetch: int = 1000,
        prefetch_wait: float = 0.05,
        prefetch_bytes: int = 64 * 1024 * 1024,
        max_dequeues: int = MAX_DEQUEUES,
    ):
        if min(threads, max_dequeues) < 1 or min(max_prefetch, prefetch_wait, prefetch_bytes) < 0:
            raise ValueError(
                "need threads >= 1, max_dequeues >= 1, max_prefetch >= 0, prefetch_wait >= 0, "
                "prefetch_bytes >= 0"
            )
        self.max_dequeues = max_dequeues
        self.threads = threads
        self.max_prefetch = max_prefetch
        self.prefetch_wait = prefetch_wait
        self.prefetch_bytes = prefetch_bytes
        self._handler_mean: float | None = None  # smoothed seconds per job
        self._last_handler = 0.0
        self._body_mean = 0.0

    def handler_finished(self, seconds: float) -> None:
        """A handler ran for `seconds`."""
        self.handlers_finished(1, seconds, seconds)

    def handlers_finished(self, count: int, total: float, slowest: float) -> None:
        """`count` handlers ran for `total` seconds together, the slowest for `slowest` (the
        Worker reports fast jobs in groups): the mean moves as if each had been reported, and
        the slowest of the group counts as the last completion."""
        if count < 1:
            return
        mean, self._last_handler = max(total / count, 0.0), max(slowest, 0.0)
        if self._handler_mean is None:
            self._handler_mean = mean
        else:
            weight = 1.0 - (1.0 - SMOOTHING) ** count
            self._handler_mean += weight * (mean - self._handler_mean)

    def jobs_received(self, count: int, body_bytes: int) -> None:
        """A dequeue brought `count` jobs whose bodies total `body_bytes`."""
        if count > 0:
            mean = body_bytes / count
            self._body_mean += (1.0 if not self._body_mean else SMOOTHING) * (
                mean - self._body_mean
            )

    def handler_seconds(self, longest_running: float = 0.0) -> float | None:
        """The handler time the limit plans with (None before any handler finished)."""
        if self._handler_mean is None:
            return None
        return max(self._handler_mean, self._last_handler, longest_running)

    def prefetch(self, longest_running: float = 0.0) -> int:
        """Jobs to hold beyond the threads; `longest_running` is how long the oldest running
        handler has been running (a stuck handler stops the prefetch before it finishes)."""
        seconds = self.handler_seconds(longest_running)
        if seconds is None or self.max_prefetch == 0:
            return 0
        by_time = self.threads * self.prefetch_wait / max(seconds, 1e-9)
        by_bytes = self.prefetch_bytes / self._body_mean if self._body_mean else math.inf
        return int(max(0.0, min(float(self.max_prefetch), by_time, by_bytes)))

    def limit(self, longest_running: float = 0.0) -> int:
        """Jobs the worker may hold now: running plus waiting for a thread."""
        return self.threads + self.prefetch(longest_running)

    def dequeue_size(
        self,
        held: int,
        max_batch: int,
        longest_running: float = 0.0,
        in_flight: int = 0,
        pipelined: bool = True,
    ) -> int:
        """How many jobs to ask for now, holding `held` (jobs in hand plus those asked for by
        the `in_flight` dequeue calls); 0 means wait for more to finish. `pipelined`: the last
        call came back full (a backlog), so several calls may overlap."""
        prefetch = self.prefetch(longest_running)
        calls = self.max_dequeues if prefetch and pipelined else 1
        if in_flight >= calls:
            return 0
        limit = self.threads + prefetch
        per_call = math.ceil(limit / 2) if calls > 1 else limit  # overlap: half each
        free = min(limit - held, max_batch, per_call)
        if free <= 0:
            return 0
        if held < self.threads:
            return free  # a thread is idle: feed it now
        return free if free >= min(max_batch, math.ceil(limit / (2 * calls))) else 0
