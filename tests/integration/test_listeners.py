"""Every listener of pinlater-server is bound before anything is served, has a flag and an
environment variable, and is refused in one line when its port is taken; every console script
answers --version from the one version source."""

from __future__ import annotations

import importlib.metadata
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import pinlater
from tests.support.server_process import LISTENING_RE, ServerProcess, free_port

QUIET = {"janitor": {"enabled": False}}
SCRIPTS = ("pinlater", "pinlater-server", "pinlater-worker")


def _held_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except OSError:
        return True


def _health(port: int, host: str = "127.0.0.1") -> dict:
    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=5) as answer:
        assert answer.status == 200
        return json.loads(answer.read())


def test_a_taken_metrics_port_is_refused_in_one_line_before_anything_starts(tmp_path):
    thrift_port = free_port()
    with _held_port() as holder:
        metrics_port = holder.getsockname()[1]
        server = ServerProcess(
            QUIET, tmp_path, port=thrift_port, extra_args=("--metrics-port", str(metrics_port))
        )
        server.spawn()
        assert server.wait(20) == 1
        assert _refused(thrift_port), "the Thrift port must not stay bound"
    lines = server.log().strip().splitlines()
    assert len(lines) == 1, server.log()
    assert f"127.0.0.1:{metrics_port}" in lines[0]
    assert "--metrics-port" in lines[0]
    assert "already in use" in lines[0]
    assert not (tmp_path / "data").exists(), "no storage may be opened before every port is bound"


def test_a_taken_thrift_port_names_the_port_flag(tmp_path):
    with _held_port() as holder:
        port = holder.getsockname()[1]
        server = ServerProcess(QUIET, tmp_path, port=port)
        server.spawn()
        assert server.wait(20) == 1
    lines = server.log().strip().splitlines()
    assert len(lines) == 1, server.log()
    assert f"127.0.0.1:{port}" in lines[0]
    assert "--port" in lines[0]
    assert "--metrics-port" not in lines[0]


def test_metrics_port_and_host_come_from_flags_over_the_environment(tmp_path):
    env_port, flag_port = free_port(), free_port()
    env = {"PINLATER_METRICS_PORT": str(env_port), "PINLATER_METRICS_HOST": "127.0.0.1"}
    with ServerProcess(QUIET, tmp_path / "env", env=env) as server:
        assert _health(env_port)["status"] == "ok"
        assert f"metrics on http://127.0.0.1:{env_port}/metrics" in server.log()
    args = ("--metrics-host", "127.0.0.1", "--metrics-port", str(flag_port))
    with ServerProcess(QUIET, tmp_path / "flag", env=env, extra_args=args):
        assert _health(flag_port)["version"] == pinlater.__version__
        assert _refused(env_port)


def test_metrics_port_zero_disables_the_endpoint(tmp_path):
    with ServerProcess(QUIET, tmp_path, extra_args=("--metrics-port", "0")) as server:
        assert "metrics on" not in server.log()
        assert LISTENING_RE.search(server.log())


def test_metrics_listen_on_ipv6_loopback(tmp_path):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    port = free_port()
    with ServerProcess(
        QUIET, tmp_path, extra_args=("--metrics-host", "::1", "--metrics-port", str(port))
    ):
        assert _health(port, "[::1]")["status"] == "ok"


def _script(name: str) -> Path:
    path = Path(sys.executable).parent / name
    assert path.exists(), f"console script {name} not installed next to {sys.executable}"
    return path


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_console_script_prints_the_version(name):
    done = subprocess.run([str(_script(name)), "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{name} {pinlater.__version__}"
    assert done.stderr == ""


def test_the_installed_metadata_carries_the_one_version():
    assert importlib.metadata.version("pinlater") == pinlater.__version__
