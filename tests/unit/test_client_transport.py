"""PinLaterClient against small real Thrift servers this test controls.

The servers speak real framed/binary Thrift over loopback sockets (thriftpy2's TProcessor with a
scripted handler), and some misbehave on purpose: close the connection mid-call, stall, or
answer late. No database is involved; the handler just records what it received.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException, TProcessor
from thriftpy2.transport import TFramedTransportFactory, TSocket, TTransportException

from pinlater.errors import PinLaterError, QueueNotFound, ShardConnectionFailed
from pinlater.idl import ErrorCode, PinLater, PinLaterException
from pinlater.idl import pinlater_thrift as wire
from worker_sdk import (
    AckInfo,
    Acks,
    CheckpointRequest,
    Job,
    JobState,
    PinLaterApplicationError,
    PinLaterClient,
    PinLaterTransportError,
)


class Handler:
    """Records every call; `script` maps a method to a callable producing its result."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []
        self.script = {}
        self.lock = threading.Lock()

    def _run(self, name, *args):
        with self.lock:
            self.calls.append((name, args))
            n = sum(1 for c in self.calls if c[0] == name)
        action = self.script.get(name)
        return action(n, *args) if action else None

    def count(self, name):
        return sum(1 for c in self.calls if c[0] == name)

    def __getattr__(self, name):
        if name in PinLater.thrift_services:
            return lambda *args: self._run(name, *args)
        raise AttributeError(name)


class FakeServer:
    """A framed/binary Thrift server on a free loopback port with an owned accept loop.

    `behaviour(conn_index, sock)` may take over a connection (e.g. read and close); returning
    False lets the normal processor serve it. `idle_timeout` closes connections idle that long.
    """

    def __init__(self, handler=None, behaviour=None, idle_timeout=None):
        self.handler = handler or Handler()
        self.behaviour = behaviour
        self.idle_timeout = idle_timeout
        self.accepted = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.listener.close()
        for thread in self._threads:
            thread.join(5)

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(self.accepted, conn), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, index, conn):
        conn.settimeout(self.idle_timeout or 0.2)
        try:
            if self.behaviour and self.behaviour(index, conn) is not False:
                return
            transport = TFramedTransportFactory().get_transport(TSocket(sock=conn))
            proto = TBinaryProtocolFactory().get_protocol(transport)
            processor = TProcessor(PinLater, self.handler)
            while not self._stop.is_set():
                try:
                    processor.process(proto, proto)
                except TTransportException as exc:
                    if exc.type == TTransportException.END_OF_FILE or self.idle_timeout:
                        return
                except TimeoutError:
                    if self.idle_timeout:
                        return
                except OSError:
                    return
        finally:
            conn.close()


def read_frame_then_close(index, sock):
    """Behaviour: swallow the request, then drop the connection without replying."""
    try:
        sock.recv(65536)
    except OSError:
        pass
    return True


def client_for(*servers, **options):
    options.setdefault("timeout", 2.0)
    options.setdefault("connect_timeout", 1.0)
    options.setdefault("backoff", 0.001)
    return PinLaterClient(
        [s.address if hasattr(s, "address") else s for s in servers], source="test:host", **options
    )


