"""Loading the Lua scripts of the Redis backend (one .lua file per atomic operation).

Each script is `_lib.lua` (shared helpers, with Python constants substituted) plus the
operation's file, kept after the operation's shebang line when it has one: `#!lua` marks a
script that may write (Redis refuses it up front with -OOM when over maxmemory, so it stores
nothing), `#!lua flags=no-writes` a read-only one (runs under OOM); the delete-only scripts have
no shebang, so they still run under OOM and can free memory.

Scripts are registered with redis-py's `register_script`: called by SHA (EVALSHA), reloaded on
NOSCRIPT (e.g. after a restart or SCRIPT FLUSH).
"""

from __future__ import annotations

import functools
from pathlib import Path

import redis
from redis.commands.core import Script

from backends.redis_keys import LUA_CONSTANTS

LUA_DIR = Path(__file__).with_name("lua")


@functools.cache
def _lib() -> str:
    text = (LUA_DIR / "_lib.lua").read_text()
    for token, value in LUA_CONSTANTS.items():
        text = text.replace(token, str(int(value)))
    return text


@functools.cache
def script_source(name: str) -> str:
    """The full text sent to Redis for operation `name`."""
    text = (LUA_DIR / f"{name}.lua").read_text()
    if text.startswith("#!"):
        shebang, _, body = text.partition("\n")
        return f"{shebang}\n{_lib()}\n{body}"
    return f"{_lib()}\n{text}"


class Scripts:
    """The operation scripts bound to one client: `scripts.enqueue(keys=..., args=...)`. Each
    annotated attribute is the script of `lua/<name>.lua` (the annotations are the list)."""

    create_queue: Script
    delete_queue: Script
    enqueue: Script
    enqueue_keyed: Script
    dequeue: Script
    dequeue_fifo: Script
    ack: Script
    checkpoint: Script
    lookup: Script
    page: Script
    count: Script
    next_due: Script
    retry_failed: Script
    delete_jobs: Script
    reclaim: Script
    purge: Script
    settings_read: Script
    settings_write: Script
    purge_keys: Script
    ledger: Script
    queue_stats: Script
    reservations: Script
    lease_take: Script
    lease_drop: Script
    lease_list: Script

    def __init__(self, client: redis.Redis):
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(script_source(name)))

    def load_all(self, client: redis.Redis) -> None:
        """SCRIPT LOAD every script (one round trip): Redis knows all of them or, after a
        restart or SCRIPT FLUSH, none (see RedisShard._run_all)."""
        pipe = client.pipeline(transaction=False)
        for name in SCRIPT_NAMES:
            pipe.script_load(getattr(self, name).script)
        for name, sha in zip(SCRIPT_NAMES, pipe.execute(), strict=True):
            getattr(self, name).sha = sha


#: every operation's script name, in declaration order
SCRIPT_NAMES = tuple(Scripts.__annotations__)
