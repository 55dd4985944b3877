"""The wake text within the room a model's context leaves it, shrunk by the wake's priorities.

The system message must fit the context budget, and the sanctum gives way to the mind's
own sections. Within the room it is given, the wake keeps, whatever happens, its mode
line, the tending and First Breath lines, one line for every identity file (how large it
is, and how to read it) and the first lines of `pending.md`. What room is left goes in
wake order: the identity files (PERSONA first; the last one to get room is cut to it),
then the map's folder and newest lists, then the rest of `pending.md`. The text keeps the
wake's order throughout. Sizes are the bytes the text takes inside a JSON request.
"""

from __future__ import annotations

from dataclasses import dataclass

from singularity.sanctum.wake import (
    MAP_CUT,
    Wake,
    listing_lines,
    pending_text,
    standing_lines,
)

TOO_LITTLE = 32
"""A piece of identity text smaller than this is not worth showing cut."""
PENDING_HEAD = 512
"""The bytes of `pending.md` that are always shown."""
PENDING_CUT = "cut: no more room for pending.md in the model's context; read memory/pending.md"


_ESCAPED_BY_ONE = b'"\\\b\t\n\f\r'
_PLAIN = bytes(b for b in range(0x100) if b >= 0x20 and b not in b'"\\')


def json_size(text: str) -> int:
    """The bytes `text` takes as a JSON string's content (escapes included), as
    `json.dumps(text, ensure_ascii=False)` writes it; counted on its UTF-8 bytes, since no
    byte of a multi-byte character is below 0x20, a quote or a backslash."""
    data = text.encode("utf-8")
    escaped = data.translate(None, _PLAIN)
    # A quote, a backslash and the short escapes take one byte more; other controls
    # are written `\u00XX`, five more.
    by_one = sum(escaped.count(byte) for byte in _ESCAPED_BY_ONE)
    return len(data) + by_one + 5 * (len(escaped) - by_one)


def cut_to(text: str, room: int, marker: str) -> str | None:
    """The head of `text` and a `[marker]` line within `room` JSON bytes; None if none fits."""
    tail = f"\n[{marker}]"
    budget = room - json_size(tail)
    if budget < TOO_LITTLE:
        return None
    data = text.encode("utf-8")
    size = min(len(data), budget)
    while size >= TOO_LITTLE:
        head = data[:size].decode("utf-8", "ignore")
        if size < len(data) and "\n" in head:
            head = head.rsplit("\n", 1)[0]  # whole lines only
        head = head.rstrip()
        if json_size(head) <= budget:
            return head + tail if head else None
        size -= max(1, json_size(head) - budget)
    return None


def stub(name: str, body: str) -> str:
    """The one line an identity file gets when there is no room for its text."""
    size = len(body.encode("utf-8"))
    return (
        f"({name} not shown: {size} bytes, no room left in the model's context; "
        "read it with singularity_sanctum_read)"
    )


@dataclass
class _Piece:
    heading: str
    body: str


def fits_whole(woken: Wake, room: int) -> bool:
    """Whether `fit` gives the whole wake text in `room` JSON bytes: a First Breath text (a
    few lines) in any room, another when its size is within the room; then in every larger
    room too, so a room that changes but stays at least the text's size changes nothing."""
    return woken.memory is None or json_size(woken.text) <= room


def fit(woken: Wake, room: int) -> str:
    """The wake text within `room` JSON bytes (never less than its minimal form)."""
    memory = woken.memory
    if memory is None or fits_whole(woken, room):
        return woken.text
    standing = "\n".join(standing_lines(memory, woken.unfinished))
    pieces = [_Piece(f"===== {name} =====", stub(name, body)) for name, body in woken.identities]
    memory_map = _Piece("===== memory map =====", f"{MAP_CUT}\n{standing}")
    pending = None
    if memory.pending:
        head = cut_to(memory.pending, PENDING_HEAD, PENDING_CUT)
        pending = _Piece("===== pending.md =====", head or f"[{PENDING_CUT}]")
        if json_size(memory.pending) <= PENDING_HEAD:
            pending.body = memory.pending
    left = room - json_size(_render(woken.head, pieces, memory_map, pending))
    for piece, (name, body) in zip(pieces, woken.identities, strict=True):
        left = _upgrade(piece, body, left, f"cut: no more room for {name} in the model's context")
    listing = listing_lines(memory)
    kept: list[str] = []
    for line in listing:
        cost = json_size(line) + 2  # the line and its newline, escaped
        if cost > left:
            break
        kept.append(line)
        left -= cost
    whole = len(kept) == len(listing)
    memory_map.body = "\n".join([*kept, *([] if whole else [MAP_CUT]), standing])
    if pending is not None:
        _upgrade(pending, pending_text(memory), left, PENDING_CUT)
    return _render(woken.head, pieces, memory_map, pending)


def _upgrade(piece: _Piece, body: str, left: int, marker: str) -> int:
    """Put `body` (or as much as fits) in place of the piece's stub; the room left after."""
    if left <= 0:
        return left
    gain = json_size(body) - json_size(piece.body)
    if gain <= left:
        piece.body = body
        return left - gain
    shown = cut_to(body, left + json_size(piece.body), marker)
    if shown is not None:
        piece.body = shown
    return 0  # the room is used up: what follows keeps its one line


def _render(head: str, pieces: list[_Piece], memory_map: _Piece, pending: _Piece | None) -> str:
    blocks = [head, *(f"{p.heading}\n{p.body}" for p in [*pieces, memory_map])]
    if pending is not None:
        blocks.append(f"{pending.heading}\n{pending.body}")
    return "\n\n".join(blocks)
