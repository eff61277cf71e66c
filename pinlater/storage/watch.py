"""The due watcher: how parked dequeues (long-poll) learn of jobs this server did not see
arrive, i.e. jobs enqueued through another server and delayed jobs coming due.

One thread per server asks storage, for each queue that has parked dequeues, when its earliest
PENDING job is due (`Shard.next_due_ms`, one read per shard): one call per shard per poll,
however many requests are parked, instead of a dequeue per parked request. The poll interval
starts at `min_interval` and doubles up to `max_interval` (at most 1 s, so a job enqueued
through another server reaches a parked dequeue within a second); it shrinks to the time until
a known delayed job is due. A change this server saw itself (an enqueue through it, say)
triggers a poll within `min_interval`, so a delayed job enqueued here is timed from storage.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pinlater.errors import PinLaterError

log = logging.getLogger(__name__)


@dataclass
class _Watch:
    next_poll: float
    interval: float
    last_poll: float = 0.0


class DueWatcher:
    """Polls `store` (a ShardedBackend) for the watched queues; `store.jobs_may_be_due` is
    what it calls when a shard holds an eligible job."""

    def __init__(
        self,
        store,
        *,
        min_interval: float = 0.1,
        max_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.min_interval = min_interval
        self.max_interval = max(min_interval, max_interval)
        self.clock = clock
        self.polls = 0  # storage calls made (tests and benchmarks)
        self._cond = threading.Condition()
        self._watched: dict[str, _Watch] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, queue: str) -> None:
        """Poll `queue` from now on (idempotent); the first poll comes after `min_interval`."""
        with self._cond:
            if self._stopped or queue in self._watched:
                return
            self._watched[queue] = _Watch(self.clock() + self.min_interval, self.min_interval)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="due-watcher", daemon=True)
                self._thread.start()
            self._cond.notify()

    def unwatch(self, queue: str) -> None:
        with self._cond:
            self._watched.pop(queue, None)

    def poke(self, queue: str) -> None:
        """Something changed in `queue` here: poll it soon (at most one poll per
        `min_interval`), starting the back-off over."""
        if threading.current_thread() is self._thread:
            return  # the watcher's own signal
        with self._cond:
            watch = self._watched.get(queue)
            if watch is None:
                return
            watch.interval = self.min_interval
            watch.next_poll = min(watch.next_poll, watch.last_poll + self.min_interval)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._watched.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = self.clock()
                due = [q for q, w in self._watched.items() if w.next_poll <= now]
                if not due:
                    soonest = min((w.next_poll for w in self._watched.values()), default=None)
                    self._cond.wait(None if soonest is None else soonest - now)
                    continue
            for queue in due:
                try:
                    self._poll(queue)
                except Exception:  # never let the thread die: parked requests time out anyway
                    log.exception("due watcher: polling %s failed", queue)

    def _poll(self, queue: str) -> None:
        store, soonest, ready = self.store, None, []
        levels = store.num_priorities
        started = self.clock()
        # a partitioned queue: its placement and the shards still holding its jobs (with
        # clusters: of its cluster)
        for name in store.placement.dequeue_shards(queue) or store.read_shards(queue):
            if not store.health.is_healthy(name):
                continue
            self.polls += 1
            epoch, checked = store.empty.epoch(queue), store.empty.clock()
            try:
                due = store.call(name, lambda s: s.next_due_ms(queue), retries=0)
            except PinLaterError:
                continue  # a failing shard or a deleted queue: parked requests time out
            if due == 0:
                ready.append(name)
                continue
            if due is not None:
                soonest = due if soonest is None else min(soonest, due)
            # nothing eligible there: dequeues need not ask (keeps an idle queue free of them)
            store.empty.nothing_due(queue, name, range(1, levels + 1), epoch, checked)
        with self._cond:
            watch = self._watched.get(queue)
            if watch is None:
                return
            watch.last_poll = started
            wait = watch.interval if soonest is None else min(watch.interval, soonest / 1000)
            watch.next_poll = started + max(wait, 0.001)
            watch.interval = min(watch.interval * 2, self.max_interval)
        if ready:
            store.jobs_may_be_due(queue, ready)
