"""The per-queue settings file (config key `queue_config`) and the ServerSet file
(`server_set_file`), both re-read when they change.

Queue config, YAML (the native form; unknown keys are errors):

    queues:
      emails: {max_jobs_per_second: 10.5, claim_timeout_seconds: 300}
      reports: {max_jobs_per_second: 0}      # 0 pauses the queue's dequeues
      orders: {unique_window_seconds: 3600}  # unique enqueue keys hold 1 h (default 24 h)
      thumbs: {partitions: 2}                 # lives on 2 shards (default: every shard)
      ledger: {fifo: true, fifo_in_flight: 1} # handed out in enqueue order (one shard)
      audits: {cluster: durable}              # lives in cluster `durable` (config `clusters:`)
      reports:                                # periodic jobs: see pinlater/ops/schedules.py
        schedules: [{name: nightly, cron: "0 3 * * *", timezone: Europe/Berlin, body: run}]

or the original PinLater JSON (extra fields inside `queueConfig` are ignored, as there):

    {"queues": [{"name": "emails", "queueConfig": {"maxJobsPerSecond": 5}}]}

`claimTimeoutSeconds` is accepted inside `queueConfig` as an extension. A queue not listed is
unlimited and uses janitor.claim_timeout_seconds. Settings stored through the admin API
override the file's per setting (`pinlater.ops.runtime_settings`, which merges both and feeds
the rate limiter and the janitor).

ServerSet: one `host:port` per line (the worker SDK's format); each server enforces
rate / (number of distinct servers listed). A file that is unreadable, malformed or empty after
start keeps the last good value; at start-up it is a configuration error.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from pinlater.common.sections import ConfigError, build_section
from pinlater.common.serverset import ServerSetError, parse_serverset
from pinlater.ops.schedules import Schedule, parse_schedules
from pinlater.ops.watched_file import WatchedFile
from pinlater.storage.unique_keys import DEFAULT_UNIQUE_WINDOW_SECONDS

log = logging.getLogger(__name__)

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_]{1,1000}", re.ASCII)
#: how often the watcher looks at the files (a stat and, when it changed, a read)
CHECK_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class QueueSettings:
    #: dequeue rate of the whole cluster (jobs/s); 0 pauses the queue; None = unlimited
    max_jobs_per_second: float | None = field(default=None, metadata={"range": (0, 1e9)})
    #: claim timeout for this queue; None = janitor.claim_timeout_seconds
    claim_timeout_seconds: float | None = field(
        default=None, metadata={"range": (0.001, 30 * 86_400)}
    )
    #: how long a unique key holds after the enqueue that stored its job; None = 24 h
    unique_window_seconds: float | None = field(default=None, metadata={"range": (1, 366 * 86_400)})
    #: periodic jobs of this queue (pinlater.ops.schedules; YAML form only)
    schedules: tuple[Schedule, ...] = ()
    #: shards the queue lives on (pinlater.storage.placement); None = every shard
    partitions: int | None = field(default=None, metadata={"range": (1, 10_000)})
    #: jobs handed out in enqueue order per priority, head-of-line blocking (docs/semantics.md
    #: `F-...`); implies one partition
    fifo: bool = False
    #: a FIFO queue's IN_PROGRESS jobs at most (None = 1; only with `fifo: true`)
    fifo_in_flight: int | None = field(default=None, metadata={"range": (1, 100_000)})
    #: the cluster the queue is created in (pinlater.storage.clusters); None = the default one
    cluster: str | None = None


@dataclass(frozen=True)
class QueueConfig:
    queues: Mapping[str, QueueSettings] = field(default_factory=dict)

    def unique_window_seconds(self, queue: str) -> float:
        """How long a unique key holds in `queue` (its setting, else 24 h)."""
        settings = self.queues.get(queue)
        if settings is None or settings.unique_window_seconds is None:
            return DEFAULT_UNIQUE_WINDOW_SECONDS
        return settings.unique_window_seconds

    def schedule_list(self) -> list[tuple[str, float, tuple[Schedule, ...]]]:
        """(queue, unique window seconds, schedules) of every queue that has schedules."""
        return [
            (name, self.unique_window_seconds(name), settings.schedules)
            for name, settings in sorted(self.queues.items())
            if settings.schedules
        ]

    def partitions(self) -> dict[str, int]:
        """queue -> its `partitions` setting, for the queues that have one (1 for a FIFO
        queue: it lives on exactly one shard)."""
        found = {name: s.partitions for name, s in self.queues.items() if s.partitions}
        return found | {name: 1 for name, s in self.queues.items() if s.fifo}

    def fifo(self) -> dict[str, int]:
        """queue -> its in-flight cap, for the FIFO queues."""
        return {name: s.fifo_in_flight or 1 for name, s in self.queues.items() if s.fifo}

    def clusters(self) -> dict[str, str]:
        """queue -> its `cluster` setting, for the queues that have one."""
        return {name: s.cluster for name, s in self.queues.items() if s.cluster is not None}

    def rates(self) -> dict[str, float]:
        return {
            name: s.max_jobs_per_second
            for name, s in self.queues.items()
            if s.max_jobs_per_second is not None
        }


def parse_queue_config(text: str, origin: str) -> QueueConfig:
    """Parse the file content (YAML or the original JSON). Raises ConfigError with every
    problem, each prefixed by `origin`."""
    raw = _queues_section(text, origin)
    problems: list[str] = []
    if isinstance(raw, list):
        settings = _parse_original(raw, origin, problems)
    elif isinstance(raw, dict):
        settings = _parse_native(raw, origin, problems)
    else:
        problems.append(f"{origin}: queues: must be a mapping (or the original's list)")
        settings = {}
    for name, s in settings.items():
        for key in ("max_jobs_per_second", "claim_timeout_seconds", "unique_window_seconds"):
            value = getattr(s, key)
            if value is not None and not math.isfinite(value):
                problems.append(f"{origin}: queues.{name}.{key}: must be a finite number")
        problems.extend(_fifo_problems(name, s, origin))
    if problems:
        raise ConfigError(problems)
    return QueueConfig(settings)


def _fifo_problems(name: str, settings: QueueSettings, origin: str) -> list[str]:
    """A FIFO queue lives on one shard; `fifo_in_flight` means nothing without `fifo`."""
    where = f"{origin}: queues.{name}"
    if settings.fifo and settings.partitions is not None and settings.partitions > 1:
        return [
            f"{where}: fifo: true keeps the queue on one shard, so partitions must be 1 or "
            f"left out (got {settings.partitions})"
        ]
    if not settings.fifo and settings.fifo_in_flight is not None:
        return [f"{where}.fifo_in_flight: only for a FIFO queue (set fifo: true)"]
    return []


def _queues_section(text: str, origin: str) -> Any:
    """The value of the one top-level key `queues` (YAML, else JSON); raises ConfigError."""
    if not text.strip():
        raise ConfigError([f"{origin}: the file is empty"])
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        try:
            data = json.loads(text)
        except ValueError:
            raise ConfigError([f"{origin}: neither YAML nor JSON: {exc}"]) from None
    if not isinstance(data, dict) or set(data) - {"queues"}:
        raise ConfigError([f"{origin}: the top level must be a mapping with one key, 'queues'"])
    return data.get("queues") or {}


def _parse_native(raw: dict, origin: str, problems: list[str]) -> dict[str, QueueSettings]:
    settings: dict[str, QueueSettings] = {}
    for name, section in raw.items():
        path = f"{origin}: queues.{name}"
        if _check_name(name, path, problems):
            settings[name] = _queue_settings(section, path, problems)
    return settings


def _queue_settings(section: Any, path: str, problems: list[str]) -> QueueSettings:
    """One queue's native section; its `schedules:` list is parsed on its own (a list of
    sections, checked against the queue's unique window)."""
    raw_schedules = None
    if isinstance(section, dict) and "schedules" in section:
        section = dict(section)
        raw_schedules = section.pop("schedules")
    settings = build_section(QueueSettings, section, path, problems)
    window = settings.unique_window_seconds or DEFAULT_UNIQUE_WINDOW_SECONDS
    schedules = parse_schedules(raw_schedules, f"{path}.schedules", window, problems)
    return replace(settings, schedules=schedules) if schedules else settings