def dead_address():
    """A loopback port with nothing listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# ---- happy path and wire mapping ----


def test_calls_reuse_one_pooled_connection():
    with FakeServer() as server:
        server.handler.script["getQueueNames"] = lambda n, ctx: {"b", "a"}
        with client_for(server) as client:
            for _ in range(5):
                assert client.queue_names() == ["a", "b"]
        assert server.accepted == 1


def test_every_call_sends_the_source_and_a_fresh_request_id():
    with FakeServer() as server:
        server.handler.script["getQueueNames"] = lambda n, ctx: set()
        with client_for(server) as client:
            client.queue_names()
            client.queue_names()
        contexts = [args[0] for _, args in server.handler.calls]
        assert [c.source for c in contexts] == ["test:host", "test:host"]
        assert contexts[0].requestId and contexts[0].requestId != contexts[1].requestId


def test_enqueue_sends_job_fields_and_returns_descriptors():
    def enqueue(n, ctx, request):
        return wire.PinLaterEnqueueResponse(
            jobDescriptors=[f"{request.queueName}:s1:p1:{i}" for i in range(len(request.jobs))]
        )

    with FakeServer() as server:
        server.handler.script["enqueueJobs"] = enqueue
        with client_for(server) as client:
            ids = client.enqueue(
                "q",
                [
                    b"plain",
                    Job(b"\xff\x00", priority=2, attempts=5, run_after_ms=1234, custom_status="st"),
                ],
            )
        assert ids == ["q:s1:p1:0", "q:s1:p1:1"]
        request = server.handler.calls[0][1][1]
        assert request.jobs[0].body == b"plain" and request.jobs[0].priority == 1
        job = request.jobs[1]
        assert (
            job.body,
            job.priority,
            job.numAttemptsAllowed,
            job.runAfterTimestampMillis,
            job.customStatus,
        ) == (b"\xff\x00", 2, 5, 1234, "st")


def test_enqueue_rejects_text_bodies_before_sending():
    with FakeServer() as server, client_for(server) as client:
        with pytest.raises(TypeError):
            client.enqueue("q", ["not bytes"])
        assert server.handler.calls == []


def test_dequeue_returns_claims_and_ack_sends_them_back():
    def dequeue(n, ctx, request):
        meta = wire.PinLaterDequeueMetadata(
            attemptsAllowed=3, attemptsRemaining=2, claimDescriptor="c" * 24 + ":test:host"
        )
        return wire.PinLaterDequeueResponse(
            jobs={"q:s1:p1:7": b"body"}, jobMetadata={"q:s1:p1:7": meta}
        )

    with FakeServer() as server:
        server.handler.script["dequeueJobs"] = dequeue
        with client_for(server) as client:
            [job] = client.dequeue("q", 5)
            assert (
                job.descriptor,
                job.body,
                job.attempts_allowed,
                job.attempts_remaining,
                job.claim,
            ) == ("q:s1:p1:7", b"body", 3, 2, "c" * 24 + ":test:host")
            client.ack(
                "q",
                succeeded=[job],
                failed=[AckInfo("q:s1:p1:8", claim="x", append_status="boom", retry_delay_ms=500)],
            )
            client.dequeue("q", 1, Acks(succeeded=(job,)))
            client.checkpoint(
                "q", [CheckpointRequest(job.descriptor, claim=job.claim, move_to_pending=True)]
            )
        ack = server.handler.calls[1][1][1]
        assert ack.jobsSucceeded[0].claimDescriptor == job.claim
        failed = ack.jobsFailed[0]
        assert (failed.claimDescriptor, failed.appendCustomStatus, failed.retryDelayMillis) == (
            "x",
            "boom",
            500,
        )
        piggy = server.handler.calls[2][1][1].jobAckRequest
        assert piggy.jobsSucceeded[0].claimDescriptor == job.claim
        checkpoint = server.handler.calls[3][1][1].requests[0]
        assert checkpoint.claimDescriptor == job.claim and checkpoint.moveToPending


def test_empty_dequeue_response_is_an_empty_list():
    with FakeServer() as server:
        server.handler.script["dequeueJobs"] = lambda n, ctx, r: wire.PinLaterDequeueResponse()
        with client_for(server) as client:
            assert client.dequeue("q", 3) == []


def test_ack_with_nothing_to_ack_makes_no_call():
    with FakeServer() as server, client_for(server) as client:
        client.ack("q")
        assert server.handler.calls == []


def test_scan_follows_continuations_until_the_end():
    def scan(n, ctx, request):
        info = wire.PinLaterJobInfo(
            jobDescriptor=f"q:s1:p1:{n}",
            jobState=3,
            attemptsAllowed=1,
            attemptsRemaining=0,
            customStatus="",
            createdAtTimestampMillis=n,
        )
        following = {"0": "page2", "page2": "page3"}.get(request.continuation, "-1")
        return wire.PinLaterScanJobsResponse(scannedJobs=[info], continuation=following)

    with FakeServer() as server:
        server.handler.script["scanJobs"] = scan
        with client_for(server) as client:
            jobs = list(client.scan("q", JobState.FAILED, limit=1))
            assert [j.descriptor for j in jobs] == ["q:s1:p1:1", "q:s1:p1:2", "q:s1:p1:3"]
            assert jobs[0].state is JobState.FAILED
            assert len(list(client.scan("q", JobState.FAILED, max_jobs=2))) == 2
        continuations = [args[1].continuation for _, args in server.handler.calls[:3]]
        assert continuations == ["0", "page2", "page3"]


def test_server_error_is_raised_as_its_typed_class_without_retry():
    def not_found(n, ctx, request):
        raise PinLaterException(errorCode=ErrorCode.QUEUE_NOT_FOUND, message="Queue not found: q")

    with FakeServer() as server:
        server.handler.script["getJobCount"] = not_found
        with client_for(server, retries=3) as client:
            with pytest.raises(QueueNotFound) as caught:
                client.count("q")
        assert caught.value.queue == "q" and caught.value.code == 413
        assert server.handler.count("getJobCount") == 1


def test_shard_failures_are_retried_for_idempotent_calls_only():
    def shard_down(n, ctx, *args):
        raise PinLaterException(errorCode=ErrorCode.SHARD_CONNECTION_FAILED, message="down")

    with FakeServer() as server:
        server.handler.script["getJobCount"] = shard_down
        server.handler.script["enqueueJobs"] = shard_down
        with client_for(server, retries=2) as client:
            with pytest.raises(ShardConnectionFailed):
                client.count("q")
            with pytest.raises(ShardConnectionFailed):
                client.enqueue("q", [b"x"])
        assert server.handler.count("getJobCount") == 3
        assert server.handler.count("enqueueJobs") == 1
        assert server.accepted == 1  # a server error leaves the connection usable


def test_shard_failure_then_success_returns_the_result():
    def flaky(n, ctx, request):
        if n == 1:
            raise PinLaterException(errorCode=ErrorCode.NO_HEALTHY_SHARDS, message="none")
        return 42

    with FakeServer() as server:
        server.handler.script["getJobCount"] = flaky
        with client_for(server, retries=1) as client:
            assert client.count("q") == 42


def test_application_exception_is_raised_as_application_error():
    def broken(n, ctx):
        raise TApplicationException(TApplicationException.INTERNAL_ERROR, "kaput")

    with FakeServer() as server:
        server.handler.script["getQueueNames"] = broken
        with client_for(server) as client:
            with pytest.raises(PinLaterApplicationError, match="kaput") as caught:
                client.queue_names()
        assert caught.value.type == TApplicationException.INTERNAL_ERROR
        assert isinstance(caught.value, PinLaterError)


# ---- transport failures ----


def test_dropped_connection_is_retried_for_idempotent_calls_on_new_connections():
    with FakeServer(behaviour=read_frame_then_close) as server:
        with client_for(server, retries=2) as client:
            with pytest.raises(PinLaterTransportError) as caught:
                client.count("q")
        assert caught.value.maybe_applied is True
        assert server.accepted == 3


def test_dropped_connection_is_not_retried_for_enqueue_unless_asked():
    with FakeServer(behaviour=read_frame_then_close) as server:
        with client_for(server, retries=2) as client:
            with pytest.raises(PinLaterTransportError):
                client.enqueue("q", [b"x"])
            assert server.accepted == 1
            with pytest.raises(PinLaterTransportError):
                client.enqueue("q", [b"x"], retry=True)
            assert server.accepted == 4


def test_stalled_call_times_out_within_the_timeout():
    def stall(index, sock):
        time.sleep(1.5)
        return True

    with FakeServer(behaviour=stall) as server:
        with client_for(server, timeout=0.2, retries=0) as client:
            started = time.monotonic()
            with pytest.raises(PinLaterTransportError, match="timed out"):
                client.queue_names()
            assert time.monotonic() - started < 1.0


def test_connection_is_discarded_after_a_timeout_so_a_late_reply_is_never_read():
    def slow_first(n, ctx):
        if n == 1:
            time.sleep(0.8)
            return {"stale"}
        return {"fresh"}

    with FakeServer() as server:
        server.handler.script["getQueueNames"] = slow_first
        with client_for(server, timeout=0.5, retries=0) as client:
            with pytest.raises(PinLaterTransportError):
                client.queue_names()
            # on the old socket the stale reply would arrive 0.3 s into this call
            assert client.queue_names() == ["fresh"]
        assert server.accepted == 2


def test_pooled_connection_with_unread_bytes_is_not_reused():
    def slow_first(n, ctx):
        if n == 1:
            time.sleep(0.6)
            return {"stale"}
        return {"fresh"}

    with FakeServer() as server:
        server.handler.script["getQueueNames"] = slow_first
        with client_for(server, timeout=0.2, retries=0) as client:
            with pytest.raises(PinLaterTransportError):
                client.queue_names()
            time.sleep(0.6)  # the stale reply has now arrived on the old socket
            assert client.queue_names() == ["fresh"]


def test_connection_closed_by_server_while_idle_is_not_reused_even_for_enqueue():
    def enqueue(n, ctx, request):
        return wire.PinLaterEnqueueResponse(jobDescriptors=["q:s1:p1:1"])

    with FakeServer(idle_timeout=0.15) as server:
        server.handler.script["enqueueJobs"] = enqueue
        with client_for(server, retries=0) as client:
            client.enqueue("q", [b"a"])
            time.sleep(0.5)  # the server drops the idle connection
            assert client.enqueue("q", [b"b"]) == ["q:s1:p1:1"]
        assert server.accepted == 2 and server.handler.count("enqueueJobs") == 2


def test_refused_connection_fails_over_to_the_next_server():
    with FakeServer() as server:
        server.handler.script["getQueueNames"] = lambda n, ctx: {"q"}
        with client_for(dead_address(), server, retries=1) as client:
            for _ in range(4):
                assert client.queue_names() == ["q"]
        assert server.handler.count("getQueueNames") == 4


def test_refused_connection_is_retried_even_for_enqueue_and_reported_as_not_applied():
    with client_for(dead_address(), retries=2) as client:
        with pytest.raises(PinLaterTransportError, match="connection refused") as caught:
            client.enqueue("q", [b"x"])
    assert caught.value.maybe_applied is False


def test_calls_rotate_round_robin_over_servers():
    with FakeServer() as one, FakeServer() as two:
        for server in (one, two):
            server.handler.script["getQueueNames"] = lambda n, ctx: set()
        with client_for(one, two) as client:
            for _ in range(6):
                client.queue_names()
        assert one.handler.count("getQueueNames") == 3
        assert two.handler.count("getQueueNames") == 3


def test_client_is_safe_to_share_between_threads():
    with FakeServer() as server:
        server.handler.script["getJobCount"] = lambda n, ctx, request: request.priority
        errors = []
        with client_for(server, pool_size=2) as client:

            def work(priority):
                try:
                    for _ in range(30):
                        assert client.count("q", priority=priority) == priority
                except Exception as exc:  # noqa: BLE001 - collected and asserted below
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(p,)) for p in range(1, 7)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        assert errors == []
        assert server.handler.count("getJobCount") == 180


def test_source_longer_than_the_server_accepts_is_rejected_up_front():
    with pytest.raises(ValueError):
        PinLaterClient(["127.0.0.1:9010"], source="x" * 201)


def test_a_call_that_may_have_reached_the_server_is_reported_maybe_applied():
    """First try: the request is read and the connection dropped (it may have been applied);
    the retry cannot even connect. The error must still say the call may have been applied."""
    holder = {}

    def swallow_then_stop_listening(index, sock):
        read_frame_then_close(index, sock)
        listener = holder["server"].listener
        listener.shutdown(socket.SHUT_RDWR)  # stop listening now (close alone waits for accept)
        listener.close()
        return True

    with FakeServer(behaviour=swallow_then_stop_listening) as server:
        holder["server"] = server
        client = client_for(server, retries=1)
        with pytest.raises(PinLaterTransportError) as info:
            client.queue_names()
    assert info.value.maybe_applied is True
    assert server.accepted == 1
