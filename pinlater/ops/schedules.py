"""Periodic jobs: schedules from the queue-config file, enqueued by every server, each slot once.

    queues:
      reports:
        unique_window_seconds: 86400
        schedules:
          - name: nightly                # [A-Za-z0-9_.-], unique in the queue
            cron: "0 3 * * *"            # 5 fields, or 6 with seconds first
            timezone: Europe/Berlin      # IANA name (default UTC)
            body: "report {slot}"        # text (UTF-8); {slot} = the slot's UTC time
            priority: 1
            attempts: 3
            missed: latest               # skip | latest | all
            catch_up_seconds: 3600       # slots older than this are never enqueued

No leader: every server runs `ScheduleRunner.run_once(now)` each second and enqueues the slots
that are due with the unique key `cron:<name>:<slot time, UTC ISO 8601>` (docs/semantics.md
`P-slot-once`). Whichever server comes first stores the job; the others' enqueues of that slot
find the key held and store nothing. That holds while the key does: the queue's
`unique_window_seconds` must exceed `catch_up_seconds` (checked when the file is read), so no
server ever enqueues a slot whose key may have expired.

Missed slots (`P-missed`): a slot a server first evaluates more than ON_TIME_SECONDS after its
time is missed (the server, or the storage, was down): `skip` drops it, `latest` enqueues only
the most recent missed slot, `all` every one (at most MAX_SLOTS_PER_PASS). A slot whose enqueue
failed is tried again next pass. Each server remembers, per schedule, how far it has evaluated;
a restarted server starts `catch_up_seconds` back (the keys keep that from enqueuing twice).

Cron expressions are evaluated by `cronsim` (Debian cron's rules, DST included, with an
optional seconds field) in the schedule's time zone.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pinlater.common.sections import build_section
from pinlater.errors import PinLaterError
from pinlater.handler.schedule_view import ScheduleView
from pinlater.storage.models import NewJob
from pinlater.storage.sharded import ShardedBackend

log = logging.getLogger(__name__)

#: how often the server evaluates the schedules (seconds)
INTERVAL_SECONDS = 1.0
#: a slot evaluated this long after its time or later is "missed" (policy applies)
ON_TIME_SECONDS = 10.0
#: the most slots of one schedule one pass enqueues (policy `all`)
MAX_SLOTS_PER_PASS = 1000
MISSED_POLICIES = ("skip", "latest", "all")
#: a schedule that keeps failing (its queue does not exist) is logged at most this often
WARN_EVERY_SECONDS = 60.0
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)


@dataclass(frozen=True)
class Schedule:
    """One schedule of a queue, as validated from the queue-config file."""

    name: str = ""
    cron: str = ""
    timezone: str = "UTC"
    body: str = ""
    priority: int = field(default=1, metadata={"range": (1, 255)})
    attempts: int = field(default=2, metadata={"range": (1, 2**31 - 1)})
    missed: str = "latest"
    catch_up_seconds: float = field(default=3600.0, metadata={"range": (0, 366 * 86_400)})

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def key(self, slot: datetime) -> str:
        """The unique key of one slot: `cron:<name>:<UTC ISO 8601>`."""
        return f"cron:{self.name}:{slot_text(slot)}"

    def job(self, slot: datetime) -> NewJob:
        """The slot's job: the body with `{slot}` replaced by the slot time."""
        return NewJob(
            self.body.replace("{slot}", slot_text(slot)).encode("utf-8"),
            priority=self.priority,
            attempts_allowed=self.attempts,
            unique_key=self.key(slot),
        )

    def slots_back(self, now: float, after: float) -> Iterator[datetime]:
        """Slot times in (after, now], newest first (an iterator: the caller stops early)."""
        start = datetime.fromtimestamp(math.floor(now) + 1, self.zone())
        for slot in CronSim(self.cron, start, reverse=True):
            if slot.timestamp() <= after:
                return
            yield slot

    def next_runs(self, now: float, count: int) -> list[datetime]:
        it = CronSim(self.cron, datetime.fromtimestamp(now, self.zone()))
        return [slot for slot, _ in zip(it, range(count), strict=False)]


