"""Worker: dequeue jobs, run a handler on each in a thread pool, ack the outcome.

Adopting it takes a few lines (the README's "Writing a worker" has a complete, tested one):

    def send_email(job):                        # job: worker_sdk.JobContext
        address = job.body.decode()
        if "@" not in address:
            raise FailJob("no address")         # FAILED now, no retries
        if not mailer.send(address):
            raise RetryJob(delay=30)            # failure ack, next attempt in 30 s

    client = PinLaterClient(["127.0.0.1:9010"], service="email-worker")
    Worker(client, "emails", send_email, concurrency=8).run()   # until SIGTERM / Ctrl-C

What it guarantees, and how:
* **The queue must exist.** run() checks once at start and raises QueueNotFound when it does
  not, or, with `wait_for_queue=True`, logs that it waits and polls until the queue is created
  (or stop() is called). Until the server answers that check, it is retried like any call.
* **Bounded jobs in hand, more of them while handlers are fast.** `concurrency` handler
  threads run jobs; beyond them the worker claims jobs ahead only as many as its threads can
  start within `prefetch_wait` (0.05 s) at the handlers' measured speed, at most
  `max_prefetch` (1000) and `prefetch_bytes` (64 MiB) of bodies (worker_sdk/slots.py). Fast
  handlers thus get large batches per round trip (a no-op handler drains at the rate of a
  batching client), while slow ones get exactly `concurrency` jobs at a time, as does every
  handler until one has finished; a handler that turns slow stops the prefetch before the next
  dequeue. `max_prefetch=0` never holds more jobs than threads.
* **Little bookkeeping per job**: a handler thread appends each finished job to a lock-free
  list and records a group of them under the worker's lock (acks, counters, handler times)
  after PUBLISH_EVERY jobs, before it would wait for a job, or after a job that took
  PUBLISH_SLOW or more; the loop records what is left at least every PUBLISH_INTERVAL while
  jobs are in hand. One lock round per job had the threads convoying on the lock: a no-op job
  cost the worker ~10 us of CPU of its own, now ~5 us (plus ~4 us of Thrift and sockets).
* **Acks ride on the next dequeue** with the claims the server handed out (the client sends
  `DequeuedJob.claim` back as PinLaterJobAckInfo.claimDescriptor), so a stale ack cannot touch a
  job another worker now holds. While the queue is idle they are sent on their own after
  `ack_delay`. An ack that fails to send is put back and retried with backoff, never dropped:
  a lost ack would only make the job run again after the claim timeout, but that is the waste
  we promise not to cause. Resending is safe because claim-fenced acks are idempotent. The one
  exception is QUEUE_NOT_FOUND (the queue was deleted with its jobs): those acks are dropped
  with an error log.
* **Long-poll**: each dequeue asks the server to hold it up to `long_poll` seconds (default 1)
  when the queue is empty (`PinLaterDequeueRequest.waitMillis`), so a job that arrives is
  handed out at once instead of after a poll interval, and an idle worker costs one call per
  `long_poll`. `long_poll=0` polls with `idle_backoff` instead. A server that answers an
  empty long-poll early (one without long-poll, say) gets the idle backoff too.
* **Backoff with jitter** when the queue is empty (`idle_backoff`), the server refuses the
  dequeue (DEQUEUE_RATE_LIMITED; its piggy-backed acks were applied) or cannot be reached
  (`error_backoff`); the client's failover picks another server if it has several. Backoff
  resets on the first dequeue that returns jobs. A failed call is logged once per retry, with
  the number of consecutive failures, and the first success after them says so at INFO.
* **Outcome -> ack**: see worker_sdk.job (return = success; RetryJob / any exception = failure
  with a delay from the RetryPolicy; FailJob = FAILED now). The exception type and message go
  into the custom status, truncated to `status_max_chars`. Logged: success at DEBUG, FailJob
  and RetryJob at INFO, any other exception at WARNING, each with the attempt number and what
  happens next (retry delay, or FAILED).
* **Heartbeats**: with `heartbeat=SECONDS` one batched, claim-fenced checkpoint per interval
  extends the claim of every running job, so jobs longer than the server's claim timeout are
  not handed to a second worker. Pick an interval well under the claim timeout.
* **Graceful shutdown**: `stop()` (or SIGTERM / SIGINT when `run()` is on the main thread) stops
  dequeuing, lets running handlers finish for up to `shutdown_timeout`, acks them (retrying for
  up to `ack_flush_timeout` more) and returns. A second signal exits the process at once
  (`os._exit(128 + signal)`); its unacked jobs come back after the claim timeout. Handlers run
  on daemon threads, so a handler still running at the deadline does not keep the process alive;
  its job also comes back after the claim timeout.
* A dequeue whose reply is lost (server killed mid-call) leaves its jobs claimed until the claim
  timeout: at-least-once, nothing lost.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from worker_sdk.client import PinLaterClient
from worker_sdk.errors import DequeueRateLimited, PinLaterError, QueueNotFound
from worker_sdk.job import FailJob, JobContext, RetryJob
from worker_sdk.models import AckInfo, Acks, CheckpointRequest, DequeuedJob
from worker_sdk.retry import ExponentialRetry, RetryPolicy, as_policy
from worker_sdk.slots import SlotController

log = logging.getLogger("worker_sdk.worker")

Handler = Callable[[JobContext], object]
MAX_ACKS_PER_CALL = 1000  # well under the server's limits.max_jobs_per_request
#: a handler thread records its finished jobs under the worker's lock ("publishes" them) after
#: this many, before it would wait for a job, or after a job that took PUBLISH_SLOW seconds
PUBLISH_EVERY = 64
PUBLISH_SLOW = 0.001
#: while jobs are in hand the loop publishes at least this often (a thread that went on to a
#: long job after fast ones leaves their acks to it)
PUBLISH_INTERVAL = 0.02


@dataclass
class WorkerStats:
    """Counters since the worker started (a snapshot; see Worker.stats()). `failed` counts
    failure acks (attempts), not jobs that ended FAILED; `rescheduled` counts jobs a handler
    gave back with checkpoint(reschedule=True)."""

    started_at: float = field(default_factory=time.monotonic)
    dequeued: int = 0
    succeeded: int = 0
    failed: int = 0
    rescheduled: int = 0
    in_flight: int = 0
    acks_pending: int = 0
    acks_sent: int = 0
    rpc_errors: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.rescheduled


@dataclass
class _Backoff:
    """Exponential backoff with jitter between `low` and `high` seconds."""

    low: float
    high: float
    streak: int = 0

    def next(self) -> float:
        full = min(self.high, self.low * 2 ** min(self.streak, 32))
        self.streak += 1
        return full * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.streak = 0


def _log_failure(job: JobContext, exc: BaseException, delay: float) -> None:
    """One line per failed attempt: FailJob / RetryJob (the handler's decision) at INFO, any
    other exception at WARNING (with the traceback at DEBUG level)."""
    if isinstance(exc, FailJob) or job.is_last_attempt:
        then = "FAILED now" if isinstance(exc, FailJob) else "no attempts left: FAILED"
    else:
        then = f"next attempt in {delay:.3g}s"
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    expected = isinstance(exc, (FailJob, RetryJob))
    log.log(
        logging.INFO if expected else logging.WARNING,
        "job %s attempt %d %s: %s; %s",
        job.descriptor,
        job.attempt,
        "gave up" if isinstance(exc, FailJob) else "failed",
        what,
        then,
        exc_info=not expected and log.isEnabledFor(logging.DEBUG),
    )


class Worker:
    """Runs `handler` on the jobs of one queue; see the module docstring. Thread-safe."""

    def __init__(
        self,
        client: PinLaterClient,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 4,
        retry: RetryPolicy | Callable | float | None = None,
        heartbeat: float | None = None,
        max_batch: int = 1000,
        max_prefetch: int = 1000,
        prefetch_wait: float = 0.05,
        prefetch_bytes: int = 64 * 1024 * 1024,
        idle_backoff: tuple[float, float] = (0.05, 1.0),
        error_backoff: tuple[float, float] = (0.1, 5.0),
        ack_delay: float = 0.02,
        shutdown_timeout: float = 30.0,
        ack_flush_timeout: float = 10.0,
        status_max_chars: int = 1000,
        wait_for_queue: bool = False,
        queue_poll_interval: float = 2.0,
        long_poll: float = 1.0,
    ):
        if concurrency < 1 or max_batch < 1 or status_max_chars < 20:
            raise ValueError("need concurrency >= 1, max_batch >= 1, status_max_chars >= 20")
        if long_poll < 0:
            raise ValueError("long_poll must be >= 0 seconds (0: no long-poll)")
        self.long_poll = long_poll
        if heartbeat is not None and heartbeat <= 0:
            raise ValueError("heartbeat must be > 0 seconds (or None for none)")
        self.client, self.queue, self.handler = client, queue, handler
        self.concurrency, self.max_batch = concurrency, max_batch
        self._slots = SlotController(
            concurrency,
            max_prefetch=max_prefetch,
            prefetch_wait=prefetch_wait,
            prefetch_bytes=prefetch_bytes,
        )
        #: when each handler thread started its current job (0: idle); one writer per entry
        self._job_started = [0.0] * concurrency
        self.retry = ExponentialRetry() if retry is None else as_policy(retry)
        self.heartbeat, self.ack_delay = heartbeat, ack_delay
        self.shutdown_timeout, self.ack_flush_timeout = shutdown_timeout, ack_flush_timeout
        self.status_max_chars = status_max_chars
        self.wait_for_queue, self.queue_poll_interval = wait_for_queue, queue_poll_interval
        self._idle, self._errors = _Backoff(*idle_backoff), _Backoff(*error_backoff)
        self._cond = threading.Condition(threading.RLock())  # RLock: signal handlers re-enter
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._tasks: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._running: dict[str, JobContext] = {}
        #: (context, ack, ok, seconds) of finished jobs not yet published; lock-free appends
        self._finished: deque[tuple[JobContext, AckInfo | None, bool, float]] = deque()
        self._acks_ok: list[AckInfo] = []
        self._acks_failed: list[AckInfo] = []
        self._first_ack_at: float | None = None
        self._ack_retry_at = 0.0
        self._next_dequeue = 0.0
        self._stats = WorkerStats()
        self._signals = 0
        self._loop_waiting = False
        self._reserved = 0  # jobs asked for by the dequeue calls in flight
        self._dequeues_in_flight = 0
        self._pipelined = False  # the last dequeue came back full: calls may overlap

    # ---- control ----

    def run(self, *, handle_signals: bool = True) -> bool:
        """Work until stop() (or a signal); returns True if every dequeued job was acked or
        rescheduled, False if some were left for the claim timeout. Raises QueueNotFound at
        start when the queue does not exist (unless `wait_for_queue`)."""
        previous = self._install_signals() if handle_signals else {}
        try:
            if not self._await_queue():
                return True  # stopped before it started
            return self._run_threads()
        finally:
            self._done.set()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run_threads(self) -> bool:
        threads = [
            threading.Thread(target=self._work, args=(i,), daemon=True, name=f"pinlater-worker-{i}")
            for i in range(self.concurrency)
        ]
        if self.heartbeat:
            threads.append(
                threading.Thread(
                    target=self._heartbeat_loop, daemon=True, name="pinlater-heartbeat"
                )
            )
        for thread in threads:
            thread.start()
        log.info("worker started: queue %s, concurrency %d", self.queue, self.concurrency)
        calls = ThreadPoolExecutor(self._slots.max_dequeues, thread_name_prefix="pinlater-dequeue")
        try:
            self._dequeue_loop(calls)
            calls.shutdown(wait=True)  # the jobs of calls in flight join the drain
            return self._drain()
        finally:
            calls.shutdown(wait=False)
            self._done.set()
            for _ in range(self.concurrency):
                self._tasks.put(None)

    def _await_queue(self) -> bool:
        """True once the queue exists; False when stop() came first. Raises QueueNotFound
        unless `wait_for_queue`. Server errors are logged and retried with backoff."""
        waiting = False
        while not self._stopping.is_set():
            try:
                exists = self.queue in self.client.queue_names()
            except PinLaterError as exc:
                self._pause(self._call_failed("queue check", exc))
                continue
            self._call_succeeded("queue check")
            if exists:
                if waiting:
                    log.info("queue %s exists now: starting", self.queue)
                return True
            if not self.wait_for_queue:
                raise QueueNotFound(self.queue)
            if not waiting:
                log.warning(
                    "queue %s does not exist yet: waiting for it to be created "
                    "(checking every %.3gs)",
                    self.queue,
                    self.queue_poll_interval,
                )
                waiting = True
            self._pause(self.queue_poll_interval)
        return False

    def _pause(self, seconds: float) -> None:
        """Sleep up to `seconds`; stop() ends it early."""
        with self._cond:
            if not self._stopping.is_set():
                self._cond.wait(seconds)

    def start(self) -> threading.Thread:
        """run() on a new thread (no signal handling); stop() and join it when done."""
        thread = threading.Thread(
            target=self.run,
            kwargs={"handle_signals": False},
            name="pinlater-worker-loop",
            daemon=True,
        )
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop dequeuing and start the graceful shutdown; returns at once."""
        with self._cond:
            self._stopping.set()
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stats(self) -> WorkerStats:
        with self._cond:
            self._publish_locked()
            snapshot = WorkerStats(
                **{
                    k: getattr(self._stats, k)
                    for k in (
                        "started_at",
                        "dequeued",
                        "succeeded",
                        "failed",
                        "rescheduled",
                        "acks_sent",
                        "rpc_errors",
                    )
                }
            )
            snapshot.in_flight = self._in_flight_locked()
            snapshot.acks_pending = len(self._acks_ok) + len(self._acks_failed)
            return snapshot

    # ---- the dequeue loop (the thread that called run()) ----

    def _dequeue_loop(self, calls: ThreadPoolExecutor) -> None:
        """Decide the next dequeue or ack flush; dequeues run on `calls` (several at once
        while prefetching, see worker_sdk/slots.py), each holding a reservation of its size."""
        while True:
            prefetching = False
            with self._cond:
                action, size = self._next_action()
                if action == "stop":
                    return
                acks = self._take_acks()
                if action == "dequeue":
                    self._reserved += size
                    self._dequeues_in_flight += 1
                    prefetching = self._slots.prefetch() > 0
            if action == "dequeue":
                calls.submit(self._dequeue_call, size, acks, prefetching)
            else:
                self._send_acks(acks)

    def _dequeue_call(self, limit: int, acks: tuple[list, list], prefetching: bool) -> None:
        """One dequeue on a call thread; its reservation ends once its jobs are in hand. A full
        answer to a prefetching call means a backlog: the next calls may overlap."""
        received = 0
        try:
            received = self._dequeue(limit, acks)
        except Exception as exc:  # a bug, not the server: keep the acks, back off, go on
            log.exception("dequeue on queue %s failed unexpectedly", self.queue)
            self._rpc_failed("dequeue", exc, acks)
        finally:
            with self._cond:
                self._reserved -= limit
                self._dequeues_in_flight -= 1
                self._pipelined = prefetching and received >= limit
                self._cond.notify_all()

    def _next_action(self) -> tuple[str, int]:
        """Wait (lock held) until a dequeue (of how many jobs) or an ack flush is due, or we are
        stopping."""
        while not self._stopping.is_set():
            self._publish_locked()
            now = time.monotonic()
            size = self._dequeue_size(now)
            if size > 0 and now >= self._next_dequeue:
                return "dequeue", size
            ack_at = self._ack_due()
            if ack_at is not None and now >= ack_at:
                return "flush", 0
            wake = [t for t in (self._next_dequeue if size > 0 else None, ack_at) if t is not None]
            self._loop_waiting = True
            cap = PUBLISH_INTERVAL if self._running else 1.0
            self._cond.wait(min(min(wake) - now, cap) if wake else cap)
            self._loop_waiting = False
        return "stop", 0

    def _dequeue_size(self, now: float) -> int:
        """Lock held: jobs to ask for now (0: none), by the slot controller."""
        started = [t for t in self._job_started if t]
        longest = now - min(started) if started else 0.0
        held = self._in_flight_locked() + self._reserved
        return self._slots.dequeue_size(
            held, self.max_batch, longest, self._dequeues_in_flight, self._pipelined
        )

    def _dequeue(self, limit: int, acks: tuple[list, list]) -> int:
        """One dequeue call; returns how many jobs it brought."""
        started = time.monotonic()
        try:
            jobs = self.client.dequeue(
                self.queue,
                limit,
                Acks(tuple(acks[0]), tuple(acks[1])),
                wait_ms=int(self.long_poll * 1000),
            )
        except DequeueRateLimited:
            self._acks_delivered(acks)  # the server applies piggy-backed acks anyway
            self._schedule_idle()
            return 0
        except PinLaterError as exc:
            self._rpc_failed("dequeue", exc, acks)
            return 0
        self._acks_delivered(acks)
        self._call_succeeded("dequeue")
        if jobs:
            self._submit(jobs)
        elif time.monotonic() - started < self.long_poll / 2:
            self._schedule_idle()  # answered early: no long-poll there (or it is stopping)
        return len(jobs)

    def _send_acks(self, acks: tuple[list, list]) -> None:
        try:
            self.client.ack(self.queue, acks[0], acks[1])
        except PinLaterError as exc:
            self._rpc_failed("ack", exc, acks)
            return
        self._acks_delivered(acks)

    def _call_failed(self, what: str, exc: Exception) -> float:
        """Log one failed call with the count of consecutive failures; returns the backoff."""
        delay = self._errors.next()
        log.warning(
            "%s on queue %s failed (%d in a row): %s; retrying in %.2fs",
            what,
            self.queue,
            self._errors.streak,
            exc,
            delay,
        )
        return delay

    def _call_succeeded(self, what: str) -> None:
        if self._errors.streak:
            log.info(
                "%s on queue %s works again after %d failed calls",
                what,
                self.queue,
                self._errors.streak,
            )
        self._errors.reset()

    def _rpc_failed(self, what: str, exc: Exception, acks: tuple[list, list]) -> None:
        delay = self._call_failed(what, exc)
        with self._cond:
            self._stats.rpc_errors += 1
            self._next_dequeue = max(self._next_dequeue, time.monotonic() + delay)
            if isinstance(exc, QueueNotFound):
                if acks[0] or acks[1]:
                    log.error(
                        "queue %s does not exist: dropping %d acks (%s)",
                        self.queue,
                        len(acks[0]) + len(acks[1]),
                        ", ".join(a.descriptor for a in acks[0] + acks[1]),
                    )
            else:
                self._restore_acks(acks)
                self._ack_retry_at = time.monotonic() + delay

    def _schedule_idle(self) -> None:
        """The queue looked empty (or refused us): next dequeue after the idle backoff."""
        with self._cond:
            self._next_dequeue = time.monotonic() + self._idle.next()

    def _submit(self, jobs: list[DequeuedJob]) -> None:
        with self._cond:
            self._idle.reset()
            self._stats.dequeued += len(jobs)
            self._slots.jobs_received(len(jobs), sum(len(job.body) for job in jobs))
            for job in jobs:
                context = JobContext(self.client, self.queue, job, self._stopping)
                self._running[job.descriptor] = context
                self._tasks.put(context)

    # ---- acks (lock held unless noted) ----

    def _in_flight_locked(self) -> int:
        return len(self._running)

    def _ack_due(self) -> float | None:
        if self._first_ack_at is None or not (self._acks_ok or self._acks_failed):
            return None
        delay = 0.0 if self._stopping.is_set() else self.ack_delay
        return max(self._first_ack_at + delay, self._ack_retry_at)

    def _take_acks(self) -> tuple[list, list]:
        ok, failed = self._acks_ok[:MAX_ACKS_PER_CALL], self._acks_failed[:MAX_ACKS_PER_CALL]
        del self._acks_ok[:MAX_ACKS_PER_CALL], self._acks_failed[:MAX_ACKS_PER_CALL]
        if not (self._acks_ok or self._acks_failed):
            self._first_ack_at = None
        return ok, failed

    def _restore_acks(self, acks: tuple[list, list]) -> None:
        if acks[0] or acks[1]:
            self._acks_ok[:0], self._acks_failed[:0] = acks
            self._first_ack_at = time.monotonic()

    def _acks_delivered(self, acks: tuple[list, list]) -> None:
        """Not under the lock."""
        if acks[0] or acks[1]:
            with self._cond:
                self._stats.acks_sent += len(acks[0]) + len(acks[1])

    def _add_ack(self, ack: AckInfo | None, ok: bool) -> None:
        if ack is not None:
            (self._acks_ok if ok else self._acks_failed).append(ack)
            if self._first_ack_at is None:
                self._first_ack_at = time.monotonic()

    # ---- handler threads ----

    def _work(self, slot: int) -> None:
        """Run jobs; finished ones are appended to `_finished` without the lock and published
        in groups (one lock round per job cost more than a no-op job itself)."""
        finished = self._finished
        while True:
            context = self._next_task()
            if context is None:
                self._publish()
                return
            if self._done.is_set():
                continue  # past the shutdown deadline: leave it to the claim timeout
            started = self._job_started[slot] = time.monotonic()
            ack, ok = self._execute(context)
            seconds = time.monotonic() - started
            self._job_started[slot] = 0.0
            finished.append((context, ack, ok, seconds))
            if seconds >= PUBLISH_SLOW or len(finished) >= PUBLISH_EVERY:
                self._publish()

    def _next_task(self) -> JobContext | None:
        """The next job (None: exit); finished jobs are published before waiting for one."""
        if self._finished:
            try:
                return self._tasks.get_nowait()
            except queue_module.Empty:
                self._publish()
        return self._tasks.get()

    def _publish(self) -> None:
        with self._cond:
            had_acks = self._first_ack_at is not None
            if self._publish_locked():
                first_ack = not had_acks and self._first_ack_at is not None
                if self._worth_waking(time.monotonic(), first_ack):
                    self._cond.notify_all()

    def _publish_locked(self) -> int:
        """Lock held: record the finished jobs (acks, counters, handler times); how many."""
        count, total, slowest = 0, 0.0, 0.0
        while self._finished:
            context, ack, ok, seconds = self._finished.popleft()
            count, total, slowest = count + 1, total + seconds, max(slowest, seconds)
            self._running.pop(context.descriptor, None)
            self._add_ack(ack, ok)
            if context.released:
                self._stats.rescheduled += 1
            elif ok:
                self._stats.succeeded += 1
            else:
                self._stats.failed += 1
        self._slots.handlers_finished(count, total, slowest)
        return count

    def _worth_waking(self, now: float, first_ack: bool) -> bool:
        """Lock held, after a job finished: whether a waiting thread may now have work (the
        loop: a dequeue or a first ack to schedule; the shutdown drain: nothing left running).
        Waking the loop for every fast job would cost more than the jobs."""
        if first_ack or not self._running or self._stopping.is_set():
            return True
        return self._loop_waiting and self._dequeue_size(now) > 0

    def _execute(self, job: JobContext) -> tuple[AckInfo | None, bool]:
        """Run the handler; returns the ack to send (None if the job was rescheduled)."""
        try:
            result = self.handler(job)
        except BaseException as exc:  # noqa: BLE001 - every outcome must become an ack
            if job.released:
                log.warning("job %s raised %r after it was rescheduled", job.descriptor, exc)
                return None, False
            return self._failure(job, exc), False
        if job.released:
            return None, True
        if log.isEnabledFor(logging.DEBUG):  # not job.attempt's cost per job otherwise
            log.debug("job %s succeeded (attempt %d)", job.descriptor, job.attempt)
        status = result if isinstance(result, str) else ""
        return AckInfo(job.descriptor, claim=job.claim, append_status=self._truncate(status)), True

    def _failure(self, job: JobContext, exc: BaseException) -> AckInfo:
        if isinstance(exc, FailJob):
            delay = 0.0
            self._make_last_attempt(job)
        elif isinstance(exc, RetryJob) and exc.delay is not None:
            delay = exc.delay
        else:
            delay = self._policy_delay(job, exc)
        _log_failure(job, exc, delay)
        status = self._truncate(f"attempt {job.attempt}: {type(exc).__name__}: {exc}; ")
        return AckInfo(
            job.descriptor,
            claim=job.claim,
            append_status=status,
            retry_delay_ms=max(0, int(delay * 1000)),
        )

    def _policy_delay(self, job: JobContext, exc: BaseException) -> float:
        try:
            return max(0.0, float(self.retry.delay(job, exc)))
        except Exception:
            log.exception("retry policy failed for job %s; retrying without delay", job.descriptor)
            return 0.0

    def _make_last_attempt(self, job: JobContext) -> None:
        """FailJob: set attempts to 1 (fenced checkpoint) so the failure ack makes it FAILED."""
        if job.is_last_attempt:
            return
        for pause in (0.2, 1.0, None):
            try:
                job.checkpoint(attempts=1)
                return
            except PinLaterError as exc:
                if pause is None or self._done.is_set():
                    log.warning(
                        "FailJob %s: could not mark it final (%s); it keeps its remaining attempts",
                        job.descriptor,
                        exc,
                    )
                    return
                time.sleep(pause)

    def _truncate(self, text: str) -> str:
        limit = self.status_max_chars
        return text if len(text) <= limit else text[: limit - 3] + "..."

    # ---- heartbeats ----

    def _heartbeat_loop(self) -> None:
        while not self._done.wait(self.heartbeat):
            with self._cond:
                requests = [
                    CheckpointRequest(c.descriptor, claim=c.claim)
                    for c in self._running.values()
                    if not c.released
                ]
            for start in range(0, len(requests), MAX_ACKS_PER_CALL):
                try:
                    self.client.checkpoint(self.queue, requests[start : start + MAX_ACKS_PER_CALL])
                except PinLaterError as exc:
                    log.warning("heartbeat for %d jobs failed: %s", len(requests), exc)

    # ---- shutdown ----

    def _drain(self) -> bool:
        """Wait for running handlers (bounded), then flush acks (bounded)."""
        deadline = time.monotonic() + self.shutdown_timeout
        log.info(
            "stopping: waiting up to %.1fs for %d running jobs",
            self.shutdown_timeout,
            self.stats().in_flight,
        )
        self._flush_until(deadline, wait_for_handlers=True)
        with self._cond:
            abandoned = sorted(self._running)
        if abandoned:
            log.warning(
                "%d jobs still running at the shutdown deadline; they come back after "
                "the claim timeout: %s",
                len(abandoned),
                ", ".join(abandoned),
            )
        self._done.set()
        self._flush_until(time.monotonic() + self.ack_flush_timeout, wait_for_handlers=False)
        with self._cond:
            unsent = [a.descriptor for a in self._acks_ok + self._acks_failed]
        if unsent:
            log.error(
                "could not send %d acks before exiting; those jobs run again after the "
                "claim timeout: %s",
                len(unsent),
                ", ".join(unsent),
            )
        stats = self.stats()
        log.info(
            "worker stopped: %d dequeued, %d succeeded, %d failed, %d rescheduled, "
            "%d acks sent, %d RPC errors",
            stats.dequeued,
            stats.succeeded,
            stats.failed,
            stats.rescheduled,
            stats.acks_sent,
            stats.rpc_errors,
        )
        return not abandoned and not unsent

    def _flush_until(self, deadline: float, *, wait_for_handlers: bool) -> None:
        while True:
            with self._cond:
                while True:
                    self._publish_locked()
                    now = time.monotonic()
                    ack_at = self._ack_due()
                    if now >= deadline or (ack_at is None and not wait_for_handlers):
                        return
                    if wait_for_handlers and not self._running:
                        return  # the ack flush that follows has its own deadline
                    if ack_at is not None and now >= ack_at:
                        break
                    until = deadline if ack_at is None else min(ack_at, deadline)
                    self._cond.wait(min(until - now, PUBLISH_INTERVAL if self._running else 1.0))
                acks = self._take_acks()
            self._send_acks(acks)

    def _install_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _on_signal(self, signum: int, frame) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals > 1:
            log.warning(
                "%s again: exiting now; unacked jobs come back after the claim timeout", name
            )
            logging.shutdown()
            os._exit(128 + signum)
        log.warning(
            "%s: no more dequeues; finishing running jobs (up to %.0fs); send it again "
            "to exit at once",
            name,
            self.shutdown_timeout,
        )
        self.stop()
