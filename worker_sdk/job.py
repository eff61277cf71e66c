"""What a handler sees (`JobContext`) and how it reports a failure (`RetryJob`, `FailJob`).

A handler is `handler(job: JobContext) -> None | str`. Returning means success (a returned
string is appended to the job's custom status). Raising means failure:

* any exception: failure ack; the worker's `RetryPolicy` picks the retry delay;
* `RetryJob(delay=30)`: failure ack with that delay (None: the policy's);
* `FailJob("why")`: the job goes to FAILED now, whatever attempts it has left.

Each failure uses up one attempt; on the last attempt any failure makes the job FAILED.
`FailJob` exists because the server has no "fail permanently" call, only "failure + retry
delay": the worker first checkpoints the job (fenced by its claim) with numOfAttemptsAllowed=1
and then acks the failure, which the server turns into FAILED. So a FailJob'd job reports
attempts_allowed 1 in lookups afterwards. If that checkpoint cannot be sent, the failure ack
still goes out and the job gets its ordinary retries instead (logged as a warning).

`JobContext.checkpoint()` talks to the server at once, from the handler's thread: it extends the
claim (a heartbeat), and can replace the body, set the attempts, or give the job back to the
queue (`reschedule=True`, optionally after `delay` seconds) without using up an attempt. A
rescheduled job is not acked by the worker: it is no longer ours.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from worker_sdk.models import CheckpointRequest, DequeuedJob

if TYPE_CHECKING:  # pragma: no cover
    from worker_sdk.client import PinLaterClient


#: guards a context's fields while a checkpoint updates them; one for all contexts (a lock per
#: job cost more than the rare checkpoints contend)
_CHECKPOINT_LOCK = threading.Lock()


class RetryJob(Exception):
    """Fail this attempt and retry after `delay` seconds (None: the worker's retry policy)."""

    def __init__(self, message: str = "retry requested", *, delay: float | None = None):
        if delay is not None and delay < 0:
            raise ValueError("retry delay must be >= 0")
        super().__init__(message)
        self.delay = delay


class FailJob(Exception):
    """Fail the job permanently: it goes to FAILED without further attempts."""


class JobContext:
    """One dequeued job as handed to a handler. Checkpoints are fenced by the job's claim, so
    a handler whose claim has expired (and whose job now runs elsewhere) changes nothing."""

    def __init__(
        self,
        client: PinLaterClient,
        queue: str,
        job: DequeuedJob,
        stopping: threading.Event | None = None,
    ):
        self.client, self.queue = client, queue
        self.descriptor = job.descriptor
        self.claim = job.claim
        self.body: bytes = job.body
        self.attempts_allowed = job.attempts_allowed
        self.attempts_remaining = job.attempts_remaining
        self.released = False
        self._stopping = stopping or threading.Event()

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry ... (1 if the server sent no metadata)."""
        if self.attempts_allowed is None or self.attempts_remaining is None:
            return 1
        return max(1, self.attempts_allowed - self.attempts_remaining + 1)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempts_remaining is not None and self.attempts_remaining <= 1

    @property
    def stopping(self) -> bool:
        """True once the worker is shutting down: a long handler may checkpoint and return."""
        return self._stopping.is_set()

    def checkpoint(
        self,
        *,
        new_body: bytes | str | None = None,
        reschedule: bool = False,
        delay: float | None = None,
        attempts: int | None = None,
        status: str | None = None,
    ) -> None:
        """Tell the server the job is alive (extends the claim) and optionally change it.

        `new_body` replaces the body (what the next attempt sees); `attempts` sets attempts
        allowed and remaining; `status` is prepended to the custom status; `reschedule` gives
        the job back to PENDING, runnable after `delay` seconds, without using an attempt (the
        worker then does not ack it). Raises the client's PinLaterError if the call fails after
        the client's retries; a checkpoint whose claim no longer holds is a silent no-op."""
        if self.released:
            raise RuntimeError(f"job {self.descriptor} was rescheduled; it is no longer held")
        run_after = None if delay is None else int((time.time() + delay) * 1000)
        self.client.checkpoint(
            self.queue,
            [
                CheckpointRequest(
                    self.descriptor,
                    claim=self.claim,
                    new_body=new_body,
                    move_to_pending=reschedule,
                    run_after_ms=run_after,
                    attempts_allowed=attempts,
                    prepend_status=status,
                )
            ],
        )
        with _CHECKPOINT_LOCK:
            if new_body is not None:
                self.body = new_body.encode() if isinstance(new_body, str) else bytes(new_body)
            if attempts is not None:
                self.attempts_allowed = self.attempts_remaining = attempts
            if reschedule:
                self.released = True

    def heartbeat(self) -> None:
        """Extend the claim; the same as `checkpoint()` with no changes."""
        self.checkpoint()

    def __repr__(self) -> str:
        return (
            f"JobContext({self.descriptor!r}, attempt={self.attempt}, "
            f"remaining={self.attempts_remaining}, body={self.body[:40]!r})"
        )
