"""F9: clock skew of a server/janitor (faketime). The storage clock is authoritative (MySQL
NOW(3), Redis TIME), so a skewed server must not reclaim healthy claims. Needs `faketime`, which
this suite does not install: without it the scenario is reported as skipped, with the reason,
in the ledger (never counted as passed)."""

from __future__ import annotations

import shutil

import pytest

from tests.faults.ledger import report


def test_f9_clock_skew_needs_faketime():
    if shutil.which("faketime") is None:
        reason = "faketime is not installed (the scenario needs it to skew one server's clock)"
        report({"scenario": "F9", "backend": "all", "verdict": "skipped", "note": reason})
        pytest.skip(reason)
    pytest.fail("faketime is installed but F9 is not implemented yet: write it (skew one of "
                "two servers by +/- the claim timeout, check no healthy claim is reclaimed)")
