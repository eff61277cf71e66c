"""The MySQL/MariaDB shard: the shard contract through the kit, against a throwaway mariadbd
(never the system server), then the dialect specifics: index use of the dequeue and janitor
statements, SKIP LOCKED under concurrency, FOUND_ROWS, id assignment on every server
capability path, packet splitting, error mapping, queue names, the shard map and pool sharing."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pymysql
import pytest

from backends.mysql import DDL_LOCK_WAIT, MySQLBackend, MySQLShard, durability_problems
from backends.mysql_pool import translate
from backends.sql_base import CLAIM_ROOM
from pinlater.common.sections import ConfigError
from pinlater.errors import QueueNotFound
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.errors import QueueBusy, ShardError, StorageFull
from pinlater.storage.leases import LEASE_FORGOTTEN_AFTER_MS, LEASES_FORGOTTEN_PER_CALL
from pinlater.storage.models import Ack, ClaimMatch, JobState, NewJob
from pinlater.storage.shard_kit import MAIN, OTHER, Capabilities, Storage, exercise
from pinlater.storage.shard_kit.races import run_threads
from tests.faults.proxy import FaultProxy
from tests.support import mysql_env

pytestmark = pytest.mark.backend("mysql")

SOURCE = "worker:unit"
_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mysql_env.running_server(tmp_path_factory.mktemp("mysql-unit")) as server:
        yield server


def parse(entries):
    return MySQLBackend.parse_shards(entries, {}, "backend.shards")


@contextlib.contextmanager
def mysql_storage(server):
    """Two logical shards of one instance (databases_per_queue 2, one pool), named so that no
    other check uses their databases; the kit runs on the first."""
    main, other = parse([server.shard(f"kit{next(_names)}", databases_per_queue=2)])
    yield Storage(
        new_backend=lambda limits: MySQLBackend({}, limits),
        spec={MAIN: main, OTHER: other}.__getitem__,
    )


test_shard_contract = exercise(mysql_storage, Capabilities())


@pytest.fixture
def backend():
    backend = MySQLBackend({}, StorageLimits(status_cap=20))
    yield backend
    backend.close()


def open_shard(backend, server, name="1", **overrides) -> MySQLShard:
    spec = parse([server.shard(name, **overrides)])[0]
    return backend.open_shard(spec)


@pytest.fixture
def shard(backend, server):
    shard = open_shard(backend, server)
    yield shard
    shard.close()


@pytest.fixture
def queue(shard):
    name = f"q{next(_names)}"
    shard.create_queue(name)
    yield name
    shard.delete_queue(name)


def enqueue(shard, queue, *bodies, **fields):
    return shard.enqueue(queue, [NewJob(body=b, **fields) for b in bodies])


def explain(shard, sql, params):
    with shard._write() as cur:  # a read-only transaction refuses EXPLAIN of a write
        cur.execute("EXPLAIN " + sql, params)
        columns = [d[0] for d in cur.description]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def force_capabilities(shard, **changes) -> None:
    """Pretend the server lacks a feature (exercises the paths other servers take)."""
    shard._pool._info = dataclasses.replace(shard.server_info(), **changes)


def global_status(server, name) -> int:
    return int(server.query("SHOW GLOBAL STATUS LIKE %s", (name,))[0][1])


# ---------------------------------------------------------------- plans


def test_dequeue_select_walks_the_ready_index_without_filesort(shard, queue):
    enqueue(shard, queue, *[b"x"] * 200)
    table = shard._job_table(None, queue, 1)
    sql = shard._sql("dequeue_select", table)
    for row in explain(shard, sql, {"now": shard.now_ms(), "limit": 100, "inline": 1024}):
        assert row["key"] == "ready"
        assert "filesort" not in (row["Extra"] or "").lower()


def test_claim_select_walks_the_ready_index_unlocked_and_locks_by_primary_key(shard, queue):
    enqueue(shard, queue, *[b"x"] * 200)
    sql = shard._sql("claim_select", shard._job_table(None, queue, 1), lock=shard.dialect.row_lock)
    params = {"now": shard.now_ms(), "limit": 100, "inline": 1024, "candidates": 400}
    plan = explain(shard, sql, params)
    assert [(row["table"], row["key"]) for row in plan] == [
        ("<derived2>", None),
        ("j", "PRIMARY"),
        ("jobs_p1", "ready"),
    ]
    assert plan[1]["type"] == "eq_ref"
    assert "filesort" not in (plan[2]["Extra"] or "").lower()


def test_a_claim_locks_only_the_rows_it_takes(shard, queue, server):
    """The candidates past the rows taken stay free for other dequeuers: a claim of 10 out of
    its 40 candidates leaves 190 jobs another dequeuer can take at once (SKIP LOCKED)."""
    enqueue(shard, queue, *[b"x"] * 200)
    first, second = new_claim(SOURCE), new_claim(SOURCE)
    with shard._write() as cur:
        table = shard._job_table(cur, queue, 1)
        taken = shard._claim_eligible(cur, table, 10, None, first, None)
        assert len(taken) == 10
        others = shard.dequeue(queue, 1, 1000, second)
    assert len(others) == 190
    assert not {r[0] for r in taken} & {j.local_id for j in others}


@pytest.mark.parametrize(
    "name, params",
    [
        ("reclaim_fail", {"now": 1, "cutoff": 1, "limit": 10}),
        ("reclaim_retry", {"now": 1, "cutoff": 1, "limit": 10}),
        ("purge", {"state": 2, "cutoff": 1, "limit": 10}),
    ],
)
def test_janitor_statements_use_the_updated_at_index(shard, queue, name, params):
    enqueue(shard, queue, *[b"x"] * 50)
    sql = shard._sql(name, shard._job_table(None, queue, 1))
    rows = explain(shard, sql, params)
    assert rows[0]["key"] == "updated"
    assert "filesort" not in (rows[0]["Extra"] or "").lower()


def test_the_return_of_expired_reservations_walks_the_reserved_index(shard, queue):
    """reclaim_reserved reads reservations alone (the `reserved` index), never every claim of
    the table sorted (the planner took `updated` with a filesort without the hint)."""
    enqueue(shard, queue, *[b"x"] * 50)
    shard.prefetch(queue, 1, 1, new_claim(SOURCE), 60_000)
    sql = shard._sql("reclaim_reserved", shard._job_table(None, queue, 1))
    rows = explain(shard, sql, {"now": shard.now_ms(), "limit": 10})
    assert rows[0]["key"] == "reserved"
    assert "filesort" not in (rows[0]["Extra"] or "").lower()


def clustered_pages(server, shard, queue) -> int:
    """Pages of the queue's priority-1 clustered index (all in the buffer pool: a new table)."""
    name = f"`{shard.database(queue)}`.`jobs_p1`"
    rows = server.query(
        "SELECT COUNT(*) FROM information_schema.INNODB_BUFFER_PAGE"
        " WHERE TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY'",
        (name,),
    )
    return int(rows[0][0])


