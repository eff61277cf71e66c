"""The real `python -m pinlater` process on the SQLite backend, over the socket.

Each test starts its own throwaway server (port 0, data dir under tmp_path) with short timeouts.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import thriftpy2.rpc
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TFramedTransportFactory

from pinlater.idl import PinLater, PinLaterJobState, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.server_process import (
    LISTENING_RE,
    REPO_ROOT,
    ConnectionClosed,
    RawFrameClient,
    ServerProcess,
    decode_reply,
    encode_call,
)

CTX = RequestContext(source="server-process-test")
QUIET = {"janitor": {"enabled": False}}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def enqueue(client, queue: str, n: int, tag: str = "") -> list[str]:
    jobs = [T.PinLaterJob(body=f"{tag}{i}".encode()) for i in range(n)]
    return client.enqueueJobs(
        CTX, T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
    ).jobDescriptors


def test_rpc_round_trip_create_enqueue_dequeue_ack(tmp_path):
    with ServerProcess(QUIET, tmp_path) as server:
        client = thriftpy2.rpc.make_client(
            PinLater, server.host, server.port, trans_factory=TFramedTransportFactory()
        )
        client.createQueue(CTX, "round_trip")
        descriptors = enqueue(client, "round_trip", 3)
        assert len(descriptors) == 3
        dequeued = client.dequeueJobs(
            CTX, T.PinLaterDequeueRequest(queueName="round_trip", limit=10)
        )
        assert sorted(dequeued.jobs) == sorted(descriptors)
        assert sorted(dequeued.jobs.values()) == [b"0", b"1", b"2"]
        client.ackDequeuedJobs(
            CTX,
            T.PinLaterJobAckRequest(
                queueName="round_trip",
                jobsSucceeded=[T.PinLaterJobAckInfo(jobDescriptor=d) for d in descriptors],
            ),
        )
        infos = client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=descriptors))
        assert {info.jobState for info in infos.values()} == {PinLaterJobState.SUCCEEDED}
        client.close()
        assert server.stop() == 0


def test_finagle_probe_gets_unknown_method_then_a_normal_call_works(tmp_path):
    with ServerProcess(QUIET, tmp_path) as server, server.raw() as raw:
        name, msg_type, seqid, exc = decode_reply(
            raw.call(encode_call("__can__finagle__trace__v3__", seqid=5))
        )
        assert (name, msg_type, seqid, exc.type) == (
            "__can__finagle__trace__v3__",
            TMessageType.EXCEPTION,
            5,
            TApplicationException.UNKNOWN_METHOD,
        )
        name, msg_type, seqid, result = decode_reply(
            raw.call(encode_call("getQueueNames", PinLater.getQueueNames_args(context=CTX), 6)),
            PinLater.getQueueNames_result,
        )
        assert (name, msg_type, seqid, result.success) == (
            "getQueueNames",
            TMessageType.REPLY,
            6,
            [],
        )


def test_oversized_frames_close_quickly_without_growing_memory(tmp_path):
    with ServerProcess(QUIET, tmp_path) as server:
        healthy = server.client()
        healthy.createQueue(CTX, "healthy")
        stop = threading.Event()
        calls, errors = [0], []

        def keep_calling() -> None:
            try:
                while not stop.is_set():
                    enqueue(healthy, "healthy", 5)
                    calls[0] += 1
            except Exception as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        worker = threading.Thread(target=keep_calling)
        worker.start()
        before = rss_bytes(server.pid)
        string_bomb = encode_call("createQueue", PinLater.createQueue_args(context=CTX, name="x"))
        string_bomb = string_bomb[:-7] + struct.pack("!i", 2**31 - 1) + b"x\x00"
        for _ in range(20):
            with server.raw() as raw:
                started = time.monotonic()
                raw.send(struct.pack("!i", 1 << 30) + b"\x80\x01\x00\x01")
                assert raw.wait_closed(2.0)
                assert time.monotonic() - started < 1.0
            with server.raw() as raw:
                assert decode_reply(raw.call(string_bomb))[1] == TMessageType.EXCEPTION
        growth = rss_bytes(server.pid) - before
        stop.set()
        worker.join(10)
        assert errors == [] and calls[0] > 0
        assert growth < 50 * 1024 * 1024, f"RSS grew by {growth} bytes"
        healthy.close()


def test_garbage_frame_is_closed_and_the_server_still_serves(tmp_path):
    with ServerProcess(QUIET, tmp_path) as server:
        for payload in (b"\x00garbage garbage garbage", b"\x80\x07\x00\x01rest"):
            with server.raw() as raw:
                raw.send_frame(payload)
                assert raw.wait_closed(2.0)
        client = server.client()
        client.createQueue(CTX, "after_garbage")
        assert "after_garbage" in client.getQueueNames(CTX)
        client.close()
    assert "closing connection from" in server.log()


def test_second_server_on_the_same_port_exits_with_a_clear_message(tmp_path):
    with ServerProcess(QUIET, tmp_path / "a") as first:
        second = ServerProcess(QUIET, tmp_path / "b", port=first.port)
        second.spawn()
        assert second.wait(20) == 1
        assert "already in use" in second.log()
        assert LISTENING_RE.search(second.log()) is None
        client = first.client()
        client.getQueueNames(CTX)  # the first server is untouched
        client.close()


def test_invalid_config_exits_2_listing_every_problem_before_binding(tmp_path):
    with socket.socket() as holder:  # if the server tried to bind, it would fail with 1
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        bad = {"server": {"max_connections": 0, "idle_timeout_seconds": "soon"}, "nope": 1}
        server = ServerProcess(bad, tmp_path, port=port, extra_args=("--log-level", "LOUD"))
        server.spawn()
        assert server.wait(20) == 2
    log = server.log()
    for key in ("server.max_connections", "server.idle_timeout_seconds", "nope", "log_level"):
        assert key in log


def test_sigterm_with_enqueues_in_flight_loses_no_acknowledged_job(tmp_path):
    config = {**QUIET, "server": {"shutdown_grace_seconds": 8}}
    server = ServerProcess(config, tmp_path).start()
    setup = server.client()
    setup.createQueue(CTX, "drain")
    setup.close()
    descriptors = _sigterm_under_enqueue_load(server, producers=4)
    assert len(descriptors) >= 2000
    assert "stopped" in server.log()
    with ServerProcess(QUIET, tmp_path, data_dir=server.data_dir, name="restarted") as again:
        client = again.client(timeout=30)
        found = {}
        for i in range(0, len(descriptors), 1000):
            found.update(
                client.lookupJobs(
                    CTX, T.PinLaterLookupJobRequest(jobDescriptors=descriptors[i : i + 1000])
                )
            )
        assert set(found) == set(descriptors)
        assert {info.jobState for info in found.values()} == {PinLaterJobState.PENDING}
        client.close()


def _produce_until_refused(server: ServerProcess, k: int, acked: list[str]) -> None:
    """Enqueue batches of 20 into `drain` until the server goes away (bounded: 10,000 batches),
    recording every descriptor an answer acknowledged."""
    client = server.client()
    try:
        for i in range(10_000):
            acked.extend(enqueue(client, "drain", 20, f"{k}-{i}-"))
    except Exception:  # noqa: BLE001 - the server going away ends the loop
        return
    finally:
        client.close()


def _sigterm_under_enqueue_load(server: ServerProcess, producers: int) -> list[str]:
    """SIGTERM once 2,000 jobs are acknowledged (or after 10 s) while producers keep enqueueing;
    the server exits 0 within its 8 s grace. Returns the acknowledged descriptors."""
    acked: list[list[str]] = [[] for _ in range(producers)]
    threads = [
        threading.Thread(target=_produce_until_refused, args=(server, k, acked[k]))
        for k in range(producers)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sum(map(len, acked)) < 2000 and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(15) == 0
    assert time.monotonic() - started < 8
    for t in threads:
        t.join(10)
    return [d for part in acked for d in part]


def test_sigint_is_a_graceful_shutdown_too(tmp_path):
    server = ServerProcess(QUIET, tmp_path).start()
    server.send_signal(signal.SIGINT)
    assert server.wait(10) == 0
    assert "received SIGINT" in server.log()


def test_idle_connections_are_closed_after_the_idle_timeout(tmp_path):
    with ServerProcess({**QUIET, "server": {"idle_timeout_seconds": 0.3}}, tmp_path) as server:
        with server.raw() as raw:
            raw.call(encode_call("getQueueNames", PinLater.getQueueNames_args(context=CTX)))
            assert raw.wait_closed(3.0)


def test_connection_cap_is_enforced(tmp_path):
    with ServerProcess({**QUIET, "server": {"max_connections": 2}}, tmp_path) as server:
        call = encode_call("getQueueNames", PinLater.getQueueNames_args(context=CTX))
        first, second = admitted(server, call), admitted(server, call)
        with server.raw() as third:
            assert third.wait_closed(2.0)
        first.close()
        second.close()
        assert "max_connections (2) reached" in server.log()


def admitted(server: ServerProcess, call: bytes) -> RawFrameClient:
    """A connection that got a reply; retries briefly because the helper's readiness probe
    connection may still be counted against the cap for a moment."""
    deadline = time.monotonic() + 3
    while True:
        raw = server.raw()
        try:
            assert decode_reply(raw.call(call))[1] == TMessageType.REPLY
            return raw
        except ConnectionClosed:
            raw.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_no_arguments_serves_sqlite_from_pinlater_data_in_the_working_dir(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
    env.update(PYTHONPATH=str(REPO_ROOT), PINLATER_METRICS_PORT="0", PINLATER_PORT="0")
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pinlater"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while not LISTENING_RE.search(log_path.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.05)
        line = log_path.read_text()
        assert "backend sqlite" in line
        assert f"data dir {tmp_path / 'pinlater-data'}" in line
        assert (tmp_path / "pinlater-data").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


def _start_with_stuck_frame(tmp_path, grace: float) -> tuple[ServerProcess, RawFrameClient]:
    """A server whose only connection is in the middle of a frame (counts as in flight)."""
    config = {
        **QUIET,
        "server": {"shutdown_grace_seconds": grace, "frame_read_timeout_seconds": 60},
    }
    server = ServerProcess(config, tmp_path).start()
    raw = server.raw()
    raw.send(struct.pack("!i", 100) + b"\x80\x01")
    time.sleep(0.2)  # let the server read the partial frame
    return server, raw


def test_shutdown_grace_bounds_the_wait_for_in_flight_requests(tmp_path):
    server, raw = _start_with_stuck_frame(tmp_path, grace=0.5)
    started = time.monotonic()
    server.send_signal(signal.SIGTERM)
    assert server.wait(10) == 1
    assert 0.4 <= time.monotonic() - started < 5
    assert "requests abandoned" in server.log()
    raw.close()


def test_a_second_signal_exits_at_once(tmp_path):
    server, raw = _start_with_stuck_frame(tmp_path, grace=60)
    server.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert server.is_running()
    server.send_signal(signal.SIGTERM)
    assert server.wait(5) == 128 + signal.SIGTERM
    raw.close()
