"""Body regex filters with one meaning in every backend, and bounded work per request.

`bodyRegexToMatch` is a Python-style regular expression searched (not anchored, like MySQL's
REGEXP) in the raw body bytes, in the `regex` engine; it never reaches SQL or Lua. One
request's filter is one `BodyFilter` object; backends call it once per body. Its bounds:

- the compiled program: sized from the parse tree before compiling (`regex_guard`);
- one body: `limits.regex_timeout_seconds` of the thread's CPU time;
- the request: `limits.regex_request_cpu_seconds` of CPU for its scan (the evaluations and
  the paging between them, in every thread that scans for it),
  `limits.regex_request_seconds` of wall-clock time from when the filter is built, and at
  most `limits.regex_scan_cap` bodies and `limits.regex_scan_bytes` body bytes examined.

Past any bound the filter raises BodyFilterStopped (wire UNKNOWN, message saying which bound
and how much was scanned), and keeps raising it, so parallel shard scans stop as well.

Why CPU time per body, and how: the engine's own `timeout=` is wall-clock, and the engine gives
up the GIL while it matches, so on a busy server a 1 KB search that needs 0.2 ms of CPU can
take 100+ ms of wall time waiting for the GIL and fail a wall budget (a quarter of the trivial
requests of 16 clients did, measured). Each evaluation therefore runs in attempts: an attempt
gets the engine timeout `window` = min(per-body budget, the request's CPU left, its wall-clock
time left), and the thread CPU time it used (`time.thread_time`, which waiting does not
advance) counts. An attempt that timed out after using 75% of a whole per-body window in CPU
had the processor and still did not finish: the body is refused. One that used less was starved
by load and runs again from the start (the engine cannot resume), until the body's attempts
used 3 per-body budgets of CPU together; retries are paid from the request's budgets as well. A
cheap evaluation therefore never fails for load (it would need to get less than its few
microseconds of CPU in each of many windows); one that needs a good share of its budget may be
refused when load leaves its thread less than that share of a core. Growing the window for
retries would let such attempts finish sooner, but the window also bounds memory: the engine's
match state grows at most ~0.75 GB per CPU second and is freed after each attempt, and all
attempts running at one moment started within the last window, so together they hold at most
that rate x CPU cores x window (~75 MB at the defaults on 2 cores), whatever the number of
concurrent requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import regex

from pinlater.config import LimitsConfig
from pinlater.errors import InvalidRequest
from pinlater.handler.regex_guard import compile_bounded
from pinlater.storage.errors import BodyFilterStopped

FIELD = "bodyRegexToMatch"
#: an attempt that used this share of a whole per-body window in CPU had the processor and
#: still did not finish: the body needs more than its budget (less means it was starved)
FED = 0.75
#: starved attempts of one body stop once they used this many per-body budgets of CPU together
STARVED_BUDGETS = 3
_MIB = 1024 * 1024


def compile_body_filter(pattern: object, limits: LimitsConfig) -> BodyFilter | None:
    """The filter for one request's `pattern`, or None when no filter was asked for.

    Raises InvalidRequest for a pattern that is not text, too long, too big once compiled
    (limits.max_regex_size), nested too deep or not a valid regex."""
    if pattern is None or pattern == "":
        return None
    if not isinstance(pattern, str):
        raise InvalidRequest(f"{FIELD}: must be valid UTF-8 text")
    if len(pattern) > limits.max_regex_length:
        raise InvalidRequest(f"{FIELD}: longer than {limits.max_regex_length} characters")
    compiled = compile_bounded(pattern.encode("utf-8"), max_size=limits.max_regex_size)
    return BodyFilter(compiled, limits.regex_timeout_seconds, RegexBudget(limits))


class RegexBudget:
    """What one request's body evaluations may still use: CPU seconds, wall-clock time, bodies
    and bytes. Shared by the shard scans of the request, which may run in parallel threads."""

    def __init__(self, limits: LimitsConfig, clock: Callable[[], float] = time.monotonic):
        self._limits = limits
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._stopped: BodyFilterStopped | None = None
        self.cpu_seconds = 0.0
        self.bodies = 0
        self.bytes = 0

    def admit(self, size: int, per_body: float, cpu_seconds: float) -> float:
        """Charge `cpu_seconds` the calling thread used since its last body, count one body of
        `size` bytes about to be examined, and return the window of its first attempt (see
        `window`); raise when over a bound."""
        limits = self._limits
        with self._lock:
            self._raise_if_stopped()
            self.cpu_seconds += cpu_seconds
            if self.bodies + 1 > limits.regex_scan_cap:
                self._stop(f"limits.regex_scan_cap = {limits.regex_scan_cap:,} bodies")
            if self.bytes + size > limits.regex_scan_bytes:
                self._stop(f"limits.regex_scan_bytes = {_size(limits.regex_scan_bytes)}")
            self.bodies += 1
            self.bytes += size
            return self._window(per_body)

    def window(self, per_body_left: float) -> float:
        """The engine timeout for the next attempt: at most `per_body_left`, the request's CPU
        left and its wall-clock time left; raises when the request has none left."""
        with self._lock:
            self._raise_if_stopped()
            return self._window(per_body_left)

    def _window(self, per_body_left: float) -> float:
        limits = self._limits
        cpu_left = limits.regex_request_cpu_seconds - self.cpu_seconds
        if cpu_left <= 0:
            self._stop(f"limits.regex_request_cpu_seconds = {limits.regex_request_cpu_seconds:g}")
        wall_left = limits.regex_request_seconds - (self._clock() - self._started)
        if wall_left <= 0:
            self._stop(f"limits.regex_request_seconds = {limits.regex_request_seconds:g}")
        return min(per_body_left, cpu_left, wall_left)

    def charge(self, cpu_seconds: float) -> None:
        with self._lock:
            self.cpu_seconds += cpu_seconds

    def refuse_body(self, per_body: float, spent: float) -> None:
        """One body did not finish within its CPU budget: stop the request with that reason."""
        with self._lock:
            self._raise_if_stopped()
            self._stopped = BodyFilterStopped(
                f"{FIELD}: one body needed more than {per_body:g} s of CPU "
                f"(limits.regex_timeout_seconds; {spent:.2f} s spent on it); simplify the "
                f"pattern ({self._scanned()})"
            )
            raise self._stopped

    def _stop(self, bound: str) -> None:
        self._stopped = BodyFilterStopped(
            f"{FIELD}: body regex scan stopped after {self._scanned()}: reached {bound}; "
            "narrow the query (state, priority) or simplify the pattern"
        )
        raise self._stopped

    def _raise_if_stopped(self) -> None:
        if self._stopped is not None:
            raise BodyFilterStopped(self._stopped.message)

    def _scanned(self) -> str:
        return (
            f"{self.cpu_seconds:.2f} s CPU / {self._clock() - self._started:.2f} s / "
            f"{self.bodies:,} bodies / {_size(self.bytes)} scanned"
        )


def _size(count: int) -> str:
    return f"{count / _MIB:.1f} MiB" if count >= _MIB else f"{count:,} bytes"


class BodyFilter:
    """The predicate backends call on each body: True when the pattern is found in it.

    One `time.thread_time()` per body on the usual path (it is a system call): the CPU a
    thread used from one call to the next (the evaluation, then the paging to the next body)
    is charged to the request when the next body is admitted."""

    __slots__ = ("_threads", "budget", "compiled", "per_body_seconds")

    def __init__(self, compiled: regex.Pattern, per_body_seconds: float, budget: RegexBudget):
        self.compiled = compiled
        self.per_body_seconds = per_body_seconds
        self.budget = budget
        self._threads = threading.local()  # .cpu: the thread CPU time charged up to

    def __call__(self, body: bytes) -> bool:
        budget, per_body, mine = self.budget, self.per_body_seconds, self._threads
        started = time.thread_time()
        charged_up_to = getattr(mine, "cpu", started)
        mine.cpu = started
        window = budget.admit(len(body), per_body, started - charged_up_to)
        spent = 0.0
        while True:  # attempts; see the module docstring
            try:
                found = self.compiled.search(body, timeout=window)
            except TimeoutError:
                ended = time.thread_time()
                used, started = ended - started, ended
                mine.cpu = ended
                budget.charge(used)
                spent += used
                if (window >= per_body and used >= FED * per_body) or (
                    spent >= STARVED_BUDGETS * per_body
                ):
                    budget.refuse_body(per_body, spent)
                window = budget.window(per_body)
                continue
            return found is not None
