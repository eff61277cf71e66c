"""Output for the `pinlater` CLI: aligned tables for people, JSON for scripts.

Bodies are bytes: tables show them as UTF-8 with escapes for undecodable bytes, cut to a width;
JSON carries `body` when it is valid UTF-8 and `body_base64` otherwise, so nothing is lost.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Sequence
from typing import Any

from worker_sdk.models import DequeuedJob, JobInfo

BODY_WIDTH = 60


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; numbers right-aligned (floats with one
    decimal)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        bool(rows) and all(isinstance(r[i], (int, float)) for r in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in cells])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bytes):
        return show_body(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def show_body(body: bytes | None, width: int = BODY_WIDTH) -> str:
    """One printable line: undecodable bytes and control characters escaped, long text cut."""
    if body is None:
        return "-"
    text = body.decode("utf-8", errors="backslashreplace")
    if not text.isprintable():
        text = "".join(
            c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
        )
    return text if len(text) <= width else text[: width - 3] + "..."


def show_time(millis: int | None) -> str:
    """Epoch milliseconds as UTC ISO-8601 with milliseconds."""
    if millis is None:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def body_json(body: bytes | None) -> dict[str, str]:
    if body is None:
        return {}
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def job_info_json(info: JobInfo) -> dict[str, Any]:
    return {
        "descriptor": info.descriptor,
        "state": info.state.name,
        "attempts_allowed": info.attempts_allowed,
        "attempts_remaining": info.attempts_remaining,
        "custom_status": info.custom_status,
        "created_at_ms": info.created_at_ms,
        "run_after_ms": info.run_after_ms,
        "updated_at_ms": info.updated_at_ms,
        "claim": info.claim,
        **body_json(info.body),
    }


def job_infos_table(infos: Sequence[JobInfo], with_body: bool) -> str:
    headers = ["DESCRIPTOR", "STATE", "ATTEMPTS", "RUN AFTER", "UPDATED", "STATUS"]
    rows = [
        [
            i.descriptor,
            i.state.name,
            f"{i.attempts_remaining}/{i.attempts_allowed}",
            show_time(i.run_after_ms),
            show_time(i.updated_at_ms),
            show_body(i.custom_status.encode("utf-8"), 30),
        ]
        for i in infos
    ]
    if with_body:
        headers.append("BODY")
        for row, info in zip(rows, infos, strict=True):
            row.append(show_body(info.body))
    return table(headers, rows)


def job_info_block(info: JobInfo, with_body: bool) -> str:
    """One job as `descriptor` and indented `field  value` lines (lookup: every field, the
    claim included, without a table wider than the terminal)."""
    fields = [
        ("state", info.state.name),
        ("attempts", f"{info.attempts_remaining} of {info.attempts_allowed} left"),
        ("claim", info.claim or "-"),
        ("status", show_body(info.custom_status.encode("utf-8"), 200) or "-"),
        ("created", show_time(info.created_at_ms)),
        ("run after", show_time(info.run_after_ms)),
        ("updated", show_time(info.updated_at_ms)),
    ]
    if with_body:
        fields.append(("body", show_body(info.body)))
    return "\n".join([info.descriptor] + [f"  {name:<10} {value}" for name, value in fields])


def dequeued_json(job: DequeuedJob) -> dict[str, Any]:
    return {
        "descriptor": job.descriptor,
        "attempts_allowed": job.attempts_allowed,
        "attempts_remaining": job.attempts_remaining,
        "claim": job.claim,
        **body_json(job.body),
    }


def dequeued_table(jobs: Sequence[DequeuedJob]) -> str:
    rows = [
        [
            j.descriptor,
            f"{j.attempts_remaining}/{j.attempts_allowed}",
            j.claim or "-",
            show_body(j.body),
        ]
        for j in jobs
    ]
    return table(["DESCRIPTOR", "ATTEMPTS", "CLAIM", "BODY"], rows)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def health_summary(status: int | None, health: dict[str, Any], error: str = "") -> str:
    """One line for `pinlater stats`: server status, version, uptime and shard health."""
    if status is None:
        return f"health: not available ({error})"
    shards = ", ".join(
        f"{s.get('name')}{'' if s.get('healthy') else ' UNHEALTHY'}"
        f"{' (dequeue only)' if s.get('dequeue_only') else ''}"
        for s in health.get("shards", [])
    )
    uptime = health.get("uptime_seconds")
    uptime_text = "-" if uptime is None else str(datetime.timedelta(seconds=int(uptime)))
    return (
        f"health: {health.get('status', status)} (HTTP {status}), version "
        f"{health.get('version', '?')}, up {uptime_text}, shards: {shards or '-'}"
    )
