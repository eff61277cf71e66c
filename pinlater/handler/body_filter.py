"""Body regex filters with one meaning in every backend, evaluated with a time bound.

`bodyRegexToMatch` is a Python-style regular expression searched (not anchored, like MySQL's
REGEXP) in the raw body bytes. It runs in the `regex` engine with a per-body timeout, so a
catastrophic pattern cannot freeze the process the way `re` would; it never reaches SQL or Lua.
"""

from __future__ import annotations

from collections.abc import Callable

import regex

from pinlater.errors import InvalidRequest


def compile_body_filter(
    pattern: object, *, max_length: int, timeout_seconds: float
) -> Callable[[bytes], bool] | None:
    """A predicate on body bytes for `pattern`, or None when no filter was asked for.

    Raises InvalidRequest for a pattern that is not text, too long or not a valid regex.
    The predicate raises InvalidRequest when one evaluation exceeds the time budget.
    """
    if pattern is None or pattern == "":
        return None
    if not isinstance(pattern, str):
        raise InvalidRequest("bodyRegexToMatch: must be valid UTF-8 text")
    if len(pattern) > max_length:
        raise InvalidRequest(f"bodyRegexToMatch: longer than {max_length} characters")
    try:
        compiled = regex.compile(pattern.encode("utf-8"), regex.V0)
    except (regex.error, ValueError, OverflowError) as exc:
        raise InvalidRequest(f"bodyRegexToMatch: invalid regular expression: {exc}") from None

    def matches(body: bytes) -> bool:
        try:
            return compiled.search(body, timeout=timeout_seconds) is not None
        except TimeoutError:
            raise InvalidRequest(
                f"bodyRegexToMatch: evaluation took longer than {timeout_seconds}s on one body; "
                "simplify the pattern"
            ) from None

    return matches
