"""Jobs as the admin API shows them: stable JSON field names and a safe body preview.

A body is arbitrary bytes. The preview is text that shows every byte unambiguously and cannot
be mistaken for markup by a careless consumer of the JSON: valid UTF-8 is kept, except that
backslashes, control and format characters (including bidi overrides) and invalid bytes are
escaped (`\\\\`, `\\n`, `\\u202e`, `\\xff`), and it is cut after a fixed number of bytes
(`truncated` says so). A page rendering it must still HTML-escape it like any text.
"""

from __future__ import annotations

import base64
import unicodedata

from pinlater.errors import InvalidRequest
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import JobRecord, JobState

#: the API's state names, as the depth gauges name them
STATE_NAMES = {state: state.name.lower() for state in JobState}
_BY_NAME = {name: state for state, name in STATE_NAMES.items()}
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
#: character categories shown escaped: controls, format (bidi overrides, zero-width),
#: separators other than the space, surrogates, private use and unassigned
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def state_by_name(text: object, field: str = "state") -> JobState:
    """A JobState from its API name (`pending`, `in_progress`, `succeeded`, `failed`)."""
    state = _BY_NAME.get(text.lower()) if isinstance(text, str) else None
    if state is None:
        raise InvalidRequest(
            f"{field}: {text!r} is not a job state; use one of {', '.join(_BY_NAME)}"
        )
    return state


def escape_bytes(data: bytes) -> str:
    """`data` as readable, unambiguous text (see the module docstring)."""
    text = data.decode("utf-8", errors="surrogateescape")
    if text.isprintable() and "\\" not in text:
        return text  # the common case: nothing to escape
    return "".join(_escape_char(ch) for ch in text)


def _escape_char(ch: str) -> str:
    short = _SHORT.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # an invalid byte, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if ch == " " or unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
        return ch
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def body_preview(body: bytes | None, max_bytes: int, full: bool = False) -> dict | None:
    """{"preview", "size_bytes", "truncated"} (+ "base64", the whole body, when `full`)."""
    if body is None:
        return None
    out: dict = {
        "preview": escape_bytes(body[:max_bytes]),
        "size_bytes": len(body),
        "truncated": len(body) > max_bytes,
    }
    if full:
        out["base64"] = base64.b64encode(body).decode("ascii")
    return out


def job_json(
    descriptor: JobDescriptor, record: JobRecord, preview_bytes: int, full_body: bool = False
) -> dict:
    """One job with every field lookupJobs returns (the claim included)."""
    return {
        "descriptor": str(descriptor),
        "queue": descriptor.queue,
        "shard": descriptor.shard,
        "priority": record.priority,
        "local_id": record.local_id,
        "state": STATE_NAMES[record.state],
        "attempts_allowed": record.attempts_allowed,
        "attempts_remaining": record.attempts_remaining,
        "custom_status": record.custom_status,
        "created_at_ms": record.created_at_ms,
        "run_after_ms": record.run_after_ms,
        "updated_at_ms": record.updated_at_ms,
        "claim": record.claim,
        "body": body_preview(record.body, preview_bytes, full_body),
    }
