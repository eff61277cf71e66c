"""An in-process wire: calls go through the real Thrift processor and binary encoding.

The conformance suite talks to the handler exactly as a generated client would (structs
serialized, exceptions declared in the IDL, unset optional fields absent), without a socket, so
every semantics row is checked as clients see it.
"""

from __future__ import annotations

import io

from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.thrift import TClient, TProcessor
from thriftpy2.transport import TMemoryBuffer, TTransportException

from pinlater.idl import PinLater


class LoopbackTransport:
    """Client-side transport whose flush runs the processor over the written request."""

    def __init__(self, processor: TProcessor):
        self._processor = processor
        self._request = bytearray()
        self._reply = io.BytesIO()
        #: size of the last reply message (a framed transport would send it as one frame)
        self.last_reply_bytes = 0

    def is_open(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        self._request += data

    def read(self, size: int) -> bytes:
        data = self._reply.read(size)
        if len(data) < size:
            raise TTransportException(TTransportException.END_OF_FILE, "no reply")
        return data

    def flush(self) -> None:
        request, reply = TMemoryBuffer(bytes(self._request)), TMemoryBuffer()
        self._request.clear()
        self._processor.process(TBinaryProtocol(request), TBinaryProtocol(reply))
        self._reply = io.BytesIO(reply.getvalue())
        self.last_reply_bytes = len(self._reply.getbuffer())

    def close(self) -> None:
        pass


def last_reply_bytes(client: TClient) -> int:
    """Size of the reply to the last call of a `loopback_client`."""
    return client._iprot.trans.last_reply_bytes


def loopback_client(handler) -> TClient:
    transport = LoopbackTransport(TProcessor(PinLater, handler))
    return TClient(PinLater, TBinaryProtocol(transport))
