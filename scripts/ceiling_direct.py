"""The ceiling side of scripts/bench_ceilings.py: each backend's storage driven without the
server, from several threads of this process, with the same batches as the server side.

* SQLite: the shard primitives (`SQLiteShard.enqueue / dequeue / ack`) on a file of its own.
* Redis: the shard's Lua scripts sent directly as EVALSHA over raw connections. The arguments
  are the ones the shard itself builds (captured from a shard whose send step only records),
  so a change to a script's arguments is picked up here; enqueue pipelines `depth` calls per
  round trip, dequeue+ack sends the previous batch's ack and the next dequeue together.
* MariaDB: the statements the MySQL shard sends (recorded once from the shard, through a
  recording connection), replayed with pymysql on plain connections with the shard's session
  settings; each batch's ids are bound into the `id_<n>` parameters of the statements after
  the one that selected them.

Each driver has `create_queue(queue)`, `enqueue(queue, body, calls)` and `drain(queue, calls,
thread)`, both of which return (per-call latencies in seconds, jobs handled), and `storage_pid`
(the process whose CPU is the storage's, None when the storage is this process).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pymysql
import redis
from pymysql.constants import CLIENT

from backends import redis_keys, redis_resp
from backends.mysql import MySQLBackend
from backends.mysql_pool import SESSION_SETUP
from backends.redis_backend import RedisBackend, RedisShardSpec
from backends.sqlite import SQLiteBackend
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.models import Ack, ClaimMatch, NewJob

BATCH = 100
#: (per-call latencies in seconds, jobs handled)
Timings = tuple[list[float], int]


class SQLiteDirect:
    """SQLite shard primitives on `<data_dir>/shard-ceiling.db`."""

    storage_pid = None

    def __init__(self, data_dir: str):
        options = SQLiteBackend.parse_options({"data_dir": data_dir}, "backend")
        self.backend = SQLiteBackend(options, StorageLimits())
        spec = SQLiteBackend.parse_shards([{"name": "ceiling"}], options, "shards")[0]
        self.shard = self.backend.open_shard(spec)

    def create_queue(self, queue: str) -> None:
        self.shard.create_queue(queue)

    def enqueue(self, queue: str, body: bytes, calls: int) -> Timings:
        jobs = [NewJob(body=body)] * BATCH
        return _repeat(calls, lambda: len(self.shard.enqueue(queue, jobs)))

    def drain(self, queue: str, calls: int, thread: int) -> Timings:
        source = f"ceiling-{thread}"

        def step() -> int:
            got = self.shard.dequeue(queue, 1, BATCH, new_claim(source))
            acks = [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got]
            self.shard.ack(queue, acks, [])
            return len(acks)

        return _repeat(calls, step)

    def close(self) -> None:
        self.shard.close()
        self.backend.close()


class _Captured(Exception):
    """Raised by the capturing shard's send step once it has recorded the call."""


