"""Connections to MySQL/MariaDB instances: one lazy DBUtils pool per instance, shared by its
logical shards, plus the translation of pymysql errors into the storage error contract.

Why these choices:
- Pools are created on first use and hold no connection until then (`mincached=0`), so opening a
  shard never touches the network: a server starts with a dead shard and picks it up later.
- Every connection gets its session pinned when it is (re)created, not trusting server config:
  strict `sql_mode` (a too-long value is an error, never silently truncated), `time_zone
  '+00:00'`, autocommit on (transactions are explicit), READ COMMITTED (no gap locks: enqueues
  never wait behind a dequeue's range scan) and `CLIENT.FOUND_ROWS` (pymysql otherwise reports
  rows *changed*, so a guarded UPDATE that writes identical values would look like a no-op).
  READ COMMITTED needs `binlog_format` ROW or MIXED where the binlog is on (MariaDB's default).
- Pools are keyed by the instance's connection settings and reference-counted: the db-shards of
  one instance ("1", "1d1", ...) share one pool, and closing one shard (e.g. a hot reload that
  drops it) does not close the pool its siblings still use.
- What the server supports (SKIP LOCKED, INSERT ... RETURNING, consecutive auto-increment ids)
  is read once per pool, on the first successful connection.
- Lock waits end before the socket does: sessions wait for metadata and row locks at most half
  the read timeout (`lock_wait_timeout`, `innodb_lock_wait_timeout`; lower server settings are
  kept). A call stuck behind another queue operation's lock (a deleteQueue's RENAME waiting for
  the queue's open transactions, and the calls queued behind it) then fails with error 1205, a
  `QueueBusy` that leaves the shard healthy, instead of a read timeout that takes the whole
  shard out of service (MariaDB waits a day for a metadata lock by default).
- DBUtils replaces a pooled connection only when it is gone (`connection_lost`, its `isfatal`)
  and only outside a transaction, where it re-runs the statement once (only idempotent
  statements run there: DDL with IF [NOT] EXISTS, the clock, ping). A server-answered error is
  never re-run: a lock wait timeout re-run had doubled every wait.
- A failing call costs its timeouts once: inside a transaction (every job call, reads too) a
  lost connection is neither reopened nor rolled back in the failing call (`end_failed`); the
  pool drops it at its next checkout, and the layer above retries the call. DBUtils reopened
  it inline (in the failed statement, again in the rollback): against an instance that
  accepts TCP but never answers, a call took the read timeout plus one or two connect
  timeouts (3.1 s in fault scenario F7: 2.0 + 2 x 0.5 s, then the other shard's enqueue, past
  the client's 3 s). Checkout opens connections outside the pool's lock (`CheckoutPool`).
- Errors are scoped (`translate`): lock waits, deadlocks and a table re-created under a read
  snapshot are one queue's contention (`QueueBusy`); connection failures are the shard's.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
from dbutils.pooled_db import PooledDB, PooledDedicatedDBConnection
from pymysql.constants import CLIENT

from pinlater.storage.errors import QueueBusy, QueueNotFound, ShardError, StorageFull

SQL_MODE = (
    "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
SESSION_SETUP = (
    f"SET SESSION sql_mode = '{SQL_MODE}', time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
)

#: connection lost/refused/timed out, server shutting down, too many connections, query
#: interrupted: the statement (or transaction) can be retried
RETRIABLE_CODES = frozenset(
    {
        1040,
        1053,
        1927,
        2002,
        2003,
        2005,
        2006,
        2011,
        2012,
        2013,
        2014,
        2027,
        2055,
    }
)
#: the connection is gone (server gone away, lost, commands out of sync, killed, shut down):
#: DBUtils replaces such a pooled connection; any other error leaves the connection in use
CONNECTION_LOST_CODES = frozenset({1053, 1927, 2006, 2013, 2014, 2027, 2055})
#: lock wait timeout (row or metadata lock), deadlock, "table definition has changed" (a table
#: re-created after a read snapshot began), "error dropping database" (a table created in it
#: meanwhile): contention on one queue's tables, not a failing shard
QUEUE_BUSY_CODES = frozenset({1010, 1205, 1213, 1412})
#: unknown database / table: the queue does not exist on this shard
MISSING_CODES = frozenset({1049, 1146})
#: table full, disk full, out of memory, "got error 28 (ENOSPC) from storage engine"
FULL_CODES = frozenset({1021, 1037, 1038, 1041, 1114})
_NO_SPACE = re.compile(r"errno: 28|error 28|No space left|disk full|is full", re.IGNORECASE)
_MISSING_DB = re.compile(r"'([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?'")


@dataclass(frozen=True, slots=True)
class InstanceSettings:
    """How to reach one instance; equal settings share one pool."""

    host: str
    port: int
    user: str
    password: str | None
    pool_size: int
    connect_timeout_seconds: float
    read_timeout_seconds: float
    write_timeout_seconds: float


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What one server supports, read once from its first connection."""

    version: str
    skip_locked: bool  # SELECT ... FOR UPDATE SKIP LOCKED (MariaDB >= 10.6, MySQL >= 8.0.1)
    returning: bool  # INSERT ... RETURNING (MariaDB >= 10.5)
    autoinc_lock_mode: int
    max_allowed_packet: int

    @classmethod
    def from_row(cls, version: str, lock_mode: int, packet: int) -> ServerInfo:
        numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
        mariadb = "mariadb" in version.lower()
        return cls(
            version=version,
            autoinc_lock_mode=int(lock_mode),
            max_allowed_packet=int(packet),
            skip_locked=numbers >= ((10, 6) if mariadb else (8, 0, 1)),
            returning=mariadb and numbers >= (10, 5),
        )


