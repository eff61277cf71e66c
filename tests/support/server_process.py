"""Run a real `pinlater-server` subprocess for tests, and talk to it over the wire.

    with ServerProcess({"janitor": {"enabled": False}}, tmp_path) as server:
        client = server.client()
        client.createQueue(RequestContext(source="t"), "q")

The server is started as `python -m pinlater --config FILE --port 0` with its data dir
(SQLite) under the given tmp dir. The actual port is read from the server's start log line
(`listening on HOST:PORT`), then the helper waits (bounded) until a TCP connect succeeds. On any
start failure the error message includes the server's log output.

Test configs get `metrics.port: 0` (metrics endpoint off) unless they set it, so parallel test
servers never fight over the default metrics port, and the PINLATER_* environment of the test
run is not passed on (so a developer's shell cannot change what a test runs).

Also here: `RawFrameClient` (send arbitrary bytes, read framed replies) and message helpers for
protocol-level tests, and `make_thrift_client` (framed + binary, like every PinLater client).
"""

from __future__ import annotations

import copy
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import thriftpy2.rpc
import yaml
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TFramedTransportFactory, TMemoryBuffer

from tests.support.storage_process import free_port  # noqa: F401 (tests import it from here)

REPO_ROOT = Path(__file__).resolve().parents[2]
#: the deleteQueue password of servers started with ADMIN_CONFIG
ADMIN_PASSWORD = "integration-admin"


def admin_config() -> dict[str, Any]:
    """Server config for tests: janitor off, deleteQueue allowed with ADMIN_PASSWORD."""
    from pinlater.common.passwords import hash_password

    return {
        "janitor": {"enabled": False},
        "admin": {"password_hash": hash_password(ADMIN_PASSWORD, iterations=1000)},
    }


LISTENING_RE = re.compile(r"listening on (\S+):(\d+)")


class ServerStartError(RuntimeError):
    """The server did not come up; the message carries its exit code and log output."""


