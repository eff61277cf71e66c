"""One error hierarchy, one subclass per wire ErrorCode.

Everything below the Thrift handler raises these, and so does the network layer's admission
control when it refuses a request. `pinlater.handler.boundary.wire_error` is the one translation
to the wire `PinLaterException`; the handler's `rpc` boundary (which also turns anything else
into UNKNOWN after logging it) and the admission refusals both go through it.
"""

from __future__ import annotations


class PinLaterError(Exception):
    """Root of every error the service reports to a client. `code` is the wire ErrorCode value."""

    code = 500
    name = "UNKNOWN"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class ContinuationInvalid(PinLaterError):
    code, name = 400, "CONTINUATION_INVALID"


class PasswordInvalid(PinLaterError):
    code, name = 403, "PASSWORD_INVALID"
    #: why it was refused: "wrong", or a rate limit (pinlater.handler.password_guard)
    reason = "wrong"


class QueueNameInvalid(PinLaterError):
    code, name = 410, "QUEUE_NAME_INVALID"


class QueueNameTooLong(PinLaterError):
    code, name = 411, "QUEUE_NAME_TOO_LONG"


class QueueNotFound(PinLaterError):
    code, name = 413, "QUEUE_NOT_FOUND"

    def __init__(self, queue: str):
        super().__init__(f"Queue not found: {queue}")
        self.queue = queue


class PriorityNotSupported(PinLaterError):
    code, name = 416, "PRIORITY_NOT_SUPPORTED"


class DequeueRateLimited(PinLaterError):
    code, name = 429, "DEQUEUE_RATE_LIMITED"


class EnqueueRejected(PinLaterError):
    code, name = 430, "ENQUEUE_REJECTED"


class InvalidRequest(PinLaterError):
    """A request field is malformed outside enqueue input (wire code UNKNOWN, clear message)."""

    code, name = 500, "UNKNOWN"


class ServerBusy(PinLaterError):
    """The server is at its cap of requests in flight (wire code UNKNOWN, message "Server
    busy: ..."; the IDL has no code of its own for it)."""

    code, name = 500, "UNKNOWN"


class NoHealthyShards(PinLaterError):
    code, name = 501, "NO_HEALTHY_SHARDS"


class ShardConnectionFailed(PinLaterError):
    code, name = 502, "SHARD_CONNECTION_FAILED"


class ShardFull(ShardConnectionFailed):
    """A shard refused a write for lack of disk space or memory. The IDL has no code of its
    own for it: outside enqueue (which answers ENQUEUE_REJECTED) it travels as
    SHARD_CONNECTION_FAILED with a message that says so."""


class QueueContended(ShardConnectionFailed):
    """One queue's own contention in the storage (its createQueue/deleteQueue holding its
    tables, lock waits between calls on it) lasted through every retry. The shard is healthy;
    the IDL has no code of its own for it, so it travels as SHARD_CONNECTION_FAILED."""


ERRORS_BY_CODE: dict[int, type[PinLaterError]] = {
    cls.code: cls
    for cls in (
        ContinuationInvalid,
        PasswordInvalid,
        QueueNameInvalid,
        QueueNameTooLong,
        QueueNotFound,
        PriorityNotSupported,
        DequeueRateLimited,
        EnqueueRejected,
        PinLaterError,
        NoHealthyShards,
        ShardConnectionFailed,
    )
}


def error_for_code(code: int, message: str) -> PinLaterError:
    """Rebuild the typed error from a wire (code, message) pair; unknown codes become the root."""
    cls = ERRORS_BY_CODE.get(code, PinLaterError)
    err = PinLaterError.__new__(cls)
    PinLaterError.__init__(err, message)
    if isinstance(err, QueueNotFound):
        err.queue = message.rsplit(": ", 1)[-1]
    return err