def connection_lost(error: Exception) -> bool:
    """DBUtils' `isfatal`: whether a failed statement's connection must be replaced. Only then
    does DBUtils reconnect (and, inside a transaction, raise the error for the layer above to
    retry the call); a server-answered error (a lock wait timeout, a deadlock) is raised as it
    is, never re-run by DBUtils (that doubled every lock wait)."""
    if isinstance(error, pymysql.err.InterfaceError):
        return True
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    return code in CONNECTION_LOST_CODES or code == 0


def lock_wait_seconds(settings: InstanceSettings) -> int:
    """How long a session waits for a lock: half the read timeout, at least 1 s (whole
    seconds are all the server takes)."""
    return max(1, int(settings.read_timeout_seconds / 2))


def session_setup(settings: InstanceSettings) -> list[str]:
    """The statements every new connection runs (see the module docstring)."""
    wait = lock_wait_seconds(settings)
    return [
        *SESSION_SETUP,
        f"SET SESSION lock_wait_timeout = LEAST(@@GLOBAL.lock_wait_timeout, {wait}),"
        f" innodb_lock_wait_timeout = LEAST(@@GLOBAL.innodb_lock_wait_timeout, {wait})",
    ]


class BoundedConnection(pymysql.connections.Connection):
    """A pymysql connection whose handshake is bounded by connect_timeout.

    pymysql waits for the server's greeting with the *read* timeout; against a peer that accepts
    TCP but never answers (a hung mysqld, a blackholed network path) every reconnect DBUtils makes
    after a failed statement would then cost another full read timeout. Connecting is bounded by
    the connect timeout, as an operator setting `connect_timeout_seconds` expects.
    """

    _read_timeout: float | None

    def connect(self, sock=None):
        read_timeout = self._read_timeout
        self._read_timeout = self.connect_timeout
        try:
            super().connect(sock)
        finally:
            self._read_timeout = read_timeout
        if self._sock is not None:
            self._sock.settimeout(read_timeout)
            self._current_timeout = read_timeout


def _bounded_connect(*args, **kwargs) -> BoundedConnection:
    return BoundedConnection(*args, **kwargs)


# DBUtils reads the DB-API module (exception classes, thread safety) from the creator
setattr(_bounded_connect, "dbapi", pymysql)  # noqa: B010 - a function attribute, not typed
setattr(_bounded_connect, "threadsafety", pymysql.threadsafety)  # noqa: B010


class CheckoutPool(PooledDB):
    """PooledDB (dedicated connections only) whose checkout opens a connection outside the
    pool's lock and drops idle connections that were lost in an earlier call.

    PooledDB opens a new connection while it holds the lock every checkout and every return
    takes: against an instance that accepts TCP but never answers, callers needing a connection
    waited in line, each a connect timeout (2.1 s for the third with a 0.5 s timeout in F7),
    and so did the calls returning one. Here the lock only reserves a slot (waiting for one
    while `pool_size` connections are out, as PooledDB does) and takes an idle connection.
    Uses PooledDB's slot bookkeeping (`_lock`, `_wait_lock`, `_connections`, `_idle_cache`),
    unchanged since DBUtils 2.0; tests/unit/test_mysql_shard.py times checkouts against a
    blackholed instance."""

    def connection(self, shareable: bool = False) -> Any:
        with self._lock:
            while self._maxconnections and self._connections >= self._maxconnections:
                self._wait_lock()
            self._connections += 1
            idle = None
            while self._idle_cache and idle is None:
                candidate = self._idle_cache.pop(0)
                if is_open(candidate):
                    idle = candidate
                else:  # lost in an earlier call (end_failed left it for us to drop)
                    _close_quietly(candidate)
        try:
            con = idle if idle is not None else self.steady_connection()
            return PooledDedicatedDBConnection(self, con)
        except BaseException:
            with self._lock:
                self._connections -= 1
                self._lock.notify()
            raise

    dedicated_connection = connection


def is_open(con: Any) -> bool:
    """Whether a pooled (or steady) connection's socket is still open: pymysql closes it on
    any connection error, so this is a local check, no round trip."""
    return bool(con.dbapi_connection.open)


