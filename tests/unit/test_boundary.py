"""The one error boundary to the wire: every error a client sees is built by `wire_error`."""

from __future__ import annotations

import logging

import pytest

from pinlater.errors import DequeueRateLimited, QueueNotFound, ServerBusy
from pinlater.handler.boundary import rpc, wire_error
from pinlater.handler.observer import RequestObserver
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T


class Recorder(RequestObserver):
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.errors: list[str] = []

    def on_error(self, method, context, error) -> None:
        self.errors.append(error.name)

    def on_call(self, method, context, queue, outcome, seconds, message) -> None:
        self.calls.append((method, queue, outcome, message))


class Handler:
    def __init__(self) -> None:
        self.observer = Recorder()

    @rpc
    def getQueueNames(self, context):
        return ["q"]

    @rpc
    def deleteQueue(self, context, name, password):
        raise QueueNotFound(name)

    @rpc
    def createQueue(self, context, name):
        raise RuntimeError("disk on fire")


CTX = RequestContext(source="boundary-test")


def test_domain_errors_become_their_wire_code_and_message():
    for error, code in (
        (QueueNotFound("q"), T.ErrorCode.QUEUE_NOT_FOUND),
        (DequeueRateLimited("slow down"), T.ErrorCode.DEQUEUE_RATE_LIMITED),
        (ServerBusy("Server busy: 4 requests in flight; retry later"), T.ErrorCode.UNKNOWN),
    ):
        wire = wire_error(error)
        assert isinstance(wire, T.PinLaterException)
        assert (wire.errorCode, wire.message) == (code, error.message)


def test_rpc_answers_a_domain_error_and_reports_it():
    handler = Handler()
    assert handler.getQueueNames(CTX) == ["q"]
    with pytest.raises(T.PinLaterException) as caught:
        handler.deleteQueue(CTX, "gone", "pw")
    assert (caught.value.errorCode, caught.value.message) == (413, "Queue not found: gone")
    assert handler.observer.errors == ["QUEUE_NOT_FOUND"]
    assert handler.observer.calls == [
        ("getQueueNames", None, "ok", ""),
        ("deleteQueue", "gone", "QUEUE_NOT_FOUND", "Queue not found: gone"),
    ]


def test_anything_else_is_logged_with_a_request_id_and_answered_as_unknown(caplog):
    handler = Handler()
    context = RequestContext(source="boundary-test", requestId="req-42")
    with caplog.at_level(logging.ERROR, logger="pinlater.handler"):
        with pytest.raises(T.PinLaterException) as caught:
            handler.createQueue(context, "q")
    assert caught.value.errorCode == T.ErrorCode.UNKNOWN
    assert caught.value.message == (
        "internal error in createQueue (request id req-42); see the server log"
    )
    assert "disk on fire" not in caught.value.message
    assert "request id req-42" in caplog.records[0].getMessage()
    assert handler.observer.calls == [("createQueue", "q", "UNKNOWN", "internal error")]
