"""Long-poll dequeue across real server processes, on SQLite, Redis and MariaDB: a parked
dequeue gets a job enqueued through its own server and through another one; a wait that ends
with no job answers empty; 1,000 parked dequeues on one server do not keep an enqueue stream
through it from being served (the latency figures are scripts/bench_longpoll.py's business)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from tests.support.longpoll import park_dequeues, read_answers
from tests.support.server_process import ServerProcess
from tests.support.storage import KINDS, backend_section
from worker_sdk.client import PinLaterClient
from worker_sdk.models import JobState

#: long enough that only a wake-up (not the wait ending) explains an answer well within it
LONG_WAIT_MS = 15_000
PARKED = 1000


@pytest.fixture(scope="module", params=KINDS)
def servers(request, tmp_path_factory):
    """Two servers on one fresh storage of each kind; room for 1,000+ connections from here."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"longpoll-{kind}")
    with contextlib.ExitStack() as stack:
        section = stack.enter_context(backend_section(kind, tmp))
        config = {
            "backend": section,
            "janitor": {"enabled": False},
            "server": {"max_connections_per_peer": 5000},
        }
        yield [stack.enter_context(ServerProcess(config, tmp, name=f"server{i}")) for i in range(2)]


def client_of(server: ServerProcess, **kwargs) -> PinLaterClient:
    return PinLaterClient([f"{server.host}:{server.port}"], **kwargs)


class Background:
    """`call()` in a thread; `result()` joins it and returns (value, seconds taken)."""

    def __init__(self, call):
        self._out: dict = {}
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call) -> None:
        started = time.monotonic()
        try:
            self._out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised by result()
            self._out["error"] = exc
        self._out["seconds"] = time.monotonic() - started

    def result(self, timeout: float = 60.0):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the call never returned"
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"], self._out["seconds"]


@pytest.mark.parametrize("through", ["same", "other"])
def test_a_parked_dequeue_gets_a_job_enqueued_while_it_waits(servers, through):
    queue = f"lp_{through}"
    with client_of(servers[0]) as waiting, client_of(servers[1]) as other:
        waiting.create_queue(queue)
        parked = Background(lambda: waiting.dequeue(queue, 5, wait_ms=LONG_WAIT_MS))
        time.sleep(0.5)  # parked by now (it would answer at once if a job were there)
        enqueuer = waiting if through == "same" else other
        [d] = enqueuer.enqueue(queue, [b"wake up"])
        jobs, seconds = parked.result()
    assert [(j.descriptor, j.body) for j in jobs] == [(d, b"wake up")]
    assert seconds < LONG_WAIT_MS / 1000 / 2, "woken, not timed out"


def test_a_wait_that_ends_with_no_job_answers_empty(servers):
    with client_of(servers[0]) as client:
        client.create_queue("lp_empty")
        started = time.monotonic()
        assert client.dequeue("lp_empty", 5, wait_ms=500) == []
        assert time.monotonic() - started >= 0.45


def test_a_thousand_parked_dequeues_do_not_keep_enqueues_from_being_served(servers):
    server = servers[0]
    with client_of(server, timeout=30) as client:
        client.create_queue("lp_parked")
        client.create_queue("lp_stream")
        sockets = park_dequeues(server, "lp_parked", PARKED, wait_ms=LONG_WAIT_MS)
        try:
            started = time.monotonic()
            for i in range(200):
                client.enqueue("lp_stream", [b"%d" % i])
            stream_seconds = time.monotonic() - started
            # one job for the parked: exactly one of them gets it, at once
            [d] = client.enqueue("lp_parked", [b"for one of them"])
            answered = read_answers(sockets, timeout=10, want=1)
            assert list(answered.values()) == [({d: b"for one of them"}, None)]
        finally:
            for sock in sockets:
                sock.close()
        assert client.count("lp_stream", 0) == 200
    assert stream_seconds < 60, "the enqueue stream was served"


def test_a_shutdown_answers_parked_dequeues_empty_at_once(tmp_path):
    with ServerProcess({"janitor": {"enabled": False}}, tmp_path, name="draining") as server:
        with client_of(server) as client:
            client.create_queue("lp_drain")
            parked = Background(lambda: client.dequeue("lp_drain", 5, wait_ms=LONG_WAIT_MS))
            time.sleep(0.5)
            started = time.monotonic()
            assert server.stop() == 0, "drained: nothing abandoned"
            jobs, _ = parked.result()
            assert jobs == []
            assert time.monotonic() - started < LONG_WAIT_MS / 1000 / 2


def test_a_parked_dequeue_whose_client_left_claims_nothing(tmp_path):
    with ServerProcess({"janitor": {"enabled": False}}, tmp_path, name="left") as server:
        with client_of(server) as client:
            client.create_queue("lp_left")
            [gone] = park_dequeues(server, "lp_left", 1, wait_ms=LONG_WAIT_MS)
            gone.close()  # the worker died while its dequeue was parked
            time.sleep(0.3)
            [d] = client.enqueue("lp_left", [b"for a live worker"])
            time.sleep(0.5)
            assert client.lookup([d])[d].state is JobState.PENDING, "not claimed for nobody"
            [job] = client.dequeue("lp_left", 5, wait_ms=LONG_WAIT_MS)
            assert job.descriptor == d
