"""`backend.require_durable`: the server refuses to start on storage that could lose accepted
jobs (here a throwaway redis-server with appendonly no), and starts on durable storage."""

from __future__ import annotations

import pytest

from tests.support.redis_env import running_server
from tests.support.server_process import ServerProcess


def redis_config(redis_server, require_durable: bool | None) -> dict:
    backend = {"kind": "redis", "shards": [redis_server.shard("r1")]}
    if require_durable is not None:
        backend["require_durable"] = require_durable
    return {"janitor": {"enabled": False}, "backend": backend}


@pytest.mark.backend("redis")
def test_require_durable_refuses_redis_without_aof(tmp_path):
    with running_server(tmp_path / "redis", appendonly=False) as redis_server:
        server = ServerProcess(redis_config(redis_server, True), tmp_path)
        server.spawn()
        try:
            code = server.wait(30)
        finally:
            server.kill()
        log = server.log()
        assert code == 1, log
        assert "refusing to start: backend.require_durable is set" in log
        assert "shard r1: appendonly is 'no'" in log
        assert "listening on" not in log
        assert "Traceback" not in log


@pytest.mark.backend("redis")
def test_without_the_switch_non_durable_redis_only_warns(tmp_path):
    with running_server(tmp_path / "redis", appendonly=False) as redis_server:
        with ServerProcess(redis_config(redis_server, None), tmp_path) as server:
            client = server.client()
            client.getQueueNames(_ctx())
            client.close()
        assert "DURABILITY: shard r1" in server.log()


@pytest.mark.backend("redis")
def test_require_durable_starts_on_durable_redis(tmp_path):
    with running_server(tmp_path / "redis", appendonly=True) as redis_server:
        with ServerProcess(redis_config(redis_server, True), tmp_path) as server:
            client = server.client()
            client.createQueue(_ctx(), "durable_q")
            client.close()
        assert "DURABILITY" not in server.log()


def test_require_durable_must_be_a_bool(tmp_path):
    from pinlater.app import load_config
    from pinlater.common.sections import ConfigError

    with pytest.raises(ConfigError) as info:
        load_config(overrides={"backend": {"require_durable": "sometimes"}})
    assert info.value.problems == ["backend.require_durable: expected bool, got 'sometimes'"]
    assert load_config(overrides={"backend": {}}).backend.require_durable is False


def _ctx():
    from pinlater.idl import RequestContext

    return RequestContext(source="durability-test")
