"""The shard test kit: the storage contract's rules, written once, checked on every backend.

`contract.py` and `docs/semantics.md` state what a `Shard` does; this package is the executable
form of those rules at the shard seam. Each rule is one named check, in a module per operation:

    queues          create, delete, case, priority levels
    enqueue         ids and the fields a new job starts with
    unique          keyed enqueue: held keys, windows, repeats, purge_keys, concurrent callers
    bodies          body bytes and the size cap, custom statuses and their cap
    dequeue         eligibility, order, claims, dry runs
    budgets         reply budgets: a dequeue claims what fits, a lookup's bodies all or none
    acks            ack success and failure, fencing, ack_and_dequeue
    checkpoint      fields, claim extension, move_to_pending
    reads           lookup, count, scan, body filters
    bulk            retry_failed, delete_jobs, a 1500-job batch
    janitor         reclaim_expired, purge
    shards          clock offset, ping and close, isolation between shards
    unknown_queues  QueueNotFound from every primitive
    races           concurrent dequeuers, enqueuers, acks against the reclaimer
    settings        the runtime queue settings document: empty, compare-and-set, bytes
    ledger          the per-queue books: what each transition counts, balance, reset
    fifo            FIFO dequeue: heads in order, the in-flight cap, heads that come back
    prefetch        the broker's reservations: prefetch, hand_out, release, their expiry
    leases          the broker's leases: one owner, renewal, expiry, release, listing

A check that pins a docs/semantics.md row names it (`@check(rule="T-ack-success")`), so a
row's id leads to its shard-level checks as well as to its conformance tests; checks of rules
the page does not state (shard isolation, say) name none. `registry` holds the checks,
`kit` what they work with (`Kit`, `Storage`, the shared constants and claim helpers).

`exercise` turns the checks into one pytest test parametrized by check name, as River's
`riverdrivertest.Exercise` runs one suite over every database driver. (The wire-level
conformance suite in tests/conformance checks the same rules through the server, sharded layer
included.) A backend's shard test module calls it once and keeps only its dialect-specific
tests:

    @contextlib.contextmanager
    def sqlite_storage(tmp_path):          # parameters are pytest fixtures
        options = SQLiteBackend.parse_options({"data_dir": str(tmp_path)}, "backend")
        yield Storage(
            new_backend=lambda limits: SQLiteBackend(options, limits),
            spec=lambda name: SQLiteShardSpec(name=name),
        )

    test_shard_contract = exercise(sqlite_storage, Capabilities())

pytest then shows one test id per check (`test_shard_contract[ack-stale-claim-is-a-noop]`),
marked `rule(...)` with the rows it pins. A fourth backend adds itself the same way: one
storage factory (fresh storage per check: a temp dir, or shard names no other check uses on a
shared server) and one `exercise` call.

Time: every backend honours `Shard.clock_offset_ms`, so checks move time only through it and
assert times within a window of `now_ms()` reads taken around the call (exact when the clock
stands still). Checks of exact boundaries need a clock that stands still (`Capabilities`).

The package imports nothing outside `pinlater.storage` (and pytest only inside `exercise`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from pinlater.storage.shard_kit.kit import KIT_LIMITS, MAIN, OTHER, QUEUE, SOURCE, Kit, Storage
from pinlater.storage.shard_kit.registry import (
    CHECKS,
    Capabilities,
    Check,
    check,
    checks_for,
    register,
)

#: the modules of checks, imported (so registered) in this order, the order the checks run in
CHECK_MODULES = tuple(
    importlib.import_module(f"{__name__}.{module}")
    for module in (
        "queues",
        "enqueue",
        "unique",
        "bodies",
        "dequeue",
        "budgets",
        "acks",
        "checkpoint",
        "reads",
        "stats",
        "bulk",
        "janitor",
        "shards",
        "unknown_queues",
        "races",
        "settings",
        "ledger",
        "fifo",
        "prefetch",
        "leases",
    )
)

__all__ = [
    "CHECKS",
    "CHECK_MODULES",
    "KIT_LIMITS",
    "MAIN",
    "OTHER",
    "QUEUE",
    "SOURCE",
    "Capabilities",
    "Check",
    "Kit",
    "Storage",
    "check",
    "checks_for",
    "exercise",
    "register",
    "run",
]


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
    params = [
        pytest.param(c, id=c.name, marks=[pytest.mark.rule(*c.rules)] if c.rules else [])
        for c in checks_for(capabilities)
    ]
    return pytest.mark.parametrize("check", params)(test_shard_contract)
