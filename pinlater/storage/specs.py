"""Shard-spec parsing for backends: a YAML shard list into typed `ShardSpec`s, names checked.

Backends import their config helpers from here (never from the server config), so a backend
depends on the storage seam alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pinlater.common.sections import ConfigError, build_section, field_range
from pinlater.storage.descriptors import SHARD_NAME_PATTERN

__all__ = ["ConfigError", "build_section", "field_range", "parse_shard_list"]


class _Named(Protocol):
    """What the list parser needs of a spec class: a shard (or instance) name."""

    @property
    def name(self) -> str: ...


SpecT = TypeVar("SpecT", bound=_Named)


def parse_shard_list(
    spec_cls: type[SpecT], raw: Any, path: str, default: list[dict] | None = None
) -> list[SpecT]:
    """Build a list of `spec_cls` shard specs from YAML, checking names are valid and unique.

    `default` is used when the list is absent (e.g. one local SQLite shard). Raises ConfigError.
    """
    problems: list[str] = []
    if raw is None and default is not None:
        raw = default
    if not isinstance(raw, list) or not raw:
        raise ConfigError([f"{path}: must be a non-empty list of shards"])
    specs: list[SpecT] = []
    for i, raw_entry in enumerate(raw):
        where = f"{path}[{i}]"
        entry = raw_entry
        if isinstance(raw_entry, Mapping) and "name" in raw_entry:
            entry = {**raw_entry, "name": str(raw_entry["name"])}
            if not re.fullmatch(SHARD_NAME_PATTERN, entry["name"], re.ASCII):
                problems.append(
                    f"{where}.name: {entry['name']!r} must be 1-32 ASCII letters or digits"
                )
        elif isinstance(raw_entry, Mapping):
            problems.append(f"{where}.name: missing")
        specs.append(build_section(spec_cls, entry, where, problems))
    names = [spec.name for spec in specs]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{path}: shard name {name!r} is used more than once")
    if problems:
        raise ConfigError(problems)
    return specs
