"""regex_guard: body regexes are sized from their parse tree and refused before compiling when
the engine would expand them past `limits.max_regex_size` nodes (hostile load, item 1); what
is accepted compiles in bounded memory, measured here with tracemalloc on the real engine."""

from __future__ import annotations

import random
import time
import tracemalloc

import pytest
import regex
from regex import _main as regex_main

from pinlater.errors import InvalidRequest
from pinlater.handler.regex_guard import (
    BYTES_PER_NODE,
    MAX_NESTING,
    check_pattern,
    compile_bounded,
    measure,
)

MAX_SIZE = 10_000  # the default limits.max_regex_size

BOMBS = [
    b"a{99999999}",
    b"(?:(?:a{100}){100}){100}",
    b"(?:a{1000}){1000}",
    b"[ab]{1000000}",
    b"(a){1000000}",
    b"(?:ab|cd){65535}",
    b"a{10001}",
    b"(?:a{100}){101}",
    b"(?:a{1000,}){1000,}",  # the minimum of an open repeat is unrolled too
    b"(?:a{1000}){1000}?",
    b"(?:a{1000}){1000}+",
    b"(?>(?:a{1000}){1000})",
    b"(?=(?:a{1000}){1000})",
    b"(?:a{1000}|b){1000}",
    b"(a{1000}(?R)?){1000}",
    b"(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:(?:a)+)+)+)+)+)+)+)+)+)+)+)+)+)+",  # 2^14 copies
    b"(?:(?:(?:(?:(?:(?:(?:(?:(?:a){2}){2}){2}){2}){2}){2}){2}){2}){2}",  # 3^9
]

#: one pattern per node kind, with a placeholder count scaled up to just under MAX_SIZE
SHAPES = [
    b"a{%d}",
    b"\\w{%d}",
    b"[ab]{%d}",
    b"(a){%d}",
    b"((((a)))){%d}",
    b"(?:ab|cd){%d}",
    b"(?:a*){%d}",
    b"(?i:a){%d}",
    b"(?:(?=a)a){%d}",
    b"(?:[a-z0-9_.-]){%d}",
    b"(?:(?:a{10}){10}){%d}",
    b"(?:(?:(?:(?:(?:(?:(?:(?:a)+)+)+)+)+)+)+){%d}",  # nested ranges double per level
    b"(?:(?:(?:(?:a){2}){2}){2}){%d}",  # nested small counts triple per level
    b"(?:(?:(a)?(?(1)b|c)){e<=1}(?<=b)){%d}",
]


@pytest.mark.parametrize("pattern", BOMBS, ids=lambda p: p.decode()[:30])
def test_a_pattern_that_expands_past_the_bound_is_refused_before_compiling(pattern):
    with pytest.raises(InvalidRequest, match=r"bodyRegexToMatch: .*limits\.max_regex_size"):
        check_pattern(pattern, max_size=MAX_SIZE)


@pytest.mark.parametrize(
    "pattern",
    [
        b"job_body_1.*",
        rb"^job_body_1\d$",
        rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}",
        b"a{0,4294967294}",  # a large maximum is not unrolled
        b"(?:a{0,1000}){0,1000}",
        b"(?:(?:a|b){1,1000}){1,1000}",
        b"(?:foo|bar)+baz",
        rb"\p{L}+",  # regex-only syntax parses with the engine's own parser
        b"(?:abc){e<=1}",
        b"(a{100})(?1){100}",  # a group call is a reference, not a copy
        b"x(?x) a b # verbose from here",  # a global flag mid-pattern
        b"a{9990}",
    ],
)
def test_ordinary_patterns_are_accepted_and_compile(pattern):
    compiled = compile_bounded(pattern, max_size=MAX_SIZE)
    assert compiled.pattern == pattern


def test_invalid_and_too_deep_patterns_name_the_field():
    with pytest.raises(InvalidRequest, match="bodyRegexToMatch: invalid regular expression"):
        compile_bounded(b"(unclosed", max_size=MAX_SIZE)
    with pytest.raises(InvalidRequest, match="bodyRegexToMatch: invalid regular expression"):
        compile_bounded(b"a)", max_size=MAX_SIZE)
    for opener in (b"(", b"(?=", b"(?>", b"(?:x|"):
        deepest = opener * MAX_NESTING + b"a" + b")" * MAX_NESTING
        compile_bounded(deepest, max_size=MAX_SIZE)
        too_deep = opener * (MAX_NESTING + 1) + b"a" + b")" * (MAX_NESTING + 1)
        with pytest.raises(InvalidRequest, match=f"nested more than {MAX_NESTING} levels"):
            compile_bounded(too_deep, max_size=MAX_SIZE)
    very_deep = b"(?:" * 3000 + b"a" + b")" * 3000  # deeper than the parser's recursion
    with pytest.raises(InvalidRequest, match=f"nested more than {MAX_NESTING} levels"):
        compile_bounded(very_deep, max_size=MAX_SIZE)


