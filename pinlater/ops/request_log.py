"""Request logs: one line per request at DEBUG, one per failed request at WARNING.

Each line carries the request id (the client's `RequestContext.requestId`, or a generated
one), the source, the client address, the method, the queue and the outcome (error code name or
"ok"). Warnings are rate-limited per client address (a fixed one-minute window per peer), so a
misbehaving client cannot flood the log; the first line let through after a suppressed stretch
says how many were dropped. The peer table is bounded (oldest windows dropped first).

A client retrying a failed call sends the same request id again (worker_sdk keeps it across
retries): only its first failure is a WARNING; the repeats with the same outcome are DEBUG lines
carrying the attempt number, so one failing call is one warning however often it was retried.

The client address comes from `pinlater.handler.context` (set by the network loop).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from pinlater.handler.context import current_peer

log = logging.getLogger("pinlater.requests")

#: at most this many peers are tracked; beyond it the stalest windows are forgotten
MAX_PEERS = 10_000
#: failed (request id, outcome) pairs remembered to recognise a client's retries
MAX_FAILED_REQUESTS = 1024
_WINDOW_SECONDS = 60.0


def _host(peer: str | None, source: str) -> str:
    if not peer:
        return f"source:{source}"
    return peer.rsplit(":", 1)[0]


def _shown(value: object, limit: int = 100) -> str:
    """A log-safe rendering of a client-supplied value (repr escapes newlines)."""
    text = value if isinstance(value, str) else repr(value)
    text = text if text.isprintable() else repr(text)
    return text if len(text) <= limit else text[:limit] + "..."


class RequestLog:
    """Writes the per-request lines; thread-safe."""

    def __init__(
        self,
        warnings_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ):
        self.per_minute = warnings_per_minute
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        #: peer -> [window start, lines in window, suppressed since last line]
        self._peers: dict[str, list] = {}
        #: (client request id, outcome) -> (failed attempts, first seen), oldest first
        self._failed: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()

    def record(
        self,
        method: str,
        context: object,
        queue: object,
        outcome: str,
        seconds: float,
        message: str = "",
    ) -> None:
        if outcome == "ok" and not self._log.isEnabledFor(logging.DEBUG):
            return  # the common case: nothing to log, so build nothing (uuid4 is a syscall)
        source = _shown(getattr(context, "source", None))
        client_id = getattr(context, "requestId", None)
        request_id = client_id or uuid.uuid4().hex[:12]
        peer = current_peer()
        fields = (
            f"request_id={_shown(request_id, 64)} source={source} peer={peer or '-'} "
            f"method={method} queue={_shown(queue) if queue is not None else '-'} "
            f"outcome={outcome}"
        )
        if outcome == "ok":
            self._log.debug("%s ms=%.1f", fields, seconds * 1000)
            return
        attempt = self._attempt(client_id, outcome)
        if attempt > 1:
            self._log.debug("%s ms=%.1f attempt=%d (a retry)", fields, seconds * 1000, attempt)
            return
        suppressed = self._admit(_host(peer, source))
        if suppressed is None:
            return
        note = f" ({suppressed} earlier warnings from this client suppressed)" if suppressed else ""
        self._log.warning("%s ms=%.1f: %s%s", fields, seconds * 1000, _shown(message, 300), note)

    def _attempt(self, client_id: object, outcome: str) -> int:
        """How often this client request id has failed with this outcome within the last
        window, this failure included (1: not a retry)."""
        if not isinstance(client_id, str) or not client_id:
            return 1
        key, now = (client_id, outcome), self._clock()
        with self._lock:
            attempt, first = self._failed.pop(key, (0, now))
            if now - first >= _WINDOW_SECONDS:  # a client that reuses one id for every call
                attempt, first = 0, now
            self._failed[key] = (attempt + 1, first)
            if len(self._failed) > MAX_FAILED_REQUESTS:
                self._failed.popitem(last=False)
        return attempt + 1

    def _admit(self, key: str) -> int | None:
        """None to drop this line; else how many were dropped since the last one."""
        now = self._clock()
        with self._lock:
            entry = self._peers.get(key)
            if entry is None:
                if len(self._peers) >= MAX_PEERS:
                    self._forget_stalest()
                entry = self._peers[key] = [now, 0, 0]
            if now - entry[0] >= _WINDOW_SECONDS:
                entry[0], entry[1] = now, 0
            if entry[1] >= self.per_minute:
                entry[2] += 1
                return None
            entry[1] += 1
            suppressed, entry[2] = entry[2], 0
            return suppressed

    def _forget_stalest(self) -> None:
        stalest = sorted(self._peers.items(), key=lambda kv: kv[1][0])[: MAX_PEERS // 10 or 1]
        for key, _ in stalest:
            del self._peers[key]
