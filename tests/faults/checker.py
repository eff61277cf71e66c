"""The invariants of a fault run, checked from the history plus the final stored state.

Input: every history record (see ledger.py) and `final`, the stored state after the drain
phase: descriptor -> JobInfo (with body) for every job the queue still holds, looked up by
descriptor and found by scanning every state. The checks (reliability-research.md 5.3):

1. no loss: every job whose enqueue returned ok has a stored copy that is SUCCEEDED, or FAILED
   with no attempts left (a "copy": the server may store a job twice when a commit reply is lost
   and it retries on another shard, so a job id may have several descriptors);
2. no phantom: every delivered or stored body carries an id that some enqueue attempted;
3. single terminal state: nothing is left PENDING / IN_PROGRESS after the drain; a SUCCEEDED
   job's stored claim is one that was delivered and acked (otherwise a stale ack, or an ack nobody
   sent, finished it); no dequeue that began after the effective success ack delivered it again;
4. attempts arithmetic: 0 <= remaining <= allowed; workers only send success acks, so every
   delivery of a job but the last costs exactly one attempt (lease expiry): used == deliveries-1
   for SUCCEEDED, used == allowed for FAILED. With `strict_attempts=False` (runs where a kill can
   hide a delivery: a reply lost in flight, a worker killed before it wrote its record) only
   used >= deliveries-1 is required;
5. at-least-once cost: deliveries per job id (distinct claims), reported as a distribution;
6. fencing: success acks sent with a claim other than the job's final claim are counted as stale;
   the final claim check in 3 shows they finished nothing. Acks the client reported as `fail`
   (not sent) that nevertheless finished their job are listed in `fail_but_applied`: that is a
   client misreport, not a queue fault. Scenarios that park a worker past its
   lease check the fence directly as well (see harness.stale_ack_probe).
7. the books: with `books` (the queue's ledger per shard, read from the storage after the
   drain), every shard's books balance (enqueued - deleted - purged equals the jobs present)
   and the jobs they count present are exactly the jobs of `final`.
Resource bounds (8) are measured by the harness, which owns the server processes.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pinlater.storage.ledger import LedgerBook
from tests.faults.ledger import job_id
from worker_sdk.models import JobInfo, JobState

OPEN_STATES = (JobState.PENDING, JobState.IN_PROGRESS)


@dataclass
class Report:
    attempted: int = 0
    enq_ok: int = 0
    enq_fail: int = 0
    enq_unknown: int = 0
    recovered: int = 0  # fail/unknown enqueues whose job was nevertheless stored
    acked: int = 0  # job ids with a SUCCEEDED copy
    failed_exhausted: int = 0
    lost: list[str] = field(default_factory=list)
    missing_descriptors: list[str] = field(default_factory=list)  # ok descriptors not stored
    phantoms: list[str] = field(default_factory=list)
    not_drained: list[str] = field(default_factory=list)
    stored_copies_extra: int = 0  # jobs stored more than once (duplicate enqueues)
    dup_deliveries: int = 0
    max_deliveries: int = 0
    delivery_histogram: dict[int, int] = field(default_factory=dict)
    stale_acks: int = 0
    #: acks the client reported as certainly failed (`fail`, not `unknown`) that took effect
    fail_but_applied: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not (self.lost or self.phantoms or self.not_drained or self.violations)

    def problems(self) -> str:
        parts = []
        for name in ("lost", "missing_descriptors", "phantoms", "not_drained", "violations"):
            items = getattr(self, name)
            if items:
                parts.append(f"{name} ({len(items)}): {sorted(items)[:10]}")
        return "; ".join(parts) or "none"

    def ledger_fields(self) -> dict[str, Any]:
        return {
            "enq_ok": self.enq_ok,
            "enq_fail": self.enq_fail,
            "enq_unknown": self.enq_unknown,
            "recovered": self.recovered,
            "acked": self.acked,
            "lost": len(self.lost),
            "dup_deliveries": self.dup_deliveries,
            "max_deliveries": self.max_deliveries,
        }


def check(
    records: list[dict[str, Any]],
    final: dict[str, JobInfo],
    *,
    strict_attempts: bool = True,
    books: Mapping[str, LedgerBook] | None = None,
) -> Report:
    """Evaluate every invariant (the books too, when given); the Report lists each violation
    found."""
    report = Report()
    enq = _enqueue_outcomes(records, report)
    deliveries = _deliveries(records)
    desc_job = _descriptor_jobs(records, final)
    copies: dict[str, set[str]] = collections.defaultdict(set)
    for descriptor, job in desc_job.items():
        if job is not None:
            copies[job].add(descriptor)

    _check_loss(enq, copies, final, records, report)
    _check_phantoms(enq, desc_job, report)
    _check_terminal(records, deliveries, final, report)
    _check_attempts(deliveries, final, strict_attempts, report)
    _count_deliveries(deliveries, desc_job, enq, report)
    if books is not None:
        _check_books(books, final, report)
    report.stored_copies_extra = sum(
        len([d for d in descs if d in final]) - 1
        for descs in copies.values()
        if len([d for d in descs if d in final]) > 1
    )
    return report


def _enqueue_outcomes(records, report: Report) -> dict[str, str]:
    """job id -> best enqueue outcome (ok beats unknown beats fail)."""
    rank = {"fail": 0, "unknown": 1, "ok": 2}
    best: dict[str, str] = {}
    for r in records:
        if r["op"] == "enqueue" and rank[r["outcome"]] >= rank[best.get(r["job"], "fail")]:
            best[r["job"]] = r["outcome"]
    counts = collections.Counter(best.values())
    report.attempted = len(best)
    report.enq_ok, report.enq_fail, report.enq_unknown = (
        counts["ok"],
        counts["fail"],
        counts["unknown"],
    )
    return best


def _deliveries(records) -> dict[str, dict[str, dict[str, Any]]]:
    """descriptor -> claim -> the delivery record (distinct claims are distinct deliveries)."""
    out: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for r in records:
        if r["op"] == "deliver" and r.get("claim"):
            out[r["descriptor"]].setdefault(r["claim"], r)
    return out


def _descriptor_jobs(records, final: dict[str, JobInfo]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for r in records:
        if r.get("descriptor") and r.get("job") and r["outcome"] == "ok":
            out[r["descriptor"]] = r["job"]
    for descriptor, info in final.items():
        found = job_id(info.body)
        if found is not None or descriptor not in out:
            out[descriptor] = found if found is not None else out.get(descriptor)
    return out


def _is_done(info: JobInfo) -> bool:
    """Finished for good: succeeded, or failed with no attempt left."""
    return info.state == JobState.SUCCEEDED or (
        info.state == JobState.FAILED and info.attempts_remaining == 0
    )


def _check_loss(enq, copies, final, records, report: Report) -> None:
    for r in records:
        if r["op"] == "enqueue" and r["outcome"] == "ok" and r["descriptor"] not in final:
            report.missing_descriptors.append(r["descriptor"])
    for job, outcome in enq.items():
        infos = [final[d] for d in copies.get(job, ()) if d in final]
        _count_job_outcome(job, outcome, infos, report)


def _count_job_outcome(job: str, outcome: str, infos: list[JobInfo], report: Report) -> None:
    """One enqueued job's fate over its stored copies: acked, failed for good, lost (accepted
    and never finished) or recovered (refused, yet stored)."""
    done = [i for i in infos if _is_done(i)]
    if any(i.state == JobState.SUCCEEDED for i in infos):
        report.acked += 1
    elif done:
        report.failed_exhausted += 1
    if outcome == "ok" and not done:
        report.lost.append(job)
    if outcome != "ok" and infos:
        report.recovered += 1


def _check_books(books: Mapping[str, LedgerBook], final: dict[str, JobInfo], report: Report):
    """Invariant 7: each shard's books balance, and count the jobs the queue holds."""
    for shard, book in sorted(books.items()):
        if not book.balanced:
            report.violations.append(f"the books of shard {shard} do not balance: {book.as_dict()}")
    present = sum(book.present for book in books.values())
    if present != len(final):
        report.violations.append(
            f"the books count {present} jobs present, the queue holds {len(final)}"
        )


