"""The lifecycle every throwaway storage server shares (redis-server, mariadbd): start on a
free loopback port, wait until it answers, kill -9 / stop / restart by PID on the same data."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A loopback port that was free a moment ago (racy by nature; prefer port 0 to bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StorageProcess:
    """One storage server process. Subclasses give `args()`, `_answers()` (True once it
    serves; may raise while it starts), `name`, `log_file` and `startup_timeout`."""

    name = "storage server"
    startup_timeout = 30.0

    def __init__(self):
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    def _starting_errors(self) -> tuple[type[BaseException], ...]:
        """Errors `_answers` raises while the server is not listening yet."""
        return (OSError,)

    def start(self):
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()
        return self

    def start_on_a_free_port(self, tries: int = 3):
        """start(), moving to another free port when the chosen one was taken in between."""
        for attempt in range(tries):
            try:
                return self.start()
            except RuntimeError:
                if attempt + 1 == tries:
                    raise
                self.kill()
                self.port = free_port()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; see {self.log_file}"
                )
            try:
                if self._answers():
                    return
            except self._starting_errors():  # not listening yet, or still recovering
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} on port {self.port} did not start in time")

    def kill(self) -> None:
        """kill -9: no shutdown, nothing flushed beyond what the durability settings did."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self):
        """Start again on the same port and data (after kill or stop): crash recovery."""
        self.kill()
        return self.start()