def test_measure_counts_the_copies_the_engine_makes():
    assert 1000 < measure(b"a{1000}", stop_at=10**9).nodes < 1010
    assert 1331 < measure(b"(?:(?:a{10}){10}){10}", stop_at=10**9).nodes < 1700  # 11 x 11 x 11
    assert measure(b"(?:a{10}){0,1000}", stop_at=10**9).nodes < 30
    doubling = [measure(b"(?:(" * n + b"a" + b"))+" * n, stop_at=10**9).nodes for n in (8, 9)]
    assert 1.9 < doubling[1] / doubling[0] < 2.1  # x+ holds x twice: nesting doubles
    tripling = [measure(b"(?:(" * n + b"a" + b")){2}" * n, stop_at=10**9).nodes for n in (6, 7)]
    assert 2.9 < tripling[1] / tripling[0] < 3.1
    assert measure(b"(?:(" * 20 + b"a" + b"))*" * 20, stop_at=10**9).nodes < 100
    # counting stops at the first node past the bound: huge counts cost no time to measure
    started = time.process_time()
    assert measure(b"(?:a{99999}){99999}" * 20, stop_at=MAX_SIZE).nodes > MAX_SIZE
    assert time.process_time() - started < 0.5


def largest_accepted(shape: bytes) -> bytes:
    """`shape` with the largest count whose expanded size stays within MAX_SIZE."""
    low, high = 1, MAX_SIZE
    while low < high:
        mid = (low + high + 1) // 2
        if measure(shape % mid, stop_at=MAX_SIZE).nodes <= MAX_SIZE:
            low = mid
        else:
            high = mid - 1
    return shape % low


@pytest.mark.parametrize("shape", SHAPES, ids=lambda p: p.decode()[:24])
def test_the_biggest_accepted_patterns_compile_in_bounded_memory(shape):
    pattern = largest_accepted(shape)
    tracemalloc.start()
    try:
        compiled = compile_bounded(pattern, max_size=MAX_SIZE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert compiled.pattern == pattern
    # the guard's own estimate, which the config docs quote, with 2x for the parse trees
    assert peak <= 2 * MAX_SIZE * BYTES_PER_NODE, (pattern[:40], peak)


def random_pattern(rng: random.Random, depth: int) -> str:
    """A pattern of the engine's constructs, nested at most `depth` deep."""
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(["a", "ab", "[ab]", r"\w", ".", "(?i:a)", "abc"])
    inner = random_pattern(rng, depth - 1)
    return rng.choice(
        [
            inner + random_pattern(rng, depth - 1),
            f"(?:{inner}|{random_pattern(rng, depth - 1)})",
            f"({inner})",
            f"(?>{inner})",
            f"(?={inner})",
            f"(?<={inner})",
            f"(?:{inner}){{e<=1}}",
            f"(a)?(?(1){inner}|b)",
            f"(?:{inner})" + rng.choice(["*", "+", "?", "{2}", "{3}", "{1,3}", "{2,}", "{5}"]),
            f"(?:{inner})" + rng.choice(["+?", "*+", "{3}?", "{4,5}+", "{0,5}", "{10}"]),
        ]
    )


def test_random_accepted_patterns_compile_within_the_estimate():
    """The guard's node count bounds compile memory for any mix of constructs, not just the
    shapes above: a fixed overhead plus BYTES_PER_NODE per counted node."""
    rng = random.Random(20261119)
    checked = 0
    while checked < 60:
        pattern = random_pattern(rng, rng.randint(4, 12)).encode()
        size = measure(pattern, stop_at=MAX_SIZE)
        if size.nodes > MAX_SIZE or size.depth > MAX_NESTING or size.nodes < 200:
            continue
        tracemalloc.start()
        try:
            compile_bounded(pattern, max_size=MAX_SIZE)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= 64 * 1024 + size.nodes * BYTES_PER_NODE, (pattern, size, peak)
        checked += 1


def test_compiling_remembers_nothing_of_the_pattern():
    seen = len(regex_main._locale_sensitive)
    cached = len(regex_main._cache)
    for i in range(500):
        compile_bounded(b"unique_%d_pattern" % i, max_size=MAX_SIZE)
    assert len(regex_main._locale_sensitive) <= seen
    assert len(regex_main._cache) <= cached


def test_the_engine_really_expands_minimum_counts():
    """The premise of the guard, pinned against engine upgrades: compiling `(?:a{N}){M}`
    allocates in proportion to N*M, so the tree (not the text) is what must be bounded."""

    def compile_peak(pattern: bytes) -> int:
        tracemalloc.start()
        try:
            regex.compile(pattern, regex.V0, cache_pattern=False)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, big = compile_peak(b"(?:a{100}){10}"), compile_peak(b"(?:a{100}){300}")
    assert big > 10 * small
