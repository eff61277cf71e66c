"""The background check that keeps each partitioned queue's holders exact: which shards outside
its placement still hold jobs of it (pinlater/storage/placement.py explains why reads visit
them, and why they are assumed to until a check says otherwise).

Per partitioned queue and shard outside its placement, at most 8 counts capped at 1 (pending,
in progress, then succeeded and failed; runnable and future), stopping at the first that
finds a job: 7 shards x 8 = 56 tiny counts per queue per pass for a 1-partition queue on 8
shards with nothing left to drain. A shard that is down or does not answer keeps what it was.
Run every `sharding.placement_check_seconds`, and at start (until the first pass every shard
outside the placement is read).
"""

from __future__ import annotations

import logging

from pinlater.errors import PinLaterError, QueueNotFound
from pinlater.storage.models import JobState
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)

#: (state, future) counted for "holds jobs a dequeue must see", then for "holds any job"
OPEN = [(JobState.PENDING, False), (JobState.PENDING, True)] + [
    (JobState.IN_PROGRESS, False),
    (JobState.IN_PROGRESS, True),
]
DONE = [(s, f) for s in (JobState.SUCCEEDED, JobState.FAILED) for f in (False, True)]


class PlacementCheck:
    def __init__(self, store: ShardedBackend):
        self.store = store
        #: checks applied since start (tests and the log)
        self.passes = 0

    def run_once(self) -> None:
        for queue, generation, outside in self.store.placement.to_check():
            seen: dict[str | None, list[str]] = {"open": [], "done": [], "unknown": [], None: []}
            for name in outside:
                seen[self._holds(name, queue)].append(name)
            active, held, unknown = seen["open"], seen["done"], seen["unknown"]
            if self.store.placement.observed(queue, generation, active, held, unknown):
                self.passes += 1

    def _holds(self, name: str, queue: str) -> str | None:
        """ "open" (pending or in-progress jobs), "done" (others only), None (no job),
        "unknown" (the shard is down or did not answer)."""
        if not self.store.health.is_healthy(name):
            return "unknown"
        priorities = list(range(1, self.store.num_priorities + 1))
        try:
            for found, checks in (("open", OPEN), ("done", DONE)):
                for state, future in checks:
                    if self.store.call(name, _count(queue, state, priorities, future)):
                        return found
        except QueueNotFound:
            return None
        except PinLaterError as exc:
            log.debug("placement check of %s on shard %s failed: %s", queue, name, exc)
            return "unknown"
        return None


def _count(queue: str, state: JobState, priorities: list[int], future: bool):
    """A count capped at 1, its arguments bound now."""
    return lambda shard: shard.count(queue, state, priorities, future, 1, None)
