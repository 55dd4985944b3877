"""The wake text (spec part A.6 with the caps of C.4): who the being is and a map of memory.

Mode line; the five identity files whole (and PULSE.md in a pulse); then the memory
map: folder counts, the 8 newest dated files, undistilled raw files, the tended line,
identity files still holding First Breath placeholders, and `pending.md`. A memory
file's body is never printed, so waking costs the same however much the being knows.
"""

from __future__ import annotations

import bisect
import codecs
import heapq
from dataclasses import dataclass

from singularity.sanctum.layout import placeholders
from singularity.sanctum.names import (
    IDENTITY_FILES,
    MEMORY,
    PENDING,
    PULSE_FILE,
    RAW,
    SESSIONS_PREFIX,
    TENDED,
    SanctumRefusal,
    real_date,
)
from singularity.sanctum.scan import NEWEST, Dated, FolderScan, MapCache
from singularity.sanctum.seam import Sanctum

IDENTITY_CAP = 16 * 1024
MAP_CAP = 8 * 1024
PENDING_CAP = 8 * 1024
SECTION_CAP = 64 * 1024
EMPTY_LINE = "(empty: nothing remembered yet)"
MAP_CUT = "[cut: the map is over 8 KiB; use singularity_sanctum_list]"
ELIDED = "(in the Sanctum section of your system message)"
FIRST_BREATH_DIRECTIVE = (
    "This is your First Breath. The runtime seeds the missing identity files when the "
    "being starts (or run `singularity sanctum init`); then fill their {…} placeholders "
    "from your identity and what you decide."
)


@dataclass(frozen=True)
class MemoryMap:
    """What the map shows; never a memory file's body (pending.md aside)."""

    folders: tuple[tuple[str, int], ...]
    newest: tuple[str, ...]
    undistilled: tuple[str, ...]
    session_notes: int
    tended: str | None
    since: int
    pending: str

    @property
    def tending_due(self) -> bool:
        """Whether the map shows session notes since the last tending."""
        return self.since > 0

    def tending_line(self) -> str:
        """`Never tended; session notes: N` or `Tended: <date>; session notes since: N`."""
        if self.tended is None:
            return f"Never tended; session notes: {self.session_notes}"
        return f"Tended: {self.tended}; session notes since: {self.since}"

    def counts(self) -> dict[str, object]:
        """The map's numbers (for the tended tool and its journal event)."""
        return {
            "folders": {path: count for path, count in self.folders},
            "session_notes": self.session_notes,
            "session_notes_since": self.since,
            "undistilled_raw": len(self.undistilled),
        }


@dataclass(frozen=True)
class Wake:
    """A wake: its mode, its text, and (once born) its map and unfinished identity files."""

    mode: str
    text: str
    memory: MemoryMap | None = None
    unfinished: tuple[tuple[str, int], ...] = ()
    head: str = ""
    """The mode and sanctum lines."""
    identities: tuple[tuple[str, str], ...] = ()
    """Each identity file shown, in wake order, with its body as shown (cut to its cap)."""


def cut(text: str, cap: int, marker: str) -> str:
    """`text` if it fits `cap` UTF-8 bytes, else its head and a line with `marker`."""
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    return data[:cap].decode("utf-8", "ignore").rstrip() + f"\n[{marker}]"


def scan_map(store: Sanctum, cache: MapCache | None = None) -> MemoryMap:
    """Walk `memory/` and `raw/`: counts, newest dated files, raw status, tending."""
    folders: list[tuple[str, int]] = []
    dated: list[Dated] = []
    undistilled: list[str] = []
    sessions: FolderScan | None = None
    for top in (MEMORY, RAW):
        for scan in store.scan_tree(top, cache):
            if scan.files or scan.path != f"{top}/":
                folders.append((scan.path, scan.files))
            dated += scan.newest
            undistilled += scan.undistilled
            if scan.path == SESSIONS_PREFIX:
                sessions = scan
    newest = tuple(
        path
        for _, _, _, path in heapq.nlargest(
            NEWEST, [d for d in dated if d[3].startswith("memory/")]
        )
    )
    tended = _stamp(store)
    notes = sessions.files if sessions is not None else 0
    since = notes
    if tended is not None:
        dates = sessions.dates if sessions is not None else ()
        since = len(dates) - bisect.bisect_right(dates, tended)
    if not any(count for _, count in folders):
        folders = []
    pending = (store.read_optional((MEMORY, PENDING)) or "").strip()
    return MemoryMap(tuple(folders), newest, tuple(undistilled), notes, tended, since, pending)


def _stamp(store: Sanctum) -> str | None:
    try:
        text = store.read_optional((MEMORY, TENDED), 256)
    except SanctumRefusal:
        return None
    day = (text or "").strip()[:10]
    return day if real_date(day) else None


