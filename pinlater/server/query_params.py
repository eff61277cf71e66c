"""Query strings and form fields as the admin API and the dashboard read them: one parser for
both, so a field means and refuses the same on either side. Every refusal is `BadInput`
(answered 400 `invalid_request`) with a message that names the field.

- at most `MAX_FIELDS` fields, and no field given twice;
- a whole number is digits only (up to 18, surrounding spaces ignored): no sign, no point;
- a yes/no field is true, 1, yes, on or false, 0, no, off (any case);
- an empty or absent field takes the caller's default.
"""

from __future__ import annotations

import re
from typing import overload
from urllib.parse import parse_qsl

from pinlater.errors import PinLaterError

#: fields one query string or form may carry
MAX_FIELDS = 20
_WHOLE = re.compile(r"[0-9]{1,18}", re.ASCII)
_BOOLS = {"true": True, "1": True, "yes": True, "on": True}
_BOOLS.update({"false": False, "0": False, "no": False, "off": False})


class BadInput(PinLaterError):
    """Malformed HTTP input (query, path or body) the admin API and the dashboard answer 400."""

    name = "INVALID_REQUEST"


def parse_fields(text: str, noun: str = "field") -> dict[str, str]:
    """`a=1&b=2` as a dict; `noun` names a field in the messages ("query parameter")."""
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise BadInput(f"more than {MAX_FIELDS} {noun}s") from None
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            raise BadInput(f"{noun} {key[:40]!r} given twice")
        fields[key] = value
    return fields


@overload
def whole_number(fields: dict[str, str], name: str, default: int) -> int: ...
@overload
def whole_number(fields: dict[str, str], name: str, default: None = None) -> int | None: ...
def whole_number(fields: dict[str, str], name: str, default: int | None = None) -> int | None:
    """The field as a whole number; `default` when absent or empty."""
    text = fields.get(name, "").strip()
    if not text:
        return default
    if not _WHOLE.fullmatch(text):
        raise BadInput(f"{name}: must be a whole number, got {text[:40]!r}")
    return int(text)


def yes_no(fields: dict[str, str], name: str, default: bool = False) -> bool:
    """The field as a boolean; `default` when absent or empty."""
    text = fields.get(name, "").strip()
    if not text:
        return default
    value = _BOOLS.get(text.lower())
    if value is None:
        raise BadInput(f"{name}: must be true or false, got {text[:40]!r}")
    return value
