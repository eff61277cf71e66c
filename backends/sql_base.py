"""The shared SQL shard: every job primitive written once over named queries and dialect hooks.

SQLite (`backends/sqlite.py`) and MySQL differ in layout (a queue registry vs a database per
queue), transactions, clocks and a few SQL expressions, but not in the job transitions. So this
module owns the transitions (which query, which parameters, batching, ordering, body-filter
paging) and a dialect subclass provides:

- `dialect`: placeholder style and identifier quoting (`SQLDialect`), which also selects the
  query directory `backends/queries/<dialect.name>/` (overriding `queries/common/` by name);
- `_write()` / `_read()`: a cursor inside one write transaction / one read snapshot;
- `_job_table(cur, queue, priority)`: the job table's identifier parts, or `QueueNotFound`;
- `_tx_now(cur)`: the shard clock in epoch ms for this transaction (SQLite: the injected process
  clock; MySQL: `NOW(3)` read inside the transaction, so storage keeps one clock per shard);
- `_insert_jobs(cur, sql, rows)`: run the batch insert and return the new ids in order;
- the queue DDL primitives (`create_queue`, `delete_queue`, `queue_names`), `ping`, `close`.

Queries take named parameters (`:now`, `:id` ...) and receive one dict per row; a dialect query
may ignore parameters it does not need (e.g. MySQL may use `NOW(3)` instead of `:now`).
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

from pinlater.storage.claims import CLAIM_SOURCE_OFFSET
from pinlater.storage.contract import BodyFilter, Shard
from pinlater.storage.models import (
    Ack,
    Checkpoint,
    ClaimMatch,
    DequeuedJob,
    JobRecord,
    JobState,
    NewJob,
    ReclaimCounts,
    ScanBound,
    new_dequeued_job,
)

QUERY_DIR = Path(__file__).parent / "queries"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+", re.ASCII)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_NAME_LINE = re.compile(r"--\s*name:\s*(\w+)\s*$")
#: rows fetched per page when a body filter is applied in Python (bodies may be 1 MiB each)
FILTER_PAGE = 100
#: id lists are padded to a power of two up to this size (few distinct statement texts)
MAX_ID_LIST = 1024
_NO_ID = -1  # padding id: no job has it
_TOP = 2**63 - 1  # scan bound meaning "from the top"


@dataclass(frozen=True)
class SQLDialect:
    """How one SQL engine spells parameters and identifiers."""

    name: str
    #: format of a named parameter, e.g. ":{}" (sqlite3) or "%({})s" (pymysql)
    param_format: str
    #: identifier quote character: '"' (SQLite) or '`' (MySQL)
    quote_char: str

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


def parse_named_queries(text: str, origin: str = "<sql>") -> dict[str, NamedQuery]:
    """Split a `.sql` file into queries: `-- name: x`, one `-- what it does` line, the SQL."""
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
        doc = " ".join(line.lstrip("- ").strip() for line in lines[1:doc_end])
        queries[name] = NamedQuery(name, doc, "\n".join(lines[doc_end:]).strip())
    return queries


class QueryBook:
    """The named queries of one dialect (`common/*.sql` overridden by `<dialect>/*.sql`), with
    parameters converted to the dialect's style once, at load time."""

    def __init__(self, dialect: SQLDialect, root: Path = QUERY_DIR):
        self.dialect = dialect
        self.queries: dict[str, NamedQuery] = {}
        for folder in ("common", dialect.name):
            for path in sorted((root / folder).glob("*.sql")):
                for name, query in parse_named_queries(path.read_text(), str(path)).items():
                    sql = _PARAM.sub(lambda m: dialect.param(m.group(1)), query.sql)
                    self.queries[name] = NamedQuery(name, query.doc, sql)
        self.render = functools.lru_cache(maxsize=4096)(self._render)

    def _render(self, name: str, ids: int = 0, **identifiers: tuple[str, ...]) -> str:
        """The ONE place identifiers reach SQL text: `{table}` etc. become quoted, validated
        identifiers; `{ids}` becomes `ids` bound parameters `id_0..`."""
        values = {key: self.dialect.quote(parts) for key, parts in identifiers.items()}
        if ids:
            values["ids"] = ", ".join(self.dialect.param(f"id_{i}") for i in range(ids))
        return self.queries[name].sql.format(**values)


