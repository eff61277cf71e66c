"""Where the servers are: a fixed list, or a ServerSet file re-read when it changes.

A ServerSet file holds one `host:port` per line; blank lines and `#` comments are ignored.
IPv6 hosts are written in brackets (`[::1]:9010`). The file is re-read when its mtime, size or
inode changes (checked at most every `check_interval` seconds); a file that becomes unreadable,
malformed or empty keeps the last good list, so a half-written file cannot take clients down.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

Endpoint = tuple[str, int]


class ServerSetError(ValueError):
    """A server list or ServerSet file line is malformed."""


def parse_endpoint(text: str) -> Endpoint:
    """`host:port` (or `[v6]:port`) to a (host, port) pair; raise ServerSetError if malformed."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise ServerSetError(f"expected host:port, got {text!r}")
    if not 0 < int(port) < 65536:
        raise ServerSetError(f"port out of range in {text!r}")
    if any(c.isspace() for c in host):
        raise ServerSetError(f"host contains whitespace in {text!r}")
    return host, int(port)


def parse_serverset(text: str, origin: str = "serverset") -> list[Endpoint]:
    """Parse ServerSet file content; errors name the line number."""
    endpoints = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            endpoints.append(parse_endpoint(line))
        except ServerSetError as err:
            raise ServerSetError(f"{origin}:{number}: {err}") from None
    return endpoints


def format_endpoint(endpoint: Endpoint) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ServerList:
    """A fixed list of endpoints."""

    def __init__(self, endpoints: Sequence[Endpoint]):
        if not endpoints:
            raise ServerSetError("no servers given")
        self._endpoints = list(endpoints)

    def endpoints(self) -> list[Endpoint]:
        return self._endpoints


class ServerSetFile:
    """Endpoints read from a file, re-read when it changes. Thread-safe."""

    def __init__(self, path: str | os.PathLike, check_interval: float = 1.0):
        self.path = os.fspath(path)
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._signature: tuple | None = None
        self._next_check = 0.0
        self._endpoints: list[Endpoint] = []
        self._reload(initial=True)

    def endpoints(self) -> list[Endpoint]:
        now = time.monotonic()
        if now >= self._next_check:
            with self._lock:
                if now >= self._next_check:
                    self._reload(initial=False)
        return self._endpoints

    def _reload(self, initial: bool) -> None:
        self._next_check = time.monotonic() + self.check_interval
        try:
            stat = os.stat(self.path)
            signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if signature == self._signature:
                return
            with open(self.path, encoding="utf-8") as handle:
                endpoints = parse_serverset(handle.read(), origin=self.path)
            if not endpoints:
                raise ServerSetError(f"{self.path}: no servers listed")
        except (OSError, UnicodeDecodeError, ServerSetError) as err:
            if initial:
                raise ServerSetError(f"cannot use ServerSet file: {err}") from err
            return
        self._signature, self._endpoints = signature, endpoints


def server_source(servers: str | os.PathLike | Sequence[str] | Sequence[Endpoint]):
    """Turn the client's `servers` argument into a ServerList or ServerSetFile.

    A sequence holds `host:port` strings or (host, port) pairs; a single string is a
    comma-separated `host:port` list unless it names an existing file, which is a ServerSet.
    """
    if isinstance(servers, (str, os.PathLike)):
        text = os.fspath(servers)
        if os.path.isfile(text):
            return ServerSetFile(text)
        if os.sep in text:
            raise ServerSetError(f"ServerSet file not found: {text}")
        servers = [part for part in text.split(",") if part.strip()]
    endpoints = [
        parse_endpoint(s) if isinstance(s, str) else (str(s[0]), int(s[1])) for s in servers
    ]
    return ServerList(endpoints)
