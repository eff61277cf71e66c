"""Unique enqueue keys above and between the backends: which shard owns a key, and how a batch
that repeats a key maps to results (docs/semantics.md, rows `U-...`).

Owner: rendezvous (highest random weight) hashing of (queue, key) over the names of the shards
that take enqueues, as configured (healthy or not), so every server with the same shard map
sends a key to the same shard and that shard alone decides. Adding or removing a shard (or
flipping dequeue_only) moves only the keys that the changed shard wins or loses (about 1/N).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from pinlater.storage.models import Enqueued, NewJob

#: how long a key is held when the queue's settings say nothing (24 h)
DEFAULT_UNIQUE_WINDOW_SECONDS = 86_400.0


def owner_shard(queue: str, key: str, shards: Sequence[str]) -> str:
    """The shard of `shards` that owns `key` in `queue` (the same on every server)."""
    if len(shards) == 1:
        return shards[0]
    return max(shards, key=lambda shard: (_weight(shard, queue, key), shard))


def _weight(shard: str, queue: str, key: str) -> bytes:
    # ASCII only on every part (shard and queue names are [A-Za-z0-9_]; keys are validated
    # printable ASCII), and \0 separates them, so distinct triples hash distinct texts
    text = f"{shard}\0{queue}\0{key}".encode("ascii")
    return hashlib.blake2b(text, digest_size=8).digest()


def first_of_key(jobs: Sequence[NewJob]) -> list[int]:
    """For each job, the index of the first job of the batch with the same unique key (its own
    index when it has no key or is the first)."""
    first: dict[str, int] = {}
    return [
        i if job.unique_key is None else first.setdefault(job.unique_key, i)
        for i, job in enumerate(jobs)
    ]


def keyed_results(
    jobs: Sequence[NewJob],
    firsts: Sequence[int],
    held: Mapping[str, tuple[int, int]],
    stored: Mapping[int, int],
) -> list[Enqueued]:
    """`Shard.enqueue_keyed`'s answer: `stored` maps the index of each job stored to its new
    local id, `held` each key held before the batch to its holder's (priority, local id)."""
    out = []
    for i, job in enumerate(jobs):
        first = firsts[i]
        if first in stored:  # stored itself, or a repeat of a key stored by this batch
            out.append(Enqueued(jobs[first].priority, stored[first], first == i))
        else:
            priority, local_id = held[job.unique_key]  # type: ignore[index]
            out.append(Enqueued(priority, local_id, False))
    return out
