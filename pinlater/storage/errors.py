"""Errors of the storage seam: what a shard raises besides `QueueNotFound`.

`ShardError` and `StorageFull` never reach a client as such: the sharded layer retries or
translates them (SHARD_CONNECTION_FAILED, ENQUEUE_REJECTED ...). `QueueNotFound` is the client
error of the same name, raised by shards for a queue they do not hold.

Scope decides health: a `ShardError` says the shard (its connection, its server) failed and
counts towards taking the shard out of service; a `QueueBusy` says one queue's storage was busy
(its own DDL, lock waits between calls on it) while the shard answered, and never changes the
shard's health, so one queue's trouble cannot make the other queues of the shard unavailable.
"""

from __future__ import annotations

from pinlater.errors import InvalidRequest, QueueNotFound

__all__ = ["BodyFilterStopped", "QueueBusy", "QueueNotFound", "ShardError", "StorageFull"]


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


class QueueBusy(ShardError):
    """One queue's storage could not serve the call right now although the shard answered: the
    queue's tables are being created, deleted or given new priority levels by a concurrent call
    (a metadata lock wait, a table re-created under a read snapshot), or calls on the queue
    wait for each other's row locks (lock wait timeout, deadlock). Always retriable; the
    sharded layer retries it like any retriable failure but never counts it against the
    shard's health."""

    def __init__(self, shard: str, message: str):
        super().__init__(shard, message, retriable=True)


class StorageFull(Exception):
    """The storage refused a write for lack of space or memory (Redis noeviction, disk full)."""


class BodyFilterStopped(InvalidRequest):
    """A body filter refused to go on: its request spent its regex budget (CPU, time, bodies or
    bytes scanned) or one body needed more CPU than allowed. Raised by the filter callable a
    shard calls; shards let it propagate (it is the client's answer) and stop scanning, and
    delete_jobs acts on no match of a scan that stopped (filter first, then delete). Once
    raised, every later call of the same filter raises it again, so parallel shard scans of the
    request stop too."""