def _check_phantoms(enq, desc_job, report: Report) -> None:
    for descriptor, job in desc_job.items():
        if job is None or job not in enq:
            report.phantoms.append(f"{descriptor}={job}")


def _check_terminal(records, deliveries, final, report: Report) -> None:
    acks = collections.defaultdict(list)  # (descriptor, claim) -> success acks sent
    for r in records:
        if r["op"] == "ack":
            acks[(r["descriptor"], r["claim"])].append(r)
    # acks a worker began to send but did not live to record (kill -9 mid-call)
    sending = {(r["descriptor"], r["claim"]) for r in records if r["op"] == "ack_sending"}
    for descriptor, info in final.items():
        if info.state in OPEN_STATES:
            report.not_drained.append(f"{descriptor}:{info.state.name}")
        if info.state == JobState.SUCCEEDED:
            _check_success(descriptor, info, acks, sending, deliveries, report)
    for (descriptor, claim), sent in acks.items():
        info = final.get(descriptor)
        if info is not None and claim != info.claim:
            report.stale_acks += sum(1 for r in sent if r["outcome"] == "ok")


def _check_success(descriptor, info: JobInfo, acks, sending, deliveries, report: Report) -> None:
    """A SUCCEEDED job: an ack under its final claim was sent, and no dequeue that began after
    that ack completed delivered it again."""
    effective = acks.get((descriptor, info.claim))
    if not effective and (descriptor, info.claim) in sending:
        return  # its worker died after sending the ack, before recording the outcome
    if not effective:
        report.violations.append(
            f"{descriptor} SUCCEEDED under claim {info.claim} that no ack sent"
        )
        return
    if all(r["outcome"] == "fail" for r in effective):
        report.fail_but_applied.append(descriptor)
    acked_at = min(r["complete"] for r in effective)
    for claim, delivery in deliveries.get(descriptor, {}).items():
        if claim != info.claim and delivery["invoke"] > acked_at:
            report.violations.append(
                f"{descriptor} delivered again (claim {claim}) by a dequeue that began "
                f"after its success ack completed"
            )


