"""Group commit of SQLite writes (backends/sqlite_writer.py): requests that queue for the writer
while one runs share its transaction and COMMIT, each keeps its own all-or-nothing part, one
request's error never reaches the others, and nobody is answered before the commit.

Groups are formed deterministically: the first request holds the writer inside its block until
the others are queued for it (the `waiting` count), so these tests do not depend on timing."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from backends.sqlite_writer import GroupCommit
from pinlater.storage.errors import QueueNotFound, ShardError
from pinlater.storage.models import NewJob
from tests.unit.test_sqlite_shard import FakeClock, open_shard

pytestmark = pytest.mark.backend("sqlite")


def _translate(exc: sqlite3.Error) -> Exception:
    return ShardError("t", str(exc))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "t.db"
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x INTEGER)")
    return path


def _writer(db: Path, **options) -> GroupCommit:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    # groups close by size and by waiters here, not by age (the first request waits on purpose)
    return GroupCommit("t", connect, _translate, **{"max_seconds": 60.0, **options})


def _stored(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return sorted(x for (x,) in conn.execute("SELECT x FROM t"))


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


class Requests:
    """Runs write requests on threads and keeps each one's outcome."""

    def __init__(self, writer: GroupCommit):
        self.writer = writer
        self.outcomes: dict[str, object] = {}
        self.threads: list[threading.Thread] = []

    def start(self, name: str, block) -> None:
        def run() -> None:
            try:
                with self.writer.transaction() as cur:
                    block(cur)
                self.outcomes[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                self.outcomes[name] = exc

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()

    def join(self) -> dict[str, object]:
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive()
        return self.outcomes


def _insert(x: int):
    return lambda cur: cur.execute("INSERT INTO t VALUES (?)", (x,))


class FirstRequest:
    """The first request: inserts x, then keeps the writer until `others` requests queue."""

    def __init__(self, writer: GroupCommit, others: int, x: int):
        self.writer, self.others, self.x = writer, others, x
        self.inside = threading.Event()

    def __call__(self, cur) -> None:
        cur.execute("INSERT INTO t VALUES (?)", (self.x,))
        self.inside.set()
        _wait_until(lambda: self.writer.waiting >= self.others)

    def start(self, requests: Requests) -> None:
        requests.start("first", self)
        assert self.inside.wait(10)


def test_waiting_requests_share_one_commit_and_a_failing_one_leaves_the_others_alone(db):
    writer = _writer(db)
    requests = Requests(writer)

    def fails(cur) -> None:
        cur.execute("INSERT INTO t VALUES (2)")
        raise QueueNotFound("gone")

    FirstRequest(writer, 2, 1).start(requests)
    requests.start("fails", fails)
    requests.start("third", _insert(3))
    outcomes = requests.join()
    assert outcomes["first"] == outcomes["third"] == "ok"
    assert isinstance(outcomes["fails"], QueueNotFound)
    assert _stored(db) == [1, 3]  # the failed request's insert was rolled back alone
    assert writer.commits == 1
    writer.close()


def test_a_request_returns_only_after_its_group_committed(db):
    writer = _writer(db)
    requests = Requests(writer)
    seen_at_return: list[list[int]] = []
    first = FirstRequest(writer, 1, 1)

    def run_first() -> None:
        with writer.transaction() as cur:
            first(cur)
        seen_at_return.append(_stored(db))  # another connection: committed data only

    thread = threading.Thread(target=run_first)
    thread.start()
    assert first.inside.wait(10)
    requests.start("second", _insert(2))
    thread.join(10)
    assert requests.join() == {"second": "ok"}
    assert seen_at_return == [[1, 2]]  # first returned after the COMMIT that included second
    assert writer.commits == 1
    writer.close()


def test_an_error_that_ends_the_transaction_fails_every_member_and_stores_nothing(db):
    writer = _writer(db)
    requests = Requests(writer)
    FirstRequest(writer, 1, 1).start(requests)
    requests.start("rollback", lambda cur: cur.execute("ROLLBACK"))
    outcomes = requests.join()
    assert isinstance(outcomes["first"], ShardError) and outcomes["first"].retriable
    assert isinstance(outcomes["rollback"], ShardError)
    assert _stored(db) == []
    with writer.transaction() as cur:  # a fresh connection and transaction afterwards
        cur.execute("INSERT INTO t VALUES (4)")
    assert _stored(db) == [4]
    writer.close()


def test_a_full_group_commits_though_others_wait(db):
    writer = _writer(db, max_members=2)
    requests = Requests(writer)
    FirstRequest(writer, 2, 1).start(requests)
    requests.start("second", _insert(2))
    requests.start("third", _insert(3))
    assert set(requests.join().values()) == {"ok"}
    assert _stored(db) == [1, 2, 3]
    assert writer.commits == 2  # two members, then the third alone
    writer.close()


def test_an_old_group_commits_though_others_wait(db):
    writer = _writer(db, max_seconds=0.0)
    requests = Requests(writer)
    FirstRequest(writer, 1, 1).start(requests)
    requests.start("second", _insert(2))
    assert set(requests.join().values()) == {"ok"}
    assert writer.commits == 2
    writer.close()


def test_one_writer_at_a_time_commits_each_request(db):
    writer = _writer(db)
    for x in range(5):
        with writer.transaction() as cur:
            cur.execute("INSERT INTO t VALUES (?)", (x,))
    assert writer.commits == 5
    assert _stored(db) == [0, 1, 2, 3, 4]
    writer.close()


def test_a_nested_write_on_one_thread_is_refused_instead_of_deadlocking(db):
    writer = _writer(db)
    with writer.transaction() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), writer.transaction():
            pass
    assert _stored(db) == [1]
    writer.close()


