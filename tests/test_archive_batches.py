"""A full window's archive lines, held by the directory store and written in batches.

The store counts the bytes of the lines it holds without building them
(`conversation_archive.lines_size`); a batch is written once they make
`archive_batch` bytes, across the numbers whose lines grow by a digit.
"""

from __future__ import annotations

from pathlib import Path

from singularity.jsoncodec import compact_utf8
from singularity.storage import conversation_archive
from singularity.store.directory import DirectoryStore
from tests.support.stores import AT, a_being, archive_overflow


def test_the_size_of_lines_is_that_of_the_lines_built() -> None:
    messages = [compact_utf8({"role": "user", "content": "é" * n}) for n in range(7)]
    for first in (0, 3, 8, 9, 10, 95, 99, 100, 998, 9999, 123456):
        built = conversation_archive.encoded_lines(first, messages)
        assert conversation_archive.lines_size(first, messages) == len(built)
        for offset, message in enumerate(messages):  # one message: a full window's step
            line = conversation_archive.encoded_lines(first + offset, [message])
            assert conversation_archive.lines_size(first + offset, [message]) == len(line)


def test_batches_are_written_when_the_held_lines_reach_the_batch(tmp_path: Path) -> None:
    batch = 700
    store = DirectoryStore.open(str(tmp_path / "being"), archive_batch=batch)
    state = a_being()
    store.load()
    store.commit(state, [{"type": "started", "at": AT}])
    path = tmp_path / "being" / conversation_archive.ARCHIVE_FILE
    archived: list[bytes] = []
    written = 0
    try:
        for index in range(130):  # numbers of one, two and three digits
            state.conversation.append({"role": "user", "content": "m" * (index % 23)})
            moved = [compact_utf8(message) for message in state.conversation[:-3]]
            archive_overflow(state, 3)
            store.commit(state, [])
            archived += moved
            lines = conversation_archive.encoded_lines(0, archived)
            if len(lines) - written >= batch:
                written = len(lines)
            assert (path.read_bytes() if path.exists() else b"") == lines[:written]
            assert store.archived() == conversation_archive.parse_lines(lines)
        assert written and len(archived) == state.mind.conversation_archived == 127
    finally:
        store.close()