def _check_attempts(deliveries, final, strict: bool, report: Report) -> None:
    for descriptor, info in final.items():
        used = info.attempts_allowed - info.attempts_remaining
        seen = len(deliveries.get(descriptor, {}))
        if not 0 <= info.attempts_remaining <= info.attempts_allowed:
            report.violations.append(
                f"{descriptor} attempts_remaining "
                f"{info.attempts_remaining} of {info.attempts_allowed}"
            )
            continue
        if info.state == JobState.SUCCEEDED:
            ok = used == seen - 1 if strict else used >= seen - 1
        elif info.state == JobState.FAILED:
            ok = used == info.attempts_allowed and (seen <= info.attempts_allowed)
            ok = ok and (seen == info.attempts_allowed or not strict)
        else:
            continue
        if not ok:
            report.violations.append(
                f"{descriptor} {info.state.name}: {used} attempts used "
                f"for {seen} observed deliveries"
            )


def _count_deliveries(deliveries, desc_job, enq, report: Report) -> None:
    per_job: collections.Counter = collections.Counter()
    for descriptor, claims in deliveries.items():
        job = desc_job.get(descriptor)
        if job is not None:
            per_job[job] += len(claims)
    histogram = collections.Counter(per_job.values())
    report.delivery_histogram = dict(sorted(histogram.items()))
    report.dup_deliveries = sum(n - 1 for n in per_job.values() if n > 1)
    report.max_deliveries = max(per_job.values(), default=0)


def hidden_deliveries(records: list[dict[str, Any]], final: dict[str, JobInfo]) -> int:
    """Attempts charged beyond what the observed deliveries explain: deliveries whose reply
    never reached a client (lost in flight) or whose worker died before recording them."""
    deliveries = _deliveries(records)
    hidden = 0
    for descriptor, info in final.items():
        used = info.attempts_allowed - info.attempts_remaining
        seen = len(deliveries.get(descriptor, {}))
        if info.state == JobState.SUCCEEDED:
            hidden += max(0, used - (seen - 1))
        elif info.state == JobState.FAILED:
            hidden += max(0, info.attempts_allowed - seen)
    return hidden
