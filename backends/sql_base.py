"""The shared SQL shard: every job primitive written once over named queries and dialect hooks.

SQLite (`backends/sqlite.py`) and MySQL (`backends/mysql.py`) differ in layout (a queue registry
vs a database per queue), transactions, clocks and a few SQL expressions, but not in the job
transitions. So this module owns the transitions (which query, which parameters, batching,
ordering, ack groups, body-filter paging) and a dialect subclass provides:

- `dialect`: placeholder style, identifier quoting and row-lock clause (`SQLDialect`), which
  also selects the query directory `backends/queries/<dialect.name>/`: it adds the queries
  `queries/common/` lacks, and replaces a common one only with a stated reason (`QueryBook`);
- `_write()` / `_read()`: a cursor inside one write transaction / one read snapshot;
- `_job_table(cur, queue, priority)`: the job table's identifier parts, or `QueueNotFound`;
- the clock: `_tx_now(cur)`, the shard clock in epoch ms read for a transaction (SQLite: the
  injected process clock; MySQL: `NOW(3)` read from the server, one round trip), and
  `_statement_clock()`, the parameters of a `statement_clock` expression where the dialect can
  compute `now` inside a statement (MySQL) so that a call that is one statement needs no clock
  read before it;
- `_insert_jobs(cur, sql, rows)`: run the batch insert and return the new ids in order, and
  `_one_insert_statement(rows)`: whether that is one statement (so it may use the statement
  clock);
- `_claim_lock(cur)`: the lock clause of the select a claim takes its rows from (default the
  dialect's `row_lock`; MySQL servers without SKIP LOCKED take a plain `FOR UPDATE`, so
  concurrent claimers wait for each other instead of skipping);
- the queue DDL primitives (`create_queue`, `delete_queue`, `queue_names`), `ping`, `close`.

Queries take named parameters (`:now`, `:id` ...) and receive one dict per row; a dialect query
may ignore parameters it does not need.

Reply budgets (`ByteBudget`, lookup's `max_body_bytes`): the selects return `LENGTH(body)` and
the body itself only up to an `:inline` size, chosen so that every inline body together fits the
budget whatever the lengths; the rows that fit are then chosen by length, and the bodies not yet
read are read for those rows only (`bodies_by_ids`). Small bodies, the common case, cost no
extra statement; no call reads more than twice its budget of bodies.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends import sql_fifo
from pinlater.storage.acks import AckGroup, AckOutcome, group_acks
from pinlater.storage.claims import (
    CLAIM_SOURCE_OFFSET,
    CLAIM_TOKEN_HEX_CHARS,
    reserved_claim_matches,
)
from pinlater.storage.contract import (
    DELETE_STEP,
    MAX_LEASES_LISTED,
    BodyFilter,
    ByteBudget,
    Shard,
)
from pinlater.storage.errors import QueueBusy, QueueNotFound, ShardError
from pinlater.storage.leases import (
    LEASE_FORGOTTEN_AFTER_MS,
    LEASES_FORGOTTEN_PER_CALL,
    check_lease,
)
from pinlater.storage.ledger import COUNTERS, LedgerBook, book_from, deltas
from pinlater.storage.models import (
    AGED_STATES,
    Ack,
    Checkpoint,
    ClaimMatch,
    DequeuedJob,
    Enqueued,
    JobRecord,
    JobState,
    NewJob,
    QueueStats,
    ReclaimCounts,
    ScanBound,
    new_dequeued_job,
)
from pinlater.storage.paging import filtered
from pinlater.storage.steps import in_steps
from pinlater.storage.unique_keys import first_of_key, keyed_results

QUERY_DIR = Path(__file__).parent / "queries"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+", re.ASCII)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_NAME_LINE = re.compile(r"--\s*name:\s*(\w+)\s*$")
_OVERRIDES_LINE = re.compile(r"--\s*overrides:\s*(\S.*?)\s*$")
#: id lists are padded to a power of two up to this size (few distinct statement texts)
MAX_ID_LIST = 1024
_STATS_TRIES = 3
#: key tables one statement of `queue_stats` reads (key_stats is one small select per table)
KEY_STATS_STEP = 50
#: `:inline` when no budget bounds a call: every body is read by the first select
_ALL_INLINE = 2**62
_NO_ID = -1  # padding id: no job has it
#: the claim a new job is stored with where the dialect reserves the claim's room at enqueue
#: (`SQLShard.claim_room`); never a real claim (those have ':' after the token) and read back
#: as no claim
CLAIM_ROOM = "-" * 64
_TOP = 2**63 - 1  # scan bound meaning "from the top"


@dataclass(frozen=True)
class SQLDialect:
    """How one SQL engine spells parameters, identifiers and row locks."""

    name: str
    #: format of a named parameter, e.g. ":{}" (sqlite3) or "%({})s" (pymysql)
    param_format: str
    #: identifier quote character: '"' (SQLite) or '`' (MySQL)
    quote_char: str
    #: what `{lock}` becomes in a select whose rows a claim takes next in the same transaction
    #: ("FOR UPDATE SKIP LOCKED" on MySQL; "" where the write transaction locks the database)
    row_lock: str = ""

    def param(self, name: str) -> str:
        return self.param_format.format(name)

    def quote(self, parts: Sequence[str]) -> str:
        """Quote a (possibly qualified) identifier; every part must be `[A-Za-z0-9_]+`."""
        for part in parts:
            if not _IDENTIFIER.fullmatch(part):
                raise ValueError(f"unsafe SQL identifier part {part!r}")
        q = self.quote_char
        return ".".join(f"{q}{part}{q}" for part in parts)


@dataclass(frozen=True)
class NamedQuery:
    name: str
    doc: str
    sql: str
    #: why a dialect's query replaces the common one of the same name (its `-- overrides:` line)
    overrides: str | None = None


def parse_named_queries(text: str, origin: str = "<sql>") -> dict[str, NamedQuery]:
    """Split a `.sql` file into queries: `-- name: x`, `-- what it does` lines (one of them may
    be `-- overrides: <reason>`), the SQL."""
    queries: dict[str, NamedQuery] = {}
    blocks = re.split(r"(?m)^(?=--\s*name:)", text)
    for block in blocks[1:]:
        lines = block.strip().splitlines()
        match = _NAME_LINE.fullmatch(lines[0].strip())
        if match is None or len(lines) < 3 or not lines[1].startswith("--"):
            raise ValueError(f"{origin}: malformed named query block {lines[0]!r}")
        name = match.group(1)
        if name in queries:
            raise ValueError(f"{origin}: query {name!r} defined twice")
        doc_end = 1
        while doc_end < len(lines) and lines[doc_end].startswith("--"):
            doc_end += 1
        doc, reason = _doc_and_reason(lines[1:doc_end])
        queries[name] = NamedQuery(name, doc, "\n".join(lines[doc_end:]).strip(), reason)
    return queries


def _doc_and_reason(comment_lines: Sequence[str]) -> tuple[str, str | None]:
    """A query's description, and the reason of its `-- overrides:` line if it has one."""
    reasons = [m.group(1) for m in map(_OVERRIDES_LINE.fullmatch, comment_lines) if m]
    doc = " ".join(line.lstrip("- ").strip() for line in comment_lines)
    return doc, reasons[0] if reasons else None


