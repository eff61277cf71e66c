"""Redis key layout and value encodings for the Redis backend, built in one place.

Key layout (per shard; several shards may share one Redis instance and database because every
key starts with the shard name):

    pl:<shard>:queues                   HASH   queue name -> highest priority created (registry)
    pl:<shard>:settings                 HASH   version, doc: the runtime queue settings
                                               (pinlater/ops/runtime_settings.py; only on the
                                               first shard of the map)
    pl:<shard>:leases                   HASH   lease name -> '<expires_at ms>|<owner>': the
                                               prefetching broker's leases (names and owners
                                               are validated printable ASCII, hash fields)
    pl:<shard>:q:<queue>:p<n>:seq       STRING id counter of priority n (INCR); local ids are
                                               unique per queue, shard and priority
    pl:<shard>:q:<queue>:p<n>:fh        STRING a FIFO queue's mark (dequeue_fifo.lua): every
                                               id below it is gone, SUCCEEDED or FAILED
                                               (retry_failed.lua lowers it); no other
                                               queue has one
    pl:<shard>:q:<queue>:p<n>:b         HASH   id19 -> body (bytes)
    pl:<shard>:q:<queue>:p<n>:m         HASH   id19 -> meta 's|aa|ar|ca|ra|ua|cl': state
                                               (0..3), attempts allowed/remaining, created_at,
                                               run_after, updated_at (epoch ms, decimal) and
                                               the claim ('' when none; last, so it may hold
                                               '|')
    pl:<shard>:q:<queue>:p<n>:c         HASH   id19 -> custom status (UTF-8), only when non-empty
    pl:<shard>:q:<queue>:p<n>:ra<s>     ZSET   run_after index of state s (all scores 0):
                                               members '<ra16>:<id19>' so byte order is
                                               (run_after, id) order; ZRANGEBYLEX serves
                                               dequeue order, due/future ranges, exact scan
                                               cursors and ZLEXCOUNT counts
    pl:<shard>:q:<queue>:p<n>:ua<s>     ZSET   updated_at index of states 1..3 (score =
                                               updated_at ms, member id19): claim expiry
                                               (IN_PROGRESS), purge TTL (SUCCEEDED/FAILED),
                                               retryFailedJobs oldest-first (FAILED)
    pl:<shard>:q:<queue>:p<n>:rsv       ZSET   id19, score the deadline ms, of the jobs a
                                               prefetching broker reserved: IN_PROGRESS (ra1,
                                               the meta's claim) without a ua1 entry, so the
                                               claim timeout does not apply, only the deadline
    pl:<shard>:q:<queue>:uk             HASH   unique key -> 'prio|id|expires_at' of the job
                                               holding it (the key is validated printable
                                               ASCII, and a hash field, never part of a key)
    pl:<shard>:q:<queue>:ux             ZSET   unique key, score expires_at ms: the janitor's
                                               purge of expired keys
    pl:<shard>:q:<queue>:ledger         HASH   counter -> count: the queue's ledger
                                               (pinlater/storage/ledger.py), added to by the
                                               script that made each change

Jobs are fields of per-priority column hashes rather than a hash each, so enqueue, dequeue and
ack read and write a whole batch with one variadic HMGET/HSET per column (a Lua redis.call costs
microseconds; one per job dominated the scripts), and deleting a queue is UNLINK of a fixed set
of keys. Every job is in exactly one ra<s> index (and, outside PENDING, the matching ua<s>, or
:rsv for a reserved job).
`id19` is the local id zero-padded to 19 digits; `ra16` is run_after + RA_OFFSET zero-padded to
16 digits (run_after saturates to [RA_MIN, RA_MAX], far outside any real timestamp, so Lua
doubles stay exact).

Scripts build job and index keys from the queue prefix inside Lua (as the original did), so the
layout suits independent Redis instances, not Redis Cluster.
"""

from __future__ import annotations

import re

from pinlater.storage.claims import CLAIM_SOURCE_OFFSET

KEY_ROOT = "pl"
RA_OFFSET = 10**15
RA_MIN = -(10**15) + 1
RA_MAX = 8 * 10**15
#: largest local id the Lua scripts produce (Lua numbers are doubles)
MAX_LOCAL_ID = 2**53 - 1

_SHARD = re.compile(r"[A-Za-z0-9]{1,32}", re.ASCII)
_QUEUE = re.compile(r"[A-Za-z0-9_]+", re.ASCII)

#: constants substituted into backends/lua/_lib.lua
LUA_CONSTANTS = {
    "__CLAIM_SOURCE_OFFSET__": CLAIM_SOURCE_OFFSET,
    "__RA_OFFSET__": RA_OFFSET,
    "__RA_MIN__": RA_MIN,
    "__RA_MAX__": RA_MAX,
    "__MAX_ID__": MAX_LOCAL_ID,
}


def _check(pattern: re.Pattern, kind: str, name: str) -> str:
    # The layer above validates names; this guards the key space (no ':' '{' '*' ...) anyway.
    if not isinstance(name, str) or pattern.fullmatch(name) is None:
        raise ValueError(f"invalid {kind} name for a Redis key: {name!r}")
    return name


def registry_key(shard: str) -> str:
    return f"{KEY_ROOT}:{_check(_SHARD, 'shard', shard)}:queues"


def settings_key(shard: str) -> str:
    return f"{KEY_ROOT}:{_check(_SHARD, 'shard', shard)}:settings"


def lease_key(shard: str) -> str:
    return f"{KEY_ROOT}:{_check(_SHARD, 'shard', shard)}:leases"


def queue_prefix(shard: str, queue: str) -> str:
    return f"{KEY_ROOT}:{_check(_SHARD, 'shard', shard)}:q:{_check(_QUEUE, 'queue', queue)}"


def seq_key(shard: str, queue: str, priority: int) -> str:
    return f"{queue_prefix(shard, queue)}:p{int(priority)}:seq"


def column_keys(shard: str, queue: str, priority: int) -> tuple[str, str, str]:
    """The body, meta and custom-status hashes of one queue priority (fields are id19s)."""
    prefix = f"{queue_prefix(shard, queue)}:p{int(priority)}"
    return f"{prefix}:b", f"{prefix}:m", f"{prefix}:c"


def id19(local_id: int) -> str:
    return f"{int(local_id):019d}"


def clamp_run_after(ms: int) -> int:
    return min(max(int(ms), RA_MIN), RA_MAX)


def index_member(run_after_ms: int, local_id: int) -> str:
    """The ra<s> member of a job; must match pl_member in _lib.lua."""
    return f"{clamp_run_after(run_after_ms) + RA_OFFSET:016d}:{id19(local_id)}"
