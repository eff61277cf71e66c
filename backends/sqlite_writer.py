"""Group commit for one SQLite file: this process's write transactions, ordered and batched.

SQLite has one writer at a time per file. With a transaction per request on its own connection,
concurrent writers of one process meet only inside SQLite, whose busy handler sleeps in 1-100 ms
steps until the lock is free: a p50 of 1 ms next to a p99 of 100 ms. Here the writers of a
process queue on a lock instead (woken the moment it is free), and the transaction they run in
is shared:

* the thread holding the lock runs its block inside the open transaction (`BEGIN IMMEDIATE`
  when none is), between `SAVEPOINT` and `RELEASE`; a block that fails is rolled back to its
  savepoint alone, so one request's error (QueueNotFound, a filter's exception) never touches
  the others, and each request stays all-or-nothing;
* on leaving, it commits when no other writer is waiting for the lock (or the group is full or
  old enough); otherwise it leaves the transaction open for the next one. One COMMIT, one fsync
  of the WAL, for every request of the group;
* a request returns only after the COMMIT of its group succeeded (`synchronous=FULL`: durable
  on reply); if that COMMIT fails, or an error ends the whole transaction, every member of the
  group gets the error (none of their writes was stored).

While one group commits (the fsync), the next requests queue up and form the next group, so the
group size follows the load by itself: one client pays one transaction per request as before,
many clients share fsyncs. Other processes on the same file still meet in SQLite's busy handler.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pinlater.storage.errors import ShardError, StorageFull

#: requests per group at most, and the age after which a group commits though others wait
MAX_GROUP_MEMBERS = 64
MAX_GROUP_SECONDS = 0.005


class _Group:
    """The requests that share one transaction; told its COMMIT's outcome."""

    def __init__(self) -> None:
        self.opened = time.monotonic()
        self.members = 0
        self.error: BaseException | None = None
        self._done = threading.Event()

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        self._done.set()

    def wait(self, shard: str) -> None:
        """Until the group's COMMIT is done; raises (a fresh error per member) if it failed."""
        self._done.wait()
        error = self.error
        if isinstance(error, StorageFull):
            raise StorageFull(str(error)) from error
        if error is not None:
            retriable = getattr(error, "retriable", True)
            raise ShardError(shard, f"not committed: {error}", retriable=retriable) from error