def slot_text(slot: datetime) -> str:
    """A slot time as UTC ISO 8601 to the second (`2024-06-01T03:00:00Z`)."""
    return f"{slot.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def parse_schedules(
    raw: Any, path: str, window_seconds: float, problems: list[str]
) -> tuple[Schedule, ...]:
    """A queue's `schedules:` list; each problem is appended with its key path."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{path}: must be a list of schedules")
        return ()
    schedules: list[Schedule] = []
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        schedule = build_section(Schedule, item, where, problems)
        if _schedule_problems(schedule, where, window_seconds, problems):
            continue
        if any(s.name == schedule.name for s in schedules):
            problems.append(f"{where}.name: {schedule.name!r} is used twice in this queue")
            continue
        schedules.append(schedule)
    return tuple(schedules)


def _schedule_problems(
    schedule: Schedule, where: str, window_seconds: float, problems: list[str]
) -> bool:
    """Append what is wrong with a built schedule; True if anything was."""
    found: list[str] = []
    if not _NAME.fullmatch(schedule.name):
        found.append(f"{where}.name: {schedule.name!r} is not 1-64 of [A-Za-z0-9_.-]")
    try:
        zone = schedule.zone()
    except (ZoneInfoNotFoundError, ValueError):
        found.append(f"{where}.timezone: {schedule.timezone!r} is not a known IANA time zone")
        zone = ZoneInfo("UTC")
    try:
        CronSim(schedule.cron, datetime.now(zone))
    except (CronSimError, ValueError, IndexError) as exc:
        found.append(f"{where}.cron: {schedule.cron!r} is not a cron expression ({exc})")
    if schedule.missed not in MISSED_POLICIES:
        found.append(f"{where}.missed: {schedule.missed!r} is not one of skip, latest, all")
    if schedule.catch_up_seconds >= window_seconds:
        found.append(
            f"{where}.catch_up_seconds: {schedule.catch_up_seconds:g} must be below the "
            f"queue's unique_window_seconds ({window_seconds:g}): a slot's key must outlive "
            "every server's chance to enqueue it"
        )
    problems.extend(found)
    return bool(found)


@dataclass
class ScheduleCounts:
    """What one pass did."""

    enqueued: int = 0
    deduplicated: int = 0
    failed: int = 0


class ScheduleRunner:
    """Enqueues the due slots of every schedule; one pass per `run_once(now)`.

    `schedules()` returns (queue, unique window seconds, schedules) for every queue that has
    schedules (the current queue config). `on_counts(queue, counts)` is told per queue."""

    def __init__(
        self,
        store: ShardedBackend,
        schedules: Callable[[], Sequence[tuple[str, float, Sequence[Schedule]]]],
        *,
        on_counts: Callable[[str, ScheduleCounts], None] | None = None,
    ):
        self.store = store
        self._schedules = schedules
        self._on_counts = on_counts
        #: (queue, schedule) -> the time up to which this server has evaluated it
        self._done: dict[tuple[str, Schedule], float] = {}
        #: (queue, schedule name) -> when its last failure was logged
        self._warned: dict[tuple[str, str], float] = {}

    def run_once(self, now: float) -> ScheduleCounts:
        total = ScheduleCounts()
        seen: set[tuple[str, Schedule]] = set()
        for queue, window, schedules in self._schedules():
            counts = ScheduleCounts()
            for schedule in schedules:
                seen.add((queue, schedule))
                self._run(queue, window, schedule, now, counts)
            for name, value in vars(counts).items():
                setattr(total, name, getattr(total, name) + value)
            if self._on_counts is not None and any(vars(counts).values()):
                self._on_counts(queue, counts)
        for gone in set(self._done) - seen:  # removed or changed schedules
            del self._done[gone]
        return total

    def _run(
        self, queue: str, window: float, schedule: Schedule, now: float, counts: ScheduleCounts
    ) -> None:
        done = self._done.get((queue, schedule))
        horizon = now - schedule.catch_up_seconds
        after = horizon if done is None else max(done, horizon)
        slots = self._due(schedule, now, after)
        if slots:
            try:
                outcome = self.store.enqueue_keyed(
                    queue, [schedule.job(slot) for slot in slots], int(window * 1000)
                )
            except PinLaterError as exc:
                counts.failed += len(slots)
                if now - self._warned.get((queue, schedule.name), -WARN_EVERY_SECONDS) >= (
                    WARN_EVERY_SECONDS
                ):  # a missing queue fails every second: say so once a minute
                    self._warned[(queue, schedule.name)] = now
                    log.warning(
                        "schedule %s of queue %s: %d slot(s) not enqueued, tried again next "
                        "pass: %s",
                        schedule.name,
                        queue,
                        len(slots),
                        exc,
                    )
                return
            counts.deduplicated += outcome.deduplicated
            counts.enqueued += len(slots) - outcome.deduplicated
        self._done[(queue, schedule)] = now

    @staticmethod
    def _due(schedule: Schedule, now: float, after: float) -> list[datetime]:
        """The slots in (after, now] to enqueue per the schedule's policy, oldest first."""
        late = now - ON_TIME_SECONDS
        picked: list[datetime] = []
        for slot in schedule.slots_back(now, after):  # newest first
            if len(picked) >= MAX_SLOTS_PER_PASS:
                break
            if slot.timestamp() > late or schedule.missed == "all":
                picked.append(slot)
            elif schedule.missed == "latest":
                picked.append(slot)  # the most recent missed slot; older ones are dropped
                break
            else:
                break  # skip: this missed slot and every older one are dropped
        return picked[::-1]

    def views(self, queue: str | None, count: int, now: float) -> list[ScheduleView]:
        """Every schedule (of `queue`, if given) with its next `count` run times."""
        return [
            ScheduleView(
                queue=name,
                name=s.name,
                cron=s.cron,
                timezone=s.timezone,
                missed=s.missed,
                catch_up_seconds=s.catch_up_seconds,
                priority=s.priority,
                attempts=s.attempts,
                next_runs_ms=tuple(int(t.timestamp() * 1000) for t in s.next_runs(now, count)),
            )
            for name, _, schedules in self._schedules()
            if queue is None or name == queue
            for s in schedules
        ]


def slot_keys_between(schedule: Schedule, start: float, end: float) -> list[str]:
    """The keys of the slots in (start, end], oldest first (tests and operators)."""
    return [schedule.key(slot) for slot in reversed(list(schedule.slots_back(end, start)))]
