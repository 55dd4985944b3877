"""Hostile input for the fuzz tier: JSON that breaks parsers, and documents with a part replaced.

Hypothesis draws a seed; the input is built from it with `random.Random`, which is cheap
enough for 100,000 inputs (Hypothesis's own recursive strategies cost ~20 ms an input
here). A failing input is reproduced from its seed, which Hypothesis reports.

The values lean to what breaks parsers: lone surrogates and other odd characters, NUL and
controls, huge, tiny and non-finite-looking numbers, empty and long strings, nesting far
past the JSON depth limit, keys a document does not expect. `mutated` replaces or
deletes one to three parts of a valid document at random depths, so most inputs get past
the outer checks and reach the deep ones.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

SPECIAL_TEXTS = [
    "",
    "\ud800",
    "\udfff",
    "a\ud83d",
    "\x00",
    "\x00\x01\x1f",
    "\u2028\u2029",
    "\ufeff",
    "-1",
    "1e61",
    "1e999",
    "NaN",
    "Infinity",
    "0." + "0" * 80 + "1",
    "9" * 90,
    "2026-13-45T99:99:99Z",
    "2026-01-02T03:04:05Z",
    "../../etc/passwd",
    "/",
    "[" * 80,
    "{}",
    "user",
    "assistant",
    "tool",
    "being-v1",
]
SPECIAL_NUMBERS: list[Any] = [0, -1, 1, 2**63, 2**64, 2**96, 10**61, -(10**61), 1e-30, 1e60, 1.5]
DEEP = "@@DEEP@@"
"""A marker value `render` turns into arrays nested past the JSON depth limit."""


def hostile_text(rng: random.Random) -> str:
    """A short text: a special one, or random code points (lone surrogates included)."""
    if rng.random() < 0.4:
        return rng.choice(SPECIAL_TEXTS)
    return "".join(
        chr(rng.choice((rng.randrange(0x80), rng.randrange(0x110000))))
        for _ in range(rng.randrange(12))
    )


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of any kind, at most three levels of containers."""
    roll = rng.random()
    if roll < 0.08:
        return None
    if roll < 0.14:
        return rng.random() < 0.5
    if roll < 0.34:
        return rng.choice([*SPECIAL_NUMBERS, rng.randrange(-(2**70), 2**70), rng.random() * 1e3])
    if roll < 0.7 or depth >= 3:
        return hostile_text(rng)
    if roll < 0.85:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {hostile_text(rng): hostile_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _parent_and_key(document: Any, rng: random.Random) -> tuple[Any, Any] | None:
    """A random place inside the document: its container and key (None for the root)."""
    parent, key = None, None
    node = document
    while isinstance(node, dict | list) and node and (parent is None or rng.random() < 0.85):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        parent, node = node, node[key]
    return None if parent is None else (parent, key)


def _like(value: Any, rng: random.Random) -> Any:
    """A hostile value of the same JSON type: it passes a schema's type checks."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return rng.choice([*SPECIAL_NUMBERS, -value, value * 10 ** rng.randrange(30)])
    if isinstance(value, str):
        return rng.choice((hostile_text(rng), value + hostile_text(rng), value * 50))
    if isinstance(value, list) and value:
        return [*value, json.loads(json.dumps(rng.choice(value)))]
    return hostile_value(rng)


def mutated(document: Any, rng: random.Random) -> Any:
    """A copy of the document with one to three parts changed: by a value of the same type
    (most often, so that deep checks are reached), a hostile value of any type, or deleted."""
    result = json.loads(json.dumps(document))
    for _ in range(rng.randint(1, 3)):
        place = _parent_and_key(result, rng)
        if place is None:
            result = hostile_value(rng)
            continue
        parent, key = place
        roll = rng.random()
        if roll < 0.6:
            parent[key] = _like(parent[key], rng)
        elif roll < 0.85:
            parent[key] = DEEP if rng.random() < 0.15 else hostile_value(rng)
        else:
            del parent[key]
    return result


def render(document: Any, depth: int = 70) -> bytes:
    """The document as JSON text (surrogates written as `\\ud800` escapes), deep markers
    replaced by nesting `depth` levels deep."""
    text = json.dumps(document, ensure_ascii=True, allow_nan=False)
    nested = "[" * depth + "]" * depth
    return text.replace(json.dumps(DEEP), nested).encode("ascii")


def hostile_bytes(document: Any, seed: int) -> bytes:
    """Input for a parser of `document`'s kind: mostly a mutation of it, else hostile JSON,
    a cut or spliced copy of it, or raw bytes."""
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.75:
        return render(mutated(document, rng), rng.choice((65, 300, 5000)))
    if roll < 0.87:
        return render(hostile_value(rng))
    valid = render(document)
    if roll < 0.95:
        cut = rng.randrange(len(valid) + 1)
        return valid[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(4)))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))


SEEDS = st.integers(min_value=0, max_value=2**63)


def documents(document: Any) -> st.SearchStrategy[bytes]:
    """Hostile inputs for a parser of `document`'s kind, one per drawn seed."""
    return SEEDS.map(lambda seed: hostile_bytes(document, seed))


def values() -> st.SearchStrategy[Any]:
    """Hostile JSON values, one per drawn seed."""
    return SEEDS.map(lambda seed: hostile_value(random.Random(seed)))


def texts() -> st.SearchStrategy[str]:
    """Hostile short texts, one per drawn seed."""
    return SEEDS.map(lambda seed: hostile_text(random.Random(seed)))
