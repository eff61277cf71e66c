"""Refused admin passwords are answered late, without holding a thread.

The password guard refuses a flood of guesses before any hashing, but answering each refusal at
once still lets a flooding client send the next guess at once: 32 guessing connections made
~5,000 refused calls a second, and serving them took the CPU an honest client's enqueue needed
(p99 15x its quiet value on 2 cores). Answering a refusal after `delay` seconds makes each
connection's guesses cost at most one call per `delay`, so a flood's share of the server is
bounded by its connections (themselves capped per client address) instead of its speed.

The delayed answer is a `Deferred` the transport sends when it resolves: no handler thread waits.
One timer thread resolves them in due order. At most `max_pending` wait; past that a refusal is
answered at once (what a flood of more connections than that would get anyway).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from pinlater.errors import PinLaterError
from pinlater.handler.longpoll import Deferred

MAX_PENDING = 10_000


class DelayedRefusal(Deferred):
    """A refusal to send later; `error` is the PinLaterError it answers (for the observer)."""

    def __init__(self, error: PinLaterError) -> None:
        super().__init__()
        self.error = error


class Tarpit:
    """Resolves delayed refusals when due, on one daemon thread; thread-safe."""

    def __init__(
        self,
        delay: float,
        to_wire: Callable[[PinLaterError], BaseException],
        *,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delay, self._to_wire, self.max_pending = delay, to_wire, max_pending
        self._clock = clock
        self._due: list[tuple[float, int, DelayedRefusal]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def refuse(self, error: PinLaterError) -> DelayedRefusal | None:
        """A refusal answered after the delay, or None when it must be raised at once (no
        delay configured, too many waiting, or closed)."""
        if self.delay <= 0:
            return None
        refusal = DelayedRefusal(error)
        with self._wake:
            if self._closed or len(self._due) >= self.max_pending:
                return None
            heapq.heappush(self._due, (self._clock() + self.delay, next(self._order), refusal))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tarpit", daemon=True)
                self._thread.start()
            self._wake.notify()
        return refusal

    def pending(self) -> int:
        with self._wake:
            return len(self._due)

    def close(self) -> None:
        """Answer every waiting refusal now and stop the timer thread."""
        with self._wake:
            self._closed = True
            due, self._due = self._due, []
            self._wake.notify()
        for _, _, refusal in due:
            refusal.resolve(error=self._to_wire(refusal.error))

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._due or self._due[0][0] > self._clock()):
                    timeout = self._due[0][0] - self._clock() if self._due else None
                    self._wake.wait(timeout)
                if self._closed:
                    return
                _, _, refusal = heapq.heappop(self._due)
            refusal.resolve(error=self._to_wire(refusal.error))
