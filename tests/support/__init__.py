"""Shared test support: how each backend's storage is provided to the suites.

Every backend kind has a module `tests/support/<kind>_env.py` with a function

    start(tmp_dir: pathlib.Path) -> contextlib.AbstractContextManager[BackendUnderTest]

that provides real storage for the tests (throwaway servers on free ports in temp dirs for
Redis and MariaDB, files for SQLite) and tears it down afterwards. Suites give every test its
own queue names, so one environment serves a whole session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class BackendUnderTest:
    """The `backend:` section a test config would hold: kind, options and shard list."""

    kind: str
    shards: list[dict[str, Any]]
    options: dict[str, Any] = field(default_factory=dict)

    def backend_section(self) -> dict[str, Any]:
        return {"kind": self.kind, "shards": self.shards, **self.options}


def unavailable(reason: str) -> None:
    """A required service is missing: fail under CI (CI=true), skip loudly elsewhere."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"required test service unavailable under CI: {reason}")
    pytest.skip(f"service unavailable: {reason}")
