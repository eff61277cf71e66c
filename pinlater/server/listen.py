"""Listening sockets: every port the server serves on is bound here, before anything is served.

`pinlater-server` binds the Thrift port and the metrics port first and only then builds the App,
so a taken port is refused in one line (naming the flag that changes it) with nothing started
and nothing left listening.
"""

from __future__ import annotations

import errno
import socket


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket. SO_REUSEADDR (restart over TIME_WAIT) but never SO_REUSEPORT,
    so a second server on the same port fails here instead of silently sharing it."""
    family, _, _, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_error_reason(exc: OSError) -> str:
    """Why a bind failed, in words an operator acts on."""
    if exc.errno == errno.EADDRINUSE:
        return "address already in use (is another server running on this port?)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "no such local address"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    return exc.strerror or str(exc)
