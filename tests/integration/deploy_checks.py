"""Shared checks of the deploy assets (tests/integration/test_deploy_*.py): a command line and
environment written in a Dockerfile, compose file, systemd unit or Kubernetes manifest must be
one the real programs accept, parsed with their real argparse parsers and config loader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from pinlater.app import load_config
from pinlater.cli.main import UsageError as CliUsageError
from pinlater.cli.main import parse_args as cli_parse_args
from pinlater.config import ENV_OVERRIDES, Config
from pinlater.main import flag_overrides
from pinlater.main import parse_args as server_parse_args
from tests.support import unavailable
from worker_sdk.retry import parse_retry
from worker_sdk.worker_cli import SERVERS_ENV, load_handler
from worker_sdk.worker_cli import build_parser as worker_parser

#: variables a deploy asset may set besides the server's PINLATER_* ones
GENERIC_ENV = {"PYTHONUNBUFFERED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "TZ"}
#: what pinlater and pinlater-worker read (the default server list)
CLIENT_ENV = {SERVERS_ENV}


def parsed(parse, argv: list[str], what: str):
    """`parse(argv)`, failing the test (not exiting) on a usage error."""
    try:
        return parse(argv)
    except SystemExit as exc:
        pytest.fail(f"{what}: {argv} is refused by the real parser (exit {exc.code})")
    except CliUsageError as exc:
        pytest.fail(f"{what}: {argv} is refused by the real parser: {exc}")


def assert_known_env(env: Mapping[str, object], what: str, client: bool = False) -> None:
    """Every variable is one the server (config.ENV_OVERRIDES) or, for `client`, the CLI and
    worker read, or a generic one: a misspelt PINLATER_* name would be ignored silently."""
    known = (CLIENT_ENV if client else set(ENV_OVERRIDES)) | GENERIC_ENV
    unknown = sorted(set(env) - known)
    assert not unknown, f"{what}: environment variables nobody reads: {unknown}"


def server_config(argv: list[str], env: Mapping[str, str], what: str) -> Config:
    """The Config pinlater-server would run with (validated; no port is bound)."""
    assert_known_env(env, what)
    args = parsed(server_parse_args, argv, what)
    return load_config(
        args.config, env={k: str(v) for k, v in env.items()}, overrides=flag_overrides(args)
    )


def worker_args(argv: list[str], what: str):
    """pinlater-worker's parsed arguments; the handler imports and the retry policy parses."""
    args = parsed(worker_parser().parse_args, argv, what)
    load_handler(args.handler)
    parse_retry(args.retry)
    return args


def cli_args(argv: list[str], what: str):
    return parsed(cli_parse_args, argv, what)


def venv_tool(name: str) -> str:
    """A command-line tool installed with the test extras, next to this Python."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed (pip install -e '.[test]')")
    return found


def run_tool(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
