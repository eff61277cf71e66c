"""What the handler's getSchedules answers, as plain values: the operating layer
(`pinlater.ops.schedules`) computes it, the handler only converts it to the wire."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScheduleView:
    """One configured schedule and its next run times (epoch ms, ascending)."""

    queue: str
    name: str
    cron: str
    timezone: str
    missed: str
    catch_up_seconds: float
    priority: int
    attempts: int
    next_runs_ms: tuple[int, ...]
