"""A real server subprocess (SQLite, janitor off, 1 s frame deadline, metrics on a free port)
shared by the fuzz tests of one module; its log must hold no handler traceback at the end."""

from __future__ import annotations

import pytest

from tests.support.server_process import ServerProcess, free_port

FRAME_DEADLINE = 1.0
MAX_FRAME = 1 << 20


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    config = {
        "janitor": {"enabled": False},
        "server": {"frame_read_timeout_seconds": FRAME_DEADLINE, "max_frame_bytes": MAX_FRAME},
        # a reply must hold one job at the body cap (config.py refuses a smaller frame)
        "limits": {"body_max_bytes": MAX_FRAME // 2},
        "metrics": {"port": free_port()},
    }
    with ServerProcess(config, tmp_path_factory.mktemp("fuzz")) as server:
        yield server
        assert server.is_running(), "the server died"
    log = server.log()
    assert "unexpected error" not in log and "raised an undeclared" not in log, log[-5000:]
