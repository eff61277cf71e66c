"""The embedded SQLite backend: zero setup, one database file per shard.

Layout (queries in `queries/sqlite/schema.sql`): a `queues` registry (name -> queue_id, the name
compared byte-wise), one job table `q<queue_id>_p<priority>` per queue and priority and one
unique-key table `q<queue_id>_keys` per queue (`queries/sqlite/keys.sql`). Table
names use the numeric id because SQLite identifiers are case-insensitive while queue names are
not ("Foo" and "foo" are two queues); AUTOINCREMENT means neither queue ids nor local ids are
ever reused, so a stale id can never address a newer queue's jobs.

The queue id is resolved inside every transaction (an indexed lookup costing microseconds)
instead of being cached: deleteQueue followed by createQueue, possibly from another server
process on the same file, then cannot leave anyone with a stale id.

deleteQueue first moves the queue's registry row to `deleted_queues` in one short transaction
(from then on the queue answers QueueNotFound and its name is free), then frees its tables in
bounded steps with the write lock released in between (`_free`), so deleting a big queue never
stalls the shard's other queues; the janitor finishes what a crash interrupted
(`finish_deletes`).

Concurrency: writes go through one connection per shard with group commit
(`backends/sqlite_writer.py`): this process's writers queue on a lock instead of meeting in
SQLite's sleeping busy handler, and requests that arrive while a commit is under way share the
next transaction (`BEGIN IMMEDIATE`, a savepoint per request) and its fsync; each is answered
after that commit. Reads use a small pool of connections (one per concurrently running thread,
reused) with `BEGIN` for a consistent snapshot; WAL lets them run beside the writer. SQLite has
no server clock: `now_ms` is this process's injectable clock.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.sql_base import QueryBook, SQLDialect, SQLShard, StatsTables
from backends.sqlite_insert import insert_rows
from backends.sqlite_writer import GroupCommit
from pinlater.storage.contract import Backend, ShardSpec, StorageLimits
from pinlater.storage.errors import QueueNotFound, ShardError, StorageFull
from pinlater.storage.specs import ConfigError, parse_shard_list
from pinlater.storage.steps import in_steps

SQLITE = SQLDialect(name="sqlite", param_format=":{}", quote_char='"')
SYNCHRONOUS_MODES = ("FULL", "NORMAL")
DEFAULT_OPTIONS = {
    "data_dir": "./pinlater-data",
    "synchronous": "FULL",
    "busy_timeout_ms": 5000,
    "clock": time.time,
}
#: idle connections kept per shard (more are opened under load and closed when released)
MAX_IDLE_CONNECTIONS = 16
#: the shortest pause between the steps of a stepped delete (seconds; see _between_steps)
MIN_STEP_PAUSE = 0.002
#: rows of a deleted queue's table removed per transaction: its indexes are dropped first, so
#: a step costs about what DELETE_STEP jobs of a live table do (20-50 ms)
FREE_STEP = 5000
_RETRIABLE = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_CANTOPEN")


@dataclass(frozen=True, slots=True)
class SQLiteShardSpec(ShardSpec):
    """A shard's file is `<data_dir>/shard-<name>.db` unless `path` overrides it (a relative
    path is taken from data_dir)."""

    path: str | None = None


class SQLiteBackend(Backend):
    kind = "sqlite"
    supports_shard_reload = True  # opening and closing a shard is just opening a file
    #: one writer per file at a time whatever the connections: a second connection for
    #: enqueues would only contend for the lock (its writer thread already batches them)
    isolates_connections = False

    def __init__(self, options: Mapping[str, Any], limits: StorageLimits):
        super().__init__({**DEFAULT_OPTIONS, **options}, limits)

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any], path: str) -> dict[str, Any]:
        problems = cls.unknown_options(raw, list(DEFAULT_OPTIONS), path)
        options = {**DEFAULT_OPTIONS, **{k: v for k, v in raw.items() if k in DEFAULT_OPTIONS}}
        if not isinstance(options["data_dir"], str) or not options["data_dir"].strip():
            problems.append(f"{path}.data_dir: must be a non-empty path")
        mode = str(options["synchronous"]).upper()
        if mode not in SYNCHRONOUS_MODES:
            problems.append(
                f"{path}.synchronous: {options['synchronous']!r} is not one of "
                f"{', '.join(SYNCHRONOUS_MODES)}"
            )
        options["synchronous"] = mode
        options["busy_timeout_ms"] = _busy_timeout(options["busy_timeout_ms"], path, problems)
        if not callable(options["clock"]):
            problems.append(f"{path}.clock: must be a callable returning epoch seconds")
        if problems:
            raise ConfigError(problems)
        return options

    @classmethod
    def parse_shards(cls, raw: Any, options: Mapping[str, Any], path: str) -> list[ShardSpec]:
        specs = parse_shard_list(SQLiteShardSpec, raw, path, default=[{"name": "1"}])
        data_dir = options.get("data_dir", DEFAULT_OPTIONS["data_dir"])
        files = [shard_file(data_dir, spec) for spec in specs]
        problems = [
            f"{path}[{i}].path: {files[i]} is used by another shard"
            for i in range(len(files))
            if files[i] in files[:i]
        ]
        if problems:
            raise ConfigError(problems)
        return list[ShardSpec](specs)

    def open_shard(self, spec: ShardSpec) -> SQLiteShard:
        assert isinstance(spec, SQLiteShardSpec), spec
        return SQLiteShard(
            spec,
            self.limits,
            shard_file(self.options["data_dir"], spec),
            synchronous=self.options["synchronous"],
            busy_timeout_ms=self.options["busy_timeout_ms"],
            clock=self.options["clock"],
        )


def _busy_timeout(value: Any, path: str, problems: list[str]) -> Any:
    """busy_timeout_ms as an int in 0..600000 (digits in a string are accepted: environment
    overrides are strings); a problem is recorded otherwise."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 600_000:
        problems.append(f"{path}.busy_timeout_ms: expected an integer in 0..600000, got {value!r}")
    return value