def _parse_original(items: list, origin: str, problems: list[str]) -> dict[str, QueueSettings]:
    settings: dict[str, QueueSettings] = {}
    for i, item in enumerate(items):
        path = f"{origin}: queues[{i}]"
        if not isinstance(item, dict) or set(item) - {"name", "queueConfig"}:
            problems.append(f"{path}: expected {{'name': ..., 'queueConfig': {{...}}}}")
            continue
        name, inner = item.get("name"), item.get("queueConfig") or {}
        if not _check_name(name, f"{path}.name", problems):
            continue
        if not isinstance(inner, dict):
            problems.append(f"{path}.queueConfig: must be a mapping")
            continue
        section = {
            "max_jobs_per_second": inner.get("maxJobsPerSecond"),
            "claim_timeout_seconds": inner.get("claimTimeoutSeconds"),
        }
        section = {k: v for k, v in section.items() if v is not None}
        if name in settings:
            problems.append(f"{path}.name: queue {name!r} is listed twice")
        settings[name] = build_section(QueueSettings, section, f"{path}.queueConfig", problems)
    return settings


def _check_name(name: Any, path: str, problems: list[str]) -> TypeGuard[str]:
    if isinstance(name, str) and _QUEUE_NAME.fullmatch(name):
        return True
    problems.append(f"{path}: {name!r} is not a queue name ([A-Za-z0-9_]+)")
    return False


