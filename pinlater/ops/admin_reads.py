"""The read side of the admin API, as plain JSON-ready dicts with stable field names (the HTTP
layer, `pinlater.server.admin_api`, only routes and encodes).

Costs: the queue overview never counts on the request: it combines the live queue list with the
queue-depth snapshot (refreshed every `metrics.depth_interval_seconds`), the in-memory rate
ring and the effective settings. One queue's view counts that queue now (8 capped counts per
priority) and finds its oldest runnable job with a dry-run dequeue per (shard, priority). A jobs
page is one scan plus one lookup for the body previews.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from pinlater import __version__
from pinlater.config import Config
from pinlater.errors import InvalidRequest, PinLaterError, QueueNotFound, ShardConnectionFailed
from pinlater.handler import validation as check
from pinlater.handler.body_filter import compile_body_filter
from pinlater.ops.depth import DepthCollector
from pinlater.ops.drain import DrainProgress
from pinlater.ops.janitor_activity import JanitorActivity
from pinlater.ops.job_view import STATE_NAMES, job_json, state_by_name
from pinlater.ops.metrics import DEPTH_STATES
from pinlater.ops.rates import JobRates
from pinlater.ops.runtime_settings import RuntimeSettings, SettingsHome
from pinlater.ops.shard_jobs import ShardJobCounts
from pinlater.ops.shard_stats import ShardStats
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.sharded import CONTINUATION_END, CONTINUATION_START, ShardedBackend

#: jobs per page when the request does not say
DEFAULT_PAGE_SIZE = 50


class JobNotFound(PinLaterError):
    """No job with that descriptor (the admin API answers 404; never sent on the wire)."""

    code, name = 404, "JOB_NOT_FOUND"


@dataclass
class AdminContext:
    """Everything the admin API reads or changes, built by the composition root."""

    config: Config
    store: ShardedBackend
    settings: RuntimeSettings
    settings_home: SettingsHome
    rates: JobRates
    depth: DepthCollector
    shard_stats: ShardStats
    shard_jobs: ShardJobCounts
    janitor: JanitorActivity
    #: longest queue name the storage takes (the handler's)
    max_queue_name: int
    #: time.monotonic() and time.time() at start
    started: float
    started_at: float
    #: the dequeue_only shards' unfinished jobs (None: not counted)
    drain: DrainProgress | None = None

    @property
    def levels(self) -> int:
        return self.config.priorities.levels

    def queue_name(self, name: object, field: str = "queue") -> str:
        return check.queue_name(name, self.max_queue_name, field)

    def existing_queue(self, name: object) -> str:
        """A valid name of a queue that exists (QueueNotFound otherwise)."""
        queue = self.queue_name(name)
        if queue not in self.queue_names():
            raise QueueNotFound(queue)
        return queue

    def queue_names(self) -> set[str]:
        """The queues of every shard that answers: an operator looking at the API while a
        shard is down still sees (and can act on) the queues. ShardConnectionFailed only when
        no shard answers."""
        names: set[str] = set()
        answered = False
        failure: PinLaterError | None = None
        for shard in self.store.shard_names():
            if not self.store.health.is_healthy(shard):
                continue
            try:
                names |= self.store.call(shard, lambda s: s.queue_names())
                answered = True
            except PinLaterError as exc:
                failure = exc
        if not answered:
            raise ShardConnectionFailed(
                f"no shard answered the queue listing ({failure or 'every shard is unhealthy'})"
            )
        return names

    def priority(self, value: object, field: str = "priority") -> int | None:
        return check.optional_priority(value, self.levels, field)


class AdminReads:
    def __init__(self, ctx: AdminContext):
        self.ctx = ctx

    # ---- server ----

    def server(self) -> dict[str, Any]:
        ctx, config = self.ctx, self.ctx.config
        home, version = ctx.settings.stored_version()
        return {
            "version": __version__,
            "uptime_seconds": round(time.monotonic() - ctx.started, 3),
            "started_at_ms": int(ctx.started_at * 1000),
            "backend": {
                "kind": config.backend.kind,
                "shards": [
                    {
                        "name": s.name,
                        "dequeue_only": bool(s.dequeue_only),
                        "cluster": ctx.store.cluster_of_shard(s.name),
                    }
                    for s in ctx.store.shard_specs()
                ],
                "clusters": {
                    name: config.clusters[name].kind for name in ctx.store.cluster_names()
                },
                "default_cluster": config.default_cluster,
                "shard_map_file": config.backend.shard_map_file,
                "retired_with_jobs": sorted(ctx.store.retired_shards()),
                "require_durable": config.backend.require_durable,
            },
            "priorities": ctx.levels,
            "read_only": config.dashboard.read_only,
            "tls": config.server.tls.enabled,
            "stored_settings": {
                "home_shard": ctx.settings_home.shard(),
                "version": version if home else None,
                "read_at_ms": int(ctx.settings.read_at * 1000) or None,
                "poll_seconds": config.admin.settings_poll_seconds,
            },
            "config": config_summary(config),
        }

    # ---- queues ----

    def queues(self, with_series: bool = False) -> dict[str, Any]:
        ctx = self.ctx
        names = sorted(ctx.queue_names())
        snapshot, refreshed_at = ctx.depth.snapshot()
        return {
            "queues": [
                self._queue_summary(name, _counts_from(snapshot, name, ctx.levels), with_series)
                for name in names
            ],
            "counts_refreshed_at_ms": int(refreshed_at * 1000) or None,
            "counts_cap": ctx.config.metrics.depth_count_cap,
            "priorities": ctx.levels,
            "rate_sample_seconds": ctx.rates.sample_seconds,
        }

    def queue(self, name: object) -> dict[str, Any]:
        ctx = self.ctx
        queue = ctx.existing_queue(name)
        try:
            counts, live = ctx.depth.counts_of(queue), True
        except PinLaterError:  # a shard is down: the last background counts instead
            counts, live = ctx.depth.snapshot()[0], False
        out = self._queue_summary(queue, _counts_from(counts, queue, ctx.levels), True)
        out["counts_live"] = live
        out["oldest_pending"] = self._oldest_pending(queue)
        out["placement"] = _placement_json(ctx.store, queue)
        cap = ctx.store.fifo.cap(queue)
        out["fifo"] = None if cap is None else {"in_flight_cap": cap}
        return out

    def ledger(self, name: object | None = None) -> dict[str, Any]:
        """The books of one queue (or of every queue) per shard, each read now in one snapshot
        on its shard (docs/semantics.md `A-books-balance`)."""
        ctx = self.ctx
        queues = sorted(ctx.queue_names()) if name is None else [ctx.existing_queue(name)]
        out = []
        for queue in queues:
            books = ctx.store.ledger(queue)
            out.append(
                {
                    "queue": queue,
                    "balanced": all(b.balanced for b in books.values()),
                    "imbalance": sum(b.imbalance for b in books.values()),
                    "shards": {shard: books[shard].as_dict() for shard in sorted(books)},
                }
            )
        return {"queues": out}

    def _queue_summary(self, queue: str, counts, with_series: bool) -> dict[str, Any]:
        settings = self.ctx.settings.effective(queue)
        out: dict[str, Any] = {
            "name": queue,
            "counts": counts,
            "totals": None
            if counts is None
            else {state: sum(by_priority.values()) for state, by_priority in counts.items()},
            "rates": self.ctx.rates.rates(queue),
            "cluster": self.ctx.store.cluster_of(queue),
            "settings": settings,
            "paused": settings["paused"]["value"],
            "rate_limited": settings["max_jobs_per_second"]["value"] is not None,
        }
        if with_series:
            out["series"] = self.ctx.rates.series(queue)
        return out

    def _oldest_pending(self, queue: str) -> dict[str, Any] | None:
        """The runnable job that has waited longest (what a dequeue of its priority hands out
        first): its descriptor, priority and age by this server's clock."""
        store = self.ctx.store
        oldest = None
        for name in store.shard_names():
            if not store.health.is_healthy(name):
                continue
            for priority in range(1, self.ctx.levels + 1):
                try:
                    record = self._next_job(queue, name, priority)
                except PinLaterError:  # QueueNotFound there, or the shard failed: skip it
                    break
                if record is not None and (oldest is None or record[1] < oldest[1]):
                    oldest = record
        if oldest is None:
            return None
        d, run_after = oldest
        return {
            "descriptor": str(d),
            "priority": d.priority,
            "run_after_ms": run_after,
            "age_seconds": round(max(0.0, time.time() - run_after / 1000), 3),
        }

    def _next_job(self, queue: str, shard: str, priority: int):
        """(descriptor, run_after_ms) of the job a dequeue of (shard, priority) would hand out
        first, or None."""
        store = self.ctx.store
        jobs = store.call(shard, _dry_run_dequeue(queue, priority))
        if not jobs:
            return None
        d = JobDescriptor(queue, shard, priority, jobs[0].local_id)
        record = store.lookup([d], include_body=False).get(d)
        return None if record is None else (d, record.run_after_ms)

    def jobs(
        self,
        name: object,
        state: object,
        priority: object = None,
        future: bool = False,
        limit: int | None = None,
        continuation: object = None,
        body_regex: object = None,
    ) -> dict[str, Any]:
        """One page of a queue's jobs in one state, newest run_after first, with body
        previews; `continuation` from the previous page (None: the first), and the one to
        ask for next (None: no more)."""
        ctx = self.ctx
        queue = ctx.queue_name(name)
        job_state = state_by_name(state)
        wanted = ctx.priority(priority)
        cap = min(ctx.config.dashboard.max_page_size, ctx.config.limits.max_scan_limit)
        page = check.limit(DEFAULT_PAGE_SIZE if limit is None else limit, cap, "limit")
        token = CONTINUATION_START if continuation in (None, "") else continuation
        if not isinstance(token, str):
            raise InvalidRequest("continuation: must be text")
        rows, next_token = ctx.store.scan(
            queue,
            job_state,
            wanted,
            future,
            token,
            page,
            compile_body_filter(body_regex, ctx.config.limits),
        )
        bodies = ctx.store.lookup([d for d, _ in rows], include_body=True) if rows else {}
        preview = ctx.config.dashboard.body_preview_bytes
        return {
            "queue": queue,
            "state": STATE_NAMES[job_state],
            "priority": wanted,
            "future": future,
            "jobs": [job_json(d, bodies.get(d, record), preview) for d, record in rows],
            "continuation": None if next_token == CONTINUATION_END else next_token,
        }

    def job(self, text: object) -> dict[str, Any]:
        ctx = self.ctx
        d = JobDescriptor.parse(text, "descriptor")
        ctx.queue_name(d.queue, "descriptor")
        check.priority(d.priority, ctx.levels, "descriptor")
        record = ctx.store.lookup([d], include_body=True).get(d)
        if record is None:
            raise JobNotFound(f"no job {text}")
        return job_json(d, record, ctx.config.dashboard.body_preview_bytes, full_body=True)

    # ---- shards and janitor ----

    def shards(self) -> dict[str, Any]:
        ctx = self.ctx
        store = ctx.store
        enqueue = set(store.enqueue_candidates())
        home = ctx.settings_home.shard()
        shards = []
        for spec in store.shard_specs():
            held = ctx.shard_jobs.get(spec.name)
            drained = None if ctx.drain is None else ctx.drain.get(spec.name)
            shards.append(
                {
                    "name": spec.name,
                    "cluster": store.cluster_of_shard(spec.name),
                    "healthy": store.health.is_healthy(spec.name),
                    "dequeue_only": bool(spec.dequeue_only),
                    "takes_enqueues": spec.name in enqueue,
                    "settings_home": spec.name == home,
                    **ctx.shard_stats.report(spec.name),
                    "jobs": None if held is None else held["jobs"],
                    "jobs_counted_at_ms": None if held is None else held["counted_at_ms"],
                    "draining": None if drained is None else drained.as_json(),
                }
            )
        return {"shards": shards, "jobs_count_cap": ctx.config.metrics.depth_count_cap}

    def janitor(self) -> dict[str, Any]:
        config = self.ctx.config.janitor
        return {
            "enabled": config.enabled,
            "interval_seconds": config.interval_seconds,
            "claim_timeout_seconds": config.claim_timeout_seconds,
            "succeeded_ttl_seconds": config.succeeded_ttl_seconds,
            "failed_ttl_seconds": config.failed_ttl_seconds,
            "batch_size": config.batch_size,
            **self.ctx.janitor.report(),
        }


