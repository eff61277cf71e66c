"""The names of the per-queue ledger's counters, in the order the storage keeps and reports
them. One list for the storage (pinlater.storage.ledger, which holds the balancing rule) and
the CLI (`pinlater audit`'s columns), which may not import the storage.

enqueued      jobs stored by an enqueue
deduplicated  jobs of keyed enqueues that stored nothing (their unique key was held)
dequeued      PENDING -> IN_PROGRESS (claims made by dequeues)
succeeded     IN_PROGRESS -> SUCCEEDED (success acks)
failed        IN_PROGRESS -> FAILED (failure acks with no attempt left)
retried       IN_PROGRESS -> PENDING (failure acks with attempts left)
reclaimed     IN_PROGRESS -> PENDING or FAILED (claims the janitor found expired)
deleted       jobs removed by deleteJobs
purged        jobs removed by the janitor's purge
"""

from __future__ import annotations

COUNTERS: tuple[str, ...] = (
    "enqueued",
    "deduplicated",
    "dequeued",
    "succeeded",
    "failed",
    "retried",
    "reclaimed",
    "deleted",
    "purged",
)
