"""Redis storage: per-shard primitives, each one Lua script call (or one pipeline).

Key layout: see `backends/redis_keys.py` (registry HASH; per queue priority an id counter,
three column hashes keyed by job id (bodies, metadata, custom statuses), a run_after index per
state and an updated_at index per non-PENDING state). The hot scripts touch many jobs with a
handful of variadic calls instead of one or two calls per job. Every
state transition is one script in `backends/lua/` (loaded once, called by SHA); scripts read
Redis's own clock (`TIME`) plus the shard's `clock_offset_ms`, so eligibility and claim expiry
never depend on an application server's clock.

Choices worth knowing:
- Body filters are Python callables, applied here over bounded pages read by `page.lua`
  (never Lua patterns); the deletes that follow are guarded by state in Lua.
- Custom statuses are truncated in characters (UTF-8 aware) inside the scripts.
- Write scripts are refused whole by Redis when it is over maxmemory (`#!lua` flags): that
  becomes `StorageFull` and nothing is stored. Read scripts and delete-only scripts still run.
- A connection pool per distinct connection (host, port, db, credentials, TLS, timeouts),
  shared by the shards that use it and closed with the last of them; no client-side retries
  (the sharded layer retries `ShardError(retriable=True)`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from backends import redis_keys as keys
from backends import redis_resp as resp
from backends.redis_scripts import Scripts
from backends.shared_pools import SharedPools
from pinlater.storage.acks import AckOutcome, group_acks
from pinlater.storage.contract import (
    MAX_LEASES_LISTED,
    Backend,
    BodyFilter,
    ByteBudget,
    Shard,
    ShardSpec,
    StorageLimits,
)
from pinlater.storage.errors import QueueNotFound, ShardError, StorageFull
from pinlater.storage.leases import (
    LEASE_FORGOTTEN_AFTER_MS,
    LEASES_FORGOTTEN_PER_CALL,
    check_lease,
)
from pinlater.storage.ledger import LedgerBook, book_from
from pinlater.storage.models import (
    AGED_STATES,
    Ack,
    Checkpoint,
    DequeuedJob,
    Enqueued,
    JobRecord,
    JobState,
    NewJob,
    QueueStats,
    ReclaimCounts,
    ScanBound,
    new_dequeued_job,
)
from pinlater.storage.paging import FILTER_PAGE_SIZE, filtered
from pinlater.storage.specs import field_range, parse_shard_list
from pinlater.storage.steps import in_steps

_RECORD_WIDTH = 12  # values per record from _lib.lua pl_append_record


@dataclass(frozen=True, slots=True)
class RedisShardSpec(ShardSpec):
    """One Redis shard. Shards on one instance/db are isolated by their name in every key."""

    host: str = "127.0.0.1"
    port: int = field(default=6379, metadata=field_range(1, 65535))
    db: int = field(default=0, metadata=field_range(0, 1_000_000))
    password: str | None = None
    username: str | None = None
    tls: bool = False
    #: CA bundle for TLS; None = the system store
    tls_ca_file: str | None = None
    socket_connect_timeout_seconds: float = field(default=1.0, metadata=field_range(0.001, 600))
    socket_timeout_seconds: float = field(default=5.0, metadata=field_range(0.001, 600))
    max_connections: int = field(default=64, metadata=field_range(1, 100_000))

    def pool_key(self) -> tuple:
        """Everything that identifies a connection (not the shard name)."""
        return tuple(
            v for k, v in zip(_SPEC_FIELDS, self.connection_key(), strict=True) if k != "name"
        )


_SPEC_FIELDS = [f for f in RedisShardSpec.__dataclass_fields__ if f != "dequeue_only"]


class RedisBackend(Backend):
    kind = "redis"
    supports_shard_reload = True

    def __init__(self, options: Mapping[str, Any], limits: StorageLimits):
        super().__init__(options, limits)
        self._pools: SharedPools[tuple, redis.ConnectionPool] = SharedPools(
            lambda pool: pool.disconnect()
        )

    @classmethod
    def parse_shards(cls, raw: Any, options: Mapping[str, Any], path: str) -> list[ShardSpec]:
        return parse_shard_list(RedisShardSpec, raw, path)

    def open_shard(self, spec: ShardSpec) -> Shard:
        """Connections are made lazily (with the connect timeout) on first use: opening never
        blocks, and an unreachable shard shows up as ShardError on its first call or ping."""
        assert isinstance(spec, RedisShardSpec), spec
        key = spec.pool_key()
        pool = self._pools.acquire(key, lambda: _make_pool(spec))
        return RedisShard(spec, self.limits, pool, lambda: self._pools.release(key, pool))

    def close(self) -> None:
        self._pools.close()


def _make_pool(spec: RedisShardSpec) -> redis.ConnectionPool:
    kwargs: dict[str, Any] = dict(
        host=spec.host,
        port=spec.port,
        db=spec.db,
        password=spec.password,
        username=spec.username,
        socket_timeout=spec.socket_timeout_seconds,
        socket_connect_timeout=spec.socket_connect_timeout_seconds,
        decode_responses=False,  # bodies are bytes, byte-identical
        retry=Retry(NoBackoff(), 0),  # no hidden re-sends of non-idempotent scripts
        max_connections=spec.max_connections,
        timeout=spec.socket_connect_timeout_seconds,  # wait for a free pooled connection
    )
    if spec.tls:
        kwargs["connection_class"] = redis.SSLConnection
        if spec.tls_ca_file:
            kwargs["ssl_ca_certs"] = spec.tls_ca_file
    return redis.BlockingConnectionPool(**kwargs)


class RedisShard(Shard):
    """One shard on a Redis database; thread-safe (pooled connections, stateless scripts)."""

    def __init__(
        self, spec: RedisShardSpec, limits: StorageLimits, pool: redis.ConnectionPool, release
    ):
        super().__init__(spec, limits)
        self._pool = pool
        self._client = redis.Redis(connection_pool=pool)
        self._scripts = Scripts(self._client)
        self._registry = keys.registry_key(spec.name)
        self._release = release
        self._closed = False

    # ---- plumbing ----
    @contextlib.contextmanager
    def _errors(self, queue: str | None = None) -> Iterator[None]:
        """Translate redis-py errors into the contract's QueueNotFound/StorageFull/ShardError."""
        try:
            yield
        except redis.exceptions.ResponseError as exc:
            raise self._response_error(exc, queue) from exc
        except redis.exceptions.AuthenticationError as exc:
            raise ShardError(self.name, f"authentication failed: {exc}", retriable=False) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise ShardError(
                self.name,
                f"{type(exc).__name__}: {exc}",
                timed_out=isinstance(exc, redis.exceptions.TimeoutError),
            ) from exc
        except redis.exceptions.RedisError as exc:
            raise ShardError(self.name, f"{type(exc).__name__}: {exc}", retriable=False) from exc

    def _response_error(self, exc: Exception, queue: str | None) -> Exception:
        text = str(exc)
        if text.startswith("PLNOQUEUE") and queue is not None:
            return QueueNotFound(queue)
        if isinstance(exc, redis.exceptions.OutOfMemoryError) or text.startswith("OOM"):
            return StorageFull(
                f"shard {self.name}: Redis is over its maxmemory and refused "
                f"the write (nothing was stored): {text}"
            )
        if text.startswith("MISCONF"):
            return StorageFull(
                f"shard {self.name}: Redis cannot persist to disk and refuses writes: {text}"
            )
        retriable = text.startswith(("BUSY", "LOADING", "READONLY", "TRYAGAIN", "MASTERDOWN"))
        return ShardError(self.name, f"Redis error: {text}", retriable=retriable)

    def _run(self, script: redis.commands.core.Script, queue: str | None, args: list) -> Any:
        return self._run_all(queue, [(script, args)])[0]

    def _run_all(
        self, queue: str | None, calls: list[tuple[redis.commands.core.Script, list]]
    ) -> list:
        """Run the scripts in order, sent together (one round trip), and return their replies.
        When Redis does not know a script (first use, restart, SCRIPT FLUSH), EVERY script is
        loaded, then the unknown ones run again in order: a batch (piggy-backed acks, then a
        dequeue) can then never find one script loaded and the next not, which would run the
        dequeue before the acks. The first error reply is raised after every reply was read."""
        with self._errors(queue):
            replies = self._evalsha_all([(script.sha, args) for script, args in calls])
            if any(isinstance(reply, redis.exceptions.NoScriptError) for reply in replies):
                self._scripts.load_all(self._client)
            for i, reply in enumerate(replies):
                if isinstance(reply, redis.exceptions.NoScriptError):
                    script, args = calls[i]
                    replies[i] = self._evalsha_all([(script.sha, args)])[0]
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

    def _evalsha_all(self, calls: list[tuple[str, list]]) -> list[Any]:
        """EVALSHAs in one write on one pooled connection, without redis-py's per-command
        layers (retry wrapper, response callbacks, observability: about 40 us a call here)
        and encoded by backends/redis_resp.py, not redis-py's packer.
        Every reply is read, an error reply as its ResponseError in its place. As redis-py
        does, a connection that failed mid-call is disconnected before it goes back to the
        pool, so no half-read reply can reach the next caller."""
        conn = self._pool.get_connection()
        try:
            conn.send_packed_command(
                [b"".join([resp.evalsha(sha, self._registry, args) for sha, args in calls])]
            )
            replies = []
            for _ in calls:
                try:
                    replies.append(conn.read_response())
                except redis.exceptions.ResponseError as exc:  # in step: read the next one
                    replies.append(exc)
            return replies
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._pool.release(conn)

    def _prefix(self, queue: str) -> str:
        return keys.queue_prefix(self.name, queue)

    def _offset(self) -> str:
        return str(int(self.clock_offset_ms))

    # ---- clock ----
    def now_ms(self) -> int:
        with self._errors():
            seconds, micros = self._client.time()
        return seconds * 1000 + micros // 1000 + int(self.clock_offset_ms)

    # ---- queues ----
    def create_queue(self, queue: str) -> None:
        self._run(
            self._scripts.create_queue,
            queue,
            [queue, self.limits.num_priorities, self._prefix(queue)],
        )

    def delete_queue(self, queue: str) -> None:
        """Unregister the queue and UNLINK its keys in one script call: a queue's jobs live in
        a fixed number of keys per priority, and Redis frees large ones in the background."""
        self._run(
            self._scripts.delete_queue,
            queue,
            [queue, self._prefix(queue), self.limits.num_priorities],
        )

    def queue_names(self) -> set[str]:
        with self._errors():
            names = self._client.hkeys(self._registry)
            return {n.decode() if isinstance(n, bytes) else n for n in names}

    # ---- runtime queue settings ----
    def read_settings(self, known_version: int) -> tuple[int, bytes | None]:
        reply = self._run(
            self._scripts.settings_read, None, [keys.settings_key(self.name), known_version]
        )
        version = int(reply[0])
        return version, (bytes(reply[1]) if len(reply) > 1 else None)

    def write_settings(self, expected_version: int, document: bytes) -> int | None:
        reply = self._run(
            self._scripts.settings_write,
            None,
            [keys.settings_key(self.name), expected_version, document],
        )
        return None if reply is None else int(reply)

    # ---- jobs ----
    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[int]:
        args = [queue, self._prefix(queue), self._offset(), len(jobs)]
        packed = resp.job_args(jobs, self.limits.status_cap, keyed=False)
        return [int(i) for i in self._run(self._scripts.enqueue, queue, [*args, packed])]

    def enqueue_keyed(
        self, queue: str, jobs: Sequence[NewJob], unique_window_ms: int
    ) -> list[Enqueued]:
        args = [queue, self._prefix(queue), self._offset(), int(unique_window_ms), len(jobs)]
        packed = resp.job_args(jobs, self.limits.status_cap, keyed=True)
        flat = self._run(self._scripts.enqueue_keyed, queue, [*args, packed])
        return [
            Enqueued(int(flat[i]), int(flat[i + 1]), flat[i + 2] == b"1")
            for i in range(0, len(flat), 3)
        ]

    def dequeue(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        if claim is None:
            records, _, _ = self._page(
                queue,
                priority,
                JobState.PENDING,
                "asc",
                "",
                "due",
                max(limit, 0),
                with_body=True,
                budget=budget,
                shown=False,  # a dry run finds what a dequeue would take: no reserved job
            )
            return [
                DequeuedJob(
                    r.priority,
                    r.local_id,
                    r.body or b"",
                    r.attempts_allowed,
                    r.attempts_remaining,
                    None,
                )
                for r in records
            ]
        if limit <= 0:
            self._check_queue(queue)
            return []
        flat = self._run(
            self._scripts.dequeue, queue, self._dequeue_args(queue, priority, limit, claim, budget)
        )
        return _dequeued(flat, priority, claim)

    def prefetch(
        self,
        queue: str,
        priority: int,
        limit: int,
        claim: str,
        hold_ms: int,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """dequeue.lua with a hold: the jobs go to :rsv (deadline) instead of ua1."""
        if limit <= 0:
            self._check_queue(queue)
            return []
        args = [*self._dequeue_args(queue, priority, limit, claim, budget), max(int(hold_ms), 0)]
        return _dequeued(self._run(self._scripts.dequeue, queue, args), priority, claim)

    def hand_out(
        self,
        queue: str,
        priority: int,
        jobs: Sequence[tuple[int, str]],
        claim: str | None = None,
    ) -> int:
        return self._end_reservations(queue, priority, "H", claim or "", jobs)

    def release(self, queue: str, priority: int, jobs: Sequence[tuple[int, str]]) -> int:
        return self._end_reservations(queue, priority, "R", "", jobs)

    def _end_reservations(
        self, queue: str, priority: int, mode: str, claim: str, jobs: Sequence[tuple[int, str]]
    ) -> int:
        """reservations.lua: one script call for the whole batch."""
        args: list[Any] = [queue, self._prefix(queue), self._offset(), priority, mode, claim]
        for local_id, held in jobs:
            args += [keys.id19(local_id), held]
        return int(self._run(self._scripts.reservations, queue, args))

    # ---- leases ----
    def acquire_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        check_lease(name, owner, ttl_ms)
        args = [keys.lease_key(self.name), name, owner, self._offset(), int(ttl_ms)]
        return int(self._run(self._scripts.lease_take, None, args)) == 1

    def release_lease(self, name: str, owner: str) -> bool:
        check_lease(name, owner)
        args = [keys.lease_key(self.name), name, owner]
        return int(self._run(self._scripts.lease_drop, None, args)) == 1

    def live_leases(self, prefix: str) -> dict[str, str]:
        if prefix:
            check_lease(prefix)
        args = [
            keys.lease_key(self.name),
            prefix,
            self._offset(),
            MAX_LEASES_LISTED,
            LEASE_FORGOTTEN_AFTER_MS,
            LEASES_FORGOTTEN_PER_CALL,
        ]
        flat = self._run(self._scripts.lease_list, None, args)
        return {_decode_text(flat[i]): _decode_text(flat[i + 1]) for i in range(0, len(flat), 2)}

    def dequeue_fifo(
        self,
        queue: str,
        limit: int,
        in_flight_cap: int,
        claim: str | None,
        budget: ByteBudget | None = None,
    ) -> list[DequeuedJob]:
        """dequeue_fifo.lua: the count, the heads and the claims in one script call."""
        if limit <= 0:
            self._check_queue(queue)
            return []
        args = self._fifo_args(queue, limit, in_flight_cap, claim, budget)
        return _fifo_dequeued(self._run(self._scripts.dequeue_fifo, queue, args), claim)

    def ack_and_dequeue_fifo(
        self,
        queue: str,
        succeeded: Sequence[Ack],
        failed: Sequence[Ack],
        limit: int,
        in_flight_cap: int,
        claim: str,
        budget: ByteBudget | None = None,
    ) -> tuple[int, list[DequeuedJob]]:
        """ack.lua then dequeue_fifo.lua sent together: one round trip (as ack_and_dequeue)."""
        if limit <= 0:
            return super().ack_and_dequeue_fifo(
                queue, succeeded, failed, limit, in_flight_cap, claim, budget
            )
        applied, flat = self._run_all(
            queue,
            [
                (self._scripts.ack, self._ack_args(queue, succeeded, failed)),
                (
                    self._scripts.dequeue_fifo,
                    self._fifo_args(queue, limit, in_flight_cap, claim, budget),
                ),
            ],
        )
        return int(applied), _fifo_dequeued(flat, claim)

    def _fifo_args(
        self,
        queue: str,
        limit: int,
        in_flight_cap: int,
        claim: str | None,
        budget: ByteBudget | None,
    ) -> list[Any]:
        return [
            queue,
            self._prefix(queue),
            self._offset(),
            self.limits.num_priorities,
            limit,
            claim or "",
            in_flight_cap,
            *self._budget_args(budget),
            self.limits.body_cap,
        ]

    def ack(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack]) -> int:
        return int(self._run(self._scripts.ack, queue, self._ack_args(queue, succeeded, failed)))

    def ack_and_dequeue(
        self,
        queue: str,
        succeeded: Sequence[Ack],
        failed: Sequence[Ack],
        priority: int,
        limit: int,
        claim: str,
        budget: ByteBudget | None = None,
    ) -> tuple[int, list[DequeuedJob]]:
        """ack.lua then dequeue.lua sent together on one connection: one round trip. Redis runs
        them in order; each reply is read even when the first is an error."""
        if limit <= 0:
            return super().ack_and_dequeue(queue, succeeded, failed, priority, limit, claim, budget)
        applied, flat = self._run_all(
            queue,
            [
                (self._scripts.ack, self._ack_args(queue, succeeded, failed)),
                (
                    self._scripts.dequeue,
                    self._dequeue_args(queue, priority, limit, claim, budget),
                ),
            ],
        )
        return int(applied), _dequeued(flat, priority, claim)

    def _dequeue_args(
        self, queue: str, priority: int, limit: int, claim: str, budget: ByteBudget | None
    ) -> list[Any]:
        return [
            queue,
            self._prefix(queue),
            self._offset(),
            priority,
            limit,
            claim,
            *self._budget_args(budget),
            self.limits.body_cap,
        ]

    @staticmethod
    def _budget_args(budget: ByteBudget | None) -> tuple[Any, Any]:
        """The scripts' budget arguments ('' for none)."""
        return ("", 0) if budget is None else (budget.max_bytes, budget.per_job)

    def _ack_args(self, queue: str, succeeded: Sequence[Ack], failed: Sequence[Ack]) -> list[Any]:
        """ack.lua's arguments: a few per ack group (pinlater/storage/acks.py), not 7 per ack,
        so a typical batch is a handful of large arguments."""
        groups = group_acks(succeeded, failed)
        args: list[Any] = [
            queue,
            self._prefix(queue),
            self._offset(),
            self.limits.status_cap,
            len(groups),
        ]
        for group in groups:
            args += [
                "S" if group.outcome is AckOutcome.SUCCESS else "F",
                group.priority,
                *_match_args(group.match),
                _encode_text(group.append_status),
                min(group.retry_delay_ms, keys.RA_MAX),
                "".join(map(keys.id19, group.local_ids)),
            ]
        return args

    def checkpoint(self, queue: str, checkpoints: Sequence[Checkpoint]) -> int:
        args: list[Any] = [
            queue,
            self._prefix(queue),
            self._offset(),
            self.limits.status_cap,
            len(checkpoints),
        ]
        for cp in checkpoints:
            args += [
                cp.priority,
                keys.id19(cp.local_id),
                *_match_args(cp.match),
                b"" if cp.new_body is None else cp.new_body,
                "0" if cp.new_body is None else "1",
                "1" if cp.move_to_pending else "0",
                "" if cp.run_after_ms is None else keys.clamp_run_after(cp.run_after_ms),
                "" if cp.attempts_allowed is None else int(cp.attempts_allowed),
                _encode_text(cp.prepend_status or ""),
            ]
        return int(self._run(self._scripts.checkpoint, queue, args))

    def lookup(
        self,
        queue: str,
        refs: Sequence[tuple[int, int]],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord]:
        args: list[Any] = [
            queue,
            self._prefix(queue),
            "1" if include_body else "0",
            "" if max_body_bytes is None else max_body_bytes,
            len(refs),
        ]
        for priority, local_id in refs:
            args += [priority, keys.id19(local_id)]
        return _records(self._run(self._scripts.lookup, queue, args))

    def next_due_ms(self, queue: str) -> int | None:
        args = [queue, self._prefix(queue), self._offset(), self.limits.num_priorities]
        due = self._run(self._scripts.next_due, queue, args)
        return None if due is None else int(due)

    def queue_stats(self, queues: Sequence[str], cap: int) -> dict[str, QueueStats]:
        args: list = [self._offset(), max(int(cap), 0), self.limits.num_priorities]
        for queue in queues:
            args += [queue, self._prefix(queue)]
        reply = self._run(self._scripts.queue_stats, None, args)
        return _queue_stats(queues, self.limits.num_priorities, [int(v) for v in reply])

    def count(
        self,
        queue: str,
        state: JobState,
        priorities: Sequence[int],
        future: bool,
        cap: int,
        body_filter: BodyFilter | None,
    ) -> int:
        if body_filter is None:
            args = [
                queue,
                self._prefix(queue),
                self._offset(),
                int(state),
                "1" if future else "0",
                max(int(cap), 0),
                len(priorities),
                *priorities,
            ]
            return int(self._run(self._scripts.count, queue, args))
        total, cap = 0, max(int(cap), 0)
        self._check_queue(queue)
        window = "future" if future else "due"
        for priority in priorities:
            if total >= cap:
                break
            matches = self._matching(
                queue, priority, state, "asc", "", window, body_filter, cap - total
            )
            total += sum(1 for _ in matches)
        return total

    def scan(
        self,
        queue: str,
        state: JobState,
        bounds: Mapping[int, ScanBound | None],
        future: bool,
        limit: int,
        body_filter: BodyFilter | None,
    ) -> list[JobRecord]:
        window = "future" if future else "due"
        cursors = {
            p: "" if b is None else keys.index_member(b.run_after_ms, b.local_id)
            for p, b in bounds.items()
        }
        if limit <= 0 or not bounds:
            self._check_queue(queue)
            return []
        if body_filter is None:
            return self._scan_pages(queue, state, cursors, window, limit)
        return [
            replace(record, body=None, body_size=None)
            for priority, cursor in cursors.items()
            for record in self._matching(
                queue, priority, state, "desc", cursor, window, body_filter, limit
            )
        ]

    def _scan_pages(
        self, queue: str, state: JobState, cursors: Mapping[int, str], window: str, limit: int
    ) -> list[JobRecord]:
        """One page per priority (descending, after its cursor), pipelined: one round trip."""
        with self._errors(queue):
            pipe = self._client.pipeline(transaction=False)
            for priority, cursor in cursors.items():
                self._scripts.page(
                    keys=[self._registry],
                    client=pipe,
                    args=self._page_args(
                        queue, priority, state, "desc", cursor, window, limit, False
                    ),
                )
            pages = pipe.execute(raise_on_error=False)
        out = []
        for page in pages:
            if isinstance(page, Exception):
                with self._errors(queue):
                    raise page
            out += _records(page[2:])
        return out

    def retry_failed(
        self,
        queue: str,
        priority: int,
        attempts_remaining: int,
        run_after_ms: int | None,
        limit: int,
    ) -> int:
        args = [
            queue,
            self._prefix(queue),
            self._offset(),
            priority,
            int(attempts_remaining),
            "" if run_after_ms is None else keys.clamp_run_after(run_after_ms),
            max(int(limit), 0),
        ]
        return int(self._run(self._scripts.retry_failed, queue, args))

    def delete_jobs(
        self, queue: str, state: JobState, priority: int, limit: int, body_filter: BodyFilter | None
    ) -> int:
        if body_filter is None or limit <= 0:
            # in script calls of at most DELETE_STEP jobs: one script deleting a million
            # blocks the whole Redis instance, every other queue and shard on it included
            prefix = self._prefix(queue)
            return in_steps(
                limit,
                lambda size: int(
                    self._run(
                        self._scripts.delete_jobs,
                        queue,
                        [queue, prefix, priority, int(state), size, 0],
                    )
                ),
            )
        # Filter first (page by page), then delete the matches, guarded by state in Lua: a job
        # that moved on meanwhile is left alone.
        matches = self._matching(queue, priority, state, "asc", "", "all", body_filter, limit)
        ids = [keys.id19(record.local_id) for record in matches]
        deleted = 0
        for start in range(0, len(ids), FILTER_PAGE_SIZE):
            chunk = ids[start : start + FILTER_PAGE_SIZE]
            args = [
                queue,
                self._prefix(queue),
                priority,
                int(state),
                len(chunk),
                len(chunk),
                *chunk,
            ]
            deleted += int(self._run(self._scripts.delete_jobs, queue, args))
        return deleted

    # ---- janitor ----
    def reclaim_expired(
        self, queue: str, priority: int, claim_timeout_ms: int, limit: int
    ) -> ReclaimCounts:
        args = [
            queue,
            self._prefix(queue),
            self._offset(),
            priority,
            int(claim_timeout_ms),
            max(int(limit), 0),
        ]
        retried, failed, released = self._run(self._scripts.reclaim, queue, args)
        return ReclaimCounts(retried=int(retried), failed=int(failed), released=int(released))

    def purge(self, queue: str, priority: int, state: JobState, ttl_ms: int, limit: int) -> int:
        if state not in (JobState.SUCCEEDED, JobState.FAILED):
            raise ValueError(f"purge applies to terminal states only, not {state.name}")
        args = [queue, self._prefix(queue), self._offset(), priority, int(state), int(ttl_ms)]
        return in_steps(
            limit, lambda size: int(self._run(self._scripts.purge, queue, [*args, size]))
        )

    def ledger(self, queue: str) -> LedgerBook:
        """ledger.lua: the counters and ZCARD of every state index in one script call."""
        flat, states = self._run(
            self._scripts.ledger, queue, [queue, self._prefix(queue), self.limits.num_priorities]
        )
        counters = {_decode_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        return book_from(counters, dict(enumerate(int(n) for n in states)))

    def purge_keys(self, queue: str, limit: int) -> int:
        args = [queue, self._prefix(queue), self._offset(), max(int(limit), 0)]
        return int(self._run(self._scripts.purge_keys, queue, args))

    # ---- health ----
    def ping(self) -> None:
        with self._errors():
            self._client.ping()

    def durability_warnings(self) -> list[str]:
        from backends.redis_durability import durability_warnings

        return durability_warnings(self.name, self._client)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    # ---- paging for body filters and scans ----
    def _check_queue(self, queue: str) -> None:
        self._run(self._scripts.lookup, queue, [queue, self._prefix(queue), "0", "", 0])

    def _page_args(
        self,
        queue: str,
        priority: int,
        state: JobState,
        direction: str,
        cursor: str,
        window: str,
        size: int,
        with_body: bool,
        budget_args: tuple[Any, Any] = ("", 0),
        shown: bool = True,
    ) -> list[Any]:
        """page.lua's arguments; `shown`: the jobs as reads show them (a reserved job is
        PENDING, S-prefetch), else as stored (a dry-run dequeue: reserved jobs are claimed)."""
        return [
            queue,
            self._prefix(queue),
            self._offset(),
            priority,
            int(state),
            direction,
            cursor,
            window,
            size,
            "1" if with_body else "0",
            *budget_args,
            "1" if shown else "0",
        ]

    def _page(
        self,
        queue: str,
        priority: int,
        state: JobState,
        direction: str,
        cursor: str,
        window: str,
        size: int,
        *,
        with_body: bool,
        budget: ByteBudget | None = None,
        shown: bool = True,
    ) -> tuple[list[JobRecord], int, str]:
        """One page.lua call: (records, index members read, cursor for the next page); with a
        budget, the records stop before the first job that does not fit it."""
        args = self._page_args(
            queue,
            priority,
            state,
            direction,
            cursor,
            window,
            size,
            with_body,
            self._budget_args(budget),
            shown,
        )
        flat = self._run(self._scripts.page, queue, args)
        return _records(flat[2:]), int(flat[0]), flat[1].decode()

    def _matching(
        self,
        queue: str,
        priority: int,
        state: JobState,
        direction: str,
        cursor: str,
        window: str,
        body_filter: BodyFilter,
        limit: int,
    ) -> Iterator[JobRecord]:
        """Up to `limit` records (with bodies) after `cursor` whose body passes the filter, read
        page by page (pinlater/storage/paging.py); the filter's own errors (e.g. a
        PinLaterError for a regex over its budget) propagate."""

        def read_page(after: str | None, size: int) -> tuple[list[JobRecord], str | None]:
            records, scanned, last = self._page(
                queue,
                priority,
                state,
                direction,
                cursor if after is None else after,
                window,
                size,
                with_body=True,
            )
            return records, last if scanned == size else None

        return filtered(read_page, _body, body_filter, limit)


def _dequeued(flat: Sequence[Any], priority: int, claim: str) -> list[DequeuedJob]:
    """dequeue.lua's reply (id, body, attempts allowed, attempts remaining per job)."""
    return [
        new_dequeued_job(
            priority, int(flat[i]), flat[i + 1], int(flat[i + 2]), int(flat[i + 3]), claim
        )
        for i in range(0, len(flat), 4)
    ]


def _fifo_dequeued(flat: Sequence[Any], claim: str | None) -> list[DequeuedJob]:
    """dequeue_fifo.lua's reply (priority, id, body, attempts allowed, remaining per job)."""
    return [
        new_dequeued_job(
            int(flat[i]), int(flat[i + 1]), flat[i + 2], int(flat[i + 3]), int(flat[i + 4]), claim
        )
        for i in range(0, len(flat), 5)
    ]


def _body(record: JobRecord) -> bytes:
    return record.body or b""


def _encode_text(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode_text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", "surrogatepass")


def _match_args(match) -> tuple[str, str]:
    """Claim mode and value for _lib.lua pl_claim_ok: exact claim, else the source part."""
    if match.claim is not None:
        return "1", match.claim
    return "0", match.source


def _records(flat: Sequence[Any]) -> list[JobRecord]:
    """Records from pl_append_record's values (a body or its length only where asked for)."""
    out = []
    for i in range(0, len(flat), _RECORD_WIDTH):
        prio, id_, state, aa, ar, cs, ca, ra, ua, cl, body, size = flat[i : i + _RECORD_WIDTH]
        out.append(
            JobRecord(
                priority=int(prio),
                local_id=int(id_),
                state=JobState(int(state)),
                attempts_allowed=int(aa),
                attempts_remaining=int(ar),
                custom_status=_decode_text(cs),
                created_at_ms=int(ca),
                run_after_ms=int(ra),
                updated_at_ms=int(ua),
                claim=None if cl is None else _decode_text(cl),
                body=body,
                body_size=None if size is None else int(size),
            )
        )
    return out


def _queue_stats(
    queues: Sequence[str], priorities: int, values: list[int]
) -> dict[str, QueueStats]:
    """Parse queue_stats.lua's flat reply (see the script for its layout)."""
    now, at = values[0], 1
    found: dict[str, QueueStats] = {}
    for queue in queues:
        exists, at = values[at], at + 1
        if not exists:
            continue
        stats = QueueStats(now_ms=now, counts={}, oldest_update={})
        for priority in range(1, priorities + 1):
            row, at = values[at : at + 12], at + 12
            for i, state in enumerate(JobState):
                stats.counts[(priority, state, False)] = row[2 * i]
                stats.counts[(priority, state, True)] = row[2 * i + 1]
            for state, oldest in zip(AGED_STATES, row[8:11], strict=True):
                if oldest >= 0:
                    stats.oldest_update[(priority, state)] = oldest
            if row[11] >= 0:
                stats.first_reserve_expiry[priority] = row[11]
        expiry, at = values[at], at + 1
        found[queue] = replace(stats, first_key_expiry=expiry if expiry >= 0 else None)
    return found