class RedisDirect:
    """The Redis shard's scripts as raw EVALSHA calls on a redis-server at `port`."""

    def __init__(self, port: int, pid: int, depth: int = 4):
        self.port, self.storage_pid, self.depth = port, pid, depth
        self.backend = RedisBackend({}, StorageLimits())
        self.shard = self.backend.open_shard(RedisShardSpec(name="ceiling", port=port))
        # A second shard object whose send step records the (sha, args) it was given: the
        # arguments exactly as the shard builds them, without sending anything.
        self._capture = self.backend.open_shard(RedisShardSpec(name="ceiling", port=port))
        self._local = threading.local()
        self._capture._evalsha_all = self._record  # type: ignore[attr-defined]
        self.registry = redis_keys.registry_key("ceiling")

    def _record(self, calls: list[tuple[str, list]]) -> list:
        self._local.calls = calls
        raise _Captured

    def _args_of(self, action) -> list[tuple[str, list]]:
        with contextlib.suppress(_Captured):
            action(self._capture)
        return self._local.calls

    def create_queue(self, queue: str) -> None:
        self.shard.create_queue(queue)
        self.shard.enqueue(queue, [NewJob(body=b"warm")])  # scripts loaded (no NOSCRIPT later)
        self.shard.ack(queue, [], [])

    def _packed(self, conn: redis.Connection, calls: list[tuple[str, list]]) -> Any:
        """The calls encoded as the shard encodes them (backends/redis_resp.py)."""
        return [b"".join([redis_resp.evalsha(sha, self.registry, args) for sha, args in calls])]

    def enqueue(self, queue: str, body: bytes, calls: int) -> Timings:
        """`depth` enqueue calls per round trip; a latency is one round trip's."""
        jobs = [NewJob(body=body)] * BATCH
        call = self._args_of(lambda s: s.enqueue(queue, jobs))
        conn = self._connection()
        packed = self._packed(conn, call * self.depth)

        def step() -> int:
            conn.send_packed_command(packed)
            return sum(len(conn.read_response()) for _ in range(self.depth))

        try:
            return _repeat(-(-calls // self.depth), step)
        finally:
            conn.disconnect()

    def drain(self, queue: str, calls: int, thread: int) -> Timings:
        """Each round trip acks the previous batch and dequeues the next (as a worker with
        piggy-backed acks does); the last batch is acked on its own."""
        source = f"ceiling-{thread}"
        claim = new_claim(source)
        dequeue = self._args_of(lambda s: s.dequeue(queue, 1, BATCH, claim))
        conn = self._connection()
        pending: list[Ack] = []

        def step(last: bool = False) -> int:
            nonlocal pending
            acks = pending
            ack = self._args_of(lambda s: s.ack(queue, acks, [])) if acks else []
            conn.send_packed_command(self._packed(conn, ack + ([] if last else dequeue)))
            if ack:
                conn.read_response()
            if not last:
                # dequeue.lua's reply: (id, body, attempts allowed, attempts remaining) per job
                flat = conn.read_response()
                pending = [
                    Ack(1, int(flat[i]), ClaimMatch(source, claim)) for i in range(0, len(flat), 4)
                ]
            return len(acks)

        try:
            latencies, jobs = _repeat(calls, step)
            flush = _repeat(1, lambda: step(last=True))
            return latencies + flush[0], jobs + flush[1]
        finally:
            conn.disconnect()

    def _connection(self) -> redis.Connection:
        conn = redis.Connection(host="127.0.0.1", port=self.port, socket_timeout=30)
        conn.connect()
        return conn

    def close(self) -> None:
        self._capture.close()
        self.shard.close()
        self.backend.close()


class _RecordingCursor:
    """Forwards to a real cursor and records every (sql, params) it runs."""

    def __init__(self, cursor, log: list):
        self._cursor, self._log = cursor, log

    def execute(self, sql, params=None):
        self._log.append((sql, params))
        return self._cursor.execute(sql, params)

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _RecordingConnection:
    def __init__(self, conn, log: list):
        self._conn, self._log = conn, log

    def cursor(self):
        return _RecordingCursor(self._conn.cursor(), self._log)

    def __getattr__(self, name):
        return getattr(self._conn, name)


_ID_PARAM = re.compile(r"id_(\d+)")


class MySQLDirect:
    """The MySQL shard's statements replayed with pymysql on a mariadbd at `port`."""

    def __init__(self, port: int, pid: int):
        self.port, self.storage_pid = port, pid
        self.backend = MySQLBackend({}, StorageLimits())
        spec = MySQLBackend.parse_shards(
            [{"name": "ceiling", "port": port, "pool_size": 8}], {}, "shards"
        )[0]
        self.shard = self.backend.open_shard(spec)
        self._lock = threading.Lock()

    def create_queue(self, queue: str) -> None:
        self.shard.create_queue(queue)
        self.shard.ack(queue, [], [])  # server capabilities read: nothing extra recorded later

    @contextlib.contextmanager
    def _recording(self) -> Iterator[list]:
        """Statements the shard sends inside the block (BEGIN/COMMIT are not statements here:
        the replay opens and commits one transaction per recorded call)."""
        log: list = []
        real = self.shard._connection

        @contextlib.contextmanager
        def recording():
            with real() as conn:
                yield _RecordingConnection(conn, log)

        self.shard._connection = recording  # type: ignore[method-assign]
        try:
            yield log
        finally:
            del self.shard._connection

    def _statements(self, action) -> list[tuple[str, Any]]:
        with self._recording() as log:
            action()
        return list(log)

    def _connect(self) -> pymysql.Connection:
        conn = pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="",
            autocommit=True,
            client_flag=CLIENT.FOUND_ROWS,
        )
        with conn.cursor() as cur:
            for statement in SESSION_SETUP:
                cur.execute(statement)
        return conn

    def enqueue(self, queue: str, body: bytes, calls: int) -> Timings:
        jobs = [NewJob(body=body)] * BATCH
        with self._lock:
            statements = self._statements(lambda: self.shard.enqueue(queue, jobs))
        conn = self._connect()

        def step() -> int:
            _replay(conn, statements, [])
            return BATCH

        try:
            return _repeat(calls, step)
        finally:
            conn.close()

    def drain(self, queue: str, calls: int, thread: int) -> Timings:
        source = f"ceiling-{thread}"
        claim = new_claim(source)
        with self._lock:  # one real dequeue and ack recorded, on a warm-up batch
            self.shard.enqueue(queue, [NewJob(body=b"warm")] * BATCH)
            got: list = []
            dequeue = self._statements(
                lambda: got.extend(self.shard.dequeue(queue, 1, BATCH, claim))
            )
            acks = [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got]
            ack = self._statements(lambda: self.shard.ack(queue, acks, []))
        conn = self._connect()

        def step() -> int:
            ids = _replay(conn, dequeue, [])
            if ids:
                _replay(conn, ack, ids)
            return len(ids)

        try:
            return _repeat(calls, step)
        finally:
            conn.close()

    def close(self) -> None:
        self.shard.close()
        self.backend.close()


def _replay(conn: pymysql.Connection, statements: list[tuple[str, Any]], ids: list) -> list:
    """Run recorded statements in one transaction; their `id_<n>` parameters take `ids`, or
    else the ids an earlier statement of this replay selected (the first column of the first
    rows of more than one column: a dequeue's select), padded with -1. Returns the ids it
    selected."""
    selected: list = []
    conn.begin()
    with conn.cursor() as cur:
        for sql, recorded in statements:
            use = ids or selected
            params = recorded
            if use and isinstance(recorded, dict):
                params = {
                    k: (_bound_id(use, k) if _ID_PARAM.fullmatch(k) else v)
                    for k, v in recorded.items()
                }
            cur.execute(sql, params)
            rows = cur.fetchall() if cur.description else ()
            if rows and len(rows[0]) > 1 and not selected:
                selected = [row[0] for row in rows]
    conn.commit()
    return selected


def _bound_id(ids: list, key: str) -> int:
    index = int(key[3:])
    return ids[index] if index < len(ids) else -1


def _repeat(calls: int, step) -> Timings:
    """Run `step` (returning the jobs it handled) `calls` times: (latencies, jobs)."""
    latencies, jobs = [], 0
    for _ in range(calls):
        started = time.perf_counter()
        jobs += step()
        latencies.append(time.perf_counter() - started)
    return latencies, jobs
