"""Load modes of `pinlater enqueue` / `pinlater dequeue` (the original client tool's loops).

`num_queries` requests (-1: until `duration` seconds pass, or until interrupted) are issued by
`concurrency` threads sharing one client. Every second a line reports jobs/s and the p50/p99
latency of the requests completed in that second (rewritten in place when the output is a
terminal); a final summary covers the whole run. jobs/s counts jobs handled: enqueued jobs, or
dequeued jobs whose ack was sent. A dequeue request's latency is its dequeue plus its separate
ack call; with `piggyback` the acks ride on the thread's next dequeue (and the last ones are
flushed with one ack call at the end), so the latency is one dequeue.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from pinlater.cli.format import dumps
from pinlater.errors import PinLaterError
from worker_sdk.client import PinLaterClient
from worker_sdk.models import Acks, Job

MAX_ERRORS_SHOWN = 5


@dataclass
class LoadOptions:
    num_queries: int
    duration: float | None
    batch_size: int
    concurrency: int
    success_percent: int = 100
    piggyback: bool = False
    report_interval: float = 1.0


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, int(-(-fraction * len(sorted_values) // 1)))  # ceil
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Stats:
    """Counters shared by the load threads. Thread-safe."""

    started: float = field(default_factory=time.monotonic)
    requests: int = 0
    jobs: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    _interval: list[float] = field(default_factory=list)
    _interval_jobs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, seconds: float, jobs: int) -> None:
        with self._lock:
            self.requests += 1
            self.jobs += jobs
            self.latencies.append(seconds)
            self._interval.append(seconds)
            self._interval_jobs += jobs

    def record_error(self) -> int:
        with self._lock:
            self.errors += 1
            return self.errors

    def take_interval(self) -> tuple[int, list[float]]:
        with self._lock:
            jobs, lat = self._interval_jobs, self._interval
            self._interval_jobs, self._interval = 0, []
        return jobs, sorted(lat)

    def summary(self, mode: str) -> dict:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        with self._lock:
            lat = sorted(self.latencies)
            return _report(
                mode, "summary", elapsed, self.jobs, lat, requests=self.requests, errors=self.errors
            )


def _report(mode: str, event: str, elapsed: float, jobs: int, lat: list[float], **extra) -> dict:
    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 3)

    return {
        "event": event,
        "mode": mode,
        "elapsed_s": round(elapsed, 3),
        "jobs": jobs,
        "jobs_per_s": round(jobs / elapsed, 1),
        "p50_ms": ms(percentile(lat, 0.50)),
        "p99_ms": ms(percentile(lat, 0.99)),
        **extra,
    }


def format_report(report: dict) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f} ms"

    text = (
        f"{report['mode']}: {report['jobs_per_s']:.1f} jobs/s, p50 {ms(report['p50_ms'])}, "
        f"p99 {ms(report['p99_ms'])}"
    )
    if report["event"] == "summary":
        text += (
            f" | total {report['jobs']} jobs in {report['requests']} requests, "
            f"{report['elapsed_s']:.1f} s, {report['errors']} errors"
        )
    return text


class LoadRun:
    """One load run: worker threads, a reporter, and the final summary."""

    def __init__(
        self, mode: str, options: LoadOptions, out: TextIO, err: TextIO, as_json: bool, live: bool
    ):
        self.mode, self.options = mode, options
        self.out, self.err, self.as_json, self.live = out, err, as_json, live
        self.stats = Stats()
        self._issued = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = (time.monotonic() + options.duration) if options.duration else None

    def claim_query(self) -> bool:
        """Reserve the next request slot; False when the run is over."""
        if self._stop.is_set():
            return False
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return False
        with self._lock:
            if 0 <= self.options.num_queries <= self._issued:
                return False
            self._issued += 1
            return True

    def failed(self, error: Exception) -> None:
        count = self.stats.record_error()
        if count <= MAX_ERRORS_SHOWN:
            self.err.write(f"Exception for request: {error}\n")
            self.err.flush()

    def run(self, worker: Callable[[LoadRun], None]) -> dict:
        threads = [
            threading.Thread(
                target=self._guard, args=(worker,), daemon=True, name=f"pinlater-load-{i}"
            )
            for i in range(self.options.concurrency)
        ]
        reporter = threading.Thread(target=self._report_loop, daemon=True)
        self.stats.started = time.monotonic()
        for thread in threads:
            thread.start()
        reporter.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            self._stop.set()
            for thread in threads:
                thread.join(5)
        self._stop.set()
        reporter.join()
        summary = self.stats.summary(self.mode)
        self._emit(summary, final=True)
        return summary

    def _guard(self, worker: Callable[[LoadRun], None]) -> None:
        try:
            worker(self)
        except Exception as exc:  # noqa: BLE001 - reported, the other threads carry on
            self.failed(exc)

    def _report_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.options.report_interval):
            now = time.monotonic()
            jobs, lat = self.stats.take_interval()
            self._emit(_report(self.mode, "interval", now - last, jobs, lat), final=False)
            last = now

    def _emit(self, report: dict, final: bool) -> None:
        if self.as_json:
            self.out.write(dumps(report) + "\n")
        elif self.live:
            self.out.write("\r\x1b[K" + format_report(report) + ("\n" if final else ""))
        else:
            self.out.write(format_report(report) + "\n")
        self.out.flush()


def enqueue_worker(client: PinLaterClient, queue: str, make_jobs: Callable[[int], list[Job]]):
    """A load thread that enqueues batches until the run is over."""

    def work(run: LoadRun) -> None:
        while run.claim_query():
            jobs = make_jobs(run.options.batch_size)
            started = time.monotonic()
            try:
                client.enqueue(queue, jobs)
            except PinLaterError as exc:
                run.failed(exc)
                continue
            run.stats.record(time.monotonic() - started, len(jobs))

    return work


def dequeue_worker(client: PinLaterClient, queue: str):
    """A load thread that dequeues and acks (separately, or piggy-backed) until the run is over."""

    def work(run: LoadRun) -> None:
        opts = run.options
        pending = Acks()
        while run.claim_query():
            started = time.monotonic()
            try:
                jobs = client.dequeue(queue, opts.batch_size, pending if opts.piggyback else None)
                handled = len(pending.succeeded) + len(pending.failed) if opts.piggyback else 0
                pending = _decide(jobs, opts.success_percent)
                if not opts.piggyback:
                    client.ack(queue, pending.succeeded, pending.failed)
                    handled, pending = len(jobs), Acks()
            except PinLaterError as exc:
                run.failed(exc)
                pending = Acks()
                continue
            run.stats.record(time.monotonic() - started, handled)
        if pending.succeeded or pending.failed:
            _flush(client, queue, pending, run)

    return work


def _decide(jobs, success_percent: int) -> Acks:
    """Split dequeued jobs into success/failure acks (a DequeuedJob acks with its claim)."""
    if success_percent >= 100:
        return Acks(tuple(jobs), ())
    succeeded: list = []
    failed: list = []
    for job in jobs:
        (succeeded if random.uniform(0, 100) < success_percent else failed).append(job)
    return Acks(tuple(succeeded), tuple(failed))


def _flush(client: PinLaterClient, queue: str, pending: Acks, run: LoadRun) -> None:
    started = time.monotonic()
    try:
        client.ack(queue, pending.succeeded, pending.failed)
    except PinLaterError as exc:
        run.failed(exc)
        return
    run.stats.record(time.monotonic() - started, len(pending.succeeded) + len(pending.failed))
