"""Queue settings changed at run time (pause/resume, rate limit, claim timeout), stored in the
backend so that every server sharing the storage applies them, and they survive restarts.

Where they live: one JSON document with a version number on the *home shard*, the first shard
of the shard map (`Shard.read_settings` / `Shard.write_settings`). One place, so there is one
version to compare and one compare-and-set for writers; the settings are small (a few hundred
bytes per configured queue). Every server polls it every `admin.settings_poll_seconds` (1 s):
a poll sends the version it has and gets the document back only when it changed, so an idle
poll is one tiny read. While the home shard is down the last settings read stay in force and
changes are refused (the API answers 503). Moving the first shard of the map elsewhere starts
from an empty document on the new first shard (copy the settings over with the API).

Precedence, per queue and per setting (the API shows each effective value and its source):
1. `stored`: set through the admin API / `pinlater pause|resume` (a stored value of null, i.e.
   cleared, falls through);
2. `file`: the queue-config file (`queue_config`, re-read when it changes);
3. `default`: unlimited rate, `janitor.claim_timeout_seconds`, not paused.
A queue is paused when its stored `paused` flag is set, or when its effective rate limit is 0
(the file's way to pause). Resume clears the stored flag only: a queue whose file rate is 0
stays paused until the file changes or a stored rate overrides it.

Document format (version 1), written and read only here:

    {"format": 1, "queues": {"emails": {"paused": true, "max_jobs_per_second": 5.0,
      "claim_timeout_seconds": 300.0, "updated_at_ms": 1718000000000, "updated_by": "..."}}}
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pinlater.common.sections import build_section
from pinlater.errors import InvalidRequest, PinLaterError, ShardConnectionFailed
from pinlater.ops.queue_settings import QueueConfig, QueueSettings
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.storage.unique_keys import DEFAULT_UNIQUE_WINDOW_SECONDS

log = logging.getLogger(__name__)

FORMAT = 1
#: compare-and-set attempts of one change before giving up (another server kept writing)
WRITE_ATTEMPTS = 5
#: the settings a change may set (None clears the stored value)
SETTABLE = ("paused", "max_jobs_per_second", "claim_timeout_seconds", "prefetch")
#: the numeric settings, checked by `validate_values`
NUMBERS = ("max_jobs_per_second", "claim_timeout_seconds", "prefetch")


@dataclass(frozen=True)
class StoredQueue:
    """One queue's stored settings; None = not set here (the file or the default applies)."""

    paused: bool = False
    max_jobs_per_second: float | None = None
    claim_timeout_seconds: float | None = None
    prefetch: int | None = None
    updated_at_ms: int = 0
    updated_by: str = ""

    def is_empty(self) -> bool:
        return (
            not self.paused
            and self.max_jobs_per_second is None
            and (self.claim_timeout_seconds is None)
            and self.prefetch is None
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"updated_at_ms": self.updated_at_ms, "updated_by": self.updated_by}
        if self.paused:
            out["paused"] = True
        for key in NUMBERS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class StoredSettings:
    version: int = 0
    queues: Mapping[str, StoredQueue] = field(default_factory=dict)


def encode(queues: Mapping[str, StoredQueue]) -> bytes:
    doc = {
        "format": FORMAT,
        "queues": {name: queues[name].as_json() for name in sorted(queues)},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(document: bytes) -> dict[str, StoredQueue]:
    """The queues of a stored document; raises ValueError for a document this server cannot
    use (a newer format or garbage). Entries with bad values are skipped with a warning."""
    if not document:
        return {}
    data = json.loads(document)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"unknown settings document format {data.get('format')!r}")
    queues: dict[str, StoredQueue] = {}
    for name, raw in (data.get("queues") or {}).items():
        try:
            queues[name] = _stored_queue(name, raw)
        except (ValueError, TypeError, InvalidRequest) as exc:
            log.warning("stored settings of queue %r ignored: %s", name, exc)
    return queues


def _stored_queue(name: str, raw: Any) -> StoredQueue:
    if not isinstance(raw, dict):
        raise ValueError("not a mapping")
    values = validate_values({k: raw.get(k) for k in NUMBERS}, name)
    return StoredQueue(
        paused=raw.get("paused") is True,
        max_jobs_per_second=values.get("max_jobs_per_second"),
        claim_timeout_seconds=values.get("claim_timeout_seconds"),
        prefetch=_whole(values.get("prefetch")),
        updated_at_ms=int(raw.get("updated_at_ms") or 0),
        updated_by=str(raw.get("updated_by") or "")[:200],
    )


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def validate_values(values: Mapping[str, Any], where: str) -> dict[str, float | None]:
    """Rate limit / claim timeout / prefetch values checked with the queue-config file's own rules
    (types and ranges of `QueueSettings`); None stays None. Raises InvalidRequest naming the
    field."""
    given = {k: v for k, v in values.items() if v is not None}
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequest(f"{key}: must be a number or null, got {value!r}")
        if not math.isfinite(value):
            raise InvalidRequest(f"{key}: must be a finite number")
    problems: list[str] = []
    settings = build_section(QueueSettings, given, where, problems)
    if problems:
        raise InvalidRequest("; ".join(problems))
    return {k: getattr(settings, k) for k in values}


