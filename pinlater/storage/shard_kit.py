"""The shard test kit: the storage contract's rules, written once, checked on every backend.

`contract.py` and `docs/semantics.md` state what a `Shard` does; this module is the executable
form of those rules at the shard seam, organised by operation (queues, enqueue, bodies and
statuses, dequeue, ack, fencing, ack_and_dequeue, checkpoint, lookup, count, scan,
retry_failed, delete_jobs, reclaim_expired, purge, clock, health, unknown queues, shard
isolation, large batches, concurrency). Each rule is one named check; `exercise` turns them
into one pytest test parametrized by check name, as River's `riverdrivertest.Exercise` runs
one suite over every database driver. (The wire-level conformance suite in tests/conformance
checks the same rules through the server, sharded layer included.)

A backend's shard test module calls it once and keeps only its dialect-specific tests:

    @contextlib.contextmanager
    def sqlite_storage(tmp_path):          # parameters are pytest fixtures
        options = SQLiteBackend.parse_options({"data_dir": str(tmp_path)}, "backend")
        yield Storage(
            new_backend=lambda limits: SQLiteBackend(options, limits),
            spec=lambda name: SQLiteShardSpec(name=name),
        )

    test_shard_contract = exercise(sqlite_storage, Capabilities())

pytest then shows one test id per check (`test_shard_contract[ack-stale-claim-is-a-noop]`).
A fourth backend adds itself the same way: one storage factory (fresh storage per check: a
temp dir, or shard names no other check uses on a shared server) and one `exercise` call.

Time: every backend honours `Shard.clock_offset_ms`, so checks move time only through it and
assert times within a window of `now_ms()` reads taken around the call (exact when the clock
stands still). Checks of exact boundaries need a clock that stands still (`Capabilities`).

The module imports nothing outside `pinlater.storage` (and pytest only inside `exercise`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pinlater.storage.claims import new_claim
from pinlater.storage.contract import Backend, Shard, ShardSpec, StorageLimits
from pinlater.storage.errors import QueueNotFound, ShardError
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
)

#: the shard under test, and a second shard of the same backend instance
MAIN, OTHER = "main", "other"
#: limits the checks are written for (a small status cap makes truncation visible)
KIT_LIMITS = StorageLimits(num_priorities=3, status_cap=20)
QUEUE = "q"
SOURCE = "worker:host1"
HOUR_MS = 3_600_000
PENDING, IN_PROGRESS = JobState.PENDING, JobState.IN_PROGRESS
SUCCEEDED, FAILED = JobState.SUCCEEDED, JobState.FAILED
E = TypeVar("E", bound=BaseException)
T = TypeVar("T")


@dataclass(frozen=True)
class Capabilities:
    """What differs between backends and changes which checks can run."""

    #: the shard's clock stands still except through clock_offset_ms (SQLite with an injected
    #: clock): the checks of exact eligibility, claim-expiry and TTL boundaries run
    frozen_clock: bool = False


@dataclass(frozen=True)
class Storage:
    """Fresh storage for one check, as a backend's test module provides it."""

    #: a new backend instance on this storage with the given limits
    new_backend: Callable[[StorageLimits], Backend]
    #: the spec of the shard the kit calls `name` (MAIN or OTHER): equal names address the same
    #: storage, and both names are shards of one backend instance
    spec: Callable[[str], ShardSpec]


@dataclass
class Window:
    """`now_ms()` read before and after a call: the shard clock the call used lies within."""

    lo: int
    hi: int = 0

    def holds(self, value: int, plus: int = 0) -> bool:
        return self.lo + plus <= value <= self.hi + plus


class Kit:
    """What a check works with: `shard` (queue "q" created) and helpers over it."""

    shard: Shard

    def __init__(self, storage: Storage):
        self.storage = storage
        self._backends: dict[StorageLimits, Backend] = {}
        self._opened: list[tuple[str, StorageLimits, Shard]] = []

    def begin(self) -> None:
        self.shard = self.open()
        self.shard.create_queue(QUEUE)

    # ---- shards and time ----
    def open(self, name: str = MAIN, limits: StorageLimits = KIT_LIMITS) -> Shard:
        """A new handle on shard `name` (another one each call, as another process would have),
        from the one backend instance this check uses for `limits`."""
        if limits not in self._backends:
            self._backends[limits] = self.storage.new_backend(limits)
        shard = self._backends[limits].open_shard(self.storage.spec(name))
        shard.clock_offset_ms = self._opened[0][2].clock_offset_ms if self._opened else 0
        self._opened.append((name, limits, shard))
        return shard

    def advance(self, ms: int) -> None:
        """Move the clock of every open handle forward by `ms`."""
        for _, _, shard in self._opened:
            shard.clock_offset_ms += ms

    @contextlib.contextmanager
    def timed(self) -> Iterator[Window]:
        window = Window(self.shard.now_ms())
        yield window
        window.hi = self.shard.now_ms()

    def close(self, strict: bool) -> None:
        """Delete every queue the check left (through the contract) and release everything;
        errors count only when the check itself passed."""
        try:
            top = max((limits for _, limits, _ in self._opened), key=lambda lim: lim.num_priorities)
            for name in dict.fromkeys(name for name, _, _ in self._opened):
                shard = self.open(name, top)
                for queue in shard.queue_names():
                    shard.delete_queue(queue)
        except Exception:
            if strict:
                raise
        finally:
            for _, _, shard in self._opened:
                shard.close()
            for backend in self._backends.values():
                backend.close()

    # ---- job helpers (on the shard under test and queue "q" unless told) ----
    def enqueue(self, *bodies: bytes, queue: str = QUEUE, shard: Shard | None = None, **fields):
        return (shard or self.shard).enqueue(queue, [NewJob(body=b, **fields) for b in bodies])

    def dequeue(
        self, limit: int = 10, priority: int = 1, source: str = SOURCE, queue: str = QUEUE
    ) -> list[DequeuedJob]:
        return self.shard.dequeue(queue, priority, limit, new_claim(source))

    def dry_run(self, limit: int = 10, priority: int = 1) -> list[DequeuedJob]:
        return self.shard.dequeue(QUEUE, priority, limit, None)

    def record(self, local_id: int, priority: int = 1) -> JobRecord:
        (found,) = self.shard.lookup(QUEUE, [(priority, local_id)], True)
        return found

    def records(self, ids: Sequence[int], priority: int = 1) -> list[JobRecord]:
        return self.shard.lookup(QUEUE, [(priority, i) for i in ids], False)

    def count(
        self,
        state: JobState = PENDING,
        priorities: Sequence[int] = (1,),
        future: bool = False,
        cap: int = 10**6,
        body_filter: Callable[[bytes], bool] | None = None,
    ) -> int:
        return self.shard.count(QUEUE, state, list(priorities), future, cap, body_filter)

    def ack(self, succeeded: Sequence[Ack] = (), failed: Sequence[Ack] = ()) -> int:
        return self.shard.ack(QUEUE, succeeded, failed)

    def checkpoint(self, *checkpoints: Checkpoint) -> int:
        return self.shard.checkpoint(QUEUE, checkpoints)

    def scan(
        self,
        state: JobState = PENDING,
        bounds: dict[int, ScanBound | None] | None = None,
        future: bool = False,
        limit: int = 10,
        body_filter: Callable[[bytes], bool] | None = None,
    ) -> list[JobRecord]:
        return self.shard.scan(QUEUE, state, bounds or {1: None}, future, limit, body_filter)

    def fail_for_good(self, jobs: Sequence[DequeuedJob]) -> None:
        """Failure-ack jobs that had one attempt, so they end FAILED."""
        assert self.ack(failed=[Ack(1, j.local_id, ClaimMatch(SOURCE, j.claim)) for j in jobs])