@pytest.mark.parametrize("room", [True, False])
def test_claims_fit_the_room_reserved_at_enqueue_so_no_page_splits(shard, server, room):
    """A new job is stored with CLAIM_ROOM as its claim (read back as none), so claiming it
    rewrites the row in place; without the room every claim grows its row and the clustered
    index splits its packed pages (what made claims the dearest statement, mysql.py)."""
    if not room:
        shard.claim_room = None
    queue = f"q{next(_names)}"
    shard.create_queue(queue)
    try:
        ids = enqueue(shard, queue, *[b"x" * 100] * 500) + enqueue(shard, queue, *[b"y"] * 500)
        stored = server.query(f"SELECT DISTINCT claim FROM `{shard.database(queue)}`.jobs_p1")
        assert stored == [(CLAIM_ROOM if room else None,)]
        assert [r.claim for r in shard.lookup(queue, [(1, ids[0])], False)] == [None]
        pages = clustered_pages(server, shard, queue)
        claimed = [j for _ in range(10) for j in shard.dequeue(queue, 1, 100, new_claim(SOURCE))]
        assert len(claimed) == 1000
        grown = clustered_pages(server, shard, queue) - pages
        assert (grown <= 0) if room else (grown > 0), (pages, grown)
        looked_up = shard.lookup(queue, [(1, ids[0])], False)[0]
        assert looked_up.claim == claimed[0].claim
    finally:
        shard.delete_queue(queue)


# ---------------------------------------------------------------- concurrency


