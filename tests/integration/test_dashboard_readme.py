"""The README's dashboard examples run as written: its config block is a valid config that
turns the dashboard on, and its shell block (login, an escaped body, a POST without CSRF token
refused, the Content-Security-Policy) prints what the README shows, against a real server
started with that config."""

from __future__ import annotations

import shutil

import pytest
import yaml

from pinlater.app import load_config
from pinlater.common.passwords import hash_password
from tests.integration.test_readme_tour import README, console_scripts, run_blocks, shell_env
from tests.support import readme_blocks
from tests.support.server_process import ServerProcess, free_port


def readme_config(port: int) -> dict:
    (block,) = readme_blocks.blocks(README, "dashboard-config")
    config = yaml.safe_load(block)
    assert config["admin"]["password_hash"].startswith("pbkdf2_sha256$")
    config["admin"]["password_hash"] = hash_password("secret", iterations=1000)
    config["metrics"]["port"] = port
    return config


def test_the_readme_config_turns_the_dashboard_on():
    config = load_config(env={}, overrides=readme_config(9999))
    assert config.admin.password_hash and config.dashboard.read_only is False
    assert (config.metrics.host, config.metrics.port) == ("127.0.0.1", 9999)


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
def test_the_readme_dashboard_examples_run_as_written(tmp_path):
    port = free_port()
    console_scripts(tmp_path)
    with ServerProcess(readme_config(port), tmp_path) as server:
        run_blocks(["dashboard"], tmp_path, shell_env(server, port), any_shard=False)
