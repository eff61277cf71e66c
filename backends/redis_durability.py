"""Durability check of a Redis shard: would it lose accepted jobs on a crash, or evict them?

Reads `CONFIG GET` (appendonly, appendfsync, maxmemory-policy, no-appendfsync-on-rewrite) and
explains each risky setting in words an operator can act on. CONFIG may be renamed or disabled
(managed Redis): then the answer is a warning that the settings could not be checked.
See configs/redis-queue.conf for the settings we ship.
"""

from __future__ import annotations

from typing import Any

import redis

_SETTINGS = ("appendonly", "appendfsync", "maxmemory-policy", "no-appendfsync-on-rewrite")


def durability_warnings(shard: str, client: redis.Redis) -> list[str]:
    try:
        values = {}
        for name in _SETTINGS:
            raw: dict[Any, Any] = client.config_get(name)
            values[name] = _text(raw.get(name.encode(), raw.get(name, b"")))
    except redis.exceptions.RedisError as exc:
        return [
            f"shard {shard}: could not check Redis durability settings (CONFIG GET failed: "
            f"{exc}); make sure appendonly is yes, appendfsync is always or everysec and "
            "maxmemory-policy is noeviction"
        ]
    return _judge(shard, values)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _judge(shard: str, v: dict[str, str]) -> list[str]:
    warnings = []
    if v["appendonly"] != "yes":
        warnings.append(
            f"shard {shard}: appendonly is {v['appendonly']!r}: a Redis crash or "
            "restart loses every job accepted since the last RDB snapshot; set "
            "appendonly yes"
        )
    elif v["appendfsync"] == "no":
        warnings.append(
            f"shard {shard}: appendfsync is 'no': an OS crash or power loss can "
            "lose ~30 s of accepted jobs; use always (or everysec)"
        )
    elif v["appendfsync"] == "everysec":
        warnings.append(
            f"shard {shard}: appendfsync is 'everysec': a redis-server crash loses "
            "nothing, but an OS crash or power loss can lose ~1-2 s of accepted "
            "jobs; use always if that matters"
        )
    if v["appendonly"] == "yes" and v["no-appendfsync-on-rewrite"] == "yes":
        warnings.append(
            f"shard {shard}: no-appendfsync-on-rewrite is 'yes': fsync pauses during "
            "AOF rewrites, widening the loss window on an OS crash; set it to no"
        )
    if v["maxmemory-policy"] != "noeviction":
        warnings.append(
            f"shard {shard}: maxmemory-policy is {v['maxmemory-policy']!r}: Redis may "
            "evict job keys under memory pressure (silent job loss); set noeviction"
        )
    return warnings
