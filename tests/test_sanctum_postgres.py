"""The sanctum of a being in PostgreSQL: versioned rows behind the sanctum seam.

Against the session's real PostgreSQL server: a being's sanctum is born and written as
rows (every write a new version, recorded with the lease epoch that wrote it), reads give
the latest version, the sanctum tools and the wake see the same sanctum as in a folder
(the same files, byte for byte, after the same writes), a being that kept its sanctum in
its state directory has it copied in once, and a runtime whose lease was taken over
cannot write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from singularity.domain.records import MemoryEntry
from singularity.sanctum import tools, writing
from singularity.sanctum.entries import export_folder
from singularity.sanctum.extension import open_folder
from singularity.sanctum.layout import Seed, initialize
from singularity.sanctum.names import IO, NOT_FOUND, SanctumRefusal
from singularity.sanctum.seam import Sanctum
from singularity.sanctum.wake import wake
from singularity.store.postgres.sanctum import peek_sanctum
from singularity.store.postgres.sanctum_rows import PostgresSanctum, held_sanctum
from singularity.store.postgres.store import PostgresStore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.files import tree
from tests.support.loop_http import Result
from tests.support.sanctum import being_args
from tests.support.stores import AT, a_being, agent_rows, new_place, once_free, store_url

PERSONA = ("PERSONA.md",)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[PostgresStore, PostgresSanctum]]:
    """A new being in the store, its lease held, and its (empty) sanctum."""
    store = PostgresStore.open(store_url(), new_place("postgresql", tmp_path))
    store.load()
    state = a_being(store.agent_id)
    store.commit(state, [])
    sanctum = held_sanctum(store, str(tmp_path / "no-folder"))
    try:
        yield store, sanctum
    finally:
        sanctum.close()
        store.close()


def versions(agent: str) -> list[tuple[str, int, bytes | None, int | None]]:
    with psycopg.connect(store_url(), autocommit=True) as db:
        found = db.execute(
            "SELECT path, version, content, epoch FROM singularity.sanctum_files "
            "WHERE agent_id = %s ORDER BY path, version",
            (agent,),
        ).fetchall()
    return [(path, v, bytes(c) if c is not None else None, e) for path, v, c, e in found]


THROUGH_A_FILE: list[Callable[[Sanctum], object]] = [
    lambda each: each.replace(("memory", "a.md", "b.md"), b"b"),
    lambda each: each.read_bytes(("memory", "a.md", "b.md")),
    lambda each: each.entries(("memory", "a.md")),
    lambda each: each.replace(("memory",), b"over a folder"),
    lambda each: each.remove(("memory",)),
    lambda each: each.read_bytes(("memory", "nothing.md")),
]


def context_of(sanctum: Sanctum) -> tools.Context:
    """A tool context over `sanctum`, whose today is a fixed day."""
    return tools.Context(sanctum, lambda: "2026-10-07", lambda bodies: wake(sanctum, "<s>"))


def live_a_little(sanctum: Sanctum) -> None:
    """Birth, then the writes of a few tool calls."""
    initialize(sanctum, Seed(a_being().identity, "2026-10-07"))
    context = context_of(sanctum)
    calls = [
        (writing.write_tool, {"path": "memory/topics/pricing.md", "content": "# Pricing\n\n42\n"}),
        (writing.history_tool, {"path": "memory/topics/pricing.md", "line": "went up"}),
        (writing.write_tool, {"path": "memory/people/ann.md", "content": "# Ann\n"}),
        (
            writing.merge_tool,
            {
                "keep": "memory/topics/pricing.md",
                "drop": "memory/people/ann.md",
                "content": "# Pricing and Ann\n",
            },
        ),
        (writing.intake_tool, {"area": "call", "descriptor": "ann", "content": "said hi"}),
        (writing.pending_tool, {"action": "add", "line": "ask Ann"}),
        (writing.tended_tool, {}),
    ]
    for tool, arguments in calls:
        done = tool(context, arguments)
        assert done.outcome.error_code is None, done.outcome.content


def test_every_write_is_a_new_version_under_the_lease(
    held: tuple[PostgresStore, PostgresSanctum],
) -> None:
    store, sanctum = held
    birth = initialize(sanctum, Seed(a_being().identity, "2026-10-07"))
    assert birth.outcome == "created"
    first = versions(store.agent_id)
    assert {path for path, *_ in first} >= {"PERSONA.md", "memory/", "memory/sessions/", "raw/"}
    assert all(version == 1 and epoch == store.lease.epoch for _, version, _, epoch in first)

    sanctum.replace(PERSONA, b"# Persona\n\nsecond\n")
    sanctum.replace(PERSONA, b"# Persona\n\nthird\n")
    persona = [row for row in versions(store.agent_id) if row[0] == "PERSONA.md"]
    assert [version for _, version, _, _ in persona] == [1, 2, 3]
    assert persona[-1][2] == b"# Persona\n\nthird\n"
    assert sanctum.read_text(PERSONA) == "# Persona\n\nthird\n"
    # An append is a new version holding the bytes it adds, written with the being's next
    # step; the file read back is its last whole version and the appends after it.
    sanctum.append(PERSONA, b"and more\n")
    assert sanctum.read_text(PERSONA) == "# Persona\n\nthird\nand more\n"
    assert len([row for row in versions(store.agent_id) if row[0] == "PERSONA.md"]) == 3
    store.commit(a_being(store.agent_id), [])
    sanctum.append(PERSONA, b"and the end\n")
    store.commit(a_being(store.agent_id), [])
    persona = [row for row in versions(store.agent_id) if row[0] == "PERSONA.md"]
    assert [version for _, version, _, _ in persona] == [1, 2, 3, 4, 5]
    assert [content for _, _, content, _ in persona[-2:]] == [b"and more\n", b"and the end\n"]
    whole = "# Persona\n\nthird\nand more\nand the end\n"
    assert sanctum.read_text(PERSONA) == whole
    assert (
        dict((entry.path, entry.content) for entry in peek_sanctum(store_url(), store.agent_id))[
            "PERSONA.md"
        ]
        == whole.encode()
    )
    reopened = PostgresSanctum.peek(store_url(), store.agent_id)
    try:
        assert reopened.read_text(PERSONA) == whole
        assert reopened.stamp(PERSONA) == sanctum.stamp(PERSONA) == ("file", 5)
    finally:
        reopened.close()
    with pytest.raises(SanctumRefusal) as not_there:
        sanctum.append(("memory", "nothing.md"), b"x")
    assert not_there.value.code == NOT_FOUND
    sanctum.replace(PERSONA, b"# Persona\n\nthird\n")

    sanctum.replace(("memory", "topics", "x.md"), b"x")  # its folder made with it
    sanctum.remove(("memory", "topics", "x.md"))
    rows = {(path, version): content for path, version, content, _ in versions(store.agent_id)}
    assert rows[("memory/topics/", 1)] == b""
    assert rows[("memory/topics/x.md", 1)] == b"x" and rows[("memory/topics/x.md", 2)] is None
    with pytest.raises(SanctumRefusal) as missing:
        sanctum.read_bytes(("memory", "topics", "x.md"))
    assert missing.value.code == NOT_FOUND

    again = PostgresSanctum.peek(store_url(), store.agent_id)  # read back: the latest versions
    try:
        assert again.read_text(PERSONA) == "# Persona\n\nthird\n"
        assert again.entries(("memory", "topics")) == []
        with pytest.raises(SanctumRefusal, match="opened to read"):
            again.replace(PERSONA, b"no")
    finally:
        again.close()


def test_rows_and_folder_hold_the_same_sanctum_after_the_same_life(
    held: tuple[PostgresStore, PostgresSanctum], tmp_path: Path
) -> None:
    store, sanctum = held
    folder = open_folder(str(tmp_path / "folder"))
    try:
        live_a_little(folder)
        live_a_little(sanctum)
        for each in (folder, sanctum):
            assert each.read_optional(("memory", "people", "ann.md")) is None
        lines = [wake(each, "<s>", bodies=True).text for each in (folder, sanctum)]
        assert lines[0] == lines[1]
        listed = [tools.list_tool(context_of(each), {}).outcome for each in (folder, sanctum)]
        assert listed[0].content == listed[1].content
        hits = [
            tools.grep_tool(context_of(each), {"query": "ann"}).outcome.content
            for each in (folder, sanctum)
        ]
        assert hits[0] == hits[1] and hits[0]["hits"]
    finally:
        folder.close()
    out = tmp_path / "exported"
    export_folder(peek_sanctum(store_url(), store.agent_id), str(out))
    assert tree(out) == tree(tmp_path / "folder")


def test_a_path_through_a_file_is_refused_as_in_a_folder(
    held: tuple[PostgresStore, PostgresSanctum], tmp_path: Path
) -> None:
    _, sanctum = held
    folder = open_folder(str(tmp_path / "folder"))
    try:
        for each in (folder, sanctum):
            each.replace(("memory", "a.md"), b"a")
            refused = []
            for attempt in THROUGH_A_FILE:
                with pytest.raises(SanctumRefusal) as refusal:
                    attempt(each)
                refused.append(refusal.value.code)
            assert refused == [IO, IO, IO, IO, IO, NOT_FOUND]
            assert each.create(("memory", "a.md"), b"again") is False
            assert each.read_bytes(("memory", "a.md")) == b"a"
    finally:
        folder.close()


def test_a_sanctum_folder_is_copied_in_when_the_rows_hold_none(tmp_path: Path) -> None:
    local = open_folder(str(tmp_path / "sanctum"))
    live_a_little(local)
    local.close()
    store = PostgresStore.open(store_url(), new_place("postgresql", tmp_path))
    try:
        store.load()
        store.commit(a_being(store.agent_id), [])
        sanctum = held_sanctum(store, str(tmp_path / "sanctum"))
        try:
            assert not sanctum.is_empty
        finally:
            sanctum.close()
        out = tmp_path / "out"
        export_folder(peek_sanctum(store_url(), store.agent_id), str(out))
        assert tree(out) == tree(tmp_path / "sanctum")
        (tmp_path / "sanctum" / "PERSONA.md").write_text("changed in the folder\n")
        again = held_sanctum(store, str(tmp_path / "sanctum"))  # the rows hold it now
        try:
            assert again.read_text(PERSONA) != "changed in the folder\n"
        finally:
            again.close()
    finally:
        store.close()


def test_a_runtime_whose_lease_was_taken_over_cannot_write_its_sanctum(tmp_path: Path) -> None:
    url, place = store_url(), new_place("postgresql", tmp_path)
    first = PostgresStore.open(url, place, lease_secs=0.2)
    first.load()
    first.commit(a_being(place), [])
    sanctum = held_sanctum(first, str(tmp_path / "none"))
    sanctum.replace(PERSONA, b"mine\n")
    first.renewer.stop()  # as frozen: no renewal from here on
    second = _take_over(url, place)
    try:
        for _ in range(2):  # refused, and it stays refused
            with pytest.raises(SanctumRefusal, match="taken over") as refusal:
                sanctum.replace(PERSONA, b"written after the takeover\n")
            assert refusal.value.code == IO
        assert sanctum.read_text(PERSONA) == "mine\n"
        assert [row[1:] for row in versions(place) if row[0] == "PERSONA.md"] == [
            (1, b"mine\n", first.lease.epoch)
        ]
        theirs = held_sanctum(second, str(tmp_path / "none"))
        try:
            theirs.replace(PERSONA, b"theirs\n")
            assert theirs.read_text(PERSONA) == "theirs\n"
        finally:
            theirs.close()
        assert versions(place)[-1][1:] == (2, b"theirs\n", second.lease.epoch)
    finally:
        sanctum.close()
        first.db.close()
        second.close()


def _take_over(url: str, place: str) -> PostgresStore:
    return once_free(lambda: PostgresStore.open(url, place, lease_secs=30), place, interval=0.05)


def test_a_being_living_in_postgresql_keeps_its_sanctum_in_rows(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_place("postgresql", tmp_path)
    store = ["--state-url", store_url(), "--agent-id", agent]
    for number, flags in ((1, ()), (2, ("--resume",))):
        script = [
            Turn.tool_call(
                "singularity_sanctum_write",
                {"path": "memory/topics/pricing.md", "content": f"# Pricing\n\n{number}\n"},
            ),
            Turn.text("done"),
        ]
        with ScriptedServer(script) as server:
            lived = cli("once", *flags, *being_args(tmp_path, server.url), *store)
        assert lived.code == 0, lived.err
    assert not (tmp_path / "being" / "sanctum").exists()
    rows = versions(agent)
    pricing = [row for row in rows if row[0] == "memory/topics/pricing.md"]
    assert [(version, content) for _, version, content, _ in pricing] == [
        (1, b"# Pricing\n\n1\n"),
        (2, b"# Pricing\n\n2\n"),
    ]
    assert pricing[0][3] is not None and pricing[1][3] == pricing[0][3] + 1  # two leases
    notes = [path for path, *_ in rows if path.startswith("memory/sessions/2")]
    assert notes, "the runtime's session notes are rows too"
    # Each note, the day's first (which makes its file) too, rides with the step that
    # journals its `session_note_auto`: one transaction, one commit, for both.
    with psycopg.connect(store_url(), autocommit=True) as db:
        written = db.execute(
            "SELECT xmin::text FROM singularity.sanctum_files WHERE agent_id = %s "
            "AND path LIKE 'memory/sessions/%%-runtime.md' ORDER BY version",
            (agent,),
        ).fetchall()
        journaled = db.execute(
            "SELECT xmin::text FROM singularity.activity WHERE agent_id = %s "
            "AND type = 'session_note_auto' ORDER BY seq",
            (agent,),
        ).fetchall()
    assert len(written) == len(journaled) == 2
    assert written == journaled

    out = tmp_path / "out"
    exported = cli("sanctum", "export", *store, "--to", str(out))
    assert exported.code == 0, exported.err
    assert (out / "memory" / "topics" / "pricing.md").read_bytes() == b"# Pricing\n\n2\n"
    assert (out / "PERSONA.md").read_text().startswith("# Persona")

    shown = cli("sanctum", "show", "memory/topics/pricing.md", *store)
    assert shown.code == 0 and shown.out == "# Pricing\n\n2\n", shown.err
    listed = cli("sanctum", "ls", "memory/topics", *store)
    assert listed.code == 0 and listed.out.splitlines() == ["pricing.md (13 bytes)"], listed.err
    found = cli("sanctum", "grep", "pricing", *store)
    assert found.code == 0 and "memory/topics/pricing.md:1: # Pricing" in found.out, found.err
    woken = cli("sanctum", "wake", *store)
    assert woken.code == 0 and f"Sanctum: being {agent} in postgresql://" in woken.out
    assert cli("sanctum", "map", *store).out.startswith("memory/")
    due = cli("sanctum", "tend", *store)
    assert due.code == 0 and due.out.splitlines()[-1] == "tending due", due.err
    summary = json.loads(cli("show", "--json", *store).out)["sanctum"]
    assert summary["born"] is True and summary["session_notes"] == 1

    held = PostgresStore.open(store_url(), agent)  # as a running being would
    try:
        refused = cli("sanctum", "tend", "--stamp", *store)
        assert refused.code == 4 and "another runtime owns" in refused.err
    finally:
        held.close()
    stamped = cli("sanctum", "tend", "--stamp", *store)
    assert stamped.code == 0, stamped.err
    assert json.loads(stamped.out)["session_notes_since"] == 0
    tended = [row for row in versions(agent) if row[0] == "memory/.tended"]
    assert [(version, epoch) for _, version, _, epoch in tended] == [(1, held.lease.epoch + 1)]
    assert cli("sanctum", "tend", *store).out.splitlines()[-1] == "nothing to tend"
    nobody = cli("sanctum", "ls", "--state-url", store_url(), "--agent-id", "agent-nobody")
    assert nobody.code == 4 and "no being agent-nobody in postgresql://" in nobody.err


def test_init_and_import_memories_on_a_being_in_postgresql(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = new_place("postgresql", tmp_path)
    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(tmp_path / "b")]
    being = PostgresStore.open(store_url(), agent)  # a being with memories, no sanctum rows
    try:
        being.load()
        state = a_being(agent)
        state.mind.remember(
            MemoryEntry(id="m-1", kind="fact", text="the operator likes tea", created_at=AT)
        )
        being.commit(state, [])
    finally:
        being.close()
    not_yet = cli("sanctum", "import-memories", *at)
    assert not_yet.code == 4 and "has no sanctum yet" in not_yet.err, not_yet.err
    assert versions(agent) == []

    made = cli("sanctum", "init", *at)
    assert made.code == 0, made.err
    assert made.out.strip() == f"created the sanctum at being {agent} in {store_url()}"
    assert not (tmp_path / "b" / "sanctum").exists()  # rows, not a folder
    persona = [row for row in versions(agent) if row[0] == "PERSONA.md"]
    assert len(persona) == 1 and persona[0][2] is not None and b"# Persona" in persona[0][2]
    assert cli("sanctum", "init", *at).out.startswith("already born: being ")
    by_variable = cli("sanctum", "init", "--agent-id", agent, SINGULARITY_STATE_URL=store_url())
    assert by_variable.code == 0 and by_variable.out.startswith("already born: being ")

    imported = cli("sanctum", "import-memories", *at)
    assert imported.code == 0, imported.err
    [path] = json.loads(imported.out)["written"]
    raw = cli("sanctum", "show", path, *at)
    assert raw.code == 0 and "[fact] the operator likes tea" in raw.out, raw.err
    assert raw.out.startswith("---\nstatus: raw\n")
    again = cli("sanctum", "import-memories", *at)
    assert again.code == 4 and "written once" in again.err

    held = PostgresStore.open(store_url(), agent)  # as a running being would
    try:
        for command in ("init", "import-memories"):
            refused = cli("sanctum", command, *at)
            assert refused.code == 4 and "another runtime owns" in refused.err, command
    finally:
        held.close()
    ghost = new_place("postgresql", tmp_path)
    for command in ("init", "import-memories"):
        unknown = cli("sanctum", command, "--state-url", store_url(), "--agent-id", ghost)
        assert unknown.code == 4 and f"being {ghost} in postgresql://" in unknown.err, command
        assert "no being" in unknown.err, command
    assert set(agent_rows(ghost).values()) == {0}
