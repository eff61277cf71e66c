"""The systemd units (deploy/systemd/): `systemd-analyze verify` accepts them, their offline
security exposure stays low, their ExecStart command lines are accepted by the real parsers and
config loader, and the server started with the unit's flags stops gracefully (exit 0, so
Restart=on-failure leaves it stopped) on the SIGTERM that KillSignal sends."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.deploy_checks import run_tool, server_config, worker_args
from tests.support import unavailable
from tests.support.server_process import LISTENING_RE, REPO_ROOT

UNITS = REPO_ROOT / "deploy" / "systemd"
SERVER_UNIT = UNITS / "pinlater.service"
WORKER_UNIT = UNITS / "pinlater-worker@.service"
INSTALL_PREFIX = "/opt/pinlater/bin/"
#: the worker instance the tests use (the unit's own example)
QUEUE = "emails"


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def _venv_copy(path: Path, tmp: Path, name: str | None = None) -> Path:
    """The unit with ExecStart pointing at this test environment's console scripts."""
    bindir = str(Path(sys.executable).parent) + "/"
    copy = tmp / (name or path.name)
    copy.write_text(path.read_text().replace(INSTALL_PREFIX, bindir))
    return copy


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        unavailable("systemd-analyze is not installed (Debian package systemd)")
    return found


@pytest.mark.parametrize(
    ("path", "name", "max_exposure"),
    [
        (SERVER_UNIT, "pinlater.service", 2.0),
        (WORKER_UNIT, f"pinlater-worker@{QUEUE}.service", 3.0),
    ],
)
def test_systemd_analyze_verifies_the_unit_and_rates_it_exposed_little(
    tmp_path, path, name, max_exposure
):
    tool = _systemd_analyze()
    copy = _venv_copy(path, tmp_path, name)
    done = run_tool([tool, "verify", str(copy)])
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    done = run_tool([tool, "security", "--offline=yes", str(copy)])
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) <= max_exposure, done.stdout


def test_the_server_unit_restarts_on_failure_with_hardening_and_a_state_directory():
    service = unit(SERVER_UNIT)["Service"]
    assert service["Type"] in ("simple", "exec", "notify")
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert service["StateDirectory"] == "pinlater"
    for key, value in (
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("DynamicUser", "yes"),
    ):
        assert service[key] == value, key
    config = server_config([], {}, "defaults")
    assert float(service["TimeoutStopSec"]) > config.server.shutdown_grace_seconds


def _server_argv(tmp: Path) -> list[str]:
    """ExecStart's arguments with the specifiers resolved as systemd would: %d holds the
    credential (the unit's example installs configs/sqlite.yaml), %S the state directories."""
    service = unit(SERVER_UNIT)["Service"]
    credential_name, _, source = service["LoadCredential"].partition(":")
    assert source == "/etc/pinlater/pinlater.yaml"
    credentials = tmp / "credentials"
    credentials.mkdir()
    shutil.copy(REPO_ROOT / "configs" / "sqlite.yaml", credentials / credential_name)
    line = service["ExecStart"].replace("%d", str(credentials)).replace("%S", str(tmp / "state"))
    program, *argv = shlex.split(line)
    assert program == INSTALL_PREFIX + "pinlater-server"
    return argv


def test_the_server_unit_command_line_is_accepted(tmp_path):
    config = server_config(_server_argv(tmp_path), {}, "pinlater.service ExecStart")
    assert config.backend.options["data_dir"] == str(tmp_path / "state" / "pinlater" / "data")


def test_the_server_started_as_the_unit_does_stops_gracefully_on_sigterm(tmp_path):
    argv = _server_argv(tmp_path) + ["--port", "0", "--metrics-port", "0"]
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "pinlater-server"), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 20
        while not LISTENING_RE.search(log.read_text()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert (tmp_path / "state" / "pinlater" / "data").is_dir()


def _documented_worker_env() -> dict[str, str]:
    """The env file the worker unit's comment tells operators to write."""
    text = WORKER_UNIT.read_text()
    block = re.search(r"<<'END'\n(.*?)#   END\n", text, re.S)
    assert block, "the worker unit documents its env file"
    env = {}
    for line in block.group(1).splitlines():
        key, _, value = line.removeprefix("#").strip().partition("=")
        env[key] = value
    return env


def test_the_worker_unit_command_line_is_accepted():
    service = unit(WORKER_UNIT)["Service"]
    assert service["EnvironmentFile"] == "/etc/pinlater/worker-%i.env"
    env = _documented_worker_env()
    line = service["ExecStart"].replace("%i", QUEUE)
    line = line.replace("${HANDLER}", env["HANDLER"]).replace("$WORKER_ARGS", env["WORKER_ARGS"])
    program, *argv = shlex.split(line)
    assert program == INSTALL_PREFIX + "pinlater-worker"
    # the documented handler is the operator's own module: check the rest with the example's
    argv[argv.index("--handler") + 1] = "worker_sdk.examples.example_job:resize"
    args = worker_args(argv, "pinlater-worker@.service ExecStart")
    assert args.queue == QUEUE
    assert args.concurrency == 8
    assert float(service["TimeoutStopSec"]) > args.shutdown_timeout