def id_chunks(ids: Sequence[int]) -> Iterator[dict[str, int]]:
    """Bind parameters for `{ids}` in chunks of at most MAX_ID_LIST, padded to a power of two
    (so a handful of statement texts serve every list length)."""
    for start in range(0, len(ids), MAX_ID_LIST):
        chunk = list(ids[start : start + MAX_ID_LIST])
        size = 1 << (len(chunk) - 1).bit_length()
        chunk += [_NO_ID] * (size - len(chunk))
        yield {f"id_{i}": local_id for i, local_id in enumerate(chunk)}


def truncate_status(status: str | None, cap: int) -> str:
    """A new job's status, limited to `cap` characters."""
    return (status or "")[:cap]


def _record(row: Sequence[Any], priority: int) -> JobRecord:
    (local_id, state, allowed, remaining, status, created, run_after, updated, claim, body) = row
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
        claim=claim,
        body=None if body is None else bytes(body),
    )


def _match_params(match: ClaimMatch) -> dict[str, Any]:
    return {"claim": match.claim, "source": match.source, "source_pos": CLAIM_SOURCE_OFFSET + 1}


class SQLShard(Shard):
    """Job primitives over named queries; see the module docstring for the dialect hooks."""

    dialect: SQLDialect
    queries: QueryBook

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

    def _tx_now(self, cur: Any) -> int:
        """The shard clock for this transaction (override where the storage owns the clock)."""
        return self.now_ms()

    @abc.abstractmethod
    def _insert_jobs(self, cur: Any, sql: str, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows with `sql` (enqueue_insert) and return their new local ids in order."""

    # ---- helpers ----
    def _require_queue(self, cur: Any, queue: str) -> None:
        """Raise QueueNotFound for a call that has nothing to do on a missing queue."""
        self._job_table(cur, queue, 1)

    def _sql(self, name: str, table: tuple[str, ...], ids: int = 0) -> str:
        return self.queries.render(name, ids=ids, table=table)

    def _run(self, cur: Any, name: str, table: tuple[str, ...], params: Mapping[str, Any]):
        cur.execute(self._sql(name, table), params)
        return cur

    def _by_ids(
        self,
        cur: Any,
        name: str,
        table: tuple[str, ...],
        ids: Sequence[int],
        params: Mapping[str, Any],
    ) -> tuple[int, list]:
        """Run an `{ids}` query over `ids` in chunks; return (rows changed, rows fetched)."""
        changed, rows = 0, []
        for id_params in id_chunks(ids):
            cur.execute(self._sql(name, table, ids=len(id_params)), {**params, **id_params})
            if cur.description is not None:
                rows.extend(cur.fetchall())
            else:
                changed += max(cur.rowcount, 0)
        return changed, rows

    # ---- jobs ----
    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[int]:
        ids: list[int | None] = [None] * len(jobs)
        by_priority: dict[int, list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_priority[job.priority].append(index)
        cap = self.limits.status_cap
        with self._write() as cur:
            now = self._tx_now(cur)
            if not jobs:
                self._require_queue(cur, queue)
            for priority, indexes in by_priority.items():
                table = self._job_table(cur, queue, priority)
                rows = [
                    {
                        "attempts": jobs[i].attempts_allowed,
                        "status": truncate_status(jobs[i].custom_status, cap),
                        "now": now,
                        "run_after": now if jobs[i].run_after_ms is None else jobs[i].run_after_ms,
                        "body": bytes(jobs[i].body),
                    }
                    for i in indexes
                ]
                new_ids = self._insert_jobs(cur, self._sql("enqueue_insert", table), rows)
                for index, local_id in zip(indexes, new_ids, strict=True):
                    ids[index] = local_id
        return ids  # type: ignore[return-value]

    def dequeue(
        self, queue: str, priority: int, limit: int, claim: str | None
    ) -> list[DequeuedJob]:
        if claim is None:
            with self._read() as cur:
                rows = self._select_eligible(cur, queue, priority, limit)[2]
        else:
            with self._write() as cur:
                table, now, rows = self._select_eligible(cur, queue, priority, limit)
                if rows:
                    self._by_ids(
                        cur,
                        "claim_by_ids",
                        table,
                        [r[0] for r in rows],
                        {"claim": claim, "now": now},
                    )
        return [new_dequeued_job(priority, r[0], bytes(r[1]), r[2], r[3], claim) for r in rows]

    def _select_eligible(self, cur: Any, queue: str, priority: int, limit: int):
        table = self._job_table(cur, queue, priority)
        now = self._tx_now(cur)
        rows = self._run(cur, "dequeue_select", table, {"now": now, "limit": limit}).fetchall()
        return table, now, rows

    def ack(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack]) -> int:
        cap = self.limits.status_cap
        applied = 0
        with self._write() as cur:
            now = self._tx_now(cur)
            if not succeeded and not failed:
                self._require_queue(cur, queue)
            for name, acks in (("ack_success", succeeded), ("ack_failure", failed)):
                for priority, group in _by_priority(acks).items():
                    table = self._job_table(cur, queue, priority)
                    rows = [
                        {
                            "id": a.local_id,
                            "status": a.append_status or "",
                            "cap": cap,
                            "now": now,
                            "delay": max(a.retry_delay_ms, 0),
                            **_match_params(a.match),
                        }
                        for a in group
                    ]
                    cur.executemany(self._sql(name, table), rows)
                    applied += max(cur.rowcount, 0)
        return applied

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
                        **_match_params(c.match),
                    }
                    for c in group
                ]
                cur.executemany(self._sql("checkpoint", table), rows)
                applied += max(cur.rowcount, 0)
        return applied

    def lookup(
        self, queue: str, refs: Sequence[tuple[int, int]], include_body: bool
    ) -> list[JobRecord]:
        by_priority: dict[int, list[int]] = defaultdict(list)
        for priority, local_id in refs:
            by_priority[priority].append(local_id)
        records: dict[tuple[int, int], JobRecord] = {}
        with self._read() as cur:
            if not refs:
                self._require_queue(cur, queue)
            for priority, ids in by_priority.items():
                table = self._job_table(cur, queue, priority)
                rows = self._by_ids(
                    cur, "lookup_by_ids", table, ids, {"with_body": int(include_body)}
                )[1]
                records.update(((priority, r[0]), _record(r, priority)) for r in rows)
        return [records[ref] for ref in dict.fromkeys(refs) if ref in records]

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
                    params = {"state": int(state), "now": now, "cap": cap - total}
                    name = "count_future" if future else "count_current"
                    total += self._run(cur, name, table, params).fetchone()[0]
                else:
                    pages = self._scan_pages(cur, table, state, future, now, None, True)
                    total += len(_take(pages, priority, cap - total, body_filter))
        return min(total, cap)

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
                table = self._job_table(cur, queue, priority)
                pages = self._scan_pages(
                    cur, table, state, future, now, bound, body_filter is not None, limit
                )
                found = _take(pages, priority, limit, body_filter)
                records.extend(r if r.body is None else _without_body(r) for r in found)
        return records

    def _scan_pages(
        self,
        cur: Any,
        table: tuple[str, ...],
        state: JobState,
        future: bool,
        now: int,
        bound: ScanBound | None,
        with_body: bool,
        limit: int = FILTER_PAGE,
    ) -> Iterator[list]:
        """Pages of rows after `bound` in (run_after DESC, local_id DESC) order; bodies (and
        small pages) only when a filter needs them."""
        ra, last = (_TOP, _TOP) if bound is None else (bound.run_after_ms, bound.local_id)
        page = min(limit, FILTER_PAGE) if with_body else limit
        name = "scan_future" if future else "scan_current"
        while True:
            params = {
                "state": int(state),
                "now": now,
                "ra": ra,
                "id": last,
                "limit": page,
                "with_body": int(with_body),
            }
            rows = self._run(cur, name, table, params).fetchall()
            if not rows:
                return
            yield rows
            if len(rows) < page:
                return
            last, ra = rows[-1][0], rows[-1][6]

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
            with self._write() as cur:
                table = self._job_table(cur, queue, priority)
                params = {"state": int(state), "limit": limit}
                return max(self._run(cur, "delete_by_state", table, params).rowcount, 0)
        # The filter runs in Python over a read snapshot, outside the write lock (a regex scan
        # must not stall every dequeue); the delete is guarded by the state, so a job that moved
        # on meanwhile is left alone.
        with self._read() as cur:
            table = self._job_table(cur, queue, priority)
            ids = self._filtered_ids(cur, table, state, limit, body_filter)
        if not ids:
            return 0
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            return self._by_ids(cur, "delete_by_ids", table, ids, {"state": int(state)})[0]

    def _filtered_ids(
        self, cur: Any, table: tuple[str, ...], state: JobState, limit: int, body_filter: BodyFilter
    ) -> list[int]:
        ids: list[int] = []
        ra, last = -_TOP - 1, 0
        while len(ids) < limit:
            params = {"state": int(state), "ra": ra, "id": last, "limit": FILTER_PAGE}
            rows = self._run(cur, "page_by_state", table, params).fetchall()
            ids.extend(row[0] for row in rows if body_filter(bytes(row[2])))
            if len(rows) < FILTER_PAGE:
                break
            last, ra = rows[-1][0], rows[-1][1]
        return ids[:limit]

    # ---- janitor ----
    def reclaim_expired(
        self, queue: str, priority: int, claim_timeout_ms: int, limit: int
    ) -> ReclaimCounts:
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            now = self._tx_now(cur)
            params = {"now": now, "cutoff": now - claim_timeout_ms, "limit": limit}
            failed = max(self._run(cur, "reclaim_fail", table, params).rowcount, 0)
            retried = 0
            if failed < limit:
                params["limit"] = limit - failed
                retried = max(self._run(cur, "reclaim_retry", table, params).rowcount, 0)
        return ReclaimCounts(retried=retried, failed=failed)

    def purge(self, queue: str, priority: int, state: JobState, ttl_ms: int, limit: int) -> int:
        with self._write() as cur:
            table = self._job_table(cur, queue, priority)
            params = {"state": int(state), "cutoff": self._tx_now(cur) - ttl_ms, "limit": limit}
            return max(self._run(cur, "purge", table, params).rowcount, 0)


def _by_priority(items: Sequence[Any]) -> dict[int, list[Any]]:
    groups: dict[int, list[Any]] = defaultdict(list)
    for item in items:
        groups[item.priority].append(item)
    return groups


def _take(
    pages: Iterator[list], priority: int, limit: int, body_filter: Callable[[bytes], bool] | None
) -> list[JobRecord]:
    """Up to `limit` records from `pages` that pass the filter (stops fetching when enough)."""
    found: list[JobRecord] = []
    for rows in pages:
        for row in rows:
            record = _record(row, priority)
            if body_filter is None or body_filter(record.body or b""):
                found.append(record)
                if len(found) >= limit:
                    return found
    return found


def _without_body(record: JobRecord) -> JobRecord:
    return dataclasses.replace(record, body=None)
