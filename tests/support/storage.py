"""Throwaway storage of any backend kind as a `backend:` config section, for tests and
benchmarks that run a whole server process on it."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KINDS = ("sqlite", "redis", "mysql")


@contextlib.contextmanager
def backend_section(kind: str, tmp_dir: Path) -> Iterator[dict[str, Any]]:
    """The backend section for `kind` on fresh storage (SQLite files in `tmp_dir`, or the
    throwaway redis-server / mariadbd instances of tests/support/<kind>_env.py)."""
    if kind == "sqlite":
        yield {
            "kind": "sqlite",
            "data_dir": str(Path(tmp_dir) / "sqlite"),
            "shards": [{"name": "1"}],
        }
        return
    env = importlib.import_module(f"tests.support.{kind}_env")
    with env.start(Path(tmp_dir)) as under_test:
        yield under_test.backend_section()
