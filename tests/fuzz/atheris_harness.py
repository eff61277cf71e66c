"""In-process fuzz target: wire check -> thriftpy2 decode -> handler validation -> SQLite.

    target = Target(tmp_dir)      # a real App (SQLite shard, janitor and metrics off)
    target.one_input(data)        # raises AssertionError on a finding

`data[0]` picks the RPC; the rest is its arguments struct, behind a valid message header (so the
fuzzer spends its time inside the arguments, where the validator and the handler are). A
finding is: the wire check raising anything but WireError, or a reply that is an
INTERNAL_ERROR application exception or a PinLaterException saying "internal error".

Run by scripts/fuzz.py under atheris (coverage-guided, instruments the pinlater package) and
by tests/fuzz/test_harness.py under plain Hypothesis (no atheris needed).
"""

from __future__ import annotations

from pathlib import Path

from thriftpy2.thrift import TApplicationException, TMessageType

from pinlater.app import App, load_config
from pinlater.idl import PinLater
from pinlater.main import dispatcher
from pinlater.server.loop import Rejections
from pinlater.server.transport import MalformedRequest
from pinlater.server.wirecheck import WireError, check_args
from tests.fuzz.wire import header
from tests.support.server_process import decode_reply

METHODS = sorted(PinLater.thrift_services)


class Target:
    """One App on SQLite under `data_dir`, and the dispatcher the server would use."""

    def __init__(self, data_dir: Path):
        config = load_config(
            env={},
            overrides={
                "backend": {"data_dir": str(data_dir)},
                "janitor": {"enabled": False},
                "metrics": {"port": 0},
                "log_level": "ERROR",
            },
        )
        self.app = App(config)
        self.dispatcher = dispatcher(config, self.app.handler, Rejections())
        self.app.handler.store.create_queue("fuzzq")

    def one_input(self, data: bytes) -> None:
        if not data:
            return
        method = METHODS[data[0] % len(METHODS)]
        args = data[1:]
        try:
            check_args(args, 0, getattr(PinLater, method + "_args"))
        except WireError:
            pass
        try:
            _, reply = self.dispatcher.dispatch(header(method) + args)
        except MalformedRequest:
            return
        check_reply(method, reply)

    def close(self) -> None:
        self.app.close()


def check_reply(method: str, reply: bytes) -> None:
    name, msg_type, _, body = decode_reply(reply)
    assert name == method
    if msg_type == TMessageType.EXCEPTION:
        assert body.type != TApplicationException.INTERNAL_ERROR, body.message
    else:
        assert b"internal error" not in reply, reply[:300]


def seed_inputs() -> list[bytes]:
    """Valid arguments of every RPC, in the harness's input format (a corpus for atheris)."""
    from tests.fuzz.wire import valid_calls

    seeds = []
    for method, payload in valid_calls().items():
        offset = 12 + int.from_bytes(payload[4:8], "big")
        seeds.append(bytes([METHODS.index(method)]) + payload[offset:])
    return seeds
