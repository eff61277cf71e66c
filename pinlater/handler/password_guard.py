"""Admin password checks that a flood of guesses cannot turn into CPU or a stalled server.

A PBKDF2 check costs ~0.1 s of CPU by design. Unguarded, every wrong deleteQueue password
bought a client that much of the server's CPU (64 clients guessing pushed enqueue p50 to
seconds). So, before any hashing:
- each client address (its IP) may fail at most `failures_per_minute` times per minute (a
  burst of `failure_burst`); its next guess is refused at once until the window refills;
- the whole server computes at most `checks_per_second` hashes (right or wrong);
- at most `max_waiting` checks wait for the one hashing thread; more are refused at once.
Hashes run on that one dedicated thread, never on the request threads' CPU budget beyond
waiting, so a password flood costs at most a bounded share of one core. Every refusal and
every wrong password is reported to `on_refused(reason)` (a metric).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pinlater.common.passwords import verify_password
from pinlater.common.token_bucket import TokenBucket
from pinlater.errors import PasswordInvalid

#: the reasons passed to `on_refused` (label values of the refusal metric)
REFUSAL_REASONS = ("wrong", "client_limit", "server_limit", "busy")
#: client addresses whose failures are remembered; beyond it the stalest are forgotten
MAX_CLIENTS = 10_000


class PasswordGuard:
    """Checks admin passwords against one stored hash; thread-safe."""

    def __init__(
        self,
        stored_hash: str,
        *,
        failures_per_minute: float = 10,
        failure_burst: int = 5,
        checks_per_second: float = 4,
        max_waiting: int = 4,
        on_refused: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        verify: Callable[[object, str | None], bool] = verify_password,
    ):
        self._stored = stored_hash
        self._failure_rate = failures_per_minute / 60
        self._failure_burst = failure_burst
        self._clock = clock
        self._verify = verify
        self._on_refused = on_refused or (lambda reason: None)
        self._max_waiting = max_waiting
        self._lock = threading.Lock()
        self._checks = TokenBucket(checks_per_second, clock(), capacity=max(1, checks_per_second))
        self._clients: dict[str, TokenBucket] = {}
        self._waiting = 0
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="password-check")

    def check(self, password: object, peer: str | None) -> None:
        """Return if `password` is right; raise PasswordInvalid (saying why) otherwise."""
        client = _client_of(peer)
        self._admit(client)
        try:
            right = self._hasher.submit(self._verify, password, self._stored).result()
        finally:
            with self._lock:
                self._waiting -= 1
        if not right:
            with self._lock:
                self._client_bucket(client).charge(1, self._clock())
            self._refuse("wrong", "Invalid admin password.")

    def tracked_clients(self) -> int:
        """Client addresses whose failures are remembered (bounded by MAX_CLIENTS)."""
        with self._lock:
            return len(self._clients)

    def close(self) -> None:
        self._hasher.shutdown(wait=False, cancel_futures=True)

    def _admit(self, client: str) -> None:
        """Take a hashing turn for `client` or raise at once, before any hashing."""
        with self._lock:
            now = self._clock()
            bucket = self._client_bucket(client)
            if bucket.available(now) < 1:
                wait = bucket.seconds_until(1, now)
                reason, message = (
                    "client_limit",
                    (f"too many wrong admin passwords from {client}; retry in {math.ceil(wait)} s"),
                )
            elif self._waiting >= self._max_waiting:
                reason, message = "busy", "too many admin password checks in progress; retry"
            elif self._checks.available(now) < 1:
                reason, message = "server_limit", "too many admin password checks; retry later"
            else:
                self._checks.charge(1, now)
                self._waiting += 1
                return
        self._refuse(reason, f"Invalid admin password: {message}")

    def _client_bucket(self, client: str) -> TokenBucket:
        bucket = self._clients.get(client)
        if bucket is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._forget_full_buckets()
            now = self._clock()
            bucket = self._clients[client] = TokenBucket(
                self._failure_rate, now, capacity=self._failure_burst
            )
        return bucket

    def _forget_full_buckets(self) -> None:
        """Drop clients whose bucket has refilled (they carry no penalty), else the oldest."""
        now = self._clock()
        full = [c for c, b in self._clients.items() if b.available(now) >= self._failure_burst]
        for client in full or list(self._clients)[: MAX_CLIENTS // 10]:
            del self._clients[client]

    def _refuse(self, reason: str, message: str) -> None:
        self._on_refused(reason)
        error = PasswordInvalid(message)
        error.reason = reason  # one of REFUSAL_REASONS (the admin API answers 429 for limits)
        raise error


def _client_of(peer: str | None) -> str:
    """The client's IP address from `host:port` (the port changes per connection)."""
    if not peer:
        return "-"
    return peer.rsplit(":", 1)[0]
