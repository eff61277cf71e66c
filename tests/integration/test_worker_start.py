"""`pinlater-worker` at start against a real server: a missing queue is an error (exit 3) unless
--wait-for-queue, which logs that it waits and starts once the queue exists; --log-format json
makes every line, job outcomes included, one JSON object."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.server_process import REPO_ROOT, ServerProcess
from worker_sdk import JobState, PinLaterClient

HANDLER = "worker_sdk.examples.example_job:resize"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess({"janitor": {"enabled": False}}, tmp_path_factory.mktemp("start")) as srv:
        yield srv


def worker(server, *args, stderr=subprocess.PIPE):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
    env.update(PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker_sdk.worker_cli",
            "--servers",
            f"{server.host}:{server.port}",
            "--handler",
            HANDLER,
            *args,
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


def test_a_worker_on_a_missing_queue_says_so_and_exits_3(server):
    proc = worker(server, "--queue", "no_such_queue")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    [line] = err.splitlines()
    assert line.endswith(
        "ERROR worker_sdk.worker_cli: queue no_such_queue does not exist: create it "
        "(pinlater create --queue no_such_queue), or start with --wait-for-queue to wait "
        "until it is created"
    )


def test_wait_for_queue_logs_json_and_starts_once_the_queue_exists(server, tmp_path):
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        proc = worker(
            server, "--queue", "late_q", "--wait-for-queue", "--log-format", "json", stderr=log
        )
    try:
        _wait(lambda: "does not exist yet" in log_path.read_text(), log_path)
        with PinLaterClient([f"{server.host}:{server.port}"]) as client:
            client.create_queue("late_q")
            [bad] = client.enqueue("late_q", [b"bad:notes.txt"])
            _wait(lambda: client.lookup([bad])[bad].state is JobState.FAILED, log_path)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    entries = [json.loads(line) for line in log_path.read_text().splitlines()]
    messages = [(e["level"], e["message"]) for e in entries]
    assert messages[0] == (
        "WARNING",
        "queue late_q does not exist yet: waiting for it to be created (checking every 2s)",
    )
    assert ("INFO", "queue late_q exists now: starting") in messages
    assert (
        "INFO",
        f"job {bad} attempt 1 gave up: FailJob: notes.txt: not an image; FAILED now",
    ) in messages
    assert messages[-1][1].startswith("worker stopped: 1 dequeued, 0 succeeded, 1 failed")


def _wait(predicate, log_path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; worker log:\n{log_path.read_text()}")
        time.sleep(0.1)
