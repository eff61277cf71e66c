"""Sizes of PinLater replies in the strict binary protocol, known before a reply is built.

Each reply must fit one frame of `server.max_frame_bytes` (standard clients refuse larger ones),
so the handler sizes a reply before it reads anything big: a dequeue claims only the jobs that
fit (`dequeue_room`), a lookup and a scan are measured from their records, and the config
refuses limits under which a single job could not be sent (`largest_single_job_reply`). The
arithmetic follows the protocol: a message header (version, name, seqid), a field header of 3
bytes (type, id), strings and binaries with a 4-byte length, maps with 6 bytes of header, lists
with 5, and one stop byte per struct. Tests compare every function here with thriftpy2's
encoder (tests/unit/test_wire_size.py).
"""

from __future__ import annotations

from dataclasses import dataclass

_FIELD = 3  # field header: type byte + i16 id
_STOP = 1
_LEN = 4  # length prefix of a string or binary
_MAP = 6  # key type, value type, i32 size
_LIST = 5  # element type, i32 size
_I32, _I64 = 4, 8
#: the longest text of a local id (2**63 - 1) and of a shard name (descriptors.py)
LOCAL_ID_DIGITS = 19
MAX_SHARD_NAME = 32
#: PinLaterDequeueMetadata: attemptsAllowed, attemptsRemaining, stop (+ the claim when set)
_METADATA = 2 * (_FIELD + _I32) + _STOP
#: PinLaterJobInfo without its strings: state, attempts allowed and remaining (i32), created,
#: run-after and updated times (i64), stop; plus the field headers and lengths of its two
#: required strings (descriptor, status)
_JOB_INFO = 3 * (_FIELD + _I32) + 3 * (_FIELD + _I64) + _STOP + 2 * (_FIELD + _LEN)


def text_bytes(text: str) -> int:
    """Bytes of a string on the wire (UTF-8)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _message(method: str) -> int:
    """Message header (version and type, name, seqid), the result's success field header and
    the result's stop byte."""
    return _I32 + _LEN + len(method) + _I32 + _FIELD + _STOP


@dataclass(frozen=True, slots=True)
class DequeueRoom:
    """Reply room for one dequeue's jobs: `jobs_bytes` for them all, each costing its body plus
    `per_job` (an upper bound: the longest descriptor the queue can have, the claim)."""

    jobs_bytes: int
    per_job: int


def dequeue_room(
    max_frame_bytes: int, queue: str, max_shard_name: int, levels: int, claim_bytes: int | None
) -> DequeueRoom:
    """The room of a dequeueJobs reply on `queue` whose claim is `claim_bytes` long (None: a
    dry run, no claim). Fixed part: both maps of the response, its stop byte."""
    fixed = _message("dequeueJobs") + 2 * (_FIELD + _MAP) + _STOP
    descriptor = max_descriptor_bytes(len(queue), max_shard_name, levels)
    metadata = _METADATA + (0 if claim_bytes is None else _FIELD + _LEN + claim_bytes)
    per_job = 2 * (_LEN + descriptor) + _LEN + metadata
    return DequeueRoom(max_frame_bytes - fixed, per_job)


def max_descriptor_bytes(queue_chars: int, max_shard_name: int, levels: int) -> int:
    """The longest `QUEUE:sSHARD:pPRIORITY:LOCALID` (all ASCII)."""
    return queue_chars + 2 + max_shard_name + 2 + len(str(levels)) + 1 + LOCAL_ID_DIGITS


def job_info_bytes(descriptor: str, status: str, claim: str | None, body_bytes: int | None) -> int:
    """One PinLaterJobInfo: the fixed fields, the descriptor and status, and the claim and body
    when set (`body_bytes` None: no body)."""
    size = _JOB_INFO + len(descriptor) + text_bytes(status)
    if claim is not None:
        size += _FIELD + _LEN + text_bytes(claim)
    if body_bytes is not None:
        size += _FIELD + _LEN + body_bytes
    return size


def lookup_reply_fixed() -> int:
    """A lookupJobs reply without its entries: the map header."""
    return _message("lookupJobs") + _MAP


def lookup_entry_bytes(key: str, info_bytes: int) -> int:
    """One entry of the lookupJobs map: the descriptor key and the job's PinLaterJobInfo."""
    return _LEN + len(key) + info_bytes


def scan_reply_fixed(continuation: str) -> int:
    """A scanJobs reply without its jobs: the list header, the continuation, the stop byte."""
    return _message("scanJobs") + _FIELD + _LIST + _FIELD + _LEN + len(continuation) + _STOP


def enqueue_reply_bound(jobs: int, queue: str, max_shard_name: int, levels: int) -> int:
    """The largest enqueueJobs reply for `jobs` jobs on `queue` (the longest descriptors)."""
    descriptor = max_descriptor_bytes(len(queue), max_shard_name, levels)
    return _message("enqueueJobs") + _FIELD + _LIST + jobs * (_LEN + descriptor) + _STOP


def largest_single_job_reply(
    body_max_bytes: int,
    status_max_chars: int,
    queue_name_max_chars: int,
    levels: int,
    claim_max_chars: int,
) -> int:
    """The largest reply that hands out or looks up one job under these limits (a lookup: the
    descriptor twice, the status at its cap in 4-byte characters, the claim, the body at its
    cap; a dequeue costs less). A frame smaller than this could never carry such a job."""
    descriptor = "x" * max_descriptor_bytes(queue_name_max_chars, MAX_SHARD_NAME, levels)
    info = job_info_bytes(descriptor, "", "", body_max_bytes)
    info += 4 * status_max_chars + 4 * claim_max_chars
    return lookup_reply_fixed() + lookup_entry_bytes(descriptor, info)
