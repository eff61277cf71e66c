"""The check registry: every rule of the kit under its name (the pytest id), and which backends
can run it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pinlater.storage.shard_kit.kit import Kit


@dataclass(frozen=True)
class Capabilities:
    """What differs between backends and changes which checks can run."""

    #: the shard's clock stands still except through clock_offset_ms (SQLite with an injected
    #: clock): the checks of exact eligibility, claim-expiry and TTL boundaries run
    frozen_clock: bool = False


@dataclass(frozen=True)
class Check:
    """One rule: a name for the test id and a function of the Kit."""

    name: str
    run: Callable[[Kit], None] = field(repr=False)
    needs_frozen_clock: bool = False

    def __str__(self) -> str:
        return self.name


CHECKS: dict[str, Check] = {}


def register(name: str, run: Callable[[Kit], None], needs_frozen_clock: bool = False) -> None:
    assert name not in CHECKS, f"two checks named {name}"
    CHECKS[name] = Check(name, run, needs_frozen_clock)


def check(run: Callable[[Kit], None] | None = None, *, needs_frozen_clock: bool = False):
    """Register the decorated function as a check named after it (`ack_x` -> "ack-x")."""

    def decorate(run: Callable[[Kit], None]) -> Callable[[Kit], None]:
        register(run.__name__.replace("_", "-"), run, needs_frozen_clock)
        return run

    return decorate if run is None else decorate(run)


def checks_for(capabilities: Capabilities) -> list[Check]:
    """The checks a backend with these capabilities runs."""
    return [c for c in CHECKS.values() if capabilities.frozen_clock or not c.needs_frozen_clock]
