"""Fixtures of the fault-injection suite (see tests/faults/harness.py for the rig).

`make_rig` builds Rigs for the test's scenario and backend (with and without the broker) and
closes them (every process stopped by PID) whatever happens. The MariaDB datadir template is
removed at the end of the session.
"""

from __future__ import annotations

import pytest

from tests.faults.harness import Rig
from tests.faults.storage import remove_mysql_template


@pytest.fixture(scope="session", autouse=True)
def _mysql_template_cleanup():
    yield
    remove_mysql_template()


@pytest.fixture(params=[False, True], ids=["plain", "broker"])
def make_rig(request, tmp_path):
    """Every scenario runs twice: as is, and with the prefetching broker on in every server
    (issue 15: the fault suite passes with the broker on), unless it says otherwise."""
    rigs: list[Rig] = []

    def make(scenario: str, kind: str, **options) -> Rig:
        options.setdefault("broker", request.param)
        rig = Rig(scenario, kind, tmp_path / f"{scenario}-{len(rigs)}", **options)
        rigs.append(rig)
        return rig.__enter__()

    yield make
    for rig in rigs:
        rig.close()