def _read_folder(folder: Path) -> dict[str, NamedQuery]:
    queries: dict[str, NamedQuery] = {}
    for path in sorted(folder.glob("*.sql")):
        for name, query in parse_named_queries(path.read_text(), str(path)).items():
            if name in queries:
                raise ValueError(f"{path}: query {name!r} is also defined in {folder}")
            queries[name] = query
    return queries


def _dialect_queries(root: Path, dialect: str) -> dict[str, NamedQuery]:
    """`common/` plus the dialect's folder. A dialect query may add a name common lacks, or
    replace a common one when it says why (`-- overrides: <reason>`); a silent replacement, or
    a reason for a query that replaces nothing, is an error at load."""
    common = _read_folder(root / "common")
    own = _read_folder(root / dialect)
    for name, query in own.items():
        if name in common and query.overrides is None:
            raise ValueError(
                f"queries/{dialect}: {name!r} replaces the common query of that name without "
                "an '-- overrides: <reason>' line"
            )
        if name not in common and query.overrides is not None:
            raise ValueError(
                f"queries/{dialect}: {name!r} says it overrides a common query, but common/ "
                "has no query of that name"
            )
    return {**common, **own}


class QueryBook:
    """The named queries of one dialect (`common/*.sql` plus `<dialect>/*.sql`), with parameters
    converted to the dialect's style once, at load time.

    Where the dialect has a `statement_clock` query (an expression for the shard clock), every
    query that reads `:now` also exists "clocked": `:now` replaced by that expression, so the
    statement reads the clock itself."""

    def __init__(self, dialect: SQLDialect, root: Path = QUERY_DIR):
        self.dialect = dialect
        raw = _dialect_queries(root, dialect.name)
        self.queries = {name: self._convert(query) for name, query in raw.items()}
        self.clocked: dict[str, NamedQuery] = {}
        if "statement_clock" in self.queries:
            clock = self.queries["statement_clock"].sql
            self.clocked = {name: self._convert(query, clock) for name, query in raw.items()}
        self.render = functools.lru_cache(maxsize=4096)(self._render)

    def _convert(self, query: NamedQuery, clock: str | None = None) -> NamedQuery:
        def param(match: re.Match) -> str:
            name = match.group(1)
            return clock if clock is not None and name == "now" else self.dialect.param(name)

        return dataclasses.replace(query, sql=_PARAM.sub(param, query.sql))

    def _render(
        self,
        name: str,
        ids: int = 0,
        clocked: bool = False,
        lock: bool | str = False,
        **identifiers: tuple[str, ...],
    ) -> str:
        """The ONE place identifiers reach SQL text: `{table}` etc. become quoted, validated
        identifiers; `{ids}` becomes `ids` bound parameters `id_0..`; `{lock}` the dialect's
        row lock when `lock` is True, or `lock` itself when it is a clause. `clocked`: the
        statement-clock text (see the class docstring)."""
        values = {key: self.dialect.quote(parts) for key, parts in identifiers.items()}
        if ids:
            values["ids"] = ", ".join(self.dialect.param(f"id_{i}") for i in range(ids))
        values["lock"] = self.dialect.row_lock if lock is True else (lock or "")
        return (self.clocked if clocked else self.queries)[name].sql.format(**values)

    def union_all(self, name: str, tables: Sequence[tuple[str, ...]]) -> str:
        """Query `name` once per table, joined with UNION ALL: in the i-th, `{table}` is that
        table (quoted, validated) and `{part}` the bound parameter `part_<i>`, so each row says
        which table it describes."""
        sql = self.queries[name].sql
        return " UNION ALL ".join(
            sql.format(table=self.dialect.quote(table), part=self.dialect.param(f"part_{i}"))
            for i, table in enumerate(tables)
        )


def id_chunks(ids: Sequence[Any], pad: Any = _NO_ID) -> Iterator[dict[str, Any]]:
    """Bind parameters for `{ids}` in chunks of at most MAX_ID_LIST, padded with `pad` (a
    value no row has, of the column's type) to a power of two (so a handful of statement texts
    serve every list length)."""
    for start in range(0, len(ids), MAX_ID_LIST):
        chunk = list(ids[start : start + MAX_ID_LIST])
        size = 1 << (len(chunk) - 1).bit_length()
        chunk += [pad] * (size - len(chunk))
        yield {f"id_{i}": local_id for i, local_id in enumerate(chunk)}


def truncate_status(status: str | None, cap: int) -> str:
    """A new job's status, limited to `cap` characters."""
    return (status or "")[:cap]


def _record(row: Sequence[Any], priority: int, body_size: int | None = None) -> JobRecord:
    """A record from a row of lookup_by_ids / scan_*; `body_size` defaults to the body's."""
    (local_id, state, allowed, remaining, status, created, run_after, updated, claim, body) = row
    if body is not None:
        body = bytes(body)
        body_size = len(body)
    return JobRecord(
        priority=priority,
        local_id=local_id,
        state=JobState(state),
        attempts_allowed=allowed,
        attempts_remaining=remaining,
        custom_status=status or "",
        created_at_ms=created,
        run_after_ms=run_after,
        updated_at_ms=updated,
        claim=None if claim == CLAIM_ROOM else claim,
        body=body,
        body_size=body_size,
    )


def _claim_params(match: ClaimMatch) -> dict[str, Any]:
    """The claim guard's parameters (`claim = :claim OR (:claim IS NULL AND source part ...)
    OR (reserved AND the token part ...)`)."""
    return {
        "claim": match.claim,
        "source": match.source,
        "source_pos": CLAIM_SOURCE_OFFSET + 1,
        "token_len": CLAIM_TOKEN_HEX_CHARS,
    }


#: per ack outcome, (statement, ledger counter) in the order they run: a failure ack is two
#: statements (attempts left or not), so the ledger counts retried and failed apart
_ACK_QUERIES = {
    AckOutcome.SUCCESS: (("ack_success", "succeeded"),),
    AckOutcome.FAILURE: (("ack_failure_final", "failed"), ("ack_failure_retry", "retried")),
}


