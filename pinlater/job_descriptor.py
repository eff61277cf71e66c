"""Job descriptors `QUEUE:sSHARD:pPRIORITY:LOCALID`, parsed with one ASCII pattern.

Never `int()` on unchecked text: Python's int accepts Unicode digits, spaces, `_` and `+`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pinlater.errors import InvalidRequest

QUEUE_NAME_PATTERN = r"[A-Za-z0-9_]+"
SHARD_NAME_PATTERN = r"[A-Za-z0-9]{1,32}"
MAX_LOCAL_ID = 2**63 - 1

_DESCRIPTOR = re.compile(
    rf"({QUEUE_NAME_PATTERN}):s({SHARD_NAME_PATTERN}):p([0-9]{{1,3}}):([0-9]{{1,19}})",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class JobDescriptor:
    queue: str
    shard: str
    priority: int
    local_id: int

    def __str__(self) -> str:
        return f"{self.queue}:s{self.shard}:p{self.priority}:{self.local_id}"

    @classmethod
    def parse(cls, text: object, field: str = "jobDescriptor") -> JobDescriptor:
        """Parse a descriptor or raise InvalidRequest naming the field and the text."""
        match = _DESCRIPTOR.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise InvalidRequest(f"{field}: malformed job descriptor {text!r}; "
                                 "expected QUEUE:sSHARD:pPRIORITY:LOCALID")
        queue, shard, priority, local_id = match.groups()
        if int(local_id) > MAX_LOCAL_ID:
            raise InvalidRequest(f"{field}: local id out of range in {text!r}")
        return cls(queue, shard, int(priority), int(local_id))


def split_plain(text: object) -> tuple[str, str, int, int] | None:
    """(queue, shard, priority, local id) of a well-formed descriptor, else None: the hot
    path's parse (acks, checkpoints) that builds no object and no error message. Accepts
    exactly what `JobDescriptor.parse` accepts; callers use `parse` for the error."""
    match = _DESCRIPTOR.fullmatch(text) if type(text) is str else None
    if match is None:
        return None
    queue, shard, priority, local_id = match.groups()
    local_id = int(local_id)
    if local_id > MAX_LOCAL_ID:
        return None
    return queue, shard, int(priority), local_id
