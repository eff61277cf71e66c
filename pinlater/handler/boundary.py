"""The one error boundary to the wire: PinLaterError -> the IDL's PinLaterException.

Every RPC method runs inside `rpc`; anything that is not a PinLaterError is logged with a request
id and answered as UNKNOWN (an exception the IDL does not declare would make thriftpy2 drop the
connection without a reply). `wire_error` is the only translation of an error to its wire form
(the only place a wire PinLaterException is built); the network layer's refusals
(`pinlater.server.admission`) use it too.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from pinlater.errors import PinLaterError
from pinlater.handler.tarpit import DelayedRefusal
from pinlater.idl import pinlater_thrift as wire

log = logging.getLogger("pinlater.handler")


def wire_error(error: PinLaterError) -> Any:
    """The wire PinLaterException for `error` (its code and message)."""
    return wire.PinLaterException(errorCode=error.code, message=error.message)


def rpc(method: Callable) -> Callable:
    """Error boundary for one RPC: PinLaterError -> wire exception; anything else -> logged with
    a request id and answered as UNKNOWN. Every call is reported to `observer.on_call` with its
    outcome (the error code name, or "ok") and latency."""

    @functools.wraps(method)
    def wrapper(self: Any, context, *args):
        started = time.perf_counter()
        outcome, message = "ok", ""
        try:
            result = method(self, context, *args)
            if isinstance(result, DelayedRefusal):  # an error answered later: observed now
                outcome, message = result.error.name, result.error.message
                self.observer.on_error(method.__name__, context, result.error)
            return result
        except PinLaterError as exc:
            outcome, message = exc.name, exc.message
            self.observer.on_error(method.__name__, context, exc)
            raise wire_error(exc) from None
        except Exception:
            request_id = getattr(context, "requestId", None) or uuid.uuid4().hex[:12]
            log.exception("unexpected error in %s (request id %s)", method.__name__, request_id)
            outcome, message = "UNKNOWN", "internal error"
            raise wire_error(
                PinLaterError(
                    f"internal error in {method.__name__} (request id {request_id}); "
                    "see the server log"
                )
            ) from None
        finally:
            self.observer.on_call(
                method.__name__,
                context,
                _raw_queue(args),
                outcome,
                time.perf_counter() - started,
                message,
            )

    return wrapper


def _raw_queue(args: tuple) -> object:
    """The queue a request names, unvalidated (observers may only compare it with known names
    or log it escaped)."""
    if not args:
        return None
    first = args[0]
    return first if isinstance(first, str) else getattr(first, "queueName", None)
