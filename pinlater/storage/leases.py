"""Leases: advisory ownership kept in the storage itself, for the prefetching broker.

A lease is a name, an owner and an expiry on one shard's clock (`Shard.acquire_lease`). The
broker uses two kinds: a partition lease (queue x shard, kept in that shard, so a partition's
owner is decided where its jobs are) and a server heartbeat (kept on the first shard of the
map, so one `live_leases` read lists the live servers). Names and owners are short printable
ASCII, so every backend stores them as they are (a bound SQL parameter, a Redis hash field)
and no name can reach a key or statement text. Correctness never depends on a lease: two
servers that both believe they own a partition still claim its jobs atomically in storage.
"""

from __future__ import annotations

import re

MAX_LEASE_NAME = 200
MAX_LEASE_OWNER = 200
#: the longest a lease may be taken for (a day): a lease is renewed, never held for good
MAX_LEASE_TTL_MS = 86_400_000
#: `Shard.live_leases` forgets leases expired this long (a day) ...
LEASE_FORGOTTEN_AFTER_MS = 86_400_000
#: ... at most this many per call (a server's heartbeat is a lease per process: without it
#: the leases of restarted servers would pile up, one per restart)
LEASES_FORGOTTEN_PER_CALL = 100
_PRINTABLE = re.compile(r"[!-~]+", re.ASCII)


def check_lease(name: str, owner: str | None = None, ttl_ms: int | None = None) -> None:
    """Raise ValueError unless the name (and owner, ttl when given) are valid: 1 to 200
    printable ASCII characters without spaces, a ttl of 1 ms to a day."""
    for what, value, cap in (("name", name, MAX_LEASE_NAME), ("owner", owner, MAX_LEASE_OWNER)):
        if value is None and what == "owner":
            continue
        if not isinstance(value, str) or len(value) > cap or not _PRINTABLE.fullmatch(value):
            raise ValueError(f"lease {what} must be 1 to {cap} printable ASCII characters")
    if ttl_ms is not None and not 0 < ttl_ms <= MAX_LEASE_TTL_MS:
        raise ValueError(f"lease ttl_ms must be 1..{MAX_LEASE_TTL_MS}")
