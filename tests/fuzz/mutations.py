"""Byte-level mutations of valid PinLater calls, as Hypothesis strategies.

A case is one valid call of some RPC (tests.fuzz.wire.valid_calls), a list of mutations applied
in order (flip a byte, truncate, splice in bytes or another call's bytes, overwrite a 32-bit
length/count field with an interesting value, delete a range) and whether the frame header
keeps the true length or gets a wrong one.
"""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from tests.fuzz.wire import valid_calls

SEEDS = valid_calls()
INTERESTING_I32 = (0, 1, -1, -5, 2**31 - 1, 2**30, 2**16, 255, 4096, -(2**31))

flip = st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255))
truncate = st.tuples(st.just("truncate"), st.integers(0, 10**6))
splice = st.tuples(
    st.just("splice"),
    st.integers(0, 10**6),
    st.binary(min_size=1, max_size=16) | st.sampled_from(list(SEEDS.values())),
)
set_i32 = st.tuples(st.just("i32"), st.integers(0, 10**6), st.sampled_from(INTERESTING_I32))
delete = st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 8))
MUTATION = st.one_of(flip, truncate, splice, set_i32, delete)


def apply(payload: bytes, mutations: list[tuple]) -> bytes:
    data = bytearray(payload)
    for kind, offset, *rest in mutations:
        if not data:
            break
        pos = offset % len(data)
        if kind == "flip":
            data[pos] ^= rest[0]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice":
            data[pos:pos] = rest[0]
        elif kind == "i32":
            data[pos : pos + 4] = struct.pack("!i", rest[0])
        else:
            del data[pos : pos + rest[0]]
    return bytes(data)


@st.composite
def mutated_frames(draw) -> tuple[str, bytes]:
    """(method of the seed, framed bytes to send)."""
    method = draw(st.sampled_from(sorted(SEEDS)))
    payload = apply(SEEDS[method], draw(st.lists(MUTATION, min_size=1, max_size=4)))
    length = len(payload)
    if draw(st.integers(0, 9)) == 0:  # now and then a lying frame header
        length = draw(st.sampled_from((0, -1, length + 1, max(0, length - 1), 2**31 - 1)))
    return method, struct.pack("!i", length) + payload
