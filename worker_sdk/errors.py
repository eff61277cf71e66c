"""Errors the client raises: the server's typed errors plus two client-side ones.

Every error a `PinLaterClient` call can raise is a `pinlater.errors.PinLaterError`, so one
`except PinLaterError` catches them all:

* a `PinLaterException` from the server becomes its typed class (`QueueNotFound`,
  `PasswordInvalid`, ...; see `pinlater.errors.error_for_code`), with `.code` the wire ErrorCode;
* `PinLaterTransportError`: the call did not complete (connect failure, timeout, dropped or
  garbled connection) after the allowed retries. `.code` is None because nothing came back;
  `.maybe_applied` tells whether the request may have reached the server (an enqueue that
  fails this way may have stored its jobs);
* `PinLaterApplicationError`: the server answered with a Thrift `TApplicationException`
  (unknown method, internal error) instead of a result or a PinLaterException.
"""

from __future__ import annotations

from pinlater.errors import (  # noqa: F401  (re-exported for SDK users)
    ERRORS_BY_CODE,
    ContinuationInvalid,
    DequeueRateLimited,
    EnqueueRejected,
    InvalidRequest,
    NoHealthyShards,
    PasswordInvalid,
    PinLaterError,
    PriorityNotSupported,
    QueueNameInvalid,
    QueueNameTooLong,
    QueueNotFound,
    ShardConnectionFailed,
    error_for_code,
)


class PinLaterTransportError(PinLaterError):
    """The call failed below the Thrift layer; no (usable) reply was received."""

    code = None  # type: ignore[assignment]  # no wire ErrorCode: it failed below Thrift
    name = "TRANSPORT_ERROR"

    def __init__(self, message: str, *, endpoint: str | None = None, maybe_applied: bool = True):
        super().__init__(message)
        self.endpoint = endpoint
        self.maybe_applied = maybe_applied


class PinLaterApplicationError(PinLaterError):
    """The server replied with a Thrift TApplicationException; `.type` is its numeric type."""

    code = None  # type: ignore[assignment]  # a Thrift-level failure, not an ErrorCode
    name = "APPLICATION_ERROR"

    def __init__(self, message: str, *, type: int = 0):  # noqa: A002 (Thrift's field name)
        super().__init__(message)
        self.type = type


#: Server error codes that mean "storage unavailable right now": retried for idempotent calls.
RETRYABLE_SERVER_CODES = frozenset({NoHealthyShards.code, ShardConnectionFailed.code})
