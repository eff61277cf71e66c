"""ServerSet parsing and reloading, and how the client's `servers` argument is read."""

from __future__ import annotations

import os

import pytest

from pinlater.common.serverset import (
    ServerList,
    ServerSetError,
    ServerSetFile,
    parse_endpoint,
    parse_serverset,
    server_source,
)


def test_endpoint_parses_host_port_and_bracketed_ipv6():
    assert parse_endpoint(" 10.0.0.1:9010 ") == ("10.0.0.1", 9010)
    assert parse_endpoint("[::1]:9011") == ("::1", 9011)
    assert parse_endpoint("pinlater-3.example:1") == ("pinlater-3.example", 1)


@pytest.mark.parametrize(
    "text",
    [
        "host",
        "host:",
        ":9010",
        "host:0",
        "host:65536",
        "host:90a",
        "host:٩٠١٠",
        "my host:9010",
        "host:-1",
    ],
)
def test_malformed_endpoints_are_rejected(text):
    with pytest.raises(ServerSetError):
        parse_endpoint(text)


def test_serverset_ignores_blank_lines_and_comments():
    text = "# servers\n\n127.0.0.1:9010\n  127.0.0.1:9011  # second\n#127.0.0.1:9012\n"
    assert parse_serverset(text) == [("127.0.0.1", 9010), ("127.0.0.1", 9011)]


def test_serverset_error_names_the_line():
    with pytest.raises(ServerSetError, match=r"servers.txt:3: expected host:port"):
        parse_serverset("a:1\n\nnonsense\n", origin="servers.txt")


def test_serverset_file_is_reread_when_it_changes(tmp_path):
    path = tmp_path / "servers"
    path.write_text("127.0.0.1:9010\n")
    serverset = ServerSetFile(path, check_interval=0)
    assert serverset.endpoints() == [("127.0.0.1", 9010)]
    path.write_text("127.0.0.1:9011\n127.0.0.1:9012\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse-grained file systems
    assert serverset.endpoints() == [("127.0.0.1", 9011), ("127.0.0.1", 9012)]


def test_serverset_file_keeps_the_last_good_list_when_it_turns_bad(tmp_path):
    path = tmp_path / "servers"
    path.write_text("127.0.0.1:9010\n")
    serverset = ServerSetFile(path, check_interval=0)
    for bad in ("garbage\n", "# nothing\n"):
        path.write_text(bad)
        os.utime(path, ns=(len(bad), len(bad)))
        assert serverset.endpoints() == [("127.0.0.1", 9010)]
    path.unlink()
    assert serverset.endpoints() == [("127.0.0.1", 9010)]


def test_serverset_file_is_checked_at_most_once_per_interval(tmp_path):
    path = tmp_path / "servers"
    path.write_text("127.0.0.1:9010\n")
    serverset = ServerSetFile(path, check_interval=3600)
    path.write_text("127.0.0.1:9999\n")
    assert serverset.endpoints() == [("127.0.0.1", 9010)]


def test_unusable_serverset_file_fails_at_construction(tmp_path):
    path = tmp_path / "servers"
    path.write_text("\n# empty\n")
    with pytest.raises(ServerSetError, match="no servers"):
        ServerSetFile(path)


def test_servers_argument_accepts_lists_pairs_strings_and_files(tmp_path):
    assert server_source(["a:1", ("b", 2)]).endpoints() == [("a", 1), ("b", 2)]
    assert server_source("a:1, b:2").endpoints() == [("a", 1), ("b", 2)]
    path = tmp_path / "servers"
    path.write_text("c:3\n")
    assert isinstance(server_source(str(path)), ServerSetFile)
    assert server_source(path).endpoints() == [("c", 3)]
    with pytest.raises(ServerSetError, match="not found"):
        server_source(str(tmp_path / "missing"))
    with pytest.raises(ServerSetError):
        ServerList([])
