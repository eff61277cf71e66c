"""Fixtures of the fault-injection suite (see tests/faults/harness.py for the rig).

`rig` builds a Rig for the test's scenario and backend and closes it (every process stopped by
PID) whatever happens. The MariaDB datadir template is removed at the end of the session.
"""

from __future__ import annotations

import pytest

from tests.faults.harness import Rig
from tests.faults.storage import remove_mysql_template


@pytest.fixture(scope="session", autouse=True)
def _mysql_template_cleanup():
    yield
    remove_mysql_template()


@pytest.fixture
def make_rig(tmp_path):
    rigs: list[Rig] = []

    def make(scenario: str, kind: str, **options) -> Rig:
        rig = Rig(scenario, kind, tmp_path / f"{scenario}-{len(rigs)}", **options)
        rigs.append(rig)
        return rig.__enter__()

    yield make
    for rig in rigs:
        rig.close()