def commit(conn: Any) -> None:
    """COMMIT the transaction on pooled connection `conn`. On the driver's connection, not
    DBUtils' `commit()`, which reopens a lost connection before it raises (a connect timeout
    more against a silent instance); `cancel()` then ends DBUtils' transaction flag (no round
    trip). A failed COMMIT leaves the flag for `end_failed`."""
    conn.dbapi_connection.commit()
    conn.cancel()


def end_failed(conn: Any) -> None:
    """End the transaction of a call that failed on pooled connection `conn`. A lost
    connection is only marked out of its transaction (DBUtils' `cancel()`: no round trip; the
    server discards a closed session's transaction) and left for the pool to drop at checkout;
    a live one is rolled back."""
    if not is_open(conn):
        conn.cancel()
        return
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - the connection is reported with the original error
        pass


def _close_quietly(con: Any) -> None:
    try:
        con.close()
    except Exception:  # noqa: BLE001 - a lost connection may fail to close; it is dropped
        pass


class InstancePool:
    """A lazily created PooledDB for one instance, with the server's capabilities."""

    def __init__(self, settings: InstanceSettings):
        self.settings = settings
        self._lock = threading.Lock()
        self._pool: CheckoutPool | None = None
        self._info: ServerInfo | None = None
        self.closed = False

    def _create(self) -> CheckoutPool:
        s = self.settings
        # ping=0: no ping when a connection is handed out. A ping costs a round trip per
        # request and, against a shard that stopped answering, a whole read timeout plus a
        # reconnect before the real statement even starts (a blackholed shard then took ~3x
        # read_timeout to fail). A connection the server dropped fails its first statement
        # fast with a retriable error instead, DBUtils reconnects it, and the layer above
        # retries the call.
        return CheckoutPool(
            creator=_bounded_connect,
            mincached=0,
            maxcached=s.pool_size,
            maxshared=0,
            maxconnections=s.pool_size,
            blocking=True,
            setsession=session_setup(s),
            reset=False,
            ping=0,
            isfatal=connection_lost,
            host=s.host,
            port=s.port,
            user=s.user,
            password=s.password or "",
            connect_timeout=s.connect_timeout_seconds,
            read_timeout=s.read_timeout_seconds,
            write_timeout=s.write_timeout_seconds,
            charset="utf8mb4",
            binary_prefix=True,
            autocommit=True,
            client_flag=CLIENT.FOUND_ROWS,
        )

    def connection(self) -> Any:
        """A pooled connection (close() returns it); raises pymysql errors."""
        with self._lock:
            if self.closed:
                raise pymysql.err.InterfaceError(0, "pool is closed")
            if self._pool is None:
                self._pool = self._create()
            pool = self._pool
        return pool.connection()

    def info(self, cur: Any) -> ServerInfo:
        """The server's capabilities, read with cursor `cur` the first time."""
        if self._info is None:
            cur.execute("SELECT VERSION(), @@innodb_autoinc_lock_mode, @@max_allowed_packet")
            self._info = ServerInfo.from_row(*cur.fetchone())
        return self._info

    def known_info(self) -> ServerInfo | None:
        """The capabilities if already read (no round trip), else None."""
        return self._info

    def close(self) -> None:
        with self._lock:
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


def translate(shard: str, exc: Exception, queue_of: Callable[[str], str | None]) -> Exception:
    """The storage-contract error for a pymysql error raised on `shard`.

    `queue_of(database_name)` maps a database name back to its queue (None if it is not one
    of this shard's), so "unknown table" becomes QueueNotFound(queue)."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    queue = _missing_queue(code, message, queue_of)
    if queue is not None:
        return QueueNotFound(queue)
    if code in FULL_CODES or (code in (1030, 3, 1878) and _NO_SPACE.search(message)):
        return StorageFull(f"shard {shard}: MySQL error {code}: {message}")
    if code in QUEUE_BUSY_CODES:
        return QueueBusy(shard, f"MySQL error {code}: {message}")
    if code in RETRIABLE_CODES or isinstance(exc, pymysql.err.InterfaceError):
        return ShardError(
            shard,
            f"MySQL error {code}: {message}",
            retriable=True,
            timed_out=code == 2013 and "timed out" in message,
        )
    if isinstance(exc, pymysql.err.OperationalError) and code == 0:
        return ShardError(shard, f"connection failed: {message}", retriable=True)
    return ShardError(
        shard, f"MySQL error {code} ({type(exc).__name__}): {message}", retriable=False
    )


def _missing_queue(code: int, message: str, queue_of: Callable[[str], str | None]) -> str | None:
    """The queue an "unknown database/table" error names, if it is one of the shard's."""
    if code not in MISSING_CODES:
        return None
    match = _MISSING_DB.search(message)
    return queue_of(match.group(1)) if match else None
