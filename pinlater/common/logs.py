"""Log output for the console scripts: plain text for people, JSON lines for log shippers.

    configure_logging("INFO", fmt="json")

installs one stderr handler on the root logger (replacing handlers an earlier call installed),
so `pinlater-server` and `pinlater-worker` print every record once, in one format. A JSON line
carries `time` (UTC ISO-8601 with milliseconds), `level`, `logger`, `message`, and `exc_info`
when the record has a traceback; extra attributes given with `log.info(..., extra={...})` are
added as fields when JSON can hold them.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import TextIO

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: LogRecord attributes that are not `extra` fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        entry = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value if _is_json(value) else repr(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["stack_info"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


def _is_json(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def formatter(fmt: str = "text") -> logging.Formatter:
    """The formatter of one of FORMATS (ValueError for anything else)."""
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    if fmt == "json":
        return JsonFormatter()
    raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def parse_level(level: str | int) -> int:
    """A logging level from its name (any case) or number (ValueError otherwise)."""
    if isinstance(level, int):
        return level
    if level.upper() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    return logging.getLevelName(level.upper())


def configure_logging(
    level: str | int = "INFO",
    fmt: str = "text",
    *,
    stream: TextIO | None = None,
    handler: logging.Handler | None = None,
) -> logging.Handler:
    """Log to `stream` (stderr) in `fmt` at `level`; returns the installed handler.

    Pass `handler` to install that one instead of a plain StreamHandler (the worker's status
    line uses its own). A handler installed by an earlier call is removed first, so calling
    this again (e.g. after the config file named another level) never doubles the lines."""
    levelno = parse_level(level)
    installed = handler if handler is not None else logging.StreamHandler(stream or sys.stderr)
    installed.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_pinlater_configured", False):
            root.removeHandler(old)
    installed._pinlater_configured = True  # type: ignore[attr-defined]
    root.addHandler(installed)
    root.setLevel(levelno)
    return installed