def map_lines(memory: MemoryMap, unfinished: tuple[tuple[str, int], ...]) -> list[str]:
    """The lines under `===== memory map =====`."""
    return listing_lines(memory) + standing_lines(memory, unfinished)


def listing_lines(memory: MemoryMap) -> list[str]:
    """The map's lists: folders, newest dated files, undistilled raw files."""
    lines = [f"{path} ({count} files)" for path, count in memory.folders] or [EMPTY_LINE]
    if memory.newest:
        lines += ["Newest:", *memory.newest]
    if memory.undistilled:
        lines += [f"Undistilled raw ({len(memory.undistilled)}):", *memory.undistilled]
    return lines


def standing_lines(memory: MemoryMap, unfinished: tuple[tuple[str, int], ...]) -> list[str]:
    """The lines the being acts on: the tending line, and First Breath when unfinished."""
    lines = [memory.tending_line()]
    if unfinished:
        listed = ", ".join(f"{name} ({count})" for name, count in unfinished)
        lines.append(f"First Breath unfinished: placeholders in {listed}")
    return lines


def pending_text(memory: MemoryMap) -> str:
    """`pending.md` as the wake shows it (within 8 KiB)."""
    return cut(memory.pending, PENDING_CAP, "cut: pending.md is over 8 KiB; raise and clear it")


def map_text(memory: MemoryMap, unfinished: tuple[tuple[str, int], ...]) -> str:
    """The map within 8 KiB: the lists are cut at a whole line, the standing lines never."""
    listing, standing = listing_lines(memory), standing_lines(memory, unfinished)
    whole = "\n".join(listing + standing)
    if len(whole.encode("utf-8")) <= MAP_CAP:
        return whole
    tail = "\n".join([MAP_CUT, *standing])
    room = MAP_CAP - len(tail.encode("utf-8")) - 1
    kept: list[str] = []
    for line in listing:
        room -= len(line.encode("utf-8")) + 1
        if room < 0:
            break
        kept.append(line)
    return "\n".join([*kept, tail])


def wake(
    store: Sanctum | None,
    label: str,
    *,
    pulse: bool = False,
    bodies: bool = True,
    cache: MapCache | None = None,
) -> Wake:
    """The wake text (`store` None: no sanctum); `bodies=False` elides identity text."""
    missing = (
        list(IDENTITY_FILES)
        if store is None
        else [name for name in IDENTITY_FILES if not store.exists((name,))]
    )
    if store is None or missing:
        head = (
            f"NO SANCTUM at {label}"
            if len(missing) == len(IDENTITY_FILES)
            else f"INCOMPLETE SANCTUM at {label}: missing {', '.join(missing)}"
        )
        return Wake("FIRST_BREATH", "\n".join(["MODE: FIRST_BREATH", head, FIRST_BREATH_DIRECTIVE]))
    mode = "PULSE" if pulse else "WAKING"
    blocks = [f"MODE: {mode}\nSanctum: {label}"]
    unfinished: list[tuple[str, int]] = []
    identities: list[tuple[str, str]] = []
    shown = [*IDENTITY_FILES, *([PULSE_FILE] if pulse and store.exists((PULSE_FILE,)) else [])]
    for name in shown:
        body = identity_body(store, name)
        left = placeholders(body)
        if left and name != PULSE_FILE:
            unfinished.append((name, left))
        shown_body = body if bodies else ELIDED
        identities.append((name, shown_body))
        blocks.append(f"===== {name} =====\n{shown_body}")
    memory = scan_map(store, cache)
    blocks.append(f"===== memory map =====\n{map_text(memory, tuple(unfinished))}")
    if memory.pending:
        blocks.append(f"===== {PENDING} =====\n{pending_text(memory)}")
    text = cut(
        "\n\n".join(blocks),
        SECTION_CAP,
        "cut: the sanctum section is over 64 KiB; shorten the largest identity files",
    )
    return Wake(mode, text, memory, tuple(unfinished), blocks[0], tuple(identities))


def identity_body(store: Sanctum, name: str) -> str:
    """An identity file's text as the wake shows it: whole, or cut at 16 KiB with a marker.

    A hand-edited file is never dropped: bytes that are not UTF-8 show as U+FFFD (with a
    line saying so), and a file of any size is read only up to its bound.
    """
    try:
        data, size = store.read_head((name,), IDENTITY_CAP + 1)
    except SanctumRefusal as refusal:
        return f"(unreadable: {refusal.message})"
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=size <= len(data))
    if text.count("\ufffd") > data.decode("utf-8", "ignore").count("\ufffd"):
        text = f"[{name} holds bytes that are not UTF-8, shown as \ufffd; rewrite it]\n" + text
    if size <= IDENTITY_CAP:
        return text.rstrip()
    marker = f"cut: {name} is over 16 KiB; split it: keep what is true now, move the rest"
    head = text.encode("utf-8")[:IDENTITY_CAP].decode("utf-8", "ignore").rstrip()
    return f"{head}\n[{marker} to memory files]"
