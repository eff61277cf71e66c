"""The lifecycle every throwaway storage server shares (redis-server, mariadbd): start on a
free loopback port, wait until it answers, kill -9 / stop / restart by PID on the same data.

Starting is built for a loaded machine shared with other test sessions:

* the wait has no fixed deadline: it gives up only after `startup_timeout` seconds in which the
  process did no work (no CPU time used, nothing written to its log), or after
  `startup_limit` in all, so a start slowed by load (crash recovery, a busy disk) is waited
  for while a stuck one still fails; the poll interval is short, so a normal start is not
  slower;
* readiness is asked of *this* process (`_answers` checks the server's identity: its pid or
  its socket path), so a server another test or session runs on the probed port is never
  taken for ours;
* a port taken between probing it and binding it (`free_port` is racy by nature) ends the
  start with `PortTaken` (the server's log says so), and `start_on_a_free_port` moves on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """A loopback port that was free a moment ago (racy by nature; prefer port 0 to bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PortTaken(RuntimeError):
    """The server exited because another process holds its port."""


#: what redis-server and mariadbd log when their port is taken
_PORT_TAKEN_MARKS = ("address already in use", "bind on tcp/ip port")


class StorageProcess:
    """One storage server process. Subclasses give `args()`, `_answers()` (True once this
    process serves; may raise while it starts), `name`, `log_file` and `startup_timeout`."""

    name = "storage server"
    log_file: Path
    #: seconds a start may go without the process doing any work before it counts as stuck
    startup_timeout = 30.0
    #: seconds a start may take in all, working or not
    startup_limit = 300.0
    poll_seconds = 0.05

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
        log_start = self._log_size()
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready(log_start)
        return self

    def start_on_a_free_port(self, tries: int = 5):
        """start(), moving to another free port when the chosen one was taken in between."""
        for attempt in range(tries):
            try:
                return self.start()
            except PortTaken:
                if attempt + 1 == tries:
                    raise
                self.kill()
                self.port = free_port()
        raise AssertionError("unreachable")

    def _wait_ready(self, log_start: int) -> None:
        assert self.proc is not None
        started = last_work = time.monotonic()
        work = self._work_done()
        while True:
            if self.proc.poll() is not None:
                raise self._exit_error(log_start)
            try:
                if self._answers():
                    return
            except self._starting_errors():  # not listening yet, or still recovering
                pass
            now = time.monotonic()
            done = self._work_done()
            if done != work:
                work, last_work = done, now
            if now - last_work > self.startup_timeout or now - started > self.startup_limit:
                break
            time.sleep(self.poll_seconds)
        self.kill()
        raise RuntimeError(
            f"{self.name} on port {self.port} did not start: {now - started:.0f}s, the last "
            f"{now - last_work:.0f}s without using CPU or writing its log; see {self.log_file}"
        )

    def _work_done(self) -> tuple[int, int]:
        """(CPU ticks the process used, size of its log): a start still working changes them."""
        assert self.proc is not None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, ValueError, IndexError):
            ticks = 0
        return ticks, self._log_size()

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_file)
        except OSError:
            return 0

    def _exit_error(self, log_start: int) -> RuntimeError:
        """PortTaken if the log written since this start says the port was in use."""
        assert self.proc is not None
        try:
            with open(self.log_file, "rb") as log:
                log.seek(log_start)
                written = log.read().decode(errors="replace").lower()
        except OSError:
            written = ""
        cause = PortTaken if any(mark in written for mark in _PORT_TAKEN_MARKS) else RuntimeError
        return cause(f"{self.name} exited with {self.proc.returncode}; see {self.log_file}")

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
