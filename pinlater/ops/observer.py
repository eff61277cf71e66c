"""The server's RequestObserver: per-queue dequeue caps and rate limits, metrics, request logs.

Order inside `before_dequeue`: the per-queue concurrency slot first (cheap, in memory), then
the rate limiter. A refusal releases whatever it took, counts the refusal and raises
DequeueRateLimited; the handler still applies the request's piggy-backed acks. On success the
dequeue may take at most the rate limiter's allowance, and `after_dequeue` charges the bucket
with the jobs actually handed out (dry runs included: they read the same rows) and releases the
slot.
"""

from __future__ import annotations

from pinlater.errors import DequeueRateLimited, PinLaterError
from pinlater.handler.observer import RequestObserver
from pinlater.ops.metrics import Metrics
from pinlater.ops.queue_slots import QueueSlots
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.ops.rates import JobRates
from pinlater.ops.request_log import RequestLog


class OperatingObserver(RequestObserver):
    def __init__(
        self,
        metrics: Metrics,
        limiter: QueueRateLimiter,
        slots: QueueSlots,
        request_log: RequestLog,
        rates: JobRates | None = None,
    ):
        self.metrics = metrics
        self.limiter = limiter
        self.slots = slots
        self.request_log = request_log
        self.rates = rates

    def before_dequeue(self, queue: str, limit: int) -> int | None:
        if not self.slots.try_acquire(queue):
            self.metrics.dequeue_refused(queue, "concurrency")
            raise DequeueRateLimited(
                f"Dequeue rate limit exceeded for queue: {queue} (more than "
                f"{self.slots.cap} concurrent dequeues on this server)"
            )
        allowed = self.limiter.allowance(queue, limit)
        if allowed <= 0:
            self.slots.release(queue)
            if self.limiter.paused(queue):
                self.metrics.dequeue_refused(queue, "paused")
                raise DequeueRateLimited(
                    f"Dequeue rate limit exceeded for queue: {queue} (the queue is paused)"
                )
            self.metrics.dequeue_refused(queue, "rate")
            raise DequeueRateLimited(f"Dequeue rate limit exceeded for queue: {queue}")
        return allowed

    def after_dequeue(self, queue: str, handed_out: int) -> None:
        self.slots.release(queue)
        self.limiter.charge(queue, handed_out)

    def on_error(self, method: str, context: object, error: PinLaterError) -> None:
        pass  # logged by on_call, which also sees the latency

    def on_call(
        self,
        method: str,
        context: object,
        queue: object,
        outcome: str,
        seconds: float,
        message: str,
    ) -> None:
        if outcome == "ok" and isinstance(queue, str):
            if method == "createQueue":
                self.metrics.queues.add(queue)  # validated and created: a real queue name
            elif method == "deleteQueue":  # its series go; this call counts under queue=""
                self.metrics.forget_queue(queue)
        self.metrics.request(method, queue, outcome, seconds)
        self.request_log.record(method, context, queue, outcome, seconds, message)

    def on_password_refused(self, reason: str) -> None:
        self.metrics.password_refused.labels(reason).inc()

    def on_jobs(self, event: str, queue: str, count: int) -> None:
        self.metrics.jobs(event, queue, count)
        if self.rates is not None:
            self.rates.record(event, queue, count)
