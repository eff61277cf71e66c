"""The per-queue ledger: counters of every transition that brings jobs in or takes them out,
kept per queue and shard by the storage in the same transaction (script call) as the jobs
they count, and the rule that says when the books balance.

The books of a queue on a shard balance when `enqueued - deleted - purged` equals the jobs
present in all states. Every other counter (deduplicated, dequeued, succeeded, failed,
retried, reclaimed) moves jobs between states, or stores nothing, and is there for operators.
A `LedgerBook` is read in one snapshot (one read transaction, one script call), so the
counters and the state counts it holds agree even while the queue is busy. The counter names
(`COUNTERS`, what each one counts) are in pinlater.common.ledger_counters, shared with the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pinlater.common.ledger_counters import COUNTERS
from pinlater.storage.models import JobState


def deltas(**changes: int) -> dict[str, int]:
    """A full counter row (every counter, 0 where not given); unknown names are a bug."""
    unknown = set(changes) - set(COUNTERS)
    if unknown:
        raise ValueError(f"unknown ledger counters {sorted(unknown)}")
    return {name: int(changes.get(name, 0)) for name in COUNTERS}


@dataclass(frozen=True, slots=True)
class LedgerBook:
    """One queue's books on one shard, read in one snapshot: the counters, and the jobs
    present per state (summed over priorities)."""

    counters: Mapping[str, int]
    states: Mapping[JobState, int] = field(default_factory=dict)

    @property
    def present(self) -> int:
        """Jobs present in all states."""
        return sum(self.states.values())

    @property
    def expected(self) -> int:
        """Jobs the counters say are present: enqueued - deleted - purged."""
        c = self.counters
        return c.get("enqueued", 0) - c.get("deleted", 0) - c.get("purged", 0)

    @property
    def imbalance(self) -> int:
        """expected - present: jobs that went missing (> 0) or appeared from nowhere (< 0)."""
        return self.expected - self.present

    @property
    def balanced(self) -> bool:
        return self.imbalance == 0

    def as_dict(self) -> dict[str, object]:
        """A plain mapping for JSON (the admin API, the CLI)."""
        return {
            "counters": {name: int(self.counters.get(name, 0)) for name in COUNTERS},
            "states": {s.name.lower(): int(self.states.get(s, 0)) for s in JobState},
            "present": self.present,
            "expected": self.expected,
            "imbalance": self.imbalance,
            "balanced": self.balanced,
        }


def book_from(counters: Mapping[str, int], states: Mapping[int, int]) -> LedgerBook:
    """A book from raw counter and state-count mappings (missing counters are 0)."""
    return LedgerBook(
        counters={name: int(counters.get(name, 0) or 0) for name in COUNTERS},
        states={JobState(int(s)): int(n) for s, n in states.items() if int(n)},
    )
