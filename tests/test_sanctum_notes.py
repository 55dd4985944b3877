"""Runtime-written session notes: every cycle that ran leaves one, stop or crash."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
from decimal import Decimal
from pathlib import Path

from singularity.domain import events
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.sanctum.extension import SanctumCore
from singularity.sanctum.notes import CycleDigest, NoteKeeper, torn_at, with_note
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import all_events as journal
from tests.support.loop_http import boot, run
from tests.support.polling import wait_for
from tests.support.sanctum import FakeHost, being_args, fake_core, sessions_of

WRITE = "singularity_sanctum_write"
STOPPING = "stopping at the next safe point"


def test_the_keeper_follows_cycles_after_the_sanctum_was_opened() -> None:
    keeper = NoteKeeper()
    day1, day2 = "2026-10-01T00:00:0", "2026-10-02T00:00:0"
    records = [
        events.CycleStarted(day1 + "0Z", 1),
        events.SanctumInitialized(day1 + "1Z", "created", []),
        events.CycleStarted(day1 + "2Z", 2),
        events.ToolFinished(day1 + "3Z", 2, "a", "success"),
        events.ToolFinished(day1 + "3Z", 2, "a", "failed"),
        events.ModelCompleted(day1 + "4Z", 2, events.Usage(5, 2)),
        events.CostDebited(day1 + "4Z", 2, "op-1", Decimal("0.25"), Decimal(0), 7),
        events.RevenueCredited(day1 + "5Z", 2, Decimal("1.5"), "sale"),
        events.Warned(day1 + "5Z", 2, "maximum tool rounds reached"),
        events.CycleStarted(day2 + "0Z", 3),
        events.ModelCompleted(day2 + "0Z", 3, events.Usage(2, 1)),
        events.SanctumWritten(day2 + "0Z", 3, "memory/topics/x.md", 4),
        events.CycleStarted(day2 + "1Z", 4),
        events.SanctumWritten(day2 + "1Z", 4, "memory/sessions/2026-10-02-x.md", 4),
        events.CycleStarted(day2 + "2Z", 5),
        events.SessionNoteAuto(day2 + "2Z", 5, "memory/sessions/2026-10-02-cycle-5.md"),
        events.CycleStarted(day2 + "3Z", 6),
        events.Warned(day2 + "3Z", 6, "transport error: refused"),
    ]
    for record in records:
        keeper.observe(events.encode(record))
    keeper.observe({"type": "cycle_started", "at": day2 + "4Z", "cycle": "7"})  # damaged
    assert [digest.cycle for digest in keeper.due(10)] == [2, 3]  # cycle 6 had no model round
    assert 6 not in keeper.open
    assert [digest.cycle for digest in keeper.due(2)] == [2]
    digest = keeper.due(2)[0]
    assert (digest.model_calls, digest.tokens, digest.cost, digest.revenue) == (
        1,
        7,
        Decimal("0.25"),
        Decimal("1.5"),
    )
    assert with_note(None, digest, "completed") == (
        "---\nauto: true\nday: 2026-10-01\n---\n# Cycles of 2026-10-01\n\n"
        "Written by the runtime, a section for each cycle that ended without a session note.\n"
        "\n## Cycle 2 (2026-10-01T00:00:02Z, completed)\n\n"
        "- Tools used: a ×2 (failed 1)\n"
        "- Model calls: 1 (7 tokens); cost 0.25 USD; revenue 1.5 USD\n"
        "- Warnings: maximum tool rounds reached\n"
    )


def test_an_empty_cycle_note_and_a_day_of_them() -> None:
    text = with_note(None, CycleDigest(9, "2026-10-03T01:02:03Z"), "stopped")
    assert text is not None
    assert "- Tools used: none\n" in text and "- Warnings: none\n" in text
    later = with_note(text, CycleDigest(10, "2026-10-03T01:02:09Z"), "completed")
    assert later is not None and later.startswith(text)
    assert later.count("---\nauto: true") == 1 and "\n## Cycle 10 (" in later
    # A section written before a crash could journal it is not written twice.
    assert with_note(later, CycleDigest(9, "2026-10-03T01:02:03Z"), "stopped") is None


def test_a_section_an_append_left_unfinished_is_found() -> None:
    whole = with_note(None, CycleDigest(1, "2026-10-03T01:02:03Z"), "completed")
    assert whole is not None and torn_at(whole) is None
    header = whole[: whole.index("\n## Cycle 1 (") + 1]
    assert torn_at(header) is None  # a file is created whole with its first section
    two = with_note(whole, CycleDigest(2, "2026-10-03T01:02:09Z"), "completed")
    assert two is not None and torn_at(two) is None
    start = len(whole)
    assert torn_at(two[:-1]) == start  # the last line without its newline
    assert torn_at(two[: two.index("- Model calls", start)]) == start  # lines missing
    # A warning's own line breaks cannot make a section look finished or unfinished.
    digest = CycleDigest(3, "2026-10-03T01:02:10Z")
    keeper = NoteKeeper(active=True, open={3: digest})
    keeper.observe(events.encode(events.Warned("t", 3, "bad\n\n## Cycle 9 (x)\n- Warnings: ")))
    noted = with_note(two, digest, "completed")
    assert noted is not None and torn_at(noted) is None
    assert not any(line.startswith("## Cycle 9") for line in noted.splitlines())


def _lived_cycle(core: SanctumCore, host: FakeHost, cycle: int) -> None:
    host.journal(events.CycleStarted(host.now(), cycle))
    host.journal(events.ModelCompleted(host.now(), cycle, events.Usage(3, 1)))
    host.state.cycle = cycle
    core.settle(cycle, "completed")


def test_a_days_notes_are_appended_and_a_section_a_crash_cut_short_is_written_again(
    tmp_path: Path,
) -> None:
    core, host = fake_core(tmp_path)
    core.open()
    _lived_cycle(core, host, 1)
    [path] = (tmp_path / "state" / "sanctum" / "memory" / "sessions").glob("*-runtime.md")
    first = path.stat().st_ino
    _lived_cycle(core, host, 2)
    assert path.stat().st_ino == first  # appended to, not replaced
    text = path.read_text()
    assert text.count("\n## Cycle 1 (") == 1 and text.count("\n## Cycle 2 (") == 1
    assert torn_at(text) is None
    # The machine stopped between the second append and its sync: part of the section
    # reached the disk, and `session_note_auto` never did (it is journaled after the sync).
    kept = text[: text.index("\n## Cycle 2 (") + 1]
    path.write_text(text[: text.index("- Model calls", len(kept))])
    core.close()
    past = [
        event
        for event in host.events
        if not (event["type"] == "session_note_auto" and event["cycle"] == 2)
    ]
    reborn = SanctumCore(FakeHost(host.state), core.config, past)
    asyncio.run(reborn.at_boot())
    reborn.close()
    again = path.read_text()
    assert again.startswith(kept) and torn_at(again) is None
    assert again.count("\n## Cycle 2 (") == 1
    assert ", interrupted (the process ended))" in again[len(kept) :].splitlines()[0]


def test_an_append_never_writes_through_a_link_the_operator_made(tmp_path: Path) -> None:
    core, host = fake_core(tmp_path)
    core.open()
    _lived_cycle(core, host, 1)
    [path] = (tmp_path / "state" / "sanctum" / "memory" / "sessions").glob("*-runtime.md")
    elsewhere = tmp_path / "elsewhere.md"
    os.link(path, elsewhere)  # a second name for it: refused (the sanctum's rule)
    _lived_cycle(core, host, 2)
    assert "## Cycle 2 " not in elsewhere.read_text()
    os.unlink(elsewhere)
    target = path.with_name("moved.md")
    path.rename(target)
    path.symlink_to(target.name)  # a symlink: refused, as a replace refuses it
    _lived_cycle(core, host, 3)
    core.close()
    assert path.is_symlink() and "## Cycle 3 " not in target.read_text()
    assert [event["type"] for event in host.events].count("session_note_auto") == 1


def test_a_cycle_without_a_note_gets_one_and_a_noted_cycle_does_not(tmp_path: Path) -> None:
    script = [
        Turn.tool_call("singularity_self_add_rule", {"rule": "be brief"}),
        Turn.text("cycle one done"),
        Turn.tool_call(
            WRITE, {"path": "memory/sessions/2026-10-07-two.md", "content": "Cycle two: wrote."}
        ),
        Turn.text("cycle two done"),
    ]

    async def live() -> None:
        async with ScriptedServer(script) as server:
            runtime = boot(tmp_path, server, agent_name="Sage", input_price="1")
            try:
                await runtime.once()
                await runtime.once()
            finally:
                await runtime.shutdown()

    run(live())
    notes = sessions_of(tmp_path)
    (auto,) = [name for name in notes if name.endswith("-runtime.md")]
    assert set(notes) == {auto, "2026-10-07-two.md"}
    assert notes[auto].startswith("---\nauto: true\nday: ")
    assert "\n## Cycle 1 (" in notes[auto] and "## Cycle 2 " not in notes[auto]
    assert "- Tools used: singularity_self_add_rule ×1\n" in notes[auto]
    assert "- Model calls: 2 (" in notes[auto] and ", completed)" in notes[auto]
    kinds = [event["type"] for event in journal(tmp_path)]
    assert kinds.count("session_note_auto") == 1
    assert verify_state_dir(str(tmp_path / "being")) == []


def _cycles_and_notes(root: Path) -> tuple[list[int], list[int]]:
    journaled = journal(root)
    started = [event["cycle"] for event in journaled if event["type"] == "cycle_started"]
    noted = [
        event["cycle"]
        for event in journaled
        if event["type"] == "session_note_auto"
        or (event["type"] == "sanctum_written" and event["path"].startswith("memory/sessions/"))
    ]
    return started, noted


def test_sigterm_in_the_middle_of_a_cycle_leaves_a_note_for_every_cycle(tmp_path: Path) -> None:
    # The third call is answered only once the being has taken the signal: the stop lands
    # in the middle of cycle two however slowly the signal is handled (decision 9: it takes
    # effect at the next safe point, after the call in flight).
    in_flight = threading.Event()
    script = [
        Turn.tool_call(WRITE, {"path": "memory/topics/plan.md", "content": "# Plan\n"}),
        Turn.text("first cycle done"),
        Turn.tool_call("singularity_self_add_rule", {"rule": "hold on"}).held(in_flight),
    ]
    stderr = tmp_path / "stderr.log"
    with ScriptedServer(script) as server, stderr.open("wb") as err_file:
        process = subprocess.Popen(
            [str(SINGULARITY), "run", *being_args(tmp_path, server.url)],
            env=clean_environment(),
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
        try:
            wait_for(lambda: len(server.completions) >= 3, "the held turn")
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: STOPPING in stderr.read_text(), "the being to take the signal")
            in_flight.set()
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    err = stderr.read_text()
    assert process.returncode == 0, err
    started, noted = _cycles_and_notes(tmp_path)
    assert started == [1, 2] and noted == [1, 2]
    note = sessions_of(tmp_path)
    [day] = [text for name, text in note.items() if name.endswith("-runtime.md")]
    cycle_two = day[day.index("\n## Cycle 2 (") :]
    assert ", cancelled)" in cycle_two.splitlines()[1]
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_sigkill_then_resume_notes_the_cycle_the_kill_cut(tmp_path: Path) -> None:
    script = [
        Turn.text("first cycle done"),
        Turn.tool_call("singularity_self_add_rule", {"rule": "remember"}),
        Turn.text("never answered").held(threading.Event()),
    ]
    with ScriptedServer(script) as server:
        process = subprocess.Popen(
            [str(SINGULARITY), "run", *being_args(tmp_path, server.url)],
            env=clean_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: len(server.completions) >= 3, "the delayed turn")
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert _cycles_and_notes(tmp_path) == ([1, 2], [1])
    with ScriptedServer([Turn.text("awake again")]) as server:
        result = subprocess.run(
            [str(SINGULARITY), "once", *being_args(tmp_path, server.url, "--resume")],
            env=clean_environment(),
            capture_output=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["cycle"] == 3
    assert _cycles_and_notes(tmp_path) == ([1, 2, 3], [1, 2, 3])
    [day] = [text for name, text in sessions_of(tmp_path).items() if name.endswith("-runtime.md")]
    killed = day[day.index("\n## Cycle 2 (") : day.index("\n## Cycle 3 (")]
    assert ", interrupted (the process ended))" in killed
    assert "- Tools used: singularity_self_add_rule ×1\n" in killed
    assert verify_state_dir(str(tmp_path / "being")) == []
