"""Docker users' path: the opt-in MySQL 8 conformance flavour (PINLATER_TEST_MYSQL8=1) skips
cleanly, naming the reason, when no Docker engine answers, instead of erroring."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.server_process import REPO_ROOT


def test_the_mysql8_flavour_skips_with_a_reason_when_no_docker_engine_answers(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(
        PINLATER_TEST_MYSQL8="1",
        # a socket nobody listens on, so the check fails here even on a machine with Docker
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
        PYTHONPATH=str(REPO_ROOT),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/conformance/test_queues.py",
            "-k",
            "mysql8",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    summary = done.stdout.strip().splitlines()[-1]
    # every mysql8 test skipped; none errored, failed or passed
    assert re.fullmatch(r"\d+ skipped, \d+ deselected in [0-9.]+s", summary), out
    assert "no Docker engine answers" in out, out
