"""The conformance suite's fixtures: one `api` per test, parametrized over every backend.

Each backend kind's storage comes from tests/support/<kind>_env.py (throwaway servers for Redis
and MariaDB); one App per kind serves the whole session and every test works on its own fresh
queues, which are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import os

import pytest

from pinlater.app import App, load_config
from pinlater.common.passwords import hash_password
from tests.conformance.api import ADMIN_PASSWORD, Api
from tests.conformance.wire import loopback_client

# flavour -> (support module, context-manager factory name)
FLAVOURS = {
    "sqlite": ("tests.support.sqlite_env", "start"),
    "sqlite_sharded": ("tests.support.sqlite_env", "start_sharded"),
    "mysql": ("tests.support.mysql_env", "start"),
    "redis": ("tests.support.redis_env", "start"),
    "mysql8": ("tests.support.mysql8_container_env", "start"),
    # one App over two clusters (Redis "hot", MySQL "durable"): the tests' queues go to the
    # default cluster through the router, so the suite runs once per cluster
    "clusters_redis": ("tests.support.clusters_env", "start_redis_default"),
    "clusters_mysql": ("tests.support.clusters_env", "start_mysql_default"),
    # the prefetching broker on for every queue (issue 15 item 3): the same suite must pass
    "sqlite_broker": ("tests.support.sqlite_env", "start_sharded"),
    "redis_broker": ("tests.support.redis_env", "start"),
    "mysql_broker": ("tests.support.mysql_env", "start"),
}
#: flavours whose queues default to prefetch > 0, with the broker's lease passes running
BROKER_FLAVOURS = {"sqlite_broker", "redis_broker", "mysql_broker"}
#: the broker settings of those flavours: a small buffer that refills at once, leases renewed
#: often, so that most tests' dequeues after the first are served from a buffer
BROKER_SETTINGS = {
    "default_prefetch": 8,
    "renew_seconds": 0.2,
    "lease_seconds": 2,
    "write_behind_ms": 2,
}


def _available_flavours() -> list[str]:
    """Every backend, each also with the prefetching broker on (`*_broker`, issue 15: the
    suite runs with the broker as a backend variant; PINLATER_TEST_BROKER=0 leaves them out
    for a quicker local run); MySQL 8 in a container only on request (PINLATER_TEST_MYSQL8=1:
    it needs a Docker engine). A backend whose service is missing fails under CI and skips
    loudly elsewhere."""
    mysql8 = os.environ.get("PINLATER_TEST_MYSQL8", "") == "1"
    broker = os.environ.get("PINLATER_TEST_BROKER", "") != "0"
    return [
        f for f in FLAVOURS if (f != "mysql8" or mysql8) and (f not in BROKER_FLAVOURS or broker)
    ]


def pytest_generate_tests(metafunc):
    if "flavour" in metafunc.fixturenames:
        metafunc.parametrize("flavour", _available_flavours(), scope="session")


@pytest.fixture(scope="session")
def conformance_app(flavour, tmp_path_factory):
    module, factory = FLAVOURS[flavour]
    start = getattr(importlib.import_module(module), factory)
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(start(tmp_path_factory.mktemp(flavour)))
        sections = (
            env.config_sections()
            if hasattr(env, "config_sections")
            else {"backend": env.backend_section()}
        )
        config = load_config(
            env=_no_env(),
            overrides={
                **sections,
                "admin": {
                    "password_hash": hash_password(ADMIN_PASSWORD, iterations=1000),
                    # tests delete queues in loops; the hashing cap is pinned elsewhere
                    "password_checks_per_second": 10_000,
                },
                "janitor": {"enabled": False},
                **({"broker": BROKER_SETTINGS} if flavour in BROKER_FLAVOURS else {}),
            },
        )
        app = App(config)
        stack.callback(app.close)
        if flavour in BROKER_FLAVOURS:
            if app.store.broker is None:
                pytest.skip(f"{flavour}: the backend has no prefetch primitives (Shard.prefetch)")
            app.start_broker()
        yield app


def _no_env() -> dict:
    return {}


@pytest.fixture
def api(conformance_app):
    api = Api(loopback_client(conformance_app.handler), conformance_app)
    yield api
    store = conformance_app.store
    for name in store.shard_names():  # a test that broke shards leaves them healthy
        store.health.forget(name)
    for queue in api.created:
        store.delete_queue(queue)


@pytest.fixture
def queue(api) -> str:
    return api.new_queue()