def test_exclusive_commits_the_open_group_and_holds_writers_on_the_lock(db):
    """A write on another connection of the process (a stepped free) takes the writer's lock
    with no group open: the waiting group's members are committed first, and writers arriving
    meanwhile queue on the lock, not in SQLite's busy handler (busy_timeout 0 here: a writer
    meeting SQLite's lock would fail at once)."""
    writer = _writer(db)
    requests = Requests(writer)
    first = FirstRequest(writer, 1, 1)
    first.start(requests)
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False, timeout=0)
    inside = threading.Event()

    def free_step() -> None:
        with writer.exclusive():
            other.execute("BEGIN IMMEDIATE")  # fails if the group were still open
            inside.set()
            _wait_until(lambda: writer.waiting >= 1)
            other.execute("INSERT INTO t VALUES (2)")
            other.execute("COMMIT")

    stepper = threading.Thread(target=free_step)
    stepper.start()
    assert inside.wait(10)
    requests.start("later", _insert(3))  # queues on the lock while the step holds SQLite's
    stepper.join(10)
    assert requests.join() == {"first": "ok", "later": "ok"}
    assert _stored(db) == [1, 2, 3]
    other.close()
    writer.close()


def test_after_close_writes_fail_with_a_final_shard_error(db):
    writer = _writer(db)
    with writer.transaction() as cur:
        cur.execute("INSERT INTO t VALUES (1)")
    writer.close()
    with pytest.raises(ShardError) as info, writer.transaction():
        pass
    assert not info.value.retriable


def test_concurrent_enqueues_on_a_shard_get_distinct_consecutive_ids(tmp_path):
    shard = open_shard(tmp_path, FakeClock())
    shard.create_queue("q")
    ids: list[list[int]] = []
    lock = threading.Lock()

    def enqueue_many() -> None:
        for _ in range(20):
            got = shard.enqueue("q", [NewJob(body=b"x")] * 10)
            with lock:
                ids.append(got)

    threads = [threading.Thread(target=enqueue_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(ids) == 160
    assert all(batch == list(range(batch[0], batch[0] + 10)) for batch in ids)
    assert sorted(i for batch in ids for i in batch) == list(range(1, 1601))
    shard.close()