def by_source(source: str = SOURCE) -> ClaimMatch:
    """The claim match of a client that sends no claim back (matched by source)."""
    return ClaimMatch(source)


def held(job: DequeuedJob) -> ClaimMatch:
    """The claim match of a client that sends back the claim it was given."""
    return ClaimMatch(SOURCE, job.claim)


def raises(kind: type[E], call: Callable[[], Any]) -> E:
    """The exception `call` raised, which must be a `kind` (plain asserts, no pytest)."""
    try:
        call()
    except kind as exc:
        return exc
    raise AssertionError(f"expected {kind.__name__}")


def retried(call: Callable[[], T], attempts: int = 50) -> T:
    """`call`, tried again after a retriable ShardError, as the sharded layer does: under
    contention a storage may roll a call back (an InnoDB deadlock between an ack and a
    reclaim), which the contract allows."""
    for _ in range(attempts - 1):
        try:
            return call()
        except ShardError as exc:
            if not exc.retriable:
                raise
    return call()


def run_threads(targets: Sequence[Callable[[], None]], timeout: float = 120) -> None:
    """Run the targets in threads at once; re-raise the first error any of them hit."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads still running"
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class Check:
    """One rule: a name for the test id and a function of the Kit."""

    name: str
    run: Callable[[Kit], None] = field(repr=False)
    needs_frozen_clock: bool = False

    def __str__(self) -> str:
        return self.name


CHECKS: dict[str, Check] = {}


def register(name: str, run: Callable[[Kit], None], needs_frozen_clock: bool = False) -> None:
    assert name not in CHECKS, f"two checks named {name}"
    CHECKS[name] = Check(name, run, needs_frozen_clock)


def check(run: Callable[[Kit], None] | None = None, *, needs_frozen_clock: bool = False):
    """Register the decorated function as a check named after it (`ack_x` -> "ack-x")."""

    def decorate(run: Callable[[Kit], None]) -> Callable[[Kit], None]:
        register(run.__name__.replace("_", "-"), run, needs_frozen_clock)
        return run

    return decorate if run is None else decorate(run)


def checks_for(capabilities: Capabilities) -> list[Check]:
    """The checks a backend with these capabilities runs."""
    return [c for c in CHECKS.values() if capabilities.frozen_clock or not c.needs_frozen_clock]


def run(check: Check, storage: Storage) -> None:
    """Run one check on fresh storage, then delete what it left and release everything."""
    kit = Kit(storage)
    try:
        kit.begin()
        check.run(kit)
    except BaseException:
        kit.close(strict=False)
        raise
    kit.close(strict=True)


def exercise(open_storage: Callable[..., Any], capabilities: Capabilities):
    """One pytest test function running every check on the backend `open_storage` provides.

    `open_storage` is a context-manager factory yielding a `Storage` fresh for one check; its
    parameters are pytest fixtures (they become the test's parameters). Assign the result to
    a module-level `test_...` name."""
    pytest = importlib.import_module("pytest")  # loaded by test modules only, never at import

    def test_shard_contract(check: Check, **fixtures: Any) -> None:
        with open_storage(**fixtures) as storage:
            run(check, storage)

    fixtures = list(inspect.signature(open_storage).parameters.values())
    check_param = inspect.Parameter("check", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    test_shard_contract.__signature__ = inspect.Signature([check_param, *fixtures])  # type: ignore[attr-defined]
    selected = checks_for(capabilities)
    return pytest.mark.parametrize("check", selected, ids=[c.name for c in selected])(
        test_shard_contract
    )


# ---------------------------------------------------------------- queues


@check
def queue_create_is_idempotent_and_names_are_case_sensitive(kit: Kit) -> None:
    shard = kit.shard
    for name in ("Foo", "foo", "foo"):
        shard.create_queue(name)
    kit.enqueue(b"upper", queue="Foo")
    shard.create_queue("Foo")  # again, with a job in it: the job stays
    assert shard.queue_names() == {QUEUE, "Foo", "foo"}
    assert shard.count("foo", PENDING, [1], False, 10, None) == 0
    assert shard.count("Foo", PENDING, [1], False, 10, None) == 1


@check
def queue_delete_removes_every_job_and_is_idempotent(kit: Kit) -> None:
    shard = kit.shard
    kit.enqueue(*[b"%d" % i for i in range(6)], attempts_allowed=1)
    kit.enqueue(b"p3", priority=3)
    kit.enqueue(b"later", run_after_ms=shard.now_ms() + HOUR_MS)
    jobs = kit.dequeue(5)
    kit.ack([Ack(1, j.local_id, held(j)) for j in jobs[:2]])
    kit.fail_for_good(jobs[2:4])
    shard.delete_queue(QUEUE)
    shard.delete_queue(QUEUE)
    assert QUEUE not in shard.queue_names()
    raises(QueueNotFound, kit.count)
    shard.create_queue(QUEUE)
    for state in JobState:
        for future in (False, True):
            assert kit.count(state, (1, 2, 3), future) == 0
    assert kit.enqueue(b"again") == [1]  # ids start again in a queue created anew


@check
def queue_recreated_is_seen_through_another_handle(kit: Kit) -> None:
    a, b = kit.shard, kit.open()
    a.create_queue("x")
    kit.enqueue(b"old", queue="x", shard=b)
    a.delete_queue("x")
    a.create_queue("x")
    assert kit.enqueue(b"new", queue="x", shard=b) == [1]
    assert [j.body for j in b.dequeue("x", 1, 10, None)] == [b"new"]
    a.delete_queue("x")
    raises(QueueNotFound, lambda: kit.enqueue(b"gone", queue="x", shard=b))


@check
def queue_create_adds_missing_priority_levels(kit: Kit) -> None:
    kit.open(limits=StorageLimits(num_priorities=1, status_cap=20)).create_queue("grow")
    big = kit.open(limits=StorageLimits(num_priorities=4, status_cap=20))
    big.create_queue("grow")
    assert kit.enqueue(b"p4", queue="grow", shard=big, priority=4) == [1]
    assert [j.body for j in big.dequeue("grow", 4, 10, None)] == [b"p4"]


# ---------------------------------------------------------------- enqueue


@check
def enqueue_returns_ids_in_input_order_across_priorities(kit: Kit) -> None:
    jobs = [NewJob(b"a", 1), NewJob(b"b", 2), NewJob(b"c", 1), NewJob(b"d", 2), NewJob(b"e", 3)]
    assert kit.shard.enqueue(QUEUE, jobs) == [1, 1, 2, 2, 1]
    assert kit.shard.enqueue(QUEUE, [NewJob(b"f", priority=2)]) == [3]
    found = kit.shard.lookup(QUEUE, [(2, 1), (2, 2), (2, 3), (3, 1)], True)
    assert [r.body for r in found] == [b"b", b"d", b"f", b"e"]


@check
def enqueue_stores_state_attempts_times_and_a_truncated_status(kit: Kit) -> None:
    with kit.timed() as window:
        (local_id,) = kit.enqueue(b"x", attempts_allowed=5, custom_status="s" * 30)
    record = kit.record(local_id)
    assert (record.state, record.attempts_allowed, record.attempts_remaining) == (PENDING, 5, 5)
    assert record.created_at_ms == record.updated_at_ms == record.run_after_ms
    assert window.holds(record.created_at_ms)
    assert record.custom_status == "s" * 20
    assert record.claim is None


@check
def enqueue_ids_are_not_reused_while_the_queue_exists(kit: Kit) -> None:
    assert kit.enqueue(b"a", b"b", b"c") == [1, 2, 3]
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 3
    assert kit.enqueue(b"d") == [4]


# ---------------------------------------------------------------- bodies and statuses


@check
def body_bytes_come_back_identical(kit: Kit) -> None:
    bodies = [
        b"",
        b"\x00\xff\xfe",
        "h\u00e9llo".encode("latin-1"),
        "é€😀".encode(),
        bytes(range(256)) * 40,
    ]
    ids = kit.enqueue(*bodies)
    assert [r.body for r in kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)] == bodies
    assert [j.body for j in kit.dry_run()] == bodies
    assert [j.body for j in kit.dequeue()] == bodies


@check
def body_at_the_size_cap_round_trips(kit: Kit) -> None:
    body = bytes(range(256)) * (StorageLimits().body_cap // 256)
    assert len(body) == StorageLimits().body_cap
    (local_id,) = kit.enqueue(body)
    assert kit.record(local_id).body == body
    (job,) = kit.dequeue(1)
    assert job.body == body
    reversed_body = body[::-1]
    assert kit.checkpoint(Checkpoint(1, local_id, held(job), new_body=reversed_body)) == 1
    assert kit.record(local_id).body == reversed_body


@check
def body_and_status_text_are_data_never_code(kit: Kit) -> None:
    nasty = "x'); DROP DATABASE mysql; -- %s %(now)s {table} ]] redis.call('FLUSHALL') --[["
    (local_id,) = kit.enqueue(nasty.encode(), custom_status=nasty[:20])
    record = kit.record(local_id)
    assert record.body == nasty.encode() and record.custom_status == nasty[:20]
    assert kit.shard.queue_names() == {QUEUE}


@check
def status_ack_appends_keeping_the_newest_characters(kit: Kit) -> None:
    kit.enqueue(b"a", custom_status="0123456789")
    kit.dequeue()
    assert kit.ack([Ack(1, 1, by_source(), "abcdefghijklmno")]) == 1
    assert kit.record(1).custom_status == "56789abcdefghijklmno"


@check
def status_checkpoint_prepends_keeping_the_newest_characters(kit: Kit) -> None:
    kit.enqueue(b"a", custom_status="0123456789")
    kit.dequeue()
    assert kit.checkpoint(Checkpoint(1, 1, by_source(), prepend_status="abcdefghijklmno")) == 1
    assert kit.record(1).custom_status == "abcdefghijklmno01234"


@check
def status_cap_counts_characters_not_bytes(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x", custom_status="é" * 30)
    assert kit.record(local_id).custom_status == "é" * 20
    kit.dequeue()
    assert kit.checkpoint(Checkpoint(1, local_id, by_source(), prepend_status="€😀")) == 1
    assert kit.record(local_id).custom_status == "€😀" + "é" * 18  # prepend keeps the first
    assert kit.ack([Ack(1, local_id, by_source(), append_status="a😀" * 3)]) == 1
    assert kit.record(local_id).custom_status == "é" * 14 + "a😀" * 3  # append keeps the last
    (other,) = kit.enqueue(b"y", custom_status="ab")
    kit.dequeue()
    assert kit.ack(failed=[Ack(1, other, by_source(), "é" * 25)]) == 1
    assert kit.record(other).custom_status == "é" * 20


# ---------------------------------------------------------------- dequeue


@check
def dequeue_orders_by_run_after_then_id_and_skips_future_jobs(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"late", run_after_ms=now - 10)
    kit.enqueue(b"future", run_after_ms=now + HOUR_MS)
    kit.enqueue(b"early1", b"early2", run_after_ms=now - 20)
    kit.enqueue(b"now")
    assert [j.body for j in kit.dequeue()] == [b"early1", b"early2", b"late", b"now"]
    assert kit.dequeue() == []
    assert kit.count(future=True) == 1
    kit.advance(HOUR_MS + 1000)
    assert [j.body for j in kit.dequeue()] == [b"future"]


@check
def dequeue_orders_ids_numerically(kit: Kit) -> None:
    now = kit.shard.now_ms()
    ids = kit.enqueue(*[b"%d" % i for i in range(12)], run_after_ms=now - 1000)
    older = kit.enqueue(b"older", run_after_ms=now - 5000)
    assert [j.local_id for j in kit.dequeue(20)] == older + ids  # 1, 2, ..., 10, not 1, 10, 2


@check(needs_frozen_clock=True)
def dequeue_eligibility_includes_run_after_equal_to_now(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"now", run_after_ms=now)
    kit.enqueue(b"next", run_after_ms=now + 1)
    assert [j.body for j in kit.dequeue()] == [b"now"]
    kit.advance(1)
    assert [j.body for j in kit.dequeue()] == [b"next"]


@check
def dequeue_claims_with_updated_at_now_and_reports_stored_attempts(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=3, custom_status="st")
    kit.advance(500)
    claim = new_claim(SOURCE)
    with kit.timed() as window:
        jobs = kit.shard.dequeue(QUEUE, 1, 2, claim)
    assert [(j.local_id, j.priority, j.claim) for j in jobs] == [(1, 1, claim), (2, 1, claim)]
    assert [(j.attempts_allowed, j.attempts_remaining) for j in jobs] == [(3, 3), (3, 3)]
    record = kit.record(1)
    assert (record.state, record.claim, record.attempts_remaining) == (IN_PROGRESS, claim, 3)
    assert window.holds(record.updated_at_ms)
    assert record.updated_at_ms >= record.created_at_ms + 500
    assert record.custom_status == "st"
    assert [j.local_id for j in kit.dequeue()] == [3]
    assert kit.dequeue() == []


@check
def dequeue_dry_run_changes_nothing(kit: Kit) -> None:
    ids = kit.enqueue(b"a", b"b", b"c", attempts_allowed=3)
    before = kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)
    dry = kit.dry_run(2)
    assert [(j.local_id, j.body, j.claim, j.attempts_remaining) for j in dry] == [
        (1, b"a", None, 3),
        (2, b"b", None, 3),
    ]
    assert kit.shard.lookup(QUEUE, [(1, i) for i in ids], True) == before
    assert [j.local_id for j in kit.dequeue(2)] == [1, 2]
    assert [j.local_id for j in kit.dry_run()] == [3]  # claimed jobs are not eligible


@check
def dequeue_takes_one_priority(kit: Kit) -> None:
    kit.enqueue(b"p1")
    kit.enqueue(b"p2", priority=2)
    assert [(j.priority, j.body) for j in kit.dequeue(priority=2)] == [(2, b"p2")]
    assert kit.dequeue(priority=3) == []
    assert [(j.priority, j.body) for j in kit.dequeue(priority=1)] == [(1, b"p1")]


@check
def dequeue_limit_zero_touches_nothing(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    assert kit.dequeue(0) == []
    assert kit.dry_run(0) == []
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 0, None) == 0
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 0, lambda b: True) == 0
    assert kit.count() == 2


# ---------------------------------------------------------------- ack


@check
def ack_success_needs_in_progress_and_a_matching_claim(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", b"pending")
    jobs = kit.dequeue(3)
    wrong = [
        Ack(1, 1, ClaimMatch(SOURCE, new_claim(SOURCE))),
        Ack(1, 2, by_source("worker:host")),
        Ack(1, 4, by_source()),
    ]
    assert kit.ack(wrong) == 0
    assert {kit.record(i).state for i in (1, 2)} == {IN_PROGRESS}
    assert kit.record(4).state == PENDING
    assert kit.ack([Ack(1, 1, held(jobs[0]), "ok"), Ack(1, 2, by_source())]) == 2
    done = kit.record(1)
    assert (done.state, done.custom_status, done.claim) == (SUCCEEDED, "ok", jobs[0].claim)
    assert kit.ack([Ack(1, 1, by_source(), "again")]) == 0
    assert kit.record(1).custom_status == "ok"


@check
def ack_stale_claim_is_a_noop(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x")
    assert kit.ack([Ack(1, local_id, by_source())]) == 0  # PENDING: nothing to ack
    (job,) = kit.dequeue()
    assert kit.ack([Ack(1, local_id, ClaimMatch(SOURCE, new_claim(SOURCE)))]) == 0
    assert kit.ack(failed=[Ack(1, local_id, ClaimMatch(SOURCE, new_claim(SOURCE)))]) == 0
    padded = ClaimMatch(SOURCE, f"{job.claim} ")  # equality is exact, trailing spaces count
    assert kit.ack([Ack(1, local_id, padded)]) == 0
    assert kit.checkpoint(Checkpoint(1, local_id, padded)) == 0
    assert kit.record(local_id).state == IN_PROGRESS
    assert kit.ack([Ack(1, local_id, held(job))]) == 1
    assert kit.ack([Ack(1, local_id, held(job))]) == 0
    assert kit.ack(failed=[Ack(1, local_id, held(job))]) == 0
    record = kit.record(local_id)
    assert record.state == SUCCEEDED and record.claim == job.claim


@check
def ack_failure_retries_after_the_delay_then_fails_for_good(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=2, custom_status="s")
    kit.dequeue()
    with kit.timed() as window:
        assert kit.ack(failed=[Ack(1, 1, by_source(), "1", retry_delay_ms=HOUR_MS)]) == 1
    record = kit.record(1)
    assert (record.state, record.attempts_remaining, record.claim, record.custom_status) == (
        PENDING,
        1,
        None,
        "s1",
    )
    assert window.holds(record.run_after_ms, plus=HOUR_MS)
    assert window.holds(record.updated_at_ms)
    assert kit.dequeue() == []
    kit.advance(HOUR_MS + 1000)
    (job,) = kit.dequeue()
    assert job.attempts_remaining == 1
    assert kit.ack(failed=[Ack(1, 1, held(job), "2", retry_delay_ms=999)]) == 1
    failed = kit.record(1)
    assert (failed.state, failed.attempts_remaining, failed.claim, failed.custom_status) == (
        FAILED,
        0,
        job.claim,
        "s12",
    )
    assert failed.run_after_ms == record.run_after_ms  # a final failure does not reschedule
    assert kit.dequeue() == []


@check
def ack_failure_with_a_negative_delay_is_due_now(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=3)
    kit.dequeue()
    with kit.timed() as window:
        assert kit.ack(failed=[Ack(1, 1, by_source(), retry_delay_ms=-5000)]) == 1
    assert window.holds(kit.record(1).run_after_ms)
    assert [(j.local_id, j.attempts_remaining) for j in kit.dequeue()] == [(1, 2)]


@check
def ack_batches_apply_per_job_guards_across_priorities(kit: Kit) -> None:
    ids = kit.enqueue(b"a", b"b", b"c")
    kit.enqueue(b"p2", priority=2)
    claim = new_claim(SOURCE)
    kit.shard.dequeue(QUEUE, 1, 2, claim)
    (p2,) = kit.dequeue(priority=2)
    acks = [Ack(1, i, ClaimMatch(SOURCE, claim), "done") for i in ids] + [Ack(2, 1, held(p2))]
    assert kit.ack(acks) == 3  # the third priority-1 job is PENDING: untouched
    assert kit.ack(acks) == 0  # resent acks are no-ops
    states = {r.local_id: r.state for r in kit.records(ids)}
    assert states == {ids[0]: SUCCEEDED, ids[1]: SUCCEEDED, ids[2]: PENDING}
    assert kit.record(1, priority=2).state == SUCCEEDED


# ---------------------------------------------------------------- fencing


@check
def fencing_a_claimless_ack_matches_the_source_exactly(kit: Kit) -> None:
    kit.enqueue(b"x")
    (job,) = kit.dequeue(source="worker:host1")
    for other in ("worker", "host1", "worker:host", "worker:host1 ", "worker:host%", "%", ""):
        assert kit.ack(failed=[Ack(1, job.local_id, by_source(other))]) == 0
        assert kit.checkpoint(Checkpoint(1, job.local_id, by_source(other))) == 0
    assert kit.ack(failed=[Ack(1, job.local_id, by_source("worker:host1"))]) == 1


@check
def fencing_a_stale_worker_cannot_touch_a_reclaimed_and_redequeued_job(kit: Kit) -> None:
    kit.enqueue(b"x", attempts_allowed=3)
    (first,) = kit.dequeue()
    kit.advance(60_000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10).retried == 1
    (second,) = kit.dequeue()
    assert kit.ack([Ack(1, first.local_id, held(first))]) == 0
    assert kit.ack(failed=[Ack(1, first.local_id, held(first))]) == 0
    assert kit.checkpoint(Checkpoint(1, first.local_id, held(first), move_to_pending=True)) == 0
    record = kit.record(second.local_id)
    assert record.state == IN_PROGRESS and record.claim == second.claim
    assert record.attempts_remaining == 2


# ---------------------------------------------------------------- ack_and_dequeue


@check
def ack_and_dequeue_applies_the_acks_first(kit: Kit) -> None:
    a, b, c = kit.enqueue(b"a", b"b", b"c", attempts_allowed=3)
    ok_job, bad_job = kit.dequeue(2)
    ok, bad = Ack(1, ok_job.local_id, held(ok_job)), Ack(1, bad_job.local_id, held(bad_job))
    claim = new_claim(SOURCE)
    applied, jobs = kit.shard.ack_and_dequeue(QUEUE, [ok], [bad], 1, 5, claim)
    assert applied == 2
    # the failure-acked job (no delay) is pending again before the dequeue part runs
    assert sorted(j.local_id for j in jobs) == sorted([bad.local_id, c])
    assert {j.claim for j in jobs} == {claim}
    assert kit.record(ok.local_id).state == SUCCEEDED
    assert kit.record(bad.local_id).attempts_remaining == 2
    assert kit.count(IN_PROGRESS) == 2
    assert {a, b} == {ok.local_id, bad.local_id}


@check
def ack_and_dequeue_respects_the_retry_delay(kit: Kit) -> None:
    kit.enqueue(b"a", attempts_allowed=3)
    (job,) = kit.dequeue()
    delayed = Ack(1, job.local_id, held(job), retry_delay_ms=HOUR_MS)
    applied, jobs = kit.shard.ack_and_dequeue(QUEUE, [], [delayed], 1, 5, new_claim(SOURCE))
    assert (applied, jobs) == (1, [])
    assert kit.count(future=True) == 1


@check
def ack_and_dequeue_on_an_unknown_queue_changes_nothing(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x")
    (job,) = kit.dequeue()
    ack = Ack(1, local_id, held(job))
    raises(
        QueueNotFound,
        lambda: kit.shard.ack_and_dequeue("nope", [ack], [], 1, 5, new_claim(SOURCE)),
    )
    assert kit.record(local_id).state == IN_PROGRESS


# ---------------------------------------------------------------- checkpoint


@check
def checkpoint_applies_every_field_and_extends_the_claim(kit: Kit) -> None:
    kit.enqueue(b"old", attempts_allowed=2, custom_status="0123456789")
    (job,) = kit.dequeue()
    kit.advance(40_000)
    later = kit.shard.now_ms() + HOUR_MS
    cp = Checkpoint(
        1,
        1,
        held(job),
        new_body=b"\xffnew",
        run_after_ms=later,
        attempts_allowed=7,
        prepend_status="abcdefghijklmno",
    )
    with kit.timed() as window:
        assert kit.checkpoint(cp) == 1
    record = kit.record(1)
    assert (
        record.state,
        record.body,
        record.run_after_ms,
        record.attempts_allowed,
        record.attempts_remaining,
        record.claim,
    ) == (IN_PROGRESS, b"\xffnew", later, 7, 7, job.claim)
    assert window.holds(record.updated_at_ms)
    assert record.custom_status == "abcdefghijklmno01234"
    kit.advance(30_000)  # 70 s after the dequeue, 30 s after the checkpoint
    assert kit.shard.reclaim_expired(QUEUE, 1, 60_000, 10).retried == 0  # claim extended
    assert kit.count(IN_PROGRESS, future=True) == 1  # its run_after is in the future now
    assert kit.count(IN_PROGRESS) == 0


@check
def checkpoint_without_fields_keeps_them_and_sets_run_after_now(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"body", attempts_allowed=4, run_after_ms=now - 50, custom_status="st")
    kit.dequeue()
    kit.advance(10)
    with kit.timed() as window:
        assert kit.checkpoint(Checkpoint(1, 1, by_source())) == 1
    record = kit.record(1)
    assert (record.body, record.attempts_allowed, record.attempts_remaining) == (b"body", 4, 4)
    assert (record.state, record.custom_status) == (IN_PROGRESS, "st")
    assert window.holds(record.run_after_ms) and window.holds(record.updated_at_ms)


@check
def checkpoint_move_to_pending_clears_the_claim_and_stale_claims_do_nothing(kit: Kit) -> None:
    kit.enqueue(b"a")
    (job,) = kit.dequeue()
    stale = [
        Checkpoint(1, 1, ClaimMatch(SOURCE, new_claim(SOURCE))),
        Checkpoint(1, 1, by_source("worker")),
    ]
    assert kit.checkpoint(*stale) == 0
    assert kit.checkpoint(Checkpoint(1, 1, held(job), move_to_pending=True)) == 1
    record = kit.record(1)
    assert (record.state, record.claim) == (PENDING, None)
    assert kit.checkpoint(Checkpoint(1, 1, by_source())) == 0  # not IN_PROGRESS any more
    assert [j.local_id for j in kit.dequeue()] == [1]


# ---------------------------------------------------------------- lookup


@check
def lookup_omits_missing_jobs_and_leaves_out_bodies_unless_asked(kit: Kit) -> None:
    kit.enqueue(b"a", b"b")
    records = kit.shard.lookup(QUEUE, [(1, 2), (1, 99), (2, 1), (1, 1)], False)
    assert [(r.priority, r.local_id, r.body) for r in records] == [(1, 2, None), (1, 1, None)]
    assert kit.shard.lookup(QUEUE, [], True) == []


# ---------------------------------------------------------------- count


@check
def count_is_exact_up_to_the_cap_and_splits_due_from_future(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(*[b"now"] * 5, run_after_ms=now - 10)
    kit.enqueue(*[b"later"] * 4, run_after_ms=now + HOUR_MS)
    kit.enqueue(*[b"p2"] * 3, priority=2, run_after_ms=now - 10)
    kit.enqueue(b"p2 later", priority=2, run_after_ms=now + HOUR_MS)
    assert kit.count() == 5
    assert kit.count(future=True) == 4
    assert kit.count(priorities=(1, 2, 3)) == 8
    assert kit.count(priorities=(1, 2, 3), future=True) == 5
    assert kit.count(priorities=(1, 2), cap=6) == 6
    assert kit.count(cap=3) == 3
    assert kit.count(FAILED, (1, 2)) == 0
    assert kit.count(body_filter=lambda b: b != b"now") == 0
    assert kit.count(priorities=(1, 2), body_filter=lambda b: b != b"now") == 3
    assert kit.count(cap=1, body_filter=lambda b: True) == 1


@check
def count_with_a_body_filter_pages_past_the_first_page(kit: Kit) -> None:
    kit.enqueue(*[b"hit" if i % 3 == 0 else b"miss" for i in range(250)])
    assert kit.count(cap=1000, body_filter=lambda b: b == b"hit") == 84
    assert kit.count(cap=10, body_filter=lambda b: b == b"hit") == 10


class _FilterRefusedError(Exception):
    """Raised by a body filter (e.g. a regex over its time budget)."""


@check
def body_filter_errors_propagate_unchanged(kit: Kit) -> None:
    kit.enqueue(b"a")

    def refuse(body: bytes) -> bool:
        raise _FilterRefusedError("too slow")

    for call in (
        lambda: kit.count(cap=9, body_filter=refuse),
        lambda: kit.scan(limit=9, body_filter=refuse),
        lambda: kit.shard.delete_jobs(QUEUE, PENDING, 1, 9, refuse),
    ):
        assert str(raises(_FilterRefusedError, call)) == "too slow"
    assert kit.count() == 1


# ---------------------------------------------------------------- scan


def _positions(records: Sequence[JobRecord], now: int) -> list[tuple[int, int]]:
    return [(r.run_after_ms - now, r.local_id) for r in records]


@check
def scan_returns_newest_first_and_resumes_after_a_bound(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for offset in (-30, -10, -10, -20, HOUR_MS):
        kit.enqueue(b"x", run_after_ms=now + offset)
    page = kit.scan(limit=2)
    assert _positions(page, now) == [(-10, 3), (-10, 2)]
    assert all(r.body is None for r in page)
    rest = kit.scan(bounds={1: ScanBound(now - 10, 2)})
    assert _positions(rest, now) == [(-20, 4), (-30, 1)]
    assert [r.local_id for r in kit.scan(future=True)] == [5]


@check
def scan_pages_chained_by_their_last_record_visit_every_job_once(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for i in range(25):
        kit.enqueue(b"x", run_after_ms=now - 100 - (i % 4))  # many ties on run_after
    kit.enqueue(b"newer", run_after_ms=now - 50)
    seen: list[tuple[int, int]] = []
    bound = None
    for _ in range(20):  # bounded
        page = kit.scan(bounds={1: bound}, limit=4)
        if not page:
            break
        seen += [(r.run_after_ms, r.local_id) for r in page]
        bound = ScanBound(page[-1].run_after_ms, page[-1].local_id)
    assert len(seen) == len(set(seen)) == 26
    assert seen == sorted(seen, reverse=True)
    assert seen[0] == (now - 50, 26) and seen[1] == (now - 100, 25)


@check
def scan_limits_each_priority_and_filters_bodies(kit: Kit) -> None:
    kit.enqueue(*[b"keep", b"drop"] * 150)
    kit.enqueue(b"keep", b"keep", priority=2)
    found = kit.scan(bounds={1: None, 2: None}, limit=120, body_filter=lambda b: b == b"keep")
    assert [r.priority for r in found].count(1) == 120
    assert [r.priority for r in found].count(2) == 2
    assert all(r.body is None and r.local_id % 2 == 1 for r in found if r.priority == 1)


@check
def scan_of_other_states_splits_due_from_future_and_filters(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"keep", b"drop", run_after_ms=now - 100)
    for job in kit.dequeue():
        assert kit.ack([Ack(1, job.local_id, held(job))]) == 1
    assert kit.scan(SUCCEEDED, {1: None, 2: None}, future=True) == []
    due = kit.scan(SUCCEEDED, {1: None, 2: None})
    assert [(r.local_id, r.state) for r in due] == [(2, SUCCEEDED), (1, SUCCEEDED)]
    kept = kit.scan(SUCCEEDED, body_filter=lambda b: b == b"keep")
    assert [(r.local_id, r.body) for r in kept] == [(1, None)]
    assert kit.scan(PENDING) == []


# ---------------------------------------------------------------- retry_failed


@check
def retry_failed_moves_the_oldest_failed_jobs_back_to_pending(kit: Kit) -> None:
    now = kit.shard.now_ms()
    for offset in (-10, -30, -20):  # oldest run_after: job 2, then 3, then 1
        kit.enqueue(b"f", attempts_allowed=1, run_after_ms=now + offset)
    kit.fail_for_good(kit.dequeue())
    with kit.timed() as window:
        assert kit.shard.retry_failed(QUEUE, 1, 4, None, 2) == 2
    assert [r.state for r in kit.records([1, 2, 3])] == [FAILED, PENDING, PENDING]
    record = kit.record(2)
    assert (record.attempts_remaining, record.attempts_allowed, record.claim) == (4, 1, None)
    assert window.holds(record.run_after_ms) and window.holds(record.updated_at_ms)
    assert kit.shard.retry_failed(QUEUE, 1, 1, now + 10**6, 10) == 1
    assert (kit.record(1).state, kit.record(1).run_after_ms) == (PENDING, now + 10**6)
    assert kit.shard.retry_failed(QUEUE, 1, 1, None, 10) == 0
    assert kit.shard.retry_failed(QUEUE, 2, 1, None, 10) == 0


# ---------------------------------------------------------------- delete_jobs


@check
def delete_jobs_touches_only_the_state_up_to_the_limit(kit: Kit) -> None:
    kit.enqueue(b"a1", b"b2", b"a3", b"a4", b"b5")
    kit.dequeue(1)
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 2, lambda b: b.startswith(b"a")) == 2
    assert [r.local_id for r in kit.records(range(1, 6))] == [1, 2, 5]
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 10, None) == 2
    assert [r.local_id for r in kit.records(range(1, 6))] == [1]
    assert kit.shard.delete_jobs(QUEUE, SUCCEEDED, 1, 10, None) == 0
    assert kit.shard.delete_jobs(QUEUE, IN_PROGRESS, 1, 10, None) == 1


@check
def delete_jobs_without_a_filter_takes_the_oldest_first(kit: Kit) -> None:
    kit.enqueue(*[b"a%d" % i for i in range(6)], *[b"b%d" % i for i in range(6)])
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 4, lambda b: b.startswith(b"b")) == 4
    assert kit.count() == 8
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 3, None) == 3
    left = kit.scan(limit=100)
    assert len(left) == 5 and all(r.local_id > 3 for r in left)


@check
def delete_jobs_with_a_filter_pages_past_the_first_page(kit: Kit) -> None:
    kit.enqueue(*[b"keep"] * 150 + [b"drop"] * 60)
    assert kit.shard.delete_jobs(QUEUE, PENDING, 1, 1000, lambda b: b == b"drop") == 60
    assert kit.count() == 150


# ---------------------------------------------------------------- reclaim_expired


@check
def reclaim_retries_or_fails_expired_claims_by_attempts_left(kit: Kit) -> None:
    kit.enqueue(b"retry", attempts_allowed=3)
    kit.enqueue(b"last", attempts_allowed=1)
    kit.enqueue(b"fresh")
    kit.dequeue(2)
    counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed) == (0, 0)
    kit.advance(60_000)
    kit.dequeue()
    with kit.timed() as window:
        counts = kit.shard.reclaim_expired(QUEUE, 1, 30_000, 10)
    assert (counts.retried, counts.failed) == (1, 1)
    retried, failed, fresh = (kit.record(i) for i in (1, 2, 3))
    assert (retried.state, retried.attempts_remaining, retried.claim) == (PENDING, 2, None)
    assert window.holds(retried.run_after_ms) and window.holds(retried.updated_at_ms)
    assert (failed.state, failed.attempts_remaining) == (FAILED, 0)
    assert window.holds(failed.updated_at_ms)
    assert fresh.state == IN_PROGRESS
    assert [j.local_id for j in kit.dequeue()] == [1]


@check(needs_frozen_clock=True)
def reclaim_expiry_is_strictly_older_than_the_timeout(kit: Kit) -> None:
    kit.enqueue(b"x", attempts_allowed=2)
    kit.dequeue()
    kit.advance(5000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 5000, 10).retried == 0  # updated_at == cutoff
    kit.advance(1)
    assert kit.shard.reclaim_expired(QUEUE, 1, 5000, 10).retried == 1
    assert kit.record(1).run_after_ms == kit.shard.now_ms()


@check
def reclaim_stops_at_the_limit(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 5)
    kit.dequeue()
    kit.advance(10_000)
    counts = kit.shard.reclaim_expired(QUEUE, 1, 1000, 3)
    assert counts.retried + counts.failed == 3
    assert kit.count(IN_PROGRESS) == 2
    assert kit.shard.reclaim_expired(QUEUE, 2, 1000, 3) == ReclaimCounts(0, 0)


# ---------------------------------------------------------------- purge


@check
def purge_measures_the_ttl_from_updated_at_not_run_after(kit: Kit) -> None:
    now = kit.shard.now_ms()
    kit.enqueue(b"old", b"young", run_after_ms=now - 10 * HOUR_MS)
    kit.enqueue(b"delayed", run_after_ms=now + 10 * HOUR_MS)
    (old,) = kit.dequeue(1)
    kit.ack([Ack(1, old.local_id, held(old))])
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, 10) == 0  # run_after is 10 hours ago
    kit.advance(120_000)
    (young,) = kit.dequeue(1)
    kit.ack([Ack(1, young.local_id, held(young))])
    assert kit.shard.purge(QUEUE, 1, FAILED, 60_000, 10) == 0  # only the given state
    assert kit.shard.purge(QUEUE, 1, SUCCEEDED, 60_000, 10) == 1
    assert [r.local_id for r in kit.records([1, 2, 3])] == [2, 3]
    assert kit.count(future=True) == 1


@check(needs_frozen_clock=True)
def purge_ttl_is_strictly_older_and_stops_at_the_limit(kit: Kit) -> None:
    kit.enqueue(b"a", b"b", b"c", attempts_allowed=1)
    kit.fail_for_good(kit.dequeue())
    kit.advance(1000)
    assert kit.shard.purge(QUEUE, 1, FAILED, 1000, 10) == 0  # updated_at == cutoff
    kit.advance(1)
    assert kit.shard.purge(QUEUE, 1, FAILED, 1000, 2) == 2
    assert kit.count(FAILED) == 1


# ---------------------------------------------------------------- clock and health


@check
def clock_offset_moves_now_and_the_stored_times(kit: Kit) -> None:
    before = kit.shard.now_ms()
    kit.shard.clock_offset_ms += 2500
    with kit.timed() as window:
        (local_id,) = kit.enqueue(b"x")
    assert window.lo >= before + 2500
    assert window.holds(kit.record(local_id).created_at_ms)


@check
def ping_answers_and_close_is_idempotent_per_handle(kit: Kit) -> None:
    spare = kit.open()
    spare.ping()
    spare.close()
    spare.close()
    kit.shard.ping()  # closing one handle leaves the others working
    assert kit.enqueue(b"x") == [1]


# ---------------------------------------------------------------- unknown queues

_UNKNOWN_QUEUE_CALLS: dict[str, Callable[[Shard], Any]] = {
    "enqueue": lambda s: s.enqueue("nope", [NewJob(b"x")]),
    "enqueue-empty": lambda s: s.enqueue("nope", []),
    "dequeue": lambda s: s.dequeue("nope", 1, 5, new_claim(SOURCE)),
    "dequeue-limit-zero": lambda s: s.dequeue("nope", 1, 0, new_claim(SOURCE)),
    "dequeue-dry-run": lambda s: s.dequeue("nope", 1, 5, None),
    "ack": lambda s: s.ack("nope", [Ack(1, 1, by_source())], []),
    "ack-failure": lambda s: s.ack("nope", [], [Ack(1, 1, by_source())]),
    "ack-empty": lambda s: s.ack("nope", [], []),
    "ack-and-dequeue": lambda s: s.ack_and_dequeue("nope", [], [], 1, 5, new_claim(SOURCE)),
    "checkpoint": lambda s: s.checkpoint("nope", [Checkpoint(1, 1, by_source())]),
    "checkpoint-empty": lambda s: s.checkpoint("nope", []),
    "lookup": lambda s: s.lookup("nope", [(1, 1)], False),
    "lookup-empty": lambda s: s.lookup("nope", [], True),
    "count": lambda s: s.count("nope", PENDING, [1, 2], False, 10, None),
    "count-capped-at-zero": lambda s: s.count("nope", PENDING, [1], False, 0, None),
    "count-filtered": lambda s: s.count("nope", PENDING, [1], False, 10, lambda b: True),
    "scan": lambda s: s.scan("nope", PENDING, {1: None}, False, 10, None),
    "scan-filtered": lambda s: s.scan("nope", PENDING, {1: None}, False, 10, lambda b: True),
    "scan-empty": lambda s: s.scan("nope", PENDING, {}, False, 10, None),
    "retry-failed": lambda s: s.retry_failed("nope", 1, 1, None, 10),
    "delete-jobs": lambda s: s.delete_jobs("nope", PENDING, 1, 10, None),
    "delete-jobs-filtered": lambda s: s.delete_jobs("nope", PENDING, 1, 10, lambda b: True),
    "reclaim-expired": lambda s: s.reclaim_expired("nope", 1, 1000, 10),
    "purge": lambda s: s.purge("nope", 1, SUCCEEDED, 1000, 10),
}


def _unknown_queue_check(call: Callable[[Shard], Any]) -> Callable[[Kit], None]:
    def run(kit: Kit) -> None:
        error = raises(QueueNotFound, lambda: call(kit.shard))
        assert error.queue == "nope"
        assert kit.shard.queue_names() == {QUEUE}  # and the call created nothing

    return run


for _name, _call in _UNKNOWN_QUEUE_CALLS.items():
    register(f"unknown-queue-{_name}", _unknown_queue_check(_call))


# ---------------------------------------------------------------- shard isolation


@check
def shards_of_one_backend_keep_their_own_queues(kit: Kit) -> None:
    other = kit.open(OTHER)
    assert other.queue_names() == set()
    raises(QueueNotFound, lambda: kit.enqueue(b"x", shard=other))
    other.create_queue(QUEUE)
    other.create_queue("only_other")
    assert kit.shard.queue_names() == {QUEUE}
    kit.enqueue(b"main")
    other.delete_queue(QUEUE)
    assert other.queue_names() == {"only_other"}
    assert kit.shard.queue_names() == {QUEUE} and kit.count() == 1


@check
def shards_of_one_backend_keep_their_own_jobs(kit: Kit) -> None:
    other = kit.open(OTHER)
    other.create_queue(QUEUE)
    kit.enqueue(b"a1", b"a2", attempts_allowed=1)
    assert other.count(QUEUE, PENDING, [1], False, 10, None) == 0
    assert kit.enqueue(b"b1", shard=other, attempts_allowed=1) == [1]  # ids are per shard
    assert [j.body for j in other.dequeue(QUEUE, 1, 10, new_claim(SOURCE))] == [b"b1"]
    (job,) = kit.dequeue(1)
    assert other.ack(QUEUE, [Ack(1, job.local_id, held(job))], []) == 0
    assert other.lookup(QUEUE, [(1, 2)], True) == []
    assert other.delete_jobs(QUEUE, PENDING, 1, 10, None) == 0
    other.clock_offset_ms = kit.shard.clock_offset_ms + HOUR_MS
    assert other.reclaim_expired(QUEUE, 1, 1000, 10).failed == 1  # its own job only
    assert [r.state for r in kit.records([1, 2])] == [IN_PROGRESS, PENDING]
    assert [r.body for r in kit.shard.lookup(QUEUE, [(1, 1), (1, 2)], True)] == [b"a1", b"a2"]


# ---------------------------------------------------------------- large batches


@check
def batch_of_1500_jobs_moves_through_every_primitive(kit: Kit) -> None:
    n = 1500  # past id-list chunks (SQL) and script chunking (Redis)
    ids = kit.enqueue(*[b"%d" % i for i in range(n)], attempts_allowed=3)
    assert ids == list(range(1, n + 1))
    jobs = kit.dequeue(2 * n)
    assert [j.local_id for j in jobs] == ids
    assert (kit.count(), kit.count(IN_PROGRESS)) == (0, n)
    kit.advance(60_000)
    assert kit.shard.reclaim_expired(QUEUE, 1, 30_000, 2 * n).retried == n  # index complete
    jobs = kit.dequeue(2 * n)
    assert kit.checkpoint(*[Checkpoint(1, j.local_id, held(j)) for j in jobs]) == n
    assert kit.ack([Ack(1, j.local_id, held(j)) for j in jobs]) == n
    assert len(kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)) == n
    assert kit.count(SUCCEEDED) == n
    assert kit.shard.delete_jobs(QUEUE, SUCCEEDED, 1, 2 * n, None) == n


# ---------------------------------------------------------------- concurrency


@check
def concurrency_four_dequeuers_claim_every_job_exactly_once(kit: Kit) -> None:
    ids: list[int] = []
    for start in range(0, 2000, 500):
        ids += kit.enqueue(*[b"%d" % i for i in range(start, start + 500)])
    claimed: Counter = Counter()
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(2000):  # bounded
            jobs = kit.dequeue(23)
            if not jobs:
                return
            with lock:
                claimed.update(j.local_id for j in jobs)

    run_threads([worker] * 4)
    assert sorted(claimed) == sorted(ids) and set(claimed.values()) == {1}
    assert kit.count(IN_PROGRESS, cap=10_000) == 2000


@check
def concurrency_acks_racing_the_reclaimer_move_each_job_once(kit: Kit) -> None:
    kit.enqueue(*[b"x"] * 400, attempts_allowed=3)
    jobs = kit.dequeue(400)
    kit.advance(60_000)
    acked: list[int] = []
    reclaimed: list[int] = []

    def acker() -> None:
        for start in range(0, 400, 10):
            acks = [Ack(1, j.local_id, by_source()) for j in jobs[start : start + 10]]
            acked.append(retried(functools.partial(kit.ack, acks)))

    def reclaimer() -> None:
        for _ in range(100):  # bounded
            counts = retried(lambda: kit.shard.reclaim_expired(QUEUE, 1, 30_000, 7))
            reclaimed.append(counts.retried + counts.failed)

    run_threads([acker, reclaimer])
    succeeded, pending = kit.count(SUCCEEDED, cap=1000), kit.count(cap=1000)
    assert sum(acked) == succeeded and sum(reclaimed) == pending
    assert succeeded + pending == 400


@check
def concurrency_enqueuers_get_distinct_ids_matching_their_jobs(kit: Kit) -> None:
    results: list[tuple[list[int], list[bytes]]] = []

    def producer(worker: int) -> None:
        for batch in range(5):
            bodies = [b"w%d-b%d-%d" % (worker, batch, i) for i in range(37)]
            jobs = [NewJob(body=b, priority=1 + i % 2) for i, b in enumerate(bodies)]
            results.append((kit.shard.enqueue(QUEUE, jobs), bodies))

    run_threads([functools.partial(producer, w) for w in range(4)])
    seen: set[tuple[int, int]] = set()
    for ids, bodies in results:
        refs = [(1 + i % 2, local_id) for i, local_id in enumerate(ids)]
        assert not seen & set(refs)
        seen |= set(refs)
        found = {(r.priority, r.local_id): r.body for r in kit.shard.lookup(QUEUE, refs, True)}
        assert [found[ref] for ref in refs] == bodies
    assert len(seen) == 4 * 5 * 37