class ServerProcess:
    """A `python -m pinlater` subprocess with its own config file and data dir.

    `config` is the YAML config as a dict (copied; `metrics.port` defaults to 0). `data_dir`
    defaults to `tmp_dir/data` for the sqlite backend and is passed as --data-dir; other
    backends get no --data-dir. `extra_args` are appended to the command line.
    """

    def __init__(
        self,
        config: dict[str, Any] | None,
        tmp_dir: Path,
        *,
        port: int = 0,
        data_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        start_timeout: float = 20.0,
        name: str = "server",
    ):
        self.tmp_dir = Path(tmp_dir)
        self.config = copy.deepcopy(config or {})
        self.config.setdefault("metrics", {}).setdefault("port", 0)
        kind = self.config.get("backend", {}).get("kind", "sqlite")
        if (
            data_dir is None
            and kind == "sqlite"
            and "data_dir" not in self.config.get("backend", {})
        ):
            data_dir = self.tmp_dir / "data"
        self.data_dir = data_dir
        self.requested_port = port
        self.extra_args = tuple(extra_args)
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.config_path = self.tmp_dir / f"{name}-config.yaml"
        self.log_path = self.tmp_dir / f"{name}.log"
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._log_file = None

    # ---- lifecycle ----
    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "pinlater",
            "--config",
            str(self.config_path),
            "--port",
            str(self.requested_port),
        ]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        return cmd + list(self.extra_args)

    def spawn(self) -> subprocess.Popen:
        """Start the process without waiting for it to listen (for tests of start failures)."""
        if self.proc is not None and self.proc.poll() is None:
            # a second start would orphan the first process and its log file
            raise RuntimeError(f"{self.log_path.name}: the server is already running")
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.tmp_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.proc

    def start(self) -> ServerProcess:
        """Spawn and wait (bounded) until the server accepts connections."""
        self.spawn()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"server exited with code {self.proc.returncode} "
                    f"before listening; log:\n{self.log()}"
                )
            match = LISTENING_RE.search(self.log())
            if match and _can_connect(match.group(1), int(match.group(2))):
                self.host, self.port = match.group(1), int(match.group(2))
                return self
            time.sleep(0.05)
        self.kill()
        raise ServerStartError(
            f"server did not listen within {self.start_timeout}s; log:\n{self.log()}"
        )

    def log(self) -> str:
        """Everything the server wrote to stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig: int) -> None:
        if self.is_running():
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for exit; returns the exit code (raises subprocess.TimeoutExpired)."""
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code (None if never
        started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (kill -9) and reap."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_log()
        return self.proc.returncode

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ---- clients ----
    def client(self, timeout: float = 10.0):
        """A thriftpy2 PinLater client (framed, binary) connected to this server."""
        return make_thrift_client(self.host, self.port, timeout)

    def raw(self, timeout: float = 5.0) -> RawFrameClient:
        return RawFrameClient(self.host, self.port, timeout)


def _can_connect(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def make_thrift_client(host: str, port: int, timeout: float = 10.0):
    """thriftpy2 client for PinLater over TFramedTransport + TBinaryProtocol. `timeout` in s.

    Discard a client after any transport error: a reused socket may hold a stale reply.
    """
    from pinlater.idl import PinLater

    return thriftpy2.rpc.make_client(
        PinLater, host, port, trans_factory=TFramedTransportFactory(), timeout=int(timeout * 1000)
    )


# ---- raw frames ----


class ConnectionClosed(Exception):
    """The server closed the connection (EOF or reset)."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionClosed if the server closes or resets first."""
    chunks, got = [], 0
    while got < n:
        try:
            chunk = sock.recv(n - got)
        except ConnectionResetError as exc:
            raise ConnectionClosed("connection reset") from exc
        if not chunk:
            raise ConnectionClosed(f"EOF after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class RawFrameClient:
    """A plain socket for protocol tests: send any bytes, read length-prefixed replies."""

    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack("!i", len(payload)) + payload)

    def read_exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack("!i", self.read_exact(4))
        return self.read_exact(size)

    def call(self, payload: bytes) -> bytes:
        self.send_frame(payload)
        return self.read_frame()

    def wait_closed(self, timeout: float) -> bool:
        """True if the server closes the connection within `timeout` (any bytes it sends
        first are discarded)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawFrameClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def encode_call(
    method: str, args: Any = None, seqid: int = 1, msg_type: int = TMessageType.CALL
) -> bytes:
    """A strict binary-protocol message (no frame header). `args` is a thriftpy2 `*_args`
    struct; None sends an empty struct (what a Finagle probe of an unknown method needs)."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin(method, msg_type, seqid)
    if args is None:
        buf.write(b"\x00")  # T_STOP: an empty struct
    else:
        args.write(proto)
    proto.write_message_end()
    return buf.getvalue()


def decode_reply(payload: bytes, result_cls: Any = None) -> tuple[str, int, int, Any]:
    """(name, message type, seqid, body): body is a TApplicationException for EXCEPTION
    replies, a `result_cls` instance when given, else the remaining raw bytes."""
    buf = TMemoryBuffer(payload)
    proto = TBinaryProtocol(buf)
    name, msg_type, seqid = proto.read_message_begin()
    if msg_type == TMessageType.EXCEPTION:
        body = TApplicationException()
        body.read(proto)
    elif result_cls is not None:
        body = result_cls()
        body.read(proto)
    else:
        body = buf.read(len(payload))
    return name, msg_type, seqid, body


def call_measured(server: ServerProcess, method: str, timeout: float = 60.0, **args: Any):
    """Call `method` (keyword arguments of its `*_args`) on a fresh plain socket: (the reply
    frame's payload size, the decoded `*_result`, or the TApplicationException answered)."""
    from pinlater.idl import PinLater

    call_args = getattr(PinLater, f"{method}_args")(**args)
    with server.raw(timeout) as raw:
        payload = raw.call(encode_call(method, call_args))
    _, _, _, body = decode_reply(payload, getattr(PinLater, f"{method}_result"))
    return len(payload), body
