"""Big deletes in bounded steps (the contract's DELETE_STEP rule), written once for every backend.

A delete of many jobs is a series of small ones, each its own transaction or script call, so
the storage serves other callers in between: one SQLite transaction deleting 800k jobs held the
shard's write lock 12.9 s, and one Redis script deleting a million blocks the whole instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pinlater.storage.contract import DELETE_STEP


def in_steps(
    limit: int | None,
    step: Callable[[int], int],
    *,
    until_short: bool = True,
    pause: Callable[[float], None] | None = None,
    size: int = DELETE_STEP,
) -> int:
    """Delete up to `limit` jobs (None: all there are) with `step(n)`, which deletes up to n (at
    most `size`) in one transaction and returns how many it did; the total. Runs at most
    ceil(limit / size) steps, and with `until_short` stops after a step that did fewer than
    allowed (nothing is left). `pause(seconds the step took)` runs between steps. A limit of 0
    or less still runs one step of 0 (which checks that the queue exists)."""
    done = steps = 0
    while True:
        allowed = size if limit is None else max(0, min(size, limit - done))
        started = time.monotonic()
        deleted = step(allowed)
        done += deleted
        steps += 1
        if (until_short and deleted < allowed) or (limit is not None and steps * size >= limit):
            return done
        if pause is not None:
            pause(time.monotonic() - started)
