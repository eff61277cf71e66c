"""Suite-wide options: run the tests of some backends only.

`./scripts/test --backend sqlite` (or `PINLATER_TEST_BACKENDS=sqlite,redis`) keeps the tests that
do not depend on a backend and, of the rest, those of the named backends. A test depends on a
backend when one of its parameters (or its fixtures' parameters) is a backend or flavour name
(the conformance suite, the fault scenarios, the worker and operating tests) or when it is
marked `@pytest.mark.backend("redis")` (the per-backend shard, crash and durability tests).
"""

from __future__ import annotations

import os

import pytest

#: parameter values that name a backend (or a flavour of one), and the backend they belong to
_BACKEND_OF = {
    "sqlite": "sqlite",
    "sqlite_sharded": "sqlite",
    "mysql": "mysql",
    "mysql8": "mysql",
    "redis": "redis",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=[],
        help="run only this backend's tests (sqlite, mysql, redis; repeat or comma-separate); "
        "backend-independent tests always run. Default: $PINLATER_TEST_BACKENDS, else all",
    )


def _selected(config: pytest.Config) -> set[str] | None:
    raw = ",".join(config.getoption("--backend")) or os.environ.get("PINLATER_TEST_BACKENDS", "")
    names = {name.strip() for name in raw.split(",") if name.strip()}
    return names or None


def _backends_of(item: pytest.Item) -> set[str]:
    found = {str(mark.args[0]) for mark in item.iter_markers("backend")}
    params = getattr(getattr(item, "callspec", None), "params", {})
    found.update(_BACKEND_OF[v] for v in params.values() if isinstance(v, str) and v in _BACKEND_OF)
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = _selected(config)
    if selected is None:
        return
    keep, drop = [], []
    for item in items:
        backends = _backends_of(item)
        (drop if backends and not backends & selected else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
