"""`pinlater-server`: load and validate the config, bind every port, build the App, serve.

    pinlater-server [--config FILE] [--host H] [--port N] [--metrics-host H] [--metrics-port N]
                    [--data-dir DIR] [--log-level L] [--log-format text|json] [--version]

Flags override PINLATER_* environment variables, which override the file. With no arguments it
serves the embedded SQLite backend from ./pinlater-data/ on 127.0.0.1:9010, with Prometheus
metrics and /health on 127.0.0.1:9999.

Both listeners (Thrift, then metrics) are bound before the App is built, so a taken port is
refused in one line naming the flag that changes it, with nothing started and nothing left
listening.

Exit codes: 0 after a graceful shutdown (SIGTERM/SIGINT) in which every in-flight request
finished; 1 if a port cannot be bound, the App cannot be built, `backend.require_durable` is
set and a shard could lose accepted jobs (the warnings are printed), or the shutdown grace period
ran out with requests still running; 2 for an invalid configuration (reported before binding).
A second SIGTERM/SIGINT during shutdown exits at once with 128 + the signal number.

The start log line has the form `pinlater-server listening on HOST:PORT (...)`; with --port 0 it
carries the port actually chosen (tests rely on this).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
from typing import Any

from pinlater import __version__
from pinlater.app import App, NotDurable, load_config
from pinlater.common import heap
from pinlater.common.logs import FORMATS, configure_logging
from pinlater.common.sections import ConfigError
from pinlater.config import Config
from pinlater.idl import PinLater
from pinlater.server.listen import bind, bind_error_reason
from pinlater.server.loop import Rejections, Server
from pinlater.server.transport import Dispatcher
from pinlater.server.wirecheck import WireLimits

log = logging.getLogger("pinlater.server")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pinlater-server", description="PinLater job queue Thrift server"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", metavar="FILE", help="YAML config file")
    parser.add_argument("--host", help="address to listen on (server.host)")
    parser.add_argument("--port", type=int, help="port to listen on; 0 picks a free port")
    parser.add_argument(
        "--metrics-host", help="address of the /metrics and /health endpoint (metrics.host)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="port of the /metrics and /health endpoint (metrics.port, default 9999); 0 disables",
    )
    parser.add_argument("--data-dir", help="SQLite data directory (backend.data_dir)")
    parser.add_argument(
        "--role",
        choices=("all", "enqueue", "dequeue"),
        help="which calls this server answers (server.role, default all): enqueue refuses "
        "dequeueJobs, dequeue refuses enqueueJobs",
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument(
        "--log-format", choices=FORMATS, help="text, or json: one JSON object per line (log_format)"
    )
    return parser.parse_args(argv)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Command-line flags in the config file's shape (for load_config's `overrides`)."""
    overrides: dict[str, Any] = {}
    for section, pairs in (
        ("server", (("host", args.host), ("port", args.port), ("role", args.role))),
        ("metrics", (("host", args.metrics_host), ("port", args.metrics_port))),
    ):
        values = {key: value for key, value in pairs if value is not None}
        if values:
            overrides[section] = values
    # always present, so the backend's own defaults (data dir, default shard) are applied even
    # when neither the file nor the flags mention the backend
    overrides["backend"] = {} if args.data_dir is None else {"data_dir": args.data_dir}
    if args.log_level is not None:
        overrides["log_level"] = args.log_level
    if args.log_format is not None:
        overrides["log_format"] = args.log_format
    return overrides


#: what each listener is called in the refusal line, and every way to change its port
_LISTENERS = {
    "thrift": "(--port / PINLATER_PORT / server.port)",
    "metrics": "for metrics (--metrics-port / PINLATER_METRICS_PORT / metrics.port; 0 disables)",
}


class ListenerTaken(Exception):
    """A port could not be bound; the message is the one line printed."""


def bind_listeners(config: Config) -> tuple[socket.socket, socket.socket | None]:
    """Bind the Thrift port, then the metrics port (unless it is 0). On failure nothing stays
    bound and ListenerTaken names the address and the flag that changes it."""
    wanted = [("thrift", config.server.host, config.server.port)]
    if config.metrics.port:
        wanted.append(("metrics", config.metrics.host, config.metrics.port))
    bound: list[socket.socket] = []
    for name, host, port in wanted:
        try:
            bound.append(bind(host, port))
        except OSError as exc:
            for sock in bound:
                sock.close()
            raise ListenerTaken(
                f"cannot listen on {host}:{port} {_LISTENERS[name]}: {bind_error_reason(exc)}"
            ) from None
    return bound[0], (bound[1] if len(bound) > 1 else None)