class GroupCommit:
    """The write side of one SQLite file for this process: one connection, one lock, commits in
    groups (see the module docstring). `connect` opens a connection; `translate` turns a
    sqlite3.Error into the storage error to raise; `shard` names the shard in errors."""

    def __init__(
        self,
        shard: str,
        connect: Callable[[], sqlite3.Connection],
        translate: Callable[[sqlite3.Error], Exception],
        *,
        max_members: int = MAX_GROUP_MEMBERS,
        max_seconds: float = MAX_GROUP_SECONDS,
    ):
        self.shard, self._connect, self._translate = shard, connect, translate
        self.max_members, self.max_seconds = max_members, max_seconds
        self._lock = threading.Lock()  # held while a request runs in the open transaction
        self._counts = threading.Lock()  # guards _waiting
        self._waiting = 0
        self._owner: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._group: _Group | None = None
        self._closed = False
        #: groups committed and requests in them since start (tests, benchmarks)
        self.commits = 0
        self.committed_members = 0

    @property
    def waiting(self) -> int:
        """Writers queued for the lock now."""
        with self._counts:
            return self._waiting

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A cursor inside this request's part of the open write transaction; on a clean exit,
        returns once that transaction is committed. sqlite3 errors leave translated."""
        group, cur = self._enter()
        try:
            yield cur
        except sqlite3.Error as exc:
            self._leave(group, cur, exc)
            raise self._translate(exc) from exc
        except BaseException as exc:
            self._leave(group, cur, exc)
            raise
        self._leave(group, cur, None)
        group.wait(self.shard)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """The write lock with no group open, for a write transaction this process runs on
        another connection (a stepped free): this process's writers then wait for it on the
        lock, woken the moment it is done, instead of polling SQLite's lock in its busy
        handler, where a run of short steps could starve a writer past busy_timeout."""
        self._acquire()
        try:
            self._settle(None, force=True)
            yield
        finally:
            self._release()

    def _acquire(self) -> None:
        """Take the lock as a counted waiter (the count keeps a group open for it)."""
        if self._owner == threading.get_ident():
            raise RuntimeError("nested SQLite write transaction on one thread")
        with self._counts:
            self._waiting += 1
        self._lock.acquire()
        with self._counts:
            self._waiting -= 1
        self._owner = threading.get_ident()

    def _enter(self) -> tuple[_Group, sqlite3.Cursor]:
        """Take the lock (as a counted waiter) and join the open group, opening it if needed."""
        self._acquire()
        try:
            if self._closed:
                raise ShardError(self.shard, "shard is closed", retriable=False)
            conn = self._conn = self._conn or self._connect()
            if self._group is None:
                conn.execute("BEGIN IMMEDIATE")
                self._group = _Group()
            group = self._group
            cur = conn.cursor()
            cur.execute("SAVEPOINT request")
            group.members += 1
            return group, cur
        except BaseException as exc:
            self._settle(exc if isinstance(exc, sqlite3.Error) else None)
            self._release()
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc) from exc
            raise

    def _leave(self, group: _Group, cur: sqlite3.Cursor, error: BaseException | None) -> None:
        """Keep (RELEASE) or undo (ROLLBACK TO) this request's part, then commit the group
        unless another request is about to join it; always gives the lock up."""
        try:
            self._settle(self._keep(cur) if error is None else self._undo(cur))
        finally:
            self._release()

    def _keep(self, cur: sqlite3.Cursor) -> sqlite3.Error | None:
        """Make this request's part final within the group; an error when that fails."""
        try:
            cur.execute("RELEASE request")
        except sqlite3.Error as exc:
            return exc
        return None

    def _undo(self, cur: sqlite3.Cursor) -> sqlite3.Error | None:
        """Roll this request's part back; an error when that fails (the transaction is lost)."""
        if self._conn is None or not self._conn.in_transaction:
            return None  # the error already ended the whole transaction: _settle sees it
        try:
            cur.execute("ROLLBACK TO request")
            cur.execute("RELEASE request")
        except sqlite3.Error as exc:
            return exc
        return None

    def _settle(self, error: sqlite3.Error | None, *, force: bool = False) -> None:
        """Lock held: commit the open group if it is due (or `force`), fail it if its
        transaction is gone."""
        group, conn = self._group, self._conn
        if group is None or conn is None:
            return
        if error is not None or not conn.in_transaction:
            lost = (
                self._translate(error)
                if error is not None
                else ShardError(self.shard, "an error rolled the write transaction back")
            )
            self._end_group(lost, rollback=True)
            return
        with self._counts:
            others = self._waiting
        full = group.members >= self.max_members
        if others and not force and not full and time.monotonic() - group.opened < self.max_seconds:
            return  # the next waiter joins and commits (or passes it on)
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._end_group(self._translate(exc), rollback=True)
            return
        self.commits += 1
        self.committed_members += group.members
        self._end_group(None, rollback=False)

    def _end_group(self, error: BaseException | None, rollback: bool) -> None:
        group, self._group = self._group, None
        if rollback and self._conn is not None:
            try:
                if self._conn.in_transaction:
                    self._conn.rollback()
            except sqlite3.Error:
                pass
            self._conn.close()  # a connection that lost a transaction is not reused
            self._conn = None
        if group is not None:
            group.finish(error)

    def _release(self) -> None:
        self._owner = None
        self._lock.release()

    def close(self) -> None:
        """Commit what is open (its requests are waiting for it), then close the connection;
        later requests get a non-retriable ShardError."""
        self._lock.acquire()
        try:
            self._closed = True
            if self._group is not None and self._conn is not None:
                try:
                    self._conn.execute("COMMIT")
                    self._end_group(None, rollback=False)
                except sqlite3.Error as exc:
                    self._end_group(self._translate(exc), rollback=True)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            self._lock.release()
