"""A shard map as the server applies it: the live shards' specs plus the names of shards retired
with their jobs, validated as a whole before it takes effect (at start and on every reload).

An entry marked `retired_with_jobs: true` is a shard the operator gives up with whatever it
still holds (its storage is gone, or its jobs are written off): it is never opened nor asked
anything, and a descriptor naming it gets an error that says so instead of "unknown shard".
Its other keys are parsed like a live entry's (a MySQL instance entry names every logical
shard it expanded to), so the entry can be flipped in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pinlater.common.sections import ConfigError
from pinlater.storage.contract import Backend, ShardSpec

RETIRED_KEY = "retired_with_jobs"


@dataclass(frozen=True)
class ShardMap:
    """The shards to serve (in map order: the first keeps the stored settings) and the names
    of the shards retired with their jobs."""

    specs: tuple[ShardSpec, ...]
    retired: frozenset[str] = frozenset()

    def names(self) -> list[str]:
        return [spec.name for spec in self.specs]


def parse_shard_map(
    backend: type[Backend], raw: Any, options: Mapping[str, Any], path: str
) -> ShardMap:
    """Validate a `shards:` list into a ShardMap; raise ConfigError listing every problem."""
    problems: list[str] = []
    live, retired = _split(raw, path, problems)
    specs: list[ShardSpec] = []
    retired_names: set[str] = set()
    try:
        specs = backend.parse_shards(live, options, path)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if retired:
        try:
            retired_names = {s.name for s in backend.parse_shards(retired, options, path)}
        except ConfigError as exc:
            problems.extend(f"{p} (an entry marked {RETIRED_KEY})" for p in exc.problems)
    for name in sorted(retired_names & {s.name for s in specs}):
        problems.append(f"{path}: shard {name!r} is both served and marked {RETIRED_KEY}")
    if problems:
        raise ConfigError(problems)
    return ShardMap(tuple(specs), frozenset(retired_names))


def _split(raw: Any, path: str, problems: list[str]) -> tuple[Any, list[Any]]:
    """(the live entries, the retired ones with the flag removed); anything not a list goes
    to the backend's parser unchanged (it reports it)."""
    if not isinstance(raw, list):
        return raw, []
    live: list[Any] = []
    retired: list[Any] = []
    for i, entry in enumerate(raw):
        if not (isinstance(entry, Mapping) and RETIRED_KEY in entry):
            live.append(entry)
            continue
        flag = entry[RETIRED_KEY]
        if not isinstance(flag, bool):
            problems.append(f"{path}[{i}].{RETIRED_KEY}: must be true or false, not {flag!r}")
        rest = {key: value for key, value in entry.items() if key != RETIRED_KEY}
        (retired if flag is True else live).append(rest)
    return live, retired