def _placement_json(store: ShardedBackend, queue: str) -> dict[str, Any] | None:
    """Where a queue with `partitions` lives: its shards, and the others still read because
    they may hold its jobs (None: the queue lives on every shard)."""
    placement = store.placement.snapshot().get(queue)
    if placement is None:
        return None
    return {
        "partitions": placement.partitions,
        "shards": list(placement.placed),
        "draining": sorted(placement.held),
        "draining_open": sorted(placement.active),
    }


def _dry_run_dequeue(queue: str, priority: int):
    """The storage call handing out nothing: the next job of (queue, priority) on a shard."""
    return lambda shard: shard.dequeue(queue, priority, 1, None)


def _counts_from(snapshot, queue: str, levels: int) -> dict[str, dict[str, int]] | None:
    """{state: {priority: jobs}} of one queue from depth-style keys; None when not counted."""
    if not any((queue, state, 1) in snapshot for state in DEPTH_STATES):
        return None
    return {
        state: {str(p): snapshot.get((queue, state, p), 0) for p in range(1, levels + 1)}
        for state in DEPTH_STATES
    }


#: config sections shown whole (nothing secret in them)
_PLAIN_SECTIONS = (
    "limits",
    "priorities",
    "sharding",
    "janitor",
    "metrics",
    "admission",
    "request_log",
    "dashboard",
)


def config_summary(config: Config) -> dict[str, Any]:
    """The configuration without secrets: whole sections that hold none, and from the others
    only what is known to be safe (never passwords, hashes, backend options or shard specs,
    which carry connection passwords)."""
    out: dict[str, Any] = {
        name: dataclasses.asdict(getattr(config, name)) for name in _PLAIN_SECTIONS
    }
    server = config.server
    out["server"] = {
        "host": server.host,
        "port": server.port,
        "max_connections": server.max_connections,
        "worker_threads": server.worker_threads,
        "tls": server.tls.enabled,
        "mutual_tls": bool(server.tls.enabled and server.tls.client_ca_file),
    }
    admin = config.admin
    out["admin"] = {
        "password_set": bool(admin.password_hash),
        **{
            f.name: getattr(admin, f.name)
            for f in dataclasses.fields(admin)
            if f.name != "password_hash"
        },
    }
    out["queue_config"] = config.queue_config
    out["server_set_file"] = config.server_set_file
    out["log_level"] = config.log_level
    out["log_format"] = config.log_format
    return out