def describe(config: Config, app: Any, address: tuple[str, int]) -> str:
    """The one start line: address, backend kind, shards, data dir."""
    shards = ", ".join(app.store.shard_names()) if hasattr(app, "store") else "?"
    parts = [f"backend {config.backend.kind}", f"shards [{shards}]"]
    if config.clusters:  # name: kind [shards], the default first
        parts = [
            f"cluster {name} ({section.kind}) [{', '.join(s.name for s in section.shards)}]"
            + (" default" if name == config.default_cluster else "")
            for name, section in config.clusters.items()
        ]
    if config.server.role != "all":
        parts.insert(0, f"role {config.server.role}")
    data_dir = config.backend.options.get("data_dir")
    if data_dir is not None and not config.clusters:
        parts.append(f"data dir {os.path.abspath(data_dir)}")
    tls = config.server.tls
    if tls.enabled:
        parts.append("TLS with client certificates" if tls.client_ca_file else "TLS")
    parts.append(
        f"max {config.server.max_connections} connections, {config.server.worker_threads} workers"
    )
    return f"pinlater-server listening on {address[0]}:{address[1]} ({', '.join(parts)})"


def install_signal_handlers(server: Server) -> None:
    """First SIGTERM/SIGINT: graceful shutdown. Second: exit immediately."""

    def handle(signum: int, _frame: object) -> None:
        if server.stopping:
            os.write(2, b"pinlater-server: second signal, exiting immediately\n")
            os._exit(128 + signum)
        log.info(
            "received %s, shutting down (grace %.1fs)",
            signal.Signals(signum).name,
            server.settings.shutdown_grace_seconds,
        )
        server.request_shutdown()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    early_format = args.log_format or os.environ.get("PINLATER_LOG_FORMAT", "text")
    configure_logging("INFO", early_format if early_format in FORMATS else "text")
    try:
        config = load_config(args.config, overrides=flag_overrides(args))
    except ConfigError as exc:
        print("pinlater-server: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    try:
        sock, metrics_sock = bind_listeners(config)
    except ListenerTaken as exc:
        print(f"pinlater-server: {exc}", file=sys.stderr)
        return 1
    return run(config, sock, metrics_sock)


def run(config: Config, sock: socket.socket, metrics_sock: socket.socket | None = None) -> int:
    """Build the App on already bound sockets, serve until a signal, then close the App."""
    app = None
    try:
        app = App(config)
        app.start_background(metrics_sock)
        rejections = Rejections(
            app.metrics.frame_rejected, count_refused=app.metrics.connection_refused
        )
        server = Server(
            sock,
            config.server,
            dispatcher(config, app.handler, rejections),
            app.admission,
            rejections,
        )
    except NotDurable as exc:
        print(f"pinlater-server: refusing to start: {exc}", file=sys.stderr)
        for problem in exc.warnings:
            print(f"  {problem}", file=sys.stderr)
        return _abandon_start(app, sock, metrics_sock)
    except Exception:
        log.exception("pinlater-server: cannot start")
        return _abandon_start(app, sock, metrics_sock)
    app.attach_server(server)
    if app.handler.longpoll is not None:
        server.drain_hooks.append(app.handler.longpoll.release_all)
    install_signal_handlers(server)
    log.info("%s", describe(config, app, server.address))
    try:
        drained = server.serve_forever()
    finally:
        app.close()
    log.info("pinlater-server stopped%s", "" if drained else " (requests abandoned)")
    return 0 if drained else 1


def dispatcher(config: Config, handler: Any, rejections: Rejections) -> Dispatcher:
    """The request dispatcher with its wire check. Containers may hold up to twice the
    per-request cap: a slightly oversized request still reaches the handler, whose
    PinLaterException names the field; anything far larger is cut before decoding."""
    limits = WireLimits(max_items=2 * config.limits.max_jobs_per_request)
    heap.keep_large_blocks_mapped()  # large replies give their memory back when freed
    return Dispatcher(
        PinLater,
        handler,
        wire_limits=limits,
        on_reject=rejections.from_dispatcher,
        max_reply_bytes=config.server.max_frame_bytes,
    )


def _abandon_start(app: Any, *socks: socket.socket | None) -> int:
    if app is not None:
        app.close()
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
    return 1


if __name__ == "__main__":
    sys.exit(main())