class SQLShard(Shard):
    """Job primitives over named queries; see the module docstring for the dialect hooks."""

    dialect: SQLDialect
    queries: QueryBook
    #: tables one `queue_stats` statement reads (UNION ALL of one select per table): a dialect
    #: with round trips to save joins many (SQLite would allow 500 terms), an in-process one
    #: gains nothing and pays for big statements in prepare time and statement-cache memory
    stats_tables_per_statement: int = 1
    #: what enqueue stores as a new job's claim: None (NULL), or CLAIM_ROOM where a claim that
    #: grows the row costs the storage more than the room does (MySQL: see mysql.py)
    claim_room: str | None = None
    #: empty: a claim selects and locks its rows with one dequeue_select; else a claim reads
    #: `limit` times each of these candidates without locks, window after window, and locks
    #: only the rows it takes (`_claim_eligible`, the dialect's claim_select)
    claim_windows: tuple[int, ...] = ()

    # ---- dialect hooks ----
    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """A cursor inside one write transaction (committed on success, rolled back on error);
        storage errors are translated to ShardError / StorageFull."""

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Any]:
        """A cursor inside one consistent read snapshot."""

    @abc.abstractmethod
    def _job_table(self, cur: Any, queue: str, priority: int) -> tuple[str, ...]:
        """Identifier parts of the queue's table for `priority`; raise QueueNotFound."""

    def _require_queue(self, cur: Any, queue: str) -> None:
        """Raise QueueNotFound for a call that has nothing to do on a missing queue."""
        self._job_table(cur, queue, 1)

    @abc.abstractmethod
    def _key_table(self, cur: Any, queue: str) -> tuple[str, ...]:
        """Identifier parts of the queue's unique-key table; raise QueueNotFound (here or from
        the first statement on it) for a missing queue."""

    @abc.abstractmethod
    def _ledger_table(self, cur: Any, queue: str) -> tuple[str, ...]:
        """Identifier parts of the queue's ledger table (queries/common/ledger.sql); raise
        QueueNotFound (here or from the first statement on it) for a missing queue."""

    @abc.abstractmethod
    def _stats_tables(self, cur: Any, queues: Sequence[str]) -> dict[str, StatsTables]:
        """For each of `queues` that exists: its job tables that exist, by priority, and its
        unique-key table if it exists; read in a fixed number of round trips (the registry or
        the catalogue), never one per queue."""

    def _tx_now(self, cur: Any) -> int:
        """The shard clock for this transaction (override where the storage owns the clock)."""
        return self.now_ms()

    def _statement_clock(self) -> dict[str, Any] | None:
        """Parameters of the dialect's `statement_clock` query when a statement can read the
        shard clock itself; None (the default) binds `:now` from `_tx_now`, for a dialect whose
        clock costs no round trip anyway (SQLite's is this process's)."""
        return None

    @abc.abstractmethod
    def _insert_jobs(self, cur: Any, sql: str, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows with `sql` (enqueue_insert) and return their new local ids in order."""

    def _one_insert_statement(self, rows: list[dict[str, Any]]) -> bool:
        """Whether `_insert_jobs` stores `rows` with exactly one statement, known without a
        round trip (then an enqueue of one priority may use the statement clock)."""
        return False

    def _claim_lock(self, cur: Any) -> str:
        """The lock clause of the select a claim takes its rows from (see the module
        docstring)."""
        return self.dialect.row_lock

    # ---- helpers ----
    def _now_params(self, cur: Any, one_statement: bool) -> tuple[dict[str, Any], bool]:
        """How a call's statements read the clock: (parameters, clocked). A call of at most one
        statement reads it inside that statement where the dialect can (no round trip of its
        own); a call of several reads it once first, so all its statements agree on `now`."""
        clock = self._statement_clock()
        if clock is not None and one_statement:
            return clock, True
        return {"now": self._tx_now(cur)}, False

    def _sql(
        self,
        name: str,
        table: tuple[str, ...],
        ids: int = 0,
        clocked: bool = False,
        lock: str = "",
    ) -> str:
        return self.queries.render(name, ids=ids, clocked=clocked, lock=lock, table=table)

    def _book(self, cur: Any, queue: str, **changes: int) -> None:
        """Add `changes` to the queue's ledger in the caller's transaction, as its last
        statement (nothing when every change is 0): one UPDATE of the ledger's row (SQLite's
        one writer holds the database anyway), or one journal row where writers lock rows
        (MySQL overrides ledger_add). A ledger without its row yet gets it first."""
        if not any(changes.values()):
            return
        table = self._ledger_table(cur, queue)
        params = {**deltas(**changes), "slot": 0}
        if self._run(cur, "ledger_add", table, params).rowcount == 0:
            self._run(cur, "ledger_seed", table, {"slot": 0, "enqueued": 0})
            self._run(cur, "ledger_add", table, params)

    def ledger(self, queue: str) -> LedgerBook:
        """ledger_read and state_counts of every priority in one read snapshot."""
        states: dict[int, int] = defaultdict(int)
        with self._read() as cur:
            row = self._run(cur, "ledger_read", self._ledger_table(cur, queue), {}).fetchone()
            for priority in range(1, self.limits.num_priorities + 1):
                table = self._job_table(cur, queue, priority)
                for state, count in self._run(cur, "state_counts", table, {}).fetchall():
                    states[int(state)] += int(count)
        return book_from(dict(zip(COUNTERS, row or (), strict=False)), states)

    def _run(
        self,
        cur: Any,
        name: str,
        table: tuple[str, ...],
        params: Mapping[str, Any],
        clocked: bool = False,
        lock: str = "",
    ):
        cur.execute(self._sql(name, table, clocked=clocked, lock=lock), params)
        return cur

    def _by_ids(
        self,
        cur: Any,
        name: str,
        table: tuple[str, ...],
        ids: Sequence[int],
        params: Mapping[str, Any],
        clocked: bool = False,
    ) -> tuple[int, list]:
        """Run an `{ids}` query over `ids` in chunks; return (rows changed, rows fetched)."""
        changed, rows = 0, []
        for id_params in id_chunks(ids):
            sql = self._sql(name, table, ids=len(id_params), clocked=clocked)
            cur.execute(sql, {**params, **id_params})
            if cur.description is not None:
                rows.extend(cur.fetchall())
            else:
                changed += max(cur.rowcount, 0)
        return changed, rows

    # ---- jobs ----
    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[int]:
        """One insert per priority; a batch that is one statement reads the clock inside it."""
        rows = self._job_rows(jobs)
        one = not jobs or (len(rows) == 1 and self._one_insert_statement(rows[jobs[0].priority]))
        with self._write() as cur:
            clock, clocked = self._now_params(cur, one)
            if not jobs:
                self._require_queue(cur, queue)
            ids = self._insert_rows(cur, queue, jobs, rows, clock, clocked)
            self._book(cur, queue, enqueued=len(ids))
            return ids

    def enqueue_keyed(
        self, queue: str, jobs: Sequence[NewJob], unique_window_ms: int
    ) -> list[Enqueued]:
        """key_claim for the batch's keys (sorted: one lock order), key_holders to learn which
        were held, the jobs to store inserted as by `enqueue`, key_bind for the keys taken; one
        transaction, every statement on one clock reading."""
        firsts = first_of_key(jobs)
        with self._write() as cur:
            now = self._tx_now(cur)
            table = self._key_table(cur, queue)
            claims = {
                job.unique_key: {
                    "ukey": job.unique_key,
                    "priority": job.priority,
                    "local_id": None,
                    "now": now,
                    "expires": now + unique_window_ms,
                }
                for i, job in enumerate(jobs)
                if job.unique_key is not None and firsts[i] == i
            }
            keys = sorted(claims)
            if keys:
                sql = self.queries.render("key_claim", table=table)
                cur.executemany(sql, [claims[key] for key in keys])
            held = self._key_holders(cur, table, keys)
            stored = [
                i for i, job in enumerate(jobs) if firsts[i] == i and job.unique_key not in held
            ]
            batch = [jobs[i] for i in stored]
            ids = self._insert_rows(cur, queue, batch, self._job_rows(batch), {"now": now}, False)
            where = dict(zip(stored, ids, strict=True))
            binds = [
                {**claims[key], "local_id": where[i]}
                for i in stored
                if (key := jobs[i].unique_key) is not None
            ]
            if binds:
                cur.executemany(self.queries.render("key_bind", table=table), binds)
            self._book(cur, queue, enqueued=len(ids), deduplicated=len(jobs) - len(ids))
        return keyed_results(jobs, firsts, held, where)

    def _key_holders(
        self, cur: Any, table: tuple[str, ...], keys: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        """key -> (priority, local_id) of the keys held by a job stored before this transaction
        (a record this transaction claimed has no local id yet)."""
        held: dict[str, tuple[int, int]] = {}
        for params in id_chunks(keys, pad=""):
            sql = self.queries.render("key_holders", ids=len(params), table=table)
            cur.execute(sql, params)
            for ukey, priority, local_id in cur.fetchall():
                if local_id is not None:
                    key = ukey if isinstance(ukey, str) else bytes(ukey).decode("ascii")
                    held[key] = (int(priority), int(local_id))
        return held

    def _job_rows(self, jobs: Sequence[NewJob]) -> dict[int, list[dict[str, Any]]]:
        """enqueue_insert's parameter rows per priority, in the jobs' order."""
        cap = self.limits.status_cap
        rows: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for job in jobs:
            rows[job.priority].append(
                {
                    "attempts": job.attempts_allowed,
                    "status": truncate_status(job.custom_status, cap),
                    "run_after": job.run_after_ms,  # None: now (the query's COALESCE)
                    "body": bytes(job.body),
                    "unclaimed": self.claim_room,
                }
            )
        return rows

    def _insert_rows(
        self,
        cur: Any,
        queue: str,
        jobs: Sequence[NewJob],
        rows: dict[int, list[dict[str, Any]]],
        clock: dict[str, Any],
        clocked: bool,
    ) -> list[int]:
        """Insert `rows` (from `_job_rows(jobs)`), one statement per priority; the new ids in
        the jobs' order."""
        ids: list[int] = [0] * len(jobs)
        indexes: dict[int, list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            indexes[job.priority].append(index)
        for priority, batch in rows.items():
            table = self._job_table(cur, queue, priority)
            for row in batch:
                row.update(clock)
            sql = self._sql("enqueue_insert", table, clocked=clocked)
            new_ids = self._insert_jobs(cur, sql, batch)
            for index, local_id in zip(indexes[priority], new_ids, strict=True):
                ids[index] = local_id
        return ids

    def dequeue(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        return self._take(queue, priority, limit, claim, budget, None)

    def prefetch(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        hold_ms: int,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """A dequeue whose claim_by_ids sets the reservation deadline: the same statements."""
        return self._take(queue, priority, limit, claim, budget, max(int(hold_ms), 0))

    def _take(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str | None,
        budget: ByteBudget | None,
        hold_ms: int | None,
    ) -> list[DequeuedJob]:
        """dequeue (hold_ms None) and prefetch (reserved for hold_ms)."""
        with self._read() if claim is None else self._write() as cur:
            table = self._job_table(cur, queue, priority)
            if claim is None:
                rows = _fitting(self._eligible(cur, table, limit, budget, ""), budget)
            else:
                rows = self._claim_eligible(cur, table, limit, budget, claim, hold_ms)
            rows = self._with_bodies(cur, table, rows)
            if claim is not None and hold_ms is None:  # a reservation counts when handed out
                self._book(cur, queue, dequeued=len(rows))
        return [new_dequeued_job(priority, r[0], bytes(r[1]), r[3], r[4], claim) for r in rows]

    def hand_out(
        self,
        queue: str,
        priority: int,
        jobs: Sequence[tuple[int, str]],
        claim: str | None = None,
    ) -> int:
        """One hand_out_by_ids per prefetch claim (usually one: one statement, clocked)."""
        return self._end_reservations(queue, priority, jobs, "hand_out_by_ids", claim)

    def release(self, queue: str, priority: int, jobs: Sequence[tuple[int, str]]) -> int:
        """One release_by_ids per prefetch claim (usually one: one statement, clocked)."""
        return self._end_reservations(queue, priority, jobs, "release_by_ids", None)

    def _end_reservations(
        self,
        queue: str,
        priority: int,
        jobs: Sequence[tuple[int, str]],
        name: str,
        new_claim: str | None,
    ) -> int:
        by_claim: dict[str, list[int]] = defaultdict(list)
        for local_id, held in jobs:
            by_claim[held].append(local_id)
        one = len(by_claim) <= 1 and len(jobs) <= MAX_ID_LIST
        changed = 0
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            clock, clocked = self._now_params(cur, one)
            for held, ids in by_claim.items():
                params = {**clock, "claim": held, "new_claim": new_claim}
                changed += self._by_ids(cur, name, table, ids, params, clocked)[0]
            if not jobs:
                self._require_queue(cur, queue)
            if name == "hand_out_by_ids" and changed:
                self._book(cur, queue, dequeued=changed)  # S-prefetch: counted at hand-out
        return changed

    def _reserved_matching(
        self, cur: Any, table: tuple[str, ...], matches: Mapping[int, ClaimMatch]
    ) -> int:
        """How many of the jobs (local id -> the claim an ack or checkpoint must hold) are
        reserved under a matching claim: the ack or checkpoint hands them out, so they count
        as dequeued (S-reserved-ack)."""
        rows = self._by_ids(cur, "reserved_by_ids", table, list(matches), {})[1]
        return sum(
            1
            for local_id, held in rows
            if reserved_claim_matches(held, matches[local_id].claim, matches[local_id].source)
        )

    def dequeue_fifo(
        self,
        queue: str,
        limit: int,
        in_flight_cap: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        return sql_fifo.dequeue_fifo(self, queue, limit, in_flight_cap, claim, budget)

    def _fifo_transaction(self, queue: str) -> AbstractContextManager[Any]:
        """The write transaction of a FIFO dequeue, atomic against every other one of `queue`
        (backends/sql_fifo.py); the default suits a storage with one writer at a time."""
        return self._write()

    def _ensure_fifo_index(self, queue: str) -> None:
        """Give the queue's job tables the FIFO index (queries `create_fifo_index`) unless this
        shard object did already (backends/sql_fifo.py); the dialect does it."""

    def _fifo_indexed(self) -> set:
        """What `_ensure_fifo_index` did already (tables or databases), made on first use."""
        done = self.__dict__.get("_fifo_done")
        if done is None:
            done = self.__dict__["_fifo_done"] = set()
        return done

    def _fifo_row_lock(self) -> str:
        """The lock clause of a FIFO dequeue's head select (none where the transaction holds
        the database)."""
        return ""

    def next_due_ms(self, queue: str) -> int | None:
        """One read snapshot: the shard clock, then `next_due` per priority table."""
        earliest = None
        with self._read() as cur:
            now = self._tx_now(cur)
            self._require_queue(cur, queue)
            for priority in range(1, self.limits.num_priorities + 1):
                table = self._job_table(cur, queue, priority)
                row = self._run(cur, "next_due", table, {}).fetchone()
                if row is not None and row[0] is not None:
                    due = int(row[0])
                    earliest = due if earliest is None else min(earliest, due)
        return None if earliest is None else max(0, earliest - now)

    def _eligible(
        self,
        cur: Any,
        table: tuple[str, ...],
        limit: int,
        budget: ByteBudget | None,
        lock: str,
        query: str = "dequeue_select",
        **params: Any,
    ) -> list:
        """dequeue_select (or `query`, of the same columns, with `params`): (local_id, body or
        None when longer than the inline size, body length, allowed, remaining, now) of up to
        `limit` eligible jobs in dequeue order, under the lock clause `lock` (a claim's rows)."""
        clock, clocked = self._now_params(cur, True)
        params.update(clock, limit=limit, inline=_inline_size(limit, budget))
        return self._run(cur, query, table, params, clocked, lock).fetchall()

    def _claim_eligible(
        self,
        cur: Any,
        table: tuple[str, ...],
        limit: int,
        budget: ByteBudget | None,
        claim: str,
        hold_ms: int | None,
    ) -> Sequence:
        """Claim (`_claim`, reserved for `hold_ms` if given) up to `limit` eligible jobs that
        fit `budget`; the rows claimed. Without
        `claim_windows`, one dequeue_select under the claim lock; else one claim_select per
        window (candidates read without locks, only the rows taken locked, by primary key)
        until the claim is full or cut by the budget: a later, wider window reaches past the
        candidates other dequeuers hold (each window's rows in dequeue order)."""
        lock = self._claim_lock(cur)
        if not self.claim_windows:
            rows = _fitting(self._eligible(cur, table, limit, budget, lock), budget)
            self._claim(cur, table, rows, claim, hold_ms)
            return rows
        taken: list = []
        left = budget
        for window in self.claim_windows:
            want = limit - len(taken)
            found = self._eligible(
                cur, table, want, left, lock, "claim_select", candidates=limit * window
            )
            rows = _fitting(found, left)
            self._claim(cur, table, rows, claim, hold_ms)
            taken += rows
            if len(rows) < len(found) or len(taken) >= limit:
                break
            if left is not None:
                left = left.spent(len(rows), sum(r[2] for r in rows))
        return taken

    def _claim(
        self,
        cur: Any,
        table: tuple[str, ...],
        rows: Sequence,
        claim: str,
        hold_ms: int | None = None,
    ) -> None:
        """Claim the selected (locked) `rows` for `claim`, reserved for `hold_ms` if given."""
        if not rows:
            return
        now = rows[0][5]  # the clock the select judged by
        until = None if hold_ms is None else now + hold_ms
        params = {"now": now, "claim": claim, "until": until}
        changed = self._by_ids(cur, "claim_by_ids", table, [r[0] for r in rows], params)[0]
        if changed != len(rows):  # the rows are ours (locked): cannot happen, never hide it
            raise ShardError(self.name, f"claimed {changed} of {len(rows)} selected jobs")

    def _with_bodies(self, cur: Any, table: tuple[str, ...], rows: Sequence) -> Sequence:
        """`rows` (local_id, body or None, ...) with every body: those the first select left
        out (longer than its inline size) read now, for these rows only."""
        missing = [row[0] for row in rows if row[1] is None]
        if not missing:
            return rows
        bodies = dict(self._by_ids(cur, "bodies_by_ids", table, missing, {})[1])
        return [(row[0], bodies.get(row[0], row[1]), *row[2:]) for row in rows]

    def ack(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack]) -> int:
        """One statement per ack group (pinlater/storage/acks.py); the usual request (a worker
        acking the batch it dequeued) is one group, one statement, reading the clock inside it
        where the dialect can."""
        groups = group_acks(succeeded, failed)
        one = not groups or (len(groups) == 1 and len(groups[0].local_ids) <= MAX_ID_LIST)
        one = one and all(g.outcome is AckOutcome.SUCCESS for g in groups)
        counts: dict[str, int] = defaultdict(int)
        with self._write() as cur:
            clock, clocked = self._now_params(cur, one)
            if not groups:
                self._require_queue(cur, queue)
            for group in groups:
                table = self._job_table(cur, queue, group.priority)
                params = {**self._ack_params(group), **clock}
                matches = dict.fromkeys(group.local_ids, group.match)
                counts["dequeued"] += self._reserved_matching(cur, table, matches)
                for name, counter in _ACK_QUERIES[group.outcome]:
                    changed = self._by_ids(cur, name, table, group.local_ids, params, clocked)[0]
                    counts[counter] += changed
            self._book(cur, queue, **counts)
        return sum(n for name, n in counts.items() if name != "dequeued")

    def _ack_params(self, group: AckGroup) -> dict[str, Any]:
        """The parameters of one ack group's statement, besides the clock and the ids."""
        return {
            "status": group.append_status,
            "cap": self.limits.status_cap,
            "delay": group.retry_delay_ms,
            **_claim_params(group.match),
        }

    def checkpoint(self, queue: str, checkpoints: Sequence[Checkpoint]) -> int:
        cap = self.limits.status_cap
        applied = 0
        with self._write() as cur:
            now = self._tx_now(cur)
            if not checkpoints:
                self._require_queue(cur, queue)
            for priority, group in _by_priority(checkpoints).items():
                table = self._job_table(cur, queue, priority)
                rows = [
                    {
                        "id": c.local_id,
                        "now": now,
                        "cap": cap,
                        "state": int(
                            JobState.PENDING if c.move_to_pending else JobState.IN_PROGRESS
                        ),
                        "run_after": c.run_after_ms,
                        "body": None if c.new_body is None else bytes(c.new_body),
                        "attempts": c.attempts_allowed,
                        "status": c.prepend_status or "",
                        **_claim_params(c.match),
                    }
                    for c in group
                ]
                matches = {c.local_id: c.match for c in group}
                handed = self._reserved_matching(cur, table, matches)
                cur.executemany(self._sql("checkpoint", table), rows)
                applied += max(cur.rowcount, 0)
                if handed:
                    self._book(cur, queue, dequeued=handed)
        return applied

    def lookup(
        self,
        queue: str,
        refs: Sequence[tuple[int, int]],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord]:
        """One select per priority; bodies longer than the inline size (see the module
        docstring) are read afterwards, and only when all the bodies fit `max_body_bytes`."""
        budget = None
        if include_body and max_body_bytes is not None:
            budget = ByteBudget(max_body_bytes)
        params = {"with_body": int(include_body), "inline": _inline_size(len(refs), budget)}
        with self._read() as cur:
            tables, rows = self._lookup_rows(cur, queue, refs, params)
            fits = budget is None or budget.fitting([r[10] for r in rows.values()]) == len(rows)
            if include_body and fits:
                rows.update(self._lookup_bodies(cur, tables, rows))
        records = {
            ref: _record((*row[:9], row[9] if fits else None), ref[0], row[10])
            for ref, row in rows.items()
        }
        return [records[ref] for ref in dict.fromkeys(refs) if ref in records]

    def _lookup_rows(
        self, cur: Any, queue: str, refs: Sequence[tuple[int, int]], params: Mapping[str, Any]
    ) -> tuple[dict[int, tuple[str, ...]], dict[tuple[int, int], Sequence]]:
        """(the job table of each priority asked for, the lookup_by_ids row of each job found
        keyed by (priority, local_id))."""
        by_priority: dict[int, list[int]] = defaultdict(list)
        for priority, local_id in refs:
            by_priority[priority].append(local_id)
        if not refs:
            self._require_queue(cur, queue)
        tables = {p: self._job_table(cur, queue, p) for p in by_priority}
        rows: dict[tuple[int, int], Sequence] = {}
        for priority, ids in by_priority.items():
            found = self._by_ids(cur, "lookup_by_ids", tables[priority], ids, params)[1]
            rows.update(((priority, row[0]), row) for row in found)
        return tables, rows

    def _lookup_bodies(
        self, cur: Any, tables: Mapping[int, tuple[str, ...]], rows: Mapping[tuple, Sequence]
    ) -> Iterator[tuple[tuple[int, int], tuple]]:
        """The lookup rows whose body the select left out, with their body."""
        missing: dict[int, list[int]] = defaultdict(list)
        for (priority, local_id), row in rows.items():
            if row[9] is None:
                missing[priority].append(local_id)
        for priority, ids in missing.items():
            for local_id, body in self._by_ids(cur, "bodies_by_ids", tables[priority], ids, {})[1]:
                row = rows[(priority, local_id)]
                yield (priority, local_id), (*row[:9], body, row[10])

    def count(
        self,
        queue: str,
        state: JobState,
        priorities: Sequence[int],
        future: bool,
        cap: int,
        body_filter: BodyFilter | None,
    ) -> int:
        total = 0
        with self._read() as cur:
            now = self._tx_now(cur)
            self._require_queue(cur, queue)
            for priority in priorities:
                if total >= cap:
                    break
                table = self._job_table(cur, queue, priority)
                if body_filter is None:
                    total += self._count_shown(cur, table, state, future, now, cap - total)
                else:
                    window = _ScanWindow(table, priority, state, future, now)
                    matches = self._matching(cur, window, None, body_filter, cap - total)
                    total += sum(1 for _ in matches)
        return min(total, cap)

    def _count_shown(
        self, cur: Any, table: tuple[str, ...], state: JobState, future: bool, now: int, cap: int
    ) -> int:
        """Jobs of one table in `state` as reads show them: a reserved job (IN_PROGRESS in
        storage) counts as PENDING (S-prefetch), up to `cap`."""
        name = "count_future" if future else "count_current"
        total = 0
        for stored, reserved in _SHOWN_AS[state]:
            params = {"state": int(stored), "reserved": reserved, "now": now, "cap": cap - total}
            total += self._run(cur, name, table, params).fetchone()[0]
        return min(total, cap)

    def queue_stats(self, queues: Sequence[str], cap: int) -> dict[str, QueueStats]:
        for attempt in range(_STATS_TRIES):
            try:
                return self._queue_stats(queues, cap)
            except (QueueNotFound, QueueBusy):
                # a queue deleted between the catalogue read and its tables' (MySQL reads no
                # DDL in its snapshot): the next try lists the queues again
                if attempt + 1 == _STATS_TRIES:
                    raise
        raise AssertionError("unreachable")

    def _queue_stats(self, queues: Sequence[str], cap: int) -> dict[str, QueueStats]:
        with self._read() as cur:
            now = self._tx_now(cur)
            layout = self._stats_tables(cur, queues)
            zeros = _zero_counts(self.limits.num_priorities)  # a table not read: empty
            stats = {
                q: QueueStats(now_ms=now, counts=dict(zeros), oldest_update={}) for q in layout
            }
            job_tables = [(q, p, t) for q, (by_p, _) in layout.items() for p, t in by_p.items()]
            query, params = ("table_stats", {"now": now, "cap": cap}) if cap else ("table_ages", {})
            for chunk, rows in self._union_rows(cur, query, job_tables, params):
                for row in rows:
                    queue, priority, _ = chunk[row[0]]
                    values = row[1:] if cap else (0,) * 8 + tuple(row[1:]) + (0, 0)  # ages
                    _add_table_stats(stats[queue], priority, values, cap)
            key_tables = [(q, t) for q, (_, t) in layout.items() if t is not None]
            firsts = {
                chunk[row[0]][0]: row[1]
                for chunk, rows in self._union_rows(
                    cur, "key_stats", key_tables, {}, KEY_STATS_STEP
                )
                for row in rows
            }
        return {
            q: dataclasses.replace(s, first_key_expiry=firsts[q]) if firsts.get(q) else s
            for q, s in stats.items()
        }

    def _union_rows(
        self,
        cur: Any,
        name: str,
        parts: Sequence[tuple],
        params: Mapping[str, Any],
        step: int | None = None,
    ) -> Iterator[tuple[Sequence[tuple], list]]:
        """(chunk, its rows) of query `name` over the tables that end each tuple of `parts`,
        `step` (default `stats_tables_per_statement`) tables per statement; a row's first
        column is its index in the chunk."""
        step = step or self.stats_tables_per_statement
        for start in range(0, len(parts), step):
            chunk = parts[start : start + step]
            sql = self.queries.union_all(name, [part[-1] for part in chunk])
            numbered = {f"part_{i}": i for i in range(len(chunk))}
            cur.execute(sql, {**params, **numbered})
            yield chunk, cur.fetchall()

    def scan(
        self,
        queue: str,
        state: JobState,
        bounds: Mapping[int, ScanBound | None],
        future: bool,
        limit: int,
        body_filter: BodyFilter | None,
    ) -> list[JobRecord]:
        records: list[JobRecord] = []
        with self._read() as cur:
            now = self._tx_now(cur)
            if not bounds:
                self._require_queue(cur, queue)
            for priority, bound in bounds.items():
                window = _ScanWindow(
                    self._job_table(cur, queue, priority), priority, state, future, now
                )
                if body_filter is None:
                    rows = self._scan_page(cur, window, bound, limit, with_body=False)
                    records.extend(_record(row, priority) for row in rows)
                else:
                    matches = self._matching(cur, window, bound, body_filter, limit)
                    records.extend(_without_body(r) for r in matches)
        return records

    def _scan_page(
        self, cur: Any, window: _ScanWindow, bound: ScanBound | None, size: int, with_body: bool
    ) -> list:
        """Up to `size` rows of the window strictly after `bound` (None: from the top) in
        (run_after DESC, local_id DESC) order; bodies only `with_body`."""
        ra, last = (_TOP, _TOP) if bound is None else (bound.run_after_ms, bound.local_id)
        params = {"now": window.now, "ra": ra, "id": last, "limit": size}
        params["with_body"] = int(with_body)
        name = "scan_future" if window.future else "scan_current"
        rows: list = []
        for stored, reserved in _SHOWN_AS[window.state]:  # PENDING: two pages, merged
            found = self._run(
                cur, name, window.table, {**params, "state": int(stored), "reserved": reserved}
            )
            rows.extend(found.fetchall())
        rows.sort(key=lambda row: (row[6], row[0]), reverse=True)
        return rows[:size]

    def _matching(
        self,
        cur: Any,
        window: _ScanWindow,
        bound: ScanBound | None,
        body_filter: BodyFilter,
        limit: int,
    ) -> Iterator[JobRecord]:
        """Up to `limit` records of the window after `bound` whose body passes the filter."""

        def read_page(after: ScanBound | None, size: int):
            rows = self._scan_page(cur, window, after or bound, size, with_body=True)
            last = ScanBound(rows[-1][6], rows[-1][0]) if len(rows) == size else None
            return [_record(row, window.priority) for row in rows], last

        return filtered(read_page, _body, body_filter, limit)

    def retry_failed(
        self,
        queue: str,
        priority: int,
        attempts_remaining: int,
        run_after_ms: int | None,
        limit: int,
    ) -> int:
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            params = {
                "remaining": attempts_remaining,
                "run_after": run_after_ms,
                "now": self._tx_now(cur),
                "limit": limit,
            }
            return max(self._run(cur, "retry_failed", table, params).rowcount, 0)

    def delete_jobs(
        self, queue: str, state: JobState, priority: int, limit: int, body_filter: BodyFilter | None
    ) -> int:
        if body_filter is None:
            return self._removing_steps(
                queue,
                priority,
                limit,
                functools.partial(self._delete_step, state),
                "deleted",
            )
        # The filter runs in Python over a read snapshot, outside the write lock (a regex scan
        # must not stall every dequeue); the deletes are guarded by the state, so a job that
        # moved on meanwhile is left alone.
        with self._read() as cur:
            table = self._job_table(cur, queue, priority)
            ids = self._matching_ids(cur, table, state, body_filter, limit)
        if not ids:
            return 0
        chunks = iter(range(0, len(ids), DELETE_STEP))

        def by_ids(cur: Any, table: tuple[str, ...], size: int) -> int:
            start = next(chunks)
            chunk = ids[start : start + DELETE_STEP]
            return self._by_ids(cur, "delete_by_ids", table, chunk, {"state": int(state)})[0]

        return self._removing_steps(queue, priority, len(ids), by_ids, "deleted", until_short=False)

    def _delete_step(self, state: JobState, cur: Any, table: tuple[str, ...], size: int) -> int:
        """One step of an unfiltered delete: PENDING takes the reserved jobs first (they read
        as PENDING, S-prefetch), then jobs stored in `state`."""
        deleted = 0
        if state is JobState.PENDING:
            found = self._run(cur, "delete_reserved", table, {"limit": size})
            deleted = max(found.rowcount, 0)
        params = {"state": int(state), "limit": size - deleted}
        if deleted < size:
            deleted += max(self._run(cur, "delete_by_state", table, params).rowcount, 0)
        return deleted

    def _write_steps(
        self,
        queue: str,
        priority: int,
        limit: int,
        step: Callable[[Any, tuple[str, ...], int], int],
        until_short: bool = True,
    ) -> int:
        """`steps.in_steps` with each `step(cur, table, size)` in its own write transaction on
        the queue's table for `priority`, and `_between_steps` in between."""

        def in_transaction(size: int) -> int:
            with self._write() as cur:
                return step(cur, self._job_table(cur, queue, priority), size)

        return in_steps(limit, in_transaction, until_short=until_short, pause=self._between_steps)

    def _removing_steps(
        self,
        queue: str,
        priority: int,
        limit: int,
        step: Callable[[Any, tuple[str, ...], int], int],
        counter: str,
        until_short: bool = True,
    ) -> int:
        """`_write_steps` for steps that remove jobs: each step's count goes to the ledger's
        `counter` in the step's own transaction."""

        def booked(cur: Any, table: tuple[str, ...], size: int) -> int:
            removed = step(cur, table, size)
            self._book(cur, queue, **{counter: removed})
            return removed

        return self._write_steps(queue, priority, limit, booked, until_short)

    def _between_steps(self, step_seconds: float) -> None:
        """Called between the write transactions of a stepped delete, after one that took
        `step_seconds`: where writers queue for one lock (SQLite), give them a turn."""

    def _matching_ids(
        self, cur: Any, table: tuple[str, ...], state: JobState, body_filter: BodyFilter, limit: int
    ) -> list[int]:
        """Ids of up to `limit` jobs in `state` whose body passes, oldest run_after first."""

        def read_page(after: tuple[int, int] | None, size: int):
            ra, last = (-_TOP - 1, 0) if after is None else after
            params = {"state": int(state), "ra": ra, "id": last, "limit": size}
            rows = self._run(cur, "page_by_state", table, params).fetchall()
            return rows, (rows[-1][1], rows[-1][0]) if len(rows) == size else None

        reserved: list = []
        if state is JobState.PENDING:  # reserved jobs read as PENDING (S-prefetch): first
            reserved = self._run(cur, "reserved_bodies", table, {}).fetchall()
            reserved = [row[0] for row in reserved if body_filter(bytes(row[1]))][:limit]
        found = filtered(read_page, lambda row: bytes(row[2]), body_filter, limit - len(reserved))
        return reserved + [row[0] for row in found]

    # ---- janitor ----
    def reclaim_expired(
        self, queue: str, priority: int, claim_timeout_ms: int, limit: int
    ) -> ReclaimCounts:
        """Expired reservations first (reclaim_reserved), then expired claims (reclaim_fail,
        reclaim_retry), `limit` jobs in all, in one transaction; only the claims are booked."""
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            now = self._tx_now(cur)
            params = {"now": now, "cutoff": now - claim_timeout_ms, "limit": limit}
            released = max(self._run(cur, "reclaim_reserved", table, params).rowcount, 0)
            failed = retried = 0
            if released < limit:
                params["limit"] = limit - released
                failed = max(self._run(cur, "reclaim_fail", table, params).rowcount, 0)
            if released + failed < limit:
                params["limit"] = limit - released - failed
                retried = max(self._run(cur, "reclaim_retry", table, params).rowcount, 0)
            self._book(cur, queue, reclaimed=failed + retried)
        return ReclaimCounts(retried=retried, failed=failed, released=released)

    def purge(self, queue: str, priority: int, state: JobState, ttl_ms: int, limit: int) -> int:
        def step(cur: Any, table: tuple[str, ...], size: int) -> int:
            params = {"state": int(state), "cutoff": self._tx_now(cur) - ttl_ms, "limit": size}
            return max(self._run(cur, "purge", table, params).rowcount, 0)

        return self._removing_steps(queue, priority, limit, step, "purged")

    # ---- runtime queue settings ----
    #: identifier parts of the one-row settings table (queries/common/settings.sql)
    settings_table: tuple[str, ...] = ("pinlater_settings",)

    def _ensure_settings(self) -> None:
        """Make sure the settings table and its row exist (SQLite creates them when it opens
        the file; MySQL on first use)."""

    def read_settings(self, known_version: int) -> tuple[int, bytes | None]:
        self._ensure_settings()
        with self._read() as cur:
            row = self._run(
                cur, "settings_read", self.settings_table, {"known": known_version}
            ).fetchone()
        if row is None:  # a table without its row: nothing stored
            return 0, (None if known_version == 0 else b"")
        version, document = row
        return int(version), None if document is None else bytes(document)

    def write_settings(self, expected_version: int, document: bytes) -> int | None:
        self._ensure_settings()
        with self._write() as cur:
            params = {"expected": expected_version, "document": document}
            changed = self._run(cur, "settings_update", self.settings_table, params).rowcount
        return expected_version + 1 if changed == 1 else None

    # ---- leases ----
    #: identifier parts of the shard's lease table (queries/common/leases.sql)
    lease_table: tuple[str, ...] = ("pinlater_leases",)

    def _ensure_leases(self) -> None:
        """Make sure the lease table exists (SQLite creates it when it opens the file; MySQL
        on first use)."""

    def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """lease_take then lease_owner, one transaction on one clock reading."""
        check_lease(name, owner, ttl_ms)
        self._ensure_leases()
        with self._write() as cur:
            now = self._tx_now(cur)
            params = {"name": name, "owner": owner, "now": now, "expires": now + ttl_ms}
            self._run(cur, "lease_take", self.lease_table, params)
            row = self._run(cur, "lease_owner", self.lease_table, {"name": name}).fetchone()
        return row is not None and _text(row[0]) == owner

    def release_lease(self, name: str, owner: str) -> bool:
        check_lease(name, owner)
        self._ensure_leases()
        with self._write() as cur:
            params = {"name": name, "owner": owner}
            return self._run(cur, "lease_drop", self.lease_table, params).rowcount == 1

    def live_leases(self, prefix: str) -> dict[str, str]:
        if prefix:
            check_lease(prefix)
        self._ensure_leases()
        with self._write() as cur:
            now = self._tx_now(cur)
            stale = {"stale": now - LEASE_FORGOTTEN_AFTER_MS, "limit": LEASES_FORGOTTEN_PER_CALL}
            self._run(cur, "lease_prune", self.lease_table, stale)
            params = {
                "now": now,
                "prefix": prefix,
                "prefix_length": len(prefix),
                "limit": MAX_LEASES_LISTED,
            }
            rows = self._run(cur, "lease_list", self.lease_table, params).fetchall()
        return {_text(name): _text(owner) for name, owner in rows}

    def purge_keys(self, queue: str, limit: int) -> int:
        with self._write() as cur:
            table = self._key_table(cur, queue)
            params = {"now": self._tx_now(cur), "limit": limit}
            return max(self._run(cur, "key_purge", table, params).rowcount, 0)


#: a queue's job tables by priority and its unique-key table (None: it has none)
StatsTables = tuple[dict[int, tuple[str, ...]], tuple[str, ...] | None]


#: per state a read asks for, the (stored state, reserved) pairs it shows as that state: a
#: reserved job is IN_PROGRESS in storage but PENDING to every read (S-prefetch)
_SHOWN_AS: dict[JobState, tuple[tuple[JobState, int], ...]] = {
    JobState.PENDING: ((JobState.PENDING, 0), (JobState.IN_PROGRESS, 1)),
    JobState.IN_PROGRESS: ((JobState.IN_PROGRESS, 0),),
    JobState.SUCCEEDED: ((JobState.SUCCEEDED, 0),),
    JobState.FAILED: ((JobState.FAILED, 0),),
}


def _zero_counts(levels: int) -> dict[tuple[int, JobState, bool], int]:
    return {(p, st, fu): 0 for p in range(1, levels + 1) for st in JobState for fu in (False, True)}


def _add_table_stats(stats: QueueStats, priority: int, values: Sequence[Any], cap: int) -> None:
    """One `table_stats` row (after its part number) into `stats`; reserved jobs (its last two
    values, due and future) count as PENDING, as every read shows them (S-prefetch)."""
    for i, state in enumerate(JobState):
        stats.counts[(priority, state, False)] = int(values[2 * i])
        stats.counts[(priority, state, True)] = int(values[2 * i + 1])
    for future, reserved in ((False, values[12]), (True, values[13])):
        key = (priority, JobState.PENDING, future)
        stats.counts[key] = min(stats.counts[key] + int(reserved), cap)
    for state, oldest in zip(AGED_STATES, values[8:11], strict=True):
        if oldest is not None:
            stats.oldest_update[(priority, state)] = int(oldest)
    if values[11] is not None:
        stats.first_reserve_expiry[priority] = int(values[11])


def _by_priority(items: Sequence[Any]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = defaultdict(list)
    for item in items:
        groups[item.priority].append(item)
    return groups


@dataclass(frozen=True, slots=True)
class _ScanWindow:
    """What a scan or count reads: one job table's jobs in `state`, due (run_after <= now) or
    in the future."""

    table: tuple[str, ...]
    priority: int
    state: JobState
    future: bool
    now: int


def _inline_size(jobs: int, budget: ByteBudget | None) -> int:
    """The longest body a first select reads: one such that `jobs` of them fit the budget."""
    if budget is None:
        return _ALL_INLINE
    return max(budget.max_bytes // max(jobs, 1) - budget.per_job, 0)


def _fitting(rows: Sequence, budget: ByteBudget | None) -> Sequence:
    """The leading rows (body length in column 2) that fit the budget."""
    return rows if budget is None else rows[: budget.fitting([row[2] for row in rows])]


def _text(value: Any) -> str:
    """A text column as str (MySQL may hand back bytes under a binary collation)."""
    return value if isinstance(value, str) else bytes(value).decode("ascii")


def _body(record: JobRecord) -> bytes:
    return record.body or b""


def _without_body(record: JobRecord) -> JobRecord:
    return dataclasses.replace(record, body=None, body_size=None)
