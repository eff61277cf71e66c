"""The check registry: every rule of the kit under its name (the pytest id), the
docs/semantics.md rows it pins at the shard seam, and which backends can run it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pinlater.storage.shard_kit.kit import Kit

#: the shape of a docs/semantics.md row id (`T-ack-success`); that each named row exists is
#: checked against the page by tests/unit/test_semantics_rows.py
RULE_ID = re.compile(r"[A-Z]-[a-z0-9]+(?:-[a-z0-9]+)*")

#: the rows a check pins: one id or several
Rules = str | tuple[str, ...]


@dataclass(frozen=True)
class Capabilities:
    """What differs between backends and changes which checks can run."""

    #: the shard's clock stands still except through clock_offset_ms (SQLite with an injected
    #: clock): the checks of exact eligibility, claim-expiry and TTL boundaries run
    frozen_clock: bool = False


@dataclass(frozen=True)
class Check:
    """One rule: a name for the test id, a function of the Kit, and the docs/semantics.md rows
    it pins at the shard seam (none when the rule is the shard contract's own, such as shard
    isolation, which the wire-level page does not state)."""

    name: str
    run: Callable[[Kit], None] = field(repr=False)
    needs_frozen_clock: bool = False
    rules: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name


CHECKS: dict[str, Check] = {}


def register(
    name: str, run: Callable[[Kit], None], needs_frozen_clock: bool = False, rule: Rules = ()
) -> None:
    rules = (rule,) if isinstance(rule, str) else rule
    assert name not in CHECKS, f"two checks named {name}"
    bad = [r for r in rules if not RULE_ID.fullmatch(r)]
    assert not bad, f"check {name}: not docs/semantics.md row ids: {bad}"
    CHECKS[name] = Check(name, run, needs_frozen_clock, rules)


def check(
    run: Callable[[Kit], None] | None = None, *, needs_frozen_clock: bool = False, rule: Rules = ()
):
    """Register the decorated function as a check named after it (`ack_x` -> "ack-x"), pinning
    the docs/semantics.md rows `rule` names."""

    def decorate(run: Callable[[Kit], None]) -> Callable[[Kit], None]:
        register(run.__name__.replace("_", "-"), run, needs_frozen_clock, rule)
        return run

    return decorate if run is None else decorate(run)


def checks_for(capabilities: Capabilities) -> list[Check]:
    """The checks a backend with these capabilities runs."""
    return [c for c in CHECKS.values() if capabilities.frozen_clock or not c.needs_frozen_clock]
