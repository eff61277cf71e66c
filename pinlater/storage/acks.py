"""Acks as storage applies them: groups of acks that one statement (or one Lua group) applies.

Acks of one request that share outcome, priority, appended status, retry delay and claim match
differ only in the job, so storage applies them together: one `UPDATE ... WHERE local_id IN
(...)` on SQL, one argument group of `ack.lua` on Redis. A worker acks the batch it dequeued with
one claim, so the usual request is one group.

Groups keep the request's order for every job: an ack joins the open group of its outcome and
priority only when it shares that group's key, else it opens a new group after it. Successes
come before failures (as `Shard.ack` applies them), and the order between priorities does not
matter (different priorities are different jobs). So a job acked twice in one request sees the
first of its acks applied and the second no-op, exactly as acks applied one by one would.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from pinlater.storage.models import Ack, ClaimMatch


class AckOutcome(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class AckGroup:
    """Acks applied together: same outcome, priority, status, delay and claim match."""

    outcome: AckOutcome
    priority: int
    append_status: str
    #: milliseconds before a failed job with attempts left runs again (never negative)
    retry_delay_ms: int
    match: ClaimMatch
    local_ids: tuple[int, ...]


_Key = tuple[int, str, int, ClaimMatch]  # priority, status, delay, claim match


def group_acks(succeeded: Sequence[Ack], failed: Sequence[Ack]) -> list[AckGroup]:
    """The request's acks in groups, successes first, each job's acks in request order."""
    groups: list[AckGroup] = []
    for outcome, acks in ((AckOutcome.SUCCESS, succeeded), (AckOutcome.FAILURE, failed)):
        open_runs: dict[int, tuple[_Key, list[int]]] = {}  # priority -> its last run
        runs: list[tuple[_Key, list[int]]] = []
        for ack in acks:
            key = (ack.priority, ack.append_status or "", max(ack.retry_delay_ms, 0), ack.match)
            run = open_runs.get(ack.priority)
            if run is None or run[0] != key:
                run = open_runs[ack.priority] = (key, [])
                runs.append(run)
            run[1].append(ack.local_id)
        groups += [
            AckGroup(outcome, priority, status, delay, match, tuple(ids))
            for (priority, status, delay, match), ids in runs
        ]
    return groups
