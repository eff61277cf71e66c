"""Storage faults and probes for the conformance suite, on the real shards of the running store.

`intercepted` wraps one shard primitive (e.g. `enqueue`) of some shards: it counts the calls,
records what the real primitive returned, and can make a call fail first with the error the
storage seam defines (`ShardError` for a lost connection, `StorageFull` for a full disk or
Redis over maxmemory). The database behind the shard stays real; only the failure is injected,
so the rules pinned are the sharded layer's and the handler's answers to it, on every backend
(`QueueBusy` for a queue's own contention: a lock wait behind its createQueue/deleteQueue).
Everything is undone afterwards, by default including the health the failures cost the shards.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pinlater.storage.errors import QueueBusy, ShardError, StorageFull
from pinlater.storage.sharded import ShardedBackend


def lost_connection(shard: str) -> Exception:
    return ShardError(shard, "connection lost (injected)", retriable=True)


def queue_busy(shard: str) -> Exception:
    return QueueBusy(shard, "MySQL error 1205: Lock wait timeout exceeded (injected)")


def full(shard: str) -> Exception:
    return StorageFull(f"no space left on shard {shard} (injected)")


@dataclass
class Calls:
    """What happened to an intercepted primitive: calls per shard, the real results and each
    call's (shard, positional arguments)."""

    count: Counter = field(default_factory=Counter)
    results: list = field(default_factory=list)
    args: list = field(default_factory=list)


@contextlib.contextmanager
def intercepted(
    store: ShardedBackend,
    method: str,
    *,
    fail_with: Callable[[str], Exception] | None = None,
    fail_times: int | None = None,
    shards: Sequence[str] | None = None,
    keep_health: bool = False,
) -> Iterator[Calls]:
    """Wrap `method` of `shards` (default: every shard). With `fail_with`, the first
    `fail_times` calls per shard (default: every call) raise `fail_with(shard)` instead of
    running the real primitive. Afterwards the shards' health is reset unless `keep_health`."""
    names = list(store.shard_names() if shards is None else shards)
    calls = Calls()
    saved = {}
    # an enqueue uses its own shard object when the store has an enqueue backend
    handles = [(n, s) for n in names for s in {store.shard(n), store.shard(n, for_enqueue=True)}]
    for name, shard in handles:
        saved[id(shard)] = vars(shard).get(method)
        setattr(shard, method, _wrapper(name, getattr(shard, method), calls, fail_with, fail_times))
    try:
        yield calls
    finally:
        for _, shard in handles:
            if saved[id(shard)] is None:
                delattr(shard, method)
            else:
                setattr(shard, method, saved[id(shard)])
        for name in names:
            if not keep_health:
                store.health.forget(name)


def _wrapper(name, real, calls: Calls, fail_with, fail_times):
    def call(*args, **kwargs):
        calls.count[name] += 1
        calls.args.append((name, args))
        if fail_with is not None and (fail_times is None or calls.count[name] <= fail_times):
            raise fail_with(name)
        result = real(*args, **kwargs)
        calls.results.append(result)
        return result

    return call


def shard_of(descriptor: str) -> str:
    """The shard name in `QUEUE:sSHARD:pPRIORITY:LOCALID`."""
    return descriptor.split(":")[1][1:]


def local_id(descriptor: str) -> int:
    return int(descriptor.rsplit(":", 1)[1])


def shift_clocks(store: ShardedBackend, names: Sequence[str], ms: int) -> None:
    """Move the clocks of some shards only (`ShardedBackend.shift_clock` moves them all)."""
    store.shift_shard_clocks(names, ms)
