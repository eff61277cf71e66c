"""Claim strings: who holds a dequeued job, fenced per dequeue.

A claim is `<token>:<source>` with a fixed-length random token first, so every backend can read
the source part back with a fixed offset (SQL `SUBSTR(claim, CLAIM_SOURCE_OFFSET + 1)`, Lua
`string.sub(claim, CLAIM_SOURCE_OFFSET + 1)`), and a client that sends no claim is matched by
equality on that source part (never a substring or a LIKE pattern).
"""

import secrets

CLAIM_TOKEN_HEX_CHARS = 24
CLAIM_SOURCE_OFFSET = CLAIM_TOKEN_HEX_CHARS + 1  # 0-based index of the source part
MAX_SOURCE_LENGTH = 200
MAX_CLAIM_LENGTH = CLAIM_SOURCE_OFFSET + MAX_SOURCE_LENGTH


def new_claim(source: str) -> str:
    """A fresh claim for one dequeue request made by `source`."""
    return f"{secrets.token_hex(CLAIM_TOKEN_HEX_CHARS // 2)}:{source}"


def claim_source(claim: str) -> str:
    return claim[CLAIM_SOURCE_OFFSET:]


def handed_claim(reserved: str, claim: str) -> str:
    """The claim a broker hands a buffered job out under: the token of the claim it is
    reserved under (`reserved`, its prefetch's) with the source of the dequeue's `claim`. An
    ack or checkpoint carrying it matches the reservation itself (`reserved_claim_matches`),
    so it applies through any server before the hand-out is written (docs/semantics.md
    R-broker-claim, S-reserved-ack)."""
    return f"{reserved[:CLAIM_TOKEN_HEX_CHARS]}:{claim_source(claim)}"


def reserved_claim_matches(stored: str | None, claim: str | None, source: str) -> bool:
    """`claim_matches` for a reserved job: also a claim with the reservation's token."""
    if claim_matches(stored, claim, source):
        return True
    token = CLAIM_TOKEN_HEX_CHARS
    return bool(stored and claim and len(claim) > token and stored[:token] == claim[:token])


def claim_matches(stored: str | None, claim: str | None, source: str) -> bool:
    """Whether a job holding `stored` is the one an ack or checkpoint names: its claim equal to
    `claim`, or without one (an original client) its source part equal to `source` (the rule
    each backend's guard applies in storage; backends that count in Python use this)."""
    if not stored:
        return False
    return stored == claim if claim is not None else claim_source(stored) == source
