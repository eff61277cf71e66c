"""HTML for the dashboard with escaping by default: every value put into a template is escaped
unless it is already `Markup` (HTML this package built), so a job body, a queue name or a
custom status holding `<script>` renders as text. Templates are `string.Template` files shipped
in `templates/`; no template engine is needed for pages this small.

Also the few formatting helpers the pages share: times, numbers, and the inline-SVG sparkline
of a queue's rates (inline markup, no script and no style attribute, so the strict
Content-Security-Policy allows it).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from string import Template


class Markup(str):
    """Text that is already HTML (built here from escaped parts): never escaped again."""


def esc(value: object) -> Markup:
    """`value` as HTML text: escaped unless it is Markup; None is an empty cell."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    return Markup(html.escape(str(value), quote=True))


def fill(template: str | Template, **values: object) -> Markup:
    """`template` with every `$name` replaced by the escaped value."""
    tpl = template if isinstance(template, Template) else Template(template)
    return Markup(tpl.substitute({k: esc(v) for k, v in values.items()}))


def join(parts: Iterable[object], sep: str = "") -> Markup:
    return Markup(sep.join(esc(p) for p in parts))


@cache
def template(name: str) -> Template:
    """A page template from the package's templates/ directory (read once)."""
    text = resources.files(__package__).joinpath("templates", name).read_text("utf-8")
    return Template(text)


@cache
def static_file(name: str) -> bytes | None:
    """A file of the package's static/ directory, or None (only names listed in STATIC)."""
    if name not in STATIC:
        return None
    return resources.files(__package__).joinpath("static", name).read_bytes()


#: the static files served and their content types
STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}


def page(name: str, **values: object) -> Markup:
    return fill(template(name), **values)


# ---- formatting ----


def when(ms: int | None) -> Markup:
    """An epoch-ms time as UTC text with its age, in a <time> element."""
    if not ms:
        return Markup("")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))
    return fill(
        '<time datetime="${iso}Z" title="${iso}Z">${stamp}</time> <span class="age">${age}</span>',
        iso=stamp.replace(" ", "T"),
        stamp=stamp,
        age=age(time.time() - ms / 1000),
    )


def age(seconds: float) -> str:
    """'12 s ago', '3 min ago', 'in 2 h' ..."""
    future = seconds < 0
    s = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            text = f"{s / size:.0f} {unit}"
            break
    else:
        text = f"{s:.0f} s"
    return f"in {text}" if future else f"{text} ago"


def number(value: float | int | None) -> str:
    if value is None:
        return "\u2013"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    return f"{int(value):,}"


def sparkline(series: Mapping[str, Sequence[float]], width: int = 120, height: int = 28) -> Markup:
    """An inline SVG of the enqueued and dequeued rates (one polyline each, oldest left),
    scaled to the larger peak; empty when there is no sample yet. Built with plain string
    formatting (numbers only, nothing to escape): the overview draws one per queue."""
    enqueued = list(series.get("enqueued", ()))
    dequeued = list(series.get("dequeued", ()))
    samples = max(len(enqueued), len(dequeued))
    if samples < 2:
        return Markup('<span class="muted">no samples yet</span>')
    peak = max(max(enqueued, default=0.0), max(dequeued, default=0.0))
    # coordinates in tenths of a pixel (viewBox scaled by 10), so each is a plain integer
    xs = _x_positions(samples, width * 10)
    base = height * 10 - 10

    def points(values: list[float]) -> str:
        if not peak or not any(values):
            return f"0,{base} {width * 10},{base}"
        scale = (height * 10 - 20) / peak
        return " ".join([f"{x},{int(base - v * scale)}" for x, v in zip(xs, values, strict=False)])

    label = f"enqueued and dequeued per second, peak {number(peak)}/s"
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width * 10} {height * 10}" width="{width}" '
        f'height="{height}" '
        f'role="img" aria-label="{esc(label)}">'
        f'<polyline class="spark-enq" points="{points(enqueued)}"><title>enqueued</title>'
        f'</polyline><polyline class="spark-deq" points="{points(dequeued)}"><title>dequeued'
        "</title></polyline></svg>"
    )


@cache
def _x_positions(samples: int, width: int) -> tuple[int, ...]:
    step = width / (samples - 1)
    return tuple(int(i * step) for i in range(samples))