def _drain(shard, queue, claimed: list, errors: list, batch: int):
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            jobs = shard.dequeue(queue, 1, batch, new_claim(SOURCE))
            if not jobs:
                return
            claimed.extend(j.local_id for j in jobs)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def drain_in_four_threads(shard, queue, batch: int) -> list[int]:
    """Dequeue until empty from four threads at once; the local ids each claim returned."""
    claimed: list[int] = []
    errors: list[Exception] = []
    threads = [
        threading.Thread(target=_drain, args=(shard, queue, claimed, errors, batch))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert errors == []
    return claimed


def test_four_parallel_dequeuers_claim_each_of_2000_jobs_once_without_lock_waits(
    shard, queue, server
):
    ids = []
    for start in range(0, 2000, 500):
        ids += enqueue(shard, queue, *[b"job-%d" % i for i in range(start, start + 500)])
    waits_before = global_status(server, "Innodb_row_lock_waits")
    counts = Counter(drain_in_four_threads(shard, queue, 25))
    assert sorted(counts) == sorted(ids)
    assert max(counts.values()) == 1
    assert global_status(server, "Innodb_row_lock_waits") == waits_before
    assert shard.count(queue, JobState.IN_PROGRESS, [1], False, 10_000, None) == 2000


def test_without_skip_locked_the_update_limit_fallback_still_claims_each_job_once(shard, queue):
    ids = enqueue(shard, queue, *[b"j%d" % i for i in range(300)])
    force_capabilities(shard, skip_locked=False)
    claimed = drain_in_four_threads(shard, queue, 20)
    assert sorted(claimed) == sorted(ids)
    assert len(set(claimed)) == len(claimed)


# ---------------------------------------------------------------- ids


@pytest.mark.parametrize(
    "capability",
    [
        {},  # INSERT ... RETURNING (MariaDB >= 10.5)
        {"returning": False, "autoinc_lock_mode": 1},  # LAST_INSERT_ID() + consecutive ids
        {"returning": False, "autoinc_lock_mode": 2},  # interleaved: one row per statement
    ],
)
def test_enqueue_ids_match_their_jobs_under_concurrent_batches(shard, queue, capability):
    force_capabilities(shard, **capability)
    results: list[tuple[list[int], list[bytes]]] = []

    def producer(worker):
        for batch in range(10):
            bodies = [b"w%d-b%d-%d" % (worker, batch, i) for i in range(37)]
            jobs = [NewJob(body=b, priority=1 + i % 2) for i, b in enumerate(bodies)]
            results.append((shard.enqueue(queue, jobs), bodies))

    run_threads([partial(producer, w) for w in range(4)], timeout=60)
    seen = set()
    for ids, bodies in results:
        refs = [(1 + i % 2, local_id) for i, local_id in enumerate(ids)]
        assert not seen & set(refs)
        seen |= set(refs)
        found = {(r.priority, r.local_id): r.body for r in shard.lookup(queue, refs, True)}
        assert [found[ref] for ref in refs] == bodies


# ---------------------------------------------------------------- FOUND_ROWS and guards


def test_connections_report_matched_rows_not_changed_rows(shard, queue):
    (local_id,) = enqueue(shard, queue, b"x")
    table = shard.dialect.quote(shard._job_table(None, queue, 1))
    with shard._write() as cur:
        cur.execute(f"UPDATE {table} SET state = state WHERE local_id = %s", (local_id,))
        assert cur.rowcount == 1


# ---------------------------------------------------------------- clock


def test_eligibility_uses_the_server_clock_plus_the_shard_offset(shard, queue):
    now = shard.now_ms()
    assert abs(now - time.time() * 1000) < 5000
    enqueue(shard, queue, b"later", run_after_ms=now + 60_000)
    assert shard.dequeue(queue, 1, 10, None) == []
    shard.clock_offset_ms = 61_000
    assert [j.body for j in shard.dequeue(queue, 1, 10, None)] == [b"later"]


# ---------------------------------------------------------------- bodies


def test_batches_larger_than_max_allowed_packet_are_split_but_stay_atomic(server, queue):
    server.query("SET GLOBAL max_allowed_packet = 4194304")
    backend = MySQLBackend({}, StorageLimits())
    try:
        shard = open_shard(backend, server)
        body = b"\x00'\\\"" * (1024 * 1024 // 4)  # escapes to twice its size
        ids = enqueue(shard, queue, *[body + bytes([i]) for i in range(8)])
        assert len(set(ids)) == 8
        found = shard.lookup(queue, [(1, i) for i in ids], True)
        assert [r.body for r in found] == [body + bytes([i]) for i in range(8)]
        shard.close()
    finally:
        server.query("SET GLOBAL max_allowed_packet = 67108864")
        backend.close()


# ---------------------------------------------------------------- errors


def _err(cls, code, message):
    return cls(code, message)


@pytest.mark.parametrize(
    "exc, expected, retriable",
    [
        (_err(pymysql.err.OperationalError, 2003, "Can't connect"), ShardError, True),
        (_err(pymysql.err.OperationalError, 2006, "MySQL server has gone away"), ShardError, True),
        (_err(pymysql.err.OperationalError, 2013, "Lost connection"), ShardError, True),
        (_err(pymysql.err.OperationalError, 1213, "Deadlock found"), QueueBusy, True),
        (_err(pymysql.err.OperationalError, 1205, "Lock wait timeout"), QueueBusy, True),
        (_err(pymysql.err.OperationalError, 1412, "Table definition has changed"), QueueBusy, True),
        (pymysql.err.InterfaceError(0, ""), ShardError, True),
        (
            _err(pymysql.err.OperationalError, 1114, "The table 'jobs_p1' is full"),
            StorageFull,
            None,
        ),
        (_err(pymysql.err.OperationalError, 1021, "Disk full"), StorageFull, None),
        (
            _err(pymysql.err.ProgrammingError, 1064, "You have an error in your SQL"),
            ShardError,
            False,
        ),
        (_err(pymysql.err.DataError, 1406, "Data too long for column 'body'"), ShardError, False),
    ],
)
def test_pymysql_errors_map_to_the_storage_contract(exc, expected, retriable):
    mapped = translate("1", exc, lambda db: None)
    assert type(mapped) is expected
    if retriable is not None:
        assert mapped.retriable is retriable
        assert "shard 1" in str(mapped)


def test_a_real_lock_wait_timeout_is_a_queue_busy_error(server, queue):
    server.query("SET GLOBAL innodb_lock_wait_timeout = 1")
    backend = MySQLBackend({}, StorageLimits())
    holder = server.connect(autocommit=False)
    try:
        shard = open_shard(backend, server)
        (local_id,) = enqueue(shard, queue, b"x")
        claim = new_claim(SOURCE)
        shard.dequeue(queue, 1, 1, claim)
        with holder.cursor() as cur:
            cur.execute(
                f"SELECT * FROM {shard.dialect.quote(shard._job_table(None, queue, 1))}"
                " WHERE local_id = %s FOR UPDATE",
                (local_id,),
            )
        started = time.monotonic()
        with pytest.raises(QueueBusy) as caught:
            shard.ack(queue, [Ack(1, local_id, ClaimMatch(SOURCE, claim))], [])
        assert caught.value.retriable and "1205" in str(caught.value)
        assert time.monotonic() - started < 5
        holder.rollback()
        assert shard.ack(queue, [Ack(1, local_id, ClaimMatch(SOURCE, claim))], []) == 1
        shard.close()
    finally:
        holder.close()
        server.query("SET GLOBAL innodb_lock_wait_timeout = 50")
        backend.close()


def test_a_dead_server_neither_blocks_open_nor_hangs_calls(backend):
    port = mysql_env.free_port()  # nothing listens here
    started = time.monotonic()
    shard = backend.open_shard(
        parse([{"name": "9", "port": port, "connect_timeout_seconds": 0.5}])[0]
    )
    assert time.monotonic() - started < 0.5
    for call in (
        shard.ping,
        lambda: shard.enqueue("q", [NewJob(body=b"x")]),
        lambda: shard.dequeue("q", 1, 1, new_claim(SOURCE)),
    ):
        started = time.monotonic()
        with pytest.raises(ShardError) as caught:
            call()
        assert caught.value.retriable
        assert time.monotonic() - started < 3
    assert "could not check" in shard.durability_warnings()[0]
    shard.close()


def test_a_blackholed_instance_fails_each_call_within_its_own_timeouts(backend, server):
    """An instance that accepts TCP but never answers: a call on a pooled connection fails
    after the read timeout, a call that needs a new connection after the connect timeout, however
    many run at once. DBUtils had reopened a lost connection inside the failing call (in the
    statement and in the rollback: 2.6 s here, read + connect timeout) and opened new
    connections under the pool's lock (concurrent callers waited in line: 2.1, 4.2, 6.2, 8.3 s
    here), so fault scenario F7's enqueues outlasted their clients' timeout."""
    read, connect = 0.5, 2.0
    with FaultProxy(("127.0.0.1", server.port), name="mysql-unit") as proxy:
        shard = open_shard(
            backend,
            server,
            "bh",
            port=proxy.port,
            read_timeout_seconds=read,
            connect_timeout_seconds=connect,
        )
        queue = f"q{next(_names)}"
        shard.create_queue(queue)
        with contextlib.ExitStack() as held:  # four pooled connections, idle again after
            for _ in range(4):
                held.enter_context(shard._connection())
        proxy.blackhole()
        pooled = [_seconds_to_fail(shard, queue) for _ in range(2)]  # each on a live idle one
        with ThreadPoolExecutor(8) as pool:  # two live idle ones left, six calls open their own
            fresh = list(pool.map(lambda _: _seconds_to_fail(shard, queue), range(8)))
        shard.close()
    assert max(pooled) < read + 1.5, pooled
    assert max(fresh) < max(read, connect) + 1.5, fresh


def _seconds_to_fail(shard, queue) -> float:
    started = time.monotonic()
    with pytest.raises(ShardError) as caught:
        shard.enqueue(queue, [NewJob(body=b"x")])
    assert caught.value.retriable
    return time.monotonic() - started


# ---------------------------------------------------------------- queues


def test_a_queue_from_before_unique_keys_gets_its_key_table_on_first_use(backend, server):
    """A queue database made before unique keys existed has no unique_keys table: the first
    keyed enqueue (or key purge) meets error 1146, the missing-tables repair creates it, and
    the retried call works (the sharded layer retries the QueueBusy)."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    server.query(f"DROP TABLE `{shard.database(name)}`.`unique_keys`")
    with pytest.raises(QueueBusy):
        shard.enqueue_keyed(name, [NewJob(b"a", unique_key="k")], 60_000)
    assert shard.enqueue_keyed(name, [NewJob(b"a", unique_key="k")], 60_000)[0].stored
    assert not shard.enqueue_keyed(name, [NewJob(b"b", unique_key="k")], 60_000)[0].stored
    shard.delete_queue(name)
    shard.close()


def test_a_queue_from_before_the_ledger_gets_its_table_and_slots_on_first_use(backend, server):
    """A queue database made before the ledger has no ledger table: the first write meets
    1146, the missing-tables repair creates the table with the jobs present as its opening
    balance (QueueBusy, retried by the sharded layer), and the retried write seeds the slot it
    adds to."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    shard.enqueue(name, [NewJob(b"old-1"), NewJob(b"old-2", priority=3)])
    server.query(f"DROP TABLE `{shard.database(name)}`.`ledger`")
    with pytest.raises(QueueBusy):
        shard.enqueue(name, [NewJob(b"a")])
    shard.enqueue(name, [NewJob(b"b"), NewJob(b"c")])
    book = shard.ledger(name)
    # the jobs it held open its books; the rolled-back first try stored nothing
    assert book.counters["enqueued"] == 4
    assert book.present == 4 and book.balanced
    shard.delete_queue(name)
    shard.close()


def test_a_queue_from_before_the_broker_gets_its_reserve_column_on_first_use(backend, server):
    """A job table made before the prefetching broker has no reserved_until: the first
    statement that names it meets error 1054, every such table of the shard gets the column
    and its index (QueueBusy, retried by the sharded layer), and the retried call works."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    shard.enqueue(name, [NewJob(b"a"), NewJob(b"b", priority=2)])
    db = shard.database(name)
    for priority in (1, 2, 3):
        server.query(f"ALTER TABLE `{db}`.`jobs_p{priority}` DROP KEY reserved")
        server.query(f"ALTER TABLE `{db}`.`jobs_p{priority}` DROP COLUMN reserved_until")
    with pytest.raises(QueueBusy):
        shard.dequeue(name, 1, 10, new_claim(SOURCE))
    assert len(shard.prefetch(name, 1, 10, new_claim(SOURCE), 60_000)) == 1
    assert shard.queue_stats([name], 10)[name].first_reserve_expiry.keys() == {1}
    assert [j.body for j in shard.prefetch(name, 2, 10, new_claim(SOURCE), 60_000)] == [b"b"]
    columns = server.query(
        "SELECT TABLE_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND INDEX_NAME = 'reserved'",
        (db,),
    )
    assert sorted(t for (t,) in columns) == ["jobs_p1", "jobs_p2", "jobs_p3"]
    shard.delete_queue(name)
    shard.close()


def test_prefetch_and_hand_out_cost_what_a_dequeue_does(backend, server):
    """Statements per call (the server counts them: Com_* of this session): a prefetch runs
    a dequeue's select and claim, a hand-out one UPDATE and the ledger row the prefetch left
    out (the reservation counts as dequeued when handed out), a release one UPDATE, with the
    clock read inside it."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    shard.enqueue(name, [NewJob(b"x")] * 20)

    def statements(call) -> int:
        before = _questions(server)
        call()
        return _questions(server) - before

    claim = new_claim(SOURCE)
    jobs: list = []
    prefetched = statements(lambda: jobs.extend(shard.prefetch(name, 1, 10, claim, 60_000)))
    dequeued = statements(lambda: shard.dequeue(name, 1, 5, new_claim(SOURCE)))
    handed = statements(lambda: shard.hand_out(name, 1, [(j.local_id, claim) for j in jobs[:5]]))
    released = statements(lambda: shard.release(name, 1, [(j.local_id, claim) for j in jobs[5:]]))
    print(
        f"statements: prefetch {prefetched}, dequeue {dequeued}, hand_out {handed}, "
        f"release {released}"
    )
    assert prefetched == handed == dequeued - 1  # the ledger row: written at hand-out
    assert released == dequeued - 2  # one UPDATE instead of select + claim + ledger
    shard.delete_queue(name)
    shard.close()


def _questions(server) -> int:
    """Statements the server has run (global Questions; the reads count alike, so
    differences are exact while nothing else runs on the test's own server)."""
    [(_, value)] = server.query("SHOW GLOBAL STATUS LIKE 'Questions'")
    return int(value)


def test_ledger_is_a_journal_folded_by_fold_ledger(backend, server):
    """Each write transaction inserts its own ledger row (no two writers share one); the
    janitor's fold_ledger folds them into one row and the books read the same."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    for _ in range(20):
        shard.enqueue(name, [NewJob(b"x")])
    table = f"`{shard.database(name)}`.`ledger`"
    assert server.query(f"SELECT COUNT(*), SUM(enqueued) FROM {table}") == [(20, 20)]
    before = shard.ledger(name)
    assert shard.fold_ledger(name, 8) == 7
    assert shard.fold_ledger(name, 1000) == 12
    assert server.query(f"SELECT COUNT(*), SUM(enqueued) FROM {table}") == [(1, 20)]
    assert shard.ledger(name) == before and before.balanced
    shard.delete_queue(name)
    shard.close()


def test_a_transaction_its_client_abandoned_blocks_no_writer(backend, server):
    """A write transaction left open (a server killed mid-call: MySQL keeps its session and
    locks until it notices) holds its own ledger row only: every other write goes on at once;
    a fold waits for it (and is tried again on the next janitor pass), then counts it."""
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    zombie = server.connect()
    try:
        cur = zombie.cursor()
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO `{shard.database(name)}`.`ledger` (enqueued) VALUES (0)")
        started = time.monotonic()
        for _ in range(5):
            shard.enqueue(name, [NewJob(b"x")])
            assert len(shard.dequeue(name, 1, 1, new_claim("w"))) == 1
        assert time.monotonic() - started < 2
        with pytest.raises(QueueBusy):
            shard.fold_ledger(name, 1000)
        zombie.rollback()
        assert shard.fold_ledger(name, 1000) == 9
        book = shard.ledger(name)
        assert (book.counters["enqueued"], book.counters["dequeued"]) == (5, 5) and book.balanced
    finally:
        zombie.close()
    shard.delete_queue(name)
    shard.close()


def test_create_queue_is_idempotent_and_creates_missing_priority_tables(backend, server):
    shard = open_shard(backend, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    db = shard.database(name)
    server.query(f"DROP TABLE `{db}`.`jobs_p3`")
    shard.create_queue(name)
    tables = {
        row[0]
        for row in server.query(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,)
        )
    }
    assert tables == {"jobs_p1", "jobs_p2", "jobs_p3", "unique_keys", "ledger"}
    engines = {
        row[0]
        for row in server.query(
            "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,)
        )
    }
    assert engines == {"InnoDB"}
    shard.delete_queue(name)
    shard.delete_queue(name)
    assert name not in shard.queue_names()
    shard.close()


def test_priority_tables_added_to_the_config_later_are_created_on_first_use(server):
    from pinlater.storage.sharded import ShardedBackend

    small = MySQLBackend({}, StorageLimits(num_priorities=2))
    shard = open_shard(small, server)
    name = f"q{next(_names)}"
    shard.create_queue(name)
    shard.close()
    small.close()
    backend = MySQLBackend({}, StorageLimits(num_priorities=3))
    store = ShardedBackend(backend, parse([server.shard("1")]), num_priorities=3)
    try:
        store.enqueue(name, [NewJob(body=b"p1")])
        with pytest.raises(ShardError) as caught:  # directly: one retriable failure
            store.shard("1").dequeue(name, 3, 1, None)
        assert caught.value.retriable
        assert store.shard("1").enqueue(name, [NewJob(body=b"p3", priority=3)]) == [1]
        got = store.dequeue(name, 10, SOURCE)
        assert sorted(job.body for _, job in got) == [b"p1", b"p3"]
    finally:
        store.delete_queue(name)
        store.close()
    backend = MySQLBackend({}, StorageLimits(num_priorities=3))
    shard = open_shard(backend, server)
    with pytest.raises(QueueNotFound):  # a deleted queue is not resurrected by the repair
        shard.dequeue(name, 3, 1, None)
    assert name not in shard.queue_names()
    shard.close()
    backend.close()


def test_queue_names_come_only_from_this_shards_exact_database_pattern(shard, server):
    foreign = ["plq_10_other", "plq_1d1_sibling", "plqx_1_prefix", "plq_1_bad-name"]
    for db in foreign:  # each with a first job table: only the name can rule it out
        server.query(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        server.query(f"CREATE TABLE IF NOT EXISTS `{db}`.`jobs_p1` (a INT)")
    try:
        shard.create_queue("Mixed_Case")
        shard.create_queue("mixed_case")  # case-sensitive on Linux: a second queue
        names = shard.queue_names()
        assert {"Mixed_Case", "mixed_case"} <= names
        assert not names & {"other", "sibling", "prefix", "bad-name", "0_other"}
    finally:
        for db in foreign:
            server.query(f"DROP DATABASE IF EXISTS `{db}`")
        shard.delete_queue("Mixed_Case")
        shard.delete_queue("mixed_case")


class Crash(BaseException):
    """Stands for the process dying between two steps of a delete."""


def trash_tables(server, shard) -> list[str]:
    rows = server.query(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
        (shard._trash,),
    )
    return [row[0] for row in rows]


def test_a_delete_cut_short_leaves_nothing_visible_and_finish_deletes_drops_the_rest(shard, server):
    name = f"q{next(_names)}"
    shard.create_queue(name)
    enqueue(shard, name, *[b"x"] * 50)

    def crash(tables):
        raise Crash

    shard._drop_trash = crash  # dies after the tables moved to the trash and the database went
    with pytest.raises(Crash):
        shard.delete_queue(name)
    del shard._drop_trash
    assert name not in shard.queue_names()
    with pytest.raises(QueueNotFound):
        shard.count(name, JobState.PENDING, [1], False, 10, None)
    shard.create_queue(name)  # fresh tables at once
    assert shard.count(name, JobState.PENDING, [1, 2, 3], False, 100, None) == 0
    assert len(trash_tables(server, shard)) == 5  # three job tables, unique keys, the ledger
    assert shard.finish_deletes() == 5
    assert trash_tables(server, shard) == [] and shard.finish_deletes() == 0
    shard.delete_queue(name)


def test_a_database_without_its_first_job_table_is_no_queue_and_is_never_repaired(shard, server):
    name = f"q{next(_names)}"
    db = shard.database(name)
    server.query(f"CREATE DATABASE `{db}`")  # what a crash mid-delete could leave
    server.query(f"CREATE TABLE `{db}`.`jobs_p2` (a INT)")
    try:
        assert name not in shard.queue_names()
        with pytest.raises(QueueNotFound):
            enqueue(shard, name, b"x")
        assert server.query(f"SHOW TABLES FROM `{db}`") == [("jobs_p2",)]  # not resurrected
        shard.delete_queue(name)  # a delete clears it up
        assert not server.query("SHOW DATABASES LIKE %s", (db,))
    finally:
        server.query(f"DROP DATABASE IF EXISTS `{db}`")


def test_ddl_waits_only_briefly_for_a_queues_locks_and_spares_other_queues(shard, server, queue):
    other = f"q{next(_names)}"
    shard.create_queue(other)
    holder = server.connect(autocommit=False)
    try:
        with holder.cursor() as cur:  # an open transaction on the queue's table
            cur.execute(f"SELECT * FROM `{shard.database(queue)}`.`jobs_p1`")
        started = time.monotonic()
        with pytest.raises(QueueBusy, match="1205"):
            shard.delete_queue(queue)
        assert time.monotonic() - started < DDL_LOCK_WAIT + 2
        assert enqueue(shard, other, b"served") == [1]  # other queues never waited
        holder.rollback()
        shard.delete_queue(queue)
        assert queue not in shard.queue_names()
    finally:
        holder.close()
        shard.delete_queue(other)


def test_queue_name_limit_is_64_minus_the_longest_database_prefix(backend, server):
    specs = parse([server.shard("1", databases_per_queue=3)])
    shards = [backend.open_shard(s) for s in specs]
    limit = backend.queue_name_limit([s.name for s in specs])
    assert limit == 64 - len("plq_1d2_")
    longest = "n" * limit
    for shard in shards:
        shard.create_queue(longest)
    assert all(longest in shard.queue_names() for shard in shards)
    with pytest.raises(ShardError):
        shards[-1].create_queue(longest + "n")
    for shard in shards:
        shard.delete_queue(longest)
        shard.close()


# ---------------------------------------------------------------- shard map and pools


def test_databases_per_queue_expands_into_logical_shards_sharing_one_pool(backend, server):
    specs = parse(
        [
            server.shard("1", databases_per_queue=3, dequeue_only=True),
            server.shard("2", database_prefix="plqtwo"),
        ]
    )
    assert [s.name for s in specs] == ["1", "1d1", "1d2", "2"]
    assert [s.dequeue_only for s in specs] == [True, True, True, False]
    shards = [backend.open_shard(s) for s in specs[:3]]
    assert len({id(s._pool) for s in shards}) == 1
    name = f"q{next(_names)}"
    for shard in shards:
        shard.create_queue(name)
    assert len({shard.database(name) for shard in shards}) == 3
    shards[0].close()  # a sibling's close must not close the shared pool
    assert enqueue(shards[1], name, b"x") == [1]
    shards[1].close()
    shards[2].delete_queue(name)
    pool = shards[2]._pool
    shards[2].close()
    assert pool.closed


def test_dequeue_only_is_not_part_of_the_connection_key(server):
    a, b = parse([server.shard("1")])[0], parse([server.shard("1", dequeue_only=True)])[0]
    assert a.connection_key() == b.connection_key()
    assert a.settings() == b.settings()


def test_hot_reload_reuses_shards_when_only_dequeue_only_changes(server):
    from pinlater.storage.sharded import ShardedBackend

    backend = MySQLBackend({}, StorageLimits())
    store = ShardedBackend(
        backend, parse([server.shard("1", databases_per_queue=2)]), num_priorities=3
    )
    try:
        name = f"q{next(_names)}"
        store.create_queue(name)
        before = {n: store.shard(n) for n in ("1", "1d1")}
        store.reload(parse([server.shard("1", databases_per_queue=2, dequeue_only=True)]))
        assert all(store.shard(n) is before[n] for n in before)
        assert store.enqueue_candidates() == []
        old_pool = before["1"]._pool
        store.reload(parse([server.shard("1", databases_per_queue=2, pool_size=3)]))
        assert store.shard("1")._pool is not old_pool and old_pool.closed
        assert store.shard("1")._pool is store.shard("1d1")._pool
        assert name in store.queue_names()
        assert len(store.enqueue(name, [NewJob(body=b"x")])) == 1
        store.delete_queue(name)
    finally:
        store.close()


@pytest.mark.parametrize(
    "entries, problem",
    [
        ([{"name": "1", "databases_per_queue": 2}, {"name": "1d1"}], "produced twice"),
        ([{"name": "1", "database_prefix": "bad_prefix"}], "database_prefix"),
        ([{"name": "1", "databases_per_queue": 0}], "databases_per_queue"),
        ([{"name": "1", "port": "x"}], "port"),
        ([{"name": "1", "bogus": 1}], "bogus"),
    ],
)
def test_invalid_shard_maps_are_rejected_with_the_key_path(entries, problem):
    with pytest.raises(ConfigError) as caught:
        parse(entries)
    assert any(problem in p for p in caught.value.problems)


def test_shipped_local_config_parses():
    from pinlater.app import load_config

    config = load_config("configs/mysql.local.yaml", env={})
    assert config.backend.kind == "mysql"
    assert [s.name for s in config.backend.shards] == ["1"]
    assert config.backend.shards[0].port == 3306


# ---------------------------------------------------------------- durability


def test_durable_throwaway_server_has_no_durability_warnings(shard):
    assert shard.durability_warnings() == []


def test_flush_log_at_trx_commit_other_than_one_is_reported(shard, server):
    server.query("SET GLOBAL innodb_flush_log_at_trx_commit = 2")
    try:
        (warning,) = shard.durability_warnings()
        assert "innodb_flush_log_at_trx_commit=2" in warning
    finally:
        server.query("SET GLOBAL innodb_flush_log_at_trx_commit = 1")


def test_binlog_settings_are_judged():
    warnings = durability_problems("1", 1, True, 0, "STATEMENT", 64 << 20, 1 << 20)
    assert any("sync_binlog=0" in w for w in warnings)
    assert any("binlog_format=STATEMENT" in w for w in warnings)
    assert durability_problems("1", 1, True, 1, "ROW", 64 << 20, 1 << 20) == []
    assert (
        "max_allowed_packet" in durability_problems("1", 1, False, 0, "MIXED", 1 << 20, 1 << 20)[0]
    )


def test_fifo_dequeue_waits_for_the_queues_named_lock_and_releases_its_own(
    shard, queue, server, monkeypatch
):
    """Another session (another server) holding the queue's FIFO lock makes a FIFO dequeue
    wait, then fail as QueueBusy (retried above), claiming nothing; once it is free a dequeue
    claims and gives the lock back (another session can take it at once)."""
    import backends.mysql as mysql_module

    monkeypatch.setattr(mysql_module, "FIFO_LOCK_WAIT", 0.2)
    enqueue(shard, queue, b"a", b"b")
    name = mysql_module.fifo_lock_name(shard.database(queue))
    other = server.connect()
    try:
        with other.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
            assert cur.fetchone()[0] == 1
            started = time.monotonic()
            with pytest.raises(QueueBusy):
                shard.dequeue_fifo(queue, 5, 1, new_claim(SOURCE))
            assert time.monotonic() - started >= 0.15
            assert shard.count(queue, JobState.IN_PROGRESS, [1], False, 10, None) == 0
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            [job] = shard.dequeue_fifo(queue, 5, 1, new_claim(SOURCE))
            assert job.local_id == 1
            cur.execute("SELECT GET_LOCK(%s, 0)", (name,))
            assert cur.fetchone()[0] == 1  # released by the dequeue's session
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
    finally:
        other.close()


def test_only_a_fifo_dequeue_adds_the_fifo_index_and_a_new_queue_gets_it_again(shard, queue):
    tables = ["jobs_p1", "jobs_p2", "jobs_p3"]
    db = shard.database(queue)
    shard.dequeue(queue, 1, 5, new_claim(SOURCE))
    assert shard._without_fifo_index(db, tables) == tables
    enqueue(shard, queue, b"a")
    assert [job.local_id for job in shard.dequeue_fifo(queue, 5, 1, new_claim(SOURCE))] == [1]
    assert shard._without_fifo_index(db, tables) == []
    shard.delete_queue(queue)
    shard.create_queue(queue)
    assert shard._without_fifo_index(db, tables) == tables
    assert shard.dequeue_fifo(queue, 5, 1, new_claim(SOURCE)) == []
    assert shard._without_fifo_index(db, tables) == []


def test_fifo_index_added_by_another_server_first_is_success(shard, queue, monkeypatch):
    """The race of two servers' first FIFO dequeues: this one saw no index, the other's ALTER
    came first, so this ALTER fails with 1061 (duplicate key name); that is success."""
    tables = ["jobs_p1", "jobs_p2", "jobs_p3"]
    db = shard.database(queue)
    shard._ensure_fifo_index(queue)  # "the other server" (here: this one, earlier)
    assert shard._without_fifo_index(db, tables) == []
    shard._fifo_indexed().clear()
    monkeypatch.setattr(shard, "_without_fifo_index", lambda db, names: list(names))
    shard._ensure_fifo_index(queue)  # every ALTER fails with 1061: no error
    assert db in shard._fifo_indexed()


def test_live_leases_forgets_leases_expired_for_a_day(shard, server):
    """Per-process heartbeats must not pile up: live_leases drops leases expired a day ago
    (at most LEASES_FORGOTTEN_PER_CALL a call) and keeps the others, expired or not."""
    db, table = shard.lease_table
    server.query(f"DROP TABLE IF EXISTS `{db}`.`{table}`")
    shard._leases_ready = False
    for i in range(LEASES_FORGOTTEN_PER_CALL + 5):
        assert shard.acquire_lease(f"server/old{i}", f"old{i}", 1000)
    shard.clock_offset_ms += LEASE_FORGOTTEN_AFTER_MS + 2000
    assert shard.acquire_lease("server/recent-expired", "r", 1)
    assert shard.acquire_lease("server/live", "l", 60_000)
    shard.clock_offset_ms += 10

    def rows() -> int:
        return int(server.query(f"SELECT COUNT(*) FROM `{db}`.`{table}`")[0][0])

    assert shard.live_leases("server/") == {"server/live": "l"}
    assert rows() == 2 + 5
    assert shard.live_leases("") == {"server/live": "l"}
    assert rows() == 2
