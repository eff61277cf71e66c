"""Handlers and helpers for the worker tests (not a test module).

`record` is a handler for `python -m worker_sdk.worker_cli --handler
tests.integration.worker_handlers:record`. It appends one JSON line per event to the file named
by $WORKER_RECORD_FILE: {"event": "start"|"end", "descriptor", "pid", "attempt", "body"}.
A body `sleep=S` makes it work S seconds (0.05 by default); $WORKER_SLEEP overrides that for
one worker process, and $WORKER_FAIL=1 makes it raise FailJob after its work.
Each line is one O_APPEND write, so lines from several processes never interleave.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.server_process import REPO_ROOT
from worker_sdk import FailJob, JobContext, PinLaterClient


def record(job: JobContext) -> None:
    body = job.body.decode()
    _write("start", job, body)
    seconds = float(os.environ.get("WORKER_SLEEP") or _sleep_of(body))
    time.sleep(seconds)
    _write("end", job, body)
    if os.environ.get("WORKER_FAIL") == "1":
        raise FailJob("failed by the second worker")


def _sleep_of(body: str) -> float:
    for part in body.split(";"):
        key, _, value = part.partition("=")
        if key == "sleep":
            return float(value)
    return 0.05


def _write(event: str, job: JobContext, body: str) -> None:
    line = (
        json.dumps(
            {
                "event": event,
                "descriptor": job.descriptor,
                "pid": os.getpid(),
                "attempt": job.attempt,
                "body": body,
            }
        )
        + "\n"
    )
    fd = os.open(os.environ["WORKER_RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_records(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def wait_for(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll until predicate() is truthy (returns its value); AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class WorkerProcess:
    """`python -m worker_sdk.worker_cli` running the `record` handler, output to a log file."""

    def __init__(
        self,
        tmp_dir: Path,
        servers: str,
        queue: str,
        record_file: Path,
        *,
        name: str = "worker",
        extra_args: tuple = (),
        env: dict | None = None,
    ):
        self.log_path = Path(tmp_dir) / f"{name}.log"
        self.cmd = [
            sys.executable,
            "-m",
            "worker_sdk.worker_cli",
            "--queue",
            queue,
            "--handler",
            "tests.integration.worker_handlers:record",
            "--servers",
            servers,
            "--source",
            f"test-{name}",
            "--no-status",
            *extra_args,
        ]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
            "WORKER_RECORD_FILE": str(record_file),
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> WorkerProcess:
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        """Kill if still running (a test that failed midway), reap, close the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()


class CountingClient(PinLaterClient):
    """Counts dequeue calls, the jobs asked for and the most calls in flight at once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[int] = []
        self.most_at_once = 0
        self._at_once = 0
        self._lock = threading.Lock()

    def dequeue(self, queue, limit, acks=None, **kwargs):
        with self._lock:
            self.asked.append(limit)
            self._at_once += 1
            self.most_at_once = max(self.most_at_once, self._at_once)
        try:
            return super().dequeue(queue, limit, acks, **kwargs)
        finally:
            with self._lock:
                self._at_once -= 1
