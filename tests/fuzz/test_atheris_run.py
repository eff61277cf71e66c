"""A bounded coverage-guided run of the atheris harness (scripts/fuzz.py) as part of the suite:
wire check -> decode -> request validation on a throwaway store, 15 s, must find nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import unavailable

ROOT = Path(__file__).resolve().parents[2]


def test_fifteen_seconds_of_atheris_find_no_crash(tmp_path):
    try:
        import atheris  # noqa: F401
    except ImportError:
        unavailable("atheris (in the test extras) is not installed")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fuzz.py"), "--seconds", "15"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    assert not list(tmp_path.glob("crash-*")), tail
