"""Compile a body regex in bounded memory: refuse a too-big program before building it.

The `regex` engine expands the mandatory part of every counted repeat when it builds its
program: `a{100000}` becomes 100,000 nodes (~26 MB), `(?:(?:a{100}){100}){100}` a million
(~270 MB), and `a{99999999}` took gigabytes, which is how one request could get the server
killed. The parse tree does not expand anything, so this module parses the pattern with the
engine's own parser (pure Python: the exact grammar `regex.compile` accepts, unlike `re`'s),
and sizes the program from the tree: every node counts once per copy its enclosing repeats
make (the product of their minimum counts plus one; `{0,n}`, `*` and `?` copy nothing).
Measured on regex 2026.11: 30-280 bytes per expanded node, so `max_size` nodes bound the
memory of a compile (tests/unit/test_body_filter_guard.py measures it).

Nesting is bounded too (parser and compiler recurse once per level of groups), and compiled
patterns are never kept: the engine's pattern cache would hold up to 500 programs, and even
uncached it remembers every pattern text it saw (`_locale_sensitive`), which `compile_bounded`
forgets again.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex
from regex import _main as regex_main
from regex import _regex_core as core

from pinlater.errors import InvalidRequest

#: regex.compile's record of every pattern text it compiled (keyed (type, pattern)); only a
#: shortcut for its locale check, so forgetting an entry is safe
_SEEN_PATTERNS: dict = regex_main._locale_sensitive
#: deepest nesting of groups, repeats, alternations and lookarounds accepted (the engine's
#: parser recurses a few Python frames per level; the 1000-frame limit ends near 100 levels)
MAX_NESTING = 50
#: bytes of compiled program per expanded node, an upper bound of the measured 30-280
BYTES_PER_NODE = 300


@dataclass(frozen=True)
class PatternSize:
    """What a pattern's compiled program would hold: expanded nodes and nesting depth."""

    nodes: int
    depth: int


def compile_bounded(
    pattern: bytes, *, max_size: int, field: str = "bodyRegexToMatch"
) -> regex.Pattern:
    """`pattern` compiled (version 0 syntax), after `check_pattern`; nothing of it is cached.
    Raises InvalidRequest naming `field` for a pattern too big, too deep or invalid."""
    check_pattern(pattern, max_size=max_size, field=field)
    try:
        return regex.compile(pattern, regex.V0, cache_pattern=False)
    except (regex.error, ValueError, OverflowError) as exc:
        raise InvalidRequest(f"{field}: invalid regular expression: {exc}") from None
    except RecursionError:
        raise InvalidRequest(f"{field}: nested more than {MAX_NESTING} levels deep") from None
    finally:
        _SEEN_PATTERNS.pop((bytes, pattern), None)


def check_pattern(pattern: bytes, *, max_size: int, field: str = "bodyRegexToMatch") -> None:
    """Raise InvalidRequest (naming `field` and the bound) when compiling `pattern` would expand
    it to more than `max_size` nodes or it nests deeper than MAX_NESTING; also for a pattern
    the engine's parser rejects."""
    size = measure(pattern, field=field, stop_at=max_size)
    if size.depth > MAX_NESTING:
        raise InvalidRequest(f"{field}: nested more than {MAX_NESTING} levels deep")
    if size.nodes > max_size:
        raise InvalidRequest(
            f"{field}: compiles to more than {max_size:,} nodes once its repeats are expanded "
            "(limits.max_regex_size: x{n} and x{n,m} hold n + 1 copies of x, x+ two, and "
            "nested repeats multiply); use smaller counts, fewer nested repeats, or * and {0,m}"
        )


def measure(pattern: bytes, *, field: str = "bodyRegexToMatch", stop_at: int) -> PatternSize:
    """The expanded size and depth of `pattern` (parsed, never compiled). Counting stops early
    once past `stop_at` nodes or MAX_NESTING levels (the result is then only "too big")."""
    tree = _parse(pattern, field)
    nodes, deepest = 0, 0
    calls = 0
    stack: list[tuple[object, int, int]] = [(tree, 1, 0)]  # (node, repetitions, depth)
    while stack:
        node, repetitions, depth = stack.pop()
        nodes += repetitions
        deepest = max(deepest, depth)
        if nodes > stop_at or deepest > MAX_NESTING:
            break
        if isinstance(node, core.CallGroup):
            calls += 1  # (?R), (?1): the engine may compile another copy of the group
        inner = repetitions * _copies(node)
        below = depth if isinstance(node, core.Sequence) else depth + 1  # a group, a repeat ...
        stack.extend((child, inner, below) for child in _children(node))
    return PatternSize(nodes=nodes * (1 + calls), depth=deepest)


def _copies(node: object) -> int:
    """How many copies of the body of `node` the engine's program holds, as measured: a repeat
    with a minimum count n holds n + 1 (`x{2}` and `x{2,5}` 3, `x+` 2: nested repeats
    multiply, so `(?:(?:a){2}){2}...` 12 deep took 209 MB to compile), one without (`x*`,
    `x?`, `x{0,n}`) and `x{1}` hold one, and so does anything that is not a repeat."""
    if not isinstance(node, core.GreedyRepeat):  # lazy and possessive repeats are subclasses
        return 1
    low, high = node.min_count or 0, node.max_count
    return 1 if low == 0 or (low == 1 and high == 1) else low + 1


def _parse(pattern: bytes, field: str) -> core.RegexBase:
    """The engine's parse tree of `pattern` (version 0 syntax, as compile_body_filter uses),
    following regex.compile's own steps up to (not including) building the program."""
    global_flags = regex.V0
    for _ in range(8):  # each retry adds a global flag set inline, e.g. (?x) mid-pattern
        source = core.Source(pattern)
        info = core.Info(global_flags, source.char_type, {})
        info.guess_encoding = core.ASCII
        source.ignore_space = bool(info.flags & core.VERBOSE)
        try:
            parsed = core._parse_pattern(source, info)
        except core._UnscopedFlagSet:
            global_flags = info.global_flags
            continue
        except core.error as exc:
            raise InvalidRequest(f"{field}: invalid regular expression: {exc}") from None
        except RecursionError:
            raise InvalidRequest(f"{field}: nested more than {MAX_NESTING} levels deep") from None
        if not source.at_end():
            raise InvalidRequest(f"{field}: invalid regular expression: unbalanced parenthesis")
        return parsed
    raise InvalidRequest(f"{field}: invalid regular expression: too many inline global flags")


def _children(node: object) -> list[object]:
    """The sub-nodes of a parse-tree node, whatever its class: every attribute that holds a
    node or a list of nodes (sequence items, branches, subpattern, yes/no items, set members)."""
    found: list[object] = []
    for value in vars(node).values():
        if isinstance(value, core.RegexBase):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(item for item in value if isinstance(item, core.RegexBase))
    return found
