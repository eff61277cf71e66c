"""Hypothesis state machine: random enqueue / dequeue / ack / stale ack / checkpoint / clock /
janitor sequences against each backend and a small in-memory model, checking they agree.

Invariants after every step: every job is in exactly the state the model says (none lost, none in
two states), attempts arithmetic holds, stale acks changed nothing, counts match the model, and
the ledger (`A-...` rows) balances on every shard with every counter equal to the model's.
Time moves in 10-second steps and the claim timeout and the purge TTLs are 65 s, so the few
real milliseconds that pass during a run can never put a job on a timeout boundary.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from pinlater.storage.ledger import COUNTERS
from tests.conformance.api import WORKER

CLAIM_TIMEOUT_MS = 65_000
TTL_MS = 65_000
KEYS = ("k0", "k1", "k2", "k3")
STEP_MS = 10_000
PENDING, IN_PROGRESS, SUCCEEDED, FAILED = range(4)


# Which job a rule acts on is drawn as a plain index, and no rule has a precondition: which of
# several eligible jobs a dequeue hands out is the backend's choice (the broker's buffers and a
# multi-cluster fan-out choose differently from run to run), so draws that depended on the model's
# state would change shape between runs and Hypothesis would call the strategy flaky.
PICK = st.integers(0, 1 << 16)


def picked(candidates: list[str], pick: int) -> str | None:
    return candidates[pick % len(candidates)] if candidates else None


@dataclass
class ModelJob:
    state: int
    allowed: int
    remaining: int
    run_after: int  # in model time (ms since the machine started)
    priority: int
    updated: int = 0
    claim: str | None = None
    old_claims: tuple = ()


class QueueMachine(RuleBasedStateMachine):
    api = None  # set by the test

    def __init__(self):
        super().__init__()
        self.queue = self.api.new_queue("sm")
        self.jobs: dict[str, ModelJob] = {}
        self.t = 0  # model time
        self.books: Counter[str] = Counter()  # the ledger the model expects
        self.keys: dict[str, str] = {}  # unique key -> the descriptor holding it

    @initialize()
    def start(self):
        self.t = 0

    # ---- helpers
    def eligible(self, priority=None):
        return [
            d
            for d, j in self.jobs.items()
            if j.state == PENDING
            and j.run_after <= self.t
            and (priority is None or j.priority == priority)
        ]

    def in_progress(self):
        return sorted(d for d, j in self.jobs.items() if j.state == IN_PROGRESS)

    def fail(self, job: ModelJob, delay: int, counted: bool = True):
        if counted:
            self.books["retried" if job.remaining > 1 else "failed"] += 1
        self._fail(job, delay)

    def _fail(self, job: ModelJob, delay: int):
        if job.remaining > 1:
            job.state, job.remaining, job.run_after = PENDING, job.remaining - 1, self.t + delay
            job.old_claims += (job.claim,)
            job.claim = None
        else:
            job.state, job.remaining = FAILED, 0
        job.updated = self.t

    # ---- rules
    @rule(
        n=st.integers(1, 4),
        attempts=st.integers(1, 3),
        priority=st.integers(1, 2),
        delay_steps=st.sampled_from([0, 0, 1, 3]),
    )
    def enqueue(self, n, attempts, priority, delay_steps):
        run_after = self.t + delay_steps * STEP_MS
        base = self.api.now()
        wire_run_after = base + delay_steps * STEP_MS if delay_steps else None
        job = {"body": b"x", "numAttemptsAllowed": attempts, "priority": priority}
        if wire_run_after is not None:
            job["runAfterTimestampMillis"] = wire_run_after
        for d in self.api.enqueue(self.queue, *[dict(job) for _ in range(n)]):
            self.jobs[d] = ModelJob(PENDING, attempts, attempts, run_after, priority, self.t)
        self.books["enqueued"] += n

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))
    def enqueue_keyed(self, keys):
        """Keyed jobs (the window, 24 h, outlasts a run): a held or repeated key stores
        nothing and counts as deduplicated."""
        jobs = [{"body": b"k", "uniqueKey": key, "numAttemptsAllowed": 2} for key in keys]
        answered = self.api.enqueue(self.queue, *jobs)
        for key, d in zip(keys, answered, strict=True):
            if key in self.keys:
                assert d == self.keys[key]
                self.books["deduplicated"] += 1
            else:
                self.keys[key] = d
                self.jobs[d] = ModelJob(PENDING, 2, 2, self.t, 1, self.t)
                self.books["enqueued"] += 1

    @rule(state=st.sampled_from([PENDING, IN_PROGRESS, SUCCEEDED, FAILED]))
    def delete_jobs(self, state):
        doomed = [d for d, j in self.jobs.items() if j.state == state and j.priority == 1]
        assert self.api.delete_jobs(self.queue, state) == len(doomed)
        for d in doomed:
            del self.jobs[d]
        self.books["deleted"] += len(doomed)

    @rule(limit=st.integers(1, 6))
    def dequeue(self, limit):
        eligible_before = set(self.eligible())
        high = set(self.eligible(priority=1))
        response = self.api.dequeue(self.queue, limit)
        got = response.jobMetadata or {}
        assert set(got) <= eligible_before, "dequeued a job that was not eligible"
        assert len(got) == min(limit, len(eligible_before))
        if len(got) < len(high):
            assert set(got) <= high, "a priority-2 job came before an eligible priority-1 job"
        for d, meta in got.items():
            job = self.jobs[d]
            assert (meta.attemptsAllowed, meta.attemptsRemaining) == (job.allowed, job.remaining)
            job.state, job.claim, job.updated = IN_PROGRESS, meta.claimDescriptor, self.t
        self.books["dequeued"] += len(got)

    @rule(
        pick=PICK,
        success=st.booleans(),
        delay_steps=st.sampled_from([0, 1]),
        with_claim=st.booleans(),
    )
    def ack(self, pick, success, delay_steps, with_claim):
        d = picked(self.in_progress(), pick)
        if d is None:
            return
        job = self.jobs[d]
        info = {"claimDescriptor": job.claim} if with_claim else {}
        if success:
            self.api.ack(self.queue, succeeded=[(d, info)])
            job.state, job.updated = SUCCEEDED, self.t
            self.books["succeeded"] += 1
        else:
            info["retryDelayMillis"] = delay_steps * STEP_MS
            self.api.ack(self.queue, failed=[(d, info)])
            self.fail(job, delay_steps * STEP_MS)

    @rule(pick=PICK, success=st.booleans())
    def stale_ack(self, pick, success):
        stale = sorted(d for d, j in self.jobs.items() if j.old_claims)
        # prefer jobs a newer claim holds right now: that is where a stale ack would do harm
        held = [d for d in stale if self.jobs[d].state == IN_PROGRESS]
        d = picked(held or stale, pick)
        if d is None:
            return
        info = {"claimDescriptor": self.jobs[d].old_claims[-1]}
        if success:
            self.api.ack(self.queue, succeeded=[(d, info)])
        else:
            self.api.ack(self.queue, failed=[(d, info)])
        # the model does not change: a stale claim is fenced off

    @rule(pick=PICK, move=st.booleans())
    def checkpoint(self, pick, move):
        d = picked(self.in_progress(), pick)
        if d is None:
            return
        job = self.jobs[d]
        self.api.checkpoint(self.queue, (d, {"moveToPending": move}))
        job.updated, job.run_after = self.t, self.t
        if move:
            job.state = PENDING
            job.old_claims += (job.claim,)
            job.claim = None

    @rule(steps=st.integers(1, 4))
    def advance_clock(self, steps):
        self.api.advance(steps * STEP_MS)
        self.t += steps * STEP_MS

    @rule()
    def janitor(self):
        self.api.janitor(
            claim_timeout_seconds=CLAIM_TIMEOUT_MS / 1000,
            succeeded_ttl_seconds=TTL_MS / 1000,
            failed_ttl_seconds=TTL_MS / 1000,
        )
        for d, job in list(self.jobs.items()):
            if job.state in (SUCCEEDED, FAILED) and self.t - job.updated > TTL_MS:
                del self.jobs[d]
                self.books["purged"] += 1
            elif job.state == IN_PROGRESS and self.t - job.updated > CLAIM_TIMEOUT_MS:
                self.fail(job, 0, counted=False)
                self.books["reclaimed"] += 1

    # ---- invariants
    @invariant()
    def books_balance_and_agree_with_the_model(self):
        books = self.api.store.ledger(self.queue)
        assert all(b.balanced for b in books.values()), {n: b.as_dict() for n, b in books.items()}
        found = {name: sum(b.counters[name] for b in books.values()) for name in COUNTERS}
        assert found == {name: self.books[name] for name in COUNTERS}, (found, dict(self.books))
        assert sum(b.present for b in books.values()) == len(self.jobs)

    @invariant()
    def storage_agrees_with_model(self):
        if not self.jobs:
            return
        found = self.api.lookup(list(self.jobs))
        assert set(found) == set(self.jobs), "a job was lost"
        for d, job in self.jobs.items():
            info = found[d]
            assert info.jobState == job.state, (d, info.jobState, job.state)
            assert info.attemptsRemaining == job.remaining, (d, info, job)
            assert info.attemptsAllowed == job.allowed
            assert 0 <= info.attemptsRemaining <= info.attemptsAllowed
            if job.state == IN_PROGRESS:
                assert info.claimDescriptor == job.claim
                assert info.claimDescriptor.endswith(":" + WORKER)
        for state in (PENDING, IN_PROGRESS, SUCCEEDED, FAILED):
            expected = sum(1 for j in self.jobs.values() if j.state == state)
            total = self.api.count(self.queue, state) + self.api.count(
                self.queue, state, countFutureJobs=True
            )
            assert total == expected, (state, total, expected)


@pytest.mark.rule(
    "T-enqueue",
    "T-dequeue",
    "T-ack-success",
    "T-ack-failure-retry",
    "T-ack-failure-final",
    "T-claim-expiry",
    "T-checkpoint",
    "T-checkpoint-to-pending",
    "C-claim-fences",
    "C-source-match",
    "D-priority-order",
    "D-limit",
    "N-count",
    "A-ledger-counts",
    "A-books-balance",
)
def test_backend_agrees_with_the_model(api):
    QueueMachine.api = api
    examples = int(os.environ.get("PINLATER_HYPOTHESIS_EXAMPLES", "15"))
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
