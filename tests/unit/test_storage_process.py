"""Starting the throwaway storage servers (tests/support/storage_process.py) when the probed
free port is taken before the server binds it, as happens on a machine shared by several test
sessions: the start moves to another port, and neither a listener that never answers nor
another session's server on that port is taken for ours."""

from __future__ import annotations

import contextlib
import shutil
import socket

import pytest

from tests.faults.storage import mysql_template, remove_mysql_template
from tests.support import mysql_env, redis_env
from tests.support.storage_process import PortTaken


@contextlib.contextmanager
def silent_listener():
    """A loopback port whose listener accepts (the kernel's backlog) and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


def _moves_off(server, taken: int) -> None:
    server.port = taken
    with pytest.raises(PortTaken):
        server.start()
    server.port = taken
    server.start_on_a_free_port()
    assert server.port != taken


@pytest.mark.backend("redis")
def test_a_redis_start_on_a_taken_port_moves_and_never_answers_for_another_server(tmp_path):
    redis_env.require_redis_server()
    with redis_env.running_server(tmp_path / "other") as other, silent_listener() as silent:
        for taken in (other.port, silent):
            server = redis_env.RedisServer(tmp_path / f"mine{taken}")
            try:
                _moves_off(server, taken)
                with server.client() as client:
                    assert int(client.info("server")["process_id"]) == server.proc.pid
            finally:
                server.kill()


@contextlib.contextmanager
def mariadbd(base):
    """A MariaDBServer on a copy of an installed datadir (installing costs seconds), not
    started; killed and removed at the end."""
    mysql_env.require_mariadb()
    shutil.copytree(mysql_template(), base / "data")
    server = mysql_env.MariaDBServer(base)
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _remove_mysql_template():
    yield
    remove_mysql_template()


@pytest.mark.backend("mysql")
def test_a_mariadbd_start_on_a_taken_port_moves_and_never_answers_for_another_server(tmp_path):
    """A listener that never greets once held the wait forever (unbounded handshake read); a
    mariadbd of another session answered for ours (same root, no password)."""
    with mariadbd(tmp_path / "other") as other, silent_listener() as silent:
        other.start_on_a_free_port()
        for taken in (other.port, silent):
            with mariadbd(tmp_path / f"mine{taken}") as server:
                _moves_off(server, taken)
                mine, theirs = server.query("SELECT @@socket"), other.query("SELECT @@socket")
                assert mine != theirs
