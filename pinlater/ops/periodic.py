"""The one background-thread shape of the server: run a duty every `interval` seconds.

The janitor, the queue depth refresh, shard maintenance and the queue-config watcher are each a
duty (a callable doing one pass) run by a `Periodic`; the composition root (`pinlater.app`)
builds them. A pass that raises is logged and counted, and the next pass runs on schedule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic(threading.Thread):
    """Calls `duty()` every `interval` seconds (first at once when `run_at_start`, else after
    one interval) until `stop()`. `interval` may be a callable, asked before each wait (a duty
    spread over ticks, `pinlater.ops.sweep.Sweep.wait_seconds`). `on_failure(name)` is told of
    every pass that raised."""

    def __init__(
        self,
        name: str,
        interval: float | Callable[[], float],
        duty: Callable[[], object],
        *,
        run_at_start: bool = False,
        on_failure: Callable[[str], None] | None = None,
    ):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.duty = duty
        self.run_at_start = run_at_start
        self._on_failure = on_failure
        self._stopping = threading.Event()

    def run(self) -> None:
        if self.run_at_start and not self._stopping.is_set():
            self._pass()
        while not self._stopping.wait(self._wait()):
            self._pass()

    def _wait(self) -> float:
        return self.interval() if callable(self.interval) else self.interval

    def _pass(self) -> None:
        try:
            self.duty()
        except Exception:
            log.exception("%s: pass failed", self.name)
            if self._on_failure is not None:
                self._on_failure(self.name)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end and wait up to `timeout` for the pass in progress (a no-op
        from the thread itself or before it was started)."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
