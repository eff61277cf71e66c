"""The request observer protocol: what the handler tells the operating layer (rate limits,
metrics, request logs) about each request. The default does nothing; `pinlater.ops.observer`
implements it. It lives beside the handler so the handler depends on no operating code.
"""

from __future__ import annotations

from pinlater.errors import PinLaterError


class RequestObserver:
    """Hooks for rate limiting, metrics and logs; the default does nothing."""

    def before_dequeue(self, queue: str, limit: int) -> int | None:
        """Raise DequeueRateLimited to refuse (piggy-backed acks are applied anyway), or return
        a smaller limit; None keeps `limit`. When it returns, `after_dequeue` follows exactly
        once, whatever happens next."""
        return None

    def after_dequeue(self, queue: str, handed_out: int) -> None:
        """Called with the number of jobs a dequeue actually handed out (0 if it failed)."""

    def on_error(self, method: str, context: object, error: PinLaterError) -> None:
        """Called for every PinLaterError answered to a client."""

    def on_call(
        self,
        method: str,
        context: object,
        queue: object,
        outcome: str,
        seconds: float,
        message: str,
    ) -> None:
        """Called once per RPC after it ended: `queue` is the raw name from the request (None
        when the method has none), `outcome` "ok" or the error code name."""

    def on_password_refused(self, reason: str) -> None:
        """An admin password was refused: `reason` is one of password_guard.REFUSAL_REASONS."""

    def on_jobs(self, event: str, queue: str, count: int) -> None:
        """Jobs affected by a successful call on a validated queue: enqueued (stored),
        deduplicated (an enqueue whose unique key was held: nothing stored), dequeued (not dry
        runs), acked_succeeded, acked_failed (acks received), retried, deleted."""
