"""Errors of the storage seam: what a shard raises besides `QueueNotFound`.

`ShardError` and `StorageFull` never reach a client as such: the sharded layer retries or
translates them (SHARD_CONNECTION_FAILED, ENQUEUE_REJECTED ...). `QueueNotFound` is the client
error of the same name, raised by shards for a queue they do not hold.
"""

from __future__ import annotations

from pinlater.errors import QueueNotFound

__all__ = ["QueueNotFound", "ShardError", "StorageFull"]


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
