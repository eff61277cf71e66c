"""Errors of the storage seam: what a shard raises besides `QueueNotFound`.

`ShardError` and `StorageFull` never reach a client as such: the sharded layer retries or
translates them (SHARD_CONNECTION_FAILED, ENQUEUE_REJECTED ...). `QueueNotFound` is the client
error of the same name, raised by shards for a queue they do not hold.
"""

from __future__ import annotations

from pinlater.errors import InvalidRequest, QueueNotFound

__all__ = ["BodyFilterStopped", "QueueNotFound", "ShardError", "StorageFull"]


class ShardError(Exception):
    """A storage shard failed. `retriable` errors (lost connection, deadlock, lock wait) may be
    retried by the sharded layer; the others are reported after the first try."""

    def __init__(
        self, shard: str, message: str, *, retriable: bool = True, timed_out: bool = False
    ):
        super().__init__(f"shard {shard}: {message}")
        self.shard = shard
        self.retriable = retriable
        #: the storage did not answer within its socket timeout: the shard is treated as down
        #: at once (retrying would only stall the request for another timeout)
        self.timed_out = timed_out


class StorageFull(Exception):
    """The storage refused a write for lack of space or memory (Redis noeviction, disk full)."""


class BodyFilterStopped(InvalidRequest):
    """A body filter refused to go on: its request spent its regex budget (CPU, time, bodies or
    bytes scanned) or one body needed more CPU than allowed. Raised by the filter callable a
    shard calls; shards let it propagate (it is the client's answer) and stop scanning, and
    delete_jobs acts on no match of a scan that stopped (filter first, then delete). Once
    raised, every later call of the same filter raises it again, so parallel shard scans of the
    request stop too."""
