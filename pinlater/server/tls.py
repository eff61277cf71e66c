"""The server side of TLS on the Thrift port: wrapping accepted sockets and the handshake.

Off by default (`server.tls.enabled`). Why not thriftpy2's TSSLServerSocket: it runs the
handshake inside the accept loop with no timeout, so one silent TCP client freezes every later
one. Here the handshake is done in non-blocking steps (`handshake_step`): the server's selector
thread waits for the peer's bytes, a pool thread runs one step when they have arrived (the
crypto costs CPU, not waiting), and the selector enforces one total deadline
(`handshake_timeout_seconds`). A silent or trickling client costs no thread at all, and the
number of handshakes in progress is bounded with the other slow connections
(pinlater.server.reactor).
"""

from __future__ import annotations

import selectors
import socket
import ssl

from pinlater.common.tls import server_context


class HandshakeError(Exception):
    """The TLS handshake failed or did not finish within its deadline."""


def server_context_from(config) -> ssl.SSLContext | None:
    """The context for a validated `pinlater.config.TlsConfig`; None when TLS is off."""
    if not config.enabled:
        return None
    return server_context(config.cert_file, config.key_file, config.client_ca_file)


def wrap_server_side(sock: socket.socket, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    """Wrap without any I/O (the handshake is `handshake_step`'s job)."""
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def handshake_step(tls_sock: ssl.SSLSocket) -> int | None:
    """Advance the handshake of a wrapped NON-BLOCKING socket as far as the bytes that have
    arrived allow: None when it is complete, else the selector event to wait for
    (EVENT_READ or EVENT_WRITE). Raises HandshakeError."""
    try:
        tls_sock.do_handshake()
    except ssl.SSLWantReadError:
        return selectors.EVENT_READ
    except ssl.SSLWantWriteError:
        return selectors.EVENT_WRITE
    except (ssl.SSLError, OSError) as exc:
        raise HandshakeError(_describe(exc)) from None
    return None


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return f"TLS handshake failed: {reason or exc}"
