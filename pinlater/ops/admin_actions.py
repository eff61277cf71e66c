"""The actions of the admin API: queue create/delete, pause/resume and runtime settings, retry
failed jobs, delete jobs and purge a state. Each takes the decoded JSON body, checks every field
(InvalidRequest naming it), acts through the sharded store and says what it did; each is logged
with who asked.

Destructive actions count first: `delete-jobs` and `purge` are dry runs (a count of what would
go) unless the body says `"dry_run": false`, and deleting a queue needs the admin password
again (checked by the same PasswordGuard as deleteQueue, so failures share one budget).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.handler import validation as check
from pinlater.handler.body_filter import compile_body_filter
from pinlater.handler.password_guard import PasswordGuard
from pinlater.ops.admin_reads import AdminContext
from pinlater.ops.job_view import STATE_NAMES, state_by_name
from pinlater.ops.metrics import Metrics
from pinlater.storage.models import JobState

log = logging.getLogger("pinlater.admin")

#: a purge stops after this long and says it is not done (the caller repeats it)
PURGE_SECONDS = 5.0


class AdminActions:
    def __init__(
        self,
        ctx: AdminContext,
        passwords: PasswordGuard | None,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ctx = ctx
        self.passwords = passwords
        self.metrics = metrics
        self._clock = clock

    # ---- queues ----

    def create_queue(self, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        _only(body, {"name"})
        queue = self.ctx.queue_name(body.get("name"), "name")
        self.ctx.store.create_queue(queue)
        self.metrics.queues.add(queue)
        log.info("admin API: %s created queue %s", actor, queue)
        return {"created": queue}

    def delete_queue(
        self, name: object, body: Mapping[str, Any], actor: str, peer: str
    ) -> dict[str, Any]:
        """Needs the admin password in the body, checked again whatever the session."""
        queue = self.ctx.existing_queue(name)
        _only(body, {"password"})
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise InvalidRequest("password: the admin password is required to delete a queue")
        if self.passwords is None:  # unreachable: the API is off without a password hash
            raise InvalidRequest("no admin password is configured")
        self.passwords.check(password, peer)
        self.ctx.store.delete_queue(queue)
        self.metrics.forget_queue(queue)
        log.warning("admin API: %s deleted queue %s with every job in it", actor, queue)
        try:
            self.ctx.settings.forget(queue, actor)
        except PinLaterError as exc:  # the queue is gone; only its stored settings remain
            log.warning("admin API: stored settings of deleted queue %s kept: %s", queue, exc)
            return {"deleted": queue, "note": f"its stored settings could not be removed: {exc}"}
        return {"deleted": queue}

    # ---- settings ----

    def pause(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        queue = self.ctx.existing_queue(name)
        _only(body, set())
        return self._settings(queue, {"paused": True}, actor, "paused")

    def resume(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        queue = self.ctx.existing_queue(name)
        _only(body, set())
        out = self._settings(queue, {"paused": None}, actor, "resumed")
        if out["settings"]["paused"]["value"]:
            out["note"] = (
                "still paused: its rate limit is 0 "
                f"(source: {out['settings']['max_jobs_per_second']['source']}); "
                "set a rate limit to override it"
            )
        return out

    def set_settings(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        queue = self.ctx.existing_queue(name)
        _only(body, {"max_jobs_per_second", "claim_timeout_seconds"})
        if not body:
            raise InvalidRequest(
                "give max_jobs_per_second and/or claim_timeout_seconds (a number, or null to "
                "clear the stored value)"
            )
        return self._settings(queue, dict(body), actor, "changed settings of")

    def _settings(self, queue: str, updates: dict, actor: str, verb: str) -> dict[str, Any]:
        effective = self.ctx.settings.change(queue, updates, actor)
        log.info("admin API: %s %s queue %s (%s)", actor, verb, queue, updates)
        return {"queue": queue, "settings": effective}

    # ---- jobs ----

    def retry_failed(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        """FAILED jobs back to PENDING with `attempts` attempts (1), up to `limit` (1000) over
        the priorities asked (all by default); a dry run counts the FAILED jobs instead."""
        ctx = self.ctx
        queue = ctx.existing_queue(name)
        _only(body, {"priority", "limit", "attempts", "run_after_ms", "dry_run"})
        priorities = self._priorities(body.get("priority"))
        limit = self._limit(body)
        attempts = check.attempts(
            body.get("attempts", 1), ctx.config.limits.max_attempts, "attempts"
        )
        run_after = check.timestamp_ms(body.get("run_after_ms"), "run_after_ms")
        if _dry_run(body, default=False):
            failed = self._counts(queue, JobState.FAILED, priorities, None)
            total = sum(failed.values())
            return _dry(queue, "failed", failed, total, min(total, limit))
        done, retried = _over_priorities(
            priorities,
            limit,
            lambda p, left: ctx.store.retry_failed(queue, p, attempts, run_after, left),
        )
        self.metrics.jobs("retried", queue, retried)
        log.info("admin API: %s retried %d failed job(s) of queue %s", actor, retried, queue)
        return {"queue": queue, "retried": retried, "by_priority": done}

    def delete_jobs(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        """Delete up to `limit` (1000) jobs in `state` (matching `body_regex`, if given) over the
        priorities asked; a dry run (the default) counts them instead."""
        ctx = self.ctx
        queue = ctx.existing_queue(name)
        _only(body, {"state", "priority", "body_regex", "limit", "dry_run"})
        state = state_by_name(body.get("state"))
        priorities = self._priorities(body.get("priority"))
        limit = self._limit(body)
        pattern = body.get("body_regex")
        if _dry_run(body, default=True):
            matching = self._counts(queue, state, priorities, pattern)
            total = sum(matching.values())
            return _dry(queue, STATE_NAMES[state], matching, total, min(total, limit))
        body_filter = compile_body_filter(pattern, ctx.config.limits)
        done, deleted = _over_priorities(
            priorities,
            limit,
            lambda p, left: ctx.store.delete_jobs(queue, state, p, left, body_filter),
        )
        return self._deleted(queue, state, deleted, done, True, actor)

    def purge(self, name: object, body: Mapping[str, Any], actor: str) -> dict[str, Any]:
        """Delete every job in `state` (all priorities), in batches, for at most PURGE_SECONDS
        (`done` false: repeat it); a dry run (the default) counts them instead."""
        ctx = self.ctx
        queue = ctx.existing_queue(name)
        _only(body, {"state", "dry_run"})
        state = state_by_name(body.get("state"))
        priorities = list(range(1, ctx.levels + 1))
        if _dry_run(body, default=True):
            matching = self._counts(queue, state, priorities, None)
            total = sum(matching.values())
            return _dry(queue, STATE_NAMES[state], matching, total, total)
        batch = ctx.config.limits.max_jobs_per_request
        deadline = self._clock() + PURGE_SECONDS
        done = dict.fromkeys(map(str, priorities), 0)
        finished = True
        for p in priorities:
            while True:
                deleted = ctx.store.delete_jobs(queue, state, p, batch, None)
                done[str(p)] += deleted
                if deleted < batch:
                    break
                if self._clock() >= deadline:
                    finished = False
                    break
            if not finished:
                break
        return self._deleted(queue, state, sum(done.values()), done, finished, actor)

    def _deleted(
        self, queue: str, state: JobState, n: int, done: dict, finished: bool, actor: str
    ) -> dict[str, Any]:
        self.metrics.jobs("deleted", queue, n)
        log.info(
            "admin API: %s deleted %d %s job(s) of queue %s", actor, n, STATE_NAMES[state], queue
        )
        return {
            "queue": queue,
            "state": STATE_NAMES[state],
            "deleted": n,
            "by_priority": done,
            "done": finished,
        }

    # ---- helpers ----

    def _priorities(self, value: object) -> list[int]:
        priority = self.ctx.priority(value)
        return [priority] if priority is not None else list(range(1, self.ctx.levels + 1))

    def _limit(self, body: Mapping[str, Any]) -> int:
        return check.limit(body.get("limit", 1000), self.ctx.config.limits.max_jobs_per_request)

    def _counts(
        self, queue: str, state: JobState, priorities: list[int], pattern: object
    ) -> dict[str, int]:
        """Jobs in `state` per priority, runnable and future, capped like getJobCount."""
        store, cap = self.ctx.store, self.ctx.config.limits.count_cap
        body_filter = compile_body_filter(pattern, self.ctx.config.limits)
        return {
            str(p): min(
                cap,
                sum(
                    store.count(queue, state, p, future, cap, body_filter)
                    for future in (False, True)
                ),
            )
            for p in priorities
        }


def _over_priorities(
    priorities: list[int], limit: int, step: Callable[[int, int], int]
) -> tuple[dict[str, int], int]:
    """`step(priority, left)` on each priority in turn until `limit` jobs are done: the jobs
    done per priority (str keys, as the API answers them) and their total."""
    done: dict[str, int] = {}
    left = limit
    for p in priorities:
        if left <= 0:
            break
        done[str(p)] = step(p, left)
        left -= done[str(p)]
    return done, limit - left


def _only(body: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        expected = ", ".join(sorted(allowed)) or "none"
        raise InvalidRequest(f"unknown field(s) {', '.join(unknown)} (expected: {expected})")


def _dry_run(body: Mapping[str, Any], default: bool) -> bool:
    value = body.get("dry_run", default)
    if not isinstance(value, bool):
        raise InvalidRequest(f"dry_run: must be true or false, got {value!r}")
    return value


def _dry(queue: str, state: str, by_priority: dict, total: int, would: int) -> dict[str, Any]:
    return {
        "queue": queue,
        "state": state,
        "dry_run": True,
        "matching": total,
        "by_priority": by_priority,
        "would_change": would,
    }
