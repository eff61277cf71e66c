"""Fixtures for the server integration tests.

`admin_server` is one `pinlater-server` process per test module (SQLite, janitor off, deleteQueue
allowed with ADMIN_PASSWORD). `inproc_server` runs the real accept loop and connection code
(pinlater.server.loop) on a real loopback socket inside the test process, in front of a small
stand-in handler, for protocol tests that need a handler that misbehaves on purpose (raises
undeclared exceptions, blocks).
Tests of the whole process (real App, SQLite, signals) use tests.support.server_process.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pinlater.config import ServerConfig
from pinlater.idl import PinLater, PinLaterException, pinlater_thrift
from pinlater.main import bind
from pinlater.server.loop import Server
from pinlater.server.transport import Dispatcher
from tests.support.server_process import ServerProcess, admin_config


class StubHandler:
    """Just enough of the PinLater handler for transport tests.

    createQueue("boom") raises an undeclared exception, createQueue("bad") a declared one,
    createQueue("slow_<ms>") blocks that long (released early by `release`); enqueueJobs hands
    back one descriptor per job.
    """

    def __init__(self) -> None:
        self.queues: set[str] = set()
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def createQueue(self, context, name):
        if name == "boom":
            raise RuntimeError("a bug in the handler")
        if name == "bad":
            raise PinLaterException(errorCode=410, message="bad name")
        if name.startswith("slow_"):
            self.started.release()
            self.release.wait(int(name[5:]) / 1000)
        self.queues.add(name)

    def getQueueNames(self, context):
        return set(self.queues)

    def enqueueJobs(self, context, request):
        return pinlater_thrift.PinLaterEnqueueResponse(
            jobDescriptors=[f"{request.queueName}:s1:p1:{i}" for i in range(len(request.jobs))]
        )


@dataclasses.dataclass
class RunningServer:
    server: Server
    host: str
    port: int
    handler: Any
    thread: threading.Thread
    result: dict


@contextmanager
def run_inproc(handler: Any = None, **settings: Any) -> Iterator[RunningServer]:
    """Serve `handler` (default StubHandler) with ServerConfig(**settings) on 127.0.0.1:0."""
    handler = handler if handler is not None else StubHandler()
    config = ServerConfig(**{"port": 0, "shutdown_grace_seconds": 5.0, **settings})
    sock = bind("127.0.0.1", 0)
    server = Server(sock, config, Dispatcher(PinLater, handler))
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(drained=server.serve_forever()), daemon=True
    )
    thread.start()
    host, port = server.address
    try:
        yield RunningServer(server, host, port, handler, thread, result)
    finally:
        server.request_shutdown()
        thread.join(15)
        assert not thread.is_alive(), "server thread did not stop"


@pytest.fixture
def inproc_server() -> Iterator[RunningServer]:
    with run_inproc() as running:
        yield running


@pytest.fixture(scope="module")
def admin_server(request, tmp_path_factory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with ServerProcess(admin_config(), tmp) as running:
        yield running
