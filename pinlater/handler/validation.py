"""Request field checks shared by every RPC. Each raises the right PinLaterError naming the field.

thriftpy2 hands the handler whatever arrived: a missing or wrongly typed field is None, a
`string` with invalid UTF-8 is bytes. Everything is checked here before it reaches storage.
Python pitfalls avoided on purpose: `\\w` matches Unicode letters, `$` matches before a trailing
newline, and int() accepts Unicode digits; we use ASCII-only full matches and real type checks.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from pinlater.errors import (
    EnqueueRejected,
    InvalidRequest,
    PinLaterError,
    PriorityNotSupported,
    QueueNameInvalid,
    QueueNameTooLong,
)
from pinlater.storage.models import JobState

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_]+", re.ASCII)
I32_MAX = 2**31 - 1
#: 9999-12-31T23:59:59.999Z: the latest time every backend and `datetime` can represent
MAX_TIMESTAMP_MS = 253_402_300_799_999


def queue_name(value: object, max_length: int, field: str = "queueName") -> str:
    if not isinstance(value, str):
        raise QueueNameInvalid(f"{field}: queue name must be ASCII text, got {_shown(value)}")
    if not _QUEUE_NAME.fullmatch(value):
        raise QueueNameInvalid(
            f"Invalid queue name: {value!r} ({field} must match [A-Za-z0-9_]+, ASCII only)"
        )
    if len(value) > max_length:
        raise QueueNameTooLong(
            f"{field}: queue name is {len(value)} characters; the maximum is {max_length}"
        )
    return value


def priority(value: object, levels: int, field: str = "priority") -> int:
    if not _is_int(value) or not 1 <= value <= levels:
        raise PriorityNotSupported(
            f"{field}: priority {_shown(value)} is not supported; "
            f"priorities run from 1 (highest) to {levels}"
        )
    return value


def optional_priority(value: object, levels: int, field: str = "priority") -> int | None:
    return None if value is None else priority(value, levels, field)


def limit(
    value: object, cap: int, field: str = "limit", error: type[PinLaterError] = InvalidRequest
) -> int:
    if not _is_int(value) or value <= 0:
        raise error(f"{field}: must be a positive integer, got {_shown(value)}")
    if value > cap:
        raise error(f"{field}: {value} is over the maximum of {cap}")
    return value


def attempts(
    value: object, cap: int, field: str, error: type[PinLaterError] = InvalidRequest
) -> int:
    if not _is_int(value) or not 1 <= value <= cap:
        raise error(f"{field}: must be an integer from 1 to {cap}, got {_shown(value)}")
    return value


def timestamp_ms(
    value: object, field: str, error: type[PinLaterError] = InvalidRequest
) -> int | None:
    """An optional epoch-ms time; None means "now" to the caller."""
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise error(
            f"{field}: must be epoch milliseconds from 0 to {MAX_TIMESTAMP_MS}, got {_shown(value)}"
        )
    return value


def delay_ms(value: object, field: str) -> int:
    """A retry delay; negative means no delay (as the original), capped to ~100 years."""
    if value is None:
        return 0
    if not _is_int(value):
        raise InvalidRequest(f"{field}: must be an integer number of milliseconds")
    return clamp_delay_ms(value)


def clamp_delay_ms(value: int) -> int:
    """A checked retry delay into [0, ~100 years] (see `delay_ms`)."""
    return min(max(value, 0), MAX_TIMESTAMP_MS // 2)


def text(
    value: object,
    field: str,
    error: type[PinLaterError] = InvalidRequest,
    *,
    default: str | None = None,
    required: bool = False,
) -> str | None:
    if value is None:
        if required:
            raise error(f"{field}: is required")
        return default
    if isinstance(value, bytes):
        raise error(f"{field}: is not valid UTF-8")
    if not isinstance(value, str):
        raise error(f"{field}: must be a string, got {_shown(value)}")
    return value


def unique_key(value: object, max_length: int, field: str) -> str | None:
    """An optional unique key: 1..max_length printable ASCII characters (space to `~`)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        raise EnqueueRejected(f"{field}: is not valid UTF-8 (a unique key is printable ASCII)")
    if not isinstance(value, str):
        raise EnqueueRejected(f"{field}: must be a string, got {_shown(value)}")
    if not value:
        raise EnqueueRejected(f"{field}: must not be empty (leave it unset for no key)")
    if len(value) > max_length:
        raise EnqueueRejected(
            f"{field}: {len(value)} characters is over the maximum of {max_length}"
        )
    if not is_plain_key(value, max_length):
        raise EnqueueRejected(
            f"{field}: must be printable ASCII (space to '~'), got {_shown(value)}"
        )
    return value


def is_plain_key(value: str, max_length: int) -> bool:
    """Whether a str is a valid unique key (the one rule; `unique_key` says what is wrong)."""
    return 0 < len(value) <= max_length and value.isascii() and value.isprintable()


def flag(value: object, field: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"{field}: must be a bool")
    return value


def job_state(value: object, field: str = "jobState") -> JobState:
    if not _is_int(value) or value not in JobState._value2member_map_:
        raise InvalidRequest(
            f"{field}: {_shown(value)} is not a job state "
            "(PENDING=0, IN_PROGRESS=1, SUCCEEDED=2, FAILED=3)"
        )
    return JobState(value)


def source(context: object, max_length: int) -> str:
    """The caller identity from RequestContext.source (required by the IDL)."""
    value = getattr(context, "source", None)
    if context is None or value is None:
        raise InvalidRequest("context.source: is required")
    checked = text(value, "context.source", required=True)
    assert checked is not None  # required=True raised otherwise
    if len(checked) > max_length:
        raise InvalidRequest(f"context.source: longer than {max_length} characters")
    return checked


def request_present(value: object, field: str = "request") -> None:
    if value is None:
        raise InvalidRequest(f"{field}: is required")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object) -> str:
    text_value = repr(value)
    return text_value if len(text_value) <= 60 else text_value[:57] + "..."


def wait_millis(value: object, cap: int, field: str = "waitMillis") -> int:
    """A long-poll wait: unset or 0 is none, a positive value is capped at `cap`; a negative
    one is refused."""
    if value is None:
        return 0
    if not _is_int(value) or value < 0:
        raise InvalidRequest(f"{field}: must be 0 or a positive integer (ms), got {_shown(value)}")
    return min(value, cap)
