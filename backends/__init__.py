"""Storage backends by name. Imports are lazy so the SQLite default needs no Redis/MySQL libs.

Only the composition root (`pinlater.app`) picks a backend by name; it hands `backend_class` to
the config loader so that each backend validates its own config section.
"""

from __future__ import annotations

import importlib

_BACKENDS = {
    "sqlite": "backends.sqlite:SQLiteBackend",
    "mysql": "backends.mysql:MySQLBackend",
    "redis": "backends.redis_backend:RedisBackend",
}


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def backend_class(kind: str):
    """The Backend class for `kind`; KeyError with a readable message if unknown."""
    target = _BACKENDS.get(kind)
    if target is None:
        raise KeyError(f"unknown backend {kind!r} (expected one of {', '.join(backend_names())})")
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)