class SettingsHome:
    """Reads and writes the settings document on the home shard (the first of the map)."""

    def __init__(self, store):
        self.store = store

    def shard(self) -> str:
        return self.store.shard_names()[0]

    def read(self, name: str, known_version: int) -> tuple[int, bytes | None]:
        self._check_healthy(name)
        return self.store.call(name, lambda s: s.read_settings(known_version))

    def write(self, name: str, expected_version: int, document: bytes) -> int | None:
        self._check_healthy(name)
        return self.store.call(name, lambda s: s.write_settings(expected_version, document))

    def _check_healthy(self, name: str) -> None:
        """An unhealthy shard is not called (shard maintenance probes it back): a poll every
        second must not wait out a dead shard's timeout each time."""
        if not self.store.health.is_healthy(name):
            raise ShardConnectionFailed(f"shard {name} (which keeps the queue settings) is down")


class RuntimeSettings:
    """The effective per-queue settings of this server: the queue-config file's and the stored
    ones merged, applied to the rate limiter and the janitor's claim timeouts. Thread-safe."""

    def __init__(
        self,
        home: SettingsHome | None,
        limiter: QueueRateLimiter,
        default_claim_timeout: float,
        clock: Callable[[], float] = time.time,
        default_prefetch: int = 0,
    ):
        self._home = home
        self._default_prefetch = default_prefetch
        self._limiter = limiter
        self._default_claim_timeout = default_claim_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._file = QueueConfig()
        self._servers = 1
        self._stored = StoredSettings()
        self._stored_from: str | None = None  # the home shard the stored settings came from
        self._failing = False
        #: when the stored settings were last read successfully (epoch seconds; 0 = never)
        self.read_at = 0.0

    # ---- inputs ----

    def file_changed(self, config: QueueConfig, servers: int) -> None:
        """The queue-config / ServerSet files changed (QueueConfigWatcher's on_change)."""
        with self._lock:
            self._file, self._servers = config, servers
            self._apply()

    def poll(self) -> bool:
        """Read the stored settings if they changed; True when new ones were applied. A shard
        error keeps the current settings (logged once per outage)."""
        if self._home is None:
            return False
        try:
            name = self._home.shard()
            known = self._stored.version if name == self._stored_from else -1
            version, document = self._home.read(name, known)
        except PinLaterError as exc:
            if not self._failing:
                log.warning("stored queue settings not read (keeping the current ones): %s", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("stored queue settings readable again")
        self._failing = False
        self.read_at = self._clock()
        if document is None:
            return False
        return self._accept(name, version, document)

    def _accept(self, name: str, version: int, document: bytes) -> bool:
        try:
            queues = decode(document)
        except ValueError as exc:
            log.error("stored queue settings version %d not applied: %s", version, exc)
            return False
        with self._lock:
            if name == self._stored_from and version == self._stored.version:
                return False  # already applied (a concurrent poll or write may apply an older
                # one after a newer: the next poll, which sends the version it has, repairs it)
            self._stored, self._stored_from = StoredSettings(version, queues), name
            self._apply()
        log.info("stored queue settings version %d applied (%d queue(s))", version, len(queues))
        return True

    # ---- changes (the admin API) ----

    def change(self, queue: str, updates: Mapping[str, Any], actor: str) -> dict[str, Any]:
        """Set (or with None, clear) stored settings of `queue` (keys from SETTABLE), by
        compare-and-set on the home shard, and apply them here at once. Returns the queue's
        effective settings. Raises InvalidRequest for bad values, ShardConnectionFailed when
        the home shard cannot be written."""
        unknown = set(updates) - set(SETTABLE)
        if unknown:
            raise InvalidRequest(f"unknown setting(s): {', '.join(sorted(unknown))}")
        numbers = validate_values(
            {k: v for k, v in updates.items() if k != "paused"}, f"queue {queue}"
        )
        if "paused" in updates and not isinstance(updates["paused"], (bool, type(None))):
            raise InvalidRequest(f"paused: must be true or false, got {updates['paused']!r}")
        return self._write(queue, lambda old: _updated(old, updates, numbers), actor)

    def forget(self, queue: str, actor: str) -> None:
        """Remove a queue's stored settings (the queue was deleted)."""
        self._write(queue, lambda old: None, actor)

    def _write(
        self,
        queue: str,
        update: Callable[[StoredQueue], StoredQueue | None],
        actor: str,
    ) -> dict[str, Any]:
        if self._home is None:
            raise ShardConnectionFailed("no storage for queue settings")
        for _ in range(WRITE_ATTEMPTS):
            name = self._home.shard()
            version, document = self._home.read(name, -1)
            try:
                queues = decode(document or b"")
            except ValueError as exc:
                raise ShardConnectionFailed(
                    f"the stored queue settings on shard {name} cannot be read by this "
                    f"server ({exc}); not changed"
                ) from None
            entry = update(queues.get(queue, StoredQueue()))
            if entry is None or entry.is_empty():
                if queue not in queues:
                    self._accept(name, version, document or b"")
                    return self.effective(queue)
                queues.pop(queue)
            else:
                queues[queue] = replace(
                    entry, updated_at_ms=int(self._clock() * 1000), updated_by=actor[:200]
                )
            new_document = encode(queues)
            written = self._home.write(name, version, new_document)
            if written is not None:
                self._accept(name, written, new_document)
                log.info("queue %s settings changed by %s: %s", queue, actor, queues.get(queue))
                return self.effective(queue)
        raise ShardConnectionFailed(
            f"queue settings not changed: {WRITE_ATTEMPTS} concurrent changes got there first; "
            "retry"
        )

    # ---- reads ----

    def claim_timeout_for(self, queue: str) -> float:
        return self.effective(queue)["claim_timeout_seconds"]["value"]

    def prefetch_for(self, queue: str) -> int:
        """Jobs per partition the broker keeps for `queue` (0: the broker is off for it)."""
        with self._lock:
            stored = self._stored.queues.get(queue, StoredQueue()).prefetch
            from_file = self._file.queues.get(queue, QueueSettings()).prefetch
        return _layered(stored, from_file, self._default_prefetch)["value"]

    def paused(self, queue: str) -> bool:
        return self.effective(queue)["paused"]["value"]

    def effective(self, queue: str) -> dict[str, Any]:
        """Every setting of `queue`: {"value", "source", "stored", "file"} each, plus this
        server's share of the rate and when the stored entry was last changed, by whom."""
        with self._lock:
            stored = self._stored.queues.get(queue, StoredQueue())
            from_file = self._file.queues.get(queue, QueueSettings())
            servers = self._servers
        rate = _layered(stored.max_jobs_per_second, from_file.max_jobs_per_second, None)
        timeout = _layered(
            stored.claim_timeout_seconds,
            from_file.claim_timeout_seconds,
            self._default_claim_timeout,
        )
        if stored.paused:
            paused = {"value": True, "source": "stored"}
        elif rate["value"] == 0:
            paused = {"value": True, "source": rate["source"]}
        else:
            paused = {"value": False, "source": "default"}
        share = None if rate["value"] is None else rate["value"] / servers
        return {
            "paused": paused,
            "max_jobs_per_second": rate,
            "claim_timeout_seconds": timeout,
            "prefetch": _layered(stored.prefetch, from_file.prefetch, self._default_prefetch),
            # file-only settings (unique keys, periodic jobs): shown, not settable here
            "unique_window_seconds": _layered(
                None, from_file.unique_window_seconds, DEFAULT_UNIQUE_WINDOW_SECONDS
            ),
            "schedules": [schedule.name for schedule in from_file.schedules],
            "server_share_jobs_per_second": 0.0 if paused["value"] else share,
            "servers_sharing_rate": servers,
            "updated_at_ms": stored.updated_at_ms or None,
            "updated_by": stored.updated_by or None,
        }

    def stored_version(self) -> tuple[str | None, int]:
        with self._lock:
            return self._stored_from, self._stored.version

    def _apply(self) -> None:
        """Push the merged rates to the limiter (paused = rate 0). Caller holds the lock."""
        rates = dict(self._file.rates())
        for name, stored in self._stored.queues.items():
            if stored.max_jobs_per_second is not None:
                rates[name] = stored.max_jobs_per_second
            if stored.paused:
                rates[name] = 0.0
        self._limiter.configure(rates, self._servers)


def _layered(stored: float | None, from_file: float | None, default: float | None) -> dict:
    value: float | None
    if stored is not None:
        value, source = stored, "stored"
    elif from_file is not None:
        value, source = from_file, "file"
    else:
        value, source = default, "default"
    return {"value": value, "source": source, "stored": stored, "file": from_file}


def _updated(
    old: StoredQueue, updates: Mapping[str, Any], numbers: Mapping[str, float | None]
) -> StoredQueue:
    return StoredQueue(
        paused=bool(updates["paused"]) if "paused" in updates else old.paused,
        max_jobs_per_second=numbers.get("max_jobs_per_second", old.max_jobs_per_second),
        claim_timeout_seconds=numbers.get("claim_timeout_seconds", old.claim_timeout_seconds),
        prefetch=_whole(numbers["prefetch"]) if "prefetch" in numbers else old.prefetch,
    )