def read_queue_config(path: str, clusters: Collection[str] = ()) -> QueueConfig:
    """The file's settings; a `cluster:` must name one of `clusters` (the configured ones)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"queue_config: cannot read {path}: {exc}"]) from None
    config = parse_queue_config(text, f"queue_config {path}")
    problems = [
        f"queue_config {path}: queues.{queue}.cluster: {cluster!r} is not a configured cluster"
        + (f" ({', '.join(clusters)})" if clusters else " (the server config has no `clusters:`)")
        for queue, cluster in config.clusters().items()
        if cluster not in clusters
    ]
    if problems:
        raise ConfigError(problems)
    return config


def read_server_count(path: str) -> int:
    """Number of distinct `host:port` entries in a ServerSet file (raises ConfigError)."""
    try:
        endpoints = parse_serverset(Path(path).read_text(encoding="utf-8"), origin=path)
    except (OSError, UnicodeDecodeError, ServerSetError) as exc:
        raise ConfigError([f"server_set_file: cannot use {path}: {exc}"]) from None
    if not endpoints:
        raise ConfigError([f"server_set_file: {path} lists no servers"])
    return len(set(endpoints))


def check_files(
    queue_config: str | None, server_set_file: str | None, clusters: Collection[str] = ()
) -> list[str]:
    """Every problem of the two files (for load_config, before the port is bound)."""
    problems: list[str] = []
    read_settings = functools.partial(read_queue_config, clusters=clusters)
    for path, read in ((queue_config, read_settings), (server_set_file, read_server_count)):
        if path:
            try:
                read(path)
            except ConfigError as exc:
                problems.extend(exc.problems)
    return problems


class QueueConfigWatcher:
    """Holds the current queue config and server count and re-reads both files on change.

    `on_change(config, servers)` is called at start and after every accepted change;
    `on_error(file_kind)` for every rejected file ("queue_config" or "server_set").
    """

    def __init__(
        self,
        queue_config: str | None,
        server_set_file: str | None,
        on_change: Callable[[QueueConfig, int], None],
        on_error: Callable[[str], None] | None = None,
        clusters: Collection[str] = (),
    ):
        """`clusters`: the configured clusters, which a queue's `cluster:` must name."""
        self._read = functools.partial(read_queue_config, clusters=tuple(clusters))
        self._on_change = on_change
        self._on_error = on_error or (lambda kind: None)
        self._lock = threading.Lock()
        self._config_file = WatchedFile(queue_config) if queue_config else None
        self._servers_file = WatchedFile(server_set_file) if server_set_file else None
        self.config = self._read(queue_config) if queue_config else QueueConfig()
        self.servers = read_server_count(server_set_file) if server_set_file else 1
        self._on_change(self.config, self.servers)

    def check(self) -> bool:
        """Re-read changed files; True when a new config or server count was applied."""
        with self._lock:
            config, servers = self.config, self.servers
            if self._config_file is not None and self._config_file.changed():
                config = self._try(self._read, self._config_file.path, "queue_config", config)
            if self._servers_file is not None and self._servers_file.changed():
                servers = self._try(
                    read_server_count, self._servers_file.path, "server_set", servers
                )
            if config is self.config and servers == self.servers:
                return False
            self.config, self.servers = config, servers
            log.info(
                "queue config applied: %d queue(s) configured, %d server(s) share the rates",
                len(config.queues),
                servers,
            )
            self._on_change(config, servers)
            return True

    def _try(self, read: Callable[[str], Any], path: str, kind: str, old: Any) -> Any:
        try:
            return read(path)
        except ConfigError as exc:
            self._on_error(kind)
            log.error(
                "%s %s not applied (keeping the current one): %s",
                kind,
                path,
                "; ".join(exc.problems),
            )
            return old