def shard_file(data_dir: str, spec: SQLiteShardSpec) -> Path:
    return (Path(data_dir) / (spec.path or f"shard-{spec.name}.db")).resolve()


class SQLiteShard(SQLShard):
    dialect = SQLITE
    queries = QueryBook(SQLITE)

    def __init__(
        self,
        spec: ShardSpec,
        limits: StorageLimits,
        path: Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 5000,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(spec, limits)
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._idle: list[sqlite3.Connection] = []
        self._keyed_seen: set[int] = set()  # queue ids known to have a key table
        self._keyed_lock = threading.Lock()
        self._writer = GroupCommit(self.name, self._connect, self._translate)
        self._lock = threading.Lock()
        self._closed = False
        self._ready = False
        self._freeing: set[int] = set()  # ids of deleted queues being freed in this process
        self._secure_delete: int | None = None
        try:
            self._prepare()
        except ShardError:
            pass  # an unusable file must not stop the server: retried on first use (ping)

    def _prepare(self) -> None:
        """Create the directory, switch the file to WAL, create the registry and any job tables
        of priority levels configured since a queue was created. Idempotent, run once."""
        with self._lock:
            if self._ready:
                return
            if self._closed:
                raise ShardError(self.name, "shard is closed", retriable=False)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ShardError(self.name, f"cannot create {self.path.parent}: {exc}") from exc
            conn = self._guarded(self._connect)
            try:
                self._guarded(lambda: self._migrate(conn))
            finally:
                conn.close()
            self._ready = True

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(self.queries.render("create_registry"))
            cur.execute(self.queries.render("create_deleted_registry"))
            cur.execute(self.queries.render("create_settings"))
            cur.execute(self.queries.render("seed_settings"))
            cur.execute(self.queries.render("create_leases"))
            for queue_id in {qid for qid, _ in cur.execute(self.queries.render("queue_list"))}:
                self._create_tables(cur, queue_id)
            cur.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    # ---- clock ----
    def now_ms(self) -> int:
        return int(self._clock() * 1000) + self.clock_offset_ms

    # ---- connections and transactions ----
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
            cached_statements=512,
        )
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if self._secure_delete is None:  # the build's default, restored after a _free
            self._secure_delete = int(conn.execute("PRAGMA secure_delete").fetchone()[0])
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
        return conn

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection; one that saw a storage error is closed instead of reused."""
        if not self._ready:
            self._prepare()
        with self._lock:
            if self._closed:
                raise ShardError(self.name, "shard is closed", retriable=False)
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._guarded(self._connect)
        try:
            yield conn
        except (sqlite3.Error, ShardError, StorageFull):
            conn.close()
            raise
        except BaseException:
            self._give_back(conn)
            raise
        self._give_back(conn)

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._closed or len(self._idle) >= MAX_IDLE_CONNECTIONS:
                conn.close()
            else:
                self._idle.append(conn)

    @contextmanager
    def _transaction(
        self, begin: str, conn: sqlite3.Connection | None = None
    ) -> Iterator[sqlite3.Cursor]:
        """One transaction (on `conn`, else on a pooled connection): committed when the block
        succeeds, else rolled back; sqlite3 errors leave as ShardError/StorageFull, anything
        else (QueueNotFound, a filter's error) unchanged."""
        with nullcontext(conn) if conn is not None else self._connection() as used:
            cur = used.cursor()
            try:
                cur.execute(begin)
                yield cur
                cur.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(used)
                raise self._translate(exc) from exc
            except BaseException:
                _rollback(used)
                raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Cursor]:
        """This request's part of the shard's group-committed write transaction."""
        if not self._ready:
            self._prepare()
        with self._writer.transaction() as cur:
            yield cur

    def _read(self):
        return self._transaction("BEGIN")

    def _guarded(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.Error) -> Exception:
        code = getattr(exc, "sqlite_errorname", "") or ""
        if code.startswith("SQLITE_FULL"):
            return StorageFull(f"shard {self.name}: {exc}")
        return ShardError(
            self.name, f"{code or type(exc).__name__}: {exc}", retriable=code.startswith(_RETRIABLE)
        )

    # ---- SQLShard hooks ----
    def _job_table(self, cur: Any, queue: str, priority: int) -> tuple[str, ...]:
        return (f"q{self._queue_id(cur, queue)}_p{int(priority)}",)

    def _key_table(self, cur: Any, queue: str) -> tuple[str, ...]:
        return (_key_table_name(self._queue_id(cur, queue)),)

    def _ledger_table(self, cur: Any, queue: str) -> tuple[str, ...]:
        return (_ledger_table_name(self._queue_id(cur, queue)),)

    def _stats_tables(self, cur: Any, queues: Sequence[str]) -> dict[str, StatsTables]:
        wanted = set(queues)
        registry = dict(cur.execute(self.queries.render("queue_list")).fetchall())
        ids = {name: queue_id for queue_id, name in registry.items() if name in wanted}
        keyed = self._keyed_queues(cur, set(registry), ids.values())
        # a job table that never held a job is empty: not read at all (with many idle queues
        # most are, and each read is a statement to prepare)
        used = {row[0] for row in cur.execute(self.queries.render("used_tables"))}
        found: dict[str, StatsTables] = {}
        for name, queue_id in ids.items():
            tables = {p: f"q{queue_id}_p{p}" for p in range(1, self.limits.num_priorities + 1)}
            found[name] = (
                {p: (table,) for p, table in tables.items() if table in used},
                (_key_table_name(queue_id),) if queue_id in keyed else None,
            )
        return found

    def _keyed_queues(self, cur: Any, registered: set[int], ids: Iterable[int]) -> set[int]:
        """The queue ids among `ids` that have a unique-key table (queues created before
        unique keys may not). A key table lasts as long as its queue id (a queue created again
        gets a new one), so the answer is remembered and the schema, a scan of every table and
        index, is read only for ids not seen before."""
        with self._keyed_lock:
            seen = self._keyed_seen & registered  # forget deleted queues
            new = [queue_id for queue_id in ids if queue_id not in seen]
            if new:
                existing = {row[0] for row in cur.execute(self.queries.render("job_tables"))}
                seen |= {queue_id for queue_id in new if _key_table_name(queue_id) in existing}
            self._keyed_seen = seen
            return seen

    def _queue_id(self, cur: sqlite3.Cursor, queue: str) -> int:
        row = cur.execute(self.queries.render("queue_id"), {"name": queue}).fetchone()
        if row is None:
            raise QueueNotFound(queue)
        return row[0]

    def _ensure_fifo_index(self, queue: str) -> None:
        """One read of the queue's table names; the index made in one write the first time
        (a queue created again has new tables, so it gets the index again)."""
        done = self._fifo_indexed()
        with self._read() as cur:
            levels = range(1, self.limits.num_priorities + 1)
            missing = [t for t in (self._job_table(cur, queue, p) for p in levels) if t not in done]
        if not missing:
            return
        with self._write() as cur:
            for table in missing:
                index = (f"{table[0]}_fifo",)
                cur.execute(self.queries.render("create_fifo_index", table=table, index=index))
        done.update(missing)

    def _insert_jobs(self, cur: Any, sql: str, rows: list[dict[str, Any]]) -> list[int]:
        return insert_rows(cur, sql, rows)  # a few multi-row statements: few GIL hand-offs

    # ---- queues ----
    def create_queue(self, queue: str) -> None:
        with self._write() as cur:
            cur.execute(self.queries.render("queue_insert"), {"name": queue, "now": self.now_ms()})
            self._create_tables(cur, self._queue_id(cur, queue))

    def _create_tables(self, cur: sqlite3.Cursor, queue_id: int) -> None:
        self._create_ledger(cur, queue_id)
        keys = _key_table_name(queue_id)
        cur.execute(self.queries.render("create_key_table", table=(keys,)))
        cur.execute(
            self.queries.render("create_key_expiry_index", table=(keys,), index=(f"{keys}_exp",))
        )
        for priority in range(1, self.limits.num_priorities + 1):
            table = f"q{queue_id}_p{priority}"
            cur.execute(self.queries.render("create_job_table", table=(table,)))
            self._add_reserve_column(cur, table)
            for name, suffix in (
                ("create_dequeue_index", "ready"),
                ("create_updated_index", "updated"),
                ("create_reserve_index", "reserved"),
            ):
                cur.execute(self.queries.render(name, table=(table,), index=(f"{table}_{suffix}",)))

    def _add_reserve_column(self, cur: sqlite3.Cursor, table: str) -> None:
        """Give a job table made before the prefetching broker its reserved_until column (NULL
        in every row: no job is reserved). Runs under the write lock when the shard opens."""
        try:
            cur.execute(self.queries.render("reserve_probe", table=(table,)))
        except sqlite3.OperationalError:  # no such column
            cur.execute(self.queries.render("add_reserve_column", table=(table,)))

    def _create_ledger(self, cur: sqlite3.Cursor, queue_id: int) -> None:
        """The queue's ledger table and its one slot; a queue that held jobs before it had a
        ledger (created by an older version) opens its books with them as enqueued, so they
        balance from then on. Runs under the write lock (creation and migration)."""
        ledger = _ledger_table_name(queue_id)
        try:  # found through the schema's hash table (no scan of sqlite_master per queue)
            cur.execute(self.queries.render("table_probe", table=(ledger,)))
            return
        except sqlite3.OperationalError:
            pass  # no such table: this queue has no books yet
        jobs = [
            t for t in self._tables_of(cur, queue_id) if re.fullmatch(rf"q{queue_id}_p[0-9]+", t)
        ]
        present = sum(
            cur.execute(self.queries.render("count_all", table=(t,))).fetchone()[0] for t in jobs
        )
        cur.execute(self.queries.render("create_ledger_table", table=(ledger,)))
        seed = self.queries.render("ledger_seed", table=(ledger,))
        cur.execute(seed, {"slot": 0, "enqueued": present})

    def delete_queue(self, queue: str) -> None:
        """Hide the queue in one short transaction (its registry row moves to deleted_queues:
        calls answer QueueNotFound from then on, a create of the name gets a new id and fresh
        tables), then free its jobs in bounded steps (`_free`)."""
        with self._write() as cur:
            row = cur.execute(self.queries.render("queue_id"), {"name": queue}).fetchone()
            if row is None:
                return
            params = {"name": queue, "now": self.now_ms()}
            cur.execute(self.queries.render("queue_hide"), params)
            cur.execute(self.queries.render("queue_delete"), params)
        self._free(row[0])

    def finish_deletes(self) -> int:
        """Free the deleted queues a crash (or a failure) left half freed."""
        with self._read() as cur:
            ids = [qid for (qid,) in cur.execute(self.queries.render("deleted_list"))]
        with self._lock:
            ids = [qid for qid in ids if qid not in self._freeing]
        for queue_id in ids:
            self._free(queue_id)
        return len(ids)

    def _free(self, queue_id: int) -> None:
        """Free a hidden queue in bounded steps (deleting 800k jobs in one transaction held the
        write lock 12.9 s, stalling every queue of the shard): drop each table's indexes (a
        fraction of its size), delete its rows FREE_STEP at a time, one write transaction each
        with other writers let in between, then drop the emptied tables and forget the queue.
        The connection frees with secure_delete=FAST: deleted jobs are zeroed inside the pages
        SQLite writes anyway, but freed pages are not overwritten one by one (Debian's build
        defaults to a full overwrite, which was most of the 12.9 s). Every step is idempotent,
        so a second caller (the janitor, another process) only repeats a few of them."""
        with self._lock:
            self._freeing.add(queue_id)
        try:
            with self._connection() as conn:
                self._guarded(lambda: conn.execute("PRAGMA secure_delete = FAST"))
                try:
                    self._free_on(conn, queue_id)
                finally:
                    restore = f"PRAGMA secure_delete = {self._secure_delete}"
                    self._guarded(lambda: conn.execute(restore))
        finally:
            with self._lock:
                self._freeing.discard(queue_id)

    def _free_on(self, conn: sqlite3.Connection, queue_id: int) -> None:
        with self._transaction("BEGIN", conn) as cur:
            tables = self._tables_of(cur, queue_id)
        for table in tables:
            with self._free_step(conn) as cur:
                params = {"table": table}
                indexes = [n for (n,) in cur.execute(self.queries.render("table_indexes"), params)]
                for index in indexes:
                    cur.execute(self.queries.render("drop_index", index=(index,)))
            self._empty(conn, table)
        with self._free_step(conn) as cur:
            for table in self._tables_of(cur, queue_id):
                cur.execute(self.queries.render("drop_job_table", table=(table,)))
            cur.execute(self.queries.render("deleted_forget"), {"queue_id": queue_id})

    @contextmanager
    def _free_step(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Cursor]:
        """One write transaction of a stepped free on its own connection (for secure_delete),
        ordered with this process's group-committed writers by their lock."""
        with self._writer.exclusive(), self._transaction("BEGIN IMMEDIATE", conn) as cur:
            yield cur

    def _tables_of(self, cur: sqlite3.Cursor, queue_id: int) -> list[str]:
        own = re.compile(
            rf"q{queue_id}_p[0-9]+|{_key_table_name(queue_id)}|{_ledger_table_name(queue_id)}",
            re.ASCII,
        )
        return [
            name
            for (name,) in cur.execute(self.queries.render("job_tables"))
            if own.fullmatch(name)
        ]

    def _empty(self, conn: sqlite3.Connection, table: str) -> None:
        """Delete every row of a hidden queue's table, FREE_STEP rows per transaction."""
        sql = self.queries.render("delete_rows_step", table=(table,))

        def step(size: int) -> int:
            with self._free_step(conn) as cur:
                return cur.execute(sql, {"limit": size}).rowcount

        in_steps(None, step, pause=self._between_steps, size=FREE_STEP)

    def _between_steps(self, step_seconds: float) -> None:
        """Writers wait for SQLite's one write lock by polling it (busy_timeout sleeps of up to
        100 ms): pausing as long as the step took keeps a stepped delete to half the lock's
        time, so a waiting writer's next poll finds it free."""
        time.sleep(max(step_seconds, MIN_STEP_PAUSE))

    def queue_names(self) -> set[str]:
        with self._read() as cur:
            return {name for _, name in cur.execute(self.queries.render("queue_list"))}

    # ---- health ----
    def ping(self) -> None:
        with self._read() as cur:
            cur.execute("SELECT 1").fetchone()

    def durability_warnings(self) -> list[str]:
        if self.synchronous != "FULL":
            return [
                f"shard {self.name}: synchronous={self.synchronous} may lose the last "
                "committed jobs on a power failure (use FULL)"
            ]
        return []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._writer.close()


def _key_table_name(queue_id: int) -> str:
    """The unique-key table of a queue (queries/sqlite/keys.sql)."""
    return f"q{queue_id}_keys"


def _ledger_table_name(queue_id: int) -> str:
    """The ledger table of a queue (queries/common/ledger.sql); it goes with the queue's id,
    so a queue created again (a new id) starts with empty books."""
    return f"q{queue_id}_ledger"


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.rollback()
        except sqlite3.Error:
            pass  # the connection is being discarded with the original error
