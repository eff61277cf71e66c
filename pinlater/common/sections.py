"""Typed settings sections: frozen dataclasses built from YAML/env mappings, every problem
reported with its key path.

Shared by the server config (`pinlater.config`), the per-queue settings file and the backends'
shard specs (through `pinlater.storage.specs`). Imports nothing from pinlater: a leaf.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any


class ConfigError(Exception):
    """The configuration is invalid; `problems` lists every offending key with the reason."""

    def __init__(self, problems: list[str]):
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


def field_range(lo: float | None = None, hi: float | None = None) -> dict:
    """Field metadata bounding a numeric setting: `field(default=..., metadata=field_range(..))`."""
    return {"range": (lo, hi)}


def build_section(cls: type, raw: Any, path: str, problems: list[str]) -> Any:
    """Build frozen dataclass `cls` from a mapping, checking types, ranges and unknown keys."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be a mapping")
        return cls()
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            problems.append(f"{path}.{key}: unknown key (expected one of {', '.join(known)})")
    kwargs = {}
    for name, fld in known.items():
        if name in raw and dataclasses.is_dataclass(hint(cls, name)):  # a nested section
            kwargs[name] = build_section(hint(cls, name), raw[name], f"{path}.{name}", problems)
        elif name in raw:
            value = coerce(
                raw[name], hint(cls, name), f"{path}.{name}", problems, fld.metadata.get("range")
            )
            if value is not _INVALID:
                kwargs[name] = value
    return cls(**kwargs)


_INVALID = object()


def hint(cls: type, name: str) -> Any:
    """The resolved type annotation of field `name` of dataclass `cls`."""
    return typing.get_type_hints(cls)[name]


def coerce(
    value: Any,
    hint: Any,
    path: str,
    problems: list[str],
    bounds: tuple[float | None, float | None] | None,
) -> Any:
    """Coerce YAML/env text to the annotated type; append a problem and return _INVALID if not."""
    optional = isinstance(hint, types.UnionType) and type(None) in hint.__args__
    base = next((a for a in hint.__args__ if a is not type(None)), str) if optional else hint
    if value is None or (optional and value == ""):
        if optional:
            return None
        problems.append(f"{path}: must not be empty")
        return _INVALID
    try:
        result = _convert(value, base)
    except (TypeError, ValueError):
        problems.append(f"{path}: expected {getattr(base, '__name__', base)}, got {value!r}")
        return _INVALID
    if bounds is not None:
        lo, hi = bounds
        if (lo is not None and result < lo) or (hi is not None and result > hi):
            problems.append(f"{path}: {result!r} is outside {lo}..{hi}")
            return _INVALID
    return result


def _convert(value: Any, base: Any) -> Any:
    """`value` as `base` (bool, int, float or str); raises TypeError or ValueError if not."""
    convert = _CONVERTERS.get(base)
    if convert is None:
        raise TypeError(f"unsupported config type {base}")
    return convert(value)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


def _to_int(value: Any) -> int:
    """An int or ASCII decimal text (int() alone would take Unicode digits and `_`)."""
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not text.isascii() or not text.lstrip("-").isdigit():
        raise ValueError(value)
    return int(text)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if not text.isascii():
        raise ValueError(value)
    return float(text)


def _to_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise TypeError(value)
    return str(value)


_CONVERTERS: dict[type, Any] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}
