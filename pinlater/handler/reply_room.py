"""Every reply fits one frame of `server.max_frame_bytes` (hostile load, item 5).

Standard clients refuse a larger frame, and building one costs the server its size several
times over. So each reply that carries bodies or statuses is sized before it is built
(`pinlater.common.wire_size`):
- a dequeue gets a `ByteBudget` and claims only the jobs that fit it (the rest stay PENDING,
  their attempts untouched);
- a lookup reads bodies only when they all fit, and a lookup that cannot fit answers an error
  naming the cap and the bytes it would need (it has no continuation to hand out the rest);
- a scan page (no bodies, but statuses of up to `limits.custom_status_max_chars`) is cut where
  the frame is full, with a continuation that resumes after its last job;
- an enqueue whose descriptors could not fit one reply is rejected before anything is stored
  (else its jobs would be stored and the reply lost; only a config with a small frame and a
  large `limits.max_jobs_per_request` allows such a request).
"""

from __future__ import annotations

from collections.abc import Sequence

from pinlater.common import wire_size
from pinlater.errors import EnqueueRejected, InvalidRequest
from pinlater.storage.claims import CLAIM_SOURCE_OFFSET
from pinlater.storage.contract import ByteBudget
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import JobRecord
from pinlater.storage.sharded import MAX_CONTINUATION_CHARS, scan_continuation


class ReplyRoom:
    """The reply sizes of one server: `max_frame_bytes` per reply, `levels` priorities."""

    def __init__(self, max_frame_bytes: int, levels: int):
        self.max_frame_bytes = max_frame_bytes
        self.levels = levels

    def dequeue(
        self, queue: str, shard_names: Sequence[str], source: str, dry_run: bool
    ) -> ByteBudget:
        """The budget of a dequeue on `queue` by `source` (its claim holds the source)."""
        claim = None if dry_run else CLAIM_SOURCE_OFFSET + wire_size.text_bytes(source)
        longest_shard = max(map(len, shard_names), default=wire_size.MAX_SHARD_NAME)
        room = wire_size.dequeue_room(
            self.max_frame_bytes, queue, longest_shard, self.levels, claim
        )
        return ByteBudget(room.jobs_bytes, room.per_job)

    def check_enqueue(self, queue: str, shard_names: Sequence[str], jobs: int) -> None:
        """Raise EnqueueRejected when the descriptors of `jobs` new jobs could not fit."""
        longest_shard = max(map(len, shard_names), default=wire_size.MAX_SHARD_NAME)
        size = wire_size.enqueue_reply_bound(jobs, queue, longest_shard, self.levels)
        if size > self.max_frame_bytes:
            raise EnqueueRejected(
                f"jobs: the descriptors of {jobs} jobs could take {size} bytes, over the "
                f"server.max_frame_bytes ({self.max_frame_bytes}) of one reply; send fewer "
                "jobs per request"
            )

    def lookup_bodies(self) -> int:
        """The most body bytes a lookup reads: more could not fit its reply in any case."""
        return self.max_frame_bytes - wire_size.lookup_reply_fixed()

    def check_lookup(self, entries: Sequence[tuple[str, JobRecord]]) -> None:
        """Raise InvalidRequest naming the cap when the lookup reply of these (descriptor
        text, record) entries would not fit, or when a body was left out to stay within it."""
        size = wire_size.lookup_reply_fixed()
        left_out = False
        for text, record in entries:
            left_out = left_out or (record.body is None and record.body_size is not None)
            info = wire_size.job_info_bytes(
                text, record.custom_status, record.claim, _body_bytes(record)
            )
            size += wire_size.lookup_entry_bytes(text, info)
        if size > self.max_frame_bytes or left_out:
            raise InvalidRequest(
                f"lookupJobs: the reply would take {size} bytes, over the "
                f"server.max_frame_bytes of {self.max_frame_bytes}; look up fewer jobs per "
                "request, or set includeBody=false"
            )

    def scan_page(
        self, rows: list[tuple[JobDescriptor, JobRecord]], continuation: str
    ) -> tuple[list[tuple[JobDescriptor, JobRecord]], str]:
        """The page as it fits one reply: whole, or its leading rows with the continuation
        after the last of them."""
        sizes = [wire_size.job_info_bytes(str(d), r.custom_status, r.claim, None) for d, r in rows]
        if wire_size.scan_reply_fixed(continuation) + sum(sizes) <= self.max_frame_bytes:
            return rows, continuation
        fixed = wire_size.scan_reply_fixed("0" * MAX_CONTINUATION_CHARS)
        fitting = ByteBudget(self.max_frame_bytes - fixed).fitting(sizes)
        if not fitting:  # the config's reply check makes one job always fit
            raise InvalidRequest(
                f"scanJobs: one job's record is over server.max_frame_bytes "
                f"({self.max_frame_bytes})"
            )
        return rows[:fitting], scan_continuation(*rows[fitting - 1])


def _body_bytes(record: JobRecord) -> int | None:
    """The body's size in the reply: its length when it was asked for, else None."""
    if record.body_size is not None:
        return record.body_size
    return None if record.body is None else len(record.body)
