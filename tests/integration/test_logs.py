"""Server and worker logs against real processes: JSON lines for log shippers, one prefix per
line, and one warning for one failing call however often the client retried it."""

from __future__ import annotations

import json
import time

import pytest

from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from tests.support.redis_env import running_server
from tests.support.server_process import ServerProcess
from worker_sdk import PinLaterClient
from worker_sdk.errors import QueueNotFound, ShardConnectionFailed


def test_server_logs_json_lines_with_the_flag_or_the_environment(tmp_path):
    for how, extra_args, env in (
        ("flag", ("--log-format", "json"), {}),
        ("env", (), {"PINLATER_LOG_FORMAT": "json"}),
    ):
        with ServerProcess(
            {"janitor": {"enabled": False}},
            tmp_path / how,
            extra_args=extra_args,
            env=env,
        ) as server:
            with PinLaterClient([f"{server.host}:{server.port}"]) as client:
                with pytest.raises(QueueNotFound):
                    client.count("no_such_q")
            time.sleep(0.2)
        lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
        messages = {entry["message"].split(" ", 1)[0]: entry for entry in lines}
        assert "pinlater-server" in messages, lines
        assert messages["pinlater-server"]["logger"] == "pinlater.server"
        warning = next(e for e in lines if e["logger"] == "pinlater.requests")
        assert warning["level"] == "WARNING" and "outcome=QUEUE_NOT_FOUND" in warning["message"]


def test_a_bad_log_format_is_a_configuration_error():
    try:
        load_config(env={"PINLATER_LOG_FORMAT": "xml"}, overrides={"backend": {}})
    except ConfigError as exc:
        assert exc.problems == ["log_format: 'xml' must be one of text, json"]
    else:
        raise AssertionError("PINLATER_LOG_FORMAT=xml was accepted")


def test_durability_warnings_name_their_shard_once(tmp_path):
    with running_server(tmp_path / "redis", appendonly=False) as redis_server:
        config = {
            "janitor": {"enabled": False},
            "backend": {"kind": "redis", "shards": [redis_server.shard("r1")]},
        }
        with ServerProcess(config, tmp_path) as server:
            pass
    [line] = [line for line in server.log().splitlines() if "appendonly" in line]
    assert "DURABILITY: shard r1: appendonly is 'no'" in line
    assert line.count("shard r1") == 1


def test_one_failing_call_retried_by_the_client_is_one_warning(tmp_path):
    with running_server(tmp_path / "redis") as redis_server:
        config = {
            "janitor": {"enabled": False},
            "backend": {"kind": "redis", "shards": [redis_server.shard("r1")]},
            "sharding": {"probe_interval_seconds": 3600},
        }
        with ServerProcess(config, tmp_path) as server:
            redis_server.kill()
            client = PinLaterClient([f"{server.host}:{server.port}"], retries=2)
            try:
                client.create_queue("never")
            except ShardConnectionFailed as exc:
                assert str(exc).count("shard r1") == 1, exc
            else:
                raise AssertionError("createQueue succeeded without its storage")
            client.close()
            time.sleep(0.2)
            log = server.log()
    request_warnings = [line for line in log.splitlines() if "WARNING pinlater.requests" in line]
    assert len(request_warnings) == 1, log
    assert "method=createQueue" in request_warnings[0]
    assert "outcome=SHARD_CONNECTION_FAILED" in request_warnings[0]
